//! The demo on the Redis store (`--store redis://…`): balances and ledger in Redis, written
//! by the testkit's [`RedisCredits`] through `RedisTx` and committed with the claim in one Lua
//! script; read back by the checker.

use super::check::Readings;
use anyhow::{Context, Result};
use oncely_redis::{RedisStore, RedisStoreOptions, redis};
use oncely_testkit::credits::RedisCredits;
use std::collections::HashMap;

/// Opens the store; the demo's keys carry the hash tag `schema` unless the URL sets `?tag=`.
pub(super) async fn open(url: &str, schema: &str) -> Result<RedisStore> {
    let has_tag = url.contains("tag=");
    let (base, mut options) = RedisStoreOptions::from_url(url)?;
    if !has_tag {
        options.tag = schema.to_owned();
    }
    Ok(RedisStore::connect_with(&base, options).await?)
}

async fn values(store: &RedisStore, keys: &[String]) -> Result<Vec<Option<String>>> {
    let mut conn = store.connection();
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(500) {
        let got: Vec<Option<String>> = redis::cmd("MGET")
            .arg(chunk)
            .query_async(&mut conn)
            .await
            .context("MGET")?;
        out.extend(got);
    }
    Ok(out)
}

/// Reads the inbox, the ledger and the balances back.
pub(super) async fn read(store: &RedisStore, consumer: &str) -> Result<Readings> {
    let inbox_prefix = store.key(&format!("inbox:{}:{consumer}:", consumer.len()));
    let inbox_keys = store.scan_keys(&format!("{inbox_prefix}*")).await?;
    let hashes = values(store, &inbox_keys).await?;
    let inbox: HashMap<String, String> = inbox_keys
        .iter()
        .zip(hashes)
        .filter_map(|(k, h)| Some((k.strip_prefix(&inbox_prefix)?.to_owned(), h?)))
        .collect();
    let balances = RedisCredits::balances(store)
        .await?
        .into_iter()
        .map(|(_, balance)| balance)
        .collect();
    let ledger = RedisCredits::ledger(store).await?;
    Ok(Readings {
        inbox,
        ledger,
        balances,
    })
}
