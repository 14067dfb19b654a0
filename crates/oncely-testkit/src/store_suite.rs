//! The store conformance cases. Each case gets a fresh store from the harness.

use crate::chaos::{AckEarly, CrashPlan, CrashingHandler, CrashingSource, CrashingStore, Step};
use crate::check::tally;
use crate::harness::StoreHarness;
use crate::ledger::{LedgerHandler, Script};
use crate::{FaultySource, SourceFaults};
use oncely_core::{
    Claim, Consumer, ConsumerName, Inspect, LatePolicy, MemorySource, MessageId, Outcome,
    PayloadHash, RawEnvelope, RetryPolicy, Source, Store,
};
use std::collections::HashMap;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// A failed conformance check.
pub type CaseResult = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy::default()
        .max_attempts(3)
        .base_delay(Duration::from_millis(1))
        .max_delay(Duration::from_millis(5))
}

fn consumer<H: StoreHarness>(
    name: &str,
    store: &H::Store,
    handler: &LedgerHandler<H>,
) -> Consumer<H::Store, LedgerHandler<H>> {
    Consumer::new(
        ConsumerName::new(name).expect("valid name"),
        store.clone(),
        handler.clone(),
    )
    .retry(fast_retry())
}

async fn deliver<H: StoreHarness>(
    consumer: &Consumer<H::Store, LedgerHandler<H>>,
    message: RawEnvelope,
) -> Outcome {
    let mut source = MemorySource::new();
    source.publish(message);
    let delivery = source
        .next()
        .await
        .expect("memory source never fails")
        .expect("one message");
    consumer.process(delivery).await
}

fn err(e: oncely_core::Error) -> String {
    format!("store error: {e}")
}

/// Fresh → Applied with one effect; the same message again → Duplicate, no new effect.
pub async fn fresh_then_duplicate<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let handler = LedgerHandler::<H>::default();
    let c = consumer("billing", &store, &handler);
    let first = deliver(&c, RawEnvelope::new("m-1", "10")).await;
    ensure!(
        matches!(first, Outcome::Applied),
        "first delivery: {first:?}, want Applied"
    );
    for _ in 0..2 {
        let again = deliver(&c, RawEnvelope::new("m-1", "10")).await;
        ensure!(
            matches!(again, Outcome::Duplicate),
            "redelivery: {again:?}, want Duplicate"
        );
    }
    let effects = H::effects(&store).await.map_err(err)?;
    ensure!(
        effects == vec![("m-1".to_owned(), 10)],
        "effects {effects:?}, want one row m-1=10"
    );
    Ok(())
}

/// Same id, different payload → Conflict, dead letter with both hashes, never applied.
pub async fn conflict_is_dead_lettered<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let handler = LedgerHandler::<H>::default();
    let c = consumer("billing", &store, &handler);
    deliver(&c, RawEnvelope::new("m-1", "10")).await;
    let second = deliver(&c, RawEnvelope::new("m-1", "99")).await;
    ensure!(
        matches!(second, Outcome::Conflict { .. }),
        "conflicting copy: {second:?}, want Conflict"
    );
    let effects = H::effects(&store).await.map_err(err)?;
    ensure!(
        effects == vec![("m-1".to_owned(), 10)],
        "effects {effects:?}, want only the first copy"
    );
    let letters = store.dead_letters(None).await.map_err(err)?;
    ensure!(letters.len() == 1, "{} dead letters, want 1", letters.len());
    let l = &letters[0];
    ensure!(
        l.reason == "conflict",
        "reason {:?}, want conflict",
        l.reason
    );
    ensure!(
        l.payload == b"99",
        "dead letter keeps the conflicting payload, got {:?}",
        l.payload
    );
    let stored = oncely_core::PayloadHash::of(b"10").to_hex();
    ensure!(
        l.stored_hash.as_deref() == Some(stored.as_str()),
        "stored hash {:?}",
        l.stored_hash
    );
    ensure!(
        l.detail.contains(&stored) && l.detail.contains(&l.payload_hash),
        "detail names both hashes: {}",
        l.detail
    );
    Ok(())
}

