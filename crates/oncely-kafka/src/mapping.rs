//! The wire mapping: [`RawEnvelope`] ↔ Kafka record headers, key and timestamp.

use oncely_core::{MAX_MESSAGE_ID_BYTES, Meta, PayloadHash, RawEnvelope, wire};
use rdkafka::message::Headers;
use tracing::warn;

pub use oncely_core::wire::{ENTITY_HEADER, SOURCE_TIME_HEADER, VERSION_HEADER};
/// Header carrying the producer's message id (the inbox key). Required: a record without
/// it (or with an unusable value) is dead-lettered with reason `bad_id`.
pub const ID_HEADER: &str = wire::MESSAGE_ID_HEADER;

/// The headers a producer sets for `message`, as `(key, value)` pairs in order:
/// `message-id`, then [`wire::meta_headers`] (`oncely-version`, `oncely-entity`,
/// `oncely-source-time`, then `message.meta.headers`). The entity key is also the record
/// key ([`key_of`]); without `oncely-source-time` the consumer uses the record timestamp.
pub fn headers_of(message: &RawEnvelope) -> Vec<(String, Vec<u8>)> {
    let meta = wire::meta_headers(&message.meta);
    let mut out = Vec::with_capacity(1 + meta.len());
    if let Some(id) = &message.id {
        out.push((ID_HEADER.to_owned(), id.clone()));
    }
    out.extend(
        meta.into_iter()
            .map(|(k, v)| (k.to_owned(), v.into_bytes())),
    );
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

/// The headers of a record as `(key, value)` pairs, in order. rdkafka panics on a header
/// key that is not UTF-8 (`BorrowedHeaders::try_get` unwraps it): such a header is
/// skipped with a warning and the others are kept.
pub fn record_headers<H: Headers + ?Sized>(headers: &H) -> Vec<(&str, Option<&[u8]>)> {
    (0..headers.count())
        .filter_map(|i| {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| headers.try_get(i))) {
                Ok(header) => header.map(|h| (h.key, h.value)),
                Err(_) => {
                    warn!(
                        index = i,
                        "Kafka: record header key is not UTF-8; header dropped from the message metadata"
                    );
                    None
                }
            }
        })
        .collect()
}

/// The message id of a record under `id=offset`: `TOPIC/PARTITION/OFFSET`, or, when that is
/// longer than [`MAX_MESSAGE_ID_BYTES`] (topic names run to 249 bytes),
/// `#HASH/PARTITION/OFFSET` with the first 16 hex digits of SHA-256 of the topic name (`#`
/// cannot occur in a Kafka topic name, so the two forms never meet).
///
/// ```
/// use oncely_kafka::offset_id;
/// assert_eq!(offset_id("credits", 3, 42), b"credits/3/42");
/// let long = offset_id(&"t".repeat(249), i32::MAX, i64::MAX);
/// assert_eq!(long.len(), 1 + 16 + 1 + 10 + 1 + 19);
/// ```
pub fn offset_id(topic: &str, partition: i32, offset: i64) -> Vec<u8> {
    let id = format!("{topic}/{partition}/{offset}");
    if id.len() <= MAX_MESSAGE_ID_BYTES {
        return id.into_bytes();
    }
    let hash = PayloadHash::of(topic.as_bytes()).to_hex();
    format!("#{}/{partition}/{offset}", &hash[..16]).into_bytes()
}

/// Reads a record back into a [`RawEnvelope`] from its headers (`(key, value)` pairs; a
/// header without a value has `None`), payload and timestamp in Unix milliseconds.
///
/// The id is the `message-id` header's bytes as they are (validation is the runtime's: a
/// missing, empty, too long or non-UTF-8 id is dead-lettered as `bad_id`). If the header
/// appears more than once, the first one counts.
///
/// Total: a header value that is not UTF-8, an `oncely-version` that is not an `i64` or a
/// time that is not Unix milliseconds in `0..=i64::MAX` (a negative record timestamp
/// included) is dropped with a warning naming the header. The source time is
/// `oncely-source-time` if usable, else the record timestamp (create or log-append time,
/// as the topic is configured).
pub fn envelope_of<'a>(
    headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    payload: Vec<u8>,
    timestamp_ms: Option<i64>,
) -> RawEnvelope {
    let mut id = None;
    let mut meta = Meta::default();
    for (key, value) in headers {
        let Some(value) = value else { continue };
        match key {
            ID_HEADER => {
                if id.is_none() {
                    id = Some(value.to_vec());
                }
            }
            other => wire::read_header(&mut meta, other, value),
        }
    }
    meta.source_time = meta.source_time.or_else(|| {
        let ms = timestamp_ms?;
        let t = wire::time_from_unix_ms(ms);
        if t.is_none() {
            wire::dropped(
                "timestamp",
                ms.to_string().as_bytes(),
                "negative record timestamp",
            );
        }
        t
    });
    RawEnvelope { id, payload, meta }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

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
        let raw = oncely_core::wire::sample_envelope();
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
