//! The partitioned inbox in the one migration ledger: one installed by the code before the
//! ledger (its DDL, no ledger row) is adopted by `install` without running the DDL again, and
//! upgraded by the later migrations; one from before the claim-key index or the claim function
//! is refused with a clear error until upgraded, and keeps every id it held; one from before the
//! key led by `received_at` keeps every id through that rebuild.

mod common;
use oncely_core::{Claim, ConsumerName, ErrorKind, MessageId, PayloadHash, Store};
use oncely_ops::partition;
use oncely_sql::clock::now_ms;
use oncely_sql::sqlx::{self, AssertSqlSafe};

#[tokio::test]
async fn an_older_partitioned_inbox_is_adopted() {
    let Some((store, ops, _db)) = common::postgres("an_older_partitioned_inbox_is_adopted").await
    else {
        return;
    };
    // The partitioned inbox as an older release created it, in the test's (empty) schema.
    sqlx::raw_sql(AssertSqlSafe(
        ops.tables().render(partition::PARTITIONED_INBOX_SQL),
    ))
    .execute(store.pool())
    .await
    .unwrap();
    // The DDL has no IF NOT EXISTS: running it again would fail.
    let created = partition::install(&ops, 1).await.unwrap();
    assert_eq!(created.len(), 2);
    assert_eq!(store.migrate().await.unwrap(), 2, "the inbox set on top");
    let ledger: Vec<(String, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT set_name, version FROM {} ORDER BY set_name, version",
        ops.tables().migration_ledger()
    )))
    .fetch_all(store.pool())
    .await
    .unwrap();
    let ledger: Vec<(&str, i64)> = ledger.iter().map(|(s, v)| (s.as_str(), *v)).collect();
    // Adopted through version 1, then upgraded by the later migrations (the batch claim, the
    // claim-key index, the sealed days' keys, the claim function, the key led by received_at).
    assert_eq!(
        ledger,
        [
            ("inbox", 1),
            ("inbox", 2),
            ("partitioned", 1),
            ("partitioned", 2),
            ("partitioned", 3),
            ("partitioned", 4),
            ("partitioned", 5),
            ("partitioned", 6)
        ]
    );
    assert!(partition::is_partitioned(&ops).await.unwrap());
}

/// An installation from before the claim-key index (the layout's migration 3): claims are
/// refused with an error that says how to upgrade, not run as scans of every partition; after
/// `install` upgrades it, the ids it held before (today's and older days') are `Duplicate`.
#[tokio::test]
async fn a_partitioned_inbox_without_the_claim_key_is_upgraded_and_forgets_no_id() {
    upgraded_forgets_no_id("partitioned_inbox_claim_key_upgrade", 3, "claim-key index").await;
}

/// The same for an installation from before the claim function (migration 5), whose claims
/// were three statements sent by oncely-sql.
#[tokio::test]
async fn a_partitioned_inbox_without_the_claim_function_is_upgraded_and_forgets_no_id() {
    upgraded_forgets_no_id("partitioned_inbox_claim_fn_upgrade", 5, "claim function").await;
}

/// Installs the layout, takes back its migration `version` (drops what it made and its ledger
/// row), claims two ids as that release did, and checks the refusal (naming `missing`), then
/// the upgrade by `install`.
async fn upgraded_forgets_no_id(name: &str, version: i64, missing: &str) {
    let Some((store, ops, _db)) = common::postgres(name).await else {
        return;
    };
    installed_with_an_older_day(&store, &ops).await;
    // Back to what the release before migration `version` left.
    let (inbox, ledger) = (ops.tables().inbox(), ops.tables().migration_ledger());
    let undo = match version {
        3 => format!("DROP INDEX {}", ops.tables().table("inbox_claim_key")),
        _ => format!(
            "DROP FUNCTION {}(text, text[], text[], bigint)",
            ops.tables().inbox_claim()
        ),
    };
    sqlx::raw_sql(AssertSqlSafe(format!(
        "{undo}; DELETE FROM {ledger} WHERE set_name = 'partitioned' AND version = {version}"
    )))
    .execute(store.pool())
    .await
    .unwrap();
    // Claims made before the upgrade: today and three days ago (the guard trigger checks each).
    let h = PayloadHash::of(b"x");
    hold(&store, &inbox, &[("before-1", 0), ("before-2", 3)], h).await;
    let c = ConsumerName::new("billing").unwrap();
    let items: Vec<(MessageId, PayloadHash)> = ["before-1", "before-2", "after-1"]
        .iter()
        .map(|id| (MessageId::new(*id).unwrap(), h))
        .collect();
    let mut tx = store.begin().await.unwrap();
    let refused = store.claim_batch(&mut tx, &c, &items).await.unwrap_err();
    store.rollback(tx).await.unwrap();
    assert_eq!(refused.kind(), ErrorKind::Config, "{refused}");
    assert!(
        refused.to_string().contains("oncely partition install")
            && refused.to_string().contains(missing),
        "{refused}"
    );

    partition::install(&ops, 1).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    let claims = store.claim_batch(&mut tx, &c, &items).await.unwrap();
    store.commit(tx).await.unwrap();
    assert_eq!(claims, [Claim::Duplicate, Claim::Duplicate, Claim::Fresh]);
    assert_eq!(
        rows(&store, &inbox).await,
        3,
        "one row per id, none claimed twice"
    );
}

