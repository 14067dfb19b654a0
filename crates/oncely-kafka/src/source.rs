//! [`KafkaSource`]: a consumer group as an oncely [`Source`], committing offsets only
//! after the database commit, contiguously per partition.

use crate::mapping::envelope_of;
use crate::options::KafkaOptions;
use crate::tracker::{Registered, Ticket, Tp, Tracker};
use futures::future::BoxFuture;
use oncely_core::{Acker, Delivery, Error, RawEnvelope, Result, Source};
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

pub(crate) fn kafka_err(what: &str, e: rdkafka::error::KafkaError) -> Error {
    Error::transient(format!("Kafka: {what}")).with_source(e)
}

/// State shared by the source, its ackers, its committer and the rebalance callbacks.
struct Shared {
    tracker: Mutex<Tracker>,
    /// Given-back records waiting to be handed out again, with their contents (Kafka has
    /// no per-record nack; seeking back would refetch the whole partition). Locked only
    /// while `tracker` is held, so the two always agree.
    parked: Mutex<VecDeque<(Ticket, RawEnvelope)>>,
    /// Woken when a record was parked.
    parked_ready: Notify,
    /// Signalled whenever a delivery is settled (rebalances wait on it).
    settled: Condvar,
    /// Woken when a commit position moved.
    commit_wanted: Notify,
    revoke_wait: Duration,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Tracker> {
        self.tracker.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn parked(&self) -> MutexGuard<'_, VecDeque<(Ticket, RawEnvelope)>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next parked record that still needs a delivery, with its attempt number.
    fn unpark(&self) -> Option<(Ticket, RawEnvelope, u32)> {
        let mut tracker = self.lock();
        let mut parked = self.parked();
        while let Some((ticket, raw)) = parked.pop_front() {
            if let Some(attempt) = tracker.redeliver(&ticket) {
                return Some((ticket, raw, attempt));
            }
        }
        None
    }

    /// Waits (up to `revoke_wait`) until no delivery of `tps` is in flight.
    fn wait_settled(&self, tps: &[Tp]) {
        let wait = || {
            let deadline = Instant::now() + self.revoke_wait;
            let mut tracker = self.lock();
            loop {
                let n: u32 = tps.iter().map(|tp| tracker.in_flight(tp)).sum();
                if n == 0 {
                    return;
                }
                let now = Instant::now();
                if now >= deadline {
                    warn!(
                        in_flight = n,
                        "Kafka: revoke_wait elapsed; letting the partitions go (the new owner sees them as duplicates if they commit)"
                    );
                    return;
                }
                tracker = self
                    .settled
                    .wait_timeout(tracker, deadline - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        };
        match Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(RuntimeFlavor::CurrentThread) => {
                let n: u32 = tps.iter().map(|tp| self.lock().in_flight(tp)).sum();
                if n > 0 {
                    warn!(
                        in_flight = n,
                        "Kafka: rebalance on a current-thread runtime cannot wait for in-flight deliveries; they will be redelivered to the new owner"
                    );
                }
            }
            _ => blocking(wait),
        }
    }
}

/// Runs blocking work (a synchronous commit, a wait) without stalling the Tokio worker's
/// other tasks: `block_in_place` on a multi-thread runtime, directly elsewhere.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

fn tps_of(tpl: &TopicPartitionList) -> Vec<Tp> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

fn tpl_of(positions: impl IntoIterator<Item = (Tp, i64)>) -> Result<TopicPartitionList> {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), offset) in positions {
        tpl.add_partition_offset(&topic, partition, Offset::Offset(offset))
            .map_err(|e| kafka_err("building the commit list", e))?;
    }
    Ok(tpl)
}

fn tpl_positions(batch: &[(Ticket, i64)]) -> Vec<(i32, i64)> {
    batch.iter().map(|(t, o)| (t.tp.1, *o)).collect()
}

