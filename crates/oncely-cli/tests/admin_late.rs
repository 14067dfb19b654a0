//! Late messages (source time older than the retention window) are quarantined with reason
//! `late`, not applied; with `LatePolicy::Apply` they are applied; `dlq replay` applies a
//! quarantined one on the operator's decision, still deduplicated.

mod admin_support;
use admin_support::Target;
use oncely::ops::retention::Retention;
use oncely_core::{
    Consumer, ConsumerName, Envelope, Error, Handled, Handler, LatePolicy, MemorySource,
    RawEnvelope, Result,
};
use oncely_sql::sqlx::{self, AssertSqlSafe, Postgres, Transaction};
use oncely_sql::{ConnectOptions, PgStore};
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct Effect(String);

impl Handler<Transaction<'static, Postgres>> for Effect {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        m: &Envelope,
    ) -> Result<Handled> {
        sqlx::query(AssertSqlSafe(self.0.clone()))
            .bind(m.id().as_str())
            .execute(&mut **tx)
            .await
            .map_err(|e| Error::permanent(format!("effect: {e}")))?;
        Ok(Handled::Applied)
    }
}

fn message(id: &str, age: Duration) -> RawEnvelope {
    let mut raw = RawEnvelope::new(id, br#"{"account":"a","amount":1}"#.to_vec());
    raw.meta.source_time = Some(SystemTime::now() - age);
    raw
}

async fn run(
    store: &PgStore,
    effect: &Effect,
    retention: Retention,
    consumer: &str,
    msgs: Vec<RawEnvelope>,
) {
    let source = MemorySource::new();
    for m in msgs {
        source.publish(m);
    }
    source.close();
    let c = retention.apply(Consumer::new(
        ConsumerName::new(consumer).unwrap(),
        store.clone(),
        effect.clone(),
    ));
    c.run(source, CancellationToken::new()).await.unwrap();
}

#[tokio::test]
async fn late_message_is_quarantined_on_postgres() {
    let Some(t) = Target::postgres("late_message_is_quarantined_on_postgres").await else {
        return;
    };
    let store = PgStore::connect_with(
        &t.url,
        &ConnectOptions {
            tables: t.tables(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    store.migrate().await.unwrap();
    let effects = format!("{}.effects", t.schema.as_deref().unwrap());
    t.exec(&format!(
        "CREATE TABLE {effects} (message_id TEXT NOT NULL)"
    ))
    .await;
    let effect = Effect(format!("INSERT INTO {effects} (message_id) VALUES ($1)"));
    let hour = Duration::from_secs(3600);
    let window = Retention {
        window: hour,
        late: LatePolicy::Quarantine,
    };

    run(
        &store,
        &effect,
        window,
        "billing",
        vec![
            message("fresh-1", Duration::from_secs(5)),
            message("late-1", 2 * hour),
            message("late-2", 30 * hour),
        ],
    )
    .await;
    let count = |sql: String| {
        let t = &t;
        async move { t.scalar(&sql).await }
    };
    assert_eq!(
        count(format!(
            "SELECT COUNT(*) FROM {effects} WHERE message_id = 'fresh-1'"
        ))
        .await,
        1
    );
    assert_eq!(
        count(format!(
            "SELECT COUNT(*) FROM {effects} WHERE message_id LIKE 'late-%'"
        ))
        .await,
        0,
        "a late message was applied"
    );
    let dl = t.tables().dead_letters();
    assert_eq!(
        count(format!(
            "SELECT COUNT(*) FROM {dl} WHERE reason = 'late' AND message_id IN ('late-1', 'late-2')"
        ))
        .await,
        2
    );
    let inbox = t.tables().inbox();
    assert_eq!(
        count(format!(
            "SELECT COUNT(*) FROM {inbox} WHERE message_id LIKE 'late-%'"
        ))
        .await,
        0,
        "a quarantined id must not be claimed"
    );
    let listed = t.json(&["dlq", "list", "--reason", "late"]);
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    assert!(
        listed[0]["detail"]
            .as_str()
            .unwrap()
            .contains("retention window"),
        "{listed}"
    );

    // The same message under LatePolicy::Apply (for naturally idempotent effects) is applied.
    let apply = Retention {
        window: hour,
        late: LatePolicy::Apply,
    };
    run(
        &store,
        &effect,
        apply,
        "audit",
        vec![message("late-1", 2 * hour)],
    )
    .await;
    assert_eq!(
        count(format!(
            "SELECT COUNT(*) FROM {effects} WHERE message_id = 'late-1'"
        ))
        .await,
        1
    );

    // Replaying the quarantined copy through the library applies it once for `billing`; a
    // second replay of another copy is a duplicate.
    let ops = oncely::ops::Ops::from(&store);
    let id = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["message_id"] == "late-2")
        .unwrap()["id"]
        .as_i64()
        .unwrap();
    let r = oncely::ops::replay::replay(
        &ops,
        std::sync::Arc::new(store.clone()),
        effect.clone(),
        id,
        &oncely::ops::replay::ReplayOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(r.outcome, "applied");
    assert!(r.row_deleted);
    run(
        &store,
        &effect,
        window,
        "billing",
        vec![message("late-2", 30 * hour)],
    )
    .await;
    // Another late copy of late-2 is now a plain duplicate: the id is in the inbox, so the
    // late check (which only guards fresh claims) does not quarantine it again.
    let again = t.json(&["dlq", "list", "--reason", "late"]);
    assert!(
        again
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["message_id"] != "late-2"),
        "{again}"
    );
    assert_eq!(
        count(format!(
            "SELECT COUNT(*) FROM {effects} WHERE message_id = 'late-2'"
        ))
        .await,
        1
    );
}
