//! The URL-driven entry over the broker crates is the facade's: [`oncely::brokers`].

pub use oncely::brokers::{AnySource, connect_source, publish};
