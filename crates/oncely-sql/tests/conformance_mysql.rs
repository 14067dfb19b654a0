//! The store conformance suite on the real MariaDB / MySQL server (a database per case).

mod common;

use common::{missing, mysql_url, unique};
use oncely_core::{Error, Result};
use oncely_sql::sqlx::{self, AssertSqlSafe, MySql, Transaction};
use oncely_sql::{ConnectOptions, MySqlStore};
use oncely_testkit::{ExerciseOptions, StoreHarness};
use std::sync::Mutex;

struct MySqlHarness {
    databases: Mutex<Vec<String>>,
    /// Portable mode forced on (`ConnectOptions::portable`).
    portable: bool,
}

fn db(e: sqlx::Error) -> Error {
    Error::transient("ledger query failed").with_source(e)
}

/// `mysql://user@host:port/db` with another database.
fn url_with_db(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{db}", &base[..path]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

impl StoreHarness for MySqlHarness {
    type Store = MySqlStore;

    async fn fresh(&self) -> Result<MySqlStore> {
        let name = unique("conf_my");
        let admin = MySqlStore::connect(&mysql_url()).await?;
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(admin.pool())
            .await
            .map_err(db)?;
        admin.pool().close().await;
        self.databases.lock().unwrap().push(name.clone());
        // The case's database is the connection's default one: the inbox (unqualified) and
        // the test ledger live there.
        let options = ConnectOptions {
            max_connections: 8,
            portable: self.portable,
            ..ConnectOptions::default()
        };
        let store = MySqlStore::connect_with(&url_with_db(&mysql_url(), &name), &options).await?;
        // Forced, or detected (the suite also runs on a Galera node: ONCELY_TEST_MYSQL_URL).
        assert!(store.portable() || !self.portable);
        store.migrate().await?;
        if self.portable {
            // The portable migration took its lock in the lease table (and released it).
            let leases: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM {}",
                store.tables().ops_leases()
            )))
            .fetch_one(store.pool())
            .await
            .map_err(db)?;
            assert_eq!(leases, 0, "the migration lease was released");
        }
        sqlx::raw_sql(
            "CREATE TABLE ledger (seq BIGINT AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(255) NOT NULL, amount BIGINT NOT NULL) ENGINE=InnoDB",
        )
        .execute(store.pool())
        .await
        .map_err(db)?;
        Ok(store)
    }

    async fn add_effect(
        tx: &mut Transaction<'static, MySql>,
        message_id: &str,
        amount: i64,
    ) -> Result<()> {
        sqlx::query("INSERT INTO ledger (message_id, amount) VALUES (?, ?)")
            .bind(message_id)
            .bind(amount)
            .execute(&mut **tx)
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn clock(store: &MySqlStore) -> Result<std::time::SystemTime> {
        common::db_clock(store).await
    }

    fn dead_letter_limits(&self) -> oncely_testkit::DeadLetterLimits {
        common::sql_limits(oncely_sql::Dialect::MySql)
    }

    async fn effects(store: &MySqlStore) -> Result<Vec<(String, i64)>> {
        sqlx::query_as("SELECT message_id, amount FROM ledger ORDER BY seq")
            .fetch_all(store.pool())
            .await
            .map_err(db)
    }
}

#[test]
fn url_with_db_replaces_the_database() {
    assert_eq!(
        url_with_db("mysql://root@127.0.0.1:3306/test", "x"),
        "mysql://root@127.0.0.1:3306/x"
    );
    assert_eq!(url_with_db("mysql://root@h", "x"), "mysql://root@h/x");
    assert_eq!(
        url_with_db("mysql://u:p@h/t?ssl-mode=disabled", "x"),
        "mysql://u:p@h/x?ssl-mode=disabled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_passes_the_conformance_suite() {
    conformance("mysql_passes_the_conformance_suite", false).await;
}

/// The same suite with portable mode forced (issue 16: TiDB, MariaDB Galera): lease-table
/// migration lock, `FOR UPDATE` claim read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_portable_passes_the_conformance_suite() {
    conformance("mysql_portable_passes_the_conformance_suite", true).await;
}

async fn conformance(test: &str, portable: bool) {
    if let Err(e) = common::probe(&mysql_url()).await {
        missing("MariaDB", test, &e);
        return;
    }
    let harness = MySqlHarness {
        databases: Mutex::new(vec![]),
        portable,
    };
    oncely_testkit::exercise_with(
        &harness,
        ExerciseOptions {
            crash_seeds: 8,
            crash_messages: 100,
        },
    )
    .await;
    let cleanup = MySqlStore::connect(&mysql_url()).await.unwrap();
    let created = harness.databases.lock().unwrap().clone();
    for name in created {
        let _ = sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE {name}")))
            .execute(cleanup.pool())
            .await;
    }
}
