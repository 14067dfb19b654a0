//! `envelope_of` is total: any record headers and timestamp map without a panic, the
//! payload stays byte-exact and a `message-id` header comes back as the same id bytes.
//! Also: offset ids fit the id limit whatever the topic name.

use oncely_core::{MAX_MESSAGE_ID_BYTES, MessageId};
use oncely_kafka::{
    ENTITY_HEADER, ID_HEADER, SOURCE_TIME_HEADER, VERSION_HEADER, envelope_of, offset_id,
    record_headers,
};
use proptest::prelude::*;
use rdkafka::message::{Header, Headers, OwnedHeaders};

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => prop::collection::vec(any::<u8>(), 0..64),
        1 => Just(Vec::new()),
        1 => prop::collection::vec(any::<u8>(), 100 * 1024..=100 * 1024),
    ]
}

fn value() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop::option::of(prop_oneof![
        4 => bytes(),
        1 => any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        1 => any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        1 => Just(i64::MIN.to_string().into_bytes()),
        1 => Just(u64::MAX.to_string().into_bytes()),
    ])
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(VERSION_HEADER.to_owned()),
        Just(ENTITY_HEADER.to_owned()),
        Just(SOURCE_TIME_HEADER.to_owned()),
        Just(String::new()),
        "[^\0]{0,20}",
    ]
}

fn timestamp() -> impl Strategy<Value = Option<i64>> {
    prop::option::of(prop_oneof![
        any::<i64>(),
        Just(i64::MIN),
        Just(i64::MAX),
        Just(-1),
        Just(0)
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_record_maps_without_panic(
        id in prop::option::of(bytes()),
        headers in prop::collection::vec((name(), value()), 0..24),
        payload in bytes(),
        ts in timestamp(),
    ) {
        // Built through rdkafka's own header type and read back as the source does.
        let mut owned = OwnedHeaders::new();
        if let Some(id) = &id {
            owned = owned.insert(Header { key: ID_HEADER, value: Some(id) });
        }
        for (k, v) in &headers {
            owned = owned.insert(Header { key: k, value: v.as_ref() });
        }
        let raw = envelope_of(record_headers(&owned), payload.clone(), ts);
        prop_assert_eq!(&raw.payload, &payload);
        prop_assert_eq!(raw.id, id);
    }

    #[test]
    fn many_headers(n in 0usize..2000) {
        let mut owned = OwnedHeaders::new();
        for i in 0..n {
            owned = owned.insert(Header { key: &format!("h-{i}"), value: Some("v") });
        }
        prop_assert_eq!(envelope_of(record_headers(&owned), vec![], None).meta.headers.len(), n);
    }

    #[test]
    fn offset_ids_are_valid_and_distinct(
        topic in "[a-zA-Z0-9._-]{1,249}",
        partition in any::<i32>(),
        offset in any::<i64>(),
    ) {
        let id = offset_id(&topic, partition, offset);
        prop_assert!(id.len() <= MAX_MESSAGE_ID_BYTES);
        prop_assert!(MessageId::parse(&id).is_ok());
        prop_assert_ne!(id, offset_id(&topic, partition, offset.wrapping_add(1)));
    }
}

/// The worst known case for Kafka: negative and extreme record timestamps and an
/// out-of-range `oncely-source-time`.
#[test]
fn negative_timestamps_and_bad_values_are_dropped() {
    for ts in [i64::MIN, -1, -1_700_000_000_000] {
        let raw = envelope_of([(ID_HEADER, Some(&b"m-1"[..]))], b"p".to_vec(), Some(ts));
        assert_eq!(raw.id.as_deref(), Some(&b"m-1"[..]));
        assert_eq!(raw.meta.source_time, None, "{ts}");
    }
    let max = u64::MAX.to_string();
    let raw = envelope_of(
        [
            (SOURCE_TIME_HEADER, Some(max.as_bytes())),
            (VERSION_HEADER, Some(&b"\xff"[..])),
            ("trace", Some(&b"\xc3"[..])),
        ],
        b"p".to_vec(),
        Some(i64::MAX),
    );
    assert_eq!(
        raw.meta.source_time,
        oncely_core::wire::time_from_unix_ms(i64::MAX),
        "an unusable header leaves the record timestamp"
    );
    assert_eq!(raw.meta.version, None);
    assert!(raw.meta.headers.is_empty());
}

/// rdkafka's `BorrowedHeaders::try_get` panics on a key that is not UTF-8; such a header
/// (simulated here) is skipped and the others are kept.
#[test]
fn a_header_that_panics_in_rdkafka_is_skipped() {
    struct Hostile(OwnedHeaders);
    impl Headers for Hostile {
        fn count(&self) -> usize {
            self.0.count() + 1
        }
        fn try_get(&self, idx: usize) -> Option<Header<'_, &[u8]>> {
            match idx {
                0 => panic!("called `Result::unwrap()` on an `Err` value: Utf8Error"),
                i => self.0.try_get(i - 1),
            }
        }
    }
    let owned = OwnedHeaders::new().insert(Header {
        key: ID_HEADER,
        value: Some("m-9"),
    });
    let raw = envelope_of(record_headers(&Hostile(owned)), b"p".to_vec(), None);
    assert_eq!(raw.id.as_deref(), Some(&b"m-9"[..]));
}

#[test]
fn long_topic_offset_id_is_hashed() {
    let topic = "t".repeat(249);
    let fits = offset_id(&topic, 2, 7);
    assert_eq!(fits.len(), 253, "a long topic is kept while the id fits");
    let id = String::from_utf8(offset_id(&topic, 2, i64::MAX)).unwrap();
    assert!(id.starts_with('#'), "{id}");
    assert_eq!(
        id,
        format!(
            "#{}/2/{}",
            &oncely_core::PayloadHash::of(topic.as_bytes()).to_hex()[..16],
            i64::MAX
        )
    );
    assert_eq!(
        offset_id("credits", 0, 5),
        b"credits/0/5",
        "short names stay readable"
    );
    let other = String::from_utf8(offset_id(&"u".repeat(249), 2, i64::MAX)).unwrap();
    assert_ne!(id, other);
}
