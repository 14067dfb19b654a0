//! The wire mapping: [`RawEnvelope`] ↔ NATS headers.

use async_nats::{HeaderMap, HeaderName, HeaderValue};
use oncely_core::{Error, Meta, RawEnvelope, Result, wire};
use std::time::{SystemTime, UNIX_EPOCH};

/// Header carrying the producer-set id; JetStream also dedups on it within the stream's
/// duplicate window.
pub const ID_HEADER: &str = "Nats-Msg-Id";
/// Header carrying the entity version.
pub const VERSION_HEADER: &str = "oncely-version";
/// Header carrying the entity key.
pub const ENTITY_HEADER: &str = "oncely-entity";
/// Header carrying the source time in Unix milliseconds.
pub const SOURCE_TIME_HEADER: &str = "oncely-source-time";

/// The headers a producer sets. Fails for values NATS headers cannot carry (CR or LF,
/// e.g. an id with a line break) instead of sending the message without its id.
pub fn headers_of(message: &RawEnvelope) -> Result<HeaderMap> {
    let mut h = HeaderMap::new();
    let mut put = |k: &str, v: &str| -> Result<()> {
        let name: HeaderName = k
            .parse()
            .map_err(|e| Error::permanent(format!("NATS header name {k:?}: {e}")))?;
        let value: HeaderValue = v
            .parse()
            .map_err(|e| Error::permanent(format!("NATS header {k} = {v:?}: {e}")))?;
        h.insert(name, value);
        Ok(())
    };
    if let Some(id) = &message.id {
        put(ID_HEADER, &String::from_utf8_lossy(id))?;
    }
    let meta = &message.meta;
    if let Some(v) = meta.version {
        put(VERSION_HEADER, &v.to_string())?;
    }
    if let Some(e) = &meta.entity_key {
        put(ENTITY_HEADER, e)?;
    }
    if let Some(t) = meta.source_time {
        let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
        put(SOURCE_TIME_HEADER, &ms.to_string())?;
    }
    for (k, v) in &meta.headers {
        put(k, v)?;
    }
    Ok(h)
}

/// Reads a message back into a [`RawEnvelope`]. Without `Nats-Msg-Id` the id is `None`,
/// which the runtime dead-letters with reason `bad_id`.
///
/// Total: an `oncely-version` that is not an `i64` or an `oncely-source-time` that is not
/// Unix milliseconds in `0..=i64::MAX` is dropped with a warning naming the header. The
/// source time is `oncely-source-time` if usable, else `published` (JetStream's time of
/// storing the message, from the message info).
pub fn envelope_of(
    headers: Option<&HeaderMap>,
    payload: &[u8],
    published: Option<impl Into<SystemTime>>,
) -> RawEnvelope {
    let mut raw = RawEnvelope {
        id: None,
        payload: payload.to_vec(),
        meta: Meta::default(),
    };
    let mut source_time = None;
    for (name, values) in headers.into_iter().flat_map(HeaderMap::iter) {
        let Some(value) = values.first() else {
            continue;
        };
        let text: &str = value.as_ref();
        let name: &str = name.as_ref();
        match name {
            ID_HEADER => raw.id = Some(text.as_bytes().to_vec()),
            VERSION_HEADER => match wire::parse_version(text) {
                Some(v) => raw.meta.version = Some(v),
                None => wire::dropped(name, text.as_bytes(), "not a decimal i64"),
            },
            ENTITY_HEADER => raw.meta.entity_key = Some(text.to_owned()),
            SOURCE_TIME_HEADER => match wire::parse_unix_ms(text) {
                Some(t) => source_time = Some(t),
                None => wire::dropped(name, text.as_bytes(), "not Unix ms in range"),
            },
            other => {
                raw.meta.headers.insert(other.to_owned(), text.to_owned());
            }
        }
    }
    raw.meta.source_time =
        source_time.or_else(|| published.and_then(|t| wire::time_in_range(t.into())));
    raw
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const NONE: Option<SystemTime> = None;

    #[test]
    fn round_trips() {
        let mut raw = RawEnvelope::new("m-1", br#"{"account":"acct-17","amount":5}"#.to_vec());
        raw.meta.version = Some(3);
        raw.meta.entity_key = Some("acct-17".into());
        raw.meta.source_time = Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123));
        raw.meta.headers.insert("trace".into(), "t".into());
        let h = headers_of(&raw).unwrap();
        assert_eq!(envelope_of(Some(&h), &raw.payload, NONE), raw);
        assert!(headers_of(&RawEnvelope::new("a\nb", "x")).is_err());
        assert_eq!(envelope_of(None, b"x", NONE).id, None);
    }
}
