//! # oncely-ops
//!
//! Operating an oncely inbox: what the `oncely` admin commands run, as a library.
//!
//! - [`prune`]: retention. Deletes ids older than a window in bounded batches with a pause
//!   between them (never one long transaction), or — on PostgreSQL with the
//!   [`partition`]ed inbox — drops whole daily partitions and seals the days that are over
//!   ([`sealed`]). Only one pruner runs at a time per
//!   inbox across all instances ([`oncely_sql::DbLock`]).
//! - [`stats`], [`inspect`]: per-consumer numbers and where one message id is;
//!   [`backlog`]: outbox rows not dispatched and journal rows pending (oncely-effects).
//! - [`dlq`]: list, show and purge dead letters; [`replay`]: replay them (through a
//!   [`oncely_core::Consumer`], after refusing conflicts, already-applied and possibly-pruned
//!   rows) and resolve conflicts; [`events`]: the operations journal (prune watermark,
//!   resolutions).
//! - [`retention`]: the retention window and the late-message policy, as configuration;
//!   [`time`]: unix milliseconds as UTC dates (the CLI's, the console's and partition names).
//! - `cli` (feature `cli`): the admin commands (clap) over all of the above, for your own
//!   admin binary; the `oncely` binary and the facade's `oncely::cli` are this module.
//!
//! Everything works on SQLite, PostgreSQL and MySQL/MariaDB through [`Ops`], built from an
//! `oncely-sql` store's pool and [`oncely_sql::Tables`].
//!
//! ```no_run
//! # async fn f() -> oncely_core::Result<()> {
//! use oncely_ops::{Ops, prune::{PruneOptions, prune}};
//! let store = oncely_sql::SqliteStore::connect("sqlite:oncely.db").await?;
//! let ops = Ops::from(&store);
//! let report = prune(&ops, &PruneOptions::default(), &mut |_| {}).await?;
//! println!("deleted {} ids", report.deleted);
//! # Ok(()) }
//! ```

pub mod backlog;
pub mod browse;
#[cfg(feature = "cli")]
pub mod cli;
mod db;
pub mod dlq;
pub mod events;
pub mod inspect;
pub mod metrics;
pub mod partition;
pub mod prune;
pub mod replay;
pub mod retention;
pub mod sealed;
pub mod stats;
pub mod time;
pub mod vacuum;

pub use db::Ops;
