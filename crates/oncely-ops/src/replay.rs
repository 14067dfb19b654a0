//! Replaying and resolving dead letters, so that no replay can apply a message twice.
//!
//! Before a row is run through its consumer again, replay checks, in this order:
//!
//! 1. **Conflicts are refused** (`needs_decision`): the row's reason is `conflict`, or the
//!    inbox now holds the id with another payload. The stored effect and the new payload
//!    cannot both stand; an operator decides with [`resolve`].
//! 2. **Already applied** (`already_applied`): the inbox holds the id with this very payload
//!    (a redelivery got through). The row is resolved (deleted, recorded), nothing runs.
//! 3. **Too old** (`refused_old`, unless [`ReplayOptions::force`]): the message's time (the
//!    row's first-seen time, or its source time if earlier) is older than the retention
//!    window, or not after the last prune cutoff ([`crate::events::prune_watermark`]). A
//!    claim that would have stopped a double may have been pruned, so "the inbox does not
//!    hold it" no longer proves "it was never applied".
//!
//! Only then does the message go through a [`Consumer`] (still deduplicated by the inbox).
//! A successful replay deletes the row; a replay that fails again leaves exactly one row
//! for the message (the store's own upsert, or the new row replacing the old one).

use crate::db::{Ops, doing};
use crate::dlq::{Filter, delete, envelope, ids, show};
use crate::events;
use oncely_core::{
    Acker, Consumer, ConsumerName, Delivery, Error, Handler, Inspect, MessageId, Outcome,
    PayloadHash, Result, StoredDeadLetter,
};
use oncely_sql::SqlTx;
use oncely_sql::clock::{now_ms, to_ms};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// How a replay decides what is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayOptions {
    /// The inbox retention window (what the pruner keeps): rows older than it are refused.
    pub window: Duration,
    /// Replay rows refused as too old anyway (the result carries a warning).
    pub force: bool,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            window: crate::retention::DEFAULT_WINDOW,
            force: false,
        }
    }
}

/// What replaying (or resolving) one dead letter did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Replayed {
    /// The dead-letter row.
    pub id: i64,
    /// Its consumer.
    pub consumer: String,
    /// Its message id.
    pub message_id: Option<String>,
    /// `applied`, `duplicate`, `stale`, `dead_lettered`, `conflict`, `retry` (the consumer ran);
    /// `already_applied` (the inbox holds this payload: resolved without running);
    /// `needs_decision` (a conflict: see [`resolve`]); `refused_old` (a claim may have been
    /// pruned: `--force` to replay anyway); `skipped` (no usable id); `kept_stored` (resolved
    /// by [`resolve`]).
    pub outcome: String,
    /// True when the row is gone (resolved, or superseded by the row a failed replay stored).
    pub row_deleted: bool,
    /// Detail for refusals and failures.
    pub detail: Option<String>,
    /// Set when a row was replayed with [`ReplayOptions::force`] past a refusal.
    pub warning: Option<String>,
}

impl Replayed {
    fn new(row: &StoredDeadLetter) -> Self {
        Self {
            id: row.id,
            consumer: row.consumer.clone(),
            message_id: row.message_id.clone(),
            outcome: "skipped".to_owned(),
            row_deleted: false,
            detail: None,
            warning: None,
        }
    }

    fn refused(mut self, outcome: &str, detail: String) -> Self {
        self.outcome = outcome.to_owned();
        self.detail = Some(detail);
        self
    }
}

struct ReplayAcker;

impl Acker for ReplayAcker {
    fn ack(self: Box<Self>) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
        Box::pin(async { Ok(()) })
    }
    fn nack(self: Box<Self>) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
        Box::pin(async { Ok(()) })
    }
}

async fn row_of(ops: &Ops, id: i64) -> Result<StoredDeadLetter> {
    show(ops, id)
        .await?
        .ok_or_else(|| Error::config(format!("no dead letter with id {id}")))
}

