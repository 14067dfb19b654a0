//! `envelope_of` is total: any MQTT 5 user properties (and any payload) map without a
//! panic, the payload stays byte-exact and a `message-id` property comes back as the id.

use oncely_core::RawEnvelope;
use oncely_mqtt::properties_of;
use oncely_mqtt::{
    ENTITY_PROPERTY, ID_PROPERTY, SOURCE_TIME_PROPERTY, VERSION_PROPERTY, envelope_of,
};
use proptest::prelude::*;
use rumqttc::v5::mqttbytes::v5::PublishProperties;
use std::time::{Duration, UNIX_EPOCH};

fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => prop::collection::vec(any::<u8>(), 0..64),
        1 => Just(Vec::new()),
        1 => prop::collection::vec(any::<u8>(), 100 * 1024..=100 * 1024),
        1 => "\\PC{0,20}".prop_map(|id| format!(r#"{{"message_id":{id:?},"amount":5}}"#).into_bytes()),
        1 => (1usize..100_000).prop_map(|n| "[".repeat(n).into_bytes()),
        1 => Just(br#"{"message_id":5}"#.to_vec()),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        Just(i64::MIN.to_string()),
        Just(u64::MAX.to_string()),
        Just(String::new()),
        "\\PC{0,40}",
        "[a-z]{100}".prop_map(|s| s.repeat(1024)),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(VERSION_PROPERTY.to_owned()),
        Just(ENTITY_PROPERTY.to_owned()),
        Just(SOURCE_TIME_PROPERTY.to_owned()),
        Just(String::new()),
        "\\PC{0,20}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_user_properties_map_without_panic(
        id in prop::option::of("[a-zA-Z0-9:._-]{1,64}"),
        user in prop::collection::vec((name(), text()), 0..24),
        payload in payload(),
        with_props in any::<bool>(),
    ) {
        let mut user_properties = user;
        if let Some(id) = &id {
            user_properties.push((ID_PROPERTY.to_owned(), id.clone()));
        }
        let props = PublishProperties { user_properties, ..PublishProperties::default() };
        let raw = envelope_of(with_props.then_some(&props), &payload);
        prop_assert_eq!(&raw.payload, &payload);
        if with_props && id.is_some() {
            prop_assert_eq!(raw.id, id.map(String::into_bytes));
        }
    }

    #[test]
    fn many_properties(n in 0usize..2000) {
        let props = PublishProperties {
            user_properties: (0..n).map(|i| (format!("h-{i}"), "v".to_owned())).collect(),
            ..PublishProperties::default()
        };
        prop_assert_eq!(envelope_of(Some(&props), b"p").meta.headers.len(), n);
    }
}

/// The worst known case for MQTT: out-of-range `oncely-*` properties and a payload nested
/// past serde_json's depth limit. MQTT has no broker time: no source time without the property.
#[test]
fn out_of_range_properties_are_dropped() {
    let props = PublishProperties {
        user_properties: vec![
            (ID_PROPERTY.to_owned(), "m-1".to_owned()),
            (SOURCE_TIME_PROPERTY.to_owned(), u64::MAX.to_string()),
            (
                VERSION_PROPERTY.to_owned(),
                "9223372036854775808".to_owned(),
            ),
        ],
        ..PublishProperties::default()
    };
    let deep = "[".repeat(1 << 20).into_bytes();
    let raw = envelope_of(Some(&props), &deep);
    assert_eq!(raw.id.as_deref(), Some(&b"m-1"[..]));
    assert_eq!(raw.payload, deep);
    assert_eq!((raw.meta.source_time, raw.meta.version), (None, None));
    assert_eq!(envelope_of(None, &deep).id, None);
}

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
