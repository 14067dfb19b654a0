//! The workspace's one database error classifier: maps sqlx errors (PostgreSQL SQLSTATEs,
//! MySQL/MariaDB error numbers, SQLite result codes) onto oncely's [`ErrorKind`]s, without
//! leaking credentials. Every crate that talks to a database calls [`error_kind`] or [`db`].

use oncely_core::{Error, ErrorKind};

/// PostgreSQL (and standard) SQLSTATEs meaning the store is not available: read-only
/// transaction (a standby, or the database switched read-only at a failover), admin / crash
/// shutdown, cannot connect now. Class `08` (connection exception) and class `53`
/// (insufficient resources: disk full, out of memory, too many connections) are matched by
/// prefix in [`sqlstate_kind`].
const UNAVAILABLE_SQLSTATES: &[&str] = &["25006", "57P01", "57P02", "57P03"];

/// SQLSTATEs meaning "try the same thing again": serialization failure, deadlock, lock not
/// available, statement timeout / query canceled (issue 13: a slow statement is not a bad
/// message), statement completion unknown.
const TRANSIENT_SQLSTATES: &[&str] = &["40001", "40P01", "55P03", "57014", "40003"];

/// MySQL / MariaDB error numbers meaning the store is not available. Their SQLSTATE is often
/// the generic `HY000`, so the number decides: 1290 `--read-only` option, 1836 read-only mode,
/// 1792 read-only transaction, 1040 too many connections, 1053 server shutdown, 1927 connection
/// killed, 1021 disk full, 2002/2003 can't connect, 2006 server gone away, 2013 connection
/// lost during query, 1047 (Galera) "WSREP has not yet prepared node for application use": the
/// node lost the cluster's primary component. InnoDB reports a full disk as 1114 "the table is
/// full" (seen when the disk filled under a bench run: 42 healthy messages were dead-lettered
/// as permanent failures), and a storage engine or file write failing as 1030 "got error N
/// from storage engine", 1026 "error writing file" or 1180 "got error during COMMIT": none of
/// them is the message's fault.
const UNAVAILABLE_MYSQL: &[u16] = &[
    1290, 1836, 1792, 1040, 1053, 1927, 1021, 1114, 1030, 1026, 1180, 2002, 2003, 2006, 2013, 1047,
];

/// MySQL / MariaDB error numbers meaning "try again": 1213 deadlock (also Galera's
/// certification failure at commit, "WSREP detected deadlock/conflict"), 1205 lock wait timeout,
/// 3024 (MySQL) and 1969 (MariaDB) statement timeout.
const TRANSIENT_MYSQL: &[u16] = &[1213, 1205, 3024, 1969];

/// SQLite primary result codes (the low byte of an extended code) meaning the store is not
/// available: 8 `SQLITE_READONLY`, 10 `SQLITE_IOERR`, 13 `SQLITE_FULL`, 14 `SQLITE_CANTOPEN`.
const UNAVAILABLE_SQLITE: &[i64] = &[8, 10, 13, 14];

/// SQLite primary result codes meaning "try again": 5 `SQLITE_BUSY`, 6 `SQLITE_LOCKED`
/// (extended codes 261, 262, 517, 773 share these low bytes).
const TRANSIENT_SQLITE: &[i64] = &[5, 6];

/// SQLSTATEs meaning the schema or the grants are not what oncely expects: 42P01 undefined
/// table, 42703 undefined column, 42501 insufficient privilege (permission denied), 3F000
/// invalid schema name; MySQL reports 42S02 (no such table) and 42S22 (unknown column). Not an
/// outage and no message's fault: the tables are missing or older than this oncely (run
/// `oncely migrate`), or the user lacks a grant. [`ErrorKind::Config`].
const SCHEMA_SQLSTATES: &[&str] = &["42P01", "42703", "42501", "3F000", "42S02", "42S22"];

/// MySQL / MariaDB error numbers of the same kind: 1146 table doesn't exist, 1054 unknown
/// column, 1142 command denied for a table, 1143 denied for a column, 1044 access denied to a
/// database, 1049 unknown database.
const SCHEMA_MYSQL: &[u16] = &[1146, 1054, 1142, 1143, 1044, 1049];

