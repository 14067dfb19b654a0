//! The consumers a cell runs, all fed by an in-process [`MemorySource`] and all acking after
//! their commit: the plain at-least-once consumer, oncely per-message and batch mode, and the
//! raw SQL reference.

use crate::bed::{Credit, Item, Ops};
use anyhow::{Result, anyhow};
use futures::FutureExt;
use oncely_core::{
    Consumer, ConsumerName, Delivery, GroupCommitStats, MemorySource, PayloadHash, RetryPolicy,
    Source, StatsSnapshot,
};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Retries for transient failures (SQLite busy, PostgreSQL deadlocks): quick, so a rare retry
/// does not dominate a cell.
pub(crate) fn retry_policy() -> RetryPolicy {
    RetryPolicy::default()
        .max_attempts(20)
        .base_delay(Duration::from_millis(2))
        .max_delay(Duration::from_millis(50))
}

/// oncely per-message mode: [`oncely_core::Consumer`] with `concurrency` deliveries at once
/// (reading the inbox before each transaction when `check_first`).
pub(crate) async fn oncely<B: Ops>(
    bed: &B,
    name: &ConsumerName,
    source: MemorySource,
    concurrency: usize,
    check_first: bool,
) -> Result<StatsSnapshot> {
    let consumer = Consumer::new(name.clone(), bed.store(), bed.handler())
        .group_commit(1)
        .concurrency(concurrency)
        .check_inbox_first(check_first)
        .retry(retry_policy());
    Ok(consumer.run(source, CancellationToken::new()).await?)
}

/// oncely batch mode: [`oncely_core::Consumer::group_commit`] with batches of up to `batch`
/// deliveries, one batch at a time (all messages are published before the clock starts, so batches
/// fill at once; the 1 ms linger only matters for the last one).
pub(crate) async fn oncely_batch<B: Ops>(
    bed: &B,
    name: &ConsumerName,
    source: MemorySource,
    batch: usize,
) -> Result<(StatsSnapshot, GroupCommitStats)> {
    let consumer = Consumer::new(name.clone(), bed.store(), bed.handler())
        .group_commit(batch)
        .concurrency(1)
        .linger(Duration::from_millis(1))
        .retry(retry_policy());
    let stats = consumer.run(source, CancellationToken::new()).await?;
    Ok((stats, consumer.group_commit_stats()))
}

/// Spawns one task per delivery, at most `concurrency` at once (the shape of
/// `Consumer::run`), each running `work` and acking after it succeeded (nack otherwise, so
/// the source redelivers).
async fn per_delivery<F, Fut>(mut source: MemorySource, concurrency: usize, work: F) -> Result<()>
where
    F: Fn(Delivery) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut tasks = JoinSet::new();
    loop {
        let permit = permits.clone().acquire_owned().await?;
        let Some(delivery) = source.next().await? else {
            break;
        };
        let work = work.clone();
        tasks.spawn(async move {
            let _permit = permit;
            work(delivery).await;
        });
        while let Some(done) = tasks.try_join_next() {
            done?;
        }
    }
    while let Some(done) = tasks.join_next().await {
        done?;
    }
    Ok(())
}

/// The baseline: an at-least-once consumer with the same effect and no dedup.
pub(crate) async fn plain<B: Ops>(bed: &B, source: MemorySource, concurrency: usize) -> Result<()> {
    let bed = bed.clone();
    per_delivery(source, concurrency, move |delivery: Delivery| {
        let bed = bed.clone();
        async move {
            let msg = delivery.message();
            let done = match (msg.id.as_deref(), Credit::parse(&msg.payload)) {
                (Some(id), Ok(credit)) => match std::str::from_utf8(id) {
                    Ok(id) => bed.plain(id, &credit).await.is_ok(),
                    Err(_) => false,
                },
                _ => false,
            };
            // The baseline commits through its own code, not a Store: no proof to ack with.
            let _ = if done {
                delivery.discard().await
            } else {
                delivery.nack().await
            };
        }
    })
    .await
}

fn item(delivery: &Delivery) -> Option<Item> {
    let msg = delivery.message();
    let id = std::str::from_utf8(msg.id.as_deref()?).ok()?.to_owned();
    let credit = Credit::parse(&msg.payload).ok()?;
    Some(Item {
        id,
        hash: PayloadHash::of(&msg.payload).to_hex(),
        credit,
    })
}

/// Takes one delivery (waiting for it), then whatever else is ready, up to `max`.
pub(crate) async fn take(source: &mut MemorySource, max: usize) -> Result<Vec<Delivery>> {
    let Some(first) = source.next().await? else {
        return Ok(Vec::new());
    };
    let mut batch = Vec::with_capacity(max);
    batch.push(first);
    while batch.len() < max {
        match source.next().now_or_never() {
            Some(Ok(Some(d))) => batch.push(d),
            Some(Err(e)) => return Err(e.into()),
            _ => break,
        }
    }
    Ok(batch)
}

/// Runs `concurrency` workers, each taking batches of up to `batch` deliveries from a clone
/// of `source` and calling `work` on them.
pub(crate) async fn batched<F, Fut>(
    source: MemorySource,
    batch: usize,
    concurrency: usize,
    work: F,
) -> Result<()>
where
    F: Fn(Vec<Delivery>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let mut workers = JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let mut source = source.clone();
        let work = work.clone();
        workers.spawn(async move {
            loop {
                let deliveries = take(&mut source, batch).await?;
                if deliveries.is_empty() {
                    return Ok::<(), anyhow::Error>(());
                }
                work(deliveries).await?;
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done??;
    }
    Ok(())
}

/// The raw SQL reference: the same claims and effect through sqlx directly, `batch`
/// deliveries per transaction (single-row statements when `batch` is 1).
pub(crate) async fn raw<B: Ops>(
    bed: &B,
    consumer: &str,
    source: MemorySource,
    batch: usize,
    concurrency: usize,
) -> Result<()> {
    let bed = bed.clone();
    let consumer: Arc<str> = consumer.into();
    batched(source, batch, concurrency, move |deliveries| {
        let bed = bed.clone();
        let consumer = consumer.clone();
        async move {
            let items: Vec<Item> = deliveries.iter().filter_map(item).collect();
            if items.len() != deliveries.len() {
                return Err(anyhow!("the bench published an undecodable message"));
            }
            let mut attempt = 0;
            loop {
                attempt += 1;
                match bed.raw(&consumer, &items).await {
                    Ok(()) => break,
                    Err(e) if e.is_transient() && attempt < 20 => {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            // The raw reference commits through its own code, not a Store: no proof.
            for d in deliveries {
                d.discard().await?;
            }
            Ok(())
        }
    })
    .await
}
