//! The wire mapping: [`RawEnvelope`] ↔ AMQP properties and headers.

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use oncely_core::{Meta, RawEnvelope};
use std::time::{Duration, UNIX_EPOCH};

/// Header carrying the entity version.
pub const VERSION_HEADER: &str = "oncely-version";
/// Header carrying the entity key.
pub const ENTITY_HEADER: &str = "oncely-entity";
/// Header carrying the source time in Unix milliseconds (the `timestamp` property has seconds).
pub const SOURCE_TIME_HEADER: &str = "oncely-source-time";

/// Builds the properties a producer sets: `message_id`, persistent delivery mode,
/// `timestamp` (seconds) and the `oncely-*` headers.
pub fn properties_of(message: &RawEnvelope) -> BasicProperties {
    let mut props = BasicProperties::default().with_delivery_mode(2);
    if let Some(id) = &message.id {
        props = props.with_message_id(ShortString::from(String::from_utf8_lossy(id).into_owned()));
    }
    let meta = &message.meta;
    let mut headers = FieldTable::default();
    if let Some(v) = meta.version {
        headers.insert(VERSION_HEADER.into(), AMQPValue::LongLongInt(v));
    }
    if let Some(e) = &meta.entity_key {
        headers.insert(ENTITY_HEADER.into(), long_string(e));
    }
    if let Some(t) = meta.source_time {
        let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        props = props.with_timestamp(since.as_secs());
        headers.insert(
            SOURCE_TIME_HEADER.into(),
            AMQPValue::LongLongInt(since.as_millis() as i64),
        );
    }
    for (k, v) in &meta.headers {
        headers.insert(k.as_str().into(), long_string(v));
    }
    props.with_headers(headers)
}

fn long_string(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
}

fn text_of(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        AMQPValue::ByteArray(b) => Some(String::from_utf8_lossy(b.as_slice()).into_owned()),
        other => int_of(other).map(|i| i.to_string()),
    }
}

fn int_of(value: &AMQPValue) -> Option<i64> {
    match value {
        AMQPValue::ShortShortInt(i) => Some(i64::from(*i)),
        AMQPValue::ShortShortUInt(i) => Some(i64::from(*i)),
        AMQPValue::ShortInt(i) => Some(i64::from(*i)),
        AMQPValue::ShortUInt(i) => Some(i64::from(*i)),
        AMQPValue::LongInt(i) => Some(i64::from(*i)),
        AMQPValue::LongUInt(i) => Some(i64::from(*i)),
        AMQPValue::LongLongInt(i) => Some(*i),
        AMQPValue::Timestamp(t) => i64::try_from(*t).ok(),
        AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok()?.trim().parse().ok(),
        AMQPValue::ShortString(s) => s.as_str().trim().parse().ok(),
        _ => None,
    }
}

/// Reads a delivery back into a [`RawEnvelope`]. A missing `message_id` property gives
/// `id: None`, which the runtime dead-letters with reason `bad_id`.
pub fn envelope_of(props: &BasicProperties, payload: Vec<u8>) -> RawEnvelope {
    let id = props
        .message_id()
        .as_ref()
        .map(|s| s.as_str().as_bytes().to_vec());
    let mut meta = Meta::default();
    if let Some(t) = props.timestamp() {
        meta.source_time = Some(UNIX_EPOCH + Duration::from_secs(*t));
    }
    if let Some(headers) = props.headers() {
        for (k, v) in headers {
            match k.as_str() {
                VERSION_HEADER => meta.version = int_of(v),
                ENTITY_HEADER => meta.entity_key = text_of(v),
                SOURCE_TIME_HEADER => {
                    if let Some(ms) = int_of(v).and_then(|ms| u64::try_from(ms).ok()) {
                        meta.source_time = Some(UNIX_EPOCH + Duration::from_millis(ms));
                    }
                }
                other => {
                    if let Some(text) = text_of(v) {
                        meta.headers.insert(other.to_owned(), text);
                    }
                }
            }
        }
    }
    RawEnvelope { id, payload, meta }
}

/// The broker's delivery count: `x-delivery-count` + 1 on quorum queues, else 2 for a
/// redelivery and 1 for a first delivery (classic queues only say "redelivered").
pub fn attempt_of(props: &BasicProperties, redelivered: bool) -> u32 {
    let counted = props
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("x-delivery-count"))
        .and_then(int_of)
        .and_then(|n| u32::try_from(n).ok());
    match counted {
        Some(n) => n + 1,
        None if redelivered => 2,
        None => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_id_and_meta() {
        let mut raw = RawEnvelope::new("m-1", br#"{"account":"acct-17","amount":5}"#.to_vec());
        raw.meta.version = Some(7);
        raw.meta.entity_key = Some("acct-17".into());
        raw.meta.source_time = Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123));
        raw.meta.headers.insert("trace".into(), "abc".into());
        let props = properties_of(&raw);
        let back = envelope_of(&props, raw.payload.clone());
        assert_eq!(back, raw);
        assert_eq!(attempt_of(&props, false), 1);
        assert_eq!(attempt_of(&props, true), 2);
    }

    #[test]
    fn missing_id_stays_missing() {
        let raw = RawEnvelope {
            id: None,
            payload: b"x".to_vec(),
            meta: Meta::default(),
        };
        let back = envelope_of(&properties_of(&raw), raw.payload.clone());
        assert_eq!(back.id, None);
    }
}
