//! The store conformance suite on the real PostgreSQL server (a schema per case).

mod common;

use common::{missing, pg_url, unique};
use oncely_core::{Error, Result};
use oncely_sql::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use oncely_sql::sqlx::{self, AssertSqlSafe, Postgres, Transaction};
use oncely_sql::{PgStore, Tables};
use oncely_testkit::{ExerciseOptions, StoreHarness};
use std::str::FromStr;
use std::sync::Mutex;

struct PgHarness {
    schemas: Mutex<Vec<String>>,
    /// Portable mode forced on (`SqlStore::with_portable`).
    portable: bool,
}

fn db(e: sqlx::Error) -> Error {
    Error::transient("ledger query failed").with_source(e)
}

impl StoreHarness for PgHarness {
    type Store = PgStore;

    async fn fresh(&self) -> Result<PgStore> {
        let schema = unique("conf_pg");
        // The tables are qualified with the schema; the test ledger is found through the
        // connection's search_path (the handler only sees the transaction).
        let connect = PgConnectOptions::from_str(&pg_url())
            .map_err(db)?
            .options([("search_path", schema.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(connect)
            .await
            .map_err(db)?;
        let tables = Tables::default().with_schema(&schema)?;
        let store = PgStore::with_tables(pool, tables).with_portable(self.portable);
        store.migrate().await?;
        if self.portable {
            // The portable migration took its lock in the lease table (and released it).
            let leases: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM {}",
                store.tables().ops_leases()
            )))
            .fetch_one(store.pool())
            .await
            .map_err(db)?;
            assert_eq!(leases, 0, "the migration lease was released");
        }
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE TABLE {schema}.ledger (seq BIGSERIAL PRIMARY KEY, message_id TEXT NOT NULL, amount BIGINT NOT NULL)"
        )))
        .execute(store.pool())
        .await
        .map_err(db)?;
        self.schemas.lock().unwrap().push(schema);
        Ok(store)
    }

    async fn add_effect(
        tx: &mut Transaction<'static, Postgres>,
        message_id: &str,
        amount: i64,
    ) -> Result<()> {
        sqlx::query("INSERT INTO ledger (message_id, amount) VALUES ($1, $2)")
            .bind(message_id)
            .bind(amount)
            .execute(&mut **tx)
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn clock(store: &PgStore) -> Result<std::time::SystemTime> {
        common::db_clock(store).await
    }

    fn dead_letter_limits(&self) -> oncely_testkit::DeadLetterLimits {
        common::sql_limits(oncely_sql::Dialect::Postgres)
    }

    async fn effects(store: &PgStore) -> Result<Vec<(String, i64)>> {
        sqlx::query_as("SELECT message_id, amount FROM ledger ORDER BY seq")
            .fetch_all(store.pool())
            .await
            .map_err(db)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_passes_the_conformance_suite() {
    conformance("postgres_passes_the_conformance_suite", false).await;
}

/// The same suite with portable mode forced (issue 16: CockroachDB, YugabyteDB, Citus).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_portable_passes_the_conformance_suite() {
    conformance("postgres_portable_passes_the_conformance_suite", true).await;
}

async fn conformance(test: &str, portable: bool) {
    if let Err(e) = common::probe(&pg_url()).await {
        missing("PostgreSQL", test, &e);
        return;
    }
    let harness = PgHarness {
        schemas: Mutex::new(vec![]),
        portable,
    };
    oncely_testkit::exercise_with(
        &harness,
        ExerciseOptions {
            crash_seeds: 8,
            crash_messages: 100,
        },
    )
    .await;
    let cleanup = PgStore::connect(&pg_url()).await.unwrap();
    let created = harness.schemas.lock().unwrap().clone();
    for schema in created {
        let _ = sqlx::raw_sql(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
            .execute(cleanup.pool())
            .await;
    }
}
