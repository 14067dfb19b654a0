//! The overview's numbers against the database's own: the outbox backlog and the journal
//! rows pending per consumer (and "not installed" without oncely-effects' tables), the rows
//! per minute and hour of applied, conflicts and dead letters, duplicates said to be
//! unrecorded; dead letters grouped by reason and error class (on the three databases, whose
//! SQL differs); the "hide payloads" switch on the page and in the API.

mod common;

use common::{Dialect, Fixture, Letter};
use serde_json::Value;

async fn get_json(base: &str, path: &str) -> Value {
    reqwest::get(format!("{base}{path}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn get_text(base: &str, path: &str) -> String {
    reqwest::get(format!("{base}{path}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Installs oncely-effects' tables and writes journal and outbox rows: pending for
/// `billing` ×3, done ×1, pending ×1 for `mailer` (no inbox rows here); outbox to `orders` ×2 undispatched,
/// ×1 dispatched, to `mail` ×1 undispatched.
async fn effects(f: &Fixture) {
    f.store
        .migrate_with(&[&oncely_effects::MIGRATIONS])
        .await
        .unwrap();
    let now = oncely_sql::clock::now_ms();
    let journal = format!(
        "INSERT INTO {} (effect_key, kind, state, request, calls, recorded_at, updated_at) VALUES ($1, 'email', $2, $3, 1, $4, $4)",
        f.table("effect_journal")
    );
    for (key, state) in [
        ("billing:o-1:email", "pending"),
        ("billing:o-2:email", "pending"),
        ("billing:o-3:charge", "pending"),
        ("billing:o-4:email", "done"),
        ("mailer:o-5:email", "pending"),
    ] {
        f.exec(
            &journal,
            &[key.into(), state.into(), b"{}".to_vec().into(), now.into()],
        )
        .await;
    }
    let outbox = format!(
        "INSERT INTO {} (message_id, entity_key, destination, payload, headers, created_at, attempts, next_attempt_at, dispatched_at) \
         VALUES ($1, 'e', $2, $3, '{{}}', $4, 0, $4, $5)",
        f.table("outbox")
    );
    for (i, (dest, dispatched)) in [
        ("orders", None),
        ("orders", None),
        ("orders", Some(now)),
        ("mail", None),
    ]
    .into_iter()
    .enumerate()
    {
        let at: oncely_sql::Value = match dispatched {
            Some(t) => t.into(),
            None => oncely_sql::Value::NullI64,
        };
        f.exec(
            &outbox,
            &[
                format!("out-{i}").into(),
                dest.into(),
                b"x".to_vec().into(),
                now.into(),
                at,
            ],
        )
        .await;
    }
}

#[tokio::test]
async fn backlog_is_not_installed_then_counted() {
    let Some(f) = common::fixture("backlog", Dialect::Sqlite).await else {
        return;
    };
    f.claim("billing", "o-1", b"x").await;
    let base = common::serve(&f, |c| c).await;
    let v = get_json(&base, "/api/overview").await;
    assert!(
        v["backlog"]["outbox"].is_null() && v["backlog"]["journal_pending"].is_null(),
        "{v}"
    );
    let page = get_text(&base, "/").await;
    assert!(
        page.contains("Outbox: not installed") && page.contains("Effect journal: not installed")
    );

    effects(&f).await;
    let v = get_json(&base, "/api/overview").await;
    let outbox = v["backlog"]["outbox"].as_array().unwrap().clone();
    let undispatched = f.count("outbox", "dispatched_at IS NULL", &[]).await;
    let shown: i64 = outbox.iter().map(|r| r["rows"].as_i64().unwrap()).sum();
    assert_eq!((shown, undispatched), (3, 3), "{outbox:?}");
    let orders = outbox
        .iter()
        .find(|r| r["destination"] == "orders")
        .unwrap();
    assert_eq!(orders["rows"], 2);
    let journal = v["backlog"]["journal_pending"].as_array().unwrap().clone();
    let pending = f.count("effect_journal", "state = 'pending'", &[]).await;
    let shown: i64 = journal.iter().map(|r| r["rows"].as_i64().unwrap()).sum();
    assert_eq!((shown, pending), (4, 4), "{journal:?}");
    let billing = journal.iter().find(|r| r["consumer"] == "billing").unwrap();
    assert_eq!(billing["rows"], 3, "billing's pending rows: {journal:?}");
    let unknown = journal.iter().find(|r| r["key_part"] == "mailer").unwrap();
    assert!(
        unknown["consumer"].is_null(),
        "a consumer without inbox rows is not named"
    );
    let page = get_text(&base, "/").await;
    assert!(page.contains("data-count=\"outbox_backlog\">3<"), "{page}");
    assert!(page.contains("data-count=\"journal_pending\">4<"));
}

async fn since_count(f: &Fixture, table: &str, condition: &str, since: i64) -> i64 {
    f.count(table, condition, &[since.into()]).await
}

#[tokio::test]
async fn timelines_count_what_the_tables_hold() {
    let Some(f) = common::fixture("timelines", Dialect::Sqlite).await else {
        return;
    };
    for i in 0..4 {
        f.claim("billing", &format!("a-{i}"), b"x").await;
    }
    f.letter(&Letter::new("billing", "c-1", "conflict")).await;
    f.letter(&Letter::new("billing", "c-2", "conflict")).await;
    f.letter(&Letter::new("billing", "p-1", "permanent")).await;
    f.letter(&Letter {
        age_ms: 3 * 3_600_000,
        ..Letter::new("billing", "p-old", "permanent")
    })
    .await;
    let base = common::serve(&f, |c| c).await;
    let v = get_json(&base, "/api/overview").await;
    let sum = |window: &str, series: &str| -> i64 {
        v[window][series]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[1].as_i64().unwrap())
            .sum()
    };
    let since_min = v["per_minute"]["since"].as_i64().unwrap();
    let since_hour = v["per_hour"]["since"].as_i64().unwrap();
    let inbox = |since: i64| since_count(&f, "inbox", "received_at >= $1", since);
    let dead = |since: i64| since_count(&f, "dead_letters", "dead_lettered_at >= $1", since);
    let conflicts = |since: i64| {
        since_count(
            &f,
            "dead_letters",
            "dead_lettered_at >= $1 AND reason = 'conflict'",
            since,
        )
    };
    assert_eq!(sum("per_minute", "applied"), inbox(since_min).await);
    assert_eq!(sum("per_minute", "applied"), 4);
    assert_eq!(sum("per_minute", "dead_letters"), dead(since_min).await);
    assert_eq!(
        sum("per_minute", "dead_letters"),
        3,
        "the 3-hour-old row is not in the last hour"
    );
    assert_eq!(sum("per_minute", "conflicts"), conflicts(since_min).await);
    assert_eq!(sum("per_minute", "conflicts"), 2);
    assert_eq!(sum("per_hour", "dead_letters"), dead(since_hour).await);
    assert_eq!(sum("per_hour", "dead_letters"), 4);
    assert!(
        v["per_hour"]["duplicates"].is_null(),
        "no table records duplicates"
    );
    let page = get_text(&base, "/").await;
    assert!(page.contains("<svg class=\"chart\" id=\"chart-minutes\""));
    assert!(page.contains("<svg class=\"chart\" id=\"chart-hours\""));
    assert!(page.contains("<b>Duplicates</b> are not shown: no table"));
}

/// (detail, reason) of the seeded rows and the class each must get.
const CLASSES: [(&str, &str, &str); 6] = [
    (
        "handler failed permanently: insufficient funds: account 1",
        "permanent",
        "insufficient funds",
    ),
    (
        "handler failed permanently: insufficient funds: account 2",
        "permanent",
        "insufficient funds",
    ),
    (
        "gave up after 5 attempts: connection refused",
        "attempts_exhausted",
        "connection refused",
    ),
    (
        "same id, different payload: inbox holds payload sha256 ab, this delivery has cd; not applied",
        "conflict",
        "",
    ),
    ("no colon at all", "permanent", "no colon at all"),
    (
        "handler failed permanently: <script>x</script>: y",
        "permanent",
        "<script>x</script>",
    ),
];

async fn error_classes(test: &str, db: Dialect) {
    let Some(f) = common::fixture(test, db).await else {
        return;
    };
    for (i, (detail, reason, _)) in CLASSES.iter().enumerate() {
        f.letter(&Letter {
            detail: (*detail).into(),
            ..Letter::new("billing", &format!("m-{i}"), reason)
        })
        .await;
    }
    let base = common::serve(&f, |c| c).await;
    let v = get_json(&base, "/api/dead-letters/groups").await;
    let mut got: Vec<(String, String, i64)> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["reason"].as_str().unwrap().to_owned(),
                g["error_class"].as_str().unwrap().to_owned(),
                g["rows"].as_i64().unwrap(),
            )
        })
        .collect();
    got.sort();
    let mut want: Vec<(String, String, i64)> = Vec::new();
    for (_, reason, class) in CLASSES {
        match want.iter_mut().find(|(r, c, _)| r == reason && c == class) {
            Some(w) => w.2 += 1,
            None => want.push((reason.into(), class.into(), 1)),
        }
    }
    want.sort();
    assert_eq!(got, want);
    let total: i64 = got.iter().map(|g| g.2).sum();
    assert_eq!(total, f.dead_letter_rows().await);
    // The page shows them, escaped, with first seen, last seen and deliveries.
    let page = get_text(&base, "/dead-letters").await;
    assert!(page.contains(
        "<th>error class</th><th>rows</th><th>deliveries</th><th>first seen</th><th>last seen</th>"
    ));
    assert!(
        page.contains("data-count=\"group:billing:permanent:insufficient funds\">2<"),
        "{page}"
    );
    assert!(page.contains("&lt;script&gt;x&lt;/script&gt;") && !page.contains("<script>x"));
}

#[tokio::test]
async fn error_classes_sqlite() {
    error_classes("error_classes_sqlite", Dialect::Sqlite).await
}

#[tokio::test]
async fn error_classes_postgres() {
    error_classes("error_classes_postgres", Dialect::Postgres).await
}

#[tokio::test]
async fn error_classes_mariadb() {
    error_classes("error_classes_mariadb", Dialect::MySql).await
}

#[tokio::test]
async fn hidden_payloads_are_not_shown() {
    let Some(f) = common::fixture("hidden_payloads", Dialect::Sqlite).await else {
        return;
    };
    let mut l = Letter::new("billing", "m-1", "permanent");
    l.payload = br#"{"credits": 5, "secret": "s3cr3t-value", "card": "4111-1111"}"#.to_vec();
    let id = f.letter(&l).await;
    let open = common::serve(&f, |c| c).await;
    assert!(
        get_text(&open, &format!("/dead-letters/{id}"))
            .await
            .contains("s3cr3t-value")
    );
    let base = common::serve(&f, |c| c.hide_payloads(true)).await;
    let page = get_text(&base, &format!("/dead-letters/{id}")).await;
    assert!(
        !page.contains("s3cr3t") && !page.contains("credits"),
        "{page}"
    );
    assert!(page.contains("hidden by the console's configuration"));
    let v = get_json(&base, &format!("/api/dead-letters/{id}")).await;
    assert_eq!(v["payload_hidden"], true);
    assert_eq!(v["dead_letter"]["payload_text"], "");
    assert!(!v.to_string().contains("s3cr3t"), "{v}");
    // Redaction applies to the API too (the fixture's console redacts `card`).
    let v = get_json(&open, &format!("/api/dead-letters/{id}")).await;
    let text = v["dead_letter"]["payload_text"].as_str().unwrap();
    assert!(
        text.contains("s3cr3t-value") && text.contains("[redacted]") && !text.contains("4111"),
        "{text}"
    );
}
