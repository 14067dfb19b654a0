//! `oncely inspect MESSAGE_ID`: an applied id, a conflicting id, an unknown id.

mod admin_support;
use admin_support::{Target, n, oncely};
use oncely::effects::EffectTables;

async fn inspect_finds_each_kind_of_id(t: &Target) {
    t.seed_with_demo(400);
    // An applied id: one inbox row for consumer demo, with the hash the inbox holds.
    let letters = t.json(&["dlq", "list", "--reason", "conflict"]);
    let conflicted = letters[0]["message_id"]
        .as_str()
        .expect("a conflict dead letter")
        .to_owned();
    let found = t.json(&["inspect", &conflicted]);
    let claimed = found["claimed"].as_array().unwrap();
    assert_eq!(claimed.len(), 1, "{found}");
    assert_eq!(claimed[0]["consumer"], "demo");
    assert_eq!(claimed[0]["payload_hash"].as_str().unwrap().len(), 64);
    let reasons: Vec<&str> = found["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["reason"].as_str().unwrap())
        .collect();
    assert!(reasons.contains(&"conflict"), "{found}");
    // oncely-effects' tables are absent here: reported as such, not as an error.
    assert!(
        found["effect_journal"].is_null() && found["outbox"].is_null(),
        "{found}"
    );
    let ledger = t
        .scalar(&format!(
            "SELECT COUNT(*) FROM {} WHERE message_id = '{conflicted}'",
            t.table("demo_ledger")
        ))
        .await;
    assert_eq!(ledger, 1, "the conflicting id must have exactly one effect");

    // An unknown id: exit status 1, nothing found.
    let mut args: Vec<String> = vec!["inspect".into(), "no-such-id".into()];
    args.extend(t.db_args());
    args.push("--json".into());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, _) = oncely(&refs);
    assert_eq!(code, 1, "{out}");
    let none: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(none["claimed"].as_array().unwrap().len(), 0);
    assert_eq!(
        n(&serde_json::json!(
            none["dead_letters"].as_array().unwrap().len()
        )),
        0
    );

    // The effect tables, when present, are searched too.
    let journal = t.tables().effect_journal();
    let ddl = if t.url.starts_with("mysql") {
        format!(
            "CREATE TABLE {journal} (effect_key VARBINARY(255) PRIMARY KEY, kind VARBINARY(64) NOT NULL, state VARBINARY(16) NOT NULL, updated_at BIGINT NOT NULL)"
        )
    } else {
        format!(
            "CREATE TABLE {journal} (effect_key TEXT PRIMARY KEY, kind TEXT NOT NULL, state TEXT NOT NULL, updated_at BIGINT NOT NULL)"
        )
    };
    t.exec(&ddl).await;
    // Keys of consumer demo for this id and for a longer id that starts like it.
    let demo = oncely::ConsumerName::new("demo").unwrap();
    let key = |id: &str| {
        oncely::effects::effect_key(&demo, &oncely::MessageId::new(id).unwrap(), "email")
    };
    let (this, other) = (key(&conflicted), key(&format!("{conflicted}x")));
    t.exec(&format!("INSERT INTO {journal} VALUES ('{this}', 'email', 'done', 1), ('{other}', 'email', 'done', 1)")).await;
    let found = t.json(&["inspect", &conflicted]);
    let rows = found["effect_journal"]
        .as_array()
        .unwrap_or_else(|| panic!("{found}"));
    assert_eq!(rows.len(), 1, "only this id's effects: {found}");
    assert_eq!(rows[0]["state"], "done");
}

admin_support::on_each_database!(inspect_finds_each_kind_of_id: inspect_on_sqlite, inspect_on_postgres, inspect_on_mariadb);
