//! `oncely dlq replay` can never apply a message twice: it refuses conflicts (until `dlq
//! resolve`), resolves rows whose id the inbox holds without running them, and refuses rows
//! whose claim may have been pruned (older than the retention window, or first seen before
//! the last prune's cutoff) unless `--force`. Effects are counted in the demo's ledger.
//! On SQLite, PostgreSQL and MariaDB.

mod admin_support;
use admin_support::{Target, n, oncely};
use oncely_core::{ConsumerName, DeadLetter, DeadLetterReason, RawEnvelope, Store};

/// Stores a dead letter the way the runtime would (reason: the database was down).
async fn dead_letter(t: &Target, id: &str, payload: &str) {
    let letter = DeadLetter {
        consumer: ConsumerName::new("demo").unwrap(),
        message: RawEnvelope::new(id, payload.as_bytes().to_vec()),
        reason: DeadLetterReason::AttemptsExhausted {
            attempts: 5,
            last_error: "database unavailable".into(),
        },
        attempts: 5,
    };
    let options = oncely_sql::ConnectOptions {
        tables: t.tables(),
        ..Default::default()
    };
    if t.url.starts_with("sqlite") {
        let s = oncely_sql::SqliteStore::connect_with(&t.url, &options)
            .await
            .unwrap();
        s.dead_letter(&letter).await.unwrap();
    } else if t.url.starts_with("postgres") {
        let s = oncely_sql::PgStore::connect_with(&t.url, &options)
            .await
            .unwrap();
        s.dead_letter(&letter).await.unwrap();
    } else {
        let s = oncely_sql::MySqlStore::connect_with(&t.url, &options)
            .await
            .unwrap();
        s.dead_letter(&letter).await.unwrap();
    }
}

/// The row id of `message_id`'s dead letter.
fn row_of(t: &Target, message_id: &str) -> String {
    let list = t.json(&["dlq", "list", "--limit", "100000"]);
    let row = list
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["message_id"] == message_id)
        .unwrap_or_else(|| panic!("{message_id} not listed: {list}"));
    n(&row["id"]).to_string()
}

fn listed(t: &Target, row: &str) -> bool {
    t.json(&["dlq", "list", "--limit", "100000"])
        .as_array()
        .unwrap()
        .iter()
        .any(|d| n(&d["id"]).to_string() == row)
}

/// Ledger rows minus distinct ids: the number of effects applied twice.
async fn doubles(t: &Target) -> i64 {
    let ledger = t.table("demo_ledger");
    t.scalar(&format!("SELECT COUNT(*) FROM {ledger}")).await
        - t.scalar(&format!("SELECT COUNT(DISTINCT message_id) FROM {ledger}"))
            .await
}

async fn effects(t: &Target, id: &str) -> i64 {
    let ledger = t.table("demo_ledger");
    t.scalar(&format!(
        "SELECT COUNT(*) FROM {ledger} WHERE message_id = '{id}'"
    ))
    .await
}