/// Deletes the row and records why in the operations journal.
async fn settle(ops: &Ops, row: &StoredDeadLetter, kind: &str) -> Result<bool> {
    let s = row;
    let detail = serde_json::json!({
        "dead_letter_id": s.id,
        "consumer": s.consumer,
        "message_id": s.message_id,
        "reason": s.reason,
        "payload_hash": row.payload_hash,
        "stored_hash": row.stored_hash,
        "first_seen": to_ms(s.dead_lettered_at),
    });
    events::record(ops, kind, None, &detail).await?;
    delete(ops, s.id).await
}

/// Why a row must not be replayed without `--force`, if it must not.
fn too_old(row: &StoredDeadLetter, window: Duration, watermark: Option<i64>) -> Option<String> {
    let first_seen = to_ms(row.dead_lettered_at);
    let message_time = row
        .meta
        .source_time
        .map_or(first_seen, |t| to_ms(t).min(first_seen));
    let oldest_kept = now_ms() - window.as_millis() as i64;
    if message_time < oldest_kept {
        return Some(format!(
            "the message is older than the {}s retention window: its claim may have been pruned, \
             so a replay could apply it twice",
            window.as_secs()
        ));
    }
    match watermark {
        Some(cutoff) if message_time <= cutoff => Some(
            "a prune ran with a cutoff after this message was first seen: its claim may have \
             been pruned, so a replay could apply it twice"
                .to_owned(),
        ),
        _ => None,
    }
}

/// Re-runs dead letter `id` through a [`Consumer`] named after the row's consumer, over
/// `store` with `handler`, after the checks of this module. The late-message check is not
/// applied (the age check here replaces it).
pub async fn replay<S, H>(
    ops: &Ops,
    store: Arc<S>,
    handler: H,
    id: i64,
    options: &ReplayOptions,
) -> Result<Replayed>
where
    S: Inspect,
    H: Handler<S::Tx> + Clone,
{
    let watermark = events::prune_watermark(ops).await?;
    replay_row(
        ops,
        store,
        handler,
        row_of(ops, id).await?,
        options,
        watermark,
    )
    .await
}

async fn replay_row<S, H>(
    ops: &Ops,
    store: Arc<S>,
    handler: H,
    row: StoredDeadLetter,
    options: &ReplayOptions,
    watermark: Option<i64>,
) -> Result<Replayed>
where
    S: Inspect,
    H: Handler<S::Tx> + Clone,
{
    let mut result = Replayed::new(&row);
    let id = match MessageId::parse_optional(row.raw_id.as_deref()) {
        Ok(id) => id,
        Err(e) => return Ok(result.refused("skipped", format!("not replayable: {e}"))),
    };
    let name = ConsumerName::new(&row.consumer)
        .map_err(|e| Error::config(format!("stored consumer name: {e}")))?;
    if row.reason == "conflict" {
        return Ok(result.refused(
            "needs_decision",
            "a conflict: the inbox holds another payload for this id; decide with \
             `oncely dlq resolve ID --keep-stored`"
                .to_owned(),
        ));
    }
    let hash = PayloadHash::of(&row.payload);
    match store.claimed_hash(&name, id.as_str()).await? {
        Some(stored) if stored == hash => {
            result.outcome = "already_applied".to_owned();
            result.row_deleted = settle(ops, &row, "dlq_already_applied").await?;
            return Ok(result);
        }
        Some(stored) => {
            return Ok(result.refused(
                "needs_decision",
                format!(
                    "the inbox now holds another payload ({}) for this id; decide with \
                     `oncely dlq resolve ID --keep-stored`",
                    stored.to_hex()
                ),
            ));
        }
        None => {}
    }
    if let Some(why) = too_old(&row, options.window, watermark) {
        if !options.force {
            return Ok(result.refused("refused_old", format!("{why}; --force to replay anyway")));
        }
        result.warning = Some(format!("forced: {why}"));
    }
    let newest_before = newest_id(ops).await?;
    let consumer: Consumer<S, H> = Consumer::new(name, store, handler);
    let outcome = consumer
        .process(Delivery::new(envelope(&row), 1, Box::new(ReplayAcker)))
        .await;
    result.outcome = outcome.name().to_owned();
    match outcome {
        Outcome::Applied | Outcome::Duplicate | Outcome::Stale => {
            result.row_deleted = settle(ops, &row, "dlq_replayed").await?;
        }
        Outcome::Conflict { .. } | Outcome::DeadLettered(_) => {
            result.detail = Some(match &outcome {
                Outcome::DeadLettered(r) => r.to_string(),
                _ => "the inbox holds another payload for this id".to_owned(),
            });
            // The consumer stored the failure again. If that made a new row (another reason,
            // or a store without the upsert), the old row is superseded; if the store folded it
            // into this row, the row stays.
            if superseded(ops, &row, newest_before).await? {
                result.row_deleted = delete(ops, row.id).await?;
            }
        }
        Outcome::Retry(e) => result.detail = Some(e.to_string()),
        Outcome::Abandoned => {
            result.detail = Some("processing panicked outside the handler; not replayed".into())
        }
    }
    Ok(result)
}

