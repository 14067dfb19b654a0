//! The test database: oncely's tables plus an effect ledger without a unique key, and the
//! handler that writes one ledger row per applied message.

use oncely_core::{Envelope, Error, Handled, Handler, Result};
use oncely_sql::sqlx::{self, AssertSqlSafe, MySql, Postgres, Sqlite, Transaction};
use oncely_sql::{ConnectOptions, MySqlStore, PgStore, SqliteStore, Tables};

/// A store for tests: SQLite file, PostgreSQL schema or MySQL/MariaDB database, migrated,
/// with a ledger table.
#[derive(Clone)]
pub enum Db {
    /// `sqlite:/path/file.db`.
    Sqlite(SqliteStore),
    /// `postgres://…` with the tables in a schema.
    Pg(PgStore),
    /// `mysql://…` / `mariadb://…` (the schema is the URL's database).
    MySql(MySqlStore),
}

impl Db {
    /// Opens `url` (sqlite:, postgres:, mysql: or mariadb:), applies oncely's migrations and
    /// creates the ledger table. `schema` is used for PostgreSQL only.
    pub async fn open(url: &str, schema: Option<&str>) -> Result<Self> {
        if url.starts_with("mysql:") || url.starts_with("mariadb:") {
            let opts = ConnectOptions {
                max_connections: 8,
                ..ConnectOptions::default()
            };
            let store = MySqlStore::connect_with(url, &opts).await?;
            store.migrate().await?;
            sqlx::raw_sql(
                "CREATE TABLE IF NOT EXISTS ledger (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                 message_id VARCHAR(255) NOT NULL, account VARCHAR(255) NOT NULL, amount BIGINT NOT NULL)",
            )
            .execute(store.pool())
            .await
            .map_err(db_err)?;
            Ok(Self::MySql(store))
        } else if url.starts_with("sqlite:") {
            let opts = ConnectOptions {
                max_connections: 4,
                ..ConnectOptions::default()
            };
            let store = SqliteStore::connect_with(url, &opts).await?;
            store.migrate().await?;
            sqlx::raw_sql(
                "CREATE TABLE IF NOT EXISTS ledger (id INTEGER PRIMARY KEY AUTOINCREMENT, \
                 message_id TEXT NOT NULL, account TEXT NOT NULL, amount BIGINT NOT NULL)",
            )
            .execute(store.pool())
            .await
            .map_err(|e| Error::transient("creating the ledger").with_source(e))?;
            Ok(Self::Sqlite(store))
        } else {
            let mut tables = Tables::default();
            if let Some(s) = schema {
                tables = tables.with_schema(s)?;
            }
            let opts = ConnectOptions {
                tables,
                max_connections: 8,
                ..ConnectOptions::default()
            };
            let store = PgStore::connect_with(url, &opts).await?;
            store.migrate().await?;
            let ledger = ledger_table(schema);
            let mut tx = store.pool().begin().await.map_err(db_err)?;
            sqlx::query("SELECT pg_advisory_xact_lock(4242)")
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
            sqlx::raw_sql(AssertSqlSafe(format!(
                "CREATE TABLE IF NOT EXISTS {ledger} (id BIGSERIAL PRIMARY KEY, \
                 message_id TEXT NOT NULL, account TEXT NOT NULL, amount BIGINT NOT NULL)"
            )))
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
            tx.commit().await.map_err(db_err)?;
            Ok(Self::Pg(store))
        }
    }

    /// The ledger's qualified table name.
    pub fn ledger(&self) -> String {
        match self {
            Self::Sqlite(_) | Self::MySql(_) => "ledger".to_owned(),
            Self::Pg(s) => ledger_table(s.tables().schema()),
        }
    }

    /// The dead-letter table's qualified name.
    pub fn dead_letters(&self) -> String {
        match self {
            Self::Sqlite(s) => s.tables().table("dead_letters"),
            Self::Pg(s) => s.tables().table("dead_letters"),
            Self::MySql(s) => s.tables().table("dead_letters"),
        }
    }

