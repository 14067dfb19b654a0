//! # oncely-effects
//!
//! Effects beyond the inbox table, on SQLite, PostgreSQL and MySQL/MariaDB (through
//! `oncely-sql`'s transactions):
//!
//! - **Versioned apply** ([`apply_if_newer`]): a per-entity version table; an update is applied
//!   only if its version is higher than the stored one, in one atomic statement, so reordered
//!   and duplicated updates converge on the highest version. A stale update is
//!   [`oncely_core::Handled::Stale`]: no effect, acked.
//! - **Idempotency keys** ([`effect_key`]): `<consumer>:<id>:email`, the same on every redelivery and
//!   machine, to pass to providers.
//! - **Effect journal** ([`Journal`], [`Reconciler`]): `pending` committed before an outside
//!   call, `done` with the provider's reference after; a reconciler resolves rows left pending
//!   through a user-supplied check.
//! - **Transactional outbox** ([`Outbox`], [`Relay`], [`Publisher`]): outgoing messages
//!   written in the handler's transaction with ids derived from the incoming id, dispatched
//!   after commit, in order per entity key, by one relay at a time per row.
//!
//! The tables are the migration set [`MIGRATIONS`], applied with the inbox's by the store
//! (or printed with `MIGRATIONS.print(dialect, &tables)`):
//!
//! ```no_run
//! # async fn f() -> oncely_core::Result<()> {
//! use oncely_sql::INBOX;
//! let store = oncely_sql::AnyStore::connect("sqlite:app.db").await?;
//! store.migrate_with(&[&INBOX, &oncely_effects::MIGRATIONS]).await?;
//! # Ok(()) }
//! ```
//!
//! See `docs/effects.md` for when to use which.

mod journal;
mod key;
mod migrate;
mod outbox;
mod prune;
mod publisher;
mod reconcile;
mod relay;
mod tables;
mod versioned;

pub use journal::{EffectState, Journal, JournalEntry, Performed};
pub use key::{MAX_KEY_LEN, MAX_VERBATIM_CONSUMER, MAX_VERBATIM_ID, effect_key, effect_key_prefix};
pub use migrate::MIGRATIONS;
pub use outbox::{DESTINATION_HEADER, Outbox, OutboxMessage, Outgoing, derived_id, outbox_rows};
pub use prune::{prune_journal, prune_outbox};
pub use publisher::Publisher;
pub use reconcile::{ReconcileReport, Reconciler, Resolution, Resolve};
pub use relay::{DispatchReport, Relay};
pub use tables::EffectTables;
pub use versioned::{Versioned, Versions, apply_if_newer};
