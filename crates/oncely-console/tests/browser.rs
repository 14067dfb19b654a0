//! The console in a real browser (headless Chromium over WebDriver), on SQLite, PostgreSQL and
//! MariaDB: the operator's path (overview, filter, one dead letter, replay a selection and see
//! each refusal, resolve one, the audit entry), every count shown against the database's own,
//! hostile data rendered inert, and the read-only role. The SQLite run takes the screenshots of
//! docs/console.md (saved with `ONCELY_CONSOLE_SCREENSHOTS=docs/console`).

mod common;

use common::{Dialect, Fixture, Letter, browser};
use std::collections::BTreeMap;

/// One browser at a time (two cores; each test starts its own chromedriver).
static BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const DAY: i64 = 86_400_000;

/// Rows of the operator scenario: (row id, expected replay outcome).
async fn seed(f: &Fixture) -> (Vec<(i64, &'static str)>, i64) {
    let ok1 = f
        .letter(&Letter::new("billing", "m-ok-1", "permanent"))
        .await;
    let ok2 = f
        .letter(&Letter::new("billing", "m-ok-2", "attempts_exhausted"))
        .await;
    let conflict = f
        .letter(&Letter::new("billing", "m-conflict", "conflict"))
        .await;
    let dup = Letter::new("billing", "m-dup", "permanent");
    f.claim("billing", "m-dup", &dup.payload).await;
    let dup = f.letter(&dup).await;
    let old = f
        .letter(&Letter {
            age_ms: 8 * DAY,
            ..Letter::new("billing", "m-old", "late")
        })
        .await;
    let resolve = f
        .letter(&Letter::new("billing", "m-resolve", "conflict"))
        .await;
    for i in 0..3 {
        f.letter(&Letter::new("shipping", &format!("s-{i}"), "panic"))
            .await;
    }
    f.claim("shipping", "s-applied", b"x").await;
    let expect = vec![
        (ok1, "applied"),
        (ok2, "applied"),
        (conflict, "needs_decision"),
        (dup, "already_applied"),
        (old, "refused_old"),
    ];
    (expect, resolve)
}

/// The database's own number for a `data-count` key of the pages.
async fn truth(f: &Fixture, key: &str, filter_consumer: Option<&str>) -> i64 {
    let (inbox, dl) = (f.table("inbox"), f.table("dead_letters"));
    let parts: Vec<&str> = key.splitn(4, ':').collect();
    match parts.as_slice() {
        ["ids_held"] => {
            f.scalar(&format!("SELECT COUNT(*) FROM {inbox}"), &[])
                .await
        }
        ["dead_letters"] => f.scalar(&format!("SELECT COUNT(*) FROM {dl}"), &[]).await,
        ["ids_held", c] => {
            f.scalar(
                &format!("SELECT COUNT(*) FROM {inbox} WHERE consumer = $1"),
                &[(*c).into()],
            )
            .await
        }
        ["dead_letters", c] => {
            f.scalar(
                &format!("SELECT COUNT(*) FROM {dl} WHERE consumer = $1"),
                &[(*c).into()],
            )
            .await
        }
        ["group", c, r, class] => {
            // The class as the console's one SQL expression computes it (tested on its own
            // in tests/overview.rs against fixed details).
            let expr = oncely_ops::browse::error_class_sql(f.store.dialect());
            f.scalar(
                &format!(
                    "SELECT COUNT(*) FROM {dl} WHERE consumer = $1 AND reason = $2 AND {expr} = $3"
                ),
                &[(*c).into(), (*r).into(), (*class).into()],
            )
            .await
        }
        ["claimed_hour", h] | ["dead_hour", h] | ["conflict_hour", h] => {
            let (table, column, only) = match parts[0] {
                "claimed_hour" => (&inbox, "received_at", ""),
                "dead_hour" => (&dl, "dead_lettered_at", ""),
                _ => (&dl, "dead_lettered_at", " AND reason = 'conflict'"),
            };
            let h: i64 = h.parse().unwrap();
            let sql = format!(
                "SELECT COUNT(*) FROM {table} WHERE {column} >= $1 AND {column} < $2{only}"
            );
            f.scalar(&sql, &[h.into(), (h + 3_600_000).into()]).await
        }
        ["total"] => match filter_consumer {
            Some(c) => {
                f.scalar(
                    &format!("SELECT COUNT(*) FROM {dl} WHERE consumer = $1"),
                    &[c.into()],
                )
                .await
            }
            None => f.scalar(&format!("SELECT COUNT(*) FROM {dl}"), &[]).await,
        },
        _ => panic!("a count the test does not know: {key}"),
    }
}

async fn assert_counts(b: &browser::Browser, f: &Fixture, consumer: Option<&str>, page: &str) {
    let counts = b.counts().await;
    assert!(!counts.is_empty(), "{page}: no counts shown");
    for (key, shown) in counts {
        assert_eq!(shown, truth(f, &key, consumer).await, "{page}: count {key}");
    }
}

async fn operator_flow(test: &str, db: Dialect) {
    let _one = BROWSER.lock().await;
    let Some(f) = common::fixture(test, db).await else {
        return;
    };
    let Some(b) = browser::start(test).await else {
        return;
    };
    let (expect, resolve) = seed(&f).await;
    let base = common::serve(&f, |c| c).await;
    let shots = db == Dialect::Sqlite;

    // Overview: consumers, dead letters by reason; every number equals the database's.
    b.goto(&format!("{base}/")).await;
    let body = b.body().await;
    assert!(
        body.contains("billing") && body.contains("shipping"),
        "{body}"
    );
    assert_counts(&b, &f, None, "overview").await;
    b.assert_clean("overview").await;
    if shots {
        b.screenshot("overview").await;
        // The charts, further down the same page (the anchor scrolls to them).
        b.goto(&format!("{base}/#chart-note")).await;
        b.screenshot("charts").await;
    }

    // Filter by consumer.
    b.goto(&format!("{base}/dead-letters")).await;
    assert_counts(&b, &f, None, "dead letters").await;
    b.fill("#f-consumer", "billing").await;
    b.click_through("#apply").await;
    assert_eq!(b.text("[data-count=total]").await, "6");
    assert_counts(&b, &f, Some("billing"), "dead letters of billing").await;
    assert!(
        !b.body().await.contains("s-1"),
        "the filter let shipping's rows through"
    );
    if shots {
        b.screenshot("dead-letters").await;
    }

    // Open one dead letter: envelope, payload with `card` redacted.
    b.click_through(&format!(
        "a.row-link[href$='/dead-letters/{}']",
        expect[0].0
    ))
    .await;
    assert_eq!(b.text("#message-id").await, "m-ok-1");
    let payload = b.text("#payload").await;
    assert!(
        payload.contains("[redacted]") && !payload.contains("4111"),
        "{payload}"
    );
    b.assert_clean("one dead letter").await;
    if shots {
        b.screenshot("dead-letter").await;
    }

    // Replay a selection of five: each refusal shows.
    b.goto(&format!("{base}/dead-letters?consumer=billing"))
        .await;
    for (id, _) in &expect {
        b.click(&format!("input.pick[value='{id}']")).await;
    }
    b.click_through("#sel-replay").await;
    assert_eq!(
        b.text("[data-count=preview]").await,
        "5",
        "the preview count"
    );
    assert_eq!(
        f.ledger_rows().await,
        0,
        "nothing runs before the confirmation"
    );
    if shots {
        b.screenshot("confirm").await;
    }
    b.click_through("#confirm").await;
    b.wait_job().await;
    let want: BTreeMap<i64, String> = expect
        .iter()
        .map(|(id, o)| (*id, (*o).to_owned()))
        .collect();
    assert_eq!(b.outcomes().await, want);
    assert_eq!(f.ledger_rows().await, 2, "two rows applied, once each");
    if shots {
        b.screenshot("job").await;
    }

    // Resolve one conflict from its page.
    b.goto(&format!("{base}/dead-letters/{resolve}")).await;
    b.click_through("#row-resolve").await;
    assert_eq!(b.text("[data-count=preview]").await, "1");
    b.click_through("#confirm").await;
    b.wait_job().await;
    assert_eq!(
        b.outcomes().await.get(&resolve).map(String::as_str),
        Some("kept_stored")
    );

    // The audit page has both console jobs and the resolution.
    b.goto(&format!("{base}/audit")).await;
    let kinds: Vec<String> = {
        let mut k = Vec::new();
        for e in b
            .client
            .find_all(fantoccini::Locator::Css("span.kind"))
            .await
            .unwrap()
        {
            k.push(e.text().await.unwrap());
        }
        k
    };
    for kind in [
        "console_replay",
        "console_resolve",
        "dlq_keep_stored",
        "dlq_replayed",
        "dlq_already_applied",
    ] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "audit lacks {kind}: {kinds:?}"
        );
    }
    assert!(b.body().await.contains("operator (no token configured)"));
    b.assert_clean("audit").await;
    if shots {
        b.screenshot("audit").await;
    }
    // After the actions, the numbers still match.
    b.goto(&format!("{base}/")).await;
    assert_counts(&b, &f, None, "overview after the actions").await;
}

