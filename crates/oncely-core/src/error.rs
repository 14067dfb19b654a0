//! One error type for oncely, with a [`ErrorKind`] that tells transient from permanent.

use std::fmt;

/// Boxed error source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What kind of failure an [`Error`] is; decides retry vs. dead-letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// May succeed if tried again (connection lost, deadlock, timeout): roll back and retry.
    Transient,
    /// Will fail again (bad payload, business rule): dead-letter at once.
    Permanent,
    /// The configuration is wrong (bad URL, bad table name): fix and restart.
    Config,
    /// The store (or another dependency) is not available at all: read-only after a failover,
    /// shutting down, disk full, out of connections, connection refused or reset. No message
    /// is at fault, so the runtime holds the delivery, backs off and pauses intake instead of
    /// retrying, dead-lettering or handing it back to the broker.
    Unavailable,
    /// The payload cannot be decoded into the handler's type (see [`crate::Json`]): it will
    /// never succeed, so the runtime dead-letters it at once with reason `undecodable_payload`.
    Undecodable,
}

/// An oncely error: a kind, a message, and an optional source.
///
/// ```
/// use oncely_core::{Error, ErrorKind};
/// let e = Error::transient("database is restarting");
/// assert_eq!(e.kind(), ErrorKind::Transient);
/// assert!(e.is_transient());
/// ```
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<BoxError>,
}

impl Error {
    /// A new error of a kind.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A transient error: the runtime rolls back and retries with backoff.
    pub fn transient(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Transient, message.to_string())
    }

    /// A permanent error: the runtime rolls back and dead-letters the message.
    pub fn permanent(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Permanent, message.to_string())
    }

    /// The store or a dependency is not available (see [`ErrorKind::Unavailable`]).
    ///
    /// ```
    /// let e = oncely_core::Error::unavailable("database is read-only");
    /// assert!(e.is_unavailable());
    /// ```
    pub fn unavailable(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Unavailable, message.to_string())
    }

    /// A payload that cannot be decoded: dead-lettered as `undecodable_payload`.
    ///
    /// ```
    /// let e = oncely_core::Error::undecodable("expected an object at line 1");
    /// assert_eq!(e.kind(), oncely_core::ErrorKind::Undecodable);
    /// ```
    pub fn undecodable(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Undecodable, message.to_string())
    }

    /// A configuration error.
    pub fn config(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Config, message.to_string())
    }

    /// Attaches the underlying error.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// This error inside one that says what was being done: the same kind (a transient
    /// failure stays retried), this error as its source.
    ///
    /// ```
    /// let e = oncely_core::Error::transient("connection reset").context("reading the inbox");
    /// assert!(e.is_transient());
    /// assert_eq!(e.to_string(), "reading the inbox: connection reset");
    /// ```
    pub fn context(self, doing: impl Into<String>) -> Self {
        Self::new(self.kind, doing).with_source(self)
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// True for [`ErrorKind::Transient`].
    pub fn is_transient(&self) -> bool {
        self.kind == ErrorKind::Transient
    }

    /// True for [`ErrorKind::Unavailable`].
    pub fn is_unavailable(&self) -> bool {
        self.kind == ErrorKind::Unavailable
    }

    /// The message, without the source chain.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({:?}, {self})", self.kind)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Result with oncely's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<crate::id::IdError> for Error {
    /// An unusable id or consumer name is permanent: retrying cannot fix it.
    fn from(e: crate::id::IdError) -> Self {
        Error::new(ErrorKind::Permanent, e.to_string()).with_source(e)
    }
}
