//! [`SimHandler`]: the run's handler.

use super::{SimStore, SimTx, Versions};
use crate::world::{StoreState, World};
use oncely_core::{Envelope, Error, Handled, Handler, Result};
use std::sync::{Arc, Mutex};

/// The run's handler: writes `(id, amount)` through the reference store's transaction,
/// with versioned apply for versioned messages, and fails as the plan says.
#[derive(Clone)]
pub struct SimHandler {
    world: World,
    versions: Arc<Mutex<Versions>>,
    /// Plant `versions-ignored`: apply every version, newer or not.
    pub ignore_versions: bool,
}

impl SimHandler {
    /// The handler over `store`'s version table.
    pub fn new(world: World, store: &SimStore) -> Self {
        Self {
            world,
            versions: store.versions.clone(),
            ignore_versions: false,
        }
    }
}

impl Handler<SimTx> for SimHandler {
    async fn handle(&self, tx: &mut SimTx, message: &Envelope) -> Result<Handled> {
        let id = message.id().as_str();
        let plan = &self.world.plan;
        let msg = plan.msgs.iter().find(|m| m.id == id);
        if msg.is_some_and(|m| m.panics) {
            std::panic::resume_unwind(Box::new(format!("sim: handler panics on {id}")));
        }
        if msg.is_some_and(|m| m.poison) {
            return Err(Error::permanent(format!("sim: {id} is poison")));
        }
        if self
            .world
            .chance(&format!("transient:{id}"), plan.transient_rate, 6)
        {
            self.world.mark("fault: handler transient error");
            return Err(Error::transient("sim: transient handler failure"));
        }
        if self.world.store_state() != StoreState::Up {
            self.world.mark("fault: handler write refused");
            return Err(Error::unavailable("sim: read-only (handler's write)"));
        }
        let text = std::str::from_utf8(message.payload()).unwrap_or("0");
        let amount: i64 = text.parse().unwrap_or(0);
        let meta = message.meta();
        if let (Some(key), Some(version)) = (&meta.entity_key, meta.version) {
            let pending = tx
                .versions
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| *v);
            let committed = self
                .versions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .current
                .get(key)
                .copied();
            let newest = pending.or(committed).unwrap_or(0);
            if version <= newest && !self.ignore_versions {
                tx.stale.push(id.to_owned());
                self.world.mark("path: versioned stale");
                return Ok(Handled::Stale);
            }
            tx.versions.push((key.clone(), version));
        }
        tx.memory().add_effect(id, amount);
        Ok(Handled::Applied)
    }
}
