//! The credits workload every demo, benchmark and broker test runs: "add N credits to
//! account A", an effect that is not naturally idempotent (applied twice, the balance is
//! wrong), so a checker can count double effects from the effect itself.
//!
//! A message's payload is [`Credit`]'s JSON, `{"account": "acct-17", "amount": 5}`. The
//! effect writes one ledger row per applied message (so double effects show as rows) and
//! adds the amount to the account's balance (so the balances must sum to the credits sent).
//! [`Credits`] writes it to SQL tables (feature `sql`), [`RedisCredits`] to the Redis store
//! (feature `redis`).
//!
//! ```
//! use oncely_testkit::credits::Credit;
//! let payload = Credit::payload("acct-17", 5);
//! assert_eq!(Credit::parse(&payload).unwrap().amount, 5);
//! let refused = Credit::parse(b"not json").unwrap_err();
//! assert_eq!(refused.kind(), oncely_core::ErrorKind::Permanent);
//! ```

#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sql")]
mod sql;

#[cfg(feature = "redis")]
pub use redis::RedisCredits;
#[cfg(feature = "sql")]
pub use sql::{CreditTables, Credits};

use oncely_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// A message's payload: `{"account": "acct-17", "amount": 5}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Credit {
    /// Account to credit (1..=64 bytes).
    pub account: String,
    /// Credits to add (1..=1_000_000).
    pub amount: i64,
}

impl Credit {
    /// Parses and validates a payload; errors are permanent (the message can never succeed,
    /// so the consumer dead-letters it).
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

    /// The payload of `amount` credits for `account`.
    pub fn payload(account: &str, amount: i64) -> Vec<u8> {
        serde_json::to_vec(&Credit {
            account: account.to_owned(),
            amount,
        })
        .expect("a credit serializes")
    }

    /// The account a payload credits: the row its effect locks, so group commit's lanes and
    /// the Redis store's guard go by it ([`oncely_core::Handler::lock_key`]).
    pub fn lock_key(payload: &[u8]) -> Option<String> {
        Self::parse(payload).ok().map(|c| c.account)
    }
}

#[cfg(test)]
mod tests {
    use super::Credit;

    #[test]
    fn out_of_range_credits_are_refused() {
        assert!(Credit::parse(&Credit::payload("", 5)).is_err());
        assert!(Credit::parse(&Credit::payload(&"a".repeat(65), 5)).is_err());
        assert!(Credit::parse(&Credit::payload("a", 0)).is_err());
        assert!(Credit::parse(&Credit::payload("a", 1_000_001)).is_err());
        assert_eq!(
            Credit::lock_key(&Credit::payload("a", 1)).as_deref(),
            Some("a")
        );
    }
}