async fn refusals(t: &Target) {
    t.seed_with_demo(300);
    let events = oncely::ops::events::table(&t.tables());

    // (a) A conflict is refused, row kept, nothing applied; `resolve --keep-stored` settles it.
    let conflicts = t.json(&["dlq", "list", "--reason", "conflict"]);
    let conflict = &conflicts.as_array().unwrap()[0];
    let (row, id) = (
        n(&conflict["id"]).to_string(),
        conflict["message_id"].as_str().unwrap().to_owned(),
    );
    let before = effects(t, &id).await;
    let r = t.json(&["dlq", "replay", &row]);
    assert_eq!(r[0]["outcome"], "needs_decision", "{r}");
    assert_eq!(r[0]["row_deleted"], false);
    assert!(listed(t, &row), "a refused conflict row stays");
    assert_eq!(effects(t, &id).await, before, "a conflict was applied");
    let mut args: Vec<String> = ["dlq", "resolve", &row, "--apply-new"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(t.db_args());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, err) = oncely(&refs);
    assert_eq!(code, 2, "--apply-new must be refused: {err}");
    assert!(err.contains("not offered"), "{err}");
    assert!(listed(t, &row));
    let r = t.json(&["dlq", "resolve", &row, "--keep-stored"]);
    assert_eq!(r["outcome"], "kept_stored", "{r}");
    assert!(!listed(t, &row), "a resolved conflict row is gone");
    assert_eq!(effects(t, &id).await, before);
    assert_eq!(
        t.scalar(&format!(
            "SELECT COUNT(*) FROM {events} WHERE kind = 'dlq_keep_stored'"
        ))
        .await,
        1,
        "the decision is recorded"
    );

    // (c) The inbox already holds the id with this payload: resolved as already applied.
    let payload = r#"{"account":"acct-2","amount":3}"#;
    dead_letter(t, "again-1", payload).await;
    let r = t.json(&["dlq", "replay", &row_of(t, "again-1")]);
    assert_eq!(r[0]["outcome"], "applied", "{r}");
    dead_letter(t, "again-1", payload).await;
    let row = row_of(t, "again-1");
    let r = t.json(&["dlq", "replay", &row]);
    assert_eq!(r[0]["outcome"], "already_applied", "{r}");
    assert_eq!(r[0]["row_deleted"], true);
    assert!(!listed(t, &row));
    assert_eq!(effects(t, "again-1").await, 1);

    // (b) Older than the retention window: refused; --force applies it with a warning.
    dead_letter(t, "old-1", payload).await;
    let row = row_of(t, "old-1");
    let old = oncely_sql::clock::now_ms() - 8 * 86_400_000;
    t.exec(&format!(
        "UPDATE {} SET dead_lettered_at = {old} WHERE id = {row}",
        t.tables().dead_letters()
    ))
    .await;
    let r = t.json(&["dlq", "replay", &row]);
    assert_eq!(r[0]["outcome"], "refused_old", "{r}");
    assert!(listed(t, &row));
    assert_eq!(effects(t, "old-1").await, 0);
    // A shorter window given on the command line refuses a younger row too.
    dead_letter(t, "young-1", payload).await;
    let young = row_of(t, "young-1");
    t.exec(&format!(
        "UPDATE {} SET dead_lettered_at = {} WHERE id = {young}",
        t.tables().dead_letters(),
        oncely_sql::clock::now_ms() - 2 * 3_600_000
    ))
    .await;
    let r = t.json(&["dlq", "replay", &young, "--retention", "1h"]);
    assert_eq!(r[0]["outcome"], "refused_old", "{r}");
    let r = t.json(&["dlq", "replay", &row, "--force"]);
    assert_eq!(r[0]["outcome"], "applied", "{r}");
    assert!(r[0]["warning"].as_str().unwrap().contains("forced"), "{r}");
    assert_eq!(effects(t, "old-1").await, 1);

    // (b') A young row, but a prune ran after it was first seen: refused, even with the
    // default window; the watermark is in ops_events.
    dead_letter(t, "pruned-1", payload).await;
    let row = row_of(t, "pruned-1");
    std::thread::sleep(std::time::Duration::from_millis(5));
    t.json(&["prune", "--older-than", "0s"]);
    assert!(
        t.scalar(&format!(
            "SELECT COUNT(*) FROM {events} WHERE kind = 'prune'"
        ))
        .await
            >= 1
    );
    let r = t.json(&["dlq", "replay", &row]);
    assert_eq!(r[0]["outcome"], "refused_old", "{r}");
    assert!(r[0]["detail"].as_str().unwrap().contains("prune"), "{r}");
    assert!(listed(t, &row));
    assert_eq!(effects(t, "pruned-1").await, 0);
    // Young rows first seen after the prune replay normally.
    std::thread::sleep(std::time::Duration::from_millis(5));
    dead_letter(t, "after-1", payload).await;
    let r = t.json(&["dlq", "replay", &row_of(t, "after-1")]);
    assert_eq!(r[0]["outcome"], "applied", "{r}");

    // Nothing applied twice anywhere.
    assert_eq!(doubles(t).await, 0);
}

admin_support::on_each_database!(refusals: replay_refusals_on_sqlite, replay_refusals_on_postgres, replay_refusals_on_mariadb);
