//! One read of a [`RedisSource`](crate::RedisSource) as an owned future, so that dropping
//! `Source::next` halfway (a `tokio::time::timeout` around it, `StopWhenIdle`, a `select!`)
//! never drops a read that Redis has already answered.
//!
//! `XREADGROUP`, `XCLAIM` and `XAUTOCLAIM` change the group on the server: the entries they
//! return are now pending on this member. A read dropped after the server acted strands them
//! until another member's `XAUTOCLAIM` (30 s idle by default), or the next run's own-pending
//! pass. So the source keeps its read in flight across calls: a new call to `next` resumes
//! the read it started, and only a reconnect (which re-reads all own pending entries)
//! abandons one.

use crate::source::{Phase, RedisOptions, Redo, redis_err};
use futures::future::BoxFuture;
use oncely_core::Result;
use redis::aio::MultiplexedConnection;
use redis::streams::{StreamAutoClaimReply, StreamClaimReply, StreamId, StreamReadReply};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::info;

/// Where the reading stands: moved into a read while it runs, and back when it is done.
pub(crate) struct Reader {
    pub(crate) conn: MultiplexedConnection,
    pub(crate) options: Arc<RedisOptions>,
    pub(crate) phase: Phase,
    reclaim_cursor: String,
    next_reclaim: Instant,
}

/// Entries read, each with the attempt its delivery is.
pub(crate) type Entries = Vec<(StreamId, u32)>;

/// A read in flight: gives the reader back with what it read.
pub(crate) type InFlight = BoxFuture<'static, (Reader, Result<Entries>)>;

impl Reader {
    /// A reader that first re-reads this member's own pending entries (after a connect).
    pub(crate) fn new(conn: MultiplexedConnection, options: Arc<RedisOptions>) -> Self {
        Self {
            conn,
            options,
            phase: Phase::OwnPending("0".to_owned()),
            reclaim_cursor: "0-0".to_owned(),
            next_reclaim: Instant::now(),
        }
    }

    /// Starts one round trip (possibly reading nothing) of at most `batch` entries; entries
    /// handed back are taken from `redo` now and put back if the claim fails.
    pub(crate) fn start(mut self, batch: usize, redo: Arc<Redo>) -> InFlight {
        Box::pin(async move {
            let read = self.read(batch, &redo).await;
            (self, read)
        })
    }

    async fn read(&mut self, batch: usize, redo: &Redo) -> Result<Entries> {
        if Instant::now() >= self.next_reclaim {
            let claimed = self.auto_claim(batch).await?;
            if !claimed.is_empty() {
                info!(
                    count = claimed.len(),
                    "Redis: reclaimed idle pending entries"
                );
                return self.with_counts(claimed).await;
            }
        }
        if matches!(self.phase, Phase::New) && !redo.is_empty() {
            return self.claim_own(redo.take(batch), redo).await;
        }
        let o = self.options.clone();
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
            .query_async(&mut self.conn)
            .await
            .map_err(|e| redis_err("XREADGROUP", e))?;
        let entries: Vec<StreamId> = reply
            .map(|r| r.keys.into_iter().flat_map(|k| k.ids).collect())
            .unwrap_or_default();
        match &self.phase {
            Phase::OwnPending(_) if entries.is_empty() => {
                self.phase = Phase::New;
                Ok(Vec::new())
            }
            Phase::OwnPending(_) => {
                let last = entries.last().map(|e| e.id.clone()).unwrap_or_default();
                self.phase = Phase::OwnPending(last);
                self.with_counts(entries).await
            }
            Phase::New => Ok(entries.into_iter().map(|e| (e, 1)).collect()),
        }
    }

    /// `XAUTOCLAIM` of entries idle longer than the reclaim time, one page per call.
    async fn auto_claim(&mut self, batch: usize) -> Result<Vec<StreamId>> {
        let o = self.options.clone();
        let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
            .arg(&o.stream)
            .arg(&o.group)
            .arg(&o.member)
            .arg(o.reclaim_idle.as_millis() as u64)
            .arg(&self.reclaim_cursor)
            .arg("COUNT")
            .arg(batch)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| redis_err("XAUTOCLAIM", e))?;
        self.reclaim_cursor = reply.next_stream_id.clone();
        if self.reclaim_cursor == "0-0" {
            let every = (o.reclaim_idle / 2).max(Duration::from_millis(100));
            self.next_reclaim = Instant::now() + every;
        }
        Ok(reply.claimed)
    }

    /// Claims entries this member handed back (`XCLAIM` with min-idle 0: they are its own).
    /// An entry acked or deleted meanwhile is not returned by Redis.
    async fn claim_own(&mut self, taken: Vec<(String, u32)>, redo: &Redo) -> Result<Entries> {
        let o = &self.options;
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(&o.stream).arg(&o.group).arg(&o.member).arg(0);
        for (id, _) in &taken {
            cmd.arg(id);
        }
        let reply: redis::RedisResult<StreamClaimReply> = cmd.query_async(&mut self.conn).await;
        match reply {
            Ok(r) => {
                let attempts: HashMap<String, u32> = taken.into_iter().collect();
                Ok(r.ids
                    .into_iter()
                    .map(|e| {
                        let n = attempts.get(&e.id).copied().unwrap_or(2);
                        (e, n)
                    })
                    .collect())
            }
            Err(e) => {
                // Put them back for the next round (or the own-pending pass after a reconnect).
                for (id, n) in taken {
                    redo.push(id, n);
                }
                Err(redis_err("XCLAIM", e))
            }
        }
    }

    /// The entries with their delivery counts from `XPENDING` (2 where Redis gives none).
    async fn with_counts(&mut self, entries: Vec<StreamId>) -> Result<Entries> {
        let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
            return Ok(Vec::new());
        };
        let o = &self.options;
        let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg(&o.stream)
            .arg(&o.group)
            .arg(&first.id)
            .arg(&last.id)
            .arg(entries.len())
            .arg(&o.member)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| redis_err("XPENDING", e))?;
        let counts: HashMap<String, u32> = rows
            .into_iter()
            .map(|(id, _, _, n)| (id, n.min(u64::from(u32::MAX)) as u32))
            .collect();
        Ok(entries
            .into_iter()
            .map(|e| {
                let n = counts.get(&e.id).copied().unwrap_or(2);
                (e, n)
            })
            .collect())
    }
}
