//! Dead letters written straight through [`Store::dead_letter`]: the worst messages are
//! stored and read back (within the limits the harness declares), repeats of one dead letter
//! are one row.

use crate::harness::{DeadLetterLimits, StoreHarness};
use crate::store_suite::CaseResult;
use oncely_core::{
    ConsumerName, DeadLetter, DeadLetterReason, Inspect, MessageId, Meta, PayloadHash, RawEnvelope,
    Store, StoredDeadLetter,
};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// 16 MB: the payload size every store takes (capped only by a declared `payload_max`).
pub const MB16: usize = 16_000_000;

fn err(e: oncely_core::Error) -> String {
    format!("store error: {e}")
}

fn name(s: &str) -> ConsumerName {
    ConsumerName::new(s).expect("valid name")
}

/// A dead letter of `message` for `consumer` (a valid name) after one attempt.
pub fn letter(consumer: &str, message: RawEnvelope, reason: DeadLetterReason) -> DeadLetter {
    DeadLetter {
        consumer: name(consumer),
        message,
        reason,
        attempts: 1,
    }
}

/// A raw message with `id` (or none) and `payload`, no headers.
pub fn raw(id: Option<&[u8]>, payload: Vec<u8>) -> RawEnvelope {
    RawEnvelope {
        id: id.map(<[u8]>::to_vec),
        payload,
        meta: Meta::default(),
    }
}

/// The reason of a message without an id.
pub fn bad_id() -> DeadLetterReason {
    DeadLetterReason::BadId(MessageId::parse_optional(None).expect_err("no id is bad"))
}

/// The reason of a payload `received` under an id first stored with `stored`.
pub fn conflict(stored: &[u8], received: &[u8]) -> DeadLetterReason {
    DeadLetterReason::Conflict {
        stored: PayloadHash::of(stored),
        received: PayloadHash::of(received),
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

fn ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The bytes after the last `…` marker, if any.
fn marker_len(bytes: &[u8]) -> Option<usize> {
    let marker = "…".as_bytes();
    let at = bytes.windows(marker.len()).rposition(|w| w == marker)?;
    Some(bytes.len() - at)
}

fn check_row(
    limits: &DeadLetterLimits,
    what: &str,
    message: &RawEnvelope,
    row: &StoredDeadLetter,
) -> CaseResult {
    ensure!(row.raw_id == message.id, "{what}: raw id bytes kept whole");
    ensure!(
        row.payload_hash == PayloadHash::of(&message.payload).to_hex(),
        "{what}: hash of the whole payload"
    );
    let len = message.payload.len();
    if limits.payload_whole_max.is_some_and(|max| len > max) {
        // Stored cut: shorter, the kept part a prefix, the marker at the end.
        let tail = marker_len(&row.payload)
            .ok_or_else(|| format!("{what}: a cut payload ends with the marker"))?;
        let kept = row.payload.len() - tail;
        ensure!(
            row.payload.len() < len && row.payload[..kept] == message.payload[..kept],
            "{what}: cut payload ({} of {len} bytes) keeps a prefix",
            row.payload.len()
        );
    } else {
        ensure!(
            row.payload == message.payload,
            "{what}: payload kept whole ({} of {len} bytes)",
            row.payload.len()
        );
    }
    let shown = row.message_id.as_deref().unwrap_or_default();
    ensure!(
        shown.len() <= 255,
        "{what}: display id {} bytes",
        shown.len()
    );
    ensure!(!shown.contains('\0'), "{what}: display id escapes NUL");
    if limits.text_max.is_some() && message.id.as_ref().is_some_and(|id| id.len() > 255) {
        ensure!(shown.ends_with(" bytes]"), "{what}: {shown}");
    }
    ensure!(row.deliveries == 1, "{what}: deliveries {}", row.deliveries);
    ensure!(
        row.last_seen == row.dead_lettered_at,
        "{what}: last_seen moved on a first write"
    );
    Ok(())
}

/// The worst messages are each stored (no error) and read back through `Inspect`: a 70 kB
/// id, NUL in id / payload / entity key / headers, invalid UTF-8, a 10 kB and a 100 kB
/// entity key, 3 MB of headers, a 200 kB detail, 16 MB and 16 MiB payloads. What the store
/// keeps of each is what its [`DeadLetterLimits`] declare; the raw id and the payload hash
/// are always whole.
pub async fn worst_dead_letters_are_stored<H: StoreHarness>(h: &H) -> CaseResult {
    let s = h.fresh().await.map_err(err)?;
    let limits = h.dead_letter_limits();
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
    let huge_reason = DeadLetterReason::Permanent(format!("boom\0{}", "d".repeat(200_000)));
    let (mb16, mib16) = (
        MB16.min(limits.payload_max),
        crate::harness::DEAD_LETTER_PAYLOAD.min(limits.payload_max),
    );
    if mib16 < crate::harness::DEAD_LETTER_PAYLOAD {
        println!("worst dead letters: payloads capped at {mib16} bytes (declared by the harness)");
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
                    headers: huge_headers.clone(),
                    ..Meta::default()
                },
            },
            huge_reason.clone(),
        ),
        ("16mb", raw(Some(b"16mb"), pattern(mb16)), bad_id()),
        ("16mib", raw(Some(b"16mib"), pattern(mib16)), bad_id()),
    ];
    for (what, message, reason) in &cases {
        s.dead_letter(&letter("worst", message.clone(), reason.clone()))
            .await
            .map_err(|e| format!("dead-lettering {what} failed: {e}"))?;
    }
    let rows = s.dead_letters(Some(&name("worst"))).await.map_err(err)?;
    ensure!(
        rows.len() == cases.len(),
        "{} rows, want one per case ({})",
        rows.len(),
        cases.len()
    );
    for ((what, message, _), row) in cases.iter().zip(&rows) {
        check_row(&limits, what, message, row)?;
    }
    // The NUL case in detail.
    let nul = &rows[1];
    let key = if limits.text_keeps_nul {
        "ent\0key".to_owned()
    } else {
        "ent\u{FFFD}key".to_owned()
    };
    ensure!(
        nul.meta.entity_key.as_deref() == Some(key.as_str()),
        "entity key {:?}, want {key:?}",
        nul.meta.entity_key
    );
    ensure!(
        nul.meta.headers == nul_meta.headers,
        "headers keep NUL: {:?}",
        nul.meta.headers
    );
    ensure!(
        rows[3].meta.entity_key.as_deref() == Some(big_key.as_str()),
        "a 10 kB entity key is kept whole"
    );
    let huge = &rows[4];
    let key = huge.meta.entity_key.as_deref().unwrap_or_default();
    if let Some(max) = limits.text_max {
        ensure!(
            key.len() <= max && key.ends_with(" bytes]"),
            "entity key cut to {} bytes with the marker",
            key.len()
        );
        ensure!(
            huge.detail.len() <= max && huge.detail.ends_with(" bytes]"),
            "detail cut to {} bytes with the marker",
            huge.detail.len()
        );
        ensure!(
            huge.meta.headers.contains_key("oncely.dropped_headers"),
            "dropped headers are counted"
        );
    } else {
        ensure!(
            key == huge_key,
            "entity key kept whole ({} bytes)",
            key.len()
        );
        ensure!(
            huge.detail == huge_reason.to_string(),
            "detail kept whole ({} bytes)",
            huge.detail.len()
        );
        ensure!(huge.meta.headers == huge_headers, "headers kept whole");
    }
    Ok(())
}