/// Commits every partition's done position that moved since the last commit.
fn commit_dirty<C: Consumer<KafkaContext>>(shared: &Shared, consumer: &C) -> Result<usize> {
    let batch = shared.lock().take_dirty();
    if batch.is_empty() {
        return Ok(0);
    }
    let tpl = tpl_of(batch.iter().map(|(t, o)| (t.tp.clone(), *o)))?;
    match consumer.commit(&tpl, CommitMode::Sync) {
        Ok(()) => {
            debug!(positions = ?tpl_positions(&batch), "Kafka: offsets committed");
            Ok(batch.len())
        }
        Err(e) => {
            shared.lock().commit_failed(&batch);
            Err(kafka_err("offset commit", e))
        }
    }
}

/// The consumer context: on a revoke, waits for the revoked partitions' in-flight
/// deliveries, then commits what committed; on an assign, starts fresh offset state.
pub struct KafkaContext {
    shared: Arc<Shared>,
}

impl ClientContext for KafkaContext {}

impl ConsumerContext for KafkaContext {
    fn pre_rebalance(&self, base: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        let tps = tps_of(tpl);
        self.shared.wait_settled(&tps);
        let positions: Vec<(Tp, i64)> = {
            let mut tracker = self.shared.lock();
            tps.iter()
                .filter_map(|tp| tracker.revoke(tp).map(|o| (tp.clone(), o)))
                .collect()
        };
        if positions.is_empty() {
            info!(partitions = tps.len(), "Kafka: partitions revoked");
            return;
        }
        let result = tpl_of(positions.clone()).and_then(|tpl| {
            blocking(|| base.commit(&tpl, CommitMode::Sync))
                .map_err(|e| kafka_err("commit on revoke", e))
        });
        match result {
            Ok(()) => {
                info!(partitions = tps.len(), committed = ?positions, "Kafka: partitions revoked after committing finished deliveries")
            }
            Err(e) => {
                warn!(error = %e, "Kafka: commit on revoke failed; the new owner will see duplicates")
            }
        }
    }

    fn post_rebalance(&self, base: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let tps = tps_of(tpl);
                info!(partitions = ?tps, "Kafka: partitions assigned");
                self.shared.lock().assign(tps);
                // Where each partition should resume, to catch a broker that skips records.
                match blocking(|| base.committed_offsets((*tpl).clone(), Duration::from_secs(10))) {
                    Ok(committed) => {
                        let mut tracker = self.shared.lock();
                        for e in committed.elements() {
                            if let Offset::Offset(o) = e.offset() {
                                tracker.expect_start(&(e.topic().to_owned(), e.partition()), o);
                            }
                        }
                    }
                    Err(e) => debug!(error = %e, "Kafka: reading committed offsets failed"),
                }
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => warn!(error = %e, "Kafka: rebalance error"),
        }
    }

    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        _offsets: &TopicPartitionList,
    ) {
        if let Err(e) = result {
            debug!(error = %e, "Kafka: commit callback reported an error");
        }
    }
}

type Inner = StreamConsumer<KafkaContext>;

/// A Kafka consumer group as a [`Source`].
///
/// - `enable.auto.commit` is off: the offset of a record is committed only after its
///   delivery was acked, i.e. after the database transaction that claimed it committed.
/// - Per partition, the commit position only moves over a contiguous run of acked
///   offsets: while an earlier record of the partition is in flight (or was given back),
///   no later offset is committed, however many later records are done.
/// - Acks are gathered for [`KafkaOptions::commit_interval`] and committed together by a
///   background task (a crash before that commit redelivers them; they are then skipped
///   as `Duplicate`).
/// - A nack — or a delivery dropped unsettled, as by a crashed task — hands the record
///   out again from a copy kept by its delivery (with `attempt` + 1), without seeking:
///   the partition's later records keep flowing and are not fetched twice.
/// - On a rebalance, the revoked partitions' in-flight deliveries are waited for (up to
///   [`KafkaOptions::revoke_wait`], on a multi-thread runtime), their offsets committed,
///   and only then are the partitions released.
///
/// `attempt` counts deliveries of a record seen by this process (Kafka keeps no
/// delivery count): 1 after a restart or a rebalance.
pub struct KafkaSource {
    consumer: Arc<Inner>,
    shared: Arc<Shared>,
    options: KafkaOptions,
    committer: tokio::task::JoinHandle<()>,
    seen_any: bool,
}

