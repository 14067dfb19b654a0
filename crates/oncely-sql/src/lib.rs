//! # oncely-sql
//!
//! sqlx stores for oncely: [`SqliteStore`] (the embedded default), [`PgStore`] and
//! [`MySqlStore`]. One implementation; the statements that differ live in [`Dialect`].
//!
//! This is the only crate that knows there are three databases: tools that work on any of
//! them hold an [`AnyStore`] or [`AnyPool`] and run typed code through [`with_store!`] /
//! [`with_pool!`]; SQL that differs is built with [`Dialect`]'s methods; sqlx errors are
//! classified by [`error::error_kind`]; host times are [`clock::now_ms`]. What the database behind a
//! connection can do (portable mode, a transaction pooler, `LISTEN`/`NOTIFY`) is decided once
//! at connect and held by the store, its pool and every transaction: its [`Engine`].
//!
//! The handler receives the store's `sqlx::Transaction` and writes its effect through it;
//! the claim was inserted into the same transaction, so both commit or neither does.
//!
//! ## Features
//!
//! One per database, all on by default: `sqlite` (bundled libsqlite3), `postgres`, `mysql`
//! (MySQL and MariaDB). With `default-features = false` and the ones you name, the others'
//! sqlx drivers are not compiled, their stores, [`AnyStore`] / [`AnyPool`] / [`AnyTx`]
//! variants and `with_*!` arms do not exist, and a URL of theirs is a configuration error.
//! [`Dialect`] always knows all three (it is only SQL text).
//!
//! ```no_run
//! use oncely_sql::SqliteStore;
//! # async fn f() -> oncely_core::Result<()> {
//! let store = SqliteStore::connect("sqlite:oncely.db").await?;
//! store.migrate().await?;
//! # Ok(()) }
//! ```

// With a database left out, helpers and fallback arms written for the others go unused:
// those lints are checked in the full build (all three, the default and CI's).
#![cfg_attr(
    not(all(feature = "sqlite", feature = "postgres", feature = "mysql")),
    allow(unused, unreachable_patterns, unreachable_code)
)]

#[cfg(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")))]
compile_error!(
    "oncely-sql needs at least one database: enable its feature `sqlite`, `postgres` or `mysql` \
     (the facade `oncely` forwards them)"
);

mod any;
mod batch;
pub mod clock;
mod connect;
mod deploy;
mod dialect;
mod engine;
pub mod error;
pub mod letter;
mod lock;
pub mod migrate;
mod notify;
mod query;
mod store;
mod tables;
mod url;

pub use any::seam::SqlTx;
pub use any::tx::AnyTx;
#[doc(hidden)]
pub use any::tx::TxKind;
pub use any::{AnyPool, AnyStore};
pub use batch::claim_key_sql;
#[doc(hidden)]
pub use connect::PoolKind;
pub use connect::{ConnectOptions, Durability};
pub use deploy::pooler;
pub use deploy::replication::Replication;
pub use dialect::{Dialect, Isolation};
pub use engine::Engine;
pub use lock::DbLock;
pub use migrate::{INBOX, MigrationSet};
pub use notify::Listener;
pub use query::{Column, Done, SqlDatabase, Value};
pub use sqlx;
#[cfg(feature = "mysql")]
pub use store::MySqlStore;
#[cfg(feature = "postgres")]
pub use store::PgStore;
pub use store::SqlStore;
#[cfg(feature = "sqlite")]
pub use store::SqliteStore;
pub use tables::Tables;
pub use url::redact_url;
