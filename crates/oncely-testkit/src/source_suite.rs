//! The source conformance cases: what every [`Source`] must do, checked against its real
//! broker through a [`SourceHarness`], with effects counted in the reference
//! [`MemoryStore`](crate::MemoryStore).

use crate::chaos::{CrashPlan, CrashingHandler, CrashingStore, Step};
use crate::check::tally;
use crate::ledger::LedgerHandler;
use crate::memory_store::{MemoryHarness, MemoryStore};
use oncely_core::{
    Consumer, ConsumerName, Delivery, Inspect, Meta, RawEnvelope, Result, RetryPolicy, Source,
    StopWhenIdle,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

/// A failed source conformance check.
pub type CaseResult = std::result::Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// What a broker can carry and how quickly it gives back an unsettled delivery.
#[derive(Debug, Clone)]
pub struct SourceTraits {
    /// The longest an unsettled delivery (dropped, nacked, or abandoned by a crash) may take to
    /// come back (default 30 s).
    pub redelivery_within: Duration,
    /// How long the suite waits to be sure nothing more arrives (default 1 s).
    pub quiet: Duration,
    /// A redelivery carries the broker's delivery count, so its attempt is 2 or more
    /// (default true).
    pub counts_deliveries: bool,
    /// A message without an id can be published (default true).
    pub carries_missing_ids: bool,
    /// A message whose id holds a control character (`bad\nid`) can be published (default
    /// true; MQTT strings and NATS headers cannot carry one).
    pub carries_control_ids: bool,
}

impl Default for SourceTraits {
    fn default() -> Self {
        Self {
            redelivery_within: Duration::from_secs(30),
            quiet: Duration::from_secs(1),
            counts_deliveries: true,
            carries_missing_ids: true,
            carries_control_ids: true,
        }
    }
}

/// Connects the source suite to a broker adapter (as [`crate::StoreHarness`] does for stores).
pub trait SourceHarness: Send + Sync + 'static {
    /// The source under test.
    type Source: Source;

    /// A fresh source reading its own destination (queue, stream, topic, consumer group),
    /// named after `case`, ready so that what [`SourceHarness::publish`] sends for `case`
    /// afterwards reaches it.
    fn fresh(&self, case: &str) -> impl Future<Output = Result<Self::Source>> + Send;

    /// Publishes `messages`, in order, to the destination of `case`'s source.
    fn publish(
        &self,
        case: &str,
        messages: Vec<RawEnvelope>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// What this broker carries and how fast it redelivers.
    fn traits(&self) -> SourceTraits {
        SourceTraits::default()
    }
}

fn err(e: oncely_core::Error) -> String {
    format!("source error: {e}")
}

/// The next delivery within `wait`, `None` if nothing came.
async fn next_within<S: Source>(source: &mut S, wait: Duration) -> Result<Option<Delivery>> {
    match tokio::time::timeout(wait, source.next()).await {
        Ok(next) => next,
        Err(_) => Ok(None),
    }
}

/// Acks a delivery the suite only looked at.
async fn acked(d: Delivery) -> Result<()> {
    d.discard().await
}

fn id_of(d: &Delivery) -> String {
    d.message().display_id().unwrap_or_default()
}

/// The suite's consumer: the reference store's recording handler, under one name.
fn suite_consumer(store: &MemoryStore) -> Consumer<MemoryStore, LedgerHandler<MemoryHarness>> {
    let name = ConsumerName::new("source-suite").expect("valid name");
    Consumer::new(name, store.clone(), store.recorder())
}

fn sample(case: &str, i: usize) -> RawEnvelope {
    let mut payload = format!("{i}:").into_bytes();
    payload.extend_from_slice(&[0, 1, 0xfe, 0xff, b'\n']);
    let mut meta = Meta::default();
    if i.is_multiple_of(2) {
        meta.entity_key = Some(format!("acct-{}", i % 5));
        meta.version = Some(i as i64 + 1);
        meta.headers = BTreeMap::from([("trace".to_owned(), format!("t-{i}"))]);
    }
    if i.is_multiple_of(3) {
        let ms = 1_700_000_000_000 + i as u64 * 1000;
        meta.source_time = Some(UNIX_EPOCH + Duration::from_millis(ms));
    }
    RawEnvelope {
        id: Some(format!("{case}-{i}").into_bytes()),
        payload,
        meta,
    }
}

/// Everything published arrives once acked: id, payload bytes, entity key, version, source
/// time (to the millisecond) and headers as sent; acked messages do not come back.
pub async fn round_trip<H: SourceHarness>(h: &H) -> CaseResult {
    let traits = h.traits();
    let mut source = h.fresh("round-trip").await.map_err(err)?;
    let sent: Vec<RawEnvelope> = (0..20).map(|i| sample("round-trip", i)).collect();
    h.publish("round-trip", sent.clone()).await.map_err(err)?;
    let want: HashMap<String, RawEnvelope> = sent
        .into_iter()
        .map(|m| (m.display_id().unwrap_or_default(), m))
        .collect();
    let mut seen = HashMap::new();
    let deadline = Instant::now() + traits.redelivery_within;
    while seen.len() < want.len() && Instant::now() < deadline {
        let Some(d) = next_within(&mut source, traits.redelivery_within)
            .await
            .map_err(err)?
        else {
            break;
        };
        let id = id_of(&d);
        let Some(expected) = want.get(&id) else {
            return Err(format!("delivered an id never published: {id:?}"));
        };
        let got = d.message();
        ensure!(got.id == expected.id, "{id}: raw id bytes differ");
        ensure!(
            got.payload == expected.payload,
            "{id}: payload {:?}, sent {:?}",
            got.payload,
            expected.payload
        );
        let (m, e) = (&got.meta, &expected.meta);
        ensure!(
            m.entity_key == e.entity_key,
            "{id}: entity {:?}",
            m.entity_key
        );
        ensure!(m.version == e.version, "{id}: version {:?}", m.version);
        if e.source_time.is_some() {
            ensure!(
                m.source_time == e.source_time,
                "{id}: source time {:?}, sent {:?}",
                m.source_time,
                e.source_time
            );
        }
        for (k, v) in &e.headers {
            ensure!(
                m.headers.get(k) == Some(v),
                "{id}: header {k} = {:?}, sent {v:?}",
                m.headers.get(k)
            );
        }
        acked(d).await.map_err(err)?;
        *seen.entry(id).or_insert(0) += 1;
    }
    ensure!(
        seen.len() == want.len(),
        "{} of {} messages arrived",
        seen.len(),
        want.len()
    );
    if let Some(d) = next_within(&mut source, traits.quiet).await.map_err(err)? {
        return Err(format!("acked message {} came back", id_of(&d)));
    }
    Ok(())
}

/// A delivery dropped without settling (a crashed consumer) and a nacked one both come back,
/// with a higher attempt where the broker counts deliveries; once acked, it stays away.
pub async fn unsettled_comes_back<H: SourceHarness>(h: &H) -> CaseResult {
    let traits = h.traits();
    let mut source = h.fresh("comes-back").await.map_err(err)?;
    h.publish("comes-back", vec![RawEnvelope::new("comes-back-1", "7")])
        .await
        .map_err(err)?;
    let mut attempts = Vec::new();
    for settle in ["drop", "nack", "ack"] {
        let Some(d) = next_within(&mut source, traits.redelivery_within)
            .await
            .map_err(err)?
        else {
            return Err(format!(
                "no delivery within {:?} after {attempts:?} (then {settle})",
                traits.redelivery_within
            ));
        };
        ensure!(id_of(&d) == "comes-back-1", "delivered {:?}", id_of(&d));
        ensure!(d.message().payload == b"7", "payload changed on redelivery");
        attempts.push(d.attempt());
        match settle {
            "drop" => drop(d),
            "nack" => d.nack().await.map_err(err)?,
            _ => acked(d).await.map_err(err)?,
        }
    }
    if traits.counts_deliveries {
        ensure!(
            attempts[0] == 1 && attempts[1] >= 2 && attempts[2] > attempts[1],
            "attempts {attempts:?}: want 1, then rising"
        );
    }
    if let Some(d) = next_within(&mut source, traits.quiet).await.map_err(err)? {
        return Err(format!("acked message {} came back", id_of(&d)));
    }
    Ok(())
}

/// A message without an id is delivered (with no id), not dropped and not an error, so the
/// runtime can dead-letter it as `bad_id`.
pub async fn missing_id_is_delivered<H: SourceHarness>(h: &H) -> CaseResult {
    if !h.traits().carries_missing_ids {
        return Ok(());
    }
    bad_id_is_dead_lettered(h, "no-id", None).await
}

/// A message whose id holds a control character is delivered, not dropped and not an
/// error, so the runtime can dead-letter it as `bad_id`.
pub async fn control_id_is_delivered<H: SourceHarness>(h: &H) -> CaseResult {
    if !h.traits().carries_control_ids {
        return Ok(());
    }
    bad_id_is_dead_lettered(h, "control-id", Some(CONTROL_ID.to_vec())).await
}

/// An id the runtime must refuse: it holds a line break.
const CONTROL_ID: &[u8] = b"bad\nid";

/// Publishes a message with the unusable `id` (payload 5) and a good one after it (payload
/// 6), processes both: one `bad_id` dead letter with payload 5, one effect of 6.
async fn bad_id_is_dead_lettered<H: SourceHarness>(
    h: &H,
    case: &str,
    id: Option<Vec<u8>>,
) -> CaseResult {
    let traits = h.traits();
    let mut source = h.fresh(case).await.map_err(err)?;
    let store = MemoryStore::new();
    let consumer = suite_consumer(&store);
    let sent_id = id.clone();
    let bad = RawEnvelope {
        id,
        payload: b"5".to_vec(),
        meta: Meta::default(),
    };
    let after = format!("{case}-after");
    h.publish(case, vec![bad, RawEnvelope::new(after.clone(), "6")])
        .await
        .map_err(err)?;
    for _ in 0..2 {
        let Some(d) = next_within(&mut source, traits.redelivery_within)
            .await
            .map_err(err)?
        else {
            return Err("a message did not arrive".into());
        };
        consumer.process(d).await;
    }
    let letters = store.dead_letters(None).await.map_err(err)?;
    ensure!(
        letters.len() == 1
            && letters[0].reason == "bad_id"
            && letters[0].payload == b"5"
            && letters[0].raw_id == sent_id,
        "dead letters {letters:?}, want one bad_id with payload 5 and raw id {sent_id:?}"
    );
    ensure!(
        store.effects() == vec![(after, 6)],
        "effects {:?}",
        store.effects()
    );
    Ok(())
}

/// 150 messages, 50 of them published twice, consumed with crashes injected after the claim
/// and after the commit, with the messages without a usable id the broker carries (one without
/// an id, one with a control character in it) among them: every id takes effect exactly once
/// (counted in the store), every bad message ends as a `bad_id` dead letter, every abandoned
/// delivery comes back (with a higher attempt where the broker counts deliveries). Run one
/// delivery per transaction, then with group commit (the default), where a crash abandons a
/// whole group.
pub async fn exactly_once_under_crashes<H: SourceHarness>(h: &H) -> CaseResult {
    crashes_case(h, "crashes", 1, &[Step::Claimed, Step::Committed], 0.15).await?;
    crashes_case(
        h,
        "group-crashes",
        oncely_core::DEFAULT_GROUP_COMMIT,
        &[Step::Claimed, Step::Committed],
        0.15,
    )
    .await
}

async fn crashes_case<H: SourceHarness>(
    h: &H,
    tag: &str,
    group_commit: usize,
    steps: &[Step],
    rate: f64,
) -> CaseResult {
    let traits = h.traits();
    let source = h.fresh(tag).await.map_err(err)?;
    let mut messages = Vec::new();
    let mut expected = HashMap::new();
    for i in 0..150 {
        let id = format!("{tag}-{i}");
        let amount = (i % 9 + 1) as i64;
        expected.insert(id.clone(), amount);
        messages.push(RawEnvelope::new(id, amount.to_string()));
    }
    let copies: Vec<RawEnvelope> = messages.iter().step_by(3).cloned().collect();
    messages.extend(copies);
    let mut bad_ids = Vec::new();
    if traits.carries_missing_ids {
        bad_ids.push(None);
    }
    if traits.carries_control_ids {
        bad_ids.push(Some(CONTROL_ID.to_vec()));
    }
    let mut bad_payloads = BTreeSet::new();
    for (i, id) in bad_ids.into_iter().enumerate() {
        let payload = format!("bad-{tag}-{i}").into_bytes();
        bad_payloads.insert(payload.clone());
        let bad = RawEnvelope {
            id,
            payload,
            meta: Meta::default(),
        };
        messages.insert(50 * (i + 1), bad);
    }
    h.publish(tag, messages).await.map_err(err)?;
    let max_attempt = Arc::new(AtomicU32::new(0));
    let source = MaxAttempt {
        inner: source,
        max: max_attempt.clone(),
    };
    let store = MemoryStore::new();
    let plan = CrashPlan::new(3, rate).only_at(steps);
    let consumer = Consumer::new(
        ConsumerName::new("source-suite").expect("valid name"),
        CrashingStore::new(store.clone(), plan.clone()),
        CrashingHandler(store.recorder()),
    )
    .concurrency(4)
    .group_commit(group_commit)
    .retry(RetryPolicy::default().base_delay(Duration::from_millis(1)));
    let idle = traits.redelivery_within + traits.quiet;
    let stats = consumer
        .run(StopWhenIdle::new(source, idle), CancellationToken::new())
        .await
        .map_err(err)?;
    let t = tally(&store.effects(), &expected, &[]);
    ensure!(
        t.is_exactly_once(),
        "group_commit {group_commit}: {t:?} (stats {stats:?}): want 0 double, 0 lost"
    );
    ensure!(
        plan.fired() > 0 && stats.abandoned > 0,
        "group_commit {group_commit}: the crash plan never fired"
    );
    ensure!(
        stats.duplicates > 0,
        "group_commit {group_commit}: no Duplicate although commits were abandoned (stats {stats:?})"
    );
    let letters = store.dead_letters(None).await.map_err(err)?;
    let bad_id_payloads: BTreeSet<Vec<u8>> = letters
        .iter()
        .filter(|l| l.reason == "bad_id")
        .map(|l| l.payload.clone())
        .collect();
    ensure!(
        bad_id_payloads == bad_payloads && letters.iter().all(|l| l.reason == "bad_id"),
        "group_commit {group_commit}: dead letters {letters:?}, want bad_id for {bad_payloads:?}"
    );
    let max_attempt = max_attempt.load(Ordering::Relaxed);
    ensure!(
        !traits.counts_deliveries || max_attempt >= 2,
        "group_commit {group_commit}: abandoned deliveries came back with attempt {max_attempt} at most, want 2 or more"
    );
    Ok(())
}

/// Passes deliveries on, keeping the highest attempt seen.
struct MaxAttempt<S> {
    inner: S,
    max: Arc<AtomicU32>,
}

impl<S: Source> Source for MaxAttempt<S> {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        let next = self.inner.next().await;
        if let Ok(Some(d)) = &next {
            self.max.fetch_max(d.attempt(), Ordering::Relaxed);
        }
        next
    }

    fn read_ahead(&mut self, deliveries: usize) {
        self.inner.read_ahead(deliveries);
    }
}

