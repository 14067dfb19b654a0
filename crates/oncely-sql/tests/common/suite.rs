//! What oncely-sql's own tests run on each database: migrations, table naming, and a
//! concurrent duplicate observed waiting on the row lock. (The claims themselves are the
//! testkit's store suite, `claims_in_transactions`.)

use super::{Fx, Gate, TestStore};
use oncely_core::{
    Claim, Consumer, ConsumerName, ErrorKind, MessageId, Outcome, PayloadHash, RawEnvelope,
    RetryPolicy,
};
use std::time::Duration;

fn id(s: &str) -> MessageId {
    MessageId::new(s).unwrap()
}

fn consumer(s: &str) -> ConsumerName {
    ConsumerName::new(s).unwrap()
}

/// Migrating an up-to-date schema again does nothing.
pub async fn migrate_twice<S: TestStore>(fx: Fx<S>) {
    assert_eq!(fx.store.migrate_now().await.unwrap(), 0);
    assert_eq!(fx.other.migrate_now().await.unwrap(), 0);
}

/// Two processes migrating a fresh schema at once: exactly one applies each migration,
/// both succeed, and the tables work.
pub async fn concurrent_migrators<S: TestStore>(url: &str, schema: &str) {
    let tables = oncely_sql::Tables::default().with_schema(schema).unwrap();
    let a = S::open(url, tables.clone()).await.unwrap();
    let b = S::open(url, tables.clone()).await.unwrap();
    let (ra, rb) = tokio::join!(a.migrate_now(), b.migrate_now());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(
        ra + rb,
        oncely_sql::INBOX.migrations(S::DIALECT).len(),
        "each migration applied exactly once ({ra} + {rb})"
    );
    assert_eq!(a.migrate_now().await.unwrap(), 0);
    let mut tx = a.begin().await.unwrap();
    let claim = a
        .claim(&mut tx, &consumer("c"), &id("x"), PayloadHash::of(b"x"))
        .await;
    assert_eq!(claim.unwrap(), Claim::Fresh);
    a.commit(tx).await.unwrap();
}

/// Consumer 1 claims X and holds its transaction open; consumer 2 (another pool) receives X,
/// blocks on the claim until 1 finishes, then sees `Duplicate` (1 committed) or applies it
/// (1 rolled back). Effects are counted in the ledger.
pub async fn concurrent_duplicate<S: TestStore>(
    fx: Fx<S>,
    first_rolls_back: bool,
) -> oncely_core::StatsSnapshot {
    let gate = Gate::new();
    let name = consumer("billing");
    let retry = RetryPolicy::default()
        .max_attempts(5)
        .base_delay(Duration::from_millis(20));
    let c1 = Consumer::new(
        name.clone(),
        fx.any(),
        fx.ledger("one").gated(gate.clone(), first_rolls_back),
    )
    .retry(retry.clone());
    let c2 = Consumer::new(name.clone(), fx.any_other(), fx.ledger("two")).retry(retry);
    let (p1, p2) = (b"credit 5".to_vec(), b"credit 5".to_vec());
    let (d1, src1) = delivery("X", p1);
    let (d2, src2) = delivery("X", p2);

    let first = tokio::spawn(async move { c1.process(d1).await });
    gate.entered().await; // consumer 1 holds its transaction with X claimed
    let second = tokio::spawn({
        let c2 = c2.clone();
        async move { c2.process(d2).await }
    });
    let observed = fx.until_lock_wait().await;
    assert!(
        !second.is_finished(),
        "consumer 2 must wait for consumer 1's transaction (lock wait observed: {observed})"
    );
    gate.release();
    let o1 = first.await.unwrap();
    let o2 = second.await.unwrap();

    let effects = fx.effects().await;
    if first_rolls_back {
        assert!(matches!(o1, Outcome::DeadLettered(_)), "consumer 1: {o1:?}");
        assert!(matches!(o2, Outcome::Applied), "consumer 2: {o2:?}");
        assert_eq!(effects, vec![("X".into(), "credit 5".into(), "two".into())]);
        assert_eq!(fx.store.dead_letters(Some(&name)).await.unwrap().len(), 1);
    } else {
        assert!(matches!(o1, Outcome::Applied), "consumer 1: {o1:?}");
        assert!(matches!(o2, Outcome::Duplicate), "consumer 2: {o2:?}");
        assert_eq!(effects, vec![("X".into(), "credit 5".into(), "one".into())]);
        assert!(fx.store.dead_letters(Some(&name)).await.unwrap().is_empty());
    }
    assert_eq!(
        src1.stats().acked + src2.stats().acked,
        2,
        "both deliveries acked"
    );
    assert_eq!(
        fx.store.claimed_hash(&name, "X").await.unwrap(),
        Some(PayloadHash::of(b"credit 5"))
    );
    c2.stats().snapshot()
}

/// One delivery from its own in-memory source (so its ack is observable).
pub fn delivery(id: &str, payload: Vec<u8>) -> (oncely_core::Delivery, oncely_core::MemorySource) {
    use oncely_core::Source;
    let mut source = oncely_core::MemorySource::new();
    source.publish(RawEnvelope::new(id, payload));
    let d = futures::executor::block_on(source.next()).unwrap().unwrap();
    (d, source)
}

/// Table prefix and schema are validated identifiers; SQL in them is rejected.
pub fn injection_rejected() {
    use oncely_sql::Tables;
    for bad in [
        "x; DROP TABLE users; --",
        "a.b",
        "x\"y",
        "x'y",
        "1abc",
        "",
        "ünïcode",
        "spaces here",
        &"a".repeat(49),
    ] {
        let e = Tables::default().with_schema(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{bad:?}");
        if !bad.is_empty() {
            let e = Tables::default().with_prefix(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config, "{bad:?}");
        }
    }
    assert!(Tables::default().with_prefix("").is_ok());
}

/// A custom schema and prefix put every table there.
pub async fn custom_prefix<S: TestStore>(url: &str, schema: Option<&str>, count_sql: &str) {
    let mut tables = oncely_sql::Tables::default().with_prefix("app_q_").unwrap();
    if let Some(s) = schema {
        tables = tables.with_schema(s).unwrap();
    }
    let store = S::open(url, tables.clone()).await.unwrap();
    assert_eq!(
        store.migrate_now().await.unwrap(),
        oncely_sql::INBOX.migrations(S::DIALECT).len()
    );
    let mut tx = store.begin().await.unwrap();
    let claim = store
        .claim(&mut tx, &consumer("c"), &id("p-1"), PayloadHash::of(b"p"))
        .await;
    assert_eq!(claim.unwrap(), Claim::Fresh);
    store.commit(tx).await.unwrap();
    let rows = store
        .rows(count_sql.replace("{inbox}", &tables.inbox()))
        .await
        .unwrap();
    assert_eq!(rows, vec![("p-1".into(), "c".into(), "x".into())]);
}

/// Connecting with each of `urls` (all carrying the password `secret`) fails, and neither the
/// error nor any of its sources shows the password, in `Display` or `Debug`.
pub async fn credentials_not_in_errors<S: TestStore>(urls: &[String], secret: &str) {
    for url in urls {
        let e = match S::open(url, oncely_sql::Tables::default()).await {
            Ok(_) => panic!("connecting with {url} should fail"),
            Err(e) => e,
        };
        let mut shown = vec![e.to_string(), format!("{e:?}")];
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            shown.push(format!("{s} {s:?}"));
            source = s.source();
        }
        for text in shown {
            assert!(!text.contains(secret), "password leaked: {text}");
        }
    }
}