async fn newest_id(ops: &Ops) -> Result<i64> {
    let sql = format!(
        "SELECT COALESCE(MAX(id), 0) FROM {}",
        ops.tables().dead_letters()
    );
    let newest = ops.autocommit().fetch_i64(&sql, &[]).await;
    Ok(newest.map_err(doing("reading dead letters"))?.unwrap_or(0))
}

/// True when a row newer than `newest_before` holds the same consumer, id and payload.
async fn superseded(ops: &Ops, row: &StoredDeadLetter, newest_before: i64) -> Result<bool> {
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE id > {} AND consumer = {} AND raw_id = {} AND payload_hash = {}",
        ops.tables().dead_letters(),
        ops.dialect().param(1),
        ops.dialect().param(2),
        ops.dialect().param(3),
        ops.dialect().param(4)
    );
    let args = [
        newest_before.into(),
        (&row.consumer).into(),
        row.raw_id.clone().into(),
        (&row.payload_hash).into(),
    ];
    let n = ops.autocommit().fetch_i64(&sql, &args).await;
    Ok(n.map_err(doing("reading dead letters"))?.unwrap_or(0) > 0)
}

/// Replays every dead letter matching `filter` (rows taken at the start, oldest first, so
/// rows a replay stores again are not replayed twice in one run). Calls `progress` per row.
pub async fn replay_all<S, H>(
    ops: &Ops,
    store: Arc<S>,
    handler: H,
    filter: &Filter,
    options: &ReplayOptions,
    progress: &mut (dyn FnMut(&Replayed) + Send),
) -> Result<Vec<Replayed>>
where
    S: Inspect,
    H: Handler<S::Tx> + Clone,
{
    let watermark = events::prune_watermark(ops).await?;
    let ids = ids(ops, filter).await?;
    let mut done = Vec::with_capacity(ids.len());
    for id in ids {
        let Some(row) = show(ops, id).await? else {
            continue;
        };
        let r = replay_row(ops, store.clone(), handler.clone(), row, options, watermark).await?;
        progress(&r);
        done.push(r);
    }
    Ok(done)
}

/// An operator's decision on a conflict row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The stored effect stands; the new payload is dropped. The row is deleted and the
    /// decision recorded in the operations journal (`dlq_keep_stored`).
    KeepStored,
}

/// Resolves dead letter `id` by `decision`. Applying the new payload under the same id is
/// deliberately not offered (see docs/operations.md): reverse the stored effect yourself,
/// publish the new payload under a new id, then resolve with [`Decision::KeepStored`].
pub async fn resolve(ops: &Ops, id: i64, decision: Decision) -> Result<Replayed> {
    let row = row_of(ops, id).await?;
    let mut result = Replayed::new(&row);
    match decision {
        Decision::KeepStored => {
            result.outcome = "kept_stored".to_owned();
            result.row_deleted = settle(ops, &row, "dlq_keep_stored").await?;
        }
    }
    Ok(result)
}