/// With `check_inbox_first`, the read before the transaction finds committed claims only
/// with the same hash: duplicates end there, a conflicting copy and a fresh id still go
/// through the claim.
pub async fn inbox_check_first<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let handler = LedgerHandler::<H>::default();
    let c = consumer("billing", &store, &handler).check_inbox_first(true);
    let name = ConsumerName::new("billing").expect("valid name");
    let id = MessageId::new("m-1").expect("valid id");
    let found = store.committed_claim(&name, &id, PayloadHash::of(b"10"));
    ensure!(!found.await.map_err(err)?, "found a claim before any");
    let outcomes = [
        deliver(&c, RawEnvelope::new("m-1", "10")).await,
        deliver(&c, RawEnvelope::new("m-1", "10")).await,
        deliver(&c, RawEnvelope::new("m-1", "99")).await,
        deliver(&c, RawEnvelope::new("m-2", "5")).await,
    ];
    ensure!(
        matches!(
            outcomes,
            [
                Outcome::Applied,
                Outcome::Duplicate,
                Outcome::Conflict { .. },
                Outcome::Applied
            ]
        ),
        "outcomes {outcomes:?}, want Applied, Duplicate, Conflict, Applied"
    );
    let same = store.committed_claim(&name, &id, PayloadHash::of(b"10"));
    ensure!(same.await.map_err(err)?, "committed claim not found");
    let other = store.committed_claim(&name, &id, PayloadHash::of(b"99"));
    ensure!(!other.await.map_err(err)?, "another hash must not match");
    let effects = H::effects(&store).await.map_err(err)?;
    let want = vec![("m-1".to_owned(), 10), ("m-2".to_owned(), 5)];
    ensure!(effects == want, "effects {effects:?}, want {want:?}");
    let letters = store.dead_letters(None).await.map_err(err)?;
    ensure!(
        letters.len() == 1 && letters[0].reason == "conflict",
        "dead letters {letters:?}, want one conflict"
    );
    // The group read: only committed claims with the same hash count, in item order.
    let key = |id: &str, payload: &[u8]| {
        (
            MessageId::new(id).expect("valid id"),
            PayloadHash::of(payload),
        )
    };
    let mut open = store.begin().await.map_err(err)?;
    let pending = store
        .claim(
            &mut open,
            &name,
            &MessageId::new("m-3").expect("valid id"),
            PayloadHash::of(b"1"),
        )
        .await
        .map_err(err)?;
    ensure!(matches!(pending, Claim::Fresh), "m-3 claim: {pending:?}");
    let items = [
        key("m-2", b"5"),
        key("m-1", b"99"),
        key("m-3", b"1"),
        key("m-9", b"1"),
        key("m-1", b"10"),
    ];
    let held = store.committed_claims(&name, &items).await.map_err(err)?;
    ensure!(
        held == [true, false, false, false, true],
        "committed_claims {held:?}, want [true, false, false, false, true] (an uncommitted claim is not held)"
    );
    store.rollback(open).await.map_err(err)?;
    Ok(())
}

