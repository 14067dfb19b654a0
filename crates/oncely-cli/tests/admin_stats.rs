//! `oncely stats` against the demo's data, checked against counts read directly with SQL.

mod admin_support;
use admin_support::{Target, n};

async fn stats_match_the_tables(t: &Target) {
    let report = t.seed_with_demo(400);
    let s = t.json(&["stats"]);
    let demo = s["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["consumer"] == "demo")
        .unwrap_or_else(|| panic!("no demo consumer in {s}"))
        .clone();
    let held = t
        .scalar(&format!("SELECT COUNT(*) FROM {}", t.tables().inbox()))
        .await;
    let letters = t
        .scalar(&format!(
            "SELECT COUNT(*) FROM {} WHERE consumer = 'demo'",
            t.tables().dead_letters()
        ))
        .await;
    let oldest = t
        .scalar(&format!(
            "SELECT MIN(received_at) FROM {}",
            t.tables().inbox()
        ))
        .await;
    assert!(held > 300, "demo left too few ids: {held}");
    assert_eq!(n(&demo["ids_held"]), held, "{s}");
    assert_eq!(n(&demo["oldest_ms"]), oldest, "{s}");
    assert!(n(&demo["newest_ms"]) >= oldest);
    assert_eq!(n(&demo["dead_letters"]), letters, "{s}");
    assert_eq!(
        n(&demo["dead_letters"]),
        n(&report["dead_lettered"]),
        "{s} vs {report}"
    );
    assert_eq!(
        n(&demo["conflicts"]),
        n(&report["dead_letters_by_reason"]["conflict"]),
        "{s} vs {report}"
    );
    assert!(n(&demo["conflicts"]) > 0, "{report}");
    assert_eq!(n(&s["ids_held"]), held);
    if !t.url.starts_with("sqlite") {
        assert!(n(&s["inbox_bytes"]) > 0, "{s}");
        assert!(
            s["projection"]["bytes_per_id"].as_f64().unwrap() > 0.0,
            "{s}"
        );
    }
    // Every id was claimed within the last hour: over 7 days the inbox holds 168 times as
    // many, over one day 24 times.
    let last_hour = t
        .scalar(&format!(
            "SELECT COUNT(*) FROM {} WHERE received_at >= {}",
            t.tables().inbox(),
            oncely_sql::clock::now_ms() - 3_600_000
        ))
        .await;
    assert_eq!(last_hour, held, "the demo ran just now");
    assert_eq!(n(&s["projection"]["ids"]), held * 168, "{s}");
    let day = t.json(&["stats", "--window", "1d"]);
    assert_eq!(n(&day["projection"]["ids"]), held * 24, "{day}");
    // Over a window of centuries the inbox outgrows any database's cache: the setting that
    // holds it is advised (SQLite has none to advise).
    let long = t.json(&["stats", "--window", "100000d"]);
    let advised = long["advice"].as_array().cloned().unwrap_or_default();
    let names = |setting: &str| {
        advised
            .iter()
            .any(|a| a.as_str().unwrap().contains(setting))
    };
    if t.url.starts_with("sqlite") {
        assert!(advised.is_empty(), "{long}");
    } else if t.url.starts_with("postgres") {
        assert!(names("shared_buffers"), "{long}");
    } else {
        assert!(names("innodb_buffer_pool_size"), "{long}");
    }
    // The human-readable table names the consumer and its counts.
    let mut args: Vec<String> = vec!["stats".into()];
    args.extend(t.db_args());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, text, err) = admin_support::oncely(&refs);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("CONSUMER") && text.contains("demo") && text.contains(&held.to_string()),
        "{text}"
    );
}

admin_support::on_each_database!(stats_match_the_tables: stats_on_sqlite, stats_on_postgres, stats_on_mariadb);
