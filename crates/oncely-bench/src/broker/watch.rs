//! Where the time goes on oncely's path from a source to its commits, measured in the cells
//! that run oncely at its defaults (through a broker, and in process beside it):
//!
//! - the groups the runtime actually committed: how many, how many messages each, and how
//!   long each transaction took (`oncely.group_commit` spans, begin to commit); the other
//!   messages of the run went alone;
//! - how long the runtime's reader waited inside `Source::next` (the source's own cost and
//!   the time the broker kept it waiting);
//! - how long each ack took, from the runtime's call to the source's answer.
//!
//! The spans are read by a [`tracing`] layer that enables that span and nothing else (every
//! other callsite stays disabled, as without a subscriber).

use futures::future::BoxFuture;
use oncely_core::{Acker, Delivery, Source};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tracing::span::{Attributes, Id};
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

const GROUP_SPAN: &str = "oncely.group_commit";

/// What one run of oncely's consumer spent where (sums; see the module docs).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PathStats {
    /// Wall time of the timed run(s), ms.
    pub wall_ms: f64,
    /// Group commits (one transaction each).
    pub groups: u64,
    /// Messages settled in those groups.
    pub grouped: u64,
    /// Messages per group commit.
    pub mean_group: f64,
    /// Messages settled one at a time (a group of one, or a fallback).
    pub singles: u64,
    /// Sum of the group transactions' durations (begin to commit), ms.
    pub group_ms: f64,
    /// Mean duration of one group transaction, ms.
    pub mean_group_ms: f64,
    /// Time the runtime's reader spent inside `Source::next`, ms.
    pub source_ms: f64,
    /// Share of the wall time the reader spent inside `Source::next`.
    pub source_share: f64,
    /// From the start of the run to the first delivery, ms (summed over rounds).
    pub first_delivery_ms: f64,
    /// Acks answered.
    pub acks: u64,
    /// Mean time from the runtime's ack to the source's answer, ms.
    pub mean_ack_ms: f64,
    /// Longest ack, ms.
    pub max_ack_ms: f64,
    #[serde(skip)]
    ack_ms: f64,
}

impl PathStats {
    fn finish(mut self) -> Self {
        self.mean_group = self.grouped as f64 / (self.groups.max(1)) as f64;
        self.mean_group_ms = self.group_ms / (self.groups.max(1)) as f64;
        self.source_share = self.source_ms / self.wall_ms.max(1e-9);
        self.mean_ack_ms = self.ack_ms / (self.acks.max(1)) as f64;
        self
    }

    /// Two runs' sums together.
    pub(crate) fn merge(self, o: PathStats) -> PathStats {
        merged!(self, o => PathStats {
            sum: [wall_ms, groups, grouped, singles, group_ms, source_ms, first_delivery_ms, acks, ack_ms],
            max: [max_ack_ms],
            all: [],
            rest: PathStats::default()
        })
        .finish()
    }
}

/// Counters of one run, shared by the source wrapper, its ackers and the span layer.
#[derive(Default)]
struct Tally {
    groups: AtomicU64,
    grouped: AtomicU64,
    group_ns: AtomicU64,
    next_ns: AtomicU64,
    acks: AtomicU64,
    ack_ns: AtomicU64,
    ack_max_ns: AtomicU64,
    /// When the source handed out its first delivery.
    first: Arc<OnceLock<Instant>>,
    /// When the latest ack was answered.
    last_ack: Mutex<Option<Instant>>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn ms(ns: &AtomicU64) -> f64 {
    ns.load(Relaxed) as f64 / 1e6
}

/// The run being watched (one at a time: cells run one after another).
static CURRENT: Mutex<Option<Arc<Tally>>> = Mutex::new(None);

fn current() -> Option<Arc<Tally>> {
    CURRENT.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Installs the span layer as the global subscriber, once; `false` if another subscriber
/// was installed first (the group figures then stay 0).
fn install() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Spans)).is_ok()
    })
}

/// Watches one run: wrap its source with [`Watch::source`], then [`Watch::finish`].
pub(crate) struct Watch {
    tally: Arc<Tally>,
    started: Instant,
}

impl Watch {
    /// Starts watching (the spans of any consumer count from now until [`Watch::finish`]).
    pub(crate) fn start() -> Self {
        install();
        let tally = Arc::new(Tally::default());
        *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = Some(tally.clone());
        Self {
            tally,
            started: Instant::now(),
        }
    }

