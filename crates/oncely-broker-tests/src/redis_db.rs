//! The ledger on the Redis store (`--store redis://…` of the consumer binary): per applied
//! message a ledger entry and the account's balance read (guarded) and set, committed with
//! the claim in one Lua script; read back by the checker from Redis alone.

use crate::check::{DeadRow, Effects, Report};
use crate::ledger::parse_payload;
use crate::workload::Workload;
use oncely_core::{Envelope, Error, Handled, Handler, Inspect, RawEnvelope, Result};
use oncely_redis::{RedisStore, RedisStoreOptions, RedisTx, redis};

/// A Redis store whose keys carry one hash tag, with the ledger's keys under it.
#[derive(Clone)]
pub struct RedisDb {
    store: RedisStore,
}

fn redis_err(what: &str) -> impl FnOnce(redis::RedisError) -> Error {
    let what = what.to_owned();
    move |e| Error::transient(format!("Redis {what}")).with_source(e)
}

impl RedisDb {
    /// Opens the store at `url` (store options in the URL, see `RedisStoreOptions`); its
    /// keys carry the hash tag `tag` unless the URL sets `?tag=`.
    pub async fn open(url: &str, tag: &str) -> Result<Self> {
        let (base, mut options) = RedisStoreOptions::from_url(url)?;
        if !url.contains("tag=") {
            options.tag = tag.to_owned();
        }
        Ok(Self {
            store: RedisStore::connect_with(&base, options).await?,
        })
    }

    /// The store.
    pub fn store(&self) -> &RedisStore {
        &self.store
    }

    /// The handler writing this store's ledger and balances.
    pub fn handler(&self) -> RedisLedger {
        RedisLedger
    }

    /// Deletes every key of the tag: claims, dead letters, ledger and balances.
    pub async fn reset(&self) -> Result<()> {
        let mut conn = self.store.connection();
        for chunk in self
            .store
            .scan_keys(&self.store.key("*"))
            .await?
            .chunks(500)
        {
            let _: i64 = redis::cmd("DEL")
                .arg(chunk)
                .query_async(&mut conn)
                .await
                .map_err(redis_err("DEL"))?;
        }
        Ok(())
    }

    /// The ledger: `(message id, amount)` per applied effect.
    pub async fn ledger(&self) -> Result<Vec<(String, i64)>> {
        let rows: Vec<String> = redis::cmd("LRANGE")
            .arg(self.store.key("ledger"))
            .arg(0)
            .arg(-1)
            .query_async(&mut self.store.connection())
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

    /// The sum of every account's balance.
    pub async fn balance_total(&self) -> Result<i64> {
        let mut conn = self.store.connection();
        let mut total = 0;
        for chunk in self
            .store
            .scan_keys(&self.store.key("balance:*"))
            .await?
            .chunks(500)
        {
            let values: Vec<Option<i64>> = redis::cmd("MGET")
                .arg(chunk)
                .query_async(&mut conn)
                .await
                .map_err(redis_err("MGET"))?;
            total += values.into_iter().flatten().sum::<i64>();
        }
        Ok(total)
    }

    async fn dead(&self) -> Result<Vec<DeadRow>> {
        Ok(self
            .store
            .dead_letters(None)
            .await?
            .into_iter()
            .map(|d| (d.message_id, d.reason, d.payload))
            .collect())
    }
}

impl Effects for RedisDb {
    async fn counts(&self) -> Result<(i64, i64)> {
        let rows: i64 = redis::cmd("LLEN")
            .arg(self.store.key("ledger"))
            .query_async(&mut self.store.connection())
            .await
            .map_err(redis_err("LLEN"))?;
        Ok((rows, self.dead().await?.len() as i64))
    }

    /// Ledger, balances and dead letters against `workload`; the balances must sum to the
    /// applied copies' amounts.
    async fn report(&self, workload: &Workload) -> Result<Report> {
        let ledger = self.ledger().await?;
        let total = self.balance_total().await?;
        let dead = self.dead().await?;
        Ok(Report::judge(workload, &ledger, &dead, Some(total)))
    }
}

/// Per applied message: `RPUSH {tag}:ledger "<amount> <id>"`, and the balance
/// `{tag}:balance:<account>` read and set (a read-modify-write the commit step guards).
/// A payload that is not the demo's JSON is a permanent error (dead-lettered).
#[derive(Debug, Clone, Copy)]
pub struct RedisLedger;

impl Handler<RedisTx> for RedisLedger {
    async fn handle(&self, tx: &mut RedisTx, message: &Envelope) -> Result<Handled> {
        let (account, amount) = parse_payload(message.payload())?;
        let ledger = tx.key("ledger");
        tx.rpush(&ledger, format!("{amount} {}", message.id().as_str()))?;
        let balance = tx.key(&format!("balance:{account}"));
        let now = tx.get_i64(&balance).await?;
        tx.set(&balance, now + amount)?;
        Ok(Handled::Applied)
    }

    fn lock_key(&self, message: &RawEnvelope) -> Option<String> {
        parse_payload(&message.payload)
            .ok()
            .map(|(account, _)| account)
    }
}
