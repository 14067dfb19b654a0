//! A handler that writes one ledger row per applied effect, with failure injection driven by
//! the payload and an optional gate that holds the first transaction open.

use oncely_core::{Envelope, Error, Handled, Handler, Result};
use oncely_sql::{AnyTx, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, Semaphore};

/// Holds the first handler call open until released.
pub struct Gate {
    entered: Notify,
    release: Semaphore,
    used: AtomicBool,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            entered: Notify::new(),
            release: Semaphore::new(0),
            used: AtomicBool::new(false),
        })
    }
    /// Waits until a handler is inside (holding its transaction open).
    pub async fn entered(&self) {
        self.entered.notified().await;
    }
    /// Lets the held handler go on.
    pub fn release(&self) {
        self.release.add_permits(1);
    }
}

/// Ledger handler. Payload conventions: `fail:permanent…` fails permanently, `fail:transient…`
/// fails transiently on every attempt, `flaky…` fails transiently on its first attempt only,
/// `panic…` panics. `gate_fails` makes the gated call fail permanently after release.
#[derive(Clone)]
pub struct Ledger {
    insert: String,
    instance: &'static str,
    gate: Option<Arc<Gate>>,
    gate_fails: bool,
    seen: Arc<Mutex<HashMap<String, u32>>>,
}

impl Ledger {
    /// A ledger handler on `table`.
    pub fn new(table: &str, instance: &'static str) -> Self {
        Self {
            insert: format!(
                "INSERT INTO {table} (message_id, payload, instance) VALUES ($1, $2, $3)"
            ),
            instance,
            gate: None,
            gate_fails: false,
            seen: Arc::default(),
        }
    }

    /// Holds the first call at `gate`; if `then_fail`, that call then fails permanently.
    pub fn gated(mut self, gate: Arc<Gate>, then_fail: bool) -> Self {
        self.gate = Some(gate);
        self.gate_fails = then_fail;
        self
    }

    async fn before(&self, msg: &Envelope) -> Result<()> {
        if let Some(gate) = &self.gate
            && !gate.used.swap(true, Ordering::SeqCst)
        {
            gate.entered.notify_one();
            gate.release.acquire().await.expect("open").forget();
            if self.gate_fails {
                return Err(Error::permanent("gated handler fails on purpose"));
            }
        }
        let payload = String::from_utf8_lossy(msg.payload()).into_owned();
        let calls = {
            let mut seen = self.seen.lock().unwrap();
            let n = seen.entry(msg.id().as_str().to_owned()).or_default();
            *n += 1;
            *n
        };
        if payload.starts_with("fail:permanent") {
            return Err(Error::permanent(format!("rejecting {}", msg.id())));
        }
        if payload.starts_with("fail:transient") {
            return Err(Error::transient(format!("always busy for {}", msg.id())));
        }
        if payload.starts_with("flaky") && calls == 1 {
            return Err(Error::transient(format!("busy once for {}", msg.id())));
        }
        if payload.starts_with("panic") {
            panic!("handler panics on {}", msg.id());
        }
        Ok(())
    }
}

/// The row a message adds: `(message_id, payload, instance)`.
fn row(ledger: &Ledger, msg: &Envelope) -> [Value; 3] {
    [
        msg.id().as_str().into(),
        String::from_utf8_lossy(msg.payload()).into_owned().into(),
        ledger.instance.into(),
    ]
}

impl Handler<AnyTx> for Ledger {
    async fn handle(&self, tx: &mut AnyTx, msg: &Envelope) -> Result<Handled> {
        self.before(msg).await?;
        tx.execute(&self.insert, &row(self, msg))
            .await
            .map_err(|e| Error::transient(format!("ledger insert: {e}")))?;
        Ok(Handled::Applied)
    }
}
