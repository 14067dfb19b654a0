//! Batch claims: many ids with one statement per chunk, per dialect.
//!
//! - The batch is deduplicated first (the first copy of an id is the one claimed), so an id
//!   never appears twice in one statement (PostgreSQL would raise SQLSTATE 21000 for an
//!   `ON CONFLICT` statement touching a row twice). The later copies are resolved here:
//!   `Duplicate` if their hash equals what the inbox will hold, `Conflict` otherwise.
//! - Ids are claimed in sorted order, so two overlapping batches take their row locks in the
//!   same order and don't deadlock each other.
//! - PostgreSQL: `INSERT … SELECT … FROM unnest($2::text[], $3::text[]) ON CONFLICT DO NOTHING
//!   RETURNING message_id`; the ids not returned are read back with `= ANY($2)`.
//! - PostgreSQL's time-partitioned inbox (oncely-ops' `partition` layout, found on the first
//!   claim): no index spans the partitions, so a chunk is one call of the layout's
//!   `inbox_claim` function (oncely-ops `migrations/postgres/partitioned_claim_fn.sql`). It
//!   locks the ids' keys with transaction-scoped advisory locks ([`claim_key_sql`]; sorted, so
//!   overlapping groups don't deadlock), then in a new statement (so it sees what the lock
//!   holders before it committed) inserts the ids no partition holds, probing each by its hash
//!   index on that key, and where the sealed days' keys exist (oncely-ops `sealed`), those
//!   keys and only the partitions from the sealed bound on. It returns the ids it claimed and
//!   the stored hash of the others. Its planner settings (sequential, index-only and bitmap
//!   scans off, nested loops only) hold during the call only: the hash index looked up once per
//!   id is a probe's only path, so its cached generic plan stays one lookup per id and
//!   partition however full today's partition was when it was made.
//! - SQLite: a multi-row `INSERT … ON CONFLICT DO NOTHING RETURNING message_id`.
//! - `received_at` is the database's clock ([`Dialect::now_ms_sql`]), like the single claim.
//! - MySQL / MariaDB: a plain read finds the ids already claimed, then one multi-row
//!   `INSERT IGNORE` claims the rest inside a savepoint. If it inserted all of them, they are
//!   fresh; if not (a concurrent consumer claimed one meanwhile), the savepoint is rolled back
//!   and those ids are claimed one at a time, which tells exactly which ones are fresh. In
//!   portable mode (MariaDB Galera, TiDB) there is no savepoint: they are claimed one at a time
//!   at once. Galera replicates the rows a `ROLLBACK TO SAVEPOINT` undid: the other nodes then
//!   fail to apply the transaction (a duplicate key) and leave the cluster as inconsistent.

use oncely_core::{Claim, Error, MessageId, PayloadHash, Result};
use std::collections::{HashMap, HashSet};

/// The seed of the advisory-lock key of `(consumer, message_id)` on the partitioned inbox:
/// `hashtextextended(consumer || E'\x1f' || message_id, CLAIM_LOCK_SEED)`, as the guard
/// trigger computes it.
pub const CLAIM_LOCK_SEED: i64 = 1_869_504_356;

/// `hashtextextended(consumer || E'\x1f' || id, CLAIM_LOCK_SEED)` of the SQL expressions
/// `consumer` and `id`: the partitioned inbox's advisory-lock key of an id, and (of the columns)
/// the expression of its `inbox_claim_key` index, which the probe matches only if written the
/// same way, and of the sealed days' keys (oncely-ops `sealed`).
///
/// ```
/// let key = oncely_sql::claim_key_sql("consumer", "message_id");
/// assert!(key.starts_with("hashtextextended(consumer || E'\\x1f' || message_id, "));
/// ```
pub fn claim_key_sql(consumer: &str, id: &str) -> String {
    format!("hashtextextended({consumer} || E'\\x1f' || {id}, {CLAIM_LOCK_SEED})")
}

/// Ids per statement (keeps every dialect far below its bind-parameter limit).
pub(crate) const CHUNK: usize = 500;

