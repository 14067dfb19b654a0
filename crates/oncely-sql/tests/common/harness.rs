//! One [`StoreHarness`] for every SQL store type (`PgStore`, `MySqlStore`, `SqliteStore`,
//! `AnyStore`), so the testkit's store suite (`oncely_testkit::exercise`) runs on each with
//! the same fixture as the server tests: an [`Fx`] per case (a SQLite file, a PostgreSQL
//! schema or a MariaDB database, the inbox and a `ledger` table there), effects written in the
//! store's own transaction through the [`SqlTx`] seam and counted by reading the ledger back.

use super::{
    Fx, HarnessStore, from_ms_text, missing, mysql_url, now_sql, pg_url, probe, sql_limits,
};
use oncely_core::Result;
use oncely_sql::{AnyStore, Column, Dialect, SqlTx};
use oncely_testkit::test_db::TestDb;
use oncely_testkit::{DeadLetterLimits, ExerciseOptions, StoreHarness};
use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::SystemTime;

/// The store suite's fixture for store type `S` on one database.
pub struct SqlHarness<S> {
    dialect: Dialect,
    /// Portable mode forced on (`ConnectOptions::portable`).
    portable: bool,
    /// Each case a database of its own through the test PgBouncer
    /// ([`TestDb::pgbouncer_database`]).
    bounced: bool,
    /// The cases' databases (the testkit's [`TestDb`]), dropped with the harness.
    made: Mutex<Vec<TestDb>>,
    store: PhantomData<fn() -> S>,
}

impl<S: HarnessStore> SqlHarness<S> {
    /// A harness for `dialect`, portable mode forced when `portable`.
    pub fn new(dialect: Dialect, portable: bool) -> Self {
        Self {
            dialect,
            portable,
            bounced: false,
            made: Mutex::new(vec![]),
            store: PhantomData,
        }
    }

    /// A harness whose cases each get a PostgreSQL database of their own through the test
    /// PgBouncer in transaction mode (portable mode detected, not forced).
    pub fn through_pgbouncer() -> Self {
        Self {
            bounced: true,
            ..Self::new(Dialect::Postgres, false)
        }
    }

    fn admin_url(&self) -> String {
        match self.dialect {
            Dialect::Postgres => pg_url(),
            _ => mysql_url(),
        }
    }

    /// Runs the store suite (a SKIPPED line, or a failure under CI, if the server is missing),
    /// then drops what the cases made (with the harness).
    pub async fn exercise(self, test: &str, options: ExerciseOptions) {
        if self.dialect != Dialect::Sqlite
            && let Err(e) = probe(&self.admin_url()).await
        {
            missing(self.dialect.name(), test, &e);
            return;
        }
        oncely_testkit::exercise_with(&self, options).await;
    }
}

impl<S: HarnessStore> StoreHarness for SqlHarness<S> {
    type Store = S;

    /// A fresh [`Fx`] per case: its store goes to the case, its database stays with the
    /// harness until the suite ends.
    async fn fresh(&self) -> Result<S> {
        let fx = if self.bounced {
            let place = TestDb::pgbouncer_database("pooled")
                .await
                .ok_or_else(|| oncely_core::Error::unavailable("the test PgBouncer is missing"))?;
            Fx::<S>::build(place, self.portable).await?
        } else {
            Fx::<S>::new("conf", self.dialect, self.portable).await?
        };
        let store = fx.store.clone();
        self.made.lock().unwrap().push(fx.into_place());
        Ok(store)
    }

    async fn add_effect(tx: &mut S::Tx, message_id: &str, amount: i64) -> Result<()> {
        SqlTx::execute(
            tx,
            "INSERT INTO ledger (message_id, amount) VALUES ($1, $2)",
            &[message_id.into(), amount.into()],
        )
        .await?;
        Ok(())
    }

    async fn effects(store: &S) -> Result<Vec<(String, i64)>> {
        let any: AnyStore = store.clone().into();
        let rows = any
            .pool()
            .fetch(
                "SELECT message_id, amount FROM ledger ORDER BY seq",
                &[],
                &[Column::Text, Column::I64],
            )
            .await?;
        Ok(rows.iter().map(|r| (r[0].text(), r[1].i64())).collect())
    }

    async fn clock(store: &S) -> Result<SystemTime> {
        let any: AnyStore = store.clone().into();
        let sql = now_sql(any.dialect());
        let rows = any.pool().fetch(&sql, &[], &[Column::Text]).await?;
        from_ms_text(&rows[0][0].text())
    }

    fn dead_letter_limits(&self) -> DeadLetterLimits {
        sql_limits(self.dialect)
    }
}
