//! Dead letters on every store: the worst messages are stored and read back, repeats of one
//! dead letter are one row, and migration 0002 folds the repeats of an existing table.

use super::{Fx, TestStore};
use oncely_core::{
    ConsumerName, DeadLetter, DeadLetterReason, MessageId, Meta, PayloadHash, RawEnvelope,
    StoredDeadLetter,
};
use oncely_sql::{Dialect, INBOX, Tables};
use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

/// The 16 MB payload every store must take whole.
pub const MB16: usize = 16_000_000;
/// A payload of 16 MiB: above MariaDB's default `max_allowed_packet` once the rest of the
/// row is added, so MySQL stores it cut (with a marker); the others whole.
pub const MIB16: usize = 16 * 1024 * 1024;

fn name(s: &str) -> ConsumerName {
    ConsumerName::new(s).unwrap()
}

fn letter(consumer: &str, message: RawEnvelope, reason: DeadLetterReason) -> DeadLetter {
    DeadLetter {
        consumer: name(consumer),
        message,
        reason,
        attempts: 1,
    }
}

fn raw(id: Option<&[u8]>, payload: Vec<u8>) -> RawEnvelope {
    RawEnvelope {
        id: id.map(<[u8]>::to_vec),
        payload,
        meta: Meta::default(),
    }
}

fn bad_id() -> DeadLetterReason {
    DeadLetterReason::BadId(MessageId::parse_optional(None).unwrap_err())
}

fn conflict(stored: &[u8], received: &[u8]) -> DeadLetterReason {
    DeadLetterReason::Conflict {
        stored: PayloadHash::of(stored),
        received: PayloadHash::of(received),
    }
}

/// The text a column of `dialect` keeps of `text` (PostgreSQL's TEXT takes no NUL).
fn as_stored(text: &str, dialect: Dialect) -> String {
    match dialect {
        Dialect::Postgres => text.replace('\0', "\u{FFFD}"),
        _ => text.to_owned(),
    }
}

