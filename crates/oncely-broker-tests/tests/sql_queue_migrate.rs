//! The queue table in the one migration ledger: a fresh schema gets both versions; a queue
//! table made by the older inline DDL (no ledger) is adopted at version 1 and keeps its rows.

use oncely_sql::sqlx::{self, AssertSqlSafe};
use oncely_sql::{ConnectOptions, PgStore, Tables};
use oncely_sql_queue::SqlQueue;
use oncely_testkit::test_db::TestDb;

async fn ledger(store: &PgStore) -> Vec<(i64, String)> {
    sqlx::query_as(AssertSqlSafe(format!(
        "SELECT version, name FROM {} WHERE set_name = 'queue' ORDER BY version",
        store.tables().migration_ledger()
    )))
    .fetch_all(store.pool())
    .await
    .expect("ledger")
}

#[tokio::test]
async fn pg_queue_migrations_adopt_an_older_table() {
    let test = "pg_queue_migrations_adopt_an_older_table";
    let Some(place) = TestDb::postgres(test).await else {
        return;
    };
    let schema = place.schema().expect("a schema");
    let options = ConnectOptions {
        max_connections: 2,
        ..place.options()
    };
    let store = PgStore::connect_with(place.url(), &options)
        .await
        .expect("pg");
    let t = store.tables().table("queue");
    // The DDL the queue's migration ran before the ledger, and one waiting row.
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE {t} (id BIGSERIAL PRIMARY KEY, message_id TEXT, payload BYTEA NOT NULL,
             headers TEXT NOT NULL DEFAULT '{{}}', enqueued_at BIGINT NOT NULL, leased_until BIGINT,
             deliveries INTEGER NOT NULL DEFAULT 0);
         CREATE INDEX {schema}_oncely_queue_lease ON {t} (leased_until, id);
         ALTER TABLE {t} ADD COLUMN raw_id BYTEA;
         INSERT INTO {t} (message_id, raw_id, payload, enqueued_at) VALUES ('m-1', 'm-1', 'p', 1);"
    )))
    .execute(store.pool())
    .await
    .expect("older table");
    let queue = SqlQueue::of(&store);
    let sets = [&oncely_sql_queue::MIGRATIONS];
    store.migrate_with(&sets).await.expect("migrate");
    assert_eq!(
        ledger(&store).await,
        [(1, "queue".to_owned()), (2, "raw_id".to_owned())]
    );
    assert_eq!(
        queue.len().await.expect("len"),
        1,
        "the waiting row is kept"
    );
    let indexes: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM pg_indexes WHERE schemaname = '{schema}' AND tablename = 'oncely_queue'"
    )))
    .fetch_one(store.pool())
    .await
    .expect("indexes");
    assert_eq!(
        indexes, 2,
        "primary key and the old lease index; version 1 did not run"
    );
    store.migrate_with(&sets).await.expect("migrate again");
    assert_eq!(ledger(&store).await.len(), 2);
}

#[test]
fn queue_set_is_postgres_only() {
    use oncely_sql::Dialect;
    let t = Tables::default();
    let sql = oncely_sql_queue::MIGRATIONS
        .print(Dialect::Postgres, &t)
        .expect("postgres");
    assert!(sql.contains("CREATE INDEX IF NOT EXISTS oncely_queue_lease ON oncely_queue"));
    assert!(sql.contains("ADD COLUMN IF NOT EXISTS raw_id BYTEA"));
    assert!(
        oncely_sql_queue::MIGRATIONS
            .print(Dialect::Sqlite, &t)
            .is_err()
    );
}
