//! The peer's workload on the Redis store (issue 28): 5,000 messages, 20 % duplicates, 5 %
//! same-id conflicting payloads, credits kept in Redis — the workload AWS Powertools was
//! measured with — through oncely's `RedisStore` at its defaults, once per durability
//! setting:
//!
//! - `memory`: the Redis of `--redis` (the machine's, AOF off);
//! - `aof`: a redis-server the bench starts with `appendonly yes`, `appendfsync always`;
//! - `replicas:1`: a redis-server the bench starts, with one replica it starts too.
//!
//! A missing `redis-server` binary (or an unreachable `--redis`) skips the cell loudly, or
//! fails the run under `CI` / `ONCELY_REQUIRE_SERVICES`; a skipped cell has no figures.
//! After each round the checker reads the ledger, the balances and the dead letters back
//! from Redis ([`workload::judge`]).

mod workload;

pub use workload::PeerCheck;

use crate::runners::retry_policy;
use anyhow::{Context, Result, bail};
use oncely_core::{CancellationToken, Consumer, ConsumerName, Inspect, MemorySource};
use oncely_redis::{Durability, RedisStore, RedisStoreOptions};
use oncely_testkit::credits::RedisCredits;
use oncely_testkit::redis_server::RedisServer;
use serde::Serialize;
use std::time::{Duration, Instant};
use workload::{Letter, PeerWorkload, judge};

/// Unique messages of a cell (`--quick`: a fifth).
pub const MESSAGES: usize = 5_000;

/// The durability settings, one cell each.
pub const SETTINGS: [&str; 3] = ["memory", "aof", "replicas:1"];

/// One cell: the peer's workload at one durability setting.
#[derive(Debug, Clone, Serialize)]
pub struct PeerCell {
    /// `memory`, `aof` or `replicas:1` (the store URL's `?durability=`).
    pub durability: &'static str,
    /// The server(s) it ran on.
    pub server: String,
    /// Unique messages per round.
    pub messages: usize,
    /// Deliveries per round (duplicates and conflicting copies included).
    pub deliveries: usize,
    /// Exact duplicates per round.
    pub duplicates: usize,
    /// Rounds run (figures are totals over them).
    pub rounds: usize,
    /// Wall time, start of consumption to the last ack, summed over rounds.
    pub seconds: f64,
    /// Deliveries per second; `None` when skipped.
    pub deliveries_per_sec: Option<f64>,
    /// The checker's verdict; `None` when skipped.
    pub check: Option<PeerCheck>,
    /// Why the cell did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl PeerCell {
    /// Whether the cell ran and its checker passed, or it was skipped.
    pub fn ok(&self) -> bool {
        self.skipped.is_some() || self.check.is_some_and(|c| c.ok)
    }
}

/// Runs the three cells, `rounds` rounds each; `shared` is the Redis for `memory`.
pub(crate) async fn run(
    shared: &str,
    quick: bool,
    rounds: usize,
    required: bool,
) -> Result<Vec<PeerCell>> {
    let n = if quick { MESSAGES / 5 } else { MESSAGES };
    let mut cells = Vec::new();
    for durability in SETTINGS {
        let skip = |why: String| -> Result<PeerCell> {
            if required {
                bail!(
                    "the Redis store cell ({durability}) is required (CI / ONCELY_REQUIRE_SERVICES): {why}"
                );
            }
            eprintln!(
                "SKIPPED: the Redis store cell redis_store/{durability} ({why}); set CI or ONCELY_REQUIRE_SERVICES to fail instead"
            );
            Ok(PeerCell {
                durability,
                server: String::new(),
                messages: n,
                deliveries: 0,
                duplicates: 0,
                rounds: 0,
                seconds: 0.0,
                deliveries_per_sec: None,
                check: None,
                skipped: Some(why),
            })
        };
        let (url, servers, server) = match place(durability, shared).await {
            Ok(p) => p,
            Err(e) if RedisServer::is_missing(&e) => {
                cells.push(skip(format!("redis-server binary not found: {e}"))?);
                continue;
            }
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("starting redis-server for {durability}")));
            }
        };
        let store = match connect(&url, durability).await {
            Ok(s) => s,
            Err(e) if durability == "memory" => {
                cells.push(skip(format!("{server}: {e:#}"))?);
                continue;
            }
            Err(e) => return Err(e),
        };
        let cell = measure(&store, durability, server, n, rounds).await;
        let _ = RedisCredits::reset(&store).await;
        drop(servers);
        cells.push(cell.with_context(|| format!("the Redis store cell ({durability})"))?);
    }
    Ok(cells)
}

