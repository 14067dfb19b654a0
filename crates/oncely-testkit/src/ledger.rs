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
    /// Hold the transaction open this long, then fail permanently; once (the next call for
    /// this id applies).
    HoldThenFail(Duration),
}

/// Writes `(message_id, amount)` through the harness, the amount parsed from the payload text.
pub struct LedgerHandler<H> {
    scripts: Arc<Mutex<HashMap<String, Script>>>,
    whole_batches: bool,
    _harness: PhantomData<fn() -> H>,
}

impl<H> Clone for LedgerHandler<H> {
    fn clone(&self) -> Self {
        Self {
            scripts: self.scripts.clone(),
            whole_batches: self.whole_batches,
            _harness: PhantomData,
        }
    }
}

impl<H> Default for LedgerHandler<H> {
    fn default() -> Self {
        Self {
            scripts: Arc::default(),
            whole_batches: false,
            _harness: PhantomData,
        }
    }
}

impl<H> LedgerHandler<H> {
    /// Under group commit, writes a group's effects in one [`Handler::handle_batch`] call (every
    /// effect first, then the scripts), as a handler with multi-row statements does; an error
    /// rolls the whole group back. The default handles the group's messages one by one.
    pub fn whole_batches(mut self) -> Self {
        self.whole_batches = true;
        self
    }

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
            Some(Script::HoldThenFail(d)) => {
                let d = *d;
                scripts.remove(id);
                Some(Script::HoldThenFail(d))
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
        H::add_effect(tx, message.id().as_str(), amount(message)?).await?;
        self.step(message).await
    }

    async fn handle_batch(
        &self,
        tx: &mut <H::Store as Store>::Tx,
        messages: &[Envelope],
    ) -> Result<Vec<Handled>> {
        let mut handled = Vec::with_capacity(messages.len());
        if !self.whole_batches {
            for message in messages {
                handled.push(Handler::handle(self, tx, message).await?);
            }
            return Ok(handled);
        }
        for message in messages {
            H::add_effect(tx, message.id().as_str(), amount(message)?).await?;
        }
        for message in messages {
            handled.push(self.step(message).await?);
        }
        Ok(handled)
    }
}

/// The amount a message's payload text holds.
fn amount(message: &Envelope) -> Result<i64> {
    let text = std::str::from_utf8(message.payload())
        .map_err(|_| Error::permanent("payload is not UTF-8"))?;
    text.trim()
        .parse()
        .map_err(|_| Error::permanent(format!("payload {text:?} is not an integer amount")))
}

impl<H> LedgerHandler<H> {
    /// What the script says for this message, after its effect was written.
    async fn step(&self, message: &Envelope) -> Result<Handled> {
        match self.take_step(message.id().as_str()) {
            None => Ok(Handled::Applied),
            Some(Script::FailTransient(_)) => Err(Error::transient("scripted transient failure")),
            Some(Script::FailPermanent) => Err(Error::permanent("scripted permanent failure")),
            Some(Script::Panic) => panic!("scripted panic"),
            Some(Script::Hold(d)) => {
                tokio::time::sleep(d).await;
                Ok(Handled::Applied)
            }
            Some(Script::HoldThenFail(d)) => {
                tokio::time::sleep(d).await;
                Err(Error::permanent("scripted failure after holding"))
            }
        }
    }
}
