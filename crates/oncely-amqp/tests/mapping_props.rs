//! `envelope_of` is total: any AMQP properties map without a panic, the payload stays
//! byte-exact and a usable `message_id` comes back as the same id.

use lapin::BasicProperties;
use lapin::types::{
    AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable, LongString, ShortString,
};
use oncely_amqp::{ENTITY_HEADER, SOURCE_TIME_HEADER, VERSION_HEADER, attempt_of, envelope_of};
use proptest::prelude::*;

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => prop::collection::vec(any::<u8>(), 0..64),
        1 => Just(Vec::new()),
        1 => prop::collection::vec(any::<u8>(), 100 * 1024..=100 * 1024),
    ]
}

fn short() -> impl Strategy<Value = ShortString> {
    "\\PC{0,40}".prop_map(|s| ShortString::try_new(s).expect("≤ 255 bytes"))
}

fn number() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        Just(i64::MIN),
        Just(i64::MAX),
        Just(-1),
        Just(0)
    ]
}

fn scalar() -> impl Strategy<Value = AMQPValue> {
    prop_oneof![
        any::<bool>().prop_map(AMQPValue::Boolean),
        any::<i8>().prop_map(AMQPValue::ShortShortInt),
        any::<u8>().prop_map(AMQPValue::ShortShortUInt),
        any::<i16>().prop_map(AMQPValue::ShortInt),
        any::<u16>().prop_map(AMQPValue::ShortUInt),
        any::<i32>().prop_map(AMQPValue::LongInt),
        any::<u32>().prop_map(AMQPValue::LongUInt),
        number().prop_map(AMQPValue::LongLongInt),
        any::<f32>().prop_map(AMQPValue::Float),
        any::<f64>().prop_map(AMQPValue::Double),
        (any::<u8>(), any::<u32>())
            .prop_map(|(scale, value)| AMQPValue::DecimalValue(DecimalValue { scale, value })),
        short().prop_map(AMQPValue::ShortString),
        bytes().prop_map(|b| AMQPValue::LongString(LongString::from(b))),
        number().prop_map(|n| AMQPValue::LongString(LongString::from(n.to_string().into_bytes()))),
        prop_oneof![any::<u64>(), Just(u64::MAX), Just(1 << 63)].prop_map(AMQPValue::Timestamp),
        bytes().prop_map(|b| AMQPValue::ByteArray(ByteArray::from(b))),
        Just(AMQPValue::Void),
    ]
}

/// Every AMQPValue kind, with tables and arrays nested one level.
fn value() -> impl Strategy<Value = AMQPValue> {
    prop_oneof![
        6 => scalar(),
        1 => prop::collection::vec(scalar(), 0..4)
            .prop_map(|v| AMQPValue::FieldArray(FieldArray::from(v))),
        1 => prop::collection::vec((short(), scalar()), 0..4).prop_map(|kv| {
            let mut t = FieldTable::default();
            for (k, v) in kv {
                t.insert(k, v);
            }
            AMQPValue::FieldTable(t)
        }),
    ]
}

fn header_name() -> impl Strategy<Value = ShortString> {
    prop_oneof![
        Just(ShortString::from(VERSION_HEADER)),
        Just(ShortString::from(ENTITY_HEADER)),
        Just(ShortString::from(SOURCE_TIME_HEADER)),
        Just(ShortString::from("x-delivery-count")),
        Just(ShortString::from("")),
        short(),
    ]
}

fn timestamp() -> impl Strategy<Value = Option<u64>> {
    prop::option::of(prop_oneof![
        any::<u64>(),
        Just(u64::MAX),
        Just(1 << 63),
        Just(i64::MAX as u64),
        Just(0),
    ])
}

fn props(
    id: Option<String>,
    ts: Option<u64>,
    headers: Vec<(ShortString, AMQPValue)>,
) -> BasicProperties {
    let mut p = BasicProperties::default();
    if let Some(id) = id {
        p = p.with_message_id(ShortString::try_new(id).expect("≤ 255 bytes"));
    }
    if let Some(ts) = ts {
        p = p.with_timestamp(ts);
    }
    let mut table = FieldTable::default();
    for (k, v) in headers {
        table.insert(k, v);
    }
    p.with_headers(table)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_properties_map_without_panic(
        id in prop::option::of("[a-zA-Z0-9:._-]{1,64}"),
        ts in timestamp(),
        headers in prop::collection::vec((header_name(), value()), 0..24),
        payload in bytes(),
        redelivered in any::<bool>(),
    ) {
        let p = props(id.clone(), ts, headers);
        let raw = envelope_of(&p, payload.clone());
        prop_assert_eq!(&raw.payload, &payload);
        prop_assert_eq!(raw.id, id.map(String::into_bytes));
        prop_assert!(attempt_of(&p, redelivered) >= 1);
    }

    #[test]
    fn many_headers(n in 0usize..2000, v in number()) {
        let headers = (0..n)
            .map(|i| (ShortString::from(format!("h-{i}")), AMQPValue::LongLongInt(v)))
            .collect();
        let raw = envelope_of(&props(Some("m".into()), None, headers), b"p".to_vec());
        prop_assert_eq!(raw.meta.headers.len(), n);
    }
}

/// The known crash: `timestamp` ≥ 2^63 panicked in `UNIX_EPOCH + Duration::from_secs`.
#[test]
fn timestamp_beyond_i64_is_dropped_not_a_panic() {
    for ts in [1 << 63, u64::MAX, i64::MAX as u64 / 1000 + 1] {
        let raw = envelope_of(&props(Some("m-1".into()), Some(ts), vec![]), b"p".to_vec());
        assert_eq!(raw.id.as_deref(), Some(&b"m-1"[..]));
        assert_eq!(raw.payload, b"p");
        assert_eq!(raw.meta.source_time, None, "timestamp {ts}");
    }
}

#[test]
fn wrong_types_and_bad_utf8_are_dropped_the_rest_is_kept() {
    let headers = vec![
        (VERSION_HEADER.into(), AMQPValue::Double(1.5)),
        (
            ENTITY_HEADER.into(),
            AMQPValue::LongString(b"\xff\xfe".to_vec().into()),
        ),
        (SOURCE_TIME_HEADER.into(), AMQPValue::LongLongInt(-5)),
        (
            "trace".into(),
            AMQPValue::LongString(b"\xc3".to_vec().into()),
        ),
        (
            "x-death".into(),
            AMQPValue::FieldArray(FieldArray::default()),
        ),
        ("ok".into(), AMQPValue::Boolean(true)),
    ];
    let raw = envelope_of(
        &props(Some("m-2".into()), Some(1_700_000_000), headers),
        vec![],
    );
    assert_eq!(raw.meta.version, None);
    assert_eq!(raw.meta.entity_key, None);
    assert_eq!(
        raw.meta.source_time,
        oncely_core::wire::time_from_unix_secs(1_700_000_000),
        "an unusable oncely-source-time leaves the timestamp property"
    );
    assert_eq!(raw.meta.headers.len(), 1);
    assert_eq!(raw.meta.headers["ok"], "true");
    let count = props(
        None,
        None,
        vec![(
            "x-delivery-count".into(),
            AMQPValue::LongLongInt(u32::MAX.into()),
        )],
    );
    assert_eq!(
        attempt_of(&count, true),
        u32::MAX,
        "no overflow past u32::MAX"
    );
}