/// Group commit with the per-message handler: ready deliveries share a transaction; copies of
/// one id in groups committing at the same moment apply once (4 groups in flight); a failing
/// and a panicking message inside a group are isolated (their neighbours apply once, they are
/// dead-lettered).
pub async fn group_commit<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let handler = LedgerHandler::<H>::default();
    handler.script("m-3", Script::FailPermanent);
    handler.script("m-5", Script::Panic);
    let c = consumer("billing", &store, &handler)
        .group_commit(4)
        .concurrency(4);
    let source = MemorySource::new();
    let mut expected = HashMap::new();
    for i in 0..10 {
        let amount = i as i64 + 1;
        if i != 3 && i != 5 {
            expected.insert(format!("m-{i}"), amount);
        }
        source.publish(RawEnvelope::new(format!("m-{i}"), amount.to_string()));
    }
    for i in 0..10 {
        source.publish(RawEnvelope::new(
            format!("m-{i}"),
            (i as i64 + 1).to_string(),
        ));
    }
    source.close();
    let stats = c
        .run(source.clone(), CancellationToken::new())
        .await
        .map_err(err)?;
    let excused = ["m-3".to_owned(), "m-5".to_owned()];
    let t = tally(&H::effects(&store).await.map_err(err)?, &expected, &excused);
    ensure!(t.is_exactly_once(), "{t:?} (stats {stats:?})");
    ensure!(
        stats.applied == 8 && stats.dead_lettered >= 2,
        "stats {stats:?}: want 8 applied, m-3 and m-5 dead-lettered"
    );
    ensure!(
        c.group_commit_stats().committed + c.group_commit_stats().fallbacks > 0,
        "no group formed: {:?}",
        c.group_commit_stats()
    );
    ensure!(source.unacked() == 0, "messages left unacked");
    Ok(())
}

/// Two consumers each apply the same message once.
pub async fn consumers_are_independent<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let handler = LedgerHandler::<H>::default();
    for name in ["billing", "audit"] {
        let c = consumer(name, &store, &handler);
        for want_applied in [true, false] {
            let o = deliver(&c, RawEnvelope::new("m-1", "5")).await;
            let ok = if want_applied {
                matches!(o, Outcome::Applied)
            } else {
                matches!(o, Outcome::Duplicate)
            };
            ensure!(ok, "consumer {name}: {o:?}");
        }
    }
    let effects = H::effects(&store).await.map_err(err)?;
    ensure!(
        effects.len() == 2,
        "effects {effects:?}, want one per consumer"
    );
    Ok(())
}

/// A failing handler rolls back its effect and leaves no claim; transient failures retry.
pub async fn failures_roll_back<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let handler = LedgerHandler::<H>::default();
    let c = consumer("billing", &store, &handler);
    let name = c.name().clone();
    handler.script("perm", Script::FailPermanent);
    handler.script("flaky", Script::FailTransient(2));
    handler.script("hopeless", Script::FailTransient(100));
    handler.script("boom", Script::Panic);
    let perm = deliver(&c, RawEnvelope::new("perm", "1")).await;
    ensure!(
        matches!(&perm, Outcome::DeadLettered(r) if r.code() == "permanent"),
        "permanent: {perm:?}"
    );
    let flaky = deliver(&c, RawEnvelope::new("flaky", "2")).await;
    ensure!(
        matches!(flaky, Outcome::Applied),
        "transient twice then ok: {flaky:?}"
    );
    let hopeless = deliver(&c, RawEnvelope::new("hopeless", "3")).await;
    ensure!(
        matches!(&hopeless, Outcome::DeadLettered(r) if r.code() == "attempts_exhausted"),
        "exhausted: {hopeless:?}"
    );
    let boom = deliver(&c, RawEnvelope::new("boom", "4")).await;
    ensure!(
        matches!(&boom, Outcome::DeadLettered(r) if r.code() == "panic"),
        "panic: {boom:?}"
    );
    let effects = H::effects(&store).await.map_err(err)?;
    ensure!(
        effects == vec![("flaky".to_owned(), 2)],
        "effects {effects:?}: failed attempts must leave none"
    );
    for id in ["perm", "hopeless", "boom"] {
        let claim = store.claimed_hash(&name, id).await.map_err(err)?;
        ensure!(
            claim.is_none(),
            "{id}: a failed attempt left its claim behind"
        );
    }
    let letters = store.dead_letters(Some(&name)).await.map_err(err)?;
    ensure!(letters.len() == 3, "{} dead letters, want 3", letters.len());
    Ok(())
}

