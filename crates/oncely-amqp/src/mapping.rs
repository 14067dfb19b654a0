//! The wire mapping: [`RawEnvelope`] ↔ AMQP properties and headers.

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use oncely_core::{Error, Meta, RawEnvelope, Result, wire};
use std::time::UNIX_EPOCH;
use tracing::debug;

pub use oncely_core::wire::{ENTITY_HEADER, SOURCE_TIME_HEADER, VERSION_HEADER};

/// Builds the properties a producer sets: `message_id`, persistent delivery mode,
/// `timestamp` (seconds) and the `oncely-*` headers. Fails for what an AMQP short string
/// cannot carry (an id or a header name longer than 255 bytes) instead of panicking.
pub fn properties_of(message: &RawEnvelope) -> Result<BasicProperties> {
    let short = |what: &str, s: String| {
        let len = s.len();
        ShortString::try_new(s).map_err(|_| {
            Error::permanent(format!(
                "AMQP {what} is {len} bytes; a short string holds at most 255"
            ))
        })
    };
    let mut props = BasicProperties::default().with_delivery_mode(2);
    if let Some(id) = &message.id {
        let id = String::from_utf8_lossy(id).into_owned();
        props = props.with_message_id(short("message_id", id)?);
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
        let ms = i64::try_from(since.as_millis()).unwrap_or(i64::MAX);
        headers.insert(SOURCE_TIME_HEADER.into(), AMQPValue::LongLongInt(ms));
    }
    for (k, v) in &meta.headers {
        headers.insert(short("header name", k.clone())?, long_string(v));
    }
    Ok(props.with_headers(headers))
}

fn long_string(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
}

/// A header value as text: strings must be UTF-8; integers, booleans and floats are
/// written in decimal. `Err` says why the value cannot be text.
fn text_of(value: &AMQPValue) -> std::result::Result<String, &'static str> {
    let utf8 = |b: &[u8]| {
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| "not UTF-8")
    };
    match value {
        AMQPValue::LongString(s) => utf8(s.as_bytes()),
        AMQPValue::ShortString(s) => Ok(s.as_str().to_owned()),
        AMQPValue::ByteArray(b) => utf8(b.as_slice()),
        AMQPValue::Boolean(b) => Ok(b.to_string()),
        AMQPValue::Float(f) => Ok(f.to_string()),
        AMQPValue::Double(f) => Ok(f.to_string()),
        other => int_of(other).map(|i| i.to_string()),
    }
}

/// A header value as an integer: AMQP integer types, a timestamp below 2^63, or decimal
/// text. `Err` says why not.
fn int_of(value: &AMQPValue) -> std::result::Result<i64, &'static str> {
    let parsed = |t: Option<&str>| {
        t.and_then(|t| t.trim().parse().ok())
            .ok_or("not a decimal i64")
    };
    match value {
        AMQPValue::ShortShortInt(i) => Ok(i64::from(*i)),
        AMQPValue::ShortShortUInt(i) => Ok(i64::from(*i)),
        AMQPValue::ShortInt(i) => Ok(i64::from(*i)),
        AMQPValue::ShortUInt(i) => Ok(i64::from(*i)),
        AMQPValue::LongInt(i) => Ok(i64::from(*i)),
        AMQPValue::LongUInt(i) => Ok(i64::from(*i)),
        AMQPValue::LongLongInt(i) => Ok(*i),
        AMQPValue::Timestamp(t) => i64::try_from(*t).map_err(|_| "beyond i64"),
        AMQPValue::LongString(s) => parsed(std::str::from_utf8(s.as_bytes()).ok()),
        AMQPValue::ShortString(s) => parsed(Some(s.as_str())),
        _ => Err("not an integer type"),
    }
}

/// The bytes of a value, for the warning about dropping it.
fn shown(value: &AMQPValue) -> Vec<u8> {
    match value {
        AMQPValue::LongString(s) => s.as_bytes().to_vec(),
        AMQPValue::ByteArray(b) => b.as_slice().to_vec(),
        other => format!("{other:?}").into_bytes(),
    }
}

/// Reads a delivery back into a [`RawEnvelope`]. A missing `message_id` property gives
/// `id: None`, which the runtime dead-letters with reason `bad_id`.
///
/// Total: any properties map. A value that does not fit `Meta` (a `timestamp` or
/// `oncely-source-time` beyond `i64::MAX` ms, an `oncely-version` that is not an integer,
/// a string that is not UTF-8) is dropped with a warning naming the header; headers that
/// are tables, arrays, decimals or void are not passed through (logged at DEBUG). The
/// source time is `oncely-source-time` if usable, else the `timestamp` property.
pub fn envelope_of(props: &BasicProperties, payload: Vec<u8>) -> RawEnvelope {
    let id = props
        .message_id()
        .as_ref()
        .map(|s| s.as_str().as_bytes().to_vec());
    let mut meta = Meta::default();
    if let Some(t) = props.timestamp() {
        meta.source_time = wire::time_from_unix_secs(*t);
        if meta.source_time.is_none() {
            wire::dropped("timestamp", t.to_string().as_bytes(), "time out of range");
        }
    }
    let Some(headers) = props.headers() else {
        return RawEnvelope { id, payload, meta };
    };
    for (k, v) in headers {
        let name = k.as_str();
        let drop = |why| wire::dropped(name, &shown(v), why);
        match name {
            VERSION_HEADER => match int_of(v) {
                Ok(version) => meta.version = Some(version),
                Err(why) => drop(why),
            },
            ENTITY_HEADER => match text_of(v) {
                Ok(key) => meta.entity_key = Some(key),
                Err(why) => drop(why),
            },
            SOURCE_TIME_HEADER => match int_of(v).map(wire::time_from_unix_ms) {
                Ok(Some(t)) => meta.source_time = Some(t),
                Ok(None) => drop("time out of range"),
                Err(why) => drop(why),
            },
            other => match text_of(v) {
                Ok(text) => {
                    meta.headers.insert(other.to_owned(), text);
                }
                Err(why @ "not UTF-8") => drop(why),
                Err(why) => debug!(header = other, "broker envelope: {why}; not passed through"),
            },
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
        .and_then(|v| int_of(v).ok())
        .and_then(|n| u32::try_from(n).ok());
    match counted {
        Some(n) => n.saturating_add(1),
        None if redelivered => 2,
        None => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_id_and_meta() {
        let raw = oncely_core::wire::sample_envelope();
        let props = properties_of(&raw).unwrap();
        let back = envelope_of(&props, raw.payload.clone());
        assert_eq!(back, raw);
        assert_eq!(attempt_of(&props, false), 1);
        assert_eq!(attempt_of(&props, true), 2);
    }

    #[test]
    fn producer_refuses_what_a_short_string_cannot_carry() {
        // 100 invalid bytes become 300 bytes of U+FFFD: this used to panic in lapin.
        let raw = RawEnvelope {
            id: Some(vec![0xff; 100]),
            payload: b"x".to_vec(),
            meta: Meta::default(),
        };
        assert!(properties_of(&raw).is_err());
        let mut raw = RawEnvelope::new("m-1", "x");
        raw.meta.headers.insert("h".repeat(256), "v".into());
        assert!(properties_of(&raw).is_err());
    }

    #[test]
    fn missing_id_stays_missing() {
        let raw = RawEnvelope {
            id: None,
            payload: b"x".to_vec(),
            meta: Meta::default(),
        };
        let back = envelope_of(&properties_of(&raw).unwrap(), raw.payload.clone());
        assert_eq!(back.id, None);
    }
}
