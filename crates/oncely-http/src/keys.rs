//! The key row: reserved in the request's transaction, completed with the response in the same
//! transaction. Every statement runs through [`AnyTx`], so it is written once for the three
//! databases; what differs comes from [`Dialect`](oncely_sql::Dialect).
//!
//! Concurrency: the reservation is an insert that does nothing on conflict. A conflicting row
//! that is not committed yet (the same key still running) makes PostgreSQL and MySQL/MariaDB
//! wait for its transaction; the wait is bounded by a lock timeout set around that insert only
//! (PostgreSQL `lock_timeout`, MySQL `innodb_lock_wait_timeout`), and its expiry is answered
//! 409. SQLite has one writer: the second request waits at `BEGIN IMMEDIATE` (busy timeout)
//! and then finds the completed row.
//!
//! Every statement names the row by `(scope, idem_key)`, the primary key since migration 2: a
//! key of another scope is another row, never read, never a conflict.

use oncely_core::Result;
use oncely_sql::clock::now_ms;
use oncely_sql::{AnyTx, Column, Tables, Value};
use std::time::Duration;

/// A completed response, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// What the reservation found.
#[derive(Debug)]
pub(crate) enum Reserved {
    /// The key is ours: run the handler.
    Fresh,
    /// The key was completed for the same request: replay it.
    Replay(Stored),
    /// The key was used for a different request.
    Mismatch,
}

/// One request's key row: its scope, its key, and the random owner that tells whether this
/// request inserted it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row<'a> {
    pub scope: &'a str,
    pub key: &'a str,
    pub owner: &'a str,
}

/// The key row operations of one table.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    table: String,
}

const COLS: &str =
    "scope, idem_key, fingerprint, owner, status, headers, body, created_at, expires_at";

impl Keys {
    pub(crate) fn new(tables: &Tables) -> Self {
        Self {
            table: tables.table("http_keys"),
        }
    }

    /// Reserves `row` for a request with `fingerprint` inside `tx`, waiting at most `wait`
    /// for a running request with the same scope and key (then a transient error: 409).
    pub(crate) async fn reserve(
        &self,
        tx: &mut AnyTx,
        row: Row<'_>,
        fingerprint: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Reserved> {
        let Row { scope, key, owner } = row;
        let d = tx.dialect();
        let now = now_ms();
        let expires = now.saturating_add(ttl.as_millis() as i64);
        let insert = format!(
            "INSERT INTO {} ({COLS}) VALUES ({}) {}",
            self.table,
            d.params(1, 9),
            d.on_conflict_do_nothing("scope, idem_key")
        );
        let args: Vec<Value> = vec![
            scope.into(),
            key.into(),
            fingerprint.into(),
            owner.into(),
            Value::I64(0),
            "[]".into(),
            Value::Bytes(Vec::new()),
            now.into(),
            expires.into(),
        ];
        let restore = bounded_wait(tx, wait).await?;
        let inserted = tx.execute(&insert, &args).await;
        if let Some(restore) = restore {
            // MySQL keeps the transaction usable after a lock wait timeout; restore first.
            let restored = tx.script(&restore).await;
            inserted?;
            restored?;
        } else {
            inserted?;
        }
        let lock = d.for_update();
        let select = format!(
            "SELECT fingerprint, owner, status, headers, body, expires_at FROM {} WHERE scope = $1 AND idem_key = $2{lock}",
            self.table
        );
        let cols = [
            Column::Text,
            Column::Text,
            Column::I64,
            Column::Text,
            Column::Bytes,
            Column::I64,
        ];
        let Some(row) = tx
            .fetch_optional(&select, &[scope.into(), key.into()], &cols)
            .await?
        else {
            return Err(oncely_core::Error::transient(
                "the idempotency key row vanished during its reservation",
            ));
        };
        if row[1].text() == owner {
            return Ok(Reserved::Fresh);
        }
        if row[5].i64() <= now {
            // Expired and not pruned yet: the key is free again.
            let delete = format!(
                "DELETE FROM {} WHERE scope = $1 AND idem_key = $2 AND owner = $3",
                self.table
            );
            tx.execute(&delete, &[scope.into(), key.into(), row[1].text().into()])
                .await?;
            let plain = format!(
                "INSERT INTO {} ({COLS}) VALUES ({})",
                self.table,
                d.params(1, 9)
            );
            tx.execute(&plain, &args).await?;
            return Ok(Reserved::Fresh);
        }
        if row[0].text() != fingerprint {
            return Ok(Reserved::Mismatch);
        }
        let headers: Vec<(String, String)> =
            serde_json::from_str(&row[3].text()).unwrap_or_default();
        Ok(Reserved::Replay(Stored {
            status: u16::try_from(row[2].i64()).unwrap_or(500),
            headers,
            body: row[4].bytes(),
        }))
    }

    /// Stores the response in the row this request reserved (same transaction).
    pub(crate) async fn complete(
        &self,
        tx: &mut AnyTx,
        row: Row<'_>,
        stored: &Stored,
    ) -> Result<()> {
        let Row { scope, key, owner } = row;
        let update = format!(
            "UPDATE {} SET status = $1, headers = $2, body = $3 WHERE scope = $4 AND idem_key = $5 AND owner = $6",
            self.table
        );
        let headers = serde_json::to_string(&stored.headers).unwrap_or_else(|_| "[]".into());
        let done = tx
            .execute(
                &update,
                &[
                    i64::from(stored.status).into(),
                    headers.into(),
                    Value::Bytes(stored.body.clone()),
                    scope.into(),
                    key.into(),
                    owner.into(),
                ],
            )
            .await?;
        if done.rows != 1 {
            return Err(oncely_core::Error::permanent(format!(
                "the reserved idempotency key row was not found ({} rows)",
                done.rows
            )));
        }
        Ok(())
    }
}

/// Bounds how long the next statement waits for a row lock
/// ([`Dialect::bounded_lock_wait`](oncely_sql::Dialect::bounded_lock_wait)); returns the script
/// that restores the previous bound.
async fn bounded_wait(tx: &mut AnyTx, wait: Duration) -> Result<Option<String>> {
    let Some((set, restore)) = tx.dialect().bounded_lock_wait(wait) else {
        return Ok(None);
    };
    tx.script(&set).await?;
    Ok(Some(restore))
}
