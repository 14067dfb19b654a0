//! [`KafkaSource`]: a consumer group as an oncely [`Source`], committing offsets only
//! after the database commit, contiguously per partition.

use crate::acker::KafkaAcker;
use crate::context::KafkaContext;
use crate::mapping::{envelope_of, offset_id, record_headers};
use crate::options::{IdFrom, KafkaOptions};
use crate::shared::{Shared, blocking, commit_dirty, kafka_err};
use crate::tracker::{Registered, Ticket, Tp, Tracker};
use oncely_core::{Delivery, Error, RawEnvelope, Result, Source};
use rdkafka::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tracing::warn;

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

    /// True when the source may end: partitions were assigned (every record handed out
    /// belongs to one), none is in flight and none waits to be handed out again.
    fn idle(&self) -> bool {
        let tracker = self.shared.lock();
        tracker.ever_assigned() && tracker.total_in_flight() == 0 && self.shared.parked().is_empty()
    }

    /// Hands out a record: tracked under `ticket`, settled through the returned delivery.
    fn deliver(
        &self,
        ticket: Ticket,
        raw: RawEnvelope,
        attempt: u32,
        defect: Option<String>,
    ) -> Delivery {
        let acker = Box::new(KafkaAcker {
            shared: self.shared.clone(),
            ticket: Some(ticket),
            copy: Some(raw.clone()),
        });
        match defect {
            None => Delivery::new(raw, attempt, acker),
            Some(why) => Delivery::undecodable(raw, attempt, acker, why),
        }
    }

    /// Waits for the next record from the broker, or for a parked one.
    async fn receive(&self) -> Option<rdkafka::error::KafkaResult<RawReceived>> {
        tokio::select! {
            biased;
            _ = self.shared.parked_ready.notified() => None,
            m = self.consumer.recv() => Some(m.map(|m| RawReceived::of(&m, self.options.id_from))),
        }
    }
}

/// A received record, detached from the consumer.
struct RawReceived {
    tp: Tp,
    offset: i64,
    raw: RawEnvelope,
    /// Why the record's envelope could not be mapped (then `raw` holds the payload only).
    defect: Option<String>,
}

impl RawReceived {
    fn of(message: &rdkafka::message::BorrowedMessage<'_>, id_from: IdFrom) -> Self {
        // Mapped without the payload, so that a panic in the mapping still leaves it.
        let mapped = oncely_core::map_envelope(|| {
            let headers = message.headers().map(record_headers).unwrap_or_default();
            envelope_of(headers, Vec::new(), message.timestamp().to_millis())
        });
        let (mut raw, defect) = match mapped {
            Ok(raw) => (raw, None),
            Err(why) => (RawEnvelope::default(), Some(why)),
        };
        raw.payload = message.payload().unwrap_or_default().to_vec();
        if id_from == IdFrom::Offset && defect.is_none() {
            raw.id = Some(offset_id(
                message.topic(),
                message.partition(),
                message.offset(),
            ));
        }
        Self {
            tp: (message.topic().to_owned(), message.partition()),
            offset: message.offset(),
            raw,
            defect,
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
                return Ok(Some(self.deliver(ticket, raw, attempt, None)));
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
                    return Ok(Some(self.deliver(ticket, r.raw, attempt, r.defect)));
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

/// Connects a source for consumer `consumer` from a URL such as
/// `kafka://127.0.0.1:9092/credits?group=billing` (see [`KafkaOptions::from_url`]).
pub async fn connect_source(url: &str, consumer: &str) -> Result<KafkaSource> {
    KafkaSource::connect(KafkaOptions::from_url(url, consumer)?).await
}
