//! `oncely prune`: batched on every database, by partition on PostgreSQL.

mod admin_support;
use admin_support::{Target, n};
use oncely::ops::{Ops, partition};
use oncely_sql::clock::now_ms;

const DAY: i64 = 86_400_000;

async fn insert_rows(t: &Target, prefix: &str, count: usize, received_at: i64) {
    let inbox = t.tables().inbox();
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let values: Vec<String> = chunk
            .iter()
            .map(|i| {
                format!(
                    "('pruned', '{prefix}-{i}', '{}', {})",
                    "ab".repeat(32),
                    received_at - *i as i64
                )
            })
            .collect();
        t.exec(&format!(
            "INSERT INTO {inbox} (consumer, message_id, payload_hash, received_at) VALUES {}",
            values.join(", ")
        ))
        .await;
    }
}

async fn batched_prune(t: &Target) {
    let mut args = vec!["migrate".to_owned()];
    args.extend(t.db_args());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(admin_support::oncely(&refs).0, 0);
    insert_rows(t, "old", 2_500, now_ms() - 8 * DAY).await;
    insert_rows(t, "new", 100, now_ms() - DAY).await;
    let r = t.json(&[
        "prune",
        "--older-than",
        "7d",
        "--batch-size",
        "300",
        "--pause-ms",
        "0",
    ]);
    assert_eq!(r["ran"], true, "{r}");
    assert_eq!(r["mode"], "batched");
    assert_eq!(n(&r["expired_at_start"]), 2_500);
    assert_eq!(n(&r["deleted"]), 2_500, "{r}");
    assert_eq!(n(&r["batches"]), 9, "2,500 rows in batches of 300: {r}");
    let inbox = t.tables().inbox();
    assert_eq!(
        t.scalar(&format!(
            "SELECT COUNT(*) FROM {inbox} WHERE message_id LIKE 'old-%'"
        ))
        .await,
        0
    );
    assert_eq!(
        t.scalar(&format!(
            "SELECT COUNT(*) FROM {inbox} WHERE message_id LIKE 'new-%'"
        ))
        .await,
        100
    );
    // A second run finds nothing; a shorter window takes the rest.
    assert_eq!(n(&t.json(&["prune"])["deleted"]), 0);
    assert_eq!(n(&t.json(&["prune", "--older-than", "1h"])["deleted"]), 100);
}

admin_support::on_each_database!(batched_prune: prune_on_sqlite, prune_on_postgres, prune_on_mariadb);

#[tokio::test]
async fn partitioned_prune_on_postgres_drops_whole_days() {
    let Some(t) = Target::postgres("partitioned_prune_on_postgres_drops_whole_days").await else {
        return;
    };
    let installed = t.json(&["partition", "install", "--days-ahead", "2"]);
    assert_eq!(
        installed.as_array().unwrap().len(),
        3,
        "today and two ahead: {installed}"
    );
    // Partitions for the backfilled days, then rows 10 and 9 days old, and fresh ones.
    let store = oncely_sql::PgStore::connect_with(
        &t.url,
        &oncely_sql::ConnectOptions {
            tables: t.tables(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let ops = Ops::from(&store);
    partition::ensure(&ops, now_ms() - 10 * DAY, 2)
        .await
        .unwrap();
    insert_rows(&t, "old", 600, now_ms() - 9 * DAY - DAY / 2).await;
    insert_rows(&t, "new", 50, now_ms() - 60_000).await;
    let before = t.json(&["partition", "list"]).as_array().unwrap().len();
    let r = t.json(&["prune", "--older-than", "7d"]);
    assert_eq!(r["mode"], "partitions", "{r}");
    let dropped = r["partitions_dropped"].as_array().unwrap().len();
    assert!(dropped >= 2, "{r}");
    assert_eq!(n(&r["deleted"]), 0, "no row-by-row deletes: {r}");
    // The days before today sealed, once a day: the next run leaves them as they are.
    let below = r["sealed"]["below_ms"].as_i64().expect("days sealed");
    assert_eq!(below % DAY, 0, "{r}");
    assert!(
        t.json(&["prune", "--older-than", "7d"])["sealed"].is_null(),
        "built once a day"
    );
    assert_eq!(
        t.json(&["partition", "list"]).as_array().unwrap().len(),
        before - dropped + r["partitions_created"].as_array().unwrap().len()
    );
    let inbox = t.tables().inbox();
    assert_eq!(
        t.scalar(&format!(
            "SELECT COUNT(*) FROM {inbox} WHERE message_id LIKE 'old-%'"
        ))
        .await,
        0
    );
    assert_eq!(
        t.scalar(&format!(
            "SELECT COUNT(*) FROM {inbox} WHERE message_id LIKE 'new-%'"
        ))
        .await,
        50
    );
    let s = t.json(&["stats"]);
    assert_eq!(s["partitioned"], true, "{s}");
}