/// Deliveries without a usable id are dead-lettered with a reason, never applied.
pub async fn bad_ids_are_dead_lettered<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let handler = LedgerHandler::<H>::default();
    let c = consumer("billing", &store, &handler);
    let bad: Vec<Option<Vec<u8>>> = vec![
        None,
        Some(Vec::new()),
        Some(vec![b'x'; 256]),
        Some(b"bad\xffutf8".to_vec()),
        Some(b"line\nbreak".to_vec()),
    ];
    for id in &bad {
        let raw = RawEnvelope {
            id: id.clone(),
            payload: b"7".to_vec(),
            ..Default::default()
        };
        let o = deliver(&c, raw).await;
        ensure!(
            matches!(&o, Outcome::DeadLettered(r) if r.code() == "bad_id"),
            "id {id:?}: {o:?}"
        );
    }
    ensure!(
        H::effects(&store).await.map_err(err)?.is_empty(),
        "a bad-id message was applied"
    );
    let letters = store.dead_letters(None).await.map_err(err)?;
    ensure!(
        letters.len() == bad.len(),
        "{} dead letters, want {}",
        letters.len(),
        bad.len()
    );
    ensure!(
        letters
            .iter()
            .all(|l| l.reason == "bad_id" && l.payload == b"7" && !l.detail.is_empty()),
        "dead letters lack reason or payload"
    );
    ensure!(
        letters[3].raw_id.as_deref() == Some(&b"bad\xffutf8"[..]),
        "raw id bytes kept"
    );
    Ok(())
}

/// Two concurrent deliveries of one id: exactly one Applied, the other waits and sees Duplicate.
pub async fn concurrent_duplicates<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let handler = LedgerHandler::<H>::default();
    handler.script("m-1", Script::Hold(Duration::from_millis(300)));
    let c = consumer("billing", &store, &handler);
    let (a, b) = tokio::join!(
        deliver(&c, RawEnvelope::new("m-1", "3")),
        deliver(&c, RawEnvelope::new("m-1", "3"))
    );
    let applied = [&a, &b]
        .iter()
        .filter(|o| matches!(o, Outcome::Applied))
        .count();
    let dups = [&a, &b]
        .iter()
        .filter(|o| matches!(o, Outcome::Duplicate))
        .count();
    ensure!(
        applied == 1 && dups == 1,
        "outcomes {a:?} and {b:?}: want one Applied, one Duplicate"
    );
    let effects = H::effects(&store).await.map_err(err)?;
    ensure!(effects.len() == 1, "effects {effects:?}, want one");
    Ok(())
}

/// A message older than the late window is quarantined, not applied; a duplicate of an id
/// still in the inbox is still just a Duplicate.
pub async fn late_messages_are_quarantined<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let handler = LedgerHandler::<H>::default();
    let window = Duration::from_secs(3600);
    let c = consumer("billing", &store, &handler).late_after(window, LatePolicy::Quarantine);
    let old = SystemTime::now() - Duration::from_secs(7200);
    let mut late = RawEnvelope::new("late-1", "4");
    late.meta.source_time = Some(old);
    let o = deliver(&c, late).await;
    ensure!(
        matches!(&o, Outcome::DeadLettered(r) if r.code() == "late"),
        "late message: {o:?}"
    );
    let mut fresh = RawEnvelope::new("fresh-1", "6");
    fresh.meta.source_time = Some(SystemTime::now());
    let o = deliver(&c, fresh.clone()).await;
    ensure!(matches!(o, Outcome::Applied), "recent message: {o:?}");
    fresh.meta.source_time = Some(old);
    let o = deliver(&c, fresh).await;
    ensure!(
        matches!(o, Outcome::Duplicate),
        "late copy of a known id: {o:?}, want Duplicate"
    );
    let effects = H::effects(&store).await.map_err(err)?;
    ensure!(
        effects == vec![("fresh-1".to_owned(), 6)],
        "effects {effects:?}"
    );
    Ok(())
}

