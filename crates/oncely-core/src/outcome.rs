//! What happened to one delivery: [`Outcome`] and the [`DeadLetterReason`].

use crate::envelope::PayloadHash;
use crate::error::Error;
use crate::id::IdError;
use std::fmt;
use std::time::Duration;

/// Why a message went to the dead-letter table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadLetterReason {
    /// The delivery had no usable id.
    BadId(IdError),
    /// The id was already processed with a different payload.
    Conflict {
        /// Hash recorded in the inbox by the copy that was applied.
        stored: PayloadHash,
        /// Hash of this copy.
        received: PayloadHash,
    },
    /// The handler returned a permanent error.
    Permanent(String),
    /// Transient failures went on past the configured attempts.
    AttemptsExhausted {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last_error: String,
    },
    /// The handler panicked.
    Panicked(String),
    /// The source timestamp is older than the retention window: its id may have been pruned,
    /// so applying it could apply a duplicate.
    Late {
        /// Age of the message at receipt.
        age: Duration,
        /// The retention window it exceeded.
        window: Duration,
    },
    /// The broker's envelope could not be mapped (a header or property the source could not
    /// read, or a panic while reading it): the payload is kept as delivered.
    UndecodableEnvelope(String),
    /// The payload could not be decoded into the handler's type ([`crate::Json`], or a
    /// handler returning [`crate::Error::undecodable`]).
    UndecodablePayload(String),
}

impl DeadLetterReason {
    /// A short, stable code stored in the `reason` column.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadId(_) => "bad_id",
            Self::Conflict { .. } => "conflict",
            Self::Permanent(_) => "permanent",
            Self::AttemptsExhausted { .. } => "attempts_exhausted",
            Self::Panicked(_) => "panic",
            Self::Late { .. } => "late",
            Self::UndecodableEnvelope(_) => "undecodable_envelope",
            Self::UndecodablePayload(_) => "undecodable_payload",
        }
    }
}

impl fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadId(e) => write!(f, "unusable message id: {e}"),
            Self::Conflict { stored, received } => write!(
                f,
                "same id, different payload: inbox holds payload sha256 {stored}, this delivery has {received}; not applied"
            ),
            Self::Permanent(e) => write!(f, "handler failed permanently: {e}"),
            Self::AttemptsExhausted {
                attempts,
                last_error,
            } => write!(f, "gave up after {attempts} attempts: {last_error}"),
            Self::Panicked(msg) => write!(f, "handler panicked: {msg}"),
            Self::Late { age, window } => write!(
                f,
                "late message: source time is {}s old, beyond the {}s retention window; its id may have been pruned, so it was quarantined instead of applied",
                age.as_secs(),
                window.as_secs()
            ),
            Self::UndecodableEnvelope(why) => write!(f, "undecodable envelope: {why}"),
            Self::UndecodablePayload(why) => write!(f, "undecodable payload: {why}"),
        }
    }
}

/// What the consumer did with one delivery.
#[derive(Debug)]
pub enum Outcome {
    /// The effect was applied and committed; the delivery was acked.
    Applied,
    /// The id was already processed with the same payload: nothing applied, acked.
    Duplicate,
    /// The id was already processed with another payload: not applied, dead-lettered, acked.
    Conflict {
        /// Hash recorded in the inbox.
        stored: PayloadHash,
        /// Hash of this delivery.
        received: PayloadHash,
    },
    /// A versioned apply found a newer version already applied: no effect, acked.
    Stale,
    /// A transient failure that could not be resolved now: rolled back, not acked; the broker redelivers.
    Retry(Error),
    /// Stored in the dead-letter table with a reason, then acked.
    DeadLettered(DeadLetterReason),
    /// Processing panicked outside the handler (a store or source bug, or a crash injected
    /// by `oncely-testkit`'s chaos wrappers): the transaction rolled back and the delivery was
    /// left unsettled, as a killed process leaves it, so the broker redelivers it.
    Abandoned,
}

impl Outcome {
    /// A short name, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::Duplicate => "duplicate",
            Self::Conflict { .. } => "conflict",
            Self::Stale => "stale",
            Self::Retry(_) => "retry",
            Self::DeadLettered(_) => "dead_lettered",
            Self::Abandoned => "abandoned",
        }
    }
}

/// What a handler reports after writing its effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// The effect was written.
    Applied,
    /// The message was older than what is stored (see versioned apply): nothing written.
    Stale,
}
