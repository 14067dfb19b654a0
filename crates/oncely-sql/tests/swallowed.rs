//! A handler that catches a database error and returns `Ok` must lose nothing. PostgreSQL
//! aborts the whole transaction on the failed statement and answers the `COMMIT` with
//! `ROLLBACK` (no error): the store must report the commit as failed, or the delivery is
//! acked with neither claim nor effect. SQLite and MariaDB roll back only the statement.

mod common;

use common::{Fx, TestStore, mysql, pg, sqlite};
use oncely_core::{
    Consumer, ConsumerName, Envelope, Handled, Handler, MemorySource, Outcome, RawEnvelope, Result,
    RetryPolicy, Source,
};
use oncely_sql::sqlx::{self, AssertSqlSafe, MySql, Postgres, Sqlite, Transaction};
use std::collections::BTreeMap;
use std::time::Duration;

/// Writes a ledger row, then (for payload `swallow`) inserts a key that is taken, ignores
/// the unique violation and returns `Ok`.
#[derive(Clone)]
struct Swallower {
    ledger: String,
    taken: String,
}

macro_rules! swallower {
    ($db:ty) => {
        impl Handler<Transaction<'static, $db>> for Swallower {
            async fn handle(
                &self,
                tx: &mut Transaction<'static, $db>,
                msg: &Envelope,
            ) -> Result<Handled> {
                sqlx::query(AssertSqlSafe(self.ledger.clone()))
                    .bind(msg.id().as_str().to_owned())
                    .bind(String::from_utf8_lossy(msg.payload()).into_owned())
                    .bind("swallower")
                    .execute(&mut **tx)
                    .await
                    .map_err(|e| oncely_core::Error::transient(format!("ledger: {e}")))?;
                if msg.payload() == b"swallow" {
                    let violation = sqlx::raw_sql(AssertSqlSafe(self.taken.clone()))
                        .execute(&mut **tx)
                        .await;
                    assert!(violation.is_err(), "the key must be taken");
                }
                Ok(Handled::Applied)
            }
        }
    };
}
swallower!(Postgres);
swallower!(MySql);
swallower!(Sqlite);

/// What happened to one message, counted from the database and the source.
#[derive(Debug, Default, PartialEq)]
struct Tally {
    applied: usize,
    dead_lettered: usize,
    pending: usize,
    lost: Vec<String>,
    double: Vec<String>,
}

async fn swallowed_violation_loses_nothing<S: TestStore>(fx: Fx<S>) -> Tally
where
    Swallower: Handler<S::Tx>,
{
    let unique = fx.tables().table("taken");
    fx.store
        .exec(format!("CREATE TABLE {unique} (k VARCHAR(16) PRIMARY KEY)"))
        .await
        .unwrap();
    fx.store
        .exec(format!("INSERT INTO {unique} (k) VALUES ('taken')"))
        .await
        .unwrap();
    let params = if S::DOLLAR { "$1, $2, $3" } else { "?, ?, ?" };
    let handler = Swallower {
        ledger: format!(
            "INSERT INTO {} (message_id, payload, instance) VALUES ({params})",
            fx.ledger_table
        ),
        taken: format!("INSERT INTO {unique} (k) VALUES ('taken')"),
    };
    let name = ConsumerName::new("swallow").unwrap();
    let consumer = Consumer::new(name.clone(), fx.store.clone(), handler).retry(
        RetryPolicy::default()
            .max_attempts(3)
            .base_delay(Duration::from_millis(1))
            .max_delay(Duration::from_millis(5)),
    );
    let ids: Vec<String> = (0..10).map(|i| format!("m-{i}")).collect();
    let mut pending = BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
        let payload = if i % 2 == 0 { "swallow" } else { "plain" };
        let mut source = MemorySource::new();
        source.publish(RawEnvelope::new(id.clone(), payload));
        // A nacked delivery comes back; three deliveries are enough to see where it ends.
        for _ in 0..3 {
            let delivery = source.next().await.unwrap().expect("queued");
            if !matches!(consumer.process(delivery).await, Outcome::Retry(_)) {
                break;
            }
        }
        pending.insert(id.clone(), source.unacked() > 0);
    }
    let effects = fx.effects().await;
    let letters = fx.store.dead_letters(Some(&name)).await.unwrap();
    let mut tally = Tally::default();
    for id in &ids {
        let rows = effects.iter().filter(|(m, _, _)| m == id).count();
        let claimed = fx.store.claimed_hash(&name, id).await.unwrap().is_some();
        let dead = letters
            .iter()
            .any(|l| l.message_id.as_deref() == Some(id.as_str()));
        match (rows, claimed) {
            (1, true) => tally.applied += 1,
            (0, false) if dead => tally.dead_lettered += 1,
            (0, false) if pending[id] => tally.pending += 1,
            (0, _) => tally.lost.push(id.clone()),
            _ => tally.double.push(id.clone()),
        }
    }
    tally
}

#[tokio::test]
async fn pg_swallowed_unique_violation_loses_nothing() {
    let Some(fx) = pg("pg_swallow").await else {
        return;
    };
    let t = swallowed_violation_loses_nothing(fx).await;
    eprintln!("PostgreSQL, handler swallows a unique violation: {t:?}");
    assert!(t.lost.is_empty() && t.double.is_empty(), "{t:?}");
    // The plain ones apply; the swallowing ones are never applied: their transaction
    // aborted. They are retried, then dead-lettered or handed back to the broker.
    assert_eq!(t.applied, 5, "{t:?}");
    assert_eq!(t.dead_lettered + t.pending, 5, "{t:?}");
}

