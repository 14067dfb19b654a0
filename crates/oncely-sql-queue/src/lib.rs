//! # oncely-sql-queue
//!
//! A PostgreSQL table as the broker: producers `INSERT` (possibly inside their own business
//! transaction), consumers lease rows with `FOR UPDATE SKIP LOCKED`, and the row is deleted
//! **in the same transaction** as the inbox claim and the handler's effect (wrap the handler
//! in [`Dequeue`]). So for an applied message, dequeue, claim and effect commit together or
//! not at all: exactly once end to end, with no broker ack to lose.
//!
//! Messages whose handler does not run (duplicates, dead letters) are deleted by the ack
//! right after the commit; if that delete is lost, the lease expires, the row is delivered
//! again and ends as `Duplicate` once more, then deleted.
//!
//! Table (`{schema}.{prefix}queue`, the [`MIGRATIONS`] set, applied by `store.migrate_with(&[&MIGRATIONS])`): `id BIGSERIAL`,
//! `message_id TEXT` (the producer-set id; `NULL` → dead-lettered as `bad_id`),
//! `payload BYTEA`, `headers TEXT` (JSON object), `enqueued_at`, `leased_until` (Unix ms),
//! `deliveries` (the delivery count, reported as `attempt`).

mod queue;

pub use queue::{Dequeue, MAX_LEASE_BATCH, MIGRATIONS, QUEUE_ROW_HEADER, SqlQueue, SqlQueueSource};
