//! PostgreSQL with autovacuum off for the inbox: a prune that deleted rows vacuums the inbox
//! itself (its dead rows do not pile up); one that deleted nothing, or a server where
//! autovacuum is on for the table, leaves vacuuming alone.

mod common;
use oncely_ops::Ops;
use oncely_ops::prune::{PruneOptions, prune};
use oncely_sql::SqlTx;

const DAY: i64 = 86_400_000;

/// How many times the inbox was vacuumed by hand (PostgreSQL's statistics, written by the
/// vacuum itself).
async fn vacuums(ops: &Ops) -> i64 {
    let sql = "SELECT vacuum_count FROM pg_stat_all_tables WHERE relid = to_regclass($1)";
    let (mut pool, args) = (ops.pool().clone(), [ops.tables().inbox().into()]);
    pool.fetch_i64(sql, &args).await.unwrap().unwrap_or(0)
}

async fn prune_now(ops: &Ops) -> oncely_ops::prune::PruneReport {
    prune(ops, &PruneOptions::default(), &mut |_| {})
        .await
        .unwrap()
}

#[tokio::test]
async fn prune_vacuums_the_inbox_when_autovacuum_is_off_for_it() {
    let Some((store, ops, _db)) = common::postgres("prune_vacuums_the_inbox").await else {
        return;
    };
    store.migrate().await.unwrap();
    let inbox = ops.tables().inbox();
    let off = format!("ALTER TABLE {inbox} SET (autovacuum_enabled = false)");
    ops.pool().clone().script(&off).await.unwrap();
    assert!(
        oncely_ops::vacuum::autovacuum_off(&ops, &inbox)
            .await
            .unwrap()
    );

    common::fill(&ops, "old", 1_200, 8 * DAY).await;
    common::fill(&ops, "new", 300, 0).await;
    let before = vacuums(&ops).await;
    let report = prune_now(&ops).await;
    assert_eq!(report.deleted, 1_200);
    assert!(report.vacuumed, "{report:?}");
    assert_eq!(vacuums(&ops).await, before + 1, "one vacuum of the inbox");

    // Nothing expired: nothing deleted, no vacuum.
    let report = prune_now(&ops).await;
    assert_eq!((report.deleted, report.vacuumed), (0, false));
    assert_eq!(vacuums(&ops).await, before + 1);

    // Autovacuum on for the table and on the server: the prune leaves it to autovacuum.
    let on = format!("ALTER TABLE {inbox} SET (autovacuum_enabled = true)");
    ops.pool().clone().script(&on).await.unwrap();
    let server_on = ops
        .pool()
        .clone()
        .fetch_i64(
            "SELECT COUNT(*) WHERE current_setting('autovacuum') = 'on'",
            &[],
        )
        .await
        .unwrap()
        == Some(1);
    common::fill(&ops, "older", 100, 8 * DAY).await;
    let report = prune_now(&ops).await;
    assert_eq!(report.deleted, 100);
    assert_eq!(report.vacuumed, !server_on, "{report:?}");
}

#[tokio::test]
async fn sqlite_prune_never_vacuums() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, ops) = common::sqlite(&dir).await;
    common::fill(&ops, "old", 50, 8 * DAY).await;
    let report = prune_now(&ops).await;
    assert_eq!((report.deleted, report.vacuumed), (50, false));
}