#[tokio::test]
async fn sqlite_swallowed_unique_violation_loses_nothing() {
    let Some(fx) = sqlite("lite_swallow").await else {
        return;
    };
    let t = swallowed_violation_loses_nothing(fx).await;
    // Only the statement rolled back: the ledger row and the claim commit.
    assert_eq!(
        t,
        Tally {
            applied: 10,
            ..Tally::default()
        }
    );
}

#[tokio::test]
async fn mysql_swallowed_unique_violation_loses_nothing() {
    let Some(fx) = mysql("my_swallow").await else {
        return;
    };
    let t = swallowed_violation_loses_nothing(fx).await;
    assert_eq!(
        t,
        Tally {
            applied: 10,
            ..Tally::default()
        }
    );
}

/// The store's commit itself: after a failed statement, PostgreSQL's `COMMIT` would answer
/// `ROLLBACK`; the store reports a transient error instead of a commit proof.
#[tokio::test]
async fn pg_commit_of_an_aborted_transaction_fails_transient() {
    let Some(fx) = pg("pg_aborted_commit").await else {
        return;
    };
    use oncely_core::{Claim, ErrorKind, Inspect, MessageId, PayloadHash, Store};
    let s = &fx.store;
    let c = ConsumerName::new("c").unwrap();
    let id = MessageId::new("x").unwrap();
    let mut tx = s.begin().await.unwrap();
    let h = PayloadHash::of(b"p");
    assert_eq!(s.claim(&mut tx, &c, &id, h).await.unwrap(), Claim::Fresh);
    let _ = sqlx::raw_sql("SELECT 1/0")
        .execute(&mut *tx)
        .await
        .unwrap_err();
    let e = s.commit(tx).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert!(e.to_string().contains("aborted"), "{e}");
    assert_eq!(s.claimed_hash(&c, "x").await.unwrap(), None);
    // The connection goes back to the pool usable.
    for _ in 0..8 {
        let mut tx = s.begin().await.unwrap();
        assert_eq!(s.claim(&mut tx, &c, &id, h).await.unwrap(), Claim::Fresh);
        s.rollback(tx).await.unwrap();
    }
}

/// The check travels with the commit (`SELECT 1; COMMIT; BEGIN`): a good commit is
/// committed, and the trailing empty transaction is kept only for the store's next `begin`
/// (crates/oncely-sql/tests/warm.rs): a connection back in the pool runs its next statement
/// in a transaction of its own.
#[tokio::test]
async fn pg_checked_commit_leaves_no_transaction_open() {
    let Some(fx) = pg("pg_checked_commit").await else {
        return;
    };
    use oncely_core::{Claim, Inspect, MessageId, PayloadHash, Store};
    let s = &fx.store;
    let c = ConsumerName::new("c").unwrap();
    let h = PayloadHash::of(b"p");
    for i in 0..4 {
        let id = MessageId::new(format!("ok-{i}")).unwrap();
        let mut tx = s.begin().await.unwrap();
        assert_eq!(s.claim(&mut tx, &c, &id, h).await.unwrap(), Claim::Fresh);
        s.commit(tx).await.unwrap();
        assert_eq!(s.claimed_hash(&c, id.as_str()).await.unwrap(), Some(h));
    }
    // Every connection of the pool at once (so the ones that committed too): in a
    // transaction left open, the statement would start after the transaction did.
    let mut conns = Vec::new();
    for _ in 0..s.pool().size() {
        conns.push(s.pool().acquire().await.unwrap());
    }
    for conn in &mut conns {
        // One simple-protocol message: a transaction of its own starts with the statement.
        let row = sqlx::raw_sql("SELECT now() = statement_timestamp()")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        let own: bool = sqlx::Row::get(&row, 0);
        assert!(own, "a transaction was left open on a connection");
    }
    drop(conns);
}

/// What the check before `COMMIT` costs: claim + commit through the store (with the check)
/// against the same through sqlx's own commit. Run with `--ignored --nocapture`.
#[tokio::test]
#[ignore = "measurement, prints figures"]
async fn pg_commit_check_cost() {
    let Some(fx) = pg("pg_commit_cost").await else {
        return;
    };
    use oncely_core::{MessageId, PayloadHash, Store};
    let s = &fx.store;
    let c = ConsumerName::new("c").unwrap();
    let h = PayloadHash::of(b"p");
    let n = 2000;
    for round in 0..2 {
        let started = std::time::Instant::now();
        for i in 0..n {
            let mut tx = s.begin().await.unwrap();
            let id = MessageId::new(format!("checked-{round}-{i}")).unwrap();
            s.claim(&mut tx, &c, &id, h).await.unwrap();
            s.commit(tx).await.unwrap();
        }
        let checked = started.elapsed();
        let started = std::time::Instant::now();
        for i in 0..n {
            let mut tx = s.begin().await.unwrap();
            let id = MessageId::new(format!("plain-{round}-{i}")).unwrap();
            s.claim(&mut tx, &c, &id, h).await.unwrap();
            tx.commit().await.unwrap();
        }
        let plain = started.elapsed();
        eprintln!(
            "round {round}: {n} claim+commit with the check {:.1} µs each, without {:.1} µs each",
            checked.as_micros() as f64 / n as f64,
            plain.as_micros() as f64 / n as f64
        );
    }
    let mut tx = s.begin().await.unwrap();
    let started = std::time::Instant::now();
    for _ in 0..n {
        sqlx::raw_sql("SELECT 1").execute(&mut *tx).await.unwrap();
    }
    eprintln!(
        "the check alone (SELECT 1 in a transaction): {:.1} µs each",
        started.elapsed().as_micros() as f64 / n as f64
    );
    s.rollback(tx).await.unwrap();
}
