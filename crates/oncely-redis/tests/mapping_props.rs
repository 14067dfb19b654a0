//! `envelope_of` is total: any stream entry maps without a panic, the payload stays
//! byte-exact and a `message_id` field comes back as the same id bytes.

use oncely_core::RawEnvelope;
use oncely_core::wire::time_from_unix_ms;
use oncely_redis::fields_of;
use oncely_redis::{
    ENTITY_FIELD, ID_FIELD, PAYLOAD_FIELD, SOURCE_TIME_FIELD, VERSION_FIELD, envelope_of,
};
use proptest::prelude::*;
use redis::Value;
use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => prop::collection::vec(any::<u8>(), 0..64),
        1 => Just(Vec::new()),
        1 => prop::collection::vec(any::<u8>(), 100 * 1024..=100 * 1024),
    ]
}

fn number_text() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        Just(i64::MIN.to_string()),
        Just(u64::MAX.to_string()),
        Just(" 12 ".to_owned()),
    ]
    .prop_map(String::into_bytes)
}

/// Every RESP value kind a field could carry.
fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => bytes().prop_map(Value::BulkString),
        3 => number_text().prop_map(Value::BulkString),
        1 => "\\PC{0,20}".prop_map(Value::SimpleString),
        1 => any::<i64>().prop_map(Value::Int),
        1 => Just(Value::Nil),
        1 => any::<f64>().prop_map(Value::Double),
        1 => any::<bool>().prop_map(Value::Boolean),
        1 => prop::collection::vec(any::<i64>().prop_map(Value::Int), 0..3).prop_map(Value::Array),
        1 => Just(Value::Okay),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(VERSION_FIELD.to_owned()),
        Just(ENTITY_FIELD.to_owned()),
        Just(SOURCE_TIME_FIELD.to_owned()),
        Just(String::new()),
        "\\PC{0,20}",
    ]
}

fn entry_id() -> impl Strategy<Value = String> {
    prop_oneof![
        (any::<u64>(), any::<u64>()).prop_map(|(ms, seq)| format!("{ms}-{seq}")),
        Just(format!("{}-0", u64::MAX)),
        Just("0-1".to_owned()),
        "\\PC{0,30}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_entry_maps_without_panic(
        id in prop::option::of(bytes()),
        entry in entry_id(),
        fields in prop::collection::vec((name(), value()), 0..24),
        payload in bytes(),
    ) {
        let mut map: HashMap<String, Value> = fields.into_iter().collect();
        map.insert(PAYLOAD_FIELD.to_owned(), Value::BulkString(payload.clone()));
        if let Some(id) = &id {
            map.insert(ID_FIELD.to_owned(), Value::BulkString(id.clone()));
        }
        let raw = envelope_of(&entry, &map);
        prop_assert_eq!(&raw.payload, &payload);
        prop_assert_eq!(raw.id, id);
    }

    #[test]
    fn many_fields(n in 0usize..2000) {
        let map: HashMap<String, Value> =
            (0..n).map(|i| (format!("h-{i}"), Value::BulkString(b"v".to_vec()))).collect();
        prop_assert_eq!(envelope_of("1-0", &map).meta.headers.len(), n);
    }
}

/// The worst known case for Redis: an explicit entry id beyond i64 ms, out-of-range and
/// non-UTF-8 `oncely-*` fields.
#[test]
fn out_of_range_fields_are_dropped_entry_time_is_the_fallback() {
    let map = HashMap::from([
        (ID_FIELD.to_owned(), Value::BulkString(b"m-1".to_vec())),
        (
            PAYLOAD_FIELD.to_owned(),
            Value::BulkString(b"\xff".to_vec()),
        ),
        (
            SOURCE_TIME_FIELD.to_owned(),
            Value::BulkString(u64::MAX.to_string().into_bytes()),
        ),
        (
            VERSION_FIELD.to_owned(),
            Value::BulkString(b"\xff\xfe".to_vec()),
        ),
        (ENTITY_FIELD.to_owned(), Value::Nil),
        ("trace".to_owned(), Value::BulkString(b"\xc3".to_vec())),
    ]);
    let raw = envelope_of(&format!("{}-0", u64::MAX), &map);
    assert_eq!(raw.id.as_deref(), Some(&b"m-1"[..]));
    assert_eq!(raw.payload, b"\xff");
    assert_eq!(raw.meta.source_time, None);
    assert_eq!(raw.meta.version, None);
    assert_eq!(raw.meta.entity_key, None);
    assert!(raw.meta.headers.is_empty());
    let raw = envelope_of("1700000000123-7", &map);
    assert_eq!(raw.meta.source_time, time_from_unix_ms(1_700_000_000_123));
}

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
    assert_eq!(
        envelope_of("5-0", &map),
        raw,
        "the field wins over the entry id"
    );
}
