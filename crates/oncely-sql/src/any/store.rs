//! `impl Store for AnyStore` and `impl Inspect for AnyStore`: each method goes to the typed
//! store inside, with the [`AnyTx`] of its database.

use super::AnyStore;
use super::tx::{AnyTx, TxKind};
use crate::dialect::Dialect;
use oncely_core::{
    Claim, ConsumerName, DeadLetter, Error, Inspect, MessageId, PayloadHash, Result, Store,
    StoredDeadLetter,
};

/// A transaction of another database than the store's: cannot happen through the runtime
/// (the store made the transaction), so it is a bug, never worth a retry.
fn mismatch(store: Dialect, tx: &AnyTx) -> Error {
    Error::permanent(format!(
        "an AnyStore of {} was handed a transaction of {}",
        store.name(),
        tx.dialect().name()
    ))
}

/// Runs `$body` with `$s` and `$t` bound to the store and the transaction of one database, or
/// fails with [`mismatch`].
macro_rules! with_store_tx {
    ($store:expr, $tx:expr, $s:ident, $t:ident => $body:expr) => {
        match ($store, $tx) {
            #[cfg(feature = "sqlite")]
            (
                AnyStore::Sqlite($s),
                AnyTx {
                    tx: TxKind::Sqlite($t),
                    ..
                },
            ) => $body,
            #[cfg(feature = "postgres")]
            (
                AnyStore::Postgres($s),
                AnyTx {
                    tx: TxKind::Postgres($t),
                    ..
                },
            ) => $body,
            #[cfg(feature = "mysql")]
            (
                AnyStore::MySql($s),
                AnyTx {
                    tx: TxKind::MySql($t),
                    ..
                },
            ) => $body,
            (store, tx) => Err(mismatch(store.dialect(), &tx)),
        }
    };
}

/// Each method goes to the store inside, with the transaction of its database.
///
/// ```no_run
/// # async fn f() -> oncely_core::Result<()> {
/// use oncely_core::Store;
/// use oncely_sql::AnyStore;
/// let store = AnyStore::connect("sqlite:oncely.db").await?;
/// store.migrate().await?;
/// let mut tx = store.begin().await?;
/// tx.execute("DELETE FROM accounts WHERE balance = $1", &[0.into()]).await?;
/// store.commit(tx).await?;
/// # Ok(()) }
/// ```
impl Store for AnyStore {
    type Tx = AnyTx;