type Case<'a> = (
    &'static str,
    std::pin::Pin<Box<dyn Future<Output = CaseResult> + 'a>>,
);

/// Runs every source conformance case against `harness`, printing one line per case, and
/// panics listing the cases that failed.
///
/// ```ignore
/// #[tokio::test(flavor = "multi_thread")]
/// async fn source_conformance() {
///     oncely_testkit::exercise_source(&MyBrokerHarness::connect().await).await;
/// }
/// ```
pub async fn exercise_source<H: SourceHarness>(harness: &H) {
    let cases: Vec<Case<'_>> = vec![
        ("round_trip", Box::pin(round_trip(harness))),
        (
            "unsettled_comes_back",
            Box::pin(unsettled_comes_back(harness)),
        ),
        (
            "missing_id_is_delivered",
            Box::pin(missing_id_is_delivered(harness)),
        ),
        (
            "control_id_is_delivered",
            Box::pin(control_id_is_delivered(harness)),
        ),
        (
            "exactly_once_under_crashes",
            Box::pin(exactly_once_under_crashes(harness)),
        ),
    ];
    let started = SystemTime::now();
    let mut failures = Vec::new();
    for (name, case) in cases {
        match case.await {
            Ok(()) => println!("source conformance {name} ... ok"),
            Err(why) => {
                println!("source conformance {name} ... FAILED: {why}");
                failures.push(format!("{name}: {why}"));
            }
        }
    }
    let took = started.elapsed().unwrap_or_default();
    assert!(
        failures.is_empty(),
        "source conformance failures (after {took:?}):\n{}",
        failures.join("\n")
    );
}
