//! `oncely dlq list | show | replay | purge`, with the effects counted from the demo's ledger.

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
        oncely_sql::SqliteStore::connect_with(&t.url, &options)
            .await
            .unwrap()
            .dead_letter(&letter)
            .await
            .unwrap();
    } else if t.url.starts_with("postgres") {
        oncely_sql::PgStore::connect_with(&t.url, &options)
            .await
            .unwrap()
            .dead_letter(&letter)
            .await
            .unwrap();
    } else {
        oncely_sql::MySqlStore::connect_with(&t.url, &options)
            .await
            .unwrap()
            .dead_letter(&letter)
            .await
            .unwrap();
    }
}

fn id_of(list: &serde_json::Value, message_id: &str) -> i64 {
    let row = list
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["message_id"] == message_id)
        .unwrap_or_else(|| panic!("{message_id} not listed: {list}"));
    n(&row["id"])
}

async fn dlq_round_trip(t: &Target) {
    let report = t.seed_with_demo(400);
    // Rows, not ids: a redelivered conflicting copy is dead-lettered again.
    let conflict_rows = n(&report["dead_letters_by_reason"]["conflict"]);
    let ledger = t.table("demo_ledger");
    let accounts = t.table("demo_accounts");
    let effects = |id: &str| format!("SELECT COUNT(*) FROM {ledger} WHERE message_id = '{id}'");

    // list: every row the demo stored, filters work.
    let all = t.json(&["dlq", "list", "--limit", "10000"]);
    assert_eq!(
        all.as_array().unwrap().len() as i64,
        n(&report["dead_lettered"]),
        "{all}"
    );
    let conflicts = t.json(&["dlq", "list", "--reason", "conflict"]);
    assert_eq!(conflicts.as_array().unwrap().len() as i64, conflict_rows);
    assert!(
        conflicts
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["reason"] == "conflict")
    );

    // show: payload and hashes.
    let first = n(&conflicts[0]["id"]).to_string();
    let shown = t.json(&["dlq", "show", &first]);
    assert_eq!(shown["reason"], "conflict");
    assert!(
        shown["payload_text"].as_str().unwrap().contains("amount"),
        "{shown}"
    );
    assert_ne!(
        shown["payload_hash"], shown["stored_hash"],
        "a conflict holds two hashes: {shown}"
    );

    // replay: a message that failed on a transient outage is applied once, then its row is gone.
    let balance =
        format!("SELECT COALESCE(MAX(balance), 0) FROM {accounts} WHERE account = 'acct-1'");
    let before = t.scalar(&balance).await;
    dead_letter(t, "replay-me-1", r#"{"account":"acct-1","amount":7}"#).await;
    let list = t.json(&["dlq", "list", "--limit", "10000"]);
    let row = id_of(&list, "replay-me-1").to_string();
    let replayed = t.json(&["dlq", "replay", &row]);
    assert_eq!(replayed[0]["outcome"], "applied", "{replayed}");
    assert_eq!(replayed[0]["row_deleted"], true);
    assert_eq!(t.scalar(&effects("replay-me-1")).await, 1);
    assert_eq!(t.scalar(&balance).await, before + 7);
    // The same message dead-lettered again (e.g. a second copy): the inbox holds it, so the
    // row is resolved as already applied without running the handler. No effect.
    dead_letter(t, "replay-me-1", r#"{"account":"acct-1","amount":7}"#).await;
    let list = t.json(&["dlq", "list", "--limit", "10000"]);
    let row = id_of(&list, "replay-me-1").to_string();
    let replayed = t.json(&["dlq", "replay", &row]);
    assert_eq!(replayed[0]["outcome"], "already_applied", "{replayed}");
    assert_eq!(replayed[0]["row_deleted"], true);
    assert_eq!(
        t.scalar(&effects("replay-me-1")).await,
        1,
        "replay must stay deduplicated"
    );
    // --all over a reason: conflicts are refused (never applied), their rows kept as they are.
    let replayed = t.json(&["dlq", "replay", "--all", "--reason", "conflict"]);
    assert!(
        replayed
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["outcome"] == "needs_decision" && r["row_deleted"] == false),
        "{replayed}"
    );
    assert_eq!(
        t.json(&["dlq", "list", "--reason", "conflict"])
            .as_array()
            .unwrap()
            .len() as i64,
        conflict_rows
    );
    assert_eq!(
        t.scalar(&format!("SELECT COUNT(*) FROM {ledger}")).await,
        t.scalar(&format!("SELECT COUNT(DISTINCT message_id) FROM {ledger}"))
            .await,
        "double effect after replay"
    );
    // A row without a usable id is not replayable and is kept.
    let bad = t.json(&["dlq", "list", "--reason", "bad_id"]);
    if let Some(b) = bad.as_array().unwrap().first() {
        let replayed = t.json(&["dlq", "replay", &n(&b["id"]).to_string()]);
        assert_eq!(replayed[0]["outcome"], "skipped");
        assert_eq!(replayed[0]["row_deleted"], false);
    }

    // purge: only rows older than the age go.
    let total = t
        .json(&["dlq", "list", "--limit", "10000"])
        .as_array()
        .unwrap()
        .len() as i64;
    let old = (oncely_sql::clock::now_ms() - 40 * 86_400_000).to_string();
    let dl = t.tables().dead_letters();
    t.exec(&format!(
        "UPDATE {dl} SET dead_lettered_at = {old} WHERE reason = 'conflict'"
    ))
    .await;
    let purged = t.json(&["dlq", "purge", "--older-than", "30d"]);
    assert_eq!(n(&purged["purged"]), conflict_rows, "{purged}");
    let left = t
        .json(&["dlq", "list", "--limit", "10000"])
        .as_array()
        .unwrap()
        .len() as i64;
    assert_eq!(left, total - conflict_rows);

    // Errors are reported, not panicked.
    let mut args: Vec<String> = vec!["dlq".into(), "show".into(), "999999".into()];
    args.extend(t.db_args());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, err) = oncely(&refs);
    assert_eq!(code, 2);
    assert!(err.contains("no dead letter with id 999999"), "{err}");
}

admin_support::on_each_database!(dlq_round_trip: dlq_on_sqlite, dlq_on_postgres, dlq_on_mariadb);