    async fn begin(&self) -> Result<AnyTx> {
        let tx = match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => TxKind::Sqlite(s.begin().await?),
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => TxKind::Postgres(s.begin().await?),
            #[cfg(feature = "mysql")]
            Self::MySql(s) => TxKind::MySql(s.begin().await?),
        };
        Ok(AnyTx {
            engine: self.engine(),
            tx,
        })
    }

    async fn claim(
        &self,
        tx: &mut AnyTx,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<Claim> {
        with_store_tx!(self, tx, s, t => s.claim(t, consumer, id, hash).await)
    }

    async fn claim_batch(
        &self,
        tx: &mut AnyTx,
        consumer: &ConsumerName,
        items: &[(MessageId, PayloadHash)],
    ) -> Result<Vec<Claim>> {
        with_store_tx!(self, tx, s, t => s.claim_batch(t, consumer, items).await)
    }

    async fn committed_claim(
        &self,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<bool> {
        crate::with_store!(self, s => s.committed_claim(consumer, id, hash).await)
    }

    async fn committed_claims(
        &self,
        consumer: &ConsumerName,
        items: &[(MessageId, PayloadHash)],
    ) -> Result<Vec<bool>> {
        crate::with_store!(self, s => s.committed_claims(consumer, items).await)
    }

    async fn commit(&self, tx: AnyTx) -> Result<()> {
        with_store_tx!(self, tx, s, t => s.commit(t).await)
    }

    async fn rollback(&self, tx: AnyTx) -> Result<()> {
        with_store_tx!(self, tx, s, t => s.rollback(t).await)
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<()> {
        crate::with_store!(self, s => s.dead_letter(letter).await)
    }

    async fn check_ready(&self) -> Result<()> {
        crate::with_store!(self, s => s.check_ready().await)
    }
}

/// Each method goes to the store inside.
///
/// ```no_run
/// # async fn f(store: oncely_sql::AnyStore) -> oncely_core::Result<()> {
/// use oncely_core::Inspect;
/// let letters = store.dead_letters(None).await?;
/// # Ok(()) }
/// ```
impl Inspect for AnyStore {
    async fn claimed_hash(&self, consumer: &ConsumerName, id: &str) -> Result<Option<PayloadHash>> {
        crate::with_store!(self, s => s.claimed_hash(consumer, id).await)
    }

    async fn dead_letters(&self, consumer: Option<&ConsumerName>) -> Result<Vec<StoredDeadLetter>> {
        crate::with_store!(self, s => s.dead_letters(consumer).await)
    }
}

#[cfg(all(test, feature = "sqlite", feature = "postgres"))]
mod tests {
    use super::*;
    use crate::query::{Column, Value};

    async fn sqlite() -> AnyStore {
        let store = AnyStore::connect("sqlite::memory:").await.unwrap();
        store.migrate().await.unwrap();
        store
    }

    #[tokio::test]
    async fn execute_fetch_and_rollback_on_sqlite() {
        let store = sqlite().await;
        let mut tx = store.begin().await.unwrap();
        assert_eq!(tx.dialect(), Dialect::Sqlite);
        tx.script(
            "CREATE TABLE acc (account TEXT PRIMARY KEY, balance BIGINT NOT NULL, note TEXT)",
        )
        .await
        .unwrap();
        store.commit(tx).await.unwrap();

        let mut tx = store.begin().await.unwrap();
        let done = tx
            .execute(
                "INSERT INTO acc (account, balance, note) VALUES ($1, $2, $3), ($4, $2, NULL)",
                &["a".into(), 5.into(), "x".into(), "b".into()],
            )
            .await
            .unwrap();
        assert_eq!(done.rows, 2);
        let rows = tx
            .fetch(
                "SELECT account, balance, note FROM acc ORDER BY account",
                &[],
                &[Column::Text, Column::I64, Column::OptText],
            )
            .await
            .unwrap();
        assert_eq!(
            rows,
            vec![
                vec!["a".into(), Value::I64(5), "x".into()],
                vec!["b".into(), Value::I64(5), Value::NullText],
            ]
        );
        assert_eq!(
            tx.fetch_i64(
                "SELECT SUM(balance) FROM acc WHERE account <> $1",
                &["a".into()]
            )
            .await
            .unwrap(),
            Some(5)
        );
        assert_eq!(
            tx.fetch_optional(
                "SELECT note FROM acc WHERE account = $1",
                &["z".into()],
                &[Column::OptText]
            )
            .await
            .unwrap(),
            None
        );
        let e = tx
            .execute(
                "INSERT INTO acc (account, balance) VALUES ($1, $2)",
                &["a".into(), 1.into()],
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), oncely_core::ErrorKind::Permanent, "{e}");
        store.rollback(tx).await.unwrap();

        let mut tx = store.begin().await.unwrap();
        assert_eq!(
            tx.fetch_i64("SELECT COUNT(*) FROM acc", &[]).await.unwrap(),
            Some(0)
        );
        assert!(tx.as_sqlite().is_some() && tx.as_postgres().is_none() && tx.as_mysql().is_none());
        store.commit(tx).await.unwrap();
    }

    #[tokio::test]
    async fn a_transaction_of_another_database_is_refused() {
        let (one, other) = (sqlite().await, sqlite().await);
        let AnyStore::Sqlite(inner) = &other else {
            unreachable!()
        };
        let pg = AnyStore::Postgres(crate::PgStore::from_pool(
            sqlx::postgres::PgPoolOptions::new()
                .connect_lazy("postgres://x@127.0.0.1:1/x")
                .unwrap(),
        ));
        let tx = AnyTx::from(inner.begin().await.unwrap());
        let e = pg.commit(tx).await.unwrap_err();
        assert_eq!(e.kind(), oncely_core::ErrorKind::Permanent);
        assert!(e.to_string().contains("AnyStore of postgres"), "{e}");
        let tx = one.begin().await.unwrap();
        one.rollback(tx).await.unwrap();
    }
}
