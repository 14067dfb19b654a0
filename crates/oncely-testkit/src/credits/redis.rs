//! The credits effect on the Redis store: per applied message an entry in the list `ledger`
//! and the balance `balance:<account>` read (guarded by the commit step) and set, under the
//! store's hash tag, committed with the claim in one Lua script.

use super::Credit;
use oncely_core::{Envelope, Error, Handled, Handler, RawEnvelope, Result};
use oncely_redis::{RedisStore, RedisTx, redis};

/// The credits handler on the Redis store (see the [module](super) for the keys).
#[derive(Debug, Clone, Copy, Default)]
pub struct RedisCredits;

fn redis_err(what: &'static str) -> impl FnOnce(redis::RedisError) -> Error {
    move |e| Error::transient(format!("Redis {what}")).with_source(e)
}

impl RedisCredits {
    /// The ledger `(message id, amount)`, one entry per applied effect, in order.
    pub async fn ledger(store: &RedisStore) -> Result<Vec<(String, i64)>> {
        let rows: Vec<String> = redis::cmd("LRANGE")
            .arg(store.key("ledger"))
            .arg(0)
            .arg(-1)
            .query_async(&mut store.connection())
            .await
            .map_err(redis_err("LRANGE"))?;
        rows.iter()
            .map(|r| {
                r.split_once(' ')
                    .and_then(|(a, id)| Some((id.to_owned(), a.parse().ok()?)))
                    .ok_or_else(|| Error::permanent(format!("ledger entry {r:?}")))
            })
            .collect()
    }

    /// Every account's balance `(account, balance)`.
    pub async fn balances(store: &RedisStore) -> Result<Vec<(String, i64)>> {
        let prefix = store.key("balance:");
        let keys = store.scan_keys(&format!("{prefix}*")).await?;
        let mut conn = store.connection();
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(500) {
            let values: Vec<Option<i64>> = redis::cmd("MGET")
                .arg(chunk)
                .query_async(&mut conn)
                .await
                .map_err(redis_err("MGET"))?;
            for (key, value) in chunk.iter().zip(values) {
                let account = key.strip_prefix(&prefix).unwrap_or(key).to_owned();
                out.push((account, value.unwrap_or(0)));
            }
        }
        Ok(out)
    }

    /// Deletes every key of the store's tag: claims, dead letters, ledger and balances.
    pub async fn reset(store: &RedisStore) -> Result<()> {
        let mut conn = store.connection();
        for chunk in store.scan_keys(&store.key("*")).await?.chunks(500) {
            let _: i64 = redis::cmd("DEL")
                .arg(chunk)
                .query_async(&mut conn)
                .await
                .map_err(redis_err("DEL"))?;
        }
        Ok(())
    }
}

impl Handler<RedisTx> for RedisCredits {
    async fn handle(&self, tx: &mut RedisTx, message: &Envelope) -> Result<Handled> {
        let credit = Credit::parse(message.payload())?;
        let ledger = tx.key("ledger");
        tx.rpush(
            &ledger,
            format!("{} {}", credit.amount, message.id().as_str()),
        )?;
        let balance = tx.key(&format!("balance:{}", credit.account));
        let now = tx.get_i64(&balance).await?;
        tx.set(&balance, now + credit.amount)?;
        Ok(Handled::Applied)
    }

    fn lock_key(&self, message: &RawEnvelope) -> Option<String> {
        Credit::lock_key(&message.payload)
    }
}
