//! The wire mapping: [`RawEnvelope`] ↔ Redis stream entry fields.

use oncely_core::{Meta, RawEnvelope, wire};
use redis::Value;
use std::collections::HashMap;
use std::time::SystemTime;

/// Field carrying the producer-set message id (the entry id is the broker's, not the producer's).
pub const ID_FIELD: &str = wire::MESSAGE_ID_FIELD;
/// Field carrying the payload bytes.
pub const PAYLOAD_FIELD: &str = "payload";
/// Field carrying the entity version.
pub const VERSION_FIELD: &str = wire::VERSION_HEADER;
/// Field carrying the entity key.
pub const ENTITY_FIELD: &str = wire::ENTITY_HEADER;
/// Field carrying the source time in Unix milliseconds.
pub const SOURCE_TIME_FIELD: &str = wire::SOURCE_TIME_HEADER;

/// The fields a producer writes with `XADD`, in order.
pub fn fields_of(message: &RawEnvelope) -> Vec<(String, Vec<u8>)> {
    let mut fields = Vec::new();
    if let Some(id) = &message.id {
        fields.push((ID_FIELD.to_owned(), id.clone()));
    }
    fields.push((PAYLOAD_FIELD.to_owned(), message.payload.clone()));
    fields.extend(
        wire::meta_headers(&message.meta)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.into_bytes())),
    );
    fields
}

fn bytes_of(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        Value::Int(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

/// The payload field's bytes (empty if there is none): what is dead-lettered when the
/// mapping itself fails.
pub(crate) fn payload_of(map: &HashMap<String, Value>) -> Vec<u8> {
    map.get(PAYLOAD_FIELD)
        .and_then(bytes_of)
        .unwrap_or_default()
}

/// The time in a stream entry id `MS-SEQ` (Redis's clock when the entry was added, unless
/// the producer chose the id).
fn entry_time(entry_id: &str) -> Option<SystemTime> {
    let ms = entry_id.split_once('-').map_or(entry_id, |(ms, _)| ms);
    wire::time_from_unix_ms(ms.parse().ok()?)
}

/// Reads an entry (its id and fields) back into a [`RawEnvelope`]. Without a
/// `message_id` field the id is `None`, which the runtime dead-letters with reason `bad_id`.
///
/// Total: a field of an unexpected type, a non-UTF-8 text field, an `oncely-version` that
/// is not an `i64` or an `oncely-source-time` that is not Unix milliseconds in
/// `0..=i64::MAX` is dropped with a warning naming the field (id and payload are kept as
/// bytes). The source time is `oncely-source-time` if usable, else the millisecond part of
/// the entry id.
pub fn envelope_of(entry_id: &str, map: &HashMap<String, Value>) -> RawEnvelope {
    let mut raw = RawEnvelope::default();
    let mut meta = Meta::default();
    for (k, v) in map {
        let name = k.as_str();
        let Some(bytes) = bytes_of(v) else {
            wire::dropped(name, format!("{v:?}").as_bytes(), "not a string");
            continue;
        };
        match name {
            ID_FIELD => raw.id = Some(bytes),
            PAYLOAD_FIELD => raw.payload = bytes,
            _ => wire::read_header(&mut meta, name, &bytes),
        }
    }
    meta.source_time = meta.source_time.or_else(|| entry_time(entry_id));
    raw.meta = meta;
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_context_round_trips_as_fields() {
        let raw = oncely_core::wire::sample_envelope();
        let map = fields_of(&raw)
            .into_iter()
            .map(|(k, v)| (k, Value::BulkString(v)))
            .collect();
        assert_eq!(envelope_of("1-0", &map).meta.headers, raw.meta.headers);
    }

    #[test]
    fn no_id_field_means_no_id() {
        let map = HashMap::from([(PAYLOAD_FIELD.to_owned(), Value::BulkString(b"x".to_vec()))]);
        let raw = envelope_of("1700000000123-4", &map);
        assert_eq!(raw.id, None);
        assert_eq!(
            raw.meta.source_time,
            wire::time_from_unix_ms(1_700_000_000_123)
        );
    }
}
