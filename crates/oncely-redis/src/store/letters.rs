//! Dead letters in Redis: one hash per `(consumer, raw id, payload hash, reason)`, written by
//! one script that counts repeats; read back in id order.

use super::{RedisStore, redis_error, script};
use oncely_core::wire::time_from_unix_ms;
use oncely_core::{
    ConsumerName, DeadLetter, DeadLetterReason, Meta, PayloadHash, Result, StoredDeadLetter,
};
use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

/// The dedup key: SHA-256 of the length-prefixed consumer, raw id, payload hash and reason.
fn dedup_key(consumer: &str, raw_id: Option<&[u8]>, hash: &str, code: &str) -> String {
    let mut bytes = Vec::new();
    let mut part = |b: &[u8]| {
        bytes.extend_from_slice(&(b.len() as u64).to_be_bytes());
        bytes.extend_from_slice(b);
    };
    part(consumer.as_bytes());
    match raw_id {
        Some(id) => {
            part(b"1");
            part(id);
        }
        None => part(b"0"),
    }
    part(hash.as_bytes());
    part(code.as_bytes());
    PayloadHash::of(&bytes).to_hex()
}

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(super) async fn write(store: &RedisStore, letter: &DeadLetter) -> Result<()> {
    let message = &letter.message;
    let hash = PayloadHash::of(&message.payload).to_hex();
    let code = letter.reason.code();
    let consumer = letter.consumer.as_str();
    let mut fields: Vec<(&str, Vec<u8>)> = vec![
        ("consumer", consumer.as_bytes().to_vec()),
        ("payload", message.payload.clone()),
        ("payload_hash", hash.clone().into_bytes()),
        ("reason", code.as_bytes().to_vec()),
    ];
    if let Some(id) = message.display_id() {
        fields.push(("message_id", id.into_bytes()));
    }
    if let Some(raw) = &message.id {
        fields.push(("raw_id", raw.clone()));
    }
    if let DeadLetterReason::Conflict { stored, .. } = &letter.reason {
        fields.push(("stored_hash", stored.to_hex().into_bytes()));
    }
    let meta = &message.meta;
    if let Some(entity) = &meta.entity_key {
        fields.push(("entity_key", entity.clone().into_bytes()));
    }
    if let Some(version) = meta.version {
        fields.push(("version", version.to_string().into_bytes()));
    }
    if let Some(at) = meta.source_time {
        fields.push(("source_time", unix_ms(at).to_string().into_bytes()));
    }
    if !meta.headers.is_empty() {
        let json = serde_json::to_vec(&meta.headers).unwrap_or_default();
        fields.push(("headers", json));
    }
    let mut invocation = script::DEAD_LETTER.prepare_invoke();
    invocation
        .key(store.key("dlq:index"))
        .key(store.key("dlq:seq"))
        .key(store.key("dlq:rows"))
        .key(store.key("dlq:row:"))
        .arg(dedup_key(consumer, message.id.as_deref(), &hash, code))
        .arg(letter.attempts)
        .arg(letter.reason.to_string());
    for (name, value) in &fields {
        invocation.arg(*name).arg(value.as_slice());
    }
    let mut conn = store.connection();
    let _id: i64 = invocation
        .invoke_async(&mut conn)
        .await
        .map_err(|e| redis_error("dead-letter script", e))?;
    Ok(())
}

pub(super) async fn read(
    store: &RedisStore,
    consumer: Option<&ConsumerName>,
) -> Result<Vec<StoredDeadLetter>> {
    let mut conn = store.connection();
    let ids: Vec<i64> = redis::cmd("ZRANGE")
        .arg(store.key("dlq:rows"))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .map_err(|e| redis_error("ZRANGE", e))?;
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.cmd("HGETALL").arg(store.key(&format!("dlq:row:{id}")));
    }
    let rows: Vec<HashMap<String, Vec<u8>>> = if ids.is_empty() {
        Vec::new()
    } else {
        pipe.query_async(&mut conn)
            .await
            .map_err(|e| redis_error("HGETALL", e))?
    };
    Ok(ids
        .into_iter()
        .zip(rows)
        .map(|(id, row)| to_letter(id, row))
        .filter(|l| consumer.is_none_or(|c| c.as_str() == l.consumer))
        .collect())
}

fn to_letter(id: i64, mut row: HashMap<String, Vec<u8>>) -> StoredDeadLetter {
    let text = |name: &str| {
        row.get(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    let number = |t: Option<String>| t.and_then(|t| t.parse::<i64>().ok());
    let time = |t: Option<String>| number(t).and_then(time_from_unix_ms).unwrap_or(UNIX_EPOCH);
    let headers: BTreeMap<String, String> = row
        .get("headers")
        .and_then(|h| serde_json::from_slice(h).ok())
        .unwrap_or_default();
    let meta = Meta {
        entity_key: text("entity_key"),
        version: number(text("version")),
        source_time: number(text("source_time")).and_then(time_from_unix_ms),
        headers,
    };
    StoredDeadLetter {
        id,
        consumer: text("consumer").unwrap_or_default(),
        message_id: text("message_id"),
        payload_hash: text("payload_hash").unwrap_or_default(),
        stored_hash: text("stored_hash"),
        reason: text("reason").unwrap_or_default(),
        detail: text("detail").unwrap_or_default(),
        attempts: number(text("attempts")).map_or(0, |n| n.clamp(0, u32::MAX.into()) as u32),
        dead_lettered_at: time(text("dead_lettered_at")),
        last_seen: time(text("last_seen")),
        deliveries: number(text("deliveries")).map_or(1, |n| n.clamp(0, u32::MAX.into()) as u32),
        meta,
        raw_id: row.remove("raw_id"),
        payload: row.remove("payload").unwrap_or_default(),
    }
}