/// SQLite reports a missing table or column with the generic code 1 (`SQLITE_ERROR`), so its
/// message decides ("no such table: x", "no such column: x", "table x has no column named y");
/// 23 `SQLITE_AUTH` is a denied authorization.
const SCHEMA_SQLITE_MESSAGES: &[&str] = &["no such table", "no such column", "has no column named"];
const SCHEMA_SQLITE: &[i64] = &[23];

/// Which server reported a database error.
#[derive(Debug, Clone, Copy)]
enum Server {
    Postgres,
    MySql(u16),
    Sqlite,
}

fn sqlstate_kind(code: &str) -> Option<ErrorKind> {
    if UNAVAILABLE_SQLSTATES.contains(&code) || code.starts_with("08") || code.starts_with("53") {
        Some(ErrorKind::Unavailable)
    } else if TRANSIENT_SQLSTATES.contains(&code) {
        Some(ErrorKind::Transient)
    } else if SCHEMA_SQLSTATES.contains(&code) {
        Some(ErrorKind::Config)
    } else {
        None
    }
}

/// The kind of a database error from its code: a SQLSTATE (PostgreSQL, MySQL), the MySQL
/// error number, or a SQLite (extended) result code.
fn kind_of(code: &str, server: Server) -> ErrorKind {
    let kind = match server {
        Server::Postgres => sqlstate_kind(code),
        Server::MySql(number) if UNAVAILABLE_MYSQL.contains(&number) => {
            Some(ErrorKind::Unavailable)
        }
        Server::MySql(number) if TRANSIENT_MYSQL.contains(&number) => Some(ErrorKind::Transient),
        Server::MySql(number) if SCHEMA_MYSQL.contains(&number) => Some(ErrorKind::Config),
        Server::MySql(_) => sqlstate_kind(code),
        Server::Sqlite => code.parse::<i64>().ok().and_then(|extended| {
            let primary = extended & 0xff;
            if UNAVAILABLE_SQLITE.contains(&primary) {
                Some(ErrorKind::Unavailable)
            } else if SCHEMA_SQLITE.contains(&primary) {
                Some(ErrorKind::Config)
            } else {
                TRANSIENT_SQLITE
                    .contains(&primary)
                    .then_some(ErrorKind::Transient)
            }
        }),
    };
    kind.unwrap_or(ErrorKind::Permanent)
}

/// What kind of failure a sqlx error is, for the runtime:
///
/// - [`ErrorKind::Unavailable`]: the store cannot be used at all, whatever the message: I/O
///   errors (connection refused / reset), pool timeouts, closed pools, read-only databases
///   (PostgreSQL 25006, MySQL 1290/1836/1792, `SQLITE_READONLY`), shutdowns (57P01-57P03, 1053),
///   too many connections (53300, 1040), disk full (53100, 1021, InnoDB's 1114,
///   `SQLITE_FULL`), a failing storage engine or file write (1030, 1026, 1180), lost connections
///   (class 08, 1927, 2002/2003/2006/2013). The runtime holds the delivery and pauses intake.
/// - [`ErrorKind::Transient`]: concurrency, worth retrying the same message: serialization
///   failure 40001, deadlock 40P01 / 1213, lock timeouts 55P03 / 1205, statement timeout
///   57014, SQLite busy / locked, protocol hiccups.
/// - [`ErrorKind::Config`]: a bad URL or option, and a schema or grants that do not match:
///   missing table or column (42P01, 42703, 1146, 1054, SQLite "no such table"), permission
///   denied (42501, 1142, 1044): not an outage; the tables need `oncely migrate` or the user a
///   grant. The runtime logs them at ERROR and a consumer refuses to start on them.
/// - [`ErrorKind::Permanent`]: everything else (constraint violations, bad data).
///
/// ```
/// use oncely_core::ErrorKind;
/// let refused = oncely_sql::sqlx::Error::Io(std::io::ErrorKind::ConnectionRefused.into());
/// assert_eq!(oncely_sql::error::error_kind(&refused), ErrorKind::Unavailable);
/// ```
pub fn error_kind(e: &sqlx::Error) -> ErrorKind {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => ErrorKind::Unavailable,
        sqlx::Error::Protocol(_) => ErrorKind::Transient,
        sqlx::Error::Database(db) => {
            let server = server_of(&**db);
            if matches!(server, Server::Sqlite)
                && SCHEMA_SQLITE_MESSAGES
                    .iter()
                    .any(|m| db.message().contains(m))
            {
                return ErrorKind::Config;
            }
            kind_of(db.code().as_deref().unwrap_or(""), server)
        }
        sqlx::Error::Configuration(_) => ErrorKind::Config,
        _ => ErrorKind::Permanent,
    }
}

