//! The source contract: deliveries from a broker, acked only with a [`Committed`] proof
//! (or dropped on purpose with [`Delivery::discard`]).

use crate::envelope::RawEnvelope;
use crate::error::Result;
use crate::store::Committed;
use futures::future::BoxFuture;
use std::future::Future;

/// What a source needs to settle one delivery. Implemented by each broker adapter.
pub trait Acker: Send + Sync + 'static {
    /// Acknowledges: the broker must not deliver this message again.
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<()>>;
    /// Gives the message back for redelivery.
    fn nack(self: Box<Self>) -> BoxFuture<'static, Result<()>>;
}

/// One delivery of a message. Dropping it without settling leaves it unacked, so the
/// broker redelivers it.
pub struct Delivery {
    message: RawEnvelope,
    attempt: u32,
    acker: Box<dyn Acker>,
    defect: Option<String>,
}

impl Delivery {
    /// Wraps a received message. `attempt` is the broker's delivery count (1 for the first).
    pub fn new(message: RawEnvelope, attempt: u32, acker: Box<dyn Acker>) -> Self {
        Self {
            message,
            attempt,
            acker,
            defect: None,
        }
    }

    /// A delivery whose broker envelope could not be mapped: `message` holds what could be
    /// kept (at least the payload), `why` says what failed. The runtime dead-letters it with
    /// reason `undecodable_envelope` and acks it; it is never processed.
    pub fn undecodable(
        message: RawEnvelope,
        attempt: u32,
        acker: Box<dyn Acker>,
        why: impl Into<String>,
    ) -> Self {
        Self {
            defect: Some(why.into()),
            ..Self::new(message, attempt, acker)
        }
    }

    /// Why the envelope could not be mapped, for deliveries made with [`Delivery::undecodable`].
    pub fn defect(&self) -> Option<&str> {
        self.defect.as_deref()
    }

    /// The message as delivered.
    pub fn message(&self) -> &RawEnvelope {
        &self.message
    }

    /// The broker's delivery count, 1 for the first delivery (0 when the broker can't tell).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Acks after the commit that `proof` stands for. Only the runtime ([`Consumer`]) holds
    /// proofs, so this is the ack of a processed message.
    ///
    /// [`Consumer`]: crate::Consumer
    pub async fn ack(self, proof: Committed) -> Result<()> {
        let _ = proof;
        self.acker.ack().await
    }

    /// Acks without a proof: the message is dropped on purpose; nothing was committed. The
    /// broker will not deliver it again. For draining a source (demos, benchmarks of a
    /// broker alone, tests of a source), never for a message that was meant to be processed.
    ///
    /// ```
    /// use oncely_core::{MemorySource, RawEnvelope, Source};
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let mut source = MemorySource::new();
    /// source.publish(RawEnvelope::new("m-1", "5"));
    /// source.close();
    /// while let Some(delivery) = source.next().await.unwrap() {
    ///     delivery.discard().await.unwrap();
    /// }
    /// # });
    /// ```
    pub async fn discard(self) -> Result<()> {
        self.acker.ack().await
    }

    /// Asks the broker to redeliver.
    pub async fn nack(self) -> Result<()> {
        self.acker.nack().await
    }

    /// A delivery of the same message (attempt and defect too) whose acker `wrap` builds
    /// around this one, for source wrappers that watch or change settling (instrumentation,
    /// fault injection): the new acker decides what becomes of the original.
    ///
    /// ```
    /// use futures::future::BoxFuture;
    /// use oncely_core::{Acker, Delivery, MemorySource, RawEnvelope, Result, Source};
    ///
    /// /// Logs each ack, then acks the original.
    /// struct Logged(Delivery);
    /// impl Acker for Logged {
    ///     fn ack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
    ///         println!("acked {:?}", self.0.message().display_id());
    ///         Box::pin(self.0.discard())
    ///     }
    ///     fn nack(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
    ///         Box::pin(self.0.nack())
    ///     }
    /// }
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let mut source = MemorySource::new();
    /// source.publish(RawEnvelope::new("m-1", "5"));
    /// let delivery = source.next().await.unwrap().unwrap();
    /// let logged = delivery.relay(|original| Box::new(Logged(original)));
    /// assert_eq!(logged.message().display_id().as_deref(), Some("m-1"));
    /// logged.discard().await.unwrap();
    /// # });
    /// ```
    pub fn relay(self, wrap: impl FnOnce(Delivery) -> Box<dyn Acker>) -> Delivery {
        let (message, attempt, defect) = (self.message.clone(), self.attempt, self.defect.clone());
        Delivery {
            message,
            attempt,
            defect,
            acker: wrap(self),
        }
    }
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("id", &self.message.display_id())
            .field("attempt", &self.attempt)
            .finish()
    }
}

/// Runs a broker mapping and turns a panic inside it into an error message, so one hostile
/// envelope can never take the source loop down. Sources pass the error to
/// [`Delivery::undecodable`].
///
/// ```
/// use oncely_core::{RawEnvelope, map_envelope};
/// let ok = map_envelope(|| RawEnvelope::new("m-1", "5"));
/// assert!(ok.is_ok());
/// let err = map_envelope(|| -> RawEnvelope { panic!("timestamp out of range") });
/// assert!(err.unwrap_err().contains("timestamp out of range"));
/// ```
pub fn map_envelope(map: impl FnOnce() -> RawEnvelope) -> std::result::Result<RawEnvelope, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(map))
        .map_err(|panic| format!("mapping panicked: {}", crate::panic_message(&*panic)))
}

/// A stream of deliveries. `Ok(None)` means the source is exhausted (for finite sources).
pub trait Source: Send + 'static {
    /// Waits for the next delivery.
    ///
    /// Must be cancel-safe: a call dropped before it returns (a timeout around it, as
    /// [`StopWhenIdle`] does, or a `select!`) loses no delivery. A source whose read changes
    /// the broker's state (Redis `XREADGROUP`) keeps that read across calls, so the
    /// next call resumes it, rather than leaving what it took pending until a redelivery
    /// timeout.
    fn next(&mut self) -> impl Future<Output = Result<Option<Delivery>>> + Send;

    /// How many deliveries the consumer keeps in hand (its groups in flight and the next
    /// ones ready), told once before its first [`Source::next`]. A source whose broker pushes
    /// or fetches ahead (AMQP prefetch, NATS pull batch, Redis `COUNT`) sizes its read-ahead
    /// to it, unless its URL set one. Wrappers pass it on. The default ignores it.
    fn read_ahead(&mut self, deliveries: usize) {
        let _ = deliveries;
    }
}

/// Ends a source after `idle` passes without a delivery: for batch jobs, demos and tests
/// over brokers whose streams never end.
///
/// ```
/// use oncely_core::{MemorySource, Source, StopWhenIdle};
/// use std::time::Duration;
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let mut source = StopWhenIdle::new(MemorySource::new(), Duration::from_millis(10));
/// assert!(source.next().await.unwrap().is_none());
/// # });
/// ```
pub struct StopWhenIdle<S> {
    inner: S,
    idle: std::time::Duration,
}

impl<S: Source> StopWhenIdle<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, idle: std::time::Duration) -> Self {
        Self { inner, idle }
    }

    /// The wrapped source.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Source> Source for StopWhenIdle<S> {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        match tokio::time::timeout(self.idle, self.inner.next()).await {
            Ok(next) => next,
            Err(_) => Ok(None),
        }
    }

    fn read_ahead(&mut self, deliveries: usize) {
        self.inner.read_ahead(deliveries);
    }
}
