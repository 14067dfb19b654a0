//! The store conformance suite on [`AnyStore`], the type the quick start uses, for all three
//! databases: a SQLite file, a PostgreSQL schema or a MySQL/MariaDB database per case. The
//! harness is written once, against the [`SqlTx`] seam the handler's [`AnyTx`] offers.

mod common;

use common::{from_ms_text, missing, mysql_url, now_sql, pg_url, probe, sql_limits, unique};
use oncely_core::Result;
use oncely_sql::{AnyStore, AnyTx, Column, ConnectOptions, Dialect, SqlTx};
use oncely_testkit::{ExerciseOptions, StoreHarness};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

struct AnyHarness {
    dialect: Dialect,
    dir: tempfile::TempDir,
    next: AtomicUsize,
    /// PostgreSQL schemas / MySQL databases made for the cases, dropped at the end.
    made: Mutex<Vec<String>>,
}

/// `url` with `param` added to its query string.
fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

/// `mysql://user@host:port/db` with another database.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let out = format!("{}/{db}", &base[..path]);
    query.map_or(out.clone(), |q| format!("{out}?{q}"))
}

impl AnyHarness {
    fn new(dialect: Dialect) -> Self {
        Self {
            dialect,
            dir: tempfile::tempdir().expect("temp dir"),
            next: AtomicUsize::new(0),
            made: Mutex::new(vec![]),
        }
    }

    fn admin_url(&self) -> String {
        match self.dialect {
            Dialect::Postgres => pg_url(),
            _ => mysql_url(),
        }
    }

    /// The URL of a fresh, empty place for one case: its unqualified tables (oncely's and the
    /// ledger) land there.
    async fn place(&self) -> Result<String> {
        if self.dialect == Dialect::Sqlite {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            return Ok(format!(
                "sqlite:{}",
                self.dir.path().join(format!("case-{n}.db")).display()
            ));
        }
        let name = unique("conf_any");
        let admin = AnyStore::connect(&self.admin_url()).await?;
        let mut tx = admin.pool().begin().await?;
        tx.script(&self.dialect.create_schema_sql(&name).expect("schemas"))
            .await?;
        tx.commit().await?;
        admin.pool().close().await;
        self.made.lock().unwrap().push(name.clone());
        Ok(match self.dialect {
            // The schema first on the search path: unqualified names resolve there.
            Dialect::Postgres => with_param(&pg_url(), &format!("options=-csearch_path%3D{name}")),
            _ => with_database(&mysql_url(), &name),
        })
    }

    async fn cleanup(&self) {
        if self.dialect == Dialect::Sqlite {
            return;
        }
        let admin = AnyStore::connect(&self.admin_url()).await.unwrap();
        let made = self.made.lock().unwrap().clone();
        for name in made {
            let mut tx = admin.pool().begin().await.unwrap();
            let _ = tx
                .script(&self.dialect.drop_schema_sql(&name).expect("schemas"))
                .await;
            let _ = tx.commit().await;
        }
    }
}

impl StoreHarness for AnyHarness {
    type Store = AnyStore;

    async fn fresh(&self) -> Result<AnyStore> {
        let options = ConnectOptions {
            max_connections: 8,
            ..ConnectOptions::default()
        };
        let store = AnyStore::connect_with(&self.place().await?, &options).await?;
        assert_eq!(store.dialect(), self.dialect);
        store.migrate().await?;
        let d = store.dialect();
        let mut tx = store.pool().begin().await?;
        tx.script(&format!(
            "CREATE TABLE ledger (seq {}, message_id {} NOT NULL, amount BIGINT NOT NULL){}",
            d.serial_key(),
            d.key_text(255),
            d.table_options()
        ))
        .await?;
        tx.commit().await?;
        Ok(store)
    }

    async fn add_effect(tx: &mut AnyTx, message_id: &str, amount: i64) -> Result<()> {
        SqlTx::execute(
            tx,
            "INSERT INTO ledger (message_id, amount) VALUES ($1, $2)",
            &[message_id.into(), amount.into()],
        )
        .await?;
        Ok(())
    }

    async fn clock(store: &AnyStore) -> Result<std::time::SystemTime> {
        let mut tx = store.pool().begin().await?;
        let rows = SqlTx::fetch(&mut tx, &now_sql(store.dialect()), &[], &[Column::Text]).await?;
        tx.commit().await?;
        from_ms_text(&rows[0][0].text())
    }

    fn dead_letter_limits(&self) -> oncely_testkit::DeadLetterLimits {
        sql_limits(self.dialect)
    }

    async fn effects(store: &AnyStore) -> Result<Vec<(String, i64)>> {
        let mut tx = store.pool().begin().await?;
        let rows = SqlTx::fetch(
            &mut tx,
            "SELECT message_id, amount FROM ledger ORDER BY seq",
            &[],
            &[Column::Text, Column::I64],
        )
        .await?;
        tx.commit().await?;
        Ok(rows.iter().map(|r| (r[0].text(), r[1].i64())).collect())
    }
}

async fn conformance(test: &str, dialect: Dialect) {
    let harness = AnyHarness::new(dialect);
    if dialect != Dialect::Sqlite
        && let Err(e) = probe(&harness.admin_url()).await
    {
        missing(dialect.name(), test, &e);
        return;
    }
    oncely_testkit::exercise_with(
        &harness,
        ExerciseOptions {
            crash_seeds: 4,
            crash_messages: 60,
        },
    )
    .await;
    harness.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn any_store_on_sqlite_passes_the_conformance_suite() {
    conformance(
        "any_store_on_sqlite_passes_the_conformance_suite",
        Dialect::Sqlite,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn any_store_on_postgres_passes_the_conformance_suite() {
    conformance(
        "any_store_on_postgres_passes_the_conformance_suite",
        Dialect::Postgres,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn any_store_on_mysql_passes_the_conformance_suite() {
    conformance(
        "any_store_on_mysql_passes_the_conformance_suite",
        Dialect::MySql,
    )
    .await;
}
