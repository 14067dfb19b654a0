//! The handlers replay runs, by consumer name, their types erased.

use futures::future::BoxFuture;
use oncely_core::{Handler, Result};
use oncely_ops::Ops;
use oncely_ops::replay::{self, ReplayOptions, Replayed};
use oncely_sql::{AnyStore, AnyTx};
use std::collections::HashMap;
use std::sync::Arc;

/// One registered handler.
pub(crate) trait Replayer: Send + Sync {
    fn replay<'a>(
        &'a self,
        ops: &'a Ops,
        store: &'a AnyStore,
        id: i64,
        options: &'a ReplayOptions,
    ) -> BoxFuture<'a, Result<Replayed>>;
}

struct With<H>(H);

impl<H: Handler<AnyTx> + Clone> Replayer for With<H> {
    fn replay<'a>(
        &'a self,
        ops: &'a Ops,
        store: &'a AnyStore,
        id: i64,
        options: &'a ReplayOptions,
    ) -> BoxFuture<'a, Result<Replayed>> {
        Box::pin(replay::replay(
            ops,
            Arc::new(store.clone()),
            self.0.clone(),
            id,
            options,
        ))
    }
}

/// Handlers by consumer, and the one for every other consumer.
#[derive(Default)]
pub(crate) struct Replayers {
    by_consumer: HashMap<String, Arc<dyn Replayer>>,
    fallback: Option<Arc<dyn Replayer>>,
}

impl Replayers {
    pub fn add<H: Handler<AnyTx> + Clone>(&mut self, consumer: Option<String>, handler: H) {
        let r: Arc<dyn Replayer> = Arc::new(With(handler));
        match consumer {
            Some(c) => {
                self.by_consumer.insert(c, r);
            }
            None => self.fallback = Some(r),
        }
    }

    /// The handler for `consumer`'s dead letters, if any.
    pub fn get(&self, consumer: &str) -> Option<Arc<dyn Replayer>> {
        self.by_consumer
            .get(consumer)
            .or(self.fallback.as_ref())
            .cloned()
    }

    /// True when no handler is registered (replay is then not offered).
    pub fn is_empty(&self) -> bool {
        self.by_consumer.is_empty() && self.fallback.is_none()
    }
}
