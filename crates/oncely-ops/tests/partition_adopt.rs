//! The partitioned inbox in the one migration ledger: one installed by the code before the
//! ledger (its DDL, no ledger row) is adopted by `install` without running the DDL again, and
//! upgraded by the later migrations.

mod common;
use oncely_ops::partition;
use oncely_sql::sqlx::{self, AssertSqlSafe};

#[tokio::test]
async fn an_older_partitioned_inbox_is_adopted() {
    let Some((store, ops, _db)) = common::postgres("an_older_partitioned_inbox_is_adopted").await
    else {
        return;
    };
    // The partitioned inbox as an older release created it, in the test's (empty) schema.
    sqlx::raw_sql(AssertSqlSafe(
        ops.tables().render(partition::PARTITIONED_INBOX_SQL),
    ))
    .execute(store.pool())
    .await
    .unwrap();
    // The DDL has no IF NOT EXISTS: running it again would fail.
    let created = partition::install(&ops, 1).await.unwrap();
    assert_eq!(created.len(), 2);
    assert_eq!(store.migrate().await.unwrap(), 2, "the inbox set on top");
    let ledger: Vec<(String, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT set_name, version FROM {} ORDER BY set_name, version",
        ops.tables().migration_ledger()
    )))
    .fetch_all(store.pool())
    .await
    .unwrap();
    let ledger: Vec<(&str, i64)> = ledger.iter().map(|(s, v)| (s.as_str(), *v)).collect();
    // Adopted through version 1, then upgraded by the second migration (the batch claim).
    assert_eq!(
        ledger,
        [
            ("inbox", 1),
            ("inbox", 2),
            ("partitioned", 1),
            ("partitioned", 2)
        ]
    );
    assert!(partition::is_partitioned(&ops).await.unwrap());
}