/// Crashes after each step, many seeds, with duplicates, reordering and lost acks:
/// every message's effect exactly once, none lost. Odd seeds run with group commit
/// (`group_commit(8)`), even seeds one delivery per transaction.
pub async fn crash_at_every_step<H: StoreHarness>(
    h: &H,
    seeds: u64,
    messages: usize,
) -> CaseResult {
    for step in Step::ALL {
        for seed in 0..seeds {
            let store = h.fresh().await.map_err(err)?;
            let handler = LedgerHandler::<H>::default();
            let source = FaultySource::new(SourceFaults {
                seed,
                duplicate_rate: 0.2,
                reorder_window: 8,
                lost_ack_rate: 0.05,
            });
            let mut expected = HashMap::new();
            for i in 0..messages {
                let amount = (i % 7 + 1) as i64;
                expected.insert(format!("m-{i}"), amount);
                source.publish(RawEnvelope::new(format!("m-{i}"), amount.to_string()));
            }
            source.close();
            // With group commit a transaction crashes as one (the plan is asked once per
            // group before its commit), so a handful of groups needs a higher rate than
            // per-message runs for a crash to be all but certain.
            let group = seed % 2 == 1;
            let rate = if group { 0.9 } else { 0.3 };
            let plan = CrashPlan::new(seed, rate).only_at(&[step]);
            let c = Consumer::new(
                ConsumerName::new("billing").expect("valid name"),
                CrashingStore::new(store.clone(), plan.clone()),
                CrashingHandler(handler.clone()),
            )
            .retry(fast_retry())
            .concurrency(4)
            .group_commit(if group { 8 } else { 1 });
            let stats = c
                .run(
                    CrashingSource::new(source.clone(), plan.clone()),
                    CancellationToken::new(),
                )
                .await
                .map_err(err)?;
            let effects = H::effects(&store).await.map_err(err)?;
            let t = tally(&effects, &expected, &[]);
            ensure!(
                t.is_exactly_once(),
                "crash after {step:?}, seed {seed} (group commit: {group}): {t:?} (stats {stats:?})"
            );
            ensure!(
                plan.fired() > 0,
                "crash after {step:?}, seed {seed}: no crash was injected"
            );
            ensure!(source.unacked() == 0, "messages left unacked");
        }
    }
    Ok(())
}

/// The checker can fail: with the contract broken on purpose (ack before commit) and crashes
/// between the two, the tally must show lost messages.
pub async fn checker_catches_ack_before_commit<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let handler = LedgerHandler::<H>::default();
    let source = MemorySource::new();
    let mut expected = HashMap::new();
    for i in 0..50 {
        expected.insert(format!("m-{i}"), 1);
        source.publish(RawEnvelope::new(format!("m-{i}"), "1"));
    }
    source.close();
    // Every first attempt crashes before its commit (with group commit the whole group), so
    // every message acked early is lost, whatever the grouping.
    let plan = CrashPlan::new(1, 1.0).only_at(&[Step::Effected]);
    let c = Consumer::new(
        ConsumerName::new("billing").expect("valid name"),
        CrashingStore::new(store.clone(), plan),
        CrashingHandler(handler.clone()),
    );
    c.run(AckEarly(source), CancellationToken::new())
        .await
        .map_err(err)?;
    let t = tally(&H::effects(&store).await.map_err(err)?, &expected, &[]);
    ensure!(
        t.lost > 0,
        "ack-before-commit with crashes lost nothing according to the checker: {t:?}"
    );
    Ok(())
}