    /// `source`, timed in `next` and in each delivery's ack.
    pub(crate) fn source<S: Source>(&self, source: S) -> Watched<S> {
        Watched {
            inner: source,
            tally: self.tally.clone(),
        }
    }

    /// When the last ack of the run was answered (the end of the timed phase: the source's
    /// close after it, e.g. a Kafka consumer leaving its group, is not message work, and the
    /// bare consumers' times do not include theirs either).
    pub(crate) fn last_ack(&self) -> Option<Instant> {
        *self
            .tally
            .last_ack
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Stops watching; the sums over a run of `messages` in `wall`.
    pub(crate) fn finish(self, messages: usize, wall: Duration) -> PathStats {
        *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let t = &self.tally;
        PathStats {
            wall_ms: wall.as_secs_f64() * 1e3,
            groups: t.groups.load(Relaxed),
            grouped: t.grouped.load(Relaxed),
            singles: (messages as u64).saturating_sub(t.grouped.load(Relaxed)),
            group_ms: ms(&t.group_ns),
            source_ms: ms(&t.next_ns),
            acks: t.acks.load(Relaxed),
            ack_ms: ms(&t.ack_ns),
            max_ack_ms: ms(&t.ack_max_ns),
            first_delivery_ms: t
                .first
                .get()
                .map_or(0.0, |f| f.duration_since(self.started).as_secs_f64() * 1e3),
            ..PathStats::default()
        }
        .finish()
    }
}

/// A source whose `next` and acks are timed.
pub(crate) struct Watched<S> {
    inner: S,
    tally: Arc<Tally>,
}

impl<S> Watched<S> {
    /// Set when the source hands out its first delivery.
    pub(crate) fn first_delivery(&self) -> Arc<OnceLock<Instant>> {
        self.tally.first.clone()
    }
}

impl<S: Source> Source for Watched<S> {
    async fn next(&mut self) -> oncely_core::Result<Option<Delivery>> {
        let started = Instant::now();
        let next = self.inner.next().await;
        self.tally
            .next_ns
            .fetch_add(nanos(started.elapsed()), Relaxed);
        let Some(delivery) = next? else {
            return Ok(None);
        };
        self.tally.first.get_or_init(Instant::now);
        let tally = self.tally.clone();
        Ok(Some(
            delivery.relay(|inner| Box::new(TimedAck { inner, tally })),
        ))
    }

    fn read_ahead(&mut self, deliveries: usize) {
        self.inner.read_ahead(deliveries);
    }
}

struct TimedAck {
    inner: Delivery,
    tally: Arc<Tally>,
}

impl Acker for TimedAck {
    fn ack(self: Box<Self>) -> BoxFuture<'static, oncely_core::Result<()>> {
        Box::pin(async move {
            let started = Instant::now();
            // The runtime's ack carried its proof; the original is acked on its behalf.
            let acked = self.inner.discard().await;
            let took = nanos(started.elapsed());
            self.tally.acks.fetch_add(1, Relaxed);
            self.tally.ack_ns.fetch_add(took, Relaxed);
            self.tally.ack_max_ns.fetch_max(took, Relaxed);
            let now = Instant::now();
            let mut last = self
                .tally
                .last_ack
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            *last = Some(last.map_or(now, |l| l.max(now)));
            drop(last);
            acked
        })
    }

    fn nack(self: Box<Self>) -> BoxFuture<'static, oncely_core::Result<()>> {
        Box::pin(self.inner.nack())
    }
}

/// The span layer: times `oncely.group_commit` and reads its `size`; every other callsite
/// is disabled.
struct Spans;

fn watched(meta: &Metadata<'_>) -> bool {
    meta.is_span() && meta.name() == GROUP_SPAN
}

/// When a group's span opened, and the group's size.
struct Opened {
    at: Instant,
    size: u64,
}

struct Size(u64);

impl tracing::field::Visit for Size {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        if field.name() == "size" {
            self.0 = value;
        }
    }

    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.record_u64(field, u64::try_from(value).unwrap_or(0));
    }

    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if watched(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>, _: Context<'_, S>) -> bool {
        watched(meta)
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut size = Size(1);
        attrs.record(&mut size);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Opened {
                at: Instant::now(),
                size: size.0,
            });
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(tally) = current() else { return };
        let extensions = span.extensions();
        let Some(opened) = extensions.get::<Opened>() else {
            return;
        };
        tally.groups.fetch_add(1, Relaxed);
        tally.grouped.fetch_add(opened.size, Relaxed);
        tally
            .group_ns
            .fetch_add(nanos(opened.at.elapsed()), Relaxed);
    }
}
