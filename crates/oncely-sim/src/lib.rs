//! # oncely-sim
//!
//! A deterministic simulator for oncely's runtime. Each seed is one schedule: the real
//! [`oncely_core::Consumer`] (one or two processes, one transaction per delivery or group
//! commit with lanes) runs over the reference store ([`oncely_testkit::MemoryStore`]) and
//! source ([`oncely_core::MemorySource`] with the broker faults of
//! [`oncely_testkit::FaultySource`]) on a current-thread tokio runtime whose clock is
//! paused, so virtual time jumps to the next timer when every task waits. Every choice comes
//! from the seed: the messages and their copies, delivery order, broker duplicates and lost
//! acks, crashes after each step, store outages and read-only phases, handler failures,
//! shutdowns and kills, a dead-letter replay. Faults are wrappers ([`faults`]) and so are
//! the planted bugs ([`plants`]) that prove the checks can fail; the runtime is untouched.
//!
//! After every run the invariants are checked from the store's own state ([`check`]).
//! A failing seed is shrunk and printed as a one-line replay command with a short trace.
//! See docs/testing.md.

pub mod check;
pub mod faults;
pub mod plan;
pub mod plants;
pub mod run;
pub mod sweep;
pub mod world;

pub use plan::Plan;
pub use plants::Plant;
pub use run::{RunResult, run_plan};
pub use sweep::{Failure, Summary, plan_at, sweep};
