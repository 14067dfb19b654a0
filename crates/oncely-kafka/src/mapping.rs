//! The wire mapping: [`RawEnvelope`] ↔ Kafka record headers, key and timestamp.

use oncely_core::{Meta, RawEnvelope};
use std::time::{Duration, UNIX_EPOCH};

/// Header carrying the producer's message id (the inbox key). Required: a record without
/// it (or with an unusable value) is dead-lettered with reason `bad_id`.
pub const ID_HEADER: &str = "message-id";
/// Header carrying the entity version (decimal).
pub const VERSION_HEADER: &str = "oncely-version";
/// Header carrying the entity key (also used as the record key, so that one entity's
/// messages stay in one partition, in order).
pub const ENTITY_HEADER: &str = "oncely-entity";
/// Header carrying the source time in Unix milliseconds (decimal). Without it, the
/// record's own timestamp is used.
pub const SOURCE_TIME_HEADER: &str = "oncely-source-time";

/// The headers a producer sets for `message`, as `(key, value)` pairs in order:
/// `message-id`, `oncely-version`, `oncely-entity`, `oncely-source-time`, then
/// `message.meta.headers`.
pub fn headers_of(message: &RawEnvelope) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    if let Some(id) = &message.id {
        out.push((ID_HEADER.to_owned(), id.clone()));
    }
    let meta = &message.meta;
    if let Some(v) = meta.version {
        out.push((VERSION_HEADER.to_owned(), v.to_string().into_bytes()));
    }
    if let Some(e) = &meta.entity_key {
        out.push((ENTITY_HEADER.to_owned(), e.clone().into_bytes()));
    }
    if let Some(t) = meta.source_time {
        let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
        out.push((SOURCE_TIME_HEADER.to_owned(), ms.to_string().into_bytes()));
    }
    for (k, v) in &meta.headers {
        out.push((k.clone(), v.clone().into_bytes()));
    }
    out
}

/// The record key a producer sets: the entity key if there is one, else the message id
/// (so that copies of one message land in one partition).
pub fn key_of(message: &RawEnvelope) -> Option<Vec<u8>> {
    message
        .meta
        .entity_key
        .as_ref()
        .map(|e| e.clone().into_bytes())
        .or_else(|| message.id.clone())
}

fn text(value: &[u8]) -> Option<&str> {
    std::str::from_utf8(value).ok().map(str::trim)
}

/// Reads a record back into a [`RawEnvelope`] from its headers (`(key, value)` pairs; a
/// header without a value has `None`), payload and timestamp in Unix milliseconds.
///
/// The id is the `message-id` header's bytes as they are (validation is the runtime's: a
/// missing, empty, too long or non-UTF-8 id is dead-lettered as `bad_id`). If the header
/// appears more than once, the first one counts.
pub fn envelope_of<'a>(
    headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    payload: Vec<u8>,
    timestamp_ms: Option<i64>,
) -> RawEnvelope {
    let mut id = None;
    let mut meta = Meta {
        source_time: timestamp_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        ..Meta::default()
    };
    for (key, value) in headers {
        let Some(value) = value else { continue };
        match key {
            ID_HEADER => {
                if id.is_none() {
                    id = Some(value.to_vec());
                }
            }
            VERSION_HEADER => meta.version = text(value).and_then(|t| t.parse().ok()),
            ENTITY_HEADER => meta.entity_key = text(value).map(str::to_owned),
            SOURCE_TIME_HEADER => {
                if let Some(ms) = text(value).and_then(|t| t.parse::<u64>().ok()) {
                    meta.source_time = Some(UNIX_EPOCH + Duration::from_millis(ms));
                }
            }
            other => {
                meta.headers.insert(
                    other.to_owned(),
                    String::from_utf8_lossy(value).into_owned(),
                );
            }
        }
    }
    RawEnvelope { id, payload, meta }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(raw: &RawEnvelope, ts: Option<i64>) -> RawEnvelope {
        let headers = headers_of(raw);
        envelope_of(
            headers
                .iter()
                .map(|(k, v)| (k.as_str(), Some(v.as_slice()))),
            raw.payload.clone(),
            ts,
        )
    }

    #[test]
    fn round_trips_id_and_meta() {
        let mut raw = RawEnvelope::new("m-1", br#"{"account":"acct-17","amount":5}"#.to_vec());
        raw.meta.version = Some(7);
        raw.meta.entity_key = Some("acct-17".into());
        raw.meta.source_time = Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123));
        raw.meta.headers.insert("trace".into(), "abc".into());
        assert_eq!(
            round_trip(&raw, Some(5)),
            raw,
            "the header wins over the timestamp"
        );
        assert_eq!(key_of(&raw).as_deref(), Some(&b"acct-17"[..]));
    }

    #[test]
    fn record_timestamp_is_the_fallback_source_time() {
        let raw = RawEnvelope::new("m-2", b"x".to_vec());
        let back = round_trip(&raw, Some(1_700_000_000_000));
        assert_eq!(
            back.meta.source_time,
            Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_000))
        );
        assert_eq!(key_of(&raw).as_deref(), Some(&b"m-2"[..]));
    }

    #[test]
    fn missing_or_invalid_id_is_kept_for_the_runtime_to_reject() {
        let none = envelope_of([("other", Some(&b"v"[..]))], b"p".to_vec(), None);
        assert_eq!(none.id, None);
        let null = envelope_of([(ID_HEADER, None)], b"p".to_vec(), None);
        assert_eq!(null.id, None);
        let bad = envelope_of([(ID_HEADER, Some(&b"\xff\xfe"[..]))], b"p".to_vec(), None);
        assert_eq!(bad.id.as_deref(), Some(&b"\xff\xfe"[..]));
        assert!(oncely_core::MessageId::parse_optional(bad.id.as_deref()).is_err());
    }
}