impl KafkaSource {
    /// Creates the consumer, subscribes to the topics and starts the committer. Group
    /// membership and partition assignment happen on the first [`Source::next`].
    /// Must be called within a Tokio runtime.
    pub async fn connect(options: KafkaOptions) -> Result<Self> {
        let shared = Arc::new(Shared {
            tracker: Mutex::new(Tracker::default()),
            parked: Mutex::new(VecDeque::new()),
            parked_ready: Notify::new(),
            settled: Condvar::new(),
            commit_wanted: Notify::new(),
            revoke_wait: options.revoke_wait,
        });
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &options.brokers)
            .set("group.id", &options.group)
            .set("client.id", format!("oncely:{}", options.group))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false");
        for (k, v) in &options.client {
            config.set(k, v);
        }
        let context = KafkaContext {
            shared: shared.clone(),
        };
        let consumer: Inner = config
            .create_with_context(context)
            .map_err(|e| Error::config("Kafka: creating the consumer").with_source(e))?;
        let topics: Vec<&str> = options.topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(|e| Error::config("Kafka: subscribe").with_source(e))?;
        let consumer = Arc::new(consumer);
        let committer = tokio::spawn(committer(
            shared.clone(),
            Arc::downgrade(&consumer),
            options.commit_interval,
        ));
        Ok(Self {
            consumer,
            shared,
            options,
            committer,
            seen_any: false,
        })
    }

    /// The options in use.
    pub fn options(&self) -> &KafkaOptions {
        &self.options
    }

    /// Commits the done positions now (normally the background committer does it).
    pub async fn commit_now(&self) -> Result<usize> {
        let shared = self.shared.clone();
        let consumer = self.consumer.clone();
        tokio::task::spawn_blocking(move || commit_dirty(&shared, &*consumer))
            .await
            .map_err(|e| Error::transient("Kafka: commit task failed").with_source(e))?
    }

    /// Deliveries handed out and not yet settled.
    pub fn in_flight(&self) -> u32 {
        self.shared.lock().total_in_flight()
    }

    /// True when the source may end: partitions were assigned (or records seen), none is
    /// in flight and none waits to be handed out again.
    fn idle(&self) -> bool {
        if !self.seen_any && !self.shared.lock().ever_assigned() {
            return false;
        }
        let tracker = self.shared.lock();
        tracker.total_in_flight() == 0 && self.shared.parked().is_empty()
    }

    /// Hands out a record: tracked under `ticket`, settled through the returned delivery.
    fn deliver(&mut self, ticket: Ticket, raw: RawEnvelope, attempt: u32) -> Delivery {
        self.seen_any = true;
        let acker = KafkaAcker {
            shared: self.shared.clone(),
            ticket: Some(ticket),
            copy: Some(raw.clone()),
        };
        Delivery::new(raw, attempt, Box::new(acker))
    }

    /// Waits for the next record from the broker, or for a parked one.
    async fn receive(&self) -> Option<rdkafka::error::KafkaResult<RawReceived>> {
        tokio::select! {
            biased;
            _ = self.shared.parked_ready.notified() => None,
            m = self.consumer.recv() => Some(m.map(|m| RawReceived::of(&m))),
        }
    }
}

/// A received record, detached from the consumer.
struct RawReceived {
    tp: Tp,
    offset: i64,
    raw: RawEnvelope,
}

impl RawReceived {
    fn of(message: &rdkafka::message::BorrowedMessage<'_>) -> Self {
        let headers: Vec<(&str, Option<&[u8]>)> = message
            .headers()
            .map(|h| h.iter().map(|h| (h.key, h.value)).collect())
            .unwrap_or_default();
        Self {
            tp: (message.topic().to_owned(), message.partition()),
            offset: message.offset(),
            raw: envelope_of(
                headers,
                message.payload().unwrap_or_default().to_vec(),
                message.timestamp().to_millis(),
            ),
        }
    }
}

async fn committer(shared: Arc<Shared>, consumer: Weak<Inner>, interval: Duration) {
    loop {
        shared.commit_wanted.notified().await;
        tokio::time::sleep(interval).await;
        let Some(consumer) = consumer.upgrade() else {
            return;
        };
        let s = shared.clone();
        let done = tokio::task::spawn_blocking(move || commit_dirty(&s, &*consumer)).await;
        if let Ok(Err(e)) = done {
            warn!(error = %e, "Kafka: offset commit failed; retrying");
            tokio::time::sleep(Duration::from_millis(500)).await;
            shared.commit_wanted.notify_one();
        }
    }
}

