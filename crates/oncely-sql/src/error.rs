//! Maps sqlx errors onto oncely's transient / permanent kinds, without leaking credentials.

use oncely_core::{Error, ErrorKind};

/// SQLSTATEs (and SQLite result codes) that mean "try again": serialization failure, deadlock,
/// lock timeout, server shutting down, too many connections, connection failures, SQLite
/// busy/locked.
const TRANSIENT_CODES: &[&str] = &[
    "40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300", "08000", "08003", "08006", "5",
    "6", "261", "262", "517", "773",
];

/// MySQL / MariaDB error numbers that mean "try again". Their SQLSTATE is often the generic
/// `HY000` (1205 lock wait timeout), so the number decides: 1213 deadlock, 1205 lock wait
/// timeout, 1040 too many connections, 1053 server shutdown, 1927 connection killed,
/// 2006 server gone away, 2013 connection lost during query.
const TRANSIENT_MYSQL_NUMBERS: &[u16] = &[1213, 1205, 1040, 1053, 1927, 2006, 2013];

/// The kind of a database error from its SQLSTATE and, for MySQL/MariaDB, its error number.
pub(crate) fn kind_of(code: &str, mysql_number: Option<u16>) -> ErrorKind {
    let transient = TRANSIENT_CODES.contains(&code)
        || code.starts_with("08")
        || mysql_number.is_some_and(|n| TRANSIENT_MYSQL_NUMBERS.contains(&n));
    if transient {
        ErrorKind::Transient
    } else {
        ErrorKind::Permanent
    }
}

/// Wraps a sqlx error with what was being done, classified transient (deadlock, lock
/// timeout, serialization failure, lost connection, SQLite busy) or permanent. Handlers
/// writing their effects through sqlx can use it so the runtime retries the right errors.
pub fn db(doing: &str, e: sqlx::Error) -> Error {
    let kind = match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => ErrorKind::Transient,
        sqlx::Error::Database(db) => {
            let code = db.code();
            let number = db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(|m| m.number());
            kind_of(code.as_deref().unwrap_or(""), number)
        }
        sqlx::Error::Configuration(_) => ErrorKind::Config,
        _ => ErrorKind::Permanent,
    };
    Error::new(kind, format!("{doing} failed")).with_source(e)
}

/// The URL with any password replaced by `***`, safe for logs and errors.
///
/// ```
/// assert_eq!(
///     oncely_sql::redact_url("postgres://app:s3cret@db:5432/x"),
///     "postgres://app:***@db:5432/x"
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                user.to_owned()
            };
            format!("{scheme}://{masked}@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_codes_are_transient() {
        for code in [
            "40001", "40P01", "55P03", "57P01", "08006", "08P01", "5", "517",
        ] {
            assert_eq!(kind_of(code, None), ErrorKind::Transient, "{code}");
        }
        for number in [1213, 1205, 2006, 2013] {
            assert_eq!(
                kind_of("HY000", Some(number)),
                ErrorKind::Transient,
                "{number}"
            );
        }
    }

    #[test]
    fn other_codes_are_permanent() {
        for code in ["23505", "42P01", "22001", "HY000", ""] {
            assert_eq!(kind_of(code, None), ErrorKind::Permanent, "{code}");
        }
        // 1062 duplicate key, 1146 no such table: retrying cannot help.
        for number in [1062, 1146] {
            assert_eq!(
                kind_of("23000", Some(number)),
                ErrorKind::Permanent,
                "{number}"
            );
        }
    }
}
