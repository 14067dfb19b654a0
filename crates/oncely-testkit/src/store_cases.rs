//! More store conformance cases: claims through the [`Store`] API inside transactions, a
//! concurrent copy after a rollback, and group commit's per-message outcomes, failure
//! isolation, late messages and two consumers on one source. (They were oncely-sql's own
//! suites; every store runs them now.)

use crate::check::tally;
use crate::harness::StoreHarness;
use crate::ledger::{LedgerHandler, Script};
use crate::store_suite::CaseResult;
use crate::{FaultySource, SourceFaults};
use oncely_core::{
    Claim, Consumer, ConsumerName, Delivery, GroupCommitStats, Inspect, LatePolicy, MemorySource,
    MessageId, Outcome, PayloadHash, RawEnvelope, RetryPolicy, Source, Store,
};
use std::collections::HashMap;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

fn err(e: oncely_core::Error) -> String {
    format!("store error: {e}")
}

fn id(s: &str) -> MessageId {
    MessageId::new(s).expect("valid id")
}

fn name(s: &str) -> ConsumerName {
    ConsumerName::new(s).expect("valid name")
}

/// Fresh, Duplicate, Conflict through [`Store::claim`]: a transaction sees its own claim; the
/// inbox key includes the consumer; a rollback, or dropping the transaction, undoes a claim;
/// ids are byte-exact (no case folding, no trailing-space padding).
pub async fn claims_in_transactions<H: StoreHarness>(h: &H) -> CaseResult {
    let s = h.fresh().await.map_err(err)?;
    let (a, b) = (PayloadHash::of(b"a"), PayloadHash::of(b"b"));
    let (c1, c2) = (name("c1"), name("c2"));
    let mut tx = s.begin().await.map_err(err)?;
    let got = s.claim(&mut tx, &c1, &id("m-1"), a).await.map_err(err)?;
    ensure!(got == Claim::Fresh, "first claim of m-1: {got:?}");
    let got = s.claim(&mut tx, &c1, &id("m-1"), a).await.map_err(err)?;
    ensure!(
        got == Claim::Duplicate,
        "m-1 again in the same transaction: {got:?}, want Duplicate"
    );
    s.commit(tx).await.map_err(err)?;

    let mut tx = s.begin().await.map_err(err)?;
    let got = s.claim(&mut tx, &c1, &id("m-1"), a).await.map_err(err)?;
    ensure!(got == Claim::Duplicate, "committed m-1: {got:?}");
    let got = s.claim(&mut tx, &c1, &id("m-1"), b).await.map_err(err)?;
    ensure!(
        got == Claim::Conflict { stored: a },
        "m-1 with another payload: {got:?}"
    );
    let got = s.claim(&mut tx, &c2, &id("m-1"), b).await.map_err(err)?;
    ensure!(got == Claim::Fresh, "m-1 for another consumer: {got:?}");
    s.rollback(tx).await.map_err(err)?;
    let held = s.claimed_hash(&c2, "m-1").await.map_err(err)?;
    ensure!(held.is_none(), "a rolled-back claim is held: {held:?}");

    let mut tx = s.begin().await.map_err(err)?;
    let got = s.claim(&mut tx, &c1, &id("m-2"), b).await.map_err(err)?;
    ensure!(got == Claim::Fresh, "m-2: {got:?}");
    drop(tx); // dropping rolls back
    let mut tx = s.begin().await.map_err(err)?;
    let got = s.claim(&mut tx, &c1, &id("m-2"), b).await.map_err(err)?;
    ensure!(
        got == Claim::Fresh,
        "m-2 after a dropped transaction: {got:?}"
    );
    s.commit(tx).await.map_err(err)?;

    for (id, want) in [
        ("m-1", Some(a)),
        ("m-2", Some(b)),
        ("M-1", None),
        ("m-1 ", None),
    ] {
        let held = s.claimed_hash(&c1, id).await.map_err(err)?;
        ensure!(
            held == want,
            "claimed_hash({id:?}) = {held:?}, want {want:?}"
        );
    }
    Ok(())
}