impl Drop for KafkaSource {
    /// Commits what is done, then leaves the group (closing the consumer revokes its
    /// partitions, which commits again if anything moved).
    fn drop(&mut self) {
        self.committer.abort();
        if let Err(e) = blocking(|| commit_dirty(&self.shared, &*self.consumer)) {
            warn!(error = %e, "Kafka: final offset commit failed");
        }
    }
}

impl Source for KafkaSource {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        loop {
            if let Some((ticket, raw, attempt)) = self.shared.unpark() {
                return Ok(Some(self.deliver(ticket, raw, attempt)));
            }
            let received = match self.options.idle_exit {
                None => self.receive().await,
                Some(idle) => match tokio::time::timeout(idle, self.receive()).await {
                    Ok(received) => received,
                    Err(_) if self.idle() => return Ok(None),
                    Err(_) => continue,
                },
            };
            let Some(received) = received else {
                continue; // a record was parked
            };
            let r = received.map_err(|e| kafka_err("receive", e))?;
            let registered = {
                let mut tracker = self.shared.lock();
                if let Some((from, to)) = tracker.gap_before(&r.tp, r.offset) {
                    warn!(
                        topic = r.tp.0,
                        partition = r.tp.1,
                        committed = from,
                        first_received = to,
                        "Kafka: the broker skipped {} offset(s) after the committed one; a few are normal \
                         (transaction markers, compaction), more mean the broker lost records",
                        to - from
                    );
                }
                tracker.register(&r.tp, r.offset)
            };
            match registered {
                Registered::Track { ticket, attempt } => {
                    return Ok(Some(self.deliver(ticket, r.raw, attempt)));
                }
                Registered::NotAssigned => {
                    warn!(
                        topic = r.tp.0,
                        partition = r.tp.1,
                        offset = r.offset,
                        "Kafka: record of a partition not assigned to this consumer; left to its owner"
                    );
                }
                Registered::AlreadyDone => {}
            }
        }
    }
}

struct KafkaAcker {
    shared: Arc<Shared>,
    ticket: Option<Ticket>,
    /// The record's contents, parked for redelivery if the delivery is given back.
    copy: Option<RawEnvelope>,
}

impl KafkaAcker {
    /// Gives the delivery back: parks the record to be handed out again (unless it is
    /// done or its partition is gone).
    fn give_back(&mut self) {
        let (Some(ticket), Some(copy)) = (self.ticket.take(), self.copy.take()) else {
            return;
        };
        {
            let mut tracker = self.shared.lock();
            if tracker.nack(&ticket) {
                debug!(
                    topic = ticket.tp.0,
                    partition = ticket.tp.1,
                    offset = ticket.offset,
                    "Kafka: record given back; redelivering"
                );
                self.shared.parked().push_back((ticket, copy));
                self.shared.parked_ready.notify_one();
            }
        }
        self.shared.settled.notify_all();
    }
}

impl Acker for KafkaAcker {
    fn ack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        self.copy = None;
        if let Some(ticket) = self.ticket.take() {
            let moved = self.shared.lock().ack(&ticket);
            self.shared.settled.notify_all();
            if moved {
                self.shared.commit_wanted.notify_one();
            }
        }
        Box::pin(async { Ok(()) })
    }

    fn nack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        self.give_back();
        Box::pin(async { Ok(()) })
    }
}

impl Drop for KafkaAcker {
    /// A delivery dropped unsettled (a crashed task) is given back, as if nacked.
    fn drop(&mut self) {
        self.give_back();
    }
}

/// Connects a source for consumer `consumer` from a URL such as
/// `kafka://127.0.0.1:9092/credits?group=billing` (see [`KafkaOptions::from_url`]).
pub async fn connect_source(url: &str, consumer: &str) -> Result<KafkaSource> {
    KafkaSource::connect(KafkaOptions::from_url(url, consumer)?).await
}