/// What the statements found: ids this transaction inserted, and the hash of the others.
#[derive(Default)]
pub(crate) struct Found {
    pub fresh: HashSet<String>,
    pub stored: HashMap<String, PayloadHash>,
}

impl Found {
    pub fn store_hash(&mut self, id: String, hash: &str) -> Result<()> {
        let parsed = PayloadHash::from_hex(hash).ok_or_else(|| {
            Error::permanent(format!("inbox holds a malformed payload hash {hash:?}"))
        })?;
        self.stored.insert(id, parsed);
        Ok(())
    }
}

/// The first copy of each id, sorted by id.
pub(crate) fn unique_sorted(items: &[(MessageId, PayloadHash)]) -> Vec<(&str, PayloadHash)> {
    let mut seen = HashSet::new();
    let mut unique: Vec<(&str, PayloadHash)> = items
        .iter()
        .filter(|(id, _)| seen.insert(id.as_str()))
        .map(|(id, hash)| (id.as_str(), *hash))
        .collect();
    unique.sort_unstable_by(|a, b| a.0.cmp(b.0));
    unique
}

/// One claim per item, in order, from what the statements found.
pub(crate) fn resolve(items: &[(MessageId, PayloadHash)], found: &Found) -> Result<Vec<Claim>> {
    let mut holds: HashMap<&str, PayloadHash> = HashMap::new();
    items
        .iter()
        .map(|(id, hash)| {
            let id = id.as_str();
            let claim = if let Some(held) = holds.get(id) {
                Claim::given(Some(*held), *hash)
            } else if found.fresh.contains(id) {
                holds.insert(id, *hash);
                Claim::Fresh
            } else if let Some(stored) = found.stored.get(id) {
                holds.insert(id, *stored);
                Claim::given(Some(*stored), *hash)
            } else {
                return Err(Error::transient(format!(
                    "batch claim of {id:?}: neither inserted nor found; retrying"
                )));
            };
            Ok(claim)
        })
        .collect()
}

/// How many places a listed statement (an `IN` list, a multi-row `VALUES`) is written with for
/// `n` ids: `n` rounded up to a power of two, the places beyond `n` bound to the last id again
/// (harmless in an `IN` list, and ignored as a duplicate key by `INSERT IGNORE`).
///
/// sqlx prepares every statement and keeps 100 per connection; a shape per group size (1 to
/// 64, beside the handler's own) overflows that cache, and on MySQL each statement evicted
/// from it stalls the next one about 40 ms: sqlx sends the close in a packet of its own, and
/// Nagle's algorithm holds the next statement until the server's delayed acknowledgement.
/// Measured through RabbitMQ into MariaDB: 2,700 instead of 23,000 msgs/s once a run passed
/// about 25,000 messages. Rounded, the claim's statements take a handful of shapes.
pub(crate) fn shape_len(n: usize) -> usize {
    if n == 0 { 0 } else { n.next_power_of_two() }
}

/// `items`, then its last item again up to [`shape_len`] places: what a listed statement binds.
pub(crate) fn padded<T: Copy>(items: &[T]) -> impl Iterator<Item = T> + '_ {
    let extra = items
        .last()
        .map(|&last| std::iter::repeat_n(last, shape_len(items.len()) - items.len()));
    items.iter().copied().chain(extra.into_iter().flatten())
}

pub(crate) fn list(from: usize, count: usize, dollar: bool) -> String {
    (from..from + count)
        .map(|n| {
            if dollar {
                format!("${n}")
            } else {
                "?".to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn listed_statements_are_padded_to_a_power_of_two_with_the_last_item() {
        assert_eq!(super::padded(&[1, 2, 3]).collect::<Vec<_>>(), [1, 2, 3, 3]);
        assert_eq!(
            super::padded(&[1, 2, 3, 4]).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        assert_eq!(super::padded::<u8>(&[]).count(), super::shape_len(0));
        let ids: Vec<u32> = (0..45).collect();
        assert_eq!(super::padded(&ids).count(), 64);
    }
}