/// Two copies of one id at once, and the first to run its handler holds its transaction,
/// then fails permanently (rolls back): the other copy applies, once; the failed one is
/// dead-lettered `permanent`; the claim holds the payload's hash.
pub async fn concurrent_duplicate_after_rollback<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let handler = LedgerHandler::<H>::default();
    handler.script("x", Script::HoldThenFail(Duration::from_millis(300)));
    let c = Consumer::new(name("billing"), store.clone(), handler).retry(
        RetryPolicy::default()
            .max_attempts(5)
            .base_delay(Duration::from_millis(20)),
    );
    let (one, mut src1) = (c.clone(), MemorySource::new());
    let (two, mut src2) = (c.clone(), MemorySource::new());
    src1.publish(RawEnvelope::new("x", "5"));
    src2.publish(RawEnvelope::new("x", "5"));
    let d1 = src1.next().await.map_err(err)?.expect("one message");
    let d2 = src2.next().await.map_err(err)?.expect("one message");
    let (o1, o2) = tokio::join!(one.process(d1), two.process(d2));
    let applied = [&o1, &o2]
        .iter()
        .filter(|o| matches!(o, Outcome::Applied))
        .count();
    let failed = [&o1, &o2]
        .iter()
        .filter(|o| matches!(o, Outcome::DeadLettered(r) if r.code() == "permanent"))
        .count();
    ensure!(
        applied == 1 && failed == 1,
        "outcomes {o1:?} and {o2:?}: want one Applied, one dead-lettered permanent"
    );
    let effects = H::effects(&store).await.map_err(err)?;
    ensure!(
        effects == vec![("x".to_owned(), 5)],
        "effects {effects:?}, want x once"
    );
    let letters = store.dead_letters(Some(c.name())).await.map_err(err)?;
    ensure!(letters.len() == 1, "{} dead letters, want 1", letters.len());
    let held = store.claimed_hash(c.name(), "x").await.map_err(err)?;
    ensure!(held == Some(PayloadHash::of(b"5")), "claim of x: {held:?}");
    ensure!(
        src1.unacked() + src2.unacked() == 0,
        "both deliveries settled"
    );
    Ok(())
}

/// Every delivery of `published` `(id, amount)` from one memory source, processed as one group
/// by a consumer with `group_commit(64)`. Returns the outcomes and how the group went.
async fn one_group<H: StoreHarness>(
    store: &H::Store,
    handler: LedgerHandler<H>,
    published: &[(&str, i64)],
) -> Result<(Vec<Outcome>, GroupCommitStats), String> {
    let mut source = MemorySource::new();
    for (id, amount) in published {
        source.publish(RawEnvelope::new(*id, amount.to_string()));
    }
    source.close();
    let c = Consumer::new(name("batcher"), store.clone(), handler)
        .group_commit(64)
        .retry(RetryPolicy::default().base_delay(Duration::from_millis(5)));
    let mut group: Vec<Delivery> = vec![];
    while group.len() < published.len() {
        group.push(source.next().await.map_err(err)?.expect("published"));
    }
    let outcomes = c.process_batch(group).await;
    ensure!(
        source.unacked() == 0,
        "a delivery was left unsettled: {outcomes:?}"
    );
    Ok((outcomes, c.group_commit_stats()))
}

/// The first copy of each id applies, except `failing` ids: computed from what was published.
fn first_copies(published: &[(&str, i64)], failing: &[&str]) -> HashMap<String, i64> {
    let mut first = HashMap::new();
    for (id, amount) in published {
        first.entry((*id).to_owned()).or_insert(*amount);
    }
    first.retain(|id, _| !failing.contains(&id.as_str()));
    first
}

/// A group without failures commits in one transaction, with the per-message outcomes of one
/// at a time: copies inside the group are duplicates, another payload is a conflict; whether
/// the handler writes the group's effects one by one or all at once (`handle_batch`).
pub async fn group_commit_outcomes<H: StoreHarness>(h: &H) -> CaseResult {
    let published = [("a", 1), ("b", 2), ("a", 1), ("c", 3), ("b", 99), ("a", 1)];
    for whole in [false, true] {
        let store = h.fresh().await.map_err(err)?;
        let handler = LedgerHandler::<H>::default();
        let handler = if whole {
            handler.whole_batches()
        } else {
            handler
        };
        let (outcomes, groups) = one_group(&store, handler, &published).await?;
        ensure!(
            (groups.committed, groups.fallbacks) == (1, 0),
            "whole batches {whole}: {groups:?}, want one transaction"
        );
        let names: Vec<_> = outcomes.iter().map(Outcome::name).collect();
        let want = [
            "applied",
            "applied",
            "duplicate",
            "applied",
            "conflict",
            "duplicate",
        ];
        ensure!(names == want, "whole batches {whole}: outcomes {names:?}");
        let t = tally(
            &H::effects(&store).await.map_err(err)?,
            &first_copies(&published, &[]),
            &[],
        );
        ensure!(t.is_exactly_once(), "whole batches {whole}: {t:?}");
    }
    Ok(())
}

