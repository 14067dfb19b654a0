//! One run: the plan's messages published into the reference source, the real
//! [`Consumer`] (one or two processes) over the wrapped reference store, interrupted and
//! restarted as the plan says, on a current-thread runtime whose clock is paused (virtual
//! time advances only when every task waits). Then the invariants ([`crate::check`]).

use crate::check;
use crate::faults::{SimHandler, SimSource, SimStore};
use crate::plan::{Plan, Stop};
use crate::plants::{Plant, Planted};
use crate::world::World;
use futures::future::LocalBoxFuture;
use oncely_core::{
    Consumer, ConsumerName, Inspect, RawEnvelope, RetryPolicy, Source, StatsSnapshot, Store,
};
use oncely_testkit::chaos::AckEarly;
use oncely_testkit::{FaultySource, SourceFaults};
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// Virtual time after which a run that has not ended is stuck (a delivery held forever).
const STUCK_AFTER_MS: u64 = 600_000;

/// The consumer name every run uses.
pub fn consumer_name() -> ConsumerName {
    ConsumerName::new("sim").expect("valid name")
}

/// What one run came to.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The plan run.
    pub plan: Plan,
    /// Broken invariants (empty: the run passed).
    pub violations: Vec<String>,
    /// Crash points and faults this run reached.
    pub marks: BTreeSet<&'static str>,
    /// Digest of the run's whole trace and final state.
    pub digest: String,
    /// The trace (the first lines of a long one).
    pub trace: Vec<String>,
}

impl RunResult {
    /// True when every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Runs `plan` (with `plant`, if any) on a fresh paused current-thread runtime.
pub fn run_plan(plan: &Plan, plant: Option<Plant>) -> RunResult {
    // The runtime's retry and store-backoff jitter draw from this thread's generator.
    fastrand::seed(plan.seed);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    rt.block_on(simulate(plan.clone(), plant))
}

/// One copy of a message as published, and when (virtual ms).
struct Copy {
    at: u64,
    order: f64,
    message: RawEnvelope,
}

fn copies(world: &World) -> Vec<Copy> {
    let plan = &world.plan;
    let mut out = Vec::new();
    for m in &plan.msgs {
        let mut meta = oncely_core::Meta {
            entity_key: m.key.clone(),
            version: m.version,
            ..Default::default()
        };
        if m.late {
            meta.source_time = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1000));
        }
        let mut payloads = vec![m.amount; m.copies as usize];
        if m.conflict {
            payloads.push(m.amount + 1000);
        }
        for amount in payloads {
            let n = out.len() as u32;
            let late = world.draw("publish-late", n) < 0.4;
            let at = if late && plan.publish_spread_ms > 0 {
                (world.draw("publish-at", n) * plan.publish_spread_ms as f64) as u64
            } else {
                0
            };
            let mut message = RawEnvelope::new(m.id.clone(), amount.to_string());
            message.meta = meta.clone();
            out.push(Copy {
                at,
                order: world.draw("publish-order", n),
                message,
            });
        }
    }
    out.sort_by(|a, b| {
        (a.at, a.order)
            .partial_cmp(&(b.at, b.order))
            .expect("no NaN")
    });
    out
}

type Sim = Consumer<Planted, SimHandler>;

fn consumer(plan: &Plan, store: &Planted, handler: &SimHandler) -> Sim {
    Consumer::new(consumer_name(), store.clone(), handler.clone())
        .concurrency(plan.concurrency)
        .group_commit(plan.group_commit)
        .linger(Duration::from_millis(plan.linger_ms))
        .check_inbox_first(plan.inbox_first)
        .retry(
            RetryPolicy::default()
                .max_attempts(plan.attempts)
                .base_delay(Duration::from_millis(10))
                .max_delay(Duration::from_millis(100)),
        )
}

