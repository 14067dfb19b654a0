//! Paging at 1,000,000 dead letters (SQLite, PostgreSQL): a page deep in the table costs what
//! the first costs, because it is a keyset range on the primary key (the plan is checked), and
//! the figures are printed (docs/console.md quotes them).

mod common;

use common::Dialect;
use oncely_ops::browse::{self, Query};
use std::time::Instant;

const ROWS: i64 = 1_000_000;

async fn million(test: &str, db: Dialect) {
    let Some(f) = common::fixture(test, db).await else {
        return;
    };
    let dl = f.table("dead_letters");
    let cols = "consumer, message_id, raw_id, payload, payload_hash, reason, detail, attempts, headers, dead_lettered_at, id_hash, last_seen, deliveries";
    let fill = match db {
        Dialect::Sqlite => format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS}) \
             INSERT INTO {dl} ({cols}) SELECT CASE i % 4 WHEN 0 THEN 'billing' ELSE 'shipping' END, 'm-' || i, CAST('m-' || i AS BLOB), \
             CAST('{{}}' AS BLOB), 'h', CASE i % 10 WHEN 0 THEN 'conflict' ELSE 'permanent' END, 'x', 1, '{{}}', i, 'k' || i, i, 1 FROM n"
        ),
        Dialect::Postgres => format!(
            "INSERT INTO {dl} ({cols}) SELECT CASE i % 4 WHEN 0 THEN 'billing' ELSE 'shipping' END, 'm-' || i, convert_to('m-' || i, 'UTF8'), \
             '\\x7b7d'::bytea, 'h', CASE i % 10 WHEN 0 THEN 'conflict' ELSE 'permanent' END, 'x', 1, '{{}}', i, 'k' || i, i, 1 \
             FROM generate_series(1, {ROWS}) AS i"
        ),
        Dialect::MySql => unreachable!(),
    };
    let t = Instant::now();
    f.exec(&fill, &[]).await;
    if db == Dialect::Postgres {
        f.exec(&format!("ANALYZE {dl}"), &[]).await;
    }
    eprintln!("{test}: {ROWS} rows inserted in {:?}", t.elapsed());
    let ops = oncely_ops::Ops::from(&f.store);
    let all = Query::default();
    let t = Instant::now();
    let first = browse::page(&ops, &all, None, 50).await.unwrap();
    let first_t = t.elapsed();
    let t = Instant::now();
    let deep = browse::page(&ops, &all, Some(ROWS / 2), 50).await.unwrap();
    let deep_t = t.elapsed();
    assert_eq!(deep.first().map(|r| r.id), Some(ROWS / 2 - 1));
    assert_eq!(first.len(), 50);
    let billing = Query {
        consumer: Some("billing".into()),
        ..Query::default()
    };
    let t = Instant::now();
    let filtered = browse::page(&ops, &billing, Some(ROWS / 2), 50)
        .await
        .unwrap();
    let filtered_t = t.elapsed();
    assert!(filtered.iter().all(|r| r.consumer == "billing") && filtered.len() == 50);
    let t = Instant::now();
    let total = browse::count(&ops, &all).await.unwrap();
    let count_t = t.elapsed();
    assert_eq!(total, ROWS);
    let t = Instant::now();
    let groups = browse::groups(&ops, &all).await.unwrap();
    let groups_t = t.elapsed();
    assert_eq!(groups.iter().map(|g| g.rows).sum::<i64>(), ROWS);
    eprintln!(
        "{test}: page 1 {first_t:?}, page at row 500,000 {deep_t:?}, filtered (consumer) page there {filtered_t:?}, \
         total {count_t:?}, groups {groups_t:?}"
    );
    // The plan: a range on the primary key, not a sort of the table.
    let plan_sql = match db {
        Dialect::Sqlite => format!(
            "EXPLAIN QUERY PLAN SELECT id FROM {dl} WHERE 1 = 1 AND id < 500000 ORDER BY id DESC LIMIT 50"
        ),
        _ => format!(
            "EXPLAIN SELECT id FROM {dl} WHERE 1 = 1 AND id < 500000 ORDER BY id DESC LIMIT 50"
        ),
    };
    use oncely_sql::Column;
    let (cols, at): (&[Column], usize) = match db {
        Dialect::Sqlite => (&[Column::I64, Column::I64, Column::I64, Column::Text], 3),
        _ => (&[Column::Text], 0),
    };
    let mut tx = oncely_core::Store::begin(&f.store).await.unwrap();
    let rows = tx.fetch(&plan_sql, &[], cols).await.unwrap();
    oncely_core::Store::commit(&f.store, tx).await.unwrap();
    let text: String = rows
        .iter()
        .map(|r| r[at].text())
        .collect::<Vec<_>>()
        .join(" | ");
    eprintln!("{test}: plan: {text}");
    let on_key = text.contains("INTEGER PRIMARY KEY") || text.contains("_pkey");
    assert!(
        on_key && !text.contains("TEMP B-TREE") && !text.contains("Sort"),
        "{text}"
    );
    assert!(deep_t.as_millis() < 2000, "a deep page took {deep_t:?}");

    // The pages do not wait for the groups (crate::groups): the first load shows the rows and
    // the total at once and the groups when they are counted; a reload shows them.
    let base = common::serve(&f, |c| c).await;
    let http = reqwest::Client::new();
    let load = |path: &'static str| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let t = Instant::now();
            let page = http
                .get(format!("{base}{path}"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            (t.elapsed(), page)
        }
    };
    let (cold, page) = load("/dead-letters").await;
    assert!(
        page.contains("data-count=\"total\">1000000<"),
        "the total is shown at once"
    );
    let counting = page.contains("groups-counting");
    let mut warm = None;
    for _ in 0..600 {
        let (t, page) = load("/dead-letters").await;
        if page.contains("<table id=\"groups\">") {
            warm = Some(t);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let warm = warm.expect("the groups appear once counted");
    let (overview_t, _) = load("/").await;
    eprintln!(
        "{test}: /dead-letters first load {cold:?} (groups still counting: {counting}), \
         with the groups counted {warm:?}; / {overview_t:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyset_paging_at_a_million_rows_sqlite() {
    million("keyset_paging_at_a_million_rows_sqlite", Dialect::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyset_paging_at_a_million_rows_postgres() {
    million(
        "keyset_paging_at_a_million_rows_postgres",
        Dialect::Postgres,
    )
    .await
}
