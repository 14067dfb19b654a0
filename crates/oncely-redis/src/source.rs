//! [`RedisSource`]: a Redis stream consumer group as an oncely [`Source`].

use crate::acks::Acks;
use crate::mapping::envelope_of;
use crate::read::{Entries, InFlight, Reader};
use futures::future::BoxFuture;
use oncely_core::wire::UrlParams;
use oncely_core::{Acker, Delivery, Error, Result, Source};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{info, warn};

/// Default stream name when the URL has no `?stream=`.
pub const DEFAULT_STREAM: &str = "oncely";

/// Settings of a [`RedisSource`].
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// The stream key.
    pub stream: String,
    /// The consumer group (created at id `0` with `MKSTREAM` if missing).
    pub group: String,
    /// This member's name in the group; pending entries are owned per member.
    pub member: String,
    /// Entries fetched per `XREADGROUP`. Unset (the default): what the consumer keeps in
    /// hand ([`Source::read_ahead`]), or [`DEFAULT_BATCH`] when not told.
    pub batch: Option<usize>,
    /// How long one `XREADGROUP` blocks waiting for new entries (default 1 s).
    pub block: Duration,
    /// Pending entries idle this long (delivered to a member that died or lost its ack)
    /// are taken over with `XAUTOCLAIM` (default 30 s).
    pub reclaim_idle: Duration,
    /// Name set with `CLIENT SETNAME` on this source's connections.
    pub client_name: String,
    /// Longest wait between reconnect attempts (default 5 s).
    pub max_backoff: Duration,
}

impl RedisOptions {
    /// Defaults for consumer `consumer`: stream `oncely`, group = consumer name,
    /// member = `{consumer}-{pid}`.
    pub fn new(consumer: &str) -> Self {
        Self {
            stream: DEFAULT_STREAM.to_owned(),
            group: consumer.to_owned(),
            member: format!("{consumer}-{}", std::process::id()),
            batch: None,
            block: Duration::from_secs(1),
            reclaim_idle: Duration::from_secs(30),
            client_name: format!("oncely-{consumer}"),
            max_backoff: Duration::from_secs(5),
        }
    }

    /// Options from a URL's `?stream=`, `?group=`, `?member=`, `?batch=`, `?reclaim_ms=`,
    /// `?block_ms=`; returns the URL without them.
    pub fn from_url(url: &str, consumer: &str) -> Result<(String, Self)> {
        let p = UrlParams::new(url);
        let d = Self::new(consumer);
        let o = Self {
            stream: p.text_or("stream", &d.stream),
            group: p.text_or("group", &d.group),
            member: p.text_or("member", &d.member),
            batch: p.number::<usize>("batch")?.map(|b| b.max(1)).or(d.batch),
            reclaim_idle: p.millis("reclaim_ms")?.unwrap_or(d.reclaim_idle),
            block: p
                .millis("block_ms")?
                .map_or(d.block, |b| b.max(Duration::from_millis(1))),
            ..d
        };
        Ok((p.rest(), o))
    }
}

pub(crate) fn redis_err(what: &str, e: redis::RedisError) -> Error {
    Error::transient(format!("Redis: {what}")).with_source(e)
}

pub(crate) enum Phase {
    /// Re-reading this member's own pending entries after (re)connecting, from this id.
    OwnPending(String),
    /// Reading new entries (`>`).
    New,
}

/// Entries of this member handed back (nacked, or dropped unsettled) with the attempt their
/// next delivery is: claimed again at once (`XCLAIM … 0`) instead of waiting for the
/// reclaim idle time.
#[derive(Default)]
pub(crate) struct Redo(Mutex<VecDeque<(String, u32)>>);

impl Redo {
    pub(crate) fn push(&self, entry: String, attempt: u32) {
        self.lock().push_back((entry, attempt));
    }

