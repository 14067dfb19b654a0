//! The names oncely's metadata travels under, and the [`Meta`] ↔ header list mapping of the
//! brokers whose headers are string-keyed text (Kafka headers, NATS headers, MQTT 5 user
//! properties, Redis stream fields). `docs/wire-format.md` is the contract: these names
//! do not change.

use super::{dropped, parse_unix_ms, parse_version};
use crate::Meta;
use std::time::UNIX_EPOCH;

/// Header carrying the entity version: decimal `i64` (AMQP: an integer value).
pub const VERSION_HEADER: &str = "oncely-version";
/// Header carrying the entity key.
pub const ENTITY_HEADER: &str = "oncely-entity";
/// Header carrying the source time in Unix milliseconds (decimal; AMQP: an integer value).
pub const SOURCE_TIME_HEADER: &str = "oncely-source-time";
/// Header carrying the producer-set message id where the broker has headers but no id
/// property of its own: the Kafka header and the MQTT 5 user property.
pub const MESSAGE_ID_HEADER: &str = "message-id";
/// Field carrying the producer-set message id where it is a field: the Redis stream field
/// and the JSON payload field of MQTT 3.1.1 producers (also the name of AMQP's property).
pub const MESSAGE_ID_FIELD: &str = "message_id";

/// The headers that carry `meta`, in order: `oncely-version`, `oncely-entity`,
/// `oncely-source-time` (Unix ms), then `meta.headers`. The broker adds its id (and
/// anything else it carries) itself.
///
/// ```
/// use oncely_core::Meta;
/// use oncely_core::wire::{meta_headers, ENTITY_HEADER, VERSION_HEADER};
/// let mut meta = Meta::default();
/// meta.version = Some(7);
/// meta.entity_key = Some("acct-17".into());
/// meta.headers.insert("trace".into(), "abc".into());
/// assert_eq!(
///     meta_headers(&meta),
///     [(VERSION_HEADER, "7".to_owned()), (ENTITY_HEADER, "acct-17".to_owned()), ("trace", "abc".to_owned())]
/// );
/// ```
pub fn meta_headers(meta: &Meta) -> Vec<(&str, String)> {
    let mut out = Vec::with_capacity(3 + meta.headers.len());
    if let Some(v) = meta.version {
        out.push((VERSION_HEADER, v.to_string()));
    }
    if let Some(e) = &meta.entity_key {
        out.push((ENTITY_HEADER, e.clone()));
    }
    if let Some(t) = meta.source_time {
        let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
        out.push((SOURCE_TIME_HEADER, ms.to_string()));
    }
    for (k, v) in &meta.headers {
        out.push((k.as_str(), v.clone()));
    }
    out
}

/// Reads one header (not the broker's id) into `meta`: `oncely-version`, `oncely-entity`
/// and `oncely-source-time` set their field, any other header passes through to
/// `meta.headers`; a later header of the same name wins.
///
/// Total: a value that is not UTF-8, an `oncely-version` that is not an `i64` or an
/// `oncely-source-time` that is not Unix milliseconds in `0..=i64::MAX` is dropped with a
/// warning naming the header ([`dropped`]).
///
/// ```
/// use oncely_core::Meta;
/// use oncely_core::wire::{read_header, VERSION_HEADER};
/// let mut meta = Meta::default();
/// read_header(&mut meta, VERSION_HEADER, b" 3 ");
/// read_header(&mut meta, "trace", b"abc");
/// read_header(&mut meta, "bad", b"\xff");
/// assert_eq!(meta.version, Some(3));
/// assert_eq!(meta.headers.len(), 1);
/// ```
pub fn read_header(meta: &mut Meta, name: &str, value: &[u8]) {
    let Ok(text) = std::str::from_utf8(value) else {
        dropped(name, value, "not UTF-8");
        return;
    };
    match name {
        VERSION_HEADER => match parse_version(text) {
            Some(v) => meta.version = Some(v),
            None => dropped(name, value, "not a decimal i64"),
        },
        ENTITY_HEADER => meta.entity_key = Some(text.to_owned()),
        SOURCE_TIME_HEADER => match parse_unix_ms(text) {
            Some(t) => meta.source_time = Some(t),
            None => dropped(name, value, "not Unix ms in range"),
        },
        other => {
            meta.headers.insert(other.to_owned(), text.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::time_from_unix_ms;
    use proptest::prelude::*;

    fn meta() -> impl Strategy<Value = Meta> {
        let name = "[a-z][a-z0-9_.-]{0,12}".prop_filter("not an oncely header", |k| {
            ![VERSION_HEADER, ENTITY_HEADER, SOURCE_TIME_HEADER].contains(&k.as_str())
        });
        (
            prop::option::of(any::<i64>()),
            prop::option::of(".{0,16}"),
            prop::option::of(0..=i64::MAX),
            prop::collection::btree_map(name, ".{0,16}", 0..6),
        )
            .prop_map(|(version, entity_key, ms, headers)| Meta {
                version,
                entity_key,
                source_time: ms.and_then(time_from_unix_ms),
                headers,
            })
    }

    fn read(headers: &[(&str, String)]) -> Meta {
        let mut back = Meta::default();
        for (k, v) in headers {
            read_header(&mut back, k, v.as_bytes());
        }
        back
    }

    proptest! {
        #[test]
        fn meta_round_trips(meta in meta()) {
            prop_assert_eq!(read(&meta_headers(&meta)), meta);
        }

        #[test]
        fn any_header_reads_without_panic(
            headers in prop::collection::vec(
                (prop_oneof![Just(VERSION_HEADER.to_owned()), Just(SOURCE_TIME_HEADER.to_owned()), ".{0,8}"],
                 prop::collection::vec(any::<u8>(), 0..24)),
                0..12,
            )
        ) {
            let mut meta = Meta::default();
            for (k, v) in &headers {
                read_header(&mut meta, k, v);
            }
        }
    }

    #[test]
    fn bad_values_are_dropped_and_the_rest_kept() {
        let mut meta = Meta::default();
        read_header(&mut meta, VERSION_HEADER, b"7");
        read_header(&mut meta, VERSION_HEADER, b"seven");
        read_header(&mut meta, SOURCE_TIME_HEADER, b"-5");
        read_header(
            &mut meta,
            SOURCE_TIME_HEADER,
            &u64::MAX.to_string().into_bytes(),
        );
        read_header(&mut meta, ENTITY_HEADER, b"\xc3");
        read_header(&mut meta, "trace", b"\xff");
        assert_eq!(meta.version, Some(7), "a bad value leaves the good one");
        assert_eq!(
            meta,
            Meta {
                version: Some(7),
                ..Meta::default()
            }
        );
    }

    #[test]
    fn wire_names_are_the_documented_ones() {
        assert_eq!(
            [
                VERSION_HEADER,
                ENTITY_HEADER,
                SOURCE_TIME_HEADER,
                MESSAGE_ID_HEADER,
                MESSAGE_ID_FIELD
            ],
            [
                "oncely-version",
                "oncely-entity",
                "oncely-source-time",
                "message-id",
                "message_id"
            ]
        );
    }
}
