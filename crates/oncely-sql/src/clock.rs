//! The host's wall clock in the unit the tables store: milliseconds since the Unix epoch.
//!
//! Statements that stamp rows with the *database's* clock use [`crate::Dialect::now_ms_sql`]
//! instead; this is for values computed on the host (cutoffs, journal and outbox times).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now (0 if the clock is before 1970).
///
/// ```
/// assert!(oncely_sql::clock::now_ms() > 1_600_000_000_000);
/// ```
pub fn now_ms() -> i64 {
    to_ms(SystemTime::now())
}

/// Milliseconds since the Unix epoch of `t` (0 before 1970).
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// assert_eq!(oncely_sql::clock::to_ms(UNIX_EPOCH + Duration::from_millis(1500)), 1500);
/// ```
pub fn to_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The time `ms` milliseconds after the Unix epoch (negative values clamp to the epoch).
///
/// ```
/// use std::time::UNIX_EPOCH;
/// assert_eq!(oncely_sql::clock::from_ms(-5), UNIX_EPOCH);
/// assert_eq!(oncely_sql::clock::to_ms(oncely_sql::clock::from_ms(42)), 42);
/// ```
pub fn from_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}