    pub(crate) fn take(&self, n: usize) -> Vec<(String, u32)> {
        let mut q = self.lock();
        let n = n.min(q.len());
        q.drain(..n).collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(String, u32)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Live {
    acks: Acks,
    broken: Arc<AtomicBool>,
}

/// A Redis stream read through a consumer group: `XREADGROUP`, `XACK` after the commit
/// (the acks of a group coalesced into one `XACK` with many ids),
/// and `XAUTOCLAIM` of entries left pending longer than
/// [`RedisOptions::reclaim_idle`] by a member that died or could not ack. After a
/// (re)connect it first re-reads its own pending entries. A delivery this member nacks or
/// drops unsettled is claimed again by it at once (`XCLAIM` with min-idle 0, before the
/// next read of new entries), so a retry never waits for the reclaim idle time. `attempt`
/// is the entry's delivery count from `XPENDING` (or the abandoned attempt + 1).
/// `next` is cancel-safe: a read dropped halfway is resumed by the next call, so the entries
/// Redis gave it are delivered, not left pending until a reclaim.
pub struct RedisSource {
    client: Client,
    options: Arc<RedisOptions>,
    live: Option<Live>,
    /// The reading state while no read is in flight.
    reader: Option<Reader>,
    /// The read `next` started and has not seen the end of (kept when `next` is dropped).
    in_flight: Option<InFlight>,
    buffer: VecDeque<Delivery>,
    redo: Arc<Redo>,
    /// What the consumer said it keeps in hand ([`Source::read_ahead`]).
    read_ahead: Option<usize>,
}

/// Entries per `XREADGROUP` of a source that neither its URL nor its consumer sized.
pub const DEFAULT_BATCH: usize = 32;

impl RedisSource {
    /// Connects and creates the group if missing. Fails if the first connection fails.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self> {
        let client = Client::open(url).map_err(|e| Error::config(format!("Redis URL: {e}")))?;
        let mut me = Self {
            client,
            options: Arc::new(options),
            live: None,
            reader: None,
            in_flight: None,
            buffer: VecDeque::new(),
            redo: Arc::default(),
            read_ahead: None,
        };
        let (live, reader) = open(&me.client, &me.options).await?;
        (me.live, me.reader) = (Some(live), Some(reader));
        Ok(me)
    }

    /// The options in use.
    pub fn options(&self) -> &RedisOptions {
        &self.options
    }

    /// Entries per read: the URL's `?batch=`, else the consumer's read-ahead, else 32.
    pub fn batch(&self) -> usize {
        self.options
            .batch
            .or(self.read_ahead)
            .unwrap_or(DEFAULT_BATCH)
    }

    async fn reconnect(&mut self) {
        let mut delay = Duration::from_millis(100);
        loop {
            match open(&self.client, &self.options).await {
                Ok((live, reader)) => {
                    info!(stream = %self.options.stream, "Redis: reconnected");
                    self.live = Some(live);
                    // A read still in flight on the old connection is abandoned: the new
                    // reader's own-pending pass re-reads what it may have taken, and every
                    // entry handed back so far.
                    self.in_flight = None;
                    self.reader = Some(reader);
                    self.redo.take(usize::MAX);
                    return;
                }
                Err(e) => {
                    warn!(error = %e, ?delay, "Redis: reconnect failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(self.options.max_backoff);
                }
            }
        }
    }

    /// Queues entries as deliveries.
    fn push(&mut self, entries: Entries) {
        let live = self.live.as_ref().expect("connected");
        for (entry, n) in entries {
            let raw = oncely_core::map_envelope(|| envelope_of(&entry.id, &entry.map))
                .map_err(|why| (crate::mapping::payload_of(&entry.map), why));
            let acker = RedisAcker {
                acks: live.acks.clone(),
                entry: entry.id,
                attempt: n,
                redo: Some(self.redo.clone()),
            };
            self.buffer.push_back(match raw {
                Ok(raw) => Delivery::new(raw, n, Box::new(acker)),
                Err((payload, why)) => {
                    let raw = oncely_core::RawEnvelope {
                        id: None,
                        payload,
                        meta: Default::default(),
                    };
                    Delivery::undecodable(raw, n, Box::new(acker), why)
                }
            });
        }
    }

    /// One round trip (possibly reading nothing), resumed if an earlier `next` was dropped
    /// while it ran.
    async fn fill(&mut self) -> Result<()> {
        if self.in_flight.is_none() {
            let reader = self
                .reader
                .take()
                .expect("a reader when no read is in flight");
            self.in_flight = Some(reader.start(self.batch(), self.redo.clone()));
        }
        let in_flight = self.in_flight.as_mut().expect("just set");
        let (reader, read) = in_flight.await;
        self.in_flight = None;
        self.reader = Some(reader);
        self.push(read?);
        Ok(())
    }
}

/// A connection that names itself (`CLIENT SETNAME`) with `response_timeout` on every reply.
async fn connection(
    client: &Client,
    options: &Arc<RedisOptions>,
    response_timeout: Duration,
) -> Result<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_response_timeout(Some(response_timeout))
        .set_connection_timeout(Some(Duration::from_secs(5)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| redis_err("connect", e))?;
    redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(&options.client_name)
        .query_async::<()>(&mut conn)
        .await
        .map_err(|e| redis_err("CLIENT SETNAME", e))?;
    Ok(conn)
}

/// Connects the read and the ack connections and creates the group if missing.
async fn open(client: &Client, options: &Arc<RedisOptions>) -> Result<(Live, Reader)> {
    let mut read = connection(client, options, options.block + Duration::from_secs(5)).await?;
    let ack = connection(client, options, Duration::from_secs(5)).await?;
    let created: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&options.stream)
        .arg(&options.group)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut read)
        .await;
    if let Err(e) = created
        && e.code() != Some("BUSYGROUP")
    {
        return Err(redis_err("XGROUP CREATE", e));
    }
    let broken = Arc::new(AtomicBool::new(false));
    let acks = Acks::start(
        ack,
        options.stream.clone(),
        options.group.clone(),
        broken.clone(),
    );
    Ok((Live { acks, broken }, Reader::new(read, options.clone())))
}

