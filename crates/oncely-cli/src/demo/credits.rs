//! The demo's effect: "add N credits to account A" — not naturally idempotent.

use oncely_core::{Envelope, Error, Handled, Handler, RawEnvelope, Result};
use oncely_sql::{AnyTx, Dialect};
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
    insert_ledger: String,
    upsert_balance: String,
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
        let insert_ledger =
            format!("INSERT INTO {ledger} (message_id, account, amount) VALUES ($1, $2, $3)");
        let upsert_balance = format!(
            "INSERT INTO {accounts} (account, balance) VALUES ($1, $2) {}",
            dialect.on_conflict_add(&accounts, "account", "balance")
        );
        Self {
            accounts,
            ledger,
            insert_ledger,
            upsert_balance,
            dialect,
        }
    }

    /// Both tables' qualified names (what [`CreditTables::ddl`] creates).
    pub fn names(&self) -> [&str; 2] {
        [&self.accounts, &self.ledger]
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

/// One impl for every database: the statements number their placeholders `$1, $2, …`.
impl Handler<AnyTx> for Credits {
    async fn handle(&self, tx: &mut AnyTx, message: &Envelope) -> Result<Handled> {
        let credit = Credit::parse(message.payload())?;
        let (id, account, amount) = (message.id().as_str(), &credit.account, credit.amount);
        let args = [id.into(), account.into(), amount.into()];
        tx.execute(&self.tables.insert_ledger, &args).await?;
        tx.execute(&self.tables.upsert_balance, &args[1..]).await?;
        Ok(Handled::Applied)
    }

    /// The account's row is what the effect locks: group commit's lanes go by account.
    fn lock_key(&self, message: &RawEnvelope) -> Option<String> {
        Credit::parse(&message.payload).ok().map(|c| c.account)
    }
}
