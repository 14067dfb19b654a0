//! `envelope_of` is total: any NATS header map maps without a panic, the payload stays
//! byte-exact and a usable `Nats-Msg-Id` comes back as the same id.

use async_nats::{HeaderMap, HeaderName, HeaderValue};
use oncely_core::wire::time_from_unix_ms;
use oncely_nats::{ENTITY_HEADER, ID_HEADER, SOURCE_TIME_HEADER, VERSION_HEADER, envelope_of};
use proptest::prelude::*;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => prop::collection::vec(any::<u8>(), 0..64),
        1 => Just(Vec::new()),
        1 => prop::collection::vec(any::<u8>(), 100 * 1024..=100 * 1024),
    ]
}

/// Header values: numbers at the edges, empty, arbitrary text and 100 KB.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        Just(i64::MIN.to_string()),
        Just(i64::MAX.to_string()),
        Just(u64::MAX.to_string()),
        Just("-1".to_owned()),
        Just(String::new()),
        "[^\r\n]{0,40}",
        "[a-z]{100}".prop_map(|s| s.repeat(1024)),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(VERSION_HEADER.to_owned()),
        Just(ENTITY_HEADER.to_owned()),
        Just(SOURCE_TIME_HEADER.to_owned()),
        "[A-Za-z0-9-]{1,20}",
    ]
}

fn published() -> impl Strategy<Value = Option<SystemTime>> {
    prop::option::of(prop_oneof![
        (0u64..=i64::MAX as u64).prop_map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        (1u64..1 << 40).prop_map(|s| UNIX_EPOCH - Duration::from_secs(s)),
        Just(UNIX_EPOCH + Duration::from_secs(u64::MAX / 2)),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_headers_map_without_panic(
        id in prop::option::of("[a-zA-Z0-9:._-]{1,64}"),
        headers in prop::collection::vec((name(), text()), 0..24),
        payload in payload(),
        published in published(),
    ) {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            let (Ok(k), Ok(v)) = (k.parse::<HeaderName>(), v.parse::<HeaderValue>()) else {
                continue;
            };
            map.append(k, v);
        }
        if let Some(id) = &id {
            map.insert(ID_HEADER, id.as_str());
        }
        let raw = envelope_of(Some(&map), &payload, published);
        prop_assert_eq!(&raw.payload, &payload);
        prop_assert_eq!(raw.id, id.map(String::into_bytes));
        if let Some(t) = raw.meta.source_time {
            prop_assert!(t >= UNIX_EPOCH);
        }
    }

    #[test]
    fn many_headers(n in 0usize..2000) {
        let mut map = HeaderMap::new();
        for i in 0..n {
            map.insert(format!("h-{i}").as_str(), "v");
        }
        let raw = envelope_of(Some(&map), b"p", None::<SystemTime>);
        prop_assert_eq!(raw.meta.headers.len(), n);
    }
}

/// The worst known case for NATS: huge, negative and non-numeric `oncely-*` values.
#[test]
fn out_of_range_values_are_dropped_and_published_time_is_the_fallback() {
    let published = UNIX_EPOCH + Duration::from_millis(1_700_000_000_000);
    for bad in [
        u64::MAX.to_string(),
        "-1".into(),
        "1e3".into(),
        String::new(),
    ] {
        let mut map = HeaderMap::new();
        map.insert(ID_HEADER, "m-1");
        map.insert(SOURCE_TIME_HEADER, bad.as_str());
        map.insert(VERSION_HEADER, bad.as_str());
        let raw = envelope_of(Some(&map), b"p", Some(published));
        assert_eq!(raw.id.as_deref(), Some(&b"m-1"[..]));
        assert_eq!(raw.meta.version, bad.parse::<i64>().ok(), "{bad:?}");
        assert_eq!(raw.meta.source_time, Some(published), "{bad:?}");
    }
    let mut map = HeaderMap::new();
    map.insert(SOURCE_TIME_HEADER, "5");
    let raw = envelope_of(Some(&map), b"p", Some(published));
    assert_eq!(
        raw.meta.source_time,
        time_from_unix_ms(5),
        "the producer's time wins"
    );
    let before_epoch = UNIX_EPOCH - Duration::from_secs(1);
    assert_eq!(
        envelope_of(None, b"p", Some(before_epoch)).meta.source_time,
        None
    );
}
