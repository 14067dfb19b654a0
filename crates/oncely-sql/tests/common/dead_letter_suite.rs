//! Dead letters on the SQL stores only: migration 0002 folds the repeats of a table written
//! by version 1. (The worst dead letters and the repeats of one dead letter are cases of the
//! testkit's store suite, run on every store by the conformance tests.)

use super::{Fx, TestStore, text};
use oncely_core::PayloadHash;
use oncely_sql::{Dialect, INBOX, Tables};
use oncely_testkit::dead_letter_cases::{bad_id, conflict, letter, raw};
use std::time::UNIX_EPOCH;

/// (consumer, raw id, payload, reason, dead_lettered_at) of a version-1 row.
type OldRow<'a> = (&'a str, Option<&'a [u8]>, &'a [u8], &'a str, i64);
/// (row id, consumer, deliveries, first seen ms, last seen ms).
type Folded = (i64, String, u32, i64, i64);

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
        tables = tables.with_schema(fx.name()).unwrap();
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
}
