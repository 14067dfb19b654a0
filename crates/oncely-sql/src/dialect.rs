//! The three SQL dialects and the statements that differ between them.

use oncely_core::Error;
use std::borrow::Cow;

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

    /// The workspace's one bind-placeholder helper: placeholder number `n` (1-based), `$n` on
    /// PostgreSQL, `?n` on SQLite, `?` on MySQL (bind in order).
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert_eq!(Dialect::Postgres.param(2), "$2");
    /// assert_eq!(Dialect::Sqlite.param(2), "?2");
    /// assert_eq!(Dialect::MySql.param(2), "?");
    /// ```
    pub fn param(self, n: usize) -> String {
        match self {
            Self::Postgres => format!("${n}"),
            Self::Sqlite => format!("?{n}"),
            Self::MySql => "?".to_owned(),
        }
    }

    /// The workspace's one placeholder rewrite: `sql` written with numbered placeholders
    /// `$1, $2, …` (PostgreSQL's), made runnable on this database. PostgreSQL and SQLite take
    /// them as they are (`None`: bind the arguments in order). MySQL has only positional `?`:
    /// each `$n` becomes `?`, and the returned order lists, per `?`, which argument (0-based)
    /// it binds, so a number may repeat or come out of order. Quoted text (`'…'`, `"…"`,
    /// `` `…` ``) and comments (`-- …`, `/* … */`) are left alone; so is a `$` not followed by a
    /// digit or following an identifier character. Statements already written with `?` pass
    /// through unchanged; do not mix both styles in one statement.
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// let sql = "UPDATE t SET a = $2, note = 'costs $1' WHERE id = $1 AND b = $2";
    /// let (mysql, order) = Dialect::MySql.rewrite_params(sql);
    /// assert_eq!(mysql, "UPDATE t SET a = ?, note = 'costs $1' WHERE id = ? AND b = ?");
    /// assert_eq!(order, Some(vec![1, 0, 1]));
    /// let (pg, order) = Dialect::Postgres.rewrite_params(sql);
    /// assert_eq!((pg.as_ref(), order), (sql, None));
    /// ```
    pub fn rewrite_params(self, sql: &str) -> (Cow<'_, str>, Option<Vec<usize>>) {
        if self != Self::MySql || !sql.contains('$') {
            return (Cow::Borrowed(sql), None);
        }
        let bytes = sql.as_bytes();
        let (mut out, mut order) = (String::with_capacity(sql.len()), Vec::new());
        let (mut i, mut copied) = (0, 0);
        while i < bytes.len() {
            match bytes[i] {
                quote @ (b'\'' | b'"' | b'`') => {
                    i += 1;
                    while i < bytes.len() && bytes[i] != quote {
                        // MySQL's strings take backslash escapes.
                        i += if bytes[i] == b'\\' && quote != b'`' {
                            2
                        } else {
                            1
                        };
                    }
                    i += 1;
                }
                b'-' if bytes.get(i + 1) == Some(&b'-') => {
                    while i < bytes.len() && bytes[i] != b'\n' {
                        i += 1;
                    }
                }
                b'/' if bytes.get(i + 1) == Some(&b'*') => {
                    i += 2;
                    while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/'))
                    {
                        i += 1;
                    }
                    i += 2;
                }
                b'$' if bytes.get(i + 1).is_some_and(u8::is_ascii_digit)
                    && !(i > 0
                        && (bytes[i - 1].is_ascii_alphanumeric()
                            || bytes[i - 1] == b'_'
                            || bytes[i - 1] == b'$')) =>
                {
                    let end = (i + 1..bytes.len())
                        .find(|&j| !bytes[j].is_ascii_digit())
                        .unwrap_or(bytes.len());
                    // `$0` (or a number too large) names no argument: the server reports it.
                    let n: usize = sql[i + 1..end].parse().unwrap_or(0);
                    out.push_str(&sql[copied..i]);
                    out.push('?');
                    order.push(n.checked_sub(1).unwrap_or(usize::MAX));
                    (i, copied) = (end, end);
                }
                _ => i += 1,
            }
        }
        if order.is_empty() {
            return (Cow::Borrowed(sql), None);
        }
        out.push_str(&sql[copied.min(sql.len())..]);
        (Cow::Owned(out), Some(order))
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

    /// Comma-separated placeholders `from..from+count` (see [`Dialect::param`]).
    ///
    /// ```
    /// assert_eq!(oncely_sql::Dialect::Postgres.params(2, 3), "$2, $3, $4");
    /// ```
    pub fn params(self, from: usize, count: usize) -> String {
        (from..from + count)
            .map(|n| self.param(n))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Where `needle` first occurs in `hay` (SQL expressions), 1-based, 0 when absent:
    /// `strpos` on PostgreSQL, `INSTR` on SQLite and MySQL.
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert_eq!(Dialect::Postgres.position("detail", "':'"), "strpos(detail, ':')");
    /// assert_eq!(Dialect::MySql.position("detail", "':'"), "INSTR(detail, ':')");
    /// ```
    pub fn position(self, hay: &str, needle: &str) -> String {
        match self {
            Dialect::Postgres => format!("strpos({hay}, {needle})"),
            Dialect::Sqlite | Dialect::MySql => format!("INSTR({hay}, {needle})"),
        }
    }

    /// Whether the database has schemas oncely can put its tables in (PostgreSQL schemas,
    /// MySQL databases); SQLite has none (use a table prefix).
    pub fn has_schemas(self) -> bool {
        self != Self::Sqlite
    }

    /// Whether oncely's time-partitioned inbox exists on this database (declarative
    /// partitioning, dropped by whole daily partitions): PostgreSQL only. Elsewhere the inbox
    /// is one table, pruned in batches.
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert!(Dialect::Postgres.has_partitions());
    /// assert!(!Dialect::MySql.has_partitions() && !Dialect::Sqlite.has_partitions());
    /// ```
    pub fn has_partitions(self) -> bool {
        self == Self::Postgres
    }

    /// A statement that, run first in a transaction, serializes it with every other
    /// transaction running it with the same `key` until it ends, so that concurrent
    /// `CREATE TABLE IF NOT EXISTS` of one table cannot collide: PostgreSQL's can fail on the
    /// catalog's unique index (`pg_advisory_xact_lock`). `None` where nothing is needed
    /// (SQLite serializes writers; MySQL's `IF NOT EXISTS` does not collide).
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert_eq!(Dialect::Postgres.ddl_lock_sql(42).unwrap(), "SELECT pg_advisory_xact_lock(42)");
    /// assert!(Dialect::MySql.ddl_lock_sql(42).is_none());
    /// ```
    pub fn ddl_lock_sql(self, key: i64) -> Option<String> {
        (self == Self::Postgres).then(|| format!("SELECT pg_advisory_xact_lock({key})"))
    }

    /// `column` read as text. MySQL keeps oncely's byte-exact keys (consumer, message id) in
    /// `VARBINARY` columns; there it is `CAST(column AS CHAR)`, elsewhere the column itself.
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert_eq!(Dialect::MySql.text("consumer"), "CAST(consumer AS CHAR)");
    /// assert_eq!(Dialect::Postgres.text("consumer"), "consumer");
    /// ```
    pub fn text(self, column: &str) -> String {
        match self {
            Self::MySql => format!("CAST({column} AS CHAR)"),
            _ => column.to_owned(),
        }
    }

    /// The clause that turns an `INSERT` into "insert unless a row with this unique `key`
    /// (one column, or a comma-separated composite key) exists": `ON CONFLICT (key) DO
    /// NOTHING`, or on MySQL a no-op `ON DUPLICATE KEY UPDATE first = first` on the key's
    /// first column (unlike `INSERT IGNORE` it keeps other errors).
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert_eq!(Dialect::Sqlite.on_conflict_do_nothing("id"), "ON CONFLICT (id) DO NOTHING");
    /// assert_eq!(Dialect::MySql.on_conflict_do_nothing("id"), "ON DUPLICATE KEY UPDATE id = id");
    /// assert_eq!(Dialect::Postgres.on_conflict_do_nothing("a, b"), "ON CONFLICT (a, b) DO NOTHING");
    /// assert_eq!(Dialect::MySql.on_conflict_do_nothing("a, b"), "ON DUPLICATE KEY UPDATE a = a");
    /// ```
    pub fn on_conflict_do_nothing(self, key: &str) -> String {
        match self {
            Self::MySql => {
                let first = key.split(',').next().unwrap_or(key).trim();
                format!("ON DUPLICATE KEY UPDATE {first} = {first}")
            }
            _ => format!("ON CONFLICT ({key}) DO NOTHING"),
        }
    }

    /// A statement deleting at most `limit` rows of `table` matching `condition`, lowest
    /// `key` first; `key` is one column or a comma-separated composite key (compared as a row
    /// value). `limit` is SQL text (a number or a placeholder). MySQL has
    /// `DELETE … ORDER BY … LIMIT` but no `LIMIT` in an `IN` subquery; the others delete
    /// through a subquery.
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert_eq!(
    ///     Dialect::MySql.delete_batch("t", "id", "at < ?", "100"),
    ///     "DELETE FROM t WHERE at < ? ORDER BY id LIMIT 100"
    /// );
    /// assert_eq!(
    ///     Dialect::Sqlite.delete_batch("t", "id", "at < ?1", "100"),
    ///     "DELETE FROM t WHERE id IN (SELECT id FROM t WHERE at < ?1 ORDER BY id LIMIT 100)"
    /// );
    /// assert_eq!(
    ///     Dialect::Postgres.delete_batch("t", "a, b", "at < $1", "100"),
    ///     "DELETE FROM t WHERE (a, b) IN (SELECT a, b FROM t WHERE at < $1 ORDER BY a, b LIMIT 100)"
    /// );
    /// ```
    pub fn delete_batch(self, table: &str, key: &str, condition: &str, limit: &str) -> String {
        match self {
            Self::MySql => {
                format!("DELETE FROM {table} WHERE {condition} ORDER BY {key} LIMIT {limit}")
            }
            _ => {
                let row = if key.contains(',') {
                    format!("({key})")
                } else {
                    key.to_owned()
                };
                format!(
                    "DELETE FROM {table} WHERE {row} IN (SELECT {key} FROM {table} WHERE {condition} ORDER BY {key} LIMIT {limit})"
                )
            }
        }
    }

    /// The table of leases behind [`DbLock`](crate::DbLock) (SQLite, portable mode) and the
    /// portable migration lock: `name` (primary key), `holder`, `expires_at` (unix ms).
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert!(Dialect::MySql.lease_table_sql("l").contains("name VARCHAR(255) PRIMARY KEY"));
    /// ```
    pub fn lease_table_sql(self, table: &str) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {table} (name {} PRIMARY KEY, holder {} NOT NULL, expires_at BIGINT NOT NULL){}",
            self.key_text(255),
            self.key_text(255),
            self.table_options()
        )
    }

    /// Takes the lease `$1` for holder `$2` until `$3` (unix ms) if nobody holds it or its
    /// lease expired before `$4`; otherwise changes nothing. Whether it was taken is read back
    /// (the holder), since MySQL's affected-row count cannot tell. Numbered placeholders (run it through
    /// [`SqlTx`](crate::SqlTx), which rewrites them on MySQL).
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert!(Dialect::Postgres.take_lease_sql("l").contains("WHERE l.expires_at < $4"));
    /// assert!(Dialect::MySql.take_lease_sql("l").contains("ON DUPLICATE KEY UPDATE"));
    /// ```
    pub fn take_lease_sql(self, table: &str) -> String {
        let insert =
            format!("INSERT INTO {table} AS l (name, holder, expires_at) VALUES ($1, $2, $3)");
        match self {
            // `holder` is assigned first, so that both conditions see the old expiry.
            Self::MySql => format!(
                "INSERT INTO {table} (name, holder, expires_at) VALUES ($1, $2, $3) \
                 ON DUPLICATE KEY UPDATE holder = IF(expires_at < $4, VALUES(holder), holder), \
                 expires_at = IF(expires_at < $4, VALUES(expires_at), expires_at)"
            ),
            _ => format!(
                "{insert} ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                 expires_at = excluded.expires_at WHERE l.expires_at < $4"
            ),
        }
    }

    /// The suffix of a `SELECT` that locks the rows it returns and skips rows other
    /// transactions hold (`FOR UPDATE [OF alias] SKIP LOCKED`, with a leading space), or
    /// nothing on SQLite, whose writers are serialized anyway. `alias` names the table to
    /// lock on PostgreSQL when the query joins.
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert_eq!(Dialect::Postgres.skip_locked("o"), " FOR UPDATE OF o SKIP LOCKED");
    /// assert_eq!(Dialect::Sqlite.skip_locked("o"), "");
    /// ```
    pub fn skip_locked(self, alias: &str) -> String {
        match self {
            Self::Postgres => format!(" FOR UPDATE OF {alias} SKIP LOCKED"),
            Self::MySql => " FOR UPDATE SKIP LOCKED".to_owned(),
            Self::Sqlite => String::new(),
        }
    }

    /// The clause that makes an `INSERT` an upsert: when a row with the unique `key` exists,
    /// its `columns` take the inserted values.
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert_eq!(
    ///     Dialect::Postgres.on_conflict_update("k", &["value", "version"]),
    ///     "ON CONFLICT (k) DO UPDATE SET value = excluded.value, version = excluded.version"
    /// );
    /// assert_eq!(
    ///     Dialect::MySql.on_conflict_update("k", &["value"]),
    ///     "ON DUPLICATE KEY UPDATE value = VALUES(value)"
    /// );
    /// ```
    pub fn on_conflict_update(self, key: &str, columns: &[&str]) -> String {
        let set = |f: &dyn Fn(&str) -> String| columns.iter().map(|c| f(c)).collect::<Vec<_>>();
        match self {
            Self::MySql => format!(
                "ON DUPLICATE KEY UPDATE {}",
                set(&|c| format!("{c} = VALUES({c})")).join(", ")
            ),
            _ => format!(
                "ON CONFLICT ({key}) DO UPDATE SET {}",
                set(&|c| format!("{c} = excluded.{c}")).join(", ")
            ),
        }
    }

    /// The clause that makes an `INSERT` into `table` add the inserted `column` to the stored
    /// one when a row with the unique `key` exists (a running total, e.g. a balance).
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert_eq!(
    ///     Dialect::MySql.on_conflict_add("acc", "account", "balance"),
    ///     "ON DUPLICATE KEY UPDATE balance = balance + VALUES(balance)"
    /// );
    /// assert_eq!(
    ///     Dialect::Sqlite.on_conflict_add("acc", "account", "balance"),
    ///     "ON CONFLICT (account) DO UPDATE SET balance = acc.balance + excluded.balance"
    /// );
    /// ```
    pub fn on_conflict_add(self, table: &str, key: &str, column: &str) -> String {
        match self {
            Self::MySql => {
                format!("ON DUPLICATE KEY UPDATE {column} = {column} + VALUES({column})")
            }
            _ => format!(
                "ON CONFLICT ({key}) DO UPDATE SET {column} = {table}.{column} + excluded.{column}"
            ),
        }
    }

    /// The column type of an auto-increment 64-bit primary key `id`-style column.
    ///
    /// ```
    /// assert_eq!(oncely_sql::Dialect::Postgres.serial_key(), "BIGSERIAL PRIMARY KEY");
    /// ```
    pub fn serial_key(self) -> &'static str {
        match self {
            Self::Sqlite => "INTEGER PRIMARY KEY AUTOINCREMENT",
            Self::Postgres => "BIGSERIAL PRIMARY KEY",
            Self::MySql => "BIGINT AUTO_INCREMENT PRIMARY KEY",
        }
    }

    /// The clause that makes an `INSERT` into a table aliased `alias` (`INSERT INTO t AS alias`)
    /// update `columns` to the inserted values when a row with the unique `key` exists and
    /// `condition` holds; `condition` compares the stored row (`alias.column`) with the inserted
    /// one (`excluded.column`). `None` on MySQL, whose `ON DUPLICATE KEY UPDATE` has no
    /// condition: there write each column as `IF(condition, VALUES(column), column)`.
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert_eq!(
    ///     Dialect::Postgres.on_conflict_update_where("k", &["v"], "cur.v < excluded.v").unwrap(),
    ///     "ON CONFLICT (k) DO UPDATE SET v = excluded.v WHERE cur.v < excluded.v"
    /// );
    /// assert!(Dialect::MySql.on_conflict_update_where("k", &["v"], "cur.v < excluded.v").is_none());
    /// ```
    pub fn on_conflict_update_where(
        self,
        key: &str,
        columns: &[&str],
        condition: &str,
    ) -> Option<String> {
        (self != Self::MySql).then(|| {
            format!(
                "{} WHERE {condition}",
                self.on_conflict_update(key, columns)
            )
        })
    }

    /// The suffix of a `SELECT` that locks the rows it returns until the transaction ends
    /// (` FOR UPDATE`, with a leading space), or nothing on SQLite, whose writers are
    /// serialized anyway (`BEGIN IMMEDIATE`).
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert_eq!(Dialect::MySql.for_update(), " FOR UPDATE");
    /// assert_eq!(Dialect::Sqlite.for_update(), "");
    /// ```
    pub fn for_update(self) -> &'static str {
        match self {
            Self::Sqlite => "",
            _ => " FOR UPDATE",
        }
    }

    /// Bounds how long the transaction's next statements wait for a row lock to `wait`: the
    /// script to run before them and the one that restores the previous bound after them, or
    /// `None` where a lock wait cannot be bounded per statement (SQLite: one writer at a time,
    /// bounded by the pool's busy timeout). Run both with [`SqlTx::script`](crate::SqlTx::script)
    /// inside the transaction. A wait that ends this way is a lock-timeout error (transient).
    ///
    /// - PostgreSQL: `lock_timeout` set transaction-locally in milliseconds (at least 1); the
    ///   old value is kept in the transaction-local setting `oncely.saved_lock_timeout`.
    /// - MySQL / MariaDB: `innodb_lock_wait_timeout` in whole seconds (at least 1); a session
    ///   variable, which outlives the transaction, so restoring it matters. MySQL keeps the
    ///   transaction usable after a lock wait timeout: restore before returning the error.
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// use std::time::Duration;
    /// let (set, restore) = Dialect::Postgres.bounded_lock_wait(Duration::from_millis(250)).unwrap();
    /// assert!(set.contains("set_config('lock_timeout', '250ms', true)"));
    /// assert!(restore.contains("oncely.saved_lock_timeout"));
    /// let (set, _) = Dialect::MySql.bounded_lock_wait(Duration::from_millis(250)).unwrap();
    /// assert!(set.ends_with("innodb_lock_wait_timeout = 1"));
    /// assert!(Dialect::Sqlite.bounded_lock_wait(Duration::from_secs(1)).is_none());
    /// ```
    pub fn bounded_lock_wait(self, wait: std::time::Duration) -> Option<(String, String)> {
        match self {
            Self::Postgres => Some((
                format!(
                    "SELECT set_config('oncely.saved_lock_timeout', current_setting('lock_timeout'), true); \
                     SELECT set_config('lock_timeout', '{}ms', true)",
                    wait.as_millis().max(1)
                ),
                "SELECT set_config('lock_timeout', current_setting('oncely.saved_lock_timeout'), true)"
                    .to_owned(),
            )),
            Self::MySql => Some((
                format!(
                    "SET @oncely_saved_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = {}",
                    wait.as_secs().max(1)
                ),
                "SET SESSION innodb_lock_wait_timeout = @oncely_saved_lwt".to_owned(),
            )),
            Self::Sqlite => None,
        }
    }

    /// `expr` as a 64-bit integer (e.g. a `sum()`, which PostgreSQL and MySQL widen to a
    /// decimal): `CAST(expr AS BIGINT)`, `CAST(expr AS SIGNED)` on MySQL.
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert_eq!(Dialect::MySql.cast_i64("sum(n)"), "CAST(sum(n) AS SIGNED)");
    /// assert_eq!(Dialect::Postgres.cast_i64("sum(n)"), "CAST(sum(n) AS BIGINT)");
    /// ```
    pub fn cast_i64(self, expr: &str) -> String {
        match self {
            Self::MySql => format!("CAST({expr} AS SIGNED)"),
            _ => format!("CAST({expr} AS BIGINT)"),
        }
    }

    /// The type of a text column that is a key or indexed: `TEXT`, or `VARCHAR(len)` on
    /// MySQL (which cannot index `TEXT` without a prefix length).
    pub fn key_text(self, len: u16) -> String {
        match self {
            Self::MySql => format!("VARCHAR({len})"),
            _ => "TEXT".to_owned(),
        }
    }

    /// What ends a `CREATE TABLE`: ` ENGINE=InnoDB` on MySQL (transactions and row locks
    /// whatever the server's default engine), nothing elsewhere.
    pub fn table_options(self) -> &'static str {
        match self {
            Self::MySql => " ENGINE=InnoDB",
            _ => "",
        }
    }

    /// The statement dropping `schema` and everything in it (a PostgreSQL schema, a MySQL
    /// database), or `None` on SQLite, which has no schemas.
    pub fn drop_schema_sql(self, schema: &str) -> Option<String> {
        match self {
            Self::Postgres => Some(format!("DROP SCHEMA IF EXISTS {schema} CASCADE")),
            Self::MySql => Some(format!("DROP DATABASE IF EXISTS {schema}")),
            Self::Sqlite => None,
        }
    }

    /// The statement creating `schema` (a PostgreSQL schema, a MySQL database) if it is
    /// missing, or `None` on SQLite.
    ///
    /// ```
    /// use oncely_sql::Dialect;
    /// assert_eq!(Dialect::MySql.create_schema_sql("app").unwrap(), "CREATE DATABASE IF NOT EXISTS app");
    /// ```
    pub fn create_schema_sql(self, schema: &str) -> Option<String> {
        match self {
            Self::Postgres => Some(format!("CREATE SCHEMA IF NOT EXISTS {schema}")),
            Self::MySql => Some(format!("CREATE DATABASE IF NOT EXISTS {schema}")),
            Self::Sqlite => None,
        }
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

#[cfg(test)]
mod tests {
    use super::Dialect;

    fn mysql(sql: &str) -> (String, Option<Vec<usize>>) {
        let (sql, order) = Dialect::MySql.rewrite_params(sql);
        (sql.into_owned(), order)
    }

    #[test]
    fn rewrite_params_numbers_become_positional_on_mysql() {
        assert_eq!(
            mysql("INSERT INTO t (a, b, c) VALUES ($1, $2, $3)"),
            (
                "INSERT INTO t (a, b, c) VALUES (?, ?, ?)".into(),
                Some(vec![0, 1, 2])
            )
        );
        assert_eq!(
            mysql("SELECT $10, $2, $10"),
            ("SELECT ?, ?, ?".into(), Some(vec![9, 1, 9]))
        );
        assert_eq!(
            mysql("SELECT $0"),
            ("SELECT ?".into(), Some(vec![usize::MAX]))
        );
    }

    #[test]
    fn rewrite_params_skips_quotes_comments_and_identifiers() {
        let sql = "SELECT 'a $1 '' $2', \"col$1\", `x $3`, a$1, $$, $ -- $4\n, $1 /* $5 */";
        assert_eq!(
            mysql(sql),
            (
                "SELECT 'a $1 '' $2', \"col$1\", `x $3`, a$1, $$, $ -- $4\n, ? /* $5 */".into(),
                Some(vec![0])
            )
        );
        // A backslash escapes a quote inside a MySQL string.
        assert_eq!(
            mysql(r"SELECT 'it\'s $1', $2"),
            (r"SELECT 'it\'s $1', ?".into(), Some(vec![1]))
        );
        // Unterminated quote or comment: nothing after it is rewritten, nothing is lost.
        assert_eq!(
            mysql("SELECT $1, 'open $2"),
            ("SELECT ?, 'open $2".into(), Some(vec![0]))
        );
        assert_eq!(
            mysql("SELECT $1 /* open $2"),
            ("SELECT ? /* open $2".into(), Some(vec![0]))
        );
    }

    #[test]
    fn rewrite_params_leaves_other_statements_alone() {
        for sql in ["SELECT ?, ?", "SELECT '$1'", "SELECT 1"] {
            assert_eq!(mysql(sql), (sql.into(), None));
        }
        for d in [Dialect::Postgres, Dialect::Sqlite] {
            let (sql, order) = d.rewrite_params("SELECT $2, $1");
            assert!(matches!(sql, std::borrow::Cow::Borrowed("SELECT $2, $1")));
            assert_eq!(order, None);
        }
    }
}
