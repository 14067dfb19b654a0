//! The operator sequence of issue 13, on SQLite, PostgreSQL and MariaDB:
//!
//! ```sh
//! oncely demo --json --messages 2000 --store URL
//! oncely dlq replay --all --database URL
//! oncely prune --older-than 0s --database URL
//! oncely dlq replay --all --database URL
//! ```
//!
//! Before the replay checks, the second replay applied every conflicting copy again (the
//! pruned inbox no longer knew the ids): 95 doubles on SQLite. Now: 0 double, and the second
//! replay applies nothing. Counted from the demo's ledger (rows vs distinct ids).

mod admin_support;
use admin_support::{Target, n};

async fn ledger(t: &Target) -> (i64, i64) {
    let ledger = t.table("demo_ledger");
    (
        t.scalar(&format!("SELECT COUNT(*) FROM {ledger}")).await,
        t.scalar(&format!("SELECT COUNT(DISTINCT message_id) FROM {ledger}"))
            .await,
    )
}

async fn sequence(t: &Target) {
    let report = t.seed_with_demo(2000);
    let (rows, ids) = ledger(t).await;
    assert_eq!(rows, ids, "the demo itself applied twice: {report}");
    let first = t.json(&["dlq", "replay", "--all"]);
    let after_first = ledger(t).await;
    assert_eq!(
        after_first.0, after_first.1,
        "double after the first replay"
    );
    assert!(
        first
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["outcome"] == "needs_decision")
            .count()
            > 0,
        "the demo makes conflicts, and replay refuses them: {first}"
    );
    let pruned = t.json(&["prune", "--older-than", "0s"]);
    assert!(n(&pruned["deleted"]) > 0, "{pruned}");
    let second = t.json(&["dlq", "replay", "--all"]);
    let after_second = ledger(t).await;
    let applied = second
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["outcome"] == "applied")
        .count();
    eprintln!(
        "{}: ledger {} rows / {} ids after demo, {:?} after replay, {:?} after prune + replay; second replay applied {applied}",
        t.url, rows, ids, after_first, after_second
    );
    assert_eq!(
        applied, 0,
        "nothing may be applied after the prune: {second}"
    );
    assert_eq!(
        after_second, after_first,
        "the second replay changed the ledger"
    );
    assert_eq!(after_second.0, after_second.1, "double effects");
}

admin_support::on_each_database!(
    sequence: operator_sequence_on_sqlite,
    operator_sequence_on_postgres,
    operator_sequence_on_mariadb
);

/// Through PgBouncer in transaction pooling mode, with the plain URL: the demo (its
/// migrations and consumer), `dlq replay`, `prune` (its single-run lock) and `dlq replay`.
#[tokio::test]
async fn operator_sequence_through_pgbouncer() {
    let Some(t) = Target::pgbouncer("operator_sequence_through_pgbouncer").await else {
        return;
    };
    sequence(&t).await;
}