async fn hostile(test: &str, db: Dialect) {
    let _one = BROWSER.lock().await;
    let Some(f) = common::fixture(test, db).await else {
        return;
    };
    let Some(b) = browser::start(test).await else {
        return;
    };
    let script = "<script>alert('consumer')</script>";
    let img = "\"><img src=x onerror=alert('id')>";
    let mut rows = Vec::new();
    let mut l = Letter::new(script, img, "permanent");
    l.detail = "<script>alert('detail')</script>".into();
    l.headers = r#"{"x-note":"</pre><script>alert('header')</script>"}"#.into();
    l.payload = b"\xff\xfe not utf-8 <script>alert('payload')</script> \xc3\x28".to_vec();
    rows.push(f.letter(&l).await);
    let mut big = Letter::new("hostile", "big-payload", "permanent");
    big.payload = vec![b'<'; 16_000_000];
    rows.push(f.letter(&big).await);
    // A 70 KB id, on every database, written the way the runtime writes it (oncely-sql's
    // dead-letter row): the raw id whole in the binary column, the display id cut to 255
    // bytes with the `…[truncated N bytes]` marker (by design: see oncely-sql's letter.rs).
    let long_id = format!("{}<img src=x onerror=alert('long')>", "i".repeat(70_000));
    let long_letter = oncely_core::DeadLetter {
        consumer: oncely_core::ConsumerName::new("hostile").unwrap(),
        message: oncely_core::RawEnvelope::new(&long_id, b"{}".to_vec()),
        reason: oncely_core::DeadLetterReason::Permanent("<b>long</b>: id".into()),
        attempts: 1,
    };
    oncely_core::Store::dead_letter(&f.store, &long_letter)
        .await
        .unwrap();
    let long = f
        .scalar(
            &format!("SELECT MAX(id) FROM {}", f.table("dead_letters")),
            &[],
        )
        .await;
    rows.push(long);
    let mut bad = Letter::new("hostile", "x", "bad_id");
    bad.message_id = None;
    bad.raw_id = Some(b"\xff\xfe\x00bad".to_vec());
    rows.push(f.letter(&bad).await);
    let base = common::serve(&f, |c| c).await;

    for page in [
        "/".to_owned(),
        "/dead-letters".to_owned(),
        "/audit".to_owned(),
    ]
    .into_iter()
    .chain(rows.iter().map(|id| format!("/dead-letters/{id}")))
    {
        b.goto(&format!("{base}{page}")).await;
        b.assert_clean(&page).await;
        // Still usable: the navigation works.
        assert!(
            b.text("header nav").await.contains("Dead letters"),
            "{page}"
        );
    }
    // The hostile text is shown as text.
    b.goto(&format!("{base}/dead-letters/{}", rows[0])).await;
    let body = b.body().await;
    assert!(
        body.contains(script) && body.contains(img),
        "hostile values not shown as text"
    );
    let imgs = b
        .client
        .find_all(fantoccini::Locator::Css("img"))
        .await
        .unwrap();
    assert!(imgs.is_empty(), "an injected element was parsed");
    b.goto(&format!("{base}/dead-letters?text=big")).await;
    assert_eq!(b.text("[data-count=total]").await, "1");
    b.click_through("a.row-link").await;
    assert!(b.text("#payload").await.contains("16000000 bytes in all"));
    b.assert_clean("16 MB payload").await;
    // The 70 KB id: stored whole (raw id), shown cut with its marker, escaped.
    let raw = f
        .scalar(
            &format!(
                "SELECT {} FROM {} WHERE id = $1",
                f.store.dialect().cast_i64("LENGTH(raw_id)"),
                f.table("dead_letters")
            ),
            &[long.into()],
        )
        .await;
    assert_eq!(raw, long_id.len() as i64, "the raw id is kept whole");
    b.goto(&format!("{base}/dead-letters/{long}")).await;
    let shown = b.text("#message-id").await;
    assert!(
        shown.starts_with("iiii") && shown.contains("[truncated "),
        "{}",
        &shown[..shown.len().min(300)]
    );
    assert!(
        shown.len() < 400,
        "the display id is cut: {} bytes",
        shown.len()
    );
    b.assert_clean("70 KB id").await;
    if db == Dialect::Sqlite {
        b.goto(&format!("{base}/dead-letters/{}", rows[0])).await;
        b.screenshot("hostile").await;
    }
}