/// The worst messages: each is stored (no error) and read back through `Inspect`.
pub async fn worst_cases_are_stored<S: TestStore>(fx: Fx<S>) {
    let s = &fx.store;
    let d = S::DIALECT;
    let long_id: Vec<u8> = (0..70_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut nul_meta = Meta {
        entity_key: Some("ent\0key".into()),
        ..Meta::default()
    };
    nul_meta.headers.insert("k\0ey".into(), "va\0lue".into());
    nul_meta.headers.insert("plain".into(), "ok".into());
    let big_key = "é".repeat(5_000); // 10 KB
    let huge_key = "k".repeat(100_000);
    let mut huge_headers = BTreeMap::new();
    for i in 0..30 {
        huge_headers.insert(format!("h{i:02}"), "v".repeat(100_000));
    }
    let cases: Vec<(&str, RawEnvelope, DeadLetterReason)> = vec![
        ("long-id", raw(Some(&long_id), b"p1".to_vec()), bad_id()),
        (
            "nul",
            RawEnvelope {
                id: Some(b"nul\0id".to_vec()),
                payload: b"p2\0".to_vec(),
                meta: nul_meta.clone(),
            },
            bad_id(),
        ),
        (
            "invalid-utf8",
            raw(Some(b"bad\xff\xfeid"), vec![0xff, 0, 0xfe]),
            bad_id(),
        ),
        (
            "big-key",
            RawEnvelope {
                id: Some(b"big-key".to_vec()),
                payload: b"p3".to_vec(),
                meta: Meta {
                    entity_key: Some(big_key.clone()),
                    ..Meta::default()
                },
            },
            DeadLetterReason::Permanent("x".into()),
        ),
        (
            "huge-key-headers-detail",
            RawEnvelope {
                id: Some(b"huge".to_vec()),
                payload: b"p4".to_vec(),
                meta: Meta {
                    entity_key: Some(huge_key.clone()),
                    headers: huge_headers,
                    ..Meta::default()
                },
            },
            DeadLetterReason::Permanent(format!("boom\0{}", "d".repeat(200_000))),
        ),
        ("16mb", raw(Some(b"16mb"), pattern(MB16)), bad_id()),
        ("16mib", raw(Some(b"16mib"), pattern(MIB16)), bad_id()),
    ];
    for (what, message, reason) in &cases {
        s.dead_letter(&letter("worst", message.clone(), reason.clone()))
            .await
            .unwrap_or_else(|e| panic!("{}: dead-lettering {what} failed: {e}", S::SERVER));
    }
    let rows = s.dead_letters(Some(&name("worst"))).await.unwrap();
    assert_eq!(rows.len(), cases.len(), "one row per case");
    for ((what, message, _), row) in cases.iter().zip(&rows) {
        check_row(d, what, message, row);
    }
    // The NUL case in detail.
    let nul = &rows[1];
    assert_eq!(
        nul.meta.entity_key.as_deref(),
        Some(as_stored("ent\0key", d).as_str())
    );
    assert_eq!(
        nul.meta.headers, nul_meta.headers,
        "headers keep NUL (JSON)"
    );
    assert_eq!(rows[3].meta.entity_key.as_deref(), Some(big_key.as_str()));
    let huge = &rows[4];
    let key = huge.meta.entity_key.as_deref().unwrap();
    assert!(
        key.len() <= 65_535 && key.ends_with(" bytes]"),
        "{}",
        key.len()
    );
    assert!(huge.detail.len() <= 64 * 1024 && huge.detail.ends_with(" bytes]"));
    assert!(huge.meta.headers.contains_key("oncely.dropped_headers"));
    let cut = &rows[6];
    if d == Dialect::MySql {
        assert!(cut.payload.len() < MIB16, "MySQL cuts the 16 MiB payload");
        assert!(cut.payload.ends_with(b" bytes]"));
        let kept = cut.payload.len() - marker_len(&cut.payload);
        assert_eq!(cut.payload[..kept], cases[6].1.payload[..kept]);
    }
    fx.cleanup().await;
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

fn marker_len(bytes: &[u8]) -> usize {
    let marker = "…".as_bytes();
    let at = bytes
        .windows(marker.len())
        .rposition(|w| w == marker)
        .expect("marker");
    bytes.len() - at
}

fn check_row(d: Dialect, what: &str, message: &RawEnvelope, row: &StoredDeadLetter) {
    assert_eq!(row.raw_id, message.id, "{what}: raw id bytes kept whole");
    assert_eq!(
        row.payload_hash,
        PayloadHash::of(&message.payload).to_hex(),
        "{what}: hash of the whole payload"
    );
    let whole = !(d == Dialect::MySql && message.payload.len() == MIB16);
    if whole {
        assert!(row.payload == message.payload, "{what}: payload kept whole");
    }
    let shown = row.message_id.as_deref().unwrap_or_default();
    assert!(
        shown.len() <= 255,
        "{what}: display id {} bytes",
        shown.len()
    );
    assert!(!shown.contains('\0'), "{what}: display id escapes NUL");
    if message.id.as_ref().is_some_and(|id| id.len() > 255) {
        assert!(shown.ends_with(" bytes]"), "{what}: {shown}");
    }
    assert_eq!(row.deliveries, 1, "{what}");
    assert_eq!(row.last_seen, row.dead_lettered_at, "{what}");
}

/// (consumer, raw id, reason, payload, deliveries).
type Summary = (String, Option<Vec<u8>>, String, Vec<u8>, u32);
/// (consumer, raw id, payload, reason, dead_lettered_at) of a version-1 row.
type OldRow<'a> = (&'a str, Option<&'a [u8]>, &'a [u8], &'a str, i64);
/// (row id, consumer, deliveries, first seen ms, last seen ms).
type Folded = (i64, String, u32, i64, i64);

/// The same dead letter five times is one row with `deliveries` 5; another reason, another
/// payload or another consumer (case counts) is another row.
pub async fn repeats_are_one_row<S: TestStore>(fx: Fx<S>) {
    let s = &fx.store;
    let same = letter(
        "billing",
        raw(Some(b"m-1"), b"new".to_vec()),
        conflict(b"old", b"new"),
    );
    let before = db_now(&fx).await;
    for attempts in [1, 3, 2, 1, 1] {
        let l = DeadLetter {
            attempts,
            ..same.clone()
        };
        s.dead_letter(&l).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let after = db_now(&fx).await;
    let others = [
        letter("billing", raw(Some(b"m-1"), b"new".to_vec()), bad_id()),
        letter(
            "billing",
            raw(Some(b"m-1"), b"newer".to_vec()),
            conflict(b"old", b"newer"),
        ),
        letter(
            "Billing",
            raw(Some(b"m-1"), b"new".to_vec()),
            conflict(b"old", b"new"),
        ),
        letter(
            "billing",
            raw(Some(b"M-1"), b"new".to_vec()),
            conflict(b"old", b"new"),
        ),
        letter("billing", raw(None, b"new".to_vec()), bad_id()),
        letter("billing", raw(None, b"new".to_vec()), bad_id()),
        letter("billing", raw(Some(b""), b"new".to_vec()), bad_id()),
    ];
    for l in &others {
        s.dead_letter(l).await.unwrap();
    }
    let rows = s.dead_letters(None).await.unwrap();
    let summary: Vec<Summary> = rows
        .iter()
        .map(|r| {
            (
                r.consumer.clone(),
                r.raw_id.clone(),
                r.reason.clone(),
                r.payload.clone(),
                r.deliveries,
            )
        })
        .collect();
    let row = |c: &str, id: Option<&[u8]>, reason: &str, p: &[u8], n: u32| {
        (
            c.to_owned(),
            id.map(<[u8]>::to_vec),
            reason.to_owned(),
            p.to_vec(),
            n,
        )
    };
    assert_eq!(
        summary,
        vec![
            row("billing", Some(b"m-1"), "conflict", b"new", 5),
            row("billing", Some(b"m-1"), "bad_id", b"new", 1),
            row("billing", Some(b"m-1"), "conflict", b"newer", 1),
            row("Billing", Some(b"m-1"), "conflict", b"new", 1),
            row("billing", Some(b"M-1"), "conflict", b"new", 1),
            row("billing", None, "bad_id", b"new", 2),
            row("billing", Some(b""), "bad_id", b"new", 1),
        ],
        "{}",
        S::SERVER
    );
    let first = &rows[0];
    assert_eq!(first.attempts, 3, "the most attempts any write reported");
    let ms = |t: std::time::SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    assert!(
        ms(first.last_seen) >= ms(first.dead_lettered_at) + 15,
        "last_seen moved: {:?} .. {:?}",
        first.dead_lettered_at,
        first.last_seen
    );
    for t in [ms(first.dead_lettered_at), ms(first.last_seen)] {
        assert!(
            (before - 5..=after + 5).contains(&t),
            "{t} from the database clock, in {before}..{after}"
        );
    }
    let billing = s.dead_letters(Some(&name("billing"))).await.unwrap();
    assert_eq!(
        billing.len(),
        6,
        "consumer match is exact: 'Billing' is another"
    );
    assert!(billing.iter().all(|r| r.consumer == "billing"));
    fx.cleanup().await;
}

/// "now" by the database clock, in ms.
pub async fn db_now<S: TestStore>(fx: &Fx<S>) -> i64 {
    let rows = fx
        .store
        .rows(format!(
            "SELECT CAST({} AS {}), 'x', 'y'",
            S::DIALECT.now_ms_sql(),
            text(S::DIALECT)
        ))
        .await
        .unwrap();
    rows[0].0.parse().unwrap()
}

/// The type to cast to for reading a value as text.
pub fn text(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => "CHAR",
        _ => "TEXT",
    }
}

fn blob(d: Dialect, bytes: Option<&[u8]>) -> String {
    let Some(bytes) = bytes else {
        return "NULL".into();
    };
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    match d {
        Dialect::Postgres => format!("decode('{hex}', 'hex')"),
        _ => format!("X'{hex}'"),
    }
}

/// A table written by version 1 (repeats as separate rows) is folded by migration 0002:
/// the lowest id per key stays, with `deliveries` = the group's count and `last_seen` = its
/// latest time; `id_hash` is the SHA-256 the store computes, so a new write of the same
/// dead letter lands on the old row.
pub async fn upgrade_folds_repeats<S: TestStore>(fx: Fx<S>) {
    let d = S::DIALECT;
    let mut tables = Tables::default().with_prefix("old_").unwrap();
    if d != Dialect::Sqlite {
        tables = tables.with_schema(&fx.name).unwrap();
    }
    let store = S::open(fx.url(), tables.clone()).await.unwrap();
    store
        .exec(INBOX.migrations(d)[0].sql(&tables))
        .await
        .unwrap();
    let (p1, p2) = (b"p1".as_slice(), b"p2".as_slice());
    let old: [OldRow; 9] = [
        ("billing", Some(b"a"), p1, "conflict", 1000),
        ("billing", Some(b"a"), p1, "conflict", 3000),
        ("billing", Some(b"a"), p1, "conflict", 2000),
        ("Billing", Some(b"a"), p1, "conflict", 1500),
        ("billing", Some(b"a"), p2, "conflict", 1000),
        ("billing", None, p1, "bad_id", 1000),
        ("billing", None, p1, "bad_id", 4000),
        ("billing", Some(b""), p1, "bad_id", 1000),
        ("billing", Some(b"b"), p1, "conflict", 1000),
    ];
    let dl = tables.dead_letters();
    for (consumer, id, payload, reason, at) in old {
        let shown = id.map_or("NULL".into(), |i| {
            format!("'{}'", String::from_utf8_lossy(i))
        });
        store
            .exec(format!(
                "INSERT INTO {dl} (consumer, message_id, raw_id, payload, payload_hash, stored_hash, reason, detail, attempts, entity_key, version, source_time, headers, dead_lettered_at) \
                 VALUES ('{consumer}', {shown}, {}, {}, '{}', NULL, '{reason}', 'old', 1, NULL, NULL, NULL, '{{}}', {at})",
                blob(d, id),
                blob(d, Some(payload)),
                PayloadHash::of(payload).to_hex(),
            ))
            .await
            .unwrap();
    }
    let applied = store.migrate_now().await.unwrap();
    assert_eq!(
        applied,
        INBOX.migrations(d).len(),
        "0001 again (a no-op) and 0002"
    );
    let rows = store.dead_letters(None).await.unwrap();
    let got: Vec<Folded> = rows
        .iter()
        .map(|r| {
            let ms =
                |t: std::time::SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
            (
                r.id,
                r.consumer.clone(),
                r.deliveries,
                ms(r.dead_lettered_at),
                ms(r.last_seen),
            )
        })
        .collect();
    let want: Vec<Folded> = vec![
        (1, "billing".into(), 3, 1000, 3000),
        (4, "Billing".into(), 1, 1500, 1500),
        (5, "billing".into(), 1, 1000, 1000),
        (6, "billing".into(), 2, 1000, 4000),
        (8, "billing".into(), 1, 1000, 1000),
        (9, "billing".into(), 1, 1000, 1000),
    ];
    assert_eq!(got, want, "{}", S::SERVER);
    let hashes = store
        .rows(format!(
            "SELECT CAST(id AS {}), id_hash, 'x' FROM {dl} ORDER BY id",
            text(d)
        ))
        .await
        .unwrap();
    let sha = |b: &[u8]| PayloadHash::of(b).to_hex();
    let want_hashes = [
        ("1", sha(b"a")),
        ("4", sha(b"a")),
        ("5", sha(b"a")),
        ("6", String::new()),
        ("8", sha(b"")),
        ("9", sha(b"b")),
    ];
    for ((id, hash, _), (want_id, want_hash)) in hashes.iter().zip(want_hashes) {
        assert_eq!((id.as_str(), hash.trim()), (want_id, want_hash.as_str()));
    }
    // New writes of old dead letters land on the folded rows.
    store
        .dead_letter(&letter(
            "billing",
            raw(Some(b"a"), p1.to_vec()),
            conflict(b"x", p1),
        ))
        .await
        .unwrap();
    store
        .dead_letter(&letter("billing", raw(None, p1.to_vec()), bad_id()))
        .await
        .unwrap();
    let rows = store.dead_letters(None).await.unwrap();
    assert_eq!(rows.len(), 6);
    assert_eq!((rows[0].id, rows[0].deliveries), (1, 4));
    assert_eq!((rows[3].id, rows[3].deliveries), (6, 3));
    assert_eq!(store.migrate_now().await.unwrap(), 0);
    fx.cleanup().await;
}
