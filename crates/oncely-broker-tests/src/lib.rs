//! # oncely-broker-tests
//!
//! Test support for oncely's broker sources, used by this crate's integration tests:
//!
//! - [`workload`]: messages with unique ids, exact duplicates and bad ids, in the demo's
//!   payload shape `{"account": "acct-17", "amount": 5}`.
//! - [`ledger`]: a handler that writes one ledger row per applied effect (the ledger has no
//!   unique key, so a double effect shows up as a second row).
//! - [`check`]: the independent checker — it counts ledger rows and dead letters in the
//!   database against the workload, never the consumer's own counters.
//! - [`brokers`]: one URL-driven entry over the broker crates.
//! - [`fixture`]: the one broker fixture: fresh destinations, publishing, connection cuts.
//! - [`scenarios`]: the scenarios every broker runs, each written once over the fixture.
//! - [`faults`]: connections cut from the server side, the SIGKILL crash loop.
//! - [`runner`]: runs a consumer until it has been idle for a while.
//! - [`procs`]: consumer child processes (start, wait for the summary line).
//! - [`python`]: the Python producers' script and its packages.
//! - [`redis_db`]: the ledger on the Redis store (effects in Redis, read back by the checker).
//! - [`services`]: skip-or-fail when a server is missing.
//! - [`kafka`]: the Kafka tests' broker address, source URLs and consumer loop.
//! - [`store_faults`]: store outages under a real broker, deliveries counted at the source.
//!
//! The binary `oncely-broker-consumer` is the child process of the SIGKILL crash, scale-out
//! and node-loss tests; `oncely-scale-bench` measures throughput with 1 and 3 processes, 1 and
//! 3 Galera nodes, and consumers sharded over two databases (see docs/distributed.md).

pub mod brokers;
pub mod check;
pub mod faults;
pub mod fixture;
pub mod kafka;
pub mod ledger;
pub mod procs;
pub mod python;
pub mod redis_db;
pub mod runner;
pub mod scenarios;
pub mod services;
pub mod store_faults;
pub mod workload;