/// Which server reported `db` (by the driver's error type; only the drivers built in).
fn server_of(db: &dyn sqlx::error::DatabaseError) -> Server {
    #[cfg(feature = "mysql")]
    if let Some(m) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return Server::MySql(m.number());
    }
    #[cfg(feature = "sqlite")]
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        return Server::Sqlite;
    }
    let _ = db;
    Server::Postgres
}

/// Wraps a sqlx error with what was being done, classified by [`error_kind`]. Handlers
/// writing their effects through sqlx use it so the runtime retries, holds or dead-letters
/// for the right errors.
pub fn db(doing: &str, e: sqlx::Error) -> Error {
    Error::new(error_kind(&e), format!("{doing} failed")).with_source(e)
}

/// True when the error says a table does not exist (PostgreSQL 42P01, MySQL 1146 / 42S02,
/// SQLite "no such table"), so that optional tables (effects journal, outbox, operations
/// journal) can be skipped. Its kind is [`ErrorKind::Config`] (see [`error_kind`]). Takes a
/// sqlx error or an oncely error wrapping one (as [`SqlTx`](crate::SqlTx) returns): the
/// source chain is searched.
///
/// ```
/// use oncely_sql::sqlx;
/// assert!(!oncely_sql::error::is_missing_table(&sqlx::Error::RowNotFound));
/// let wrapped = oncely_sql::error::db("reading", sqlx::Error::RowNotFound);
/// assert!(!oncely_sql::error::is_missing_table(&wrapped));
/// ```
pub fn is_missing_table(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(sqlx::Error::Database(d)) = e.downcast_ref::<sqlx::Error>() {
            return matches!(d.code().as_deref(), Some("42P01" | "42S02" | "1146"))
                || d.message().contains("no such table");
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use ErrorKind::{Config, Permanent, Transient, Unavailable};

    #[test]
    fn postgres_codes() {
        for (code, kind) in [
            ("25006", Unavailable), // read-only transaction (failover, standby)
            ("57P01", Unavailable), // admin shutdown
            ("57P02", Unavailable), // crash shutdown
            ("57P03", Unavailable), // cannot connect now
            ("53100", Unavailable), // disk full
            ("53300", Unavailable), // too many connections
            ("08000", Unavailable),
            ("08003", Unavailable),
            ("08006", Unavailable),
            ("08P01", Unavailable),
            ("40001", Transient), // serialization failure
            ("40P01", Transient), // deadlock
            ("55P03", Transient), // lock not available
            ("57014", Transient), // statement timeout
            ("23505", Permanent), // unique violation
            ("42P01", Config),    // no such table
            ("42703", Config),    // no such column
            ("42501", Config),    // permission denied
            ("3F000", Config),    // no such schema
            ("22001", Permanent), // value too long
            ("22021", Permanent), // bad encoding (NUL byte)
            ("", Permanent),
        ] {
            assert_eq!(kind_of(code, Server::Postgres), kind, "{code}");
        }
    }

    #[test]
    fn mysql_numbers() {
        for (number, kind) in [
            (1290, Unavailable), // --read-only
            (1836, Unavailable), // read-only mode
            (1792, Unavailable), // read-only transaction
            (1040, Unavailable), // too many connections
            (1053, Unavailable), // shutdown in progress
            (1927, Unavailable), // connection killed
            (1021, Unavailable), // disk full
            (1114, Unavailable), // InnoDB: the table is full (a full disk)
            (1030, Unavailable), // got error N from storage engine
            (1026, Unavailable), // error writing file
            (1180, Unavailable), // got error during COMMIT
            (2002, Unavailable),
            (2003, Unavailable),
            (2006, Unavailable), // gone away
            (2013, Unavailable), // lost connection
            (1047, Unavailable), // Galera node not in the primary component
            (1205, Transient),   // lock wait timeout
            (1213, Transient),   // deadlock
            (3024, Transient),   // MySQL statement timeout
            (1969, Transient),   // MariaDB statement timeout
            (1062, Permanent),   // duplicate key
            (1146, Config),      // no such table
            (1054, Config),      // unknown column
            (1142, Config),      // command denied for a table
            (1044, Config),      // access denied to a database
            (1406, Permanent),   // data too long
        ] {
            assert_eq!(kind_of("HY000", Server::MySql(number)), kind, "{number}");
        }
        // The SQLSTATE still counts when the number is not listed.
        assert_eq!(kind_of("40001", Server::MySql(9999)), Transient);
        assert_eq!(kind_of("25006", Server::MySql(9999)), Unavailable);
        assert_eq!(kind_of("08S01", Server::MySql(9999)), Unavailable);
        assert_eq!(kind_of("42S02", Server::MySql(9999)), Config);
    }

    /// A missing table or column on a real SQLite: `Config` by its message, and
    /// [`is_missing_table`] agrees.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_missing_tables_and_columns_are_config() {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .unwrap();
        sqlx::raw_sql("CREATE TABLE t (a INTEGER)")
            .execute(&mut c)
            .await
            .unwrap();
        for (sql, missing_table) in [
            ("SELECT * FROM nothing_here", true),
            ("SELECT b FROM t", false),
            ("INSERT INTO t (b) VALUES (1)", false),
        ] {
            let e = sqlx::raw_sql(sql).execute(&mut c).await.unwrap_err();
            assert_eq!(error_kind(&e), Config, "{sql}: {e}");
            assert_eq!(is_missing_table(&e), missing_table, "{sql}: {e}");
        }
    }

    #[test]
    fn sqlite_codes() {
        for (code, kind) in [
            ("8", Unavailable),    // SQLITE_READONLY
            ("264", Unavailable),  // SQLITE_READONLY_RECOVERY
            ("1032", Unavailable), // SQLITE_READONLY_DBMOVED
            ("13", Unavailable),   // SQLITE_FULL
            ("14", Unavailable),   // SQLITE_CANTOPEN
            ("10", Unavailable),   // SQLITE_IOERR
            ("266", Unavailable),  // SQLITE_IOERR_READ
            ("5", Transient),      // SQLITE_BUSY
            ("6", Transient),      // SQLITE_LOCKED
            ("261", Transient),    // SQLITE_BUSY_RECOVERY
            ("262", Transient),    // SQLITE_LOCKED_SHAREDCACHE
            ("517", Transient),    // SQLITE_BUSY_SNAPSHOT
            ("773", Transient),    // SQLITE_BUSY_TIMEOUT
            ("19", Permanent),     // SQLITE_CONSTRAINT
            ("2067", Permanent),   // SQLITE_CONSTRAINT_UNIQUE
            ("1", Permanent),      // SQLITE_ERROR (a missing table: by its message, below)
            ("23", Config),        // SQLITE_AUTH
        ] {
            assert_eq!(kind_of(code, Server::Sqlite), kind, "{code}");
        }
    }

    #[test]
    fn connection_errors_are_unavailable() {
        use std::io::ErrorKind as Io;
        for e in [
            sqlx::Error::Io(Io::ConnectionRefused.into()),
            sqlx::Error::Io(Io::ConnectionReset.into()),
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
            sqlx::Error::WorkerCrashed,
        ] {
            assert_eq!(error_kind(&e), Unavailable, "{e}");
        }
        assert_eq!(error_kind(&sqlx::Error::RowNotFound), Permanent);
        assert_eq!(error_kind(&sqlx::Error::Protocol("x".into())), Transient);
        let kept = db("claim", sqlx::Error::PoolTimedOut);
        assert!(kept.is_unavailable() && kept.to_string().starts_with("claim failed"));
    }
}
