//! [`SimSource`]: the reference source as one consumer process sees it.

use crate::world::World;
use futures::FutureExt;
use futures::future::BoxFuture;
use oncely_core::{Acker, Delivery, Error, Inspect, PayloadHash, Result, Source};
use oncely_testkit::{FaultySource, MemoryStore};

/// The reference source ([`FaultySource`] over the memory broker) as one consumer process sees it: crashes at receipt and
/// after the ack; every ack is checked against the store first (no ack before its commit).
pub struct SimSource {
    inner: FaultySource,
    world: World,
    store: MemoryStore,
    worker: usize,
}

impl SimSource {
    /// Worker `worker`'s view of the shared `inner` source, checked against `store`.
    pub fn new(inner: FaultySource, world: World, store: MemoryStore, worker: usize) -> Self {
        Self {
            inner,
            world,
            store,
            worker,
        }
    }
}

impl Source for SimSource {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        loop {
            if self
                .world
                .chance("broker-error", self.world.plan.broker_fault_rate, 200)
            {
                self.world.mark("fault: broker connection lost");
                self.world.event(format!("w{} source error", self.worker));
                return Err(Error::transient("sim: broker connection lost"));
            }
            let Some(delivery) = self.inner.next().await? else {
                return Ok(None);
            };
            let id = delivery.message().display_id().unwrap_or_default();
            let attempt = delivery.attempt();
            self.world
                .event(format!("w{} receive {id:?} #{attempt}", self.worker));
            if attempt > 1 {
                self.world.mark("path: redelivery");
            }
            let crashed = AssertCrash::run(|| self.world.maybe_crash("receive", &id));
            if crashed {
                self.world.count("dropped at receipt");
                self.world.event(format!("w{} dropped {id:?}", self.worker));
                drop(delivery);
                continue;
            }
            let (world, store) = (self.world.clone(), self.store.clone());
            let plan = &self.world.plan;
            let hostile = plan.msgs.iter().any(|m| m.hostile && m.id == id);
            let message = delivery.message().clone();
            let checked = CheckedAck {
                original: delivery,
                world,
                store,
            };
            if hostile {
                // The broker mapping failed on this envelope (a header out of range).
                self.world.mark("fault: undecodable envelope");
                let why = "sim: timestamp header out of range";
                return Ok(Some(Delivery::undecodable(
                    message,
                    attempt,
                    Box::new(checked),
                    why,
                )));
            }
            return Ok(Some(Delivery::new(message, attempt, Box::new(checked))));
        }
    }

    fn read_ahead(&mut self, deliveries: usize) {
        self.inner.read_ahead(deliveries);
    }
}

/// Runs `f`, telling whether it crashed (a crash at receipt is counted, not propagated:
/// the source drops the delivery as a dying process would and goes on).
struct AssertCrash;

impl AssertCrash {
    fn run(f: impl FnOnce()) -> bool {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err()
    }
}

/// Checks, at the ack, that the store holds what the ack stands for: the inbox claim with
/// this copy's payload hash, or a dead-letter row of this copy.
struct CheckedAck {
    original: Delivery,
    world: World,
    store: MemoryStore,
}

/// Whether `store` holds this copy's claim or its dead letter, read from the store's state.
pub fn settled_in_store(store: &MemoryStore, id: Option<&str>, payload: &[u8]) -> bool {
    let hash = PayloadHash::of(payload);
    let consumer = crate::run::consumer_name();
    if let Some(id) = id {
        let held = store
            .claimed_hash(&consumer, id)
            .now_or_never()
            .and_then(|r| r.ok())
            .flatten();
        if held == Some(hash) {
            return true;
        }
    }
    let letters = store
        .dead_letters(Some(&consumer))
        .now_or_never()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    let raw = id.map(|s| s.as_bytes().to_vec());
    letters
        .iter()
        .any(|l| l.raw_id == raw && l.payload_hash == hash.to_hex())
}

impl Acker for CheckedAck {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        Box::pin(async move {
            let message = self.original.message().clone();
            let id = message.display_id().unwrap_or_default();
            if !settled_in_store(
                &self.store,
                message
                    .id
                    .as_deref()
                    .and_then(|b| std::str::from_utf8(b).ok()),
                &message.payload,
            ) {
                self.world.violation(format!(
                    "ack before commit: {id:?} (payload {:?}) acked while the store holds neither its claim nor its dead letter",
                    String::from_utf8_lossy(&message.payload)
                ));
            }
            let what = format!("ack-fails:{id}");
            if self
                .world
                .chance(&what, self.world.plan.broker_fault_rate, 2)
            {
                // Committed, not acked: the broker redelivers (a duplicate).
                self.world.mark("fault: ack failed");
                self.world.event(format!("ack {id:?} failed"));
                drop(self.original);
                return Err(Error::transient("sim: ack failed, connection lost"));
            }
            self.world.event(format!("ack {id:?}"));
            self.original.discard().await?;
            self.world.maybe_crash("ack", &id);
            Ok(())
        })
    }

    fn nack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        self.world.mark("path: nack at shutdown");
        Box::pin(self.original.nack())
    }
}
