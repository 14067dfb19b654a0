//! The wire mapping: [`RawEnvelope`] ↔ Redis stream entry fields.

use oncely_core::{Meta, RawEnvelope};
use redis::Value;
use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

/// Field carrying the producer-set message id (the entry id is the broker's, not the producer's).
pub const ID_FIELD: &str = "message_id";
/// Field carrying the payload bytes.
pub const PAYLOAD_FIELD: &str = "payload";
/// Field carrying the entity version.
pub const VERSION_FIELD: &str = "oncely-version";
/// Field carrying the entity key.
pub const ENTITY_FIELD: &str = "oncely-entity";
/// Field carrying the source time in Unix milliseconds.
pub const SOURCE_TIME_FIELD: &str = "oncely-source-time";

/// The fields a producer writes with `XADD`, in order.
pub fn fields_of(message: &RawEnvelope) -> Vec<(String, Vec<u8>)> {
    let mut fields = Vec::new();
    if let Some(id) = &message.id {
        fields.push((ID_FIELD.to_owned(), id.clone()));
    }
    fields.push((PAYLOAD_FIELD.to_owned(), message.payload.clone()));
    let meta = &message.meta;
    if let Some(v) = meta.version {
        fields.push((VERSION_FIELD.to_owned(), v.to_string().into_bytes()));
    }
    if let Some(e) = &meta.entity_key {
        fields.push((ENTITY_FIELD.to_owned(), e.clone().into_bytes()));
    }
    if let Some(t) = meta.source_time {
        let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
        fields.push((SOURCE_TIME_FIELD.to_owned(), ms.to_string().into_bytes()));
    }
    for (k, v) in &meta.headers {
        fields.push((k.clone(), v.clone().into_bytes()));
    }
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

/// Reads an entry's fields back into a [`RawEnvelope`]. Without a `message_id` field the
/// id is `None`, which the runtime dead-letters with reason `bad_id`.
pub fn envelope_of(map: &HashMap<String, Value>) -> RawEnvelope {
    let mut raw = RawEnvelope::default();
    let mut meta = Meta::default();
    for (k, v) in map {
        let Some(bytes) = bytes_of(v) else { continue };
        let text = || String::from_utf8_lossy(&bytes).into_owned();
        match k.as_str() {
            ID_FIELD => raw.id = Some(bytes.clone()),
            PAYLOAD_FIELD => raw.payload = bytes.clone(),
            VERSION_FIELD => meta.version = text().trim().parse().ok(),
            ENTITY_FIELD => meta.entity_key = Some(text()),
            SOURCE_TIME_FIELD => {
                meta.source_time = text()
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
            }
            other => {
                meta.headers.insert(other.to_owned(), text());
            }
        }
    }
    raw.meta = meta;
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut raw = RawEnvelope::new("m-1", br#"{"account":"acct-17","amount":5}"#.to_vec());
        raw.meta.version = Some(3);
        raw.meta.entity_key = Some("acct-17".into());
        raw.meta.source_time = Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123));
        raw.meta.headers.insert("trace".into(), "t".into());
        let map: HashMap<String, Value> = fields_of(&raw)
            .into_iter()
            .map(|(k, v)| (k, Value::BulkString(v)))
            .collect();
        assert_eq!(envelope_of(&map), raw);
    }

    #[test]
    fn no_id_field_means_no_id() {
        let map = HashMap::from([(PAYLOAD_FIELD.to_owned(), Value::BulkString(b"x".to_vec()))]);
        assert_eq!(envelope_of(&map).id, None);
    }
}