/// Shutdown mid-stream finishes in-flight deliveries and acks nothing uncommitted; a second
/// consumer on the same source finishes the rest, exactly once overall.
pub async fn shutdown_then_resume<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let handler = LedgerHandler::<H>::default();
    let source = FaultySource::new(SourceFaults {
        seed: 9,
        duplicate_rate: 0.2,
        reorder_window: 4,
        lost_ack_rate: 0.0,
    });
    let mut expected = HashMap::new();
    for i in 0..200 {
        expected.insert(format!("m-{i}"), 2);
        source.publish(RawEnvelope::new(format!("m-{i}"), "2"));
        // Each message takes at least 2 ms, so an in-memory store cannot finish all 200
        // before the stopper (polling every 2 ms) sees 50 applied.
        handler.script(&format!("m-{i}"), Script::Hold(Duration::from_millis(2)));
    }
    source.close();
    let shutdown = CancellationToken::new();
    let first = consumer("billing", &store, &handler).concurrency(4);
    let stats = first.stats();
    let stopper = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            while stats.snapshot().applied < 50 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            shutdown.cancel();
        })
    };
    first.run(source.clone(), shutdown).await.map_err(err)?;
    stopper.await.map_err(|e| e.to_string())?;
    let partial = H::effects(&store).await.map_err(err)?.len();
    ensure!(
        partial < 200,
        "shutdown did not stop the consumer ({partial} applied)"
    );
    ensure!(source.unacked() > 0, "nothing left after shutdown");
    let second = consumer("billing", &store, &handler).concurrency(4);
    second
        .run(source.clone(), CancellationToken::new())
        .await
        .map_err(err)?;
    let t = tally(&H::effects(&store).await.map_err(err)?, &expected, &[]);
    ensure!(t.is_exactly_once(), "after resume: {t:?}");
    Ok(())
}

/// (consumer, display id, reason, payload, deliveries) of a dead-letter row.
type LetterRow<'a> = (&'a str, Option<&'a str>, &'a str, &'a [u8], u32);

/// Repeats of one dead letter leave one row: the same conflicting copy delivered three times
/// is one `conflict` row with `deliveries` 3, an id-less message twice is one `bad_id` row;
/// another payload, another reason or another consumer is another row.
pub async fn dead_letters_are_deduplicated<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let handler = LedgerHandler::<H>::default();
    let billing = consumer("billing", &store, &handler);
    let audit = consumer("audit", &store, &handler);
    handler.script("perm", Script::FailPermanent);
    deliver(&billing, RawEnvelope::new("m-1", "10")).await;
    for _ in 0..3 {
        let o = deliver(&billing, RawEnvelope::new("m-1", "99")).await;
        ensure!(
            matches!(o, Outcome::Conflict { .. }),
            "conflict copy: {o:?}"
        );
    }
    deliver(&billing, RawEnvelope::new("m-1", "98")).await;
    let id_less = RawEnvelope {
        id: None,
        payload: b"7".to_vec(),
        ..Default::default()
    };
    for c in [&billing, &billing, &audit] {
        let o = deliver(c, id_less.clone()).await;
        ensure!(
            matches!(&o, Outcome::DeadLettered(r) if r.code() == "bad_id"),
            "id-less message: {o:?}"
        );
    }
    // Same id and payload, another reason: a row of its own.
    let o = deliver(&billing, RawEnvelope::new("perm", "5")).await;
    ensure!(matches!(o, Outcome::DeadLettered(_)), "permanent: {o:?}");
    let o = deliver(&billing, RawEnvelope::new("perm", "5")).await;
    ensure!(
        matches!(o, Outcome::DeadLettered(_)),
        "permanent again: {o:?}"
    );

    let letters = store.dead_letters(None).await.map_err(err)?;
    let rows: Vec<LetterRow> = letters
        .iter()
        .map(|l| {
            let id = l.message_id.as_deref();
            (&*l.consumer, id, &*l.reason, &l.payload[..], l.deliveries)
        })
        .collect();
    let want: [LetterRow; 5] = [
        ("billing", Some("m-1"), "conflict", b"99", 3),
        ("billing", Some("m-1"), "conflict", b"98", 1),
        ("billing", None, "bad_id", b"7", 2),
        ("audit", None, "bad_id", b"7", 1),
        ("billing", Some("perm"), "permanent", b"5", 2),
    ];
    ensure!(rows == want, "dead letters {rows:?}, want {want:?}");
    for l in &letters {
        ensure!(
            l.last_seen >= l.dead_lettered_at,
            "row {}: last_seen before first seen",
            l.id
        );
    }
    let effects = H::effects(&store).await.map_err(err)?;
    ensure!(
        effects == vec![("m-1".to_owned(), 10)],
        "effects {effects:?}, want only m-1's first copy"
    );
    Ok(())
}

