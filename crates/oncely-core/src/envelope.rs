//! The message as the consumer sees it: [`Envelope`] (validated) and [`RawEnvelope`]
//! (as a broker delivered it), plus the payload fingerprint [`PayloadHash`].

use crate::id::{IdError, MessageId};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::time::SystemTime;

/// SHA-256 of a payload. Two deliveries with one id and different hashes are a conflict.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PayloadHash([u8; 32]);

impl PayloadHash {
    /// Hashes a payload.
    pub fn of(payload: &[u8]) -> Self {
        Self(Sha256::digest(payload).into())
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Rebuilds a hash from 32 stored bytes.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    /// Lower-case hex, as stored in the inbox and dead-letter tables.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex digits.
    pub fn from_hex(text: &str) -> Option<Self> {
        hex::decode(text).ok().and_then(|b| Self::from_bytes(&b))
    }
}

impl fmt::Display for PayloadHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for PayloadHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PayloadHash({})", &self.to_hex()[..12])
    }
}

/// Metadata a producer may attach besides id and payload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// Key of the entity the message is about (for versioned apply and per-entity order).
    pub entity_key: Option<String>,
    /// Version of the entity this message carries (higher is newer).
    pub version: Option<i64>,
    /// When the event happened at the source.
    pub source_time: Option<SystemTime>,
    /// Other headers, passed through to the handler.
    pub headers: BTreeMap<String, String>,
}

/// A message with a usable id, as handlers receive it.
///
/// ```
/// use oncely_core::Envelope;
/// let msg = Envelope::new("m-1", br#"{"account":"a","amount":5}"#.to_vec()).unwrap()
///     .with_entity("a")
///     .with_version(3);
/// assert_eq!(msg.id().as_str(), "m-1");
/// assert_eq!(msg.meta().version, Some(3));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    id: MessageId,
    payload: Vec<u8>,
    hash: PayloadHash,
    meta: Meta,
}

impl Envelope {
    /// Builds an envelope, validating the id.
    pub fn new(id: impl AsRef<str>, payload: Vec<u8>) -> Result<Self, IdError> {
        Ok(Self::from_parts(
            MessageId::new(id)?,
            payload,
            Meta::default(),
        ))
    }

    /// Builds an envelope from an already validated id.
    pub fn from_parts(id: MessageId, payload: Vec<u8>, meta: Meta) -> Self {
        let hash = PayloadHash::of(&payload);
        Self {
            id,
            payload,
            hash,
            meta,
        }
    }

    /// Sets the entity key.
    pub fn with_entity(mut self, key: impl Into<String>) -> Self {
        self.meta.entity_key = Some(key.into());
        self
    }

    /// Sets the entity version.
    pub fn with_version(mut self, version: i64) -> Self {
        self.meta.version = Some(version);
        self
    }

    /// Sets the source timestamp.
    pub fn with_source_time(mut self, at: SystemTime) -> Self {
        self.meta.source_time = Some(at);
        self
    }

    /// The producer-set id.
    pub fn id(&self) -> &MessageId {
        &self.id
    }

    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// SHA-256 of the payload.
    pub fn payload_hash(&self) -> PayloadHash {
        self.hash
    }

    /// Entity key, version, source time and headers.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// Turns the envelope back into its raw form (for dead-lettering and re-publishing).
    pub fn into_raw(self) -> RawEnvelope {
        RawEnvelope {
            id: Some(self.id.as_str().as_bytes().to_vec()),
            payload: self.payload,
            meta: self.meta,
        }
    }
}

/// A message as a broker delivered it: the id is not yet validated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawEnvelope {
    /// The id bytes, if the message carried any.
    pub id: Option<Vec<u8>>,
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// Entity key, version, source time, headers.
    pub meta: Meta,
}

impl RawEnvelope {
    /// A raw message with a text id.
    pub fn new(id: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        Self {
            id: Some(id.into().into_bytes()),
            payload: payload.into(),
            meta: Meta::default(),
        }
    }

    /// Validates the id into an [`Envelope`]; the raw message stays usable for dead-lettering.
    pub fn to_envelope(&self) -> Result<Envelope, IdError> {
        let id = MessageId::parse_optional(self.id.as_deref())?;
        Ok(Envelope::from_parts(
            id,
            self.payload.clone(),
            self.meta.clone(),
        ))
    }

    /// The id shown for humans: lossy UTF-8, control characters escaped, cut to 255 bytes.
    pub fn display_id(&self) -> Option<String> {
        self.id.as_ref().map(|raw| {
            let text: String = String::from_utf8_lossy(raw).escape_debug().collect();
            let mut cut = text.len().min(crate::id::MAX_MESSAGE_ID_BYTES);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text[..cut].to_owned()
        })
    }
}
