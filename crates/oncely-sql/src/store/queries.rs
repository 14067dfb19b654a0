//! The statements a store runs, rendered once for its dialect and tables: the claim, the
//! locking hash lookup, the dead-letter upsert and reads.

use crate::dialect::Dialect;
use crate::letter::dead_letter_columns;
use crate::tables::Tables;

/// Statements a store runs, rendered once for its dialect and tables.
#[derive(Debug, Clone)]
pub(crate) struct Queries {
    pub claim: String,
    pub claim_hash: String,
    pub stored_hash: String,
    pub upsert_dead_letter: String,
    pub dead_letters: String,
    pub dead_letters_of: String,
}

/// The dead-letter columns the store writes from bind parameters, in bind order.
const DEAD_LETTER_COLUMNS: &str = "consumer, message_id, raw_id, payload, payload_hash, stored_hash, reason, detail, attempts, entity_key, version, source_time, headers, id_hash";
/// How many bind parameters [`DEAD_LETTER_COLUMNS`] takes.
const DEAD_LETTER_PARAMS: usize = 14;
/// The columns that identify one dead letter: repeats of it update that row.
pub(crate) const DEAD_LETTER_KEY: &str = "consumer, id_hash, payload_hash, reason";

impl Queries {
    pub fn new(d: Dialect, t: &Tables, portable: bool) -> Self {
        let inbox = t.inbox();
        let dl = t.dead_letters();
        let now = d.now_ms_sql();
        let values = format!("{}, {now}", d.params(1, 3));
        let claim = match d {
            Dialect::MySql => format!(
                "INSERT IGNORE INTO {inbox} (consumer, message_id, payload_hash, received_at) VALUES ({values})"
            ),
            _ => format!(
                "INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) VALUES ({values}) ON CONFLICT DO NOTHING"
            ),
        };
        let select = format!("SELECT {} FROM {dl}", dead_letter_columns(d));
        let (consumer, id) = (d.param(1), d.param(2));
        let mut stored_hash = format!(
            "SELECT payload_hash FROM {inbox} WHERE consumer = {consumer} AND message_id = {id}"
        );
        // PostgreSQL: the claim key too, the one index a time-partitioned inbox finds an id by
        // (its primary key leads with received_at); the plain inbox's primary key finds the
        // row, and this is a filter on it.
        if d == Dialect::Postgres {
            let (row, wanted) = (
                crate::batch::claim_key_sql("consumer", "message_id"),
                crate::batch::claim_key_sql(&consumer, &id),
            );
            stored_hash.push_str(&format!(" AND {row} = {wanted}"));
        }
        // InnoDB: a plain SELECT reads the transaction's snapshot, which may predate the
        // commit the INSERT IGNORE just waited for; a locking read sees the latest row.
        // Portable mode: `FOR UPDATE`, since TiDB ignores `LOCK IN SHARE MODE`.
        let claim_hash = match d {
            Dialect::MySql if portable => format!("{stored_hash} FOR UPDATE"),
            Dialect::MySql => format!("{stored_hash} LOCK IN SHARE MODE"),
            _ => stored_hash.clone(),
        };
        let insert = format!(
            "INSERT INTO {dl} {alias}({DEAD_LETTER_COLUMNS}, dead_lettered_at, last_seen, deliveries) VALUES ({}, {now}, {now}, 1)",
            d.params(1, DEAD_LETTER_PARAMS),
            alias = if d == Dialect::MySql { "" } else { "AS d " },
        );
        let upsert_dead_letter = match d {
            Dialect::MySql => format!(
                "{insert} ON DUPLICATE KEY UPDATE deliveries = deliveries + 1, last_seen = VALUES(last_seen), attempts = GREATEST(attempts, VALUES(attempts)), detail = VALUES(detail)"
            ),
            Dialect::Postgres => format!(
                "{insert} ON CONFLICT ({DEAD_LETTER_KEY}) DO UPDATE SET deliveries = d.deliveries + 1, last_seen = EXCLUDED.last_seen, attempts = GREATEST(d.attempts, EXCLUDED.attempts), detail = EXCLUDED.detail"
            ),
            Dialect::Sqlite => format!(
                "{insert} ON CONFLICT ({DEAD_LETTER_KEY}) DO UPDATE SET deliveries = d.deliveries + 1, last_seen = excluded.last_seen, attempts = max(d.attempts, excluded.attempts), detail = excluded.detail"
            ),
        };
        Self {
            claim,
            claim_hash,
            stored_hash,
            upsert_dead_letter,
            dead_letters: format!("{select} ORDER BY id"),
            dead_letters_of: format!("{select} WHERE consumer = {} ORDER BY id", d.param(1)),
        }
    }
}