impl Source for RedisSource {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        loop {
            if let Some(d) = self.buffer.pop_front() {
                return Ok(Some(d));
            }
            let broken = self
                .live
                .as_ref()
                .is_none_or(|l| l.broken.load(Ordering::Relaxed));
            if broken {
                self.live = None;
                self.reconnect().await;
            }
            if let Err(e) = self.fill().await {
                warn!(error = %e, "Redis: read failed; reconnecting");
                self.live = None;
            }
        }
    }

    /// Sizes each read (`COUNT`) to `deliveries` unless the URL set `?batch=`.
    fn read_ahead(&mut self, deliveries: usize) {
        self.read_ahead = Some(deliveries.max(1));
    }
}

struct RedisAcker {
    acks: Acks,
    entry: String,
    attempt: u32,
    /// Set until the delivery is settled; a nack or a drop hands the entry back through it.
    redo: Option<Arc<Redo>>,
}

impl RedisAcker {
    fn hand_back(&mut self) {
        if let Some(redo) = self.redo.take() {
            redo.push(self.entry.clone(), self.attempt.saturating_add(1));
        }
    }
}

impl Drop for RedisAcker {
    fn drop(&mut self) {
        self.hand_back();
    }
}

impl Acker for RedisAcker {
    fn ack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        self.redo = None;
        let entry = std::mem::take(&mut self.entry);
        let acks = self.acks.clone();
        Box::pin(async move { acks.ack(entry).await })
    }

    /// Leaves the entry pending and hands it back to this source, which claims it again
    /// before reading new entries.
    fn nack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        self.hand_back();
        Box::pin(async { Ok(()) })
    }
}

/// Connects a source for consumer `consumer` from a URL such as
/// `redis://127.0.0.1:6379/0?stream=credits&reclaim_ms=30000` (group = consumer name).
pub async fn connect_source(url: &str, consumer: &str) -> Result<RedisSource> {
    let (url, options) = RedisOptions::from_url(url, consumer)?;
    RedisSource::connect(&url, options).await
}