/// (consumer, raw id, reason, payload, deliveries).
type Summary = (String, Option<Vec<u8>>, String, Vec<u8>, u32);

/// The same dead letter written five times is one row with `deliveries` 5, the most attempts
/// any write reported, and `last_seen` moved, both times by the store's clock; another
/// reason, another payload, another consumer or id (case counts), no id and an empty id are
/// rows of their own; reading by consumer matches it exactly.
pub async fn repeated_dead_letter_is_one_row<H: StoreHarness>(h: &H) -> CaseResult {
    let s = h.fresh().await.map_err(err)?;
    let same = letter(
        "billing",
        raw(Some(b"m-1"), b"new".to_vec()),
        conflict(b"old", b"new"),
    );
    let before = ms(H::clock(&s).await.map_err(err)?);
    for attempts in [1, 3, 2, 1, 1] {
        let l = DeadLetter {
            attempts,
            ..same.clone()
        };
        s.dead_letter(&l).await.map_err(err)?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let after = ms(H::clock(&s).await.map_err(err)?);
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
        s.dead_letter(l).await.map_err(err)?;
    }
    let rows = s.dead_letters(None).await.map_err(err)?;
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
    let want = vec![
        row("billing", Some(b"m-1"), "conflict", b"new", 5),
        row("billing", Some(b"m-1"), "bad_id", b"new", 1),
        row("billing", Some(b"m-1"), "conflict", b"newer", 1),
        row("Billing", Some(b"m-1"), "conflict", b"new", 1),
        row("billing", Some(b"M-1"), "conflict", b"new", 1),
        row("billing", None, "bad_id", b"new", 2),
        row("billing", Some(b""), "bad_id", b"new", 1),
    ];
    ensure!(summary == want, "rows {summary:?}, want {want:?}");
    let first = &rows[0];
    ensure!(
        first.attempts == 3,
        "attempts {}, want the most any write reported (3)",
        first.attempts
    );
    ensure!(
        ms(first.last_seen) >= ms(first.dead_lettered_at) + 15,
        "last_seen did not move: {:?} .. {:?}",
        first.dead_lettered_at,
        first.last_seen
    );
    for t in [ms(first.dead_lettered_at), ms(first.last_seen)] {
        ensure!(
            (before - 5..=after + 5).contains(&t),
            "{t} not by the store's clock, in {before}..{after}"
        );
    }
    let billing = s.dead_letters(Some(&name("billing"))).await.map_err(err)?;
    ensure!(
        billing.len() == 6 && billing.iter().all(|r| r.consumer == "billing"),
        "{} rows for 'billing', want 6: the consumer match is exact ('Billing' is another)",
        billing.len()
    );
    Ok(())
}
