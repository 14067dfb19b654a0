//! # oncely-sql
//!
//! sqlx stores for oncely: [`SqliteStore`] (the embedded default), [`PgStore`] and
//! [`MySqlStore`]. One implementation; the statements that differ live in [`Dialect`].
//!
//! This is the only crate that knows there are three databases: tools that work on any of
//! them hold an [`AnyStore`] or [`AnyPool`] and run typed code through [`with_store!`] /
//! [`with_pool!`]; SQL that differs is built with [`Dialect`]'s methods; sqlx errors are
//! classified by [`error_kind`]; host times are [`now_ms`].
//!
//! The handler receives the store's `sqlx::Transaction` and writes its effect through it;
//! the claim was inserted into the same transaction, so both commit or neither does.
//!
//! ```no_run
//! use oncely_sql::SqliteStore;
//! # async fn f() -> oncely_core::Result<()> {
//! let store = SqliteStore::connect("sqlite:oncely.db").await?;
//! store.migrate().await?;
//! # Ok(()) }
//! ```

mod any;
mod batch;
mod clock;
mod connect;
mod dialect;
mod engine;
mod error;
mod failover;
mod letter;
mod lock;
mod migrate;
pub mod pooler;
mod query;
mod replication;
mod store;
mod tables;
mod tx;
mod url;

pub use any::{AnyPool, AnyStore};
pub use clock::{from_ms, now_ms, to_ms};
pub use connect::{ConnectOptions, Durability};
pub use dialect::{Dialect, Isolation};
pub use engine::{detect_portable, engine_of_version, resolve_tables};
pub use error::{db, db as db_error, error_kind, is_missing_table};
pub use letter::{dead_letter_columns, decode_dead_letter};
pub use lock::{DbLock, LEASE_TTL};
pub use migrate::{
    Adopt, INBOX, MigrateDb, MigrationSet, migrate_url, print_migration_sets, reset_sql,
    run_migrations,
};
pub use migrate::{Migration, migrations, print_migrations};
pub use pooler::{Autocommit, behind_transaction_pooler, query, query_as, query_scalar};
pub use query::{Column, Done, SqlDatabase, Value};
pub use replication::Replication;
pub use sqlx;
pub use store::{MySqlStore, PgStore, SqlStore, SqliteStore};
pub use tables::{Tables, is_identifier};
pub use tx::AnyTx;
pub use url::{redact_url, split_hosts};
