//! `oncely migrate [--print] [--with effects,outbox,queue,partitioned]`: one registry, one ledger.

mod admin_support;
use admin_support::{Target, oncely};

fn migrate(t: &Target, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["migrate".to_owned()];
    args.extend(t.db_args());
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    oncely(&refs)
}

#[test]
fn print_with_sets_per_dialect() {
    let (code, out, err) = oncely(&["migrate", "--database", "sqlite:x.db", "--print"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("-- version 1 (inbox), set inbox"), "{out}");
    assert!(!out.contains("oncely_outbox"));
    let (code, out, err) = oncely(&[
        "migrate",
        "--database",
        "postgres://x@h/db",
        "--print",
        "--with",
        "queue,outbox,partitioned",
    ]);
    assert_eq!(code, 0, "{err}");
    let at = |s: &str| out.find(s).unwrap_or_else(|| panic!("{s} missing: {out}"));
    assert!(at("set partitioned") < at("set inbox"), "partitioned first");
    assert!(at("set inbox") < at("set effects") && at("set effects") < at("set queue"));
    assert!(out.contains("CREATE TABLE IF NOT EXISTS oncely_outbox"));
    let (code, _, err) = oncely(&[
        "migrate",
        "--database",
        "sqlite:x.db",
        "--print",
        "--with",
        "queue",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("\"queue\" migrations do not exist on sqlite"),
        "{err}"
    );
    let (code, _, err) = oncely(&["migrate", "--database", "sqlite:x.db", "--with", "nope"]);
    assert_ne!(code, 0);
    assert!(err.contains("possible values"), "{err}");
}

#[test]
fn apply_with_effects_on_sqlite_then_nothing() {
    let t = Target::sqlite();
    let (code, out, err) = migrate(&t, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("2 migration(s) applied"), "{out}");
    let (code, out, err) = migrate(&t, &["--with", "effects"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("2 migration(s) applied"),
        "effects only: {out}"
    );
    let (code, out, _) = migrate(&t, &["--with", "outbox,effects"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("0 migration(s) applied"), "{out}");
}

#[tokio::test]
async fn apply_everything_on_postgres() {
    let Some(t) = Target::postgres("cli_migrate").await else {
        return;
    };
    let (code, out, err) = migrate(&t, &["--with", "effects,queue,partitioned"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("12 migration(s) applied"), "{out}");
    let ledger = t.tables().migration_ledger();
    assert_eq!(
        t.scalar(&format!("SELECT COUNT(*) FROM {ledger}")).await,
        12
    );
    let partitioned = t
        .scalar(&format!(
            "SELECT COUNT(*) FROM pg_partitioned_table WHERE partrelid = to_regclass('{}')",
            t.tables().inbox()
        ))
        .await;
    assert_eq!(
        partitioned, 1,
        "the partitioned layout, not the regular inbox"
    );
    let (code, out, _) = migrate(&t, &["--with", "effects,queue,partitioned"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("0 migration(s) applied"), "{out}");
}

/// Through PgBouncer in transaction pooling mode with the plain URL: every set, including the
/// partitioned inbox and HTTP keys, applied once under the migration lock, then nothing.
#[tokio::test]
async fn apply_everything_through_pgbouncer() {
    let Some(t) = Target::pgbouncer("cli_migrate_through_pgbouncer").await else {
        return;
    };
    let (code, out, err) = migrate(&t, &["--with", "effects,queue,partitioned,http"]);
    assert_eq!(code, 0, "{err}");
    let ledger = t.tables().migration_ledger();
    let applied = t.scalar(&format!("SELECT COUNT(*) FROM {ledger}")).await;
    assert!(applied >= 9, "{applied} migrations recorded: {out}");
    assert!(
        out.starts_with(&format!("{applied} migration(s) applied")),
        "{out}"
    );
    let (code, out, err) = migrate(&t, &["--with", "effects,queue,partitioned,http"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("0 migration(s) applied"), "{out}");
}

/// `--with partitioned` over an inbox that already exists as a regular table: a clear error
/// that says what to do, and nothing applied.
#[tokio::test]
async fn partitioned_over_a_regular_inbox_is_refused_clearly() {
    let Some(t) = Target::postgres("cli_migrate_partitioned_over_regular").await else {
        return;
    };
    let (code, _, err) = migrate(&t, &[]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = migrate(&t, &["--with", "partitioned"]);
    assert_ne!(code, 0, "must refuse: {out}");
    assert!(
        err.contains("already exists as a regular table") && err.contains("new schema or prefix"),
        "unclear error: {err}"
    );
    let ledger = t.tables().migration_ledger();
    assert_eq!(
        t.scalar(&format!("SELECT COUNT(*) FROM {ledger}")).await,
        2,
        "only the inbox set's migrations"
    );
}

/// `--with http` over a key table of `http` version 1 that holds a key: version 2 adds the
/// scope (the old key gets the global scope `''`) and the primary key (scope, idem_key).
#[tokio::test]
async fn with_http_migrates_old_keys_to_the_global_scope() {
    use oncely_sql::{AnyStore, Dialect, MigrationSet};
    let t = Target::sqlite();
    let store = AnyStore::connect(&t.url).await.unwrap();
    let v1 =
        MigrationSet::new("http").sqlite(&oncely_http::MIGRATIONS.migrations(Dialect::Sqlite)[..1]);
    let applied = store.migrate_with(&[&v1]).await.unwrap();
    assert_eq!(applied, 1);
    let keys = t.tables().table("http_keys");
    let mut tx = oncely_core::Store::begin(&store).await.unwrap();
    tx.execute(
        &format!(
            "INSERT INTO {keys} (idem_key, fingerprint, owner, status, headers, body, created_at, expires_at) \
             VALUES ('old-key', 'f', 'o', 201, '[]', x'', 0, 1)"
        ),
        &[],
    )
    .await
    .unwrap();
    oncely_core::Store::commit(&store, tx).await.unwrap();
    let (code, out, err) = migrate(&t, &["--with", "http"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("3 migration(s) applied"),
        "inbox 1, 2 and http 2: {out}"
    );
    let global = format!("SELECT COUNT(*) FROM {keys} WHERE scope = '' AND idem_key = 'old-key'");
    assert_eq!(t.scalar(&global).await, 1, "the old key is global");
    let pk = format!("SELECT COUNT(*) FROM pragma_table_info('{keys}') WHERE pk > 0");
    assert_eq!(t.scalar(&pk).await, 2, "primary key (scope, idem_key)");
    let (code, out, _) = migrate(&t, &["--with", "http"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("0 migration(s) applied"), "{out}");
}