/// An installation from before migration 6, whose primary key led with `(consumer, message_id)`
/// beside a `received_at` index: after `install` rebuilds the key, the ids it held (today's
/// and older days') are `Duplicate` to a batch claim and to a single claim (the guard trigger
/// and the payload-hash read, which now find an id by its claim key), and a different payload
/// under a held id is a conflict.
#[tokio::test]
async fn a_partitioned_inbox_keyed_by_id_is_rebuilt_and_forgets_no_id() {
    let Some((store, ops, _db)) = common::postgres("partitioned_inbox_time_key_upgrade").await
    else {
        return;
    };
    installed_with_an_older_day(&store, &ops).await;
    let (inbox, ledger) = (ops.tables().inbox(), ops.tables().migration_ledger());
    let fresh_layout = indexes(&store, &inbox).await;
    let prefix = ops.tables().prefix();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "ALTER TABLE {inbox} DROP CONSTRAINT {prefix}inbox_received_at; \
         ALTER TABLE {inbox} ADD CONSTRAINT {prefix}inbox_pkey PRIMARY KEY (consumer, message_id, received_at); \
         CREATE INDEX {prefix}inbox_received_at ON {inbox} (received_at); \
         DELETE FROM {ledger} WHERE set_name = 'partitioned' AND version = 6"
    )))
    .execute(store.pool())
    .await
    .unwrap();
    let h = PayloadHash::of(b"x");
    hold(
        &store,
        &inbox,
        &[("before-1", 0), ("before-2", 3), ("before-3", 3)],
        h,
    )
    .await;

    partition::install(&ops, 1).await.unwrap();
    store.migrate().await.unwrap();
    // The key and the claim-key index, as on a new installation; no received_at index beside.
    let upgraded = indexes(&store, &inbox).await;
    assert_eq!(upgraded, fresh_layout);
    assert_eq!(upgraded.len(), 2, "{upgraded:?}");
    assert!(
        upgraded[1].starts_with("CREATE UNIQUE INDEX")
            && upgraded[1].ends_with("(received_at, consumer, message_id)"),
        "{upgraded:?}"
    );
    let c = ConsumerName::new("billing").unwrap();
    let id = |s: &str| MessageId::new(s).unwrap();
    let items: Vec<(MessageId, PayloadHash)> = ["before-1", "before-2", "after-1"]
        .iter()
        .map(|s| (id(s), h))
        .collect();
    let mut tx = store.begin().await.unwrap();
    let claims = store.claim_batch(&mut tx, &c, &items).await.unwrap();
    let single = store.claim(&mut tx, &c, &id("before-3"), h).await.unwrap();
    let changed = store
        .claim(&mut tx, &c, &id("before-2"), PayloadHash::of(b"y"))
        .await
        .unwrap();
    let fresh = store.claim(&mut tx, &c, &id("after-2"), h).await.unwrap();
    store.commit(tx).await.unwrap();
    assert_eq!(claims, [Claim::Duplicate, Claim::Duplicate, Claim::Fresh]);
    assert_eq!(single, Claim::Duplicate, "a single claim finds a held id");
    assert!(
        matches!(changed, Claim::Conflict { .. }),
        "a different payload under a held id: {changed:?}"
    );
    assert_eq!(fresh, Claim::Fresh);
    assert_eq!(
        rows(&store, &inbox).await,
        5,
        "one row per id, none claimed twice"
    );
}

/// The definitions of the inbox's own indexes (not its partitions'), in name order.
async fn indexes(store: &oncely_sql::PgStore, inbox: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = to_regclass($1) \
         ORDER BY indexrelid::regclass::text",
    )
    .bind(inbox)
    .fetch_all(store.pool())
    .await
    .unwrap()
}

/// The layout installed, the inbox set on top, and the partition of three days ago.
async fn installed_with_an_older_day(store: &oncely_sql::PgStore, ops: &oncely_ops::Ops) {
    partition::install(ops, 1).await.unwrap();
    store.migrate().await.unwrap();
    partition::ensure(ops, now_ms() - 3 * 86_400_000, 1)
        .await
        .unwrap();
}

/// Inserts each `(id, days ago)` for the consumer `billing` with `hash`, as an older release's
/// claim did (the guard trigger checks each).
async fn hold(store: &oncely_sql::PgStore, inbox: &str, ids: &[(&str, i64)], hash: PayloadHash) {
    for (id, days_ago) in ids {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {inbox} VALUES ('billing', $1, $2, $3)"
        )))
        .bind(id)
        .bind(hash.to_hex())
        .bind(now_ms() - days_ago * 86_400_000)
        .execute(store.pool())
        .await
        .unwrap();
    }
}

/// The inbox's rows of the consumer `billing`.
async fn rows(store: &oncely_sql::PgStore, inbox: &str) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM {inbox} WHERE consumer = 'billing'"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap()
}
