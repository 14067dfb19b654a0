//! The wire mapping: [`RawEnvelope`] ↔ NATS headers.

use async_nats::{HeaderMap, HeaderName, HeaderValue};
use oncely_core::{Error, Meta, RawEnvelope, Result, wire};
use std::time::SystemTime;

pub use oncely_core::wire::{ENTITY_HEADER, SOURCE_TIME_HEADER, VERSION_HEADER};
/// Header carrying the producer-set id; JetStream also dedups on it within the stream's
/// duplicate window.
pub const ID_HEADER: &str = "Nats-Msg-Id";

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
    for (k, v) in wire::meta_headers(&message.meta) {
        put(k, &v)?;
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
    for (name, values) in headers.into_iter().flat_map(HeaderMap::iter) {
        let Some(value) = values.first() else {
            continue;
        };
        let text: &str = value.as_ref();
        let name: &str = name.as_ref();
        match name {
            ID_HEADER => raw.id = Some(text.as_bytes().to_vec()),
            name => wire::read_header(&mut raw.meta, name, text.as_bytes()),
        }
    }
    raw.meta.source_time = raw
        .meta
        .source_time
        .or_else(|| published.and_then(|t| wire::time_in_range(t.into())));
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Option<SystemTime> = None;

    #[test]
    fn round_trips() {
        let raw = oncely_core::wire::sample_envelope();
        let h = headers_of(&raw).unwrap();
        assert_eq!(envelope_of(Some(&h), &raw.payload, NONE), raw);
        assert!(headers_of(&RawEnvelope::new("a\nb", "x")).is_err());
        assert_eq!(envelope_of(None, b"x", NONE).id, None);
    }
}
