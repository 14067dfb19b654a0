//! The facts of a deployment, found at connect and held by the store: a transaction pooler in
//! front of PostgreSQL ([`pooler`]), streaming replicas and what a commit waits for
//! ([`replication`]), and multi-host URLs that move to the next host when one is gone
//! ([`failover`]).

pub(crate) mod failover;
pub mod pooler;
pub(crate) mod replication;
