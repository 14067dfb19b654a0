//! The three SQL dialects and the statements that differ between them.

use crate::tables::Tables;
use oncely_core::Error;

/// A SQL dialect oncely supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// SQLite (bundled), the embedded default.
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
}

impl Dialect {
    /// The dialect of a database URL (`sqlite:`, `postgres://`/`postgresql://`, `mysql://`/`mariadb://`).
    pub fn from_url(url: &str) -> Result<Self, Error> {
        let scheme = url.split(':').next().unwrap_or("");
        match scheme {
            "sqlite" => Ok(Self::Sqlite),
            "postgres" | "postgresql" => Ok(Self::Postgres),
            "mysql" | "mariadb" => Ok(Self::MySql),
            _ => Err(Error::config(format!(
                "unsupported database URL scheme {scheme:?}: use sqlite:, postgres:// or mysql://"
            ))),
        }
    }

    /// Lower-case name, as used for the migrations folder.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
        }
    }

    /// Bind placeholder number `n` (1-based).
    pub(crate) fn param(self, n: usize) -> String {
        match self {
            Self::Postgres => format!("${n}"),
            Self::Sqlite => format!("?{n}"),
            Self::MySql => "?".to_owned(),
        }
    }

    /// An SQL expression for "now" in milliseconds since the Unix epoch, read from the
    /// DATABASE's clock (not the consumer host's), as a 64-bit integer. Used for the inbox's
    /// `received_at` and the dead letters' `dead_lettered_at` / `last_seen`, so that pruning
    /// compares times from one clock.
    ///
    /// - PostgreSQL: `statement_timestamp()`: the wall clock when the statement arrived, not
    ///   the transaction's start (`now()`), and one value for the whole statement (unlike
    ///   `clock_timestamp()`, which can differ between two columns of one row), as SQLite's
    ///   and MySQL's "now" are.
    /// - MySQL / MariaDB: `UTC_TIMESTAMP(3)` measured from the epoch with `TIMESTAMPDIFF`, which
    ///   involves no time-zone conversion (`UNIX_TIMESTAMP(NOW(3))` converts the session's
    ///   local time back to UTC and is ambiguous in the hour a DST change repeats).
    /// - SQLite: `julianday('now')` (millisecond resolution; SQLite's clock is the host's).
    pub fn now_ms_sql(self) -> &'static str {
        match self {
            Self::Postgres => "(extract(epoch from statement_timestamp())*1000)::bigint",
            Self::MySql => {
                "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"
            }
            Self::Sqlite => "CAST((julianday('now') - 2440587.5)*86400000 AS INTEGER)",
        }
    }

    /// Comma-separated placeholders `from..from+count`.
    pub(crate) fn params(self, from: usize, count: usize) -> String {
        (from..from + count)
            .map(|n| self.param(n))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Transaction isolation for the store's transactions.
///
/// - PostgreSQL: the default is the server's (normally `READ COMMITTED`). Under
///   `REPEATABLE READ` / `SERIALIZABLE` a claim that waited for a concurrent transaction which
///   then committed the same id fails with SQLSTATE 40001; oncely classifies it as transient, so
///   the runtime retries and the retry sees `Duplicate`.
/// - MySQL / MariaDB: the default is the server's (normally `REPEATABLE READ`). The claim's
///   hash lookup is a locking read, so it sees the committed row under every level.
/// - SQLite: transactions are always serializable (`BEGIN IMMEDIATE`); the setting is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// `READ COMMITTED`.
    ReadCommitted,
    /// `REPEATABLE READ`.
    RepeatableRead,
    /// `SERIALIZABLE`.
    Serializable,
}

impl Isolation {
    /// The statement that begins a transaction at this level, or `None` for the default `BEGIN`.
    pub(crate) fn begin_sql(level: Option<Self>, d: Dialect) -> Option<&'static str> {
        use Isolation::*;
        match (d, level) {
            (Dialect::Sqlite, _) => Some("BEGIN IMMEDIATE"),
            (_, None) => None,
            (Dialect::Postgres, Some(ReadCommitted)) => {
                Some("BEGIN ISOLATION LEVEL READ COMMITTED")
            }
            (Dialect::Postgres, Some(RepeatableRead)) => {
                Some("BEGIN ISOLATION LEVEL REPEATABLE READ")
            }
            (Dialect::Postgres, Some(Serializable)) => Some("BEGIN ISOLATION LEVEL SERIALIZABLE"),
            (Dialect::MySql, Some(ReadCommitted)) => {
                Some("SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
            }
            (Dialect::MySql, Some(RepeatableRead)) => {
                Some("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; START TRANSACTION")
            }
            (Dialect::MySql, Some(Serializable)) => {
                Some("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE; START TRANSACTION")
            }
        }
    }
}

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
    pub fn new(d: Dialect, t: &Tables) -> Self {
        let inbox = t.table("inbox");
        let dl = t.table("dead_letters");
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
        // MySQL's consumer column is VARBINARY (byte-exact); read it back as text.
        let consumer = match d {
            Dialect::MySql => "CAST(consumer AS CHAR) AS consumer",
            _ => "consumer",
        };
        let select = format!(
            "SELECT id, {consumer}, message_id, raw_id, payload, payload_hash, stored_hash, reason, detail, attempts, entity_key, version, source_time, headers, dead_lettered_at, last_seen, deliveries FROM {dl}"
        );
        let stored_hash = format!(
            "SELECT payload_hash FROM {inbox} WHERE consumer = {} AND message_id = {}",
            d.param(1),
            d.param(2)
        );
        // InnoDB: a plain SELECT reads the transaction's snapshot, which may predate the
        // commit the INSERT IGNORE just waited for; a locking read sees the latest row.
        let claim_hash = match d {
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