/// `claim_batch` with ids claimed before, repeated ids and conflicting copies in one call,
/// then a batch larger than one statement takes (SQL stores claim 500 ids per statement).
pub async fn claim_batch_rules<H: StoreHarness>(h: &H) -> CaseResult {
    let s = h.fresh().await.map_err(err)?;
    let c = ConsumerName::new("batcher").expect("valid name");
    let item = |id: &str, payload: &str| {
        (
            MessageId::new(id).expect("valid id"),
            PayloadHash::of(payload.as_bytes()),
        )
    };
    let (h1, h2) = (PayloadHash::of(b"one"), PayloadHash::of(b"two"));
    let mut tx = s.begin().await.map_err(err)?;
    let pre = [item("d", "one"), item("e", "two")];
    let claims = s.claim_batch(&mut tx, &c, &pre).await.map_err(err)?;
    ensure!(claims == vec![Claim::Fresh; 2], "first batch: {claims:?}");
    s.commit(tx).await.map_err(err)?;

    let batch = [
        item("a", "one"),
        item("b", "one"),
        item("a", "one"), // same id, same payload, same batch
        item("c", "two"),
        item("a", "two"), // same id, other payload, same batch
        item("d", "one"), // claimed before
        item("e", "one"), // claimed before with another payload
        item("c", "two"),
    ];
    let mut tx = s.begin().await.map_err(err)?;
    let claims = s.claim_batch(&mut tx, &c, &batch).await.map_err(err)?;
    let want = vec![
        Claim::Fresh,
        Claim::Fresh,
        Claim::Duplicate,
        Claim::Fresh,
        Claim::Conflict { stored: h1 },
        Claim::Duplicate,
        Claim::Conflict { stored: h2 },
        Claim::Duplicate,
    ];
    ensure!(claims == want, "claims {claims:?}, want {want:?}");
    s.commit(tx).await.map_err(err)?;
    for (id, hash) in [("a", h1), ("b", h1), ("c", h2), ("d", h1), ("e", h2)] {
        let held = s.claimed_hash(&c, id).await.map_err(err)?;
        ensure!(held == Some(hash), "{id}: inbox holds {held:?}");
    }

    // More ids than one statement takes, half of them claimed already, in reverse order.
    let big: Vec<_> = (0..1200)
        .rev()
        .map(|i| item(&format!("big-{i:05}"), "x"))
        .collect();
    let mut tx = s.begin().await.map_err(err)?;
    let first = s.claim_batch(&mut tx, &c, &big[600..]).await.map_err(err)?;
    ensure!(
        first.iter().all(|c| *c == Claim::Fresh),
        "first half not all fresh"
    );
    s.commit(tx).await.map_err(err)?;
    let mut tx = s.begin().await.map_err(err)?;
    let all = s.claim_batch(&mut tx, &c, &big).await.map_err(err)?;
    ensure!(
        all[..600].iter().all(|c| *c == Claim::Fresh)
            && all[600..].iter().all(|c| *c == Claim::Duplicate),
        "second batch: want 600 fresh then 600 duplicates"
    );
    s.rollback(tx).await.map_err(err)?;
    Ok(())
}
