//! Maps sqlx errors onto oncely's transient / permanent kinds, without leaking credentials.

use oncely_core::{Error, ErrorKind};

/// SQLSTATEs and vendor codes that mean "try again": serialization failure, deadlock,
/// lock timeout, server shutting down, connection failures, SQLite busy/locked.
const TRANSIENT_CODES: &[&str] = &[
    "40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300", "08000", "08003", "08006",
    "1213", "1205", "2006", "2013", "5", "6", "261", "262", "517", "773",
];

/// Wraps a sqlx error with what oncely was doing.
pub(crate) fn db(doing: &str, e: sqlx::Error) -> Error {
    let kind = match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => ErrorKind::Transient,
        sqlx::Error::Database(db) => {
            let code = db.code();
            let code = code.as_deref().unwrap_or("");
            if TRANSIENT_CODES.contains(&code) || code.starts_with("08") {
                ErrorKind::Transient
            } else {
                ErrorKind::Permanent
            }
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
