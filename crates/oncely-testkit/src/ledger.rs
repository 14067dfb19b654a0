//! The suite's handler: writes one ledger row per message, with scripted misbehaviour.

use crate::harness::StoreHarness;
use oncely_core::{Envelope, Error, Handled, Handler, Result, Store};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the handler misbehaves for one message id (after writing its effect, so that
/// rollback is what removes it).
#[derive(Debug, Clone)]
pub enum Script {
    /// Fail transiently this many times, then succeed.
    FailTransient(u32),
    /// Fail permanently.
    FailPermanent,
    /// Panic.
    Panic,
    /// Hold the transaction open this long before returning.
    Hold(Duration),
}

/// Writes `(message_id, amount)` through the harness, the amount parsed from the payload text.
pub struct LedgerHandler<H> {
    scripts: Arc<Mutex<HashMap<String, Script>>>,
    _harness: PhantomData<fn() -> H>,
}

impl<H> Clone for LedgerHandler<H> {
    fn clone(&self) -> Self {
        Self {
            scripts: self.scripts.clone(),
            _harness: PhantomData,
        }
    }
}

impl<H> Default for LedgerHandler<H> {
    fn default() -> Self {
        Self {
            scripts: Arc::default(),
            _harness: PhantomData,
        }
    }
}

impl<H> LedgerHandler<H> {
    /// Scripts the behaviour for one id.
    pub fn script(&self, id: &str, script: Script) {
        self.scripts
            .lock()
            .expect("scripts lock")
            .insert(id.to_owned(), script);
    }

    fn take_step(&self, id: &str) -> Option<Script> {
        let mut scripts = self.scripts.lock().expect("scripts lock");
        match scripts.get_mut(id) {
            Some(Script::FailTransient(0)) => None,
            Some(Script::FailTransient(n)) => {
                *n -= 1;
                Some(Script::FailTransient(*n + 1))
            }
            Some(other) => Some(other.clone()),
            None => None,
        }
    }
}

impl<H: StoreHarness> Handler<<H::Store as Store>::Tx> for LedgerHandler<H> {
    async fn handle(
        &self,
        tx: &mut <H::Store as Store>::Tx,
        message: &Envelope,
    ) -> Result<Handled> {
        let text = std::str::from_utf8(message.payload())
            .map_err(|_| Error::permanent("payload is not UTF-8"))?;
        let amount: i64 = text
            .trim()
            .parse()
            .map_err(|_| Error::permanent(format!("payload {text:?} is not an integer amount")))?;
        H::add_effect(tx, message.id().as_str(), amount).await?;
        match self.take_step(message.id().as_str()) {
            None => Ok(Handled::Applied),
            Some(Script::FailTransient(_)) => Err(Error::transient("scripted transient failure")),
            Some(Script::FailPermanent) => Err(Error::permanent("scripted permanent failure")),
            Some(Script::Panic) => panic!("scripted panic"),
            Some(Script::Hold(d)) => {
                tokio::time::sleep(d).await;
                Ok(Handled::Applied)
            }
        }
    }
}
