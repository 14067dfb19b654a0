//! Deterministic crash injection between the steps of the contract.

use crate::outcome::Step;
use sha2::{Digest, Sha256};

/// Decides whether the consumer "crashes" at a step of a delivery.
///
/// A crash abandons the delivery as a killed process would: the open transaction is
/// dropped (rolled back) and the delivery is neither acked nor nacked.
pub trait Chaos: Send + Sync + 'static {
    /// True to crash right after `step` of the delivery numbered `attempt` of message `id`.
    fn crash_after(&self, step: Step, id: Option<&[u8]>, attempt: u32) -> bool;
}

/// Crashes after each step with probability `rate`, decided by hashing
/// `(seed, id, attempt, step)`: the same seed gives the same crashes, whatever the
/// scheduling. Attempts beyond `max_crashing_attempt` never crash, so every message
/// gets through eventually.
///
/// ```
/// use oncely_core::{Chaos, CrashPlan, Step};
/// let plan = CrashPlan::new(7, 0.5);
/// let a = plan.crash_after(Step::Claimed, Some(b"m-1"), 1);
/// assert_eq!(a, CrashPlan::new(7, 0.5).crash_after(Step::Claimed, Some(b"m-1"), 1));
/// ```
#[derive(Debug, Clone)]
pub struct CrashPlan {
    seed: u64,
    rate: f64,
    steps: Vec<Step>,
    max_crashing_attempt: u32,
}

impl CrashPlan {
    /// Crashes at every step with probability `rate` (0.0..=1.0).
    pub fn new(seed: u64, rate: f64) -> Self {
        Self {
            seed,
            rate: rate.clamp(0.0, 1.0),
            steps: Step::ALL.to_vec(),
            max_crashing_attempt: 20,
        }
    }

    /// Restricts crashes to these steps.
    pub fn only_at(mut self, steps: &[Step]) -> Self {
        self.steps = steps.to_vec();
        self
    }

    /// Deliveries numbered above this never crash (default 20).
    pub fn max_crashing_attempt(mut self, attempt: u32) -> Self {
        self.max_crashing_attempt = attempt;
        self
    }
}

impl Chaos for CrashPlan {
    fn crash_after(&self, step: Step, id: Option<&[u8]>, attempt: u32) -> bool {
        if self.rate == 0.0 || attempt > self.max_crashing_attempt || !self.steps.contains(&step) {
            return false;
        }
        let mut h = Sha256::new();
        h.update(self.seed.to_le_bytes());
        h.update(id.unwrap_or(b"\0none"));
        h.update(attempt.to_le_bytes());
        h.update([step as u8]);
        let digest = h.finalize();
        let draw = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
        (draw as f64) < self.rate * (u64::MAX as f64)
    }
}