/// One group holding copies, a conflicting copy, a permanently failing message and a flaky
/// one: the group rolls back once, its messages go one at a time, the failing one and the
/// conflict are dead-lettered, every other id applies exactly once, everything is settled.
pub async fn group_commit_isolates_a_failure<H: StoreHarness>(h: &H) -> CaseResult {
    let ids: Vec<String> = (0..20).map(|i| format!("m{i:02}")).collect();
    let mut published: Vec<(&str, i64)> = vec![];
    for (i, id) in ids.iter().enumerate() {
        let id = id.as_str();
        published.push((id, i as i64 + 1));
        if i == 3 || i == 5 {
            published.push((id, i as i64 + 1));
        }
        if i == 7 {
            published.push((id, 700));
        }
    }
    for whole in [false, true] {
        let store = h.fresh().await.map_err(err)?;
        let handler = LedgerHandler::<H>::default();
        handler.script("m10", Script::FailPermanent);
        handler.script("m12", Script::FailTransient(1));
        let handler = if whole {
            handler.whole_batches()
        } else {
            handler
        };
        let (outcomes, groups) = one_group(&store, handler, &published).await?;
        ensure!(
            groups.fallbacks == 1,
            "whole batches {whole}: {groups:?}, want the group rolled back once"
        );
        let t = tally(
            &H::effects(&store).await.map_err(err)?,
            &first_copies(&published, &["m10"]),
            &[],
        );
        ensure!(t.is_exactly_once(), "whole batches {whole}: {t:?}");
        let letters = store
            .dead_letters(Some(&name("batcher")))
            .await
            .map_err(err)?;
        let mut reasons: Vec<_> = letters
            .iter()
            .map(|l| (l.message_id.clone().unwrap_or_default(), l.reason.clone()))
            .collect();
        reasons.sort();
        ensure!(
            reasons
                == [
                    ("m07".to_owned(), "conflict".to_owned()),
                    ("m10".to_owned(), "permanent".to_owned())
                ],
            "whole batches {whole}: dead letters {reasons:?}"
        );
        let dups = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Duplicate))
            .count();
        ensure!(dups == 2, "whole batches {whole}: outcomes {outcomes:?}");
    }
    Ok(())
}

/// A late message (source time beyond the window) leaves the group and is quarantined; the
/// rest of the group commits together.
pub async fn group_commit_quarantines_late<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let mut source = MemorySource::new();
    let mut late = RawEnvelope::new("old", "1");
    late.meta.source_time = Some(SystemTime::now() - Duration::from_secs(3600));
    source.publish(RawEnvelope::new("a", "2"));
    source.publish(late);
    source.publish(RawEnvelope::new("b", "3"));
    source.close();
    let c = Consumer::new(
        name("batcher"),
        store.clone(),
        LedgerHandler::<H>::default(),
    )
    .late_after(Duration::from_secs(60), LatePolicy::Quarantine);
    let mut group = vec![];
    for _ in 0..3 {
        group.push(source.next().await.map_err(err)?.expect("published"));
    }
    let outcomes = c.process_batch(group).await;
    let names: Vec<_> = outcomes.iter().map(Outcome::name).collect();
    ensure!(
        names == ["applied", "dead_lettered", "applied"],
        "outcomes {names:?}"
    );
    ensure!(
        c.group_commit_stats().committed == 1,
        "{:?}",
        c.group_commit_stats()
    );
    let effects = H::effects(&store).await.map_err(err)?;
    ensure!(
        effects == [("a".to_owned(), 2), ("b".to_owned(), 3)],
        "effects {effects:?}"
    );
    let letters = store.dead_letters(Some(c.name())).await.map_err(err)?;
    let reasons: Vec<_> = letters.iter().map(|l| l.reason.as_str()).collect();
    ensure!(reasons == ["late"], "dead letters {reasons:?}");
    ensure!(source.unacked() == 0, "messages left unacked");
    Ok(())
}

/// Two group-commit consumers drain one source full of duplicates, reordering and lost acks:
/// every message applies exactly once, nothing is dead-lettered, everything is acked.
pub async fn two_group_commit_consumers<H: StoreHarness>(h: &H) -> CaseResult {
    let store = h.fresh().await.map_err(err)?;
    let source = FaultySource::new(SourceFaults {
        seed: 7,
        duplicate_rate: 0.3,
        reorder_window: 8,
        lost_ack_rate: 0.05,
    });
    let mut expected = HashMap::new();
    for i in 0..300 {
        let (id, amount) = (format!("n{i:04}"), i as i64 + 1);
        source.publish(RawEnvelope::new(id.clone(), amount.to_string()));
        expected.insert(id, amount);
    }
    source.close();
    let make = || {
        Consumer::new(
            name("batcher"),
            store.clone(),
            LedgerHandler::<H>::default(),
        )
        .group_commit(25)
        .linger(Duration::from_millis(5))
        .retry(
            RetryPolicy::default()
                .max_attempts(20)
                .base_delay(Duration::from_millis(5)),
        )
    };
    let (one, two) = (make(), make());
    let stop = CancellationToken::new();
    let (a, b) = tokio::join!(
        one.run(source.clone(), stop.clone()),
        two.run(source.clone(), stop)
    );
    let (a, b) = (a.map_err(err)?, b.map_err(err)?);
    let t = tally(&H::effects(&store).await.map_err(err)?, &expected, &[]);
    ensure!(t.is_exactly_once(), "{t:?}");
    ensure!(a.applied + b.applied == 300, "{a:?} {b:?}");
    ensure!(source.unacked() == 0, "messages left unacked");
    let letters = store.dead_letters(None).await.map_err(err)?;
    ensure!(letters.is_empty(), "{} dead letters", letters.len());
    let (g1, g2) = (one.group_commit_stats(), two.group_commit_stats());
    ensure!(g1.committed + g2.committed > 0, "no group: {g1:?} {g2:?}");
    Ok(())
}
