//! The credits workload on the Redis store (`--store redis://…` of the consumer binary): the
//! testkit's [`RedisCredits`] writes per applied message a ledger entry and the account's
//! balance, committed with the claim in one Lua script; read back by the checker from Redis
//! alone.

use crate::check::{DeadRow, Effects, Report};
use crate::workload::Workload;
use oncely_core::{Error, Inspect, Result};
use oncely_redis::{RedisStore, RedisStoreOptions, redis};
use oncely_testkit::credits::RedisCredits;

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
    pub fn handler(&self) -> RedisCredits {
        RedisCredits
    }

    /// Deletes every key of the tag: claims, dead letters, ledger and balances.
    pub async fn reset(&self) -> Result<()> {
        RedisCredits::reset(&self.store).await
    }

    /// The ledger: `(message id, amount)` per applied effect.
    pub async fn ledger(&self) -> Result<Vec<(String, i64)>> {
        RedisCredits::ledger(&self.store).await
    }

    /// The sum of every account's balance.
    pub async fn balance_total(&self) -> Result<i64> {
        let balances = RedisCredits::balances(&self.store).await?;
        Ok(balances.iter().map(|(_, b)| b).sum())
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
