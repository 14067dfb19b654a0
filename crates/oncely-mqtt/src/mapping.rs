//! The wire mapping: [`RawEnvelope`] ↔ MQTT 5 user properties (or, for MQTT 3.1.1
//! producers, a `message_id` field in the JSON payload).

use oncely_core::{Error, Meta, RawEnvelope, Result, wire};
use rumqttc::v5::mqttbytes::v5::PublishProperties;

/// MQTT 5 user property carrying the producer-set id.
pub const ID_PROPERTY: &str = wire::MESSAGE_ID_HEADER;
/// JSON payload field carrying the id when the producer speaks MQTT 3.1.1 (no properties).
pub const ID_JSON_FIELD: &str = wire::MESSAGE_ID_FIELD;
/// User property carrying the entity version.
pub const VERSION_PROPERTY: &str = wire::VERSION_HEADER;
/// User property carrying the entity key.
pub const ENTITY_PROPERTY: &str = wire::ENTITY_HEADER;
/// User property carrying the source time in Unix milliseconds.
pub const SOURCE_TIME_PROPERTY: &str = wire::SOURCE_TIME_HEADER;

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
    user.extend(
        wire::meta_headers(&message.meta)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v)),
    );
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
            name => wire::read_header(&mut raw.meta, name, v.as_bytes()),
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

    #[test]
    fn trace_context_round_trips_as_user_properties() {
        let raw = oncely_core::wire::sample_envelope();
        let props = properties_of(&raw).unwrap();
        assert_eq!(envelope_of(Some(&props), &raw.payload), raw);
    }

    #[test]
    fn mqtt311_id_from_json_payload() {
        let p = br#"{"message_id":"m-9","account":"acct-17","amount":5}"#;
        assert_eq!(envelope_of(None, p).id.as_deref(), Some(&b"m-9"[..]));
        assert_eq!(envelope_of(None, br#"{"account":"a","amount":1}"#).id, None);
        assert_eq!(envelope_of(None, b"not json").id, None);
    }
}
