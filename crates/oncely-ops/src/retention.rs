//! The retention window and the late-message policy, as configuration.
//!
//! The window has two uses that must agree: the pruner deletes ids older than it, and the
//! consumer treats a message whose *source time* is older than it as a late duplicate risk
//! (its id may have been pruned, so the inbox can no longer recognise it). [`Retention`]
//! holds both and configures a [`Consumer`] with [`Retention::apply`].

use oncely_core::{Consumer, Error, Handler, LatePolicy, Result, Store};
use std::time::Duration;
use tracing::warn;

/// Default retention window: 7 days (the consumers' default late window, one constant).
pub const DEFAULT_WINDOW: Duration = oncely_core::DEFAULT_RETENTION;

/// Retention settings shared by the pruner and the consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Ids are kept at least this long.
    pub window: Duration,
    /// What consumers do with messages older than the window.
    pub late: LatePolicy,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            window: DEFAULT_WINDOW,
            late: LatePolicy::Quarantine,
        }
    }
}

impl Retention {
    /// Configures `consumer` to treat messages older than the window by the late policy.
    pub fn apply<S: Store, H: Handler<S::Tx>>(&self, consumer: Consumer<S, H>) -> Consumer<S, H> {
        consumer.late_after(self.window, self.late)
    }

    /// Warns (and returns false) when the window is shorter than how long the broker may
    /// still redeliver a message (e.g. a queue's message TTL or a stream's max age), since a
    /// redelivery after the id was pruned would be applied twice.
    pub fn check_redelivery_window(&self, broker_redelivers_for: Option<Duration>) -> bool {
        match broker_redelivers_for {
            Some(broker) if broker > self.window => {
                warn!(
                    retention_secs = self.window.as_secs(),
                    broker_secs = broker.as_secs(),
                    "the inbox retention window is shorter than the broker's redelivery window: \
                     a redelivery after pruning would be applied again; raise the window"
                );
                false
            }
            _ => true,
        }
    }
}

/// Parses `LatePolicy` from `quarantine` or `apply`.
pub fn parse_late_policy(text: &str) -> Result<LatePolicy> {
    match text {
        "quarantine" => Ok(LatePolicy::Quarantine),
        "apply" => Ok(LatePolicy::Apply),
        other => Err(Error::config(format!(
            "late policy {other:?}: use quarantine or apply"
        ))),
    }
}

/// Parses a duration like `7d`, `36h`, `90m`, `30s`, `500ms` or a sum such as `1d12h`.
///
/// ```
/// use std::time::Duration;
/// use oncely_ops::retention::parse_duration;
/// assert_eq!(parse_duration("7d").unwrap(), Duration::from_secs(7 * 86_400));
/// assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5_400));
/// assert!(parse_duration("7 parsecs").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration> {
    let bad = || {
        Error::config(format!(
            "duration {text:?}: use e.g. 7d, 36h, 90m, 30s, 500ms"
        ))
    };
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let ms = match &rest[..unit] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            _ => return Err(bad()),
        };
        total += Duration::from_millis(n.checked_mul(ms).ok_or_else(bad)?);
        rest = &rest[unit..];
    }
    Ok(total)
}
