//! The wire mapping: [`RawEnvelope`] ↔ MQTT 5 user properties (or, for MQTT 3.1.1
//! producers, a `message_id` field in the JSON payload).

use oncely_core::{Error, Meta, RawEnvelope, Result, wire};
use rumqttc::v5::mqttbytes::v5::PublishProperties;
use std::time::UNIX_EPOCH;

/// MQTT 5 user property carrying the producer-set id.
pub const ID_PROPERTY: &str = "message-id";
/// JSON payload field carrying the id when the producer speaks MQTT 3.1.1 (no properties).
pub const ID_JSON_FIELD: &str = "message_id";
/// User property carrying the entity version.
pub const VERSION_PROPERTY: &str = "oncely-version";
/// User property carrying the entity key.
pub const ENTITY_PROPERTY: &str = "oncely-entity";
/// User property carrying the source time in Unix milliseconds.
pub const SOURCE_TIME_PROPERTY: &str = "oncely-source-time";

fn checked(s: String) -> Result<String> {
    if s.chars().any(char::is_control) {
        return Err(Error::permanent(format!(
            "MQTT strings cannot carry control characters (brokers drop the connection): {s:?}"
        )));
    }
    Ok(s)
}

/// The MQTT 5 publish properties a producer sets. Fails for values an MQTT UTF-8 string
/// cannot carry (control characters, e.g. an id with a line break): Mosquitto closes the
/// connection on such a packet.
pub fn properties_of(message: &RawEnvelope) -> Result<PublishProperties> {
    let mut user = Vec::new();
    if let Some(id) = &message.id {
        user.push((
            ID_PROPERTY.to_owned(),
            String::from_utf8_lossy(id).into_owned(),
        ));
    }
    let meta = &message.meta;
    if let Some(v) = meta.version {
        user.push((VERSION_PROPERTY.to_owned(), v.to_string()));
    }
    if let Some(e) = &meta.entity_key {
        user.push((ENTITY_PROPERTY.to_owned(), e.clone()));
    }
    if let Some(t) = meta.source_time {
        let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
        user.push((SOURCE_TIME_PROPERTY.to_owned(), ms.to_string()));
    }
    for (k, v) in &meta.headers {
        user.push((k.clone(), v.clone()));
    }
    let user = user
        .into_iter()
        .map(|(k, v)| Ok((checked(k)?, checked(v)?)))
        .collect::<Result<Vec<_>>>()?;
    Ok(PublishProperties {
        user_properties: user,
        ..PublishProperties::default()
    })
}

/// Reads a publish back into a [`RawEnvelope`]: the id from the `message-id` user property,
/// else from a string `message_id` field of a JSON object payload, else `None` (which the
/// runtime dead-letters with reason `bad_id`).
///
/// Total: an `oncely-version` that is not an `i64` or an `oncely-source-time` that is not
/// Unix milliseconds in `0..=i64::MAX` is dropped with a warning naming the property.
/// MQTT has no broker time: without `oncely-source-time` the source time stays `None`.
pub fn envelope_of(properties: Option<&PublishProperties>, payload: &[u8]) -> RawEnvelope {
    let mut raw = RawEnvelope {
        id: None,
        payload: payload.to_vec(),
        meta: Meta::default(),
    };
    for (k, v) in properties
        .map(|p| p.user_properties.as_slice())
        .unwrap_or(&[])
    {
        match k.as_str() {
            ID_PROPERTY => raw.id = Some(v.as_bytes().to_vec()),
            VERSION_PROPERTY => match wire::parse_version(v) {
                Some(version) => raw.meta.version = Some(version),
                None => wire::dropped(k, v.as_bytes(), "not a decimal i64"),
            },
            ENTITY_PROPERTY => raw.meta.entity_key = Some(v.clone()),
            SOURCE_TIME_PROPERTY => match wire::parse_unix_ms(v) {
                Some(t) => raw.meta.source_time = Some(t),
                None => wire::dropped(k, v.as_bytes(), "not Unix ms in range"),
            },
            other => {
                raw.meta.headers.insert(other.to_owned(), v.clone());
            }
        }
    }
    if raw.id.is_none()
        && let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(payload)
        && let Some(serde_json::Value::String(id)) = map.get(ID_JSON_FIELD)
    {
        raw.id = Some(id.as_bytes().to_vec());
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn round_trips_user_properties() {
        let mut raw = RawEnvelope::new("m-1", br#"{"account":"acct-17","amount":5}"#.to_vec());
        raw.meta.version = Some(3);
        raw.meta.entity_key = Some("acct-17".into());
        raw.meta.source_time = Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123));
        raw.meta.headers.insert("trace".into(), "t".into());
        assert_eq!(
            envelope_of(Some(&properties_of(&raw).unwrap()), &raw.payload),
            raw
        );
        assert!(properties_of(&RawEnvelope::new("a\nb", "x")).is_err());
    }

    #[test]
    fn mqtt311_id_from_json_payload() {
        let p = br#"{"message_id":"m-9","account":"acct-17","amount":5}"#;
        assert_eq!(envelope_of(None, p).id.as_deref(), Some(&b"m-9"[..]));
        assert_eq!(envelope_of(None, br#"{"account":"a","amount":1}"#).id, None);
        assert_eq!(envelope_of(None, b"not json").id, None);
    }
}