async fn read_only(test: &str) {
    let _one = BROWSER.lock().await;
    let Some(f) = common::fixture(test, Dialect::Sqlite).await else {
        return;
    };
    let Some(b) = browser::start(test).await else {
        return;
    };
    let id = f.letter(&Letter::new("billing", "m-1", "permanent")).await;
    let base = common::serve(&f, |c| c.viewer_token("look").operator_token("act")).await;
    b.goto(&format!("{base}/dead-letters")).await;
    assert!(b.body().await.contains("401"), "no token, no page");
    b.console().await; // the 401 is logged, as it should be
    b.goto(&format!("{base}/dead-letters?token=look")).await;
    assert!(
        !b.client
            .current_url()
            .await
            .unwrap()
            .as_str()
            .contains("token"),
        "the token stays out of the address bar"
    );
    b.text("#read-only").await;
    let posts = b
        .client
        .find_all(fantoccini::Locator::Css("form[method=post]"))
        .await
        .unwrap();
    assert!(posts.is_empty(), "the read-only role is offered an action");
    b.goto(&format!("{base}/dead-letters/{id}")).await;
    b.text("#read-only").await;
    assert!(
        b.client
            .find_all(fantoccini::Locator::Css("#row-replay"))
            .await
            .unwrap()
            .is_empty()
    );
    b.assert_clean("read-only").await;
}

macro_rules! on_each_db {
    ($scenario:ident: $sqlite:ident, $pg:ident, $my:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            $scenario(stringify!($sqlite), Dialect::Sqlite).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $pg() {
            $scenario(stringify!($pg), Dialect::Postgres).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $my() {
            $scenario(stringify!($my), Dialect::MySql).await
        }
    };
}

on_each_db!(operator_flow: operator_flow_sqlite, operator_flow_postgres, operator_flow_mariadb);
on_each_db!(hostile: hostile_data_sqlite, hostile_data_postgres, hostile_data_mariadb);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_role_cannot_act() {
    read_only("read_only_role_cannot_act").await
}
