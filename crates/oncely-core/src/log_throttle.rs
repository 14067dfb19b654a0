//! [`LogThrottle`]: one log line per interval for a fault that repeats in bursts.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lets one log line through per interval and counts the ones held back, for faults that
/// come in bursts (a stranded connection fails every call in flight at once; a flood of
/// forged webhooks): the first line is written at once, the rest of the interval's at a
/// lower level or not at all, and the next line says how many there were.
///
/// ```
/// use oncely_core::LogThrottle;
/// use std::time::Duration;
///
/// let throttle = LogThrottle::new(Duration::from_secs(10));
/// assert_eq!(throttle.turn(), Some(0)); // write it (nothing held back before it)
/// assert_eq!(throttle.turn(), None); // within the minute: hold it back
/// ```
#[derive(Debug)]
pub struct LogThrottle {
    every: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    last: Option<Instant>,
    held_back: u64,
}

impl LogThrottle {
    /// At most one line per `every`.
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            state: Mutex::default(),
        }
    }

    /// At most one line a minute: what oncely's own WARNs about repeated faults use (a
    /// stranded connection, a silent pull stream).
    pub fn per_minute() -> Self {
        Self::new(Duration::from_secs(60))
    }

    /// `Some(held_back)` when a line may be written now, `held_back` being the lines held
    /// back since the last one; `None` within the interval (the call is counted).
    pub fn turn(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        match state.last {
            Some(last) if now.duration_since(last) < self.every => {
                state.held_back += 1;
                None
            }
            _ => {
                state.last = Some(now);
                Some(std::mem::take(&mut state.held_back))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_and_the_count_of_the_rest() {
        let throttle = LogThrottle::per_minute();
        assert_eq!(throttle.turn(), Some(0));
        assert_eq!(throttle.turn(), None);
        assert_eq!(throttle.turn(), None);
        throttle.state.lock().unwrap().last = Instant::now().checked_sub(throttle.every);
        assert_eq!(throttle.turn(), Some(2));
        assert_eq!(throttle.turn(), None);
    }

    #[test]
    fn a_zero_interval_lets_every_line_through() {
        let throttle = LogThrottle::new(Duration::ZERO);
        assert_eq!(throttle.turn(), Some(0));
        assert_eq!(throttle.turn(), Some(0));
    }
}
