//! Versioned apply through the oncely `Consumer` on every store: a broker that reorders,
//! duplicates and loses acks; the handler returns `Handled::Stale` for old versions. Each
//! message id ends Applied or Stale exactly once and every entity holds its latest value.

mod support;

use oncely_core::{Consumer, ConsumerName, Envelope, Error, Handled, Handler, RawEnvelope, Store};
use oncely_effects::Versions;
use oncely_sql::{Column, SqlDatabase, SqlStore, Tables, Value};
use oncely_testkit::{FaultySource, SourceFaults};
use sqlx::Transaction;
use tokio_util::sync::CancellationToken;

const ENTITIES: usize = 8;
const VERSIONS: i64 = 5;

fn table(tables: &Tables) -> String {
    match tables.schema() {
        Some(s) => format!("{s}.order_status"),
        None => "order_status".into(),
    }
}

struct Status {
    tables: Tables,
}

impl<DB: SqlDatabase> Handler<Transaction<'static, DB>> for Status {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, DB>,
        msg: &Envelope,
    ) -> Result<Handled, Error> {
        let key = msg
            .meta()
            .entity_key
            .clone()
            .ok_or_else(|| Error::permanent("no key"))?;
        let version = msg
            .meta()
            .version
            .ok_or_else(|| Error::permanent("no version"))?;
        let seen = Versions::new(self.tables.clone())
            .apply_if_newer(tx, "order", &key, version)
            .await?;
        if seen.is_applied() {
            let d = DB::DIALECT;
            let sql = format!(
                "INSERT INTO {} (k, value) VALUES ({}) {}",
                table(&self.tables),
                d.params(1, 2),
                d.on_conflict_update("k", &["value"])
            );
            let value = String::from_utf8_lossy(msg.payload()).into_owned();
            DB::execute(
                tx,
                oncely_sql::Engine::assumed(DB::DIALECT),
                &sql,
                &[Value::Text(key), Value::Text(value)],
            )
            .await
            .map_err(Error::transient)?;
        }
        Ok(seen.handled())
    }
}

async fn through_consumer<DB: SqlDatabase>(store: SqlStore<DB>)
where
    SqlStore<DB>: Store<Tx = Transaction<'static, DB>>,
{
    let tables = store.tables().clone();
    let key_type = DB::DIALECT.key_text(190);
    let mut conn = store.pool().acquire().await.unwrap();
    DB::script(
        &mut conn,
        &format!(
            "CREATE TABLE {} (k {key_type} PRIMARY KEY, value TEXT NOT NULL)",
            table(&tables)
        ),
    )
    .await
    .unwrap();
    let source = FaultySource::new(SourceFaults {
        seed: 21,
        duplicate_rate: 0.3,
        reorder_window: 10,
        lost_ack_rate: 0.1,
    });
    for e in 0..ENTITIES {
        for v in 1..=VERSIONS {
            let mut raw = RawEnvelope::new(format!("e{e}-v{v}"), format!("e{e} state {v}"));
            raw.meta.entity_key = Some(format!("e{e}"));
            raw.meta.version = Some(v);
            source.publish(raw);
        }
    }
    source.close();
    let consumer = Consumer::new(
        ConsumerName::new("status").unwrap(),
        store.clone(),
        Status {
            tables: tables.clone(),
        },
    )
    .concurrency(4);
    let stats = consumer
        .run(source, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(stats.dead_lettered, 0, "{stats:?}");
    assert_eq!(
        stats.applied + stats.stale,
        ENTITIES as u64 * VERSIONS as u64,
        "each id applied or stale once: {stats:?}"
    );
    let rows = DB::fetch(
        &mut conn,
        oncely_sql::Engine::assumed(DB::DIALECT),
        &format!("SELECT k, value FROM {} ORDER BY k", table(&tables)),
        &[],
        &[Column::Text, Column::Text],
    )
    .await
    .unwrap();
    assert_eq!(rows.len(), ENTITIES);
    for row in rows {
        let k = row[0].clone();
        let Value::Text(k) = k else {
            panic!("text key")
        };
        assert_eq!(
            row[1],
            Value::Text(format!("{k} state {VERSIONS}")),
            "{k} holds its latest state"
        );
    }
    eprintln!(
        "{:?}: applied {}, stale {}, duplicates {}",
        DB::DIALECT,
        stats.applied,
        stats.stale,
        stats.duplicates
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_converges_under_reordering_sqlite() {
    let (store, _dir) = support::sqlite().await;
    through_consumer(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_converges_under_reordering_postgres() {
    let Some((store, _db)) = support::postgres("vcons").await else {
        return;
    };
    through_consumer(store.clone()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_converges_under_reordering_mariadb() {
    let Some((store, _db)) = support::mysql("vcons").await else {
        return;
    };
    through_consumer(store.clone()).await;
}
