//! Validated identifiers: the producer-set [`MessageId`] and the [`ConsumerName`].

use std::fmt;

/// Longest message id accepted, in bytes.
pub const MAX_MESSAGE_ID_BYTES: usize = 255;
/// Longest consumer name accepted, in bytes.
pub const MAX_CONSUMER_NAME_BYTES: usize = 128;

/// Why a delivery's id (or a consumer name) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The delivery carried no id at all.
    #[error("message id is missing: the producer must set a stable id on every message")]
    Missing,
    /// The id was present but empty.
    #[error("message id is empty")]
    Empty,
    /// The id is longer than the limit.
    #[error("message id is {len} bytes long; the limit is {max}")]
    TooLong {
        /// Length received, in bytes.
        len: usize,
        /// The limit, in bytes.
        max: usize,
    },
    /// The id is not valid UTF-8.
    #[error("message id is not valid UTF-8 (invalid byte at offset {offset})")]
    NotUtf8 {
        /// Offset of the first invalid byte.
        offset: usize,
    },
    /// The id contains a control character.
    #[error("message id contains a control character at byte {index}")]
    ControlChar {
        /// Byte offset of the control character.
        index: usize,
    },
}

fn validate(raw: &[u8], max: usize) -> Result<&str, IdError> {
    if raw.is_empty() {
        return Err(IdError::Empty);
    }
    if raw.len() > max {
        return Err(IdError::TooLong {
            len: raw.len(),
            max,
        });
    }
    let text = std::str::from_utf8(raw).map_err(|e| IdError::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    if let Some((index, _)) = text.char_indices().find(|(_, c)| c.is_control()) {
        return Err(IdError::ControlChar { index });
    }
    Ok(text)
}

/// A message id set by the producer, stable across redeliveries.
///
/// Valid ids are 1..=255 bytes of UTF-8 without control characters.
///
/// ```
/// use oncely_core::MessageId;
/// let id = MessageId::new("order-42:created").unwrap();
/// assert_eq!(id.as_str(), "order-42:created");
/// assert!(MessageId::new("").is_err());
/// assert!(MessageId::parse(b"\xff").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(String);

impl MessageId {
    /// Validates an id given as text.
    pub fn new(id: impl AsRef<str>) -> Result<Self, IdError> {
        Self::parse(id.as_ref().as_bytes())
    }

    /// Validates an id given as raw bytes, as brokers deliver it.
    pub fn parse(raw: &[u8]) -> Result<Self, IdError> {
        validate(raw, MAX_MESSAGE_ID_BYTES).map(|s| Self(s.to_owned()))
    }

    /// Validates an optional raw id: `None` is [`IdError::Missing`].
    pub fn parse_optional(raw: Option<&[u8]>) -> Result<Self, IdError> {
        raw.map_or(Err(IdError::Missing), Self::parse)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageId({:?})", self.0)
    }
}

/// The name of a consumer: the inbox key is `(consumer, message_id)`, so several
/// consumers can each process the same message once.
///
/// ```
/// use oncely_core::ConsumerName;
/// let name = ConsumerName::new("billing").unwrap();
/// assert_eq!(name.as_str(), "billing");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct ConsumerName(String);

impl ConsumerName {
    /// Validates a consumer name (1..=128 bytes of UTF-8, no control characters).
    pub fn new(name: impl AsRef<str>) -> Result<Self, IdError> {
        validate(name.as_ref().as_bytes(), MAX_CONSUMER_NAME_BYTES).map(|s| Self(s.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What [`crate::Consumer::new`] takes as its name: a [`ConsumerName`], or text that is
/// validated on the spot (`Consumer::new("billing", store, handler)`).
///
/// Text is meant for names written in the code, like a route in axum's `Router::route` or
/// `HeaderName::from_static`: an invalid one is a programming error and panics with the
/// reason. A name read at run time (configuration, arguments) goes through
/// [`ConsumerName::new`] first, which returns the error instead.
pub trait IntoConsumerName {
    /// The validated name.
    ///
    /// # Panics
    ///
    /// If the text is not a valid consumer name (empty, longer than
    /// [`MAX_CONSUMER_NAME_BYTES`], or with control characters).
    fn into_consumer_name(self) -> ConsumerName;
}

impl IntoConsumerName for ConsumerName {
    fn into_consumer_name(self) -> ConsumerName {
        self
    }
}

impl IntoConsumerName for &ConsumerName {
    fn into_consumer_name(self) -> ConsumerName {
        self.clone()
    }
}

impl IntoConsumerName for &str {
    fn into_consumer_name(self) -> ConsumerName {
        ConsumerName::new(self).unwrap_or_else(|e| {
            panic!(
                "invalid consumer name {self:?}: {e} (ConsumerName::new returns this as an error \
                 for names read at run time)"
            )
        })
    }
}

impl IntoConsumerName for &String {
    fn into_consumer_name(self) -> ConsumerName {
        self.as_str().into_consumer_name()
    }
}

impl IntoConsumerName for String {
    fn into_consumer_name(self) -> ConsumerName {
        self.as_str().into_consumer_name()
    }
}

impl fmt::Display for ConsumerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_each_kind_of_bad_id() {
        assert_eq!(MessageId::parse_optional(None), Err(IdError::Missing));
        assert_eq!(MessageId::parse(b""), Err(IdError::Empty));
        assert_eq!(
            MessageId::parse(&[b'a'; 256]),
            Err(IdError::TooLong { len: 256, max: 255 })
        );
        assert!(MessageId::parse(&[b'a'; 255]).is_ok());
        assert_eq!(
            MessageId::parse(b"ab\xffcd"),
            Err(IdError::NotUtf8 { offset: 2 })
        );
        assert_eq!(
            MessageId::parse(b"ab\ncd"),
            Err(IdError::ControlChar { index: 2 })
        );
    }

    proptest! {
        #[test]
        fn valid_ids_round_trip(s in "[^\\p{Cc}]{1,60}") {
            let id = MessageId::new(&s).unwrap();
            prop_assert_eq!(id.as_str(), s.as_str());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(id) = MessageId::parse(&bytes) {
                prop_assert!(id.as_str().len() <= MAX_MESSAGE_ID_BYTES);
                prop_assert!(!id.as_str().chars().any(char::is_control));
            }
        }
    }
}
