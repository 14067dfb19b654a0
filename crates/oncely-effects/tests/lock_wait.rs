//! A MySQL/MariaDB lock-wait timeout (error 1205, SQLSTATE `HY000`) in an effects path is
//! transient (retried), as in oncely-sql: the effects crate uses oncely-sql's classifier, not
//! a copy that read `1205` as a SQLSTATE and so called it permanent.

mod support;

use oncely_core::ErrorKind;
use oncely_effects::EffectTables;
use oncely_effects::Journal;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{AssertSqlSafe, Executor};

#[tokio::test]
async fn mysql_lock_wait_timeout_is_transient_in_the_journal() {
    let Some((store, _db)) = support::mysql("jlockwait").await else {
        return;
    };
    let tables = store.tables().clone();
    // The journal's pool waits at most 1 s for a row lock (session setting only).
    let pool = MySqlPoolOptions::new()
        .max_connections(1)
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("SET SESSION innodb_lock_wait_timeout = 1")
                    .await
                    .map(drop)
            })
        })
        .connect(&oncely_testkit::services::mysql_url())
        .await
        .unwrap();
    let journal = Journal::new(pool, tables.clone());
    journal.record("c:m1:email", "email", b"{}").await.unwrap();
    // Another transaction holds the row.
    let mut holder = store.pool().begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT calls FROM {} WHERE effect_key = 'c:m1:email' FOR UPDATE",
        tables.effect_journal()
    )))
    .fetch_all(&mut *holder)
    .await
    .unwrap();
    let err = journal.mark_done("c:m1:email", "ref-1").await.unwrap_err();
    holder.rollback().await.unwrap();
    assert!(
        format!("{err:?}").contains("1205"),
        "expected a lock-wait timeout: {err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::Transient, "{err:?}");
    // Once the lock is gone the same call succeeds.
    assert!(journal.mark_done("c:m1:email", "ref-1").await.unwrap());
}
