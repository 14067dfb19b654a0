//! The test database: oncely's tables plus an effect ledger without a unique key, and the
//! handler that writes one ledger row per applied message.

use oncely_core::{Envelope, Error, Handled, Handler, Result};
use oncely_sql::{AnyStore, AnyTx, ConnectOptions, Dialect, SqlTx, Tables};

/// A store for tests: SQLite file, PostgreSQL schema or MySQL/MariaDB database, migrated,
/// with a ledger table.
#[derive(Clone)]
pub struct Db {
    store: AnyStore,
    ledger: String,
}

impl Db {
    /// Opens `url` (sqlite:, postgres:, mysql: or mariadb:), applies oncely's migrations and
    /// creates the ledger table. `schema` (PostgreSQL) holds the tables; None: the default.
    pub async fn open(url: &str, schema: Option<&str>) -> Result<Self> {
        let dialect = Dialect::from_url(url)?;
        let mut tables = Tables::default();
        if let Some(s) = schema {
            tables = tables.with_schema(s)?;
        }
        let opts = ConnectOptions {
            tables,
            max_connections: if dialect.has_schemas() { 8 } else { 4 },
            ..ConnectOptions::default()
        };
        let store = AnyStore::connect_with(url, &opts).await?;
        store.migrate().await?;
        let ledger = match schema {
            Some(s) => format!("{s}.ledger"),
            None => "ledger".to_owned(),
        };
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {ledger} (id {}, message_id {text} NOT NULL, \
             account {text} NOT NULL, amount BIGINT NOT NULL)",
            dialect.serial_key(),
            text = dialect.key_text(255),
        );
        let mut tx = store.pool().begin().await?;
        // Two concurrent `CREATE TABLE IF NOT EXISTS` of one table can collide (PostgreSQL's
        // catalog): where they can, a transaction-scoped lock serializes them.
        if let Some(lock) = dialect.ddl_lock_sql(4242) {
            tx.execute(&lock, &[]).await?;
        }
        tx.script(&ddl).await?;
        tx.commit().await?;
        Ok(Self { store, ledger })
    }

    /// The store.
    pub fn store(&self) -> &AnyStore {
        &self.store
    }

    /// The ledger's qualified table name.
    pub fn ledger(&self) -> String {
        self.ledger.clone()
    }

    /// The dead-letter table's qualified name.
    pub fn dead_letters(&self) -> String {
        self.store.tables().dead_letters()
    }

    /// The handler writing to this database's ledger.
    pub fn handler(&self) -> Ledger {
        let insert = format!(
            "INSERT INTO {} (message_id, account, amount) VALUES ($1, $2, $3)",
            self.ledger
        );
        Ledger { insert }
    }

    /// Ledger rows and dead letters so far: `(ledger rows, dead-letter rows)`.
    pub async fn counts(&self) -> Result<(i64, i64)> {
        let q1 = format!("SELECT COUNT(*) FROM {}", self.ledger());
        let q2 = format!("SELECT COUNT(*) FROM {}", self.dead_letters());
        let mut pool = self.store.pool();
        let ledger = pool.fetch_i64(&q1, &[]).await.map_err(db_err)?;
        let dead = pool.fetch_i64(&q2, &[]).await.map_err(db_err)?;
        Ok((ledger.unwrap_or(0), dead.unwrap_or(0)))
    }
}

pub(crate) fn db_err(e: Error) -> Error {
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

impl Handler<AnyTx> for Ledger {
    async fn handle(&self, tx: &mut AnyTx, message: &Envelope) -> Result<Handled> {
        let (account, amount) = parse_payload(message.payload())?;
        let args = [message.id().as_str().into(), account.into(), amount.into()];
        // Transient whatever the database said, as every test database error here.
        tx.execute(&self.insert, &args)
            .await
            .map_err(|e| Error::transient("test database").with_source(e))?;
        Ok(Handled::Applied)
    }
}

/// A fresh SQLite database in a temp dir (kept alive by the returned guard).
pub async fn sqlite_db() -> (Db, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("oncely.db").display());
    (Db::open(&url, None).await.expect("sqlite store"), dir)
}