    /// The handler writing to this database's ledger.
    pub fn handler(&self) -> Ledger {
        let table = self.ledger();
        let sql = match self {
            Self::Sqlite(_) | Self::MySql(_) => {
                format!("INSERT INTO {table} (message_id, account, amount) VALUES (?, ?, ?)")
            }
            Self::Pg(_) => {
                format!("INSERT INTO {table} (message_id, account, amount) VALUES ($1, $2, $3)")
            }
        };
        Ledger { insert: sql }
    }

    /// Ledger rows and dead letters so far: `(ledger rows, dead-letter rows)`.
    pub async fn counts(&self) -> Result<(i64, i64)> {
        let q1 = format!("SELECT COUNT(*) FROM {}", self.ledger());
        let q2 = format!("SELECT COUNT(*) FROM {}", self.dead_letters());
        Ok(match self {
            Self::Sqlite(s) => (scalar_sqlite(s, q1).await?, scalar_sqlite(s, q2).await?),
            Self::Pg(s) => (scalar_pg(s, q1).await?, scalar_pg(s, q2).await?),
            Self::MySql(s) => (scalar_mysql(s, q1).await?, scalar_mysql(s, q2).await?),
        })
    }
}

async fn scalar_sqlite(s: &SqliteStore, q: String) -> Result<i64> {
    sqlx::query_scalar(AssertSqlSafe(q))
        .fetch_one(s.pool())
        .await
        .map_err(db_err)
}

async fn scalar_pg(s: &PgStore, q: String) -> Result<i64> {
    sqlx::query_scalar(AssertSqlSafe(q))
        .fetch_one(s.pool())
        .await
        .map_err(db_err)
}

async fn scalar_mysql(s: &MySqlStore, q: String) -> Result<i64> {
    sqlx::query_scalar(AssertSqlSafe(q))
        .fetch_one(s.pool())
        .await
        .map_err(db_err)
}

fn ledger_table(schema: Option<&str>) -> String {
    match schema {
        Some(s) => format!("{s}.ledger"),
        None => "ledger".to_owned(),
    }
}

pub(crate) fn db_err(e: sqlx::Error) -> Error {
    Error::transient("test database").with_source(e)
}

/// Writes one ledger row `(message_id, account, amount)` per applied message.
/// A payload that is not the demo's JSON is a permanent error (dead-lettered).
#[derive(Debug, Clone)]
pub struct Ledger {
    insert: String,
}

/// Parses `{"account": "acct-17", "amount": 5}`.
pub fn parse_payload(payload: &[u8]) -> Result<(String, i64)> {
    let v: serde_json::Value = serde_json::from_slice(payload)
        .map_err(|e| Error::permanent(format!("payload is not JSON: {e}")))?;
    let account = v["account"]
        .as_str()
        .ok_or_else(|| Error::permanent("payload has no string \"account\""))?;
    let amount = v["amount"]
        .as_i64()
        .ok_or_else(|| Error::permanent("payload has no integer \"amount\""))?;
    Ok((account.to_owned(), amount))
}

macro_rules! ledger_handler {
    ($db:ty) => {
        impl Handler<Transaction<'static, $db>> for Ledger {
            async fn handle(
                &self,
                tx: &mut Transaction<'static, $db>,
                message: &Envelope,
            ) -> Result<Handled> {
                let (account, amount) = parse_payload(message.payload())?;
                sqlx::query(AssertSqlSafe(self.insert.clone()))
                    .bind(message.id().as_str())
                    .bind(account)
                    .bind(amount)
                    .execute(&mut **tx)
                    .await
                    .map_err(db_err)?;
                Ok(Handled::Applied)
            }
        }
    };
}

ledger_handler!(Sqlite);
ledger_handler!(Postgres);
ledger_handler!(MySql);
