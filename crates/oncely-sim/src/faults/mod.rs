//! The fault wrappers: around the reference store ([`SimStore`]: latency, outages, read-only
//! phases, deadlocks, lost commit answers, crashes around each step, plus a per-key version
//! table for versioned apply), around the reference source ([`SimSource`]: crashes at receipt
//! and after the ack, failing acks and reads, undecodable envelopes, and the ack-time check),
//! and the handler ([`SimHandler`]: transient and permanent failures, panics, versioned
//! apply). The runtime under them is the production one, untouched.

mod handler;
mod source;
mod store;

pub use handler::SimHandler;
pub use source::{SimSource, settled_in_store};
pub use store::{SimStore, SimTx, Versions};
