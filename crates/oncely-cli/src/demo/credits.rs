//! The demo's effect: "add N credits to account A" — not naturally idempotent.

use oncely_core::{Envelope, Error, Handled, Handler, Result};
use oncely_sql::Dialect;
use oncely_sql::sqlx::{
    self, AssertSqlSafe, MySql, Postgres, SqlSafeStr, SqlStr, Sqlite, Transaction,
};
use serde::{Deserialize, Serialize};

/// The demo message payload: `{"account": "acct-17", "amount": 5}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Credit {
    /// Account to credit.
    pub account: String,
    /// Credits to add (1..=1_000_000).
    pub amount: i64,
}

impl Credit {
    /// Parses and validates a payload; errors are permanent (the message can never succeed).
    pub fn parse(payload: &[u8]) -> Result<Self> {
        let credit: Credit = serde_json::from_slice(payload)
            .map_err(|e| Error::permanent(format!("undecodable credit payload: {e}")))?;
        if credit.account.is_empty() || credit.account.len() > 64 {
            return Err(Error::permanent("account must be 1..=64 bytes"));
        }
        if !(1..=1_000_000).contains(&credit.amount) {
            return Err(Error::permanent(format!(
                "amount {} outside 1..=1000000",
                credit.amount
            )));
        }
        Ok(credit)
    }
}

/// Table names and statements for one dialect and schema.
#[derive(Debug, Clone)]
pub struct CreditTables {
    /// `accounts` table (account, balance).
    pub accounts: String,
    /// `ledger` table: one row per applied effect.
    pub ledger: String,
    insert_ledger: SqlStr,
    upsert_balance: SqlStr,
    dialect: Dialect,
}

impl CreditTables {
    /// Names in `schema` (None: unqualified).
    pub fn new(dialect: Dialect, schema: Option<&str>) -> Self {
        let q = |t: &str| match schema {
            Some(s) => format!("{s}.{t}"),
            None => t.to_owned(),
        };
        let accounts = q("demo_accounts");
        let ledger = q("demo_ledger");
        let insert_ledger = format!(
            "INSERT INTO {ledger} (message_id, account, amount) VALUES ({})",
            dialect.params(1, 3)
        );
        let upsert_balance = format!(
            "INSERT INTO {accounts} (account, balance) VALUES ({}) {}",
            dialect.params(1, 2),
            dialect.on_conflict_add(&accounts, "account", "balance")
        );
        Self {
            accounts,
            ledger,
            insert_ledger: AssertSqlSafe(insert_ledger).into_sql_str(),
            upsert_balance: AssertSqlSafe(upsert_balance).into_sql_str(),
            dialect,
        }
    }

    /// DDL creating both tables.
    pub fn ddl(&self) -> Vec<String> {
        let (seq, text) = (self.dialect.serial_key(), self.dialect.key_text(255));
        vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {} (account {text} PRIMARY KEY, balance BIGINT NOT NULL)",
                self.accounts
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (seq {seq}, message_id {text} NOT NULL, account {text} NOT NULL, amount BIGINT NOT NULL)",
                self.ledger
            ),
        ]
    }
}

/// The demo handler: one ledger row per applied message (so the checker can count double
/// effects) and the account balance incremented.
#[derive(Clone)]
pub struct Credits {
    tables: CreditTables,
}

impl Credits {
    /// A handler writing to `tables`.
    pub fn new(tables: CreditTables) -> Self {
        Self { tables }
    }
}

fn db(e: sqlx::Error) -> Error {
    oncely_sql::db_error("credit write", e)
}

macro_rules! credits_handler {
    ($db:ty) => {
        impl Handler<Transaction<'static, $db>> for Credits {
            async fn handle(
                &self,
                tx: &mut Transaction<'static, $db>,
                message: &Envelope,
            ) -> Result<Handled> {
                let credit = Credit::parse(message.payload())?;
                sqlx::query(self.tables.insert_ledger.clone())
                    .bind(message.id().as_str())
                    .bind(&credit.account)
                    .bind(credit.amount)
                    .execute(&mut **tx)
                    .await
                    .map_err(db)?;
                sqlx::query(self.tables.upsert_balance.clone())
                    .bind(&credit.account)
                    .bind(credit.amount)
                    .execute(&mut **tx)
                    .await
                    .map_err(db)?;
                Ok(Handled::Applied)
            }
        }
    };
}

credits_handler!(Sqlite);
credits_handler!(Postgres);
credits_handler!(MySql);
