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
    pub insert_dead_letter: String,
    pub dead_letters: String,
    pub dead_letters_of: String,
}

const DEAD_LETTER_COLUMNS: &str = "consumer, message_id, raw_id, payload, payload_hash, stored_hash, reason, detail, attempts, entity_key, version, source_time, headers, dead_lettered_at";

impl Queries {
    pub fn new(d: Dialect, t: &Tables) -> Self {
        let inbox = t.table("inbox");
        let dl = t.table("dead_letters");
        let values = d.params(1, 4);
        let claim = match d {
            Dialect::MySql => format!(
                "INSERT IGNORE INTO {inbox} (consumer, message_id, payload_hash, received_at) VALUES ({values})"
            ),
            _ => format!(
                "INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) VALUES ({values}) ON CONFLICT DO NOTHING"
            ),
        };
        let select = format!("SELECT id, {DEAD_LETTER_COLUMNS} FROM {dl}");
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
        Self {
            claim,
            claim_hash,
            stored_hash,
            insert_dead_letter: format!(
                "INSERT INTO {dl} ({DEAD_LETTER_COLUMNS}) VALUES ({})",
                d.params(1, 14)
            ),
            dead_letters: format!("{select} ORDER BY id"),
            dead_letters_of: format!("{select} WHERE consumer = {} ORDER BY id", d.param(1)),
        }
    }
}