fn start<Src: Source>(
    c: &Sim,
    source: Src,
    stop: &CancellationToken,
) -> LocalBoxFuture<'static, oncely_core::Result<StatsSnapshot>> {
    let (c, stop) = (c.clone(), stop.clone());
    Box::pin(async move { c.run(source, stop).await })
}

async fn simulate(plan: Plan, plant: Option<Plant>) -> RunResult {
    let world = World::new(plan.clone());
    world.event(format!("plan {plan}"));
    if let Some(p) = plant {
        world.event(format!("plant {}", p.name()));
    }
    let sim = SimStore::new(world.clone());
    let store = Planted::new(sim.clone(), plant, world.clone());
    let mut handler = SimHandler::new(world.clone(), &sim);
    handler.ignore_versions = plant == Some(Plant::VersionsIgnored);
    let source = FaultySource::new(SourceFaults {
        seed: plan.seed,
        duplicate_rate: plan.dup_rate,
        reorder_window: plan.reorder,
        lost_ack_rate: plan.lost_ack_rate,
    });
    world.mark(if plan.group_commit > 1 {
        "mode: group commit"
    } else {
        "mode: one per transaction"
    });
    if plan.workers > 1 {
        world.mark("path: two workers");
    }
    let mut published: Vec<RawEnvelope> = Vec::new();
    let copies = copies(&world);
    let mut later = Vec::new();
    for c in copies {
        if c.at == 0 {
            source.publish(c.message.clone());
            published.push(c.message);
        } else {
            later.push(c);
        }
    }
    let producer = tokio::spawn(produce(
        world.clone(),
        source.clone(),
        sim.clone(),
        later,
        plant,
    ));

    let mut stops = plan.stops.clone();
    stops.sort_by_key(|(at, _)| *at);
    let mut stops = stops.into_iter();
    let mut stats: Vec<StatsSnapshot> = Vec::new();
    let mut interrupted = false;
    let mut receive_crashes_ok = true;
    loop {
        let token = CancellationToken::new();
        let consumers: Vec<Sim> = (0..plan.workers)
            .map(|_| consumer(&plan, &store, &handler))
            .collect();
        let runs = consumers.iter().enumerate().map(|(w, c)| {
            let src = SimSource::new(source.clone(), world.clone(), sim.memory.clone(), w);
            if plant == Some(Plant::AckBeforeCommit) {
                start(c, AckEarly(src), &token)
            } else {
                start(c, src, &token)
            }
        });
        // Boxed, not pinned on the stack, so that a kill can drop it (and with it each run's
        // task set, which aborts every task in flight).
        let mut all = Box::pin(futures::future::join_all(runs));
        let _marks = BatchMarks(&world, &consumers);
        let next = stops.next();
        let deadline = match next {
            Some((at, _)) => world.at(at),
            None => world.at(STUCK_AFTER_MS),
        };
        let ended = tokio::select! {
            biased;
            done = &mut all => Some(done),
            _ = tokio::time::sleep_until(deadline) => None,
        };
        if let Some(done) = ended {
            stats.extend(done.into_iter().filter_map(|r| r.ok()));
            break;
        }
        interrupted = true;
        token.cancel();
        match next {
            None => {
                world.violation(format!(
                    "stuck: the run had not ended {} s after its start (a delivery held forever?); source unacked {}",
                    STUCK_AFTER_MS / 1000,
                    source.unacked()
                ));
                break;
            }
            Some((_, Stop::Shutdown)) => {
                world.event("shutdown");
                world.mark("stop: graceful shutdown");
                match tokio::time::timeout(Duration::from_secs(60), &mut all).await {
                    Ok(done) => stats.extend(done.into_iter().filter_map(|r| r.ok())),
                    Err(_) => world.violation("stuck: shutdown did not finish within 60 s"),
                }
            }
            Some((_, Stop::Kill)) => {
                world.event("kill");
                world.mark("stop: process killed");
                receive_crashes_ok = false;
                drop(all);
            }
        }
        // Let the killed process's tasks go away before the next one starts.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let replayed = producer.await.unwrap_or_default();
    // Writes a plant deferred (a dead letter stored after its ack) land before the checks.
    tokio::time::sleep(Duration::from_millis(10)).await;
    published.extend(replayed);
    let faults = source.fault_stats();
    if faults.lost_acks > 0 {
        world.mark("fault: lost ack");
    }
    if faults.duplicates_injected > 0 {
        world.mark("fault: broker duplicate");
    }
    check::run(
        &world,
        &sim,
        &source,
        &published,
        &stats,
        !interrupted,
        receive_crashes_ok,
    )
    .await;
    let trace = world.trace();
    RunResult {
        violations: world.violations(),
        marks: world.marks(),
        digest: world.digest(),
        trace,
        plan,
    }
}

/// Publishes the copies meant for later, runs the dead-letter replay at its time, then
/// closes the source. Returns what the replay published.
async fn produce(
    world: World,
    source: FaultySource,
    store: SimStore,
    later: Vec<Copy>,
    plant: Option<Plant>,
) -> Vec<RawEnvelope> {
    let mut out = Vec::new();
    let mut replay_at = world.plan.replay_at;
    for c in later {
        if let Some(at) = replay_at.filter(|at| *at <= c.at) {
            tokio::time::sleep_until(world.at(at)).await;
            out.extend(replay(&world, &source, &store, plant).await);
            replay_at = None;
        }
        tokio::time::sleep_until(world.at(c.at)).await;
        world.event(format!(
            "publish {:?}",
            c.message.display_id().unwrap_or_default()
        ));
        source.publish(c.message.clone());
        out.push(c.message);
    }
    if let Some(at) = replay_at {
        tokio::time::sleep_until(world.at(at)).await;
        out.extend(replay(&world, &source, &store, plant).await);
    }
    source.close();
    out
}

/// `oncely dlq replay` while messages are processed: republishes each dead letter whose id
/// the inbox does not hold, conflicts excepted (with plant `replay-ignores-inbox`, applies
/// every row's effect directly instead).
async fn replay(
    world: &World,
    source: &FaultySource,
    store: &SimStore,
    plant: Option<Plant>,
) -> Vec<RawEnvelope> {
    let name = consumer_name();
    let letters = store
        .memory
        .dead_letters(Some(&name))
        .await
        .unwrap_or_default();
    world.mark("path: dead-letter replay during the run");
    world.event(format!("replay of {} dead letters", letters.len()));
    let mut out = Vec::new();
    for l in letters {
        let Some(id) = l
            .raw_id
            .as_deref()
            .and_then(|b| std::str::from_utf8(b).ok())
        else {
            continue;
        };
        if oncely_core::MessageId::new(id).is_err() {
            continue;
        }
        if plant == Some(Plant::ReplayIgnoresInbox) {
            if let Ok(mut tx) = store.begin_memory().await {
                let amount = std::str::from_utf8(&l.payload)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(0);
                tx.add_effect(id, amount);
                let _ = store.memory.commit(tx).await;
            }
            continue;
        }
        let held = store.memory.claimed_hash(&name, id).await.ok().flatten();
        if l.reason == "conflict" || held.is_some() {
            continue;
        }
        let message = RawEnvelope {
            id: l.raw_id.clone(),
            payload: l.payload.clone(),
            meta: l.meta.clone(),
        };
        world.event(format!("replay {id:?}"));
        source.publish(message.clone());
        out.push(message);
    }
    out
}

/// Marks, when dropped (however the epoch ends), whether its groups committed whole or
/// fell back to one at a time.
struct BatchMarks<'a>(&'a World, &'a [Sim]);

impl Drop for BatchMarks<'_> {
    fn drop(&mut self) {
        for c in self.1 {
            let b = c.group_commit_stats();
            if b.committed > 0 {
                self.0.mark("path: group committed whole");
            }
            if b.fallbacks > 0 {
                self.0.mark("path: group fell back to one at a time");
            }
        }
    }
}
