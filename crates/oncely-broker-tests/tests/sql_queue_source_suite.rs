//! The one source conformance suite (`oncely_testkit::exercise_source`) on the PostgreSQL
//! queue table, each case on its own table.

use oncely_broker_tests::services::{PG_URL, available, unique};
use oncely_core::{RawEnvelope, Result};
use oncely_sql::{PgStore, Tables};
use oncely_sql_queue::{SqlQueue, SqlQueueSource};
use oncely_testkit::{SourceHarness, SourceTraits, exercise_source};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Lease of a delivered row: a dropped delivery comes back when it runs out.
const LEASE: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Queues(Mutex<HashMap<String, SqlQueue>>);

impl SourceHarness for Queues {
    type Source = SqlQueueSource;

    async fn fresh(&self, case: &str) -> Result<SqlQueueSource> {
        let tables = Tables::default().with_prefix(&format!("{}_", unique("sq")))?;
        let pool = PgStore::connect(PG_URL).await?.pool().clone();
        let store = PgStore::with_tables(pool, tables);
        store.migrate_with(&[&oncely_sql_queue::MIGRATIONS]).await?;
        let queue = SqlQueue::of(&store);
        self.0
            .lock()
            .unwrap()
            .insert(case.to_owned(), queue.clone());
        Ok(queue.source(LEASE))
    }

    async fn publish(&self, case: &str, messages: Vec<RawEnvelope>) -> Result<()> {
        let queue = self.0.lock().unwrap()[case].clone();
        queue.enqueue(&messages).await
    }

    fn traits(&self) -> SourceTraits {
        SourceTraits {
            redelivery_within: LEASE * 5,
            quiet: LEASE * 2,
            ..SourceTraits::default()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_queue_table_source_suite() {
    if !available(
        "pg_queue_table_source_suite",
        "PostgreSQL",
        "127.0.0.1:5432",
    ) {
        return;
    }
    exercise_source(&Queues::default()).await;
}
