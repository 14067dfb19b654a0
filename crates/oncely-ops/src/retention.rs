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

/// Parses a duration like `7d`, `36h`, `90m`, `30s`, `500ms`, `2w` or a sum such as `1d12h` or
/// `1h 30m` (with `humantime`, which also takes longer unit names and fractions: `7days`,
/// `90min`, `1.5h`).
///
/// ```
/// use std::time::Duration;
/// use oncely_ops::retention::parse_duration;
/// assert_eq!(parse_duration("7d").unwrap(), Duration::from_secs(7 * 86_400));
/// assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5_400));
/// assert!(parse_duration("7 parsecs").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        Error::config(format!(
            "duration {text:?}: {e}; use e.g. 7d, 36h, 90m, 30s, 500ms"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn durations_as_the_cli_has_always_taken_them() {
        for (text, want) in [
            ("7d", secs(7 * 86_400)),
            ("36h", secs(36 * 3_600)),
            ("90m", secs(90 * 60)),
            ("30s", secs(30)),
            ("500ms", Duration::from_millis(500)),
            ("2w", secs(14 * 86_400)),
            ("1d12h", secs(36 * 3_600)),
            ("1h30m", secs(5_400)),
            ("1m1s500ms", Duration::from_millis(61_500)),
            ("0s", Duration::ZERO),
            (" 24h ", secs(86_400)),
            ("1000000d", secs(1_000_000 * 86_400)),
        ] {
            assert_eq!(parse_duration(text).unwrap(), want, "{text:?}");
        }
    }

    #[test]
    fn durations_with_spaces_long_unit_names_and_fractions() {
        assert_eq!(parse_duration("1h 30m").unwrap(), secs(5_400));
        assert_eq!(parse_duration("7days").unwrap(), secs(7 * 86_400));
        assert_eq!(parse_duration("90min").unwrap(), secs(90 * 60));
        assert_eq!(parse_duration("1.5h").unwrap(), secs(5_400));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        for text in [
            "",
            "  ",
            "7",
            "d",
            "7 parsecs",
            "-1d",
            "1h-",
            "99999999999999999999d",
        ] {
            let e = parse_duration(text).unwrap_err().to_string();
            assert!(e.contains("use e.g. 7d"), "{text:?}: {e}");
        }
    }
}
