//! The demo on the Redis store (`--store redis://…`): balances and ledger in Redis, written
//! through `RedisTx` and committed with the claim in one Lua script; read back by the checker.

use super::check::Readings;
use super::credits::Credit;
use anyhow::{Context, Result};
use oncely_core::{Envelope, Handled, Handler, RawEnvelope};
use oncely_redis::{RedisStore, RedisStoreOptions, RedisTx, redis};
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

/// The credits handler on Redis: a ledger entry per applied message and the balance read,
/// then set (a read-modify-write the commit step guards: a concurrent change makes it retry).
#[derive(Clone, Copy)]
pub(super) struct RedisCredits;

impl Handler<RedisTx> for RedisCredits {
    async fn handle(&self, tx: &mut RedisTx, message: &Envelope) -> oncely_core::Result<Handled> {
        let credit = Credit::parse(message.payload())?;
        let ledger = tx.key("demo:ledger");
        tx.rpush(
            &ledger,
            format!("{} {}", credit.amount, message.id().as_str()),
        )?;
        let balance = tx.key(&format!("demo:balance:{}", credit.account));
        let now = tx.get_i64(&balance).await?;
        tx.set(&balance, now + credit.amount)?;
        Ok(Handled::Applied)
    }

    fn lock_key(&self, message: &RawEnvelope) -> Option<String> {
        Credit::parse(&message.payload).ok().map(|c| c.account)
    }
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

/// Deletes every key of the demo's tag (claims, dead letters, ledger, balances).
pub(super) async fn reset(store: &RedisStore) -> Result<()> {
    let all = store.scan_keys(&store.key("*")).await?;
    let mut conn = store.connection();
    for chunk in all.chunks(500) {
        let _: i64 = redis::cmd("DEL")
            .arg(chunk)
            .query_async(&mut conn)
            .await
            .context("DEL")?;
    }
    Ok(())
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
    let balance_keys = store.scan_keys(&store.key("demo:balance:*")).await?;
    let balances = values(store, &balance_keys)
        .await?
        .into_iter()
        .map(|b| b.and_then(|b| b.parse().ok()).unwrap_or(0))
        .collect();
    let rows: Vec<String> = redis::cmd("LRANGE")
        .arg(store.key("demo:ledger"))
        .arg(0)
        .arg(-1)
        .query_async(&mut store.connection())
        .await
        .context("LRANGE")?;
    let ledger = rows
        .iter()
        .filter_map(|r| {
            let (amount, id) = r.split_once(' ')?;
            Some((id.to_owned(), amount.parse().ok()?))
        })
        .collect();
    Ok(Readings {
        inbox,
        ledger,
        balances,
    })
}
