//! [`RedisSource`]: a Redis stream consumer group as an oncely [`Source`].

use crate::acks::Acks;
use crate::mapping::envelope_of;
use futures::future::BoxFuture;
use oncely_core::wire::UrlParams;
use oncely_core::{Acker, Delivery, Error, Result, Source};
use redis::aio::MultiplexedConnection;
use redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};
use redis::{AsyncConnectionConfig, Client};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
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

enum Phase {
    /// Re-reading this member's own pending entries after (re)connecting, from this id.
    OwnPending(String),
    /// Reading new entries (`>`).
    New,
}

/// Entries of this member handed back (nacked, or dropped unsettled) with the attempt their
/// next delivery is: claimed again at once (`XCLAIM … 0`) instead of waiting for the
/// reclaim idle time.
#[derive(Default)]
struct Redo(Mutex<VecDeque<(String, u32)>>);

impl Redo {
    fn push(&self, entry: String, attempt: u32) {
        self.lock().push_back((entry, attempt));
    }

    fn take(&self, n: usize) -> Vec<(String, u32)> {
        let mut q = self.lock();
        let n = n.min(q.len());
        q.drain(..n).collect()
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(String, u32)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Live {
    read: MultiplexedConnection,
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
pub struct RedisSource {
    client: Client,
    options: RedisOptions,
    live: Option<Live>,
    phase: Phase,
    buffer: VecDeque<Delivery>,
    reclaim_cursor: String,
    next_reclaim: Instant,
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
            options,
            live: None,
            phase: Phase::OwnPending("0".to_owned()),
            buffer: VecDeque::new(),
            reclaim_cursor: "0-0".to_owned(),
            next_reclaim: Instant::now(),
            redo: Arc::default(),
            read_ahead: None,
        };
        me.live = Some(me.open().await?);
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

    async fn connection(&self, response_timeout: Duration) -> Result<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(response_timeout))
            .set_connection_timeout(Some(Duration::from_secs(5)));
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| redis_err("connect", e))?;
        redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(&self.options.client_name)
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| redis_err("CLIENT SETNAME", e))?;
        Ok(conn)
    }

    async fn open(&self) -> Result<Live> {
        let mut read = self
            .connection(self.options.block + Duration::from_secs(5))
            .await?;
        let ack = self.connection(Duration::from_secs(5)).await?;
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&self.options.stream)
            .arg(&self.options.group)
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
            self.options.stream.clone(),
            self.options.group.clone(),
            broken.clone(),
        );
        Ok(Live { read, acks, broken })
    }

    async fn reconnect(&mut self) {
        let mut delay = Duration::from_millis(100);
        loop {
            match self.open().await {
                Ok(live) => {
                    info!(stream = %self.options.stream, "Redis: reconnected");
                    self.live = Some(live);
                    self.phase = Phase::OwnPending("0".to_owned());
                    // The own-pending pass re-reads every entry handed back so far.
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

    /// One round trip: fills the buffer (possibly with nothing).
    async fn fill(&mut self) -> Result<()> {
        let batch = self.batch();
        let o = &self.options;
        let live = self.live.as_mut().expect("connected");
        if Instant::now() >= self.next_reclaim {
            let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
                .arg(&o.stream)
                .arg(&o.group)
                .arg(&o.member)
                .arg(o.reclaim_idle.as_millis() as u64)
                .arg(&self.reclaim_cursor)
                .arg("COUNT")
                .arg(batch)
                .query_async(&mut live.read)
                .await
                .map_err(|e| redis_err("XAUTOCLAIM", e))?;
            self.reclaim_cursor = reply.next_stream_id.clone();
            if self.reclaim_cursor == "0-0" {
                let every = (o.reclaim_idle / 2).max(Duration::from_millis(100));
                self.next_reclaim = Instant::now() + every;
            }
            if !reply.claimed.is_empty() {
                info!(
                    count = reply.claimed.len(),
                    "Redis: reclaimed idle pending entries"
                );
                return self.push(reply.claimed, None, None).await;
            }
        }
        if matches!(self.phase, Phase::New) && !self.redo.is_empty() {
            return self.claim_own_redo().await;
        }
        let (id, block) = match &self.phase {
            Phase::OwnPending(after) => (after.clone(), None),
            Phase::New => (">".to_owned(), Some(o.block)),
        };
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&o.group)
            .arg(&o.member)
            .arg("COUNT")
            .arg(batch);
        if let Some(b) = block {
            cmd.arg("BLOCK").arg(b.as_millis() as u64);
        }
        cmd.arg("STREAMS").arg(&o.stream).arg(&id);
        let reply: Option<StreamReadReply> = cmd
            .query_async(&mut live.read)
            .await
            .map_err(|e| redis_err("XREADGROUP", e))?;
        let entries: Vec<StreamId> = reply
            .map(|r| r.keys.into_iter().flat_map(|k| k.ids).collect())
            .unwrap_or_default();
        match &self.phase {
            Phase::OwnPending(_) if entries.is_empty() => {
                self.phase = Phase::New;
                Ok(())
            }
            Phase::OwnPending(_) => {
                let last = entries.last().map(|e| e.id.clone()).unwrap_or_default();
                self.phase = Phase::OwnPending(last);
                self.push(entries, None, None).await
            }
            Phase::New => self.push(entries, Some(1), None).await,
        }
    }

    /// Claims entries this member handed back (`XCLAIM` with min-idle 0: they are its own)
    /// and queues them. An entry acked or deleted meanwhile is not returned by Redis.
    async fn claim_own_redo(&mut self) -> Result<()> {
        let redo = self.redo.take(self.batch());
        let o = &self.options;
        let live = self.live.as_mut().expect("connected");
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(&o.stream).arg(&o.group).arg(&o.member).arg(0);
        for (id, _) in &redo {
            cmd.arg(id);
        }
        let reply: redis::RedisResult<redis::streams::StreamClaimReply> =
            cmd.query_async(&mut live.read).await;
        let claimed = match reply {
            Ok(r) => r.ids,
            Err(e) => {
                // Put them back for the next round (or the own-pending pass after a reconnect).
                for (id, n) in redo {
                    self.redo.push(id, n);
                }
                return Err(redis_err("XCLAIM", e));
            }
        };
        let attempts: HashMap<String, u32> = redo.into_iter().collect();
        self.push(claimed, None, Some(attempts)).await
    }

    /// Queues entries as deliveries; `attempt` is looked up with `XPENDING` unless given
    /// (for all, or per entry in `known`).
    async fn push(
        &mut self,
        entries: Vec<StreamId>,
        attempt: Option<u32>,
        known: Option<HashMap<String, u32>>,
    ) -> Result<()> {
        let live = self.live.as_mut().expect("connected");
        let counts = match (attempt, entries.first(), entries.last()) {
            _ if known.is_some() => known.unwrap_or_default(),
            (None, Some(first), Some(last)) => {
                pending_counts(
                    &mut live.read,
                    &self.options,
                    &first.id,
                    &last.id,
                    entries.len(),
                )
                .await?
            }
            _ => HashMap::new(),
        };
        for entry in entries {
            let raw = oncely_core::map_envelope(|| envelope_of(&entry.id, &entry.map))
                .map_err(|why| (crate::mapping::payload_of(&entry.map), why));
            let n = attempt
                .or_else(|| counts.get(&entry.id).copied())
                .unwrap_or(2);
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
        Ok(())
    }
}

async fn pending_counts(
    conn: &mut MultiplexedConnection,
    o: &RedisOptions,
    first: &str,
    last: &str,
    count: usize,
) -> Result<HashMap<String, u32>> {
    let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(&o.stream)
        .arg(&o.group)
        .arg(first)
        .arg(last)
        .arg(count)
        .arg(&o.member)
        .query_async(conn)
        .await
        .map_err(|e| redis_err("XPENDING", e))?;
    Ok(rows
        .into_iter()
        .map(|(id, _, _, n)| (id, n.min(u64::from(u32::MAX)) as u32))
        .collect())
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