/// Where a setting runs: the store URL, the servers started for it (killed on drop), and a
/// description.
async fn place(
    durability: &str,
    shared: &str,
) -> std::io::Result<(String, Vec<RedisServer>, String)> {
    match durability {
        "memory" => Ok((
            shared.to_owned(),
            Vec::new(),
            format!("{shared} (the machine's)"),
        )),
        "aof" => {
            let s = RedisServer::start(&["--appendonly", "yes", "--appendfsync", "always"]).await?;
            let what = format!(
                "127.0.0.1:{} (appendonly yes, appendfsync always)",
                s.port()
            );
            Ok((s.url(0), vec![s], what))
        }
        _ => {
            let primary = RedisServer::start(&[]).await?;
            let replica = RedisServer::start_replica_of(&primary).await?;
            let what = format!(
                "127.0.0.1:{} with a replica on 127.0.0.1:{} (AOF off)",
                primary.port(),
                replica.port()
            );
            Ok((primary.url(0), vec![primary, replica], what))
        }
    }
}

async fn connect(url: &str, durability: &str) -> Result<RedisStore> {
    let options = RedisStoreOptions {
        tag: format!("oncely_bench_peer_{}", std::process::id()),
        durability: Durability::parse(durability, Duration::from_secs(1))?,
        ..RedisStoreOptions::default()
    };
    let store = RedisStore::connect_with(url, options)
        .await
        .with_context(|| format!("connecting the Redis store to {url} ({durability})"))?;
    RedisCredits::reset(&store).await?;
    Ok(store)
}

async fn measure(
    store: &RedisStore,
    durability: &'static str,
    server: String,
    n: usize,
    rounds: usize,
) -> Result<PeerCell> {
    let mut seconds = 0.0;
    let mut check: Option<PeerCheck> = None;
    let (mut deliveries, mut duplicates) = (0, 0);
    for round in 0..rounds {
        let workload = PeerWorkload::new(n, &format!("peer-r{round}"));
        (deliveries, duplicates) = (workload.messages.len(), workload.duplicates);
        let (elapsed, c) = one_round(store, &workload).await?;
        seconds += elapsed.as_secs_f64();
        check = Some(match check {
            None => c,
            Some(sum) => sum.merge(c),
        });
    }
    Ok(PeerCell {
        durability,
        server,
        messages: n,
        deliveries,
        duplicates,
        rounds,
        seconds,
        deliveries_per_sec: Some((deliveries * rounds) as f64 / seconds.max(1e-9)),
        check,
        skipped: None,
    })
}

async fn one_round(store: &RedisStore, workload: &PeerWorkload) -> Result<(Duration, PeerCheck)> {
    RedisCredits::reset(store).await?;
    let source = MemorySource::new();
    for m in &workload.messages {
        source.publish(m.clone());
    }
    source.close();
    let name = ConsumerName::new("peer")?;
    let consumer = Consumer::new(name.clone(), store.clone(), RedisCredits).retry(retry_policy());
    let started = Instant::now();
    let stats = consumer.run(source, CancellationToken::new()).await?;
    let elapsed = started.elapsed();
    if stats.nacked > 0 {
        bail!("oncely gave up on deliveries: {stats:?}");
    }
    let (ledger, balance_total) = read_effects(store).await?;
    let letters: Vec<Letter> = store
        .dead_letters(Some(&name))
        .await?
        .into_iter()
        .map(|d| (d.message_id, d.reason, d.payload))
        .collect();
    Ok((elapsed, judge(workload, &ledger, balance_total, &letters)))
}

/// The ledger `(id, amount)` and the sum of the balances, read back from Redis.
async fn read_effects(store: &RedisStore) -> Result<(Vec<(String, i64)>, i64)> {
    let ledger = RedisCredits::ledger(store).await?;
    let balances = RedisCredits::balances(store).await?;
    Ok((ledger, balances.iter().map(|(_, b)| b).sum()))
}
