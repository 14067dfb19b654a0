//! Bulk actions in the background: one task per job, one row at a time, its progress and
//! per-outcome summary readable while it runs (`/jobs/{id}`, `GET /api/jobs/{id}`). When a
//! job ends it is recorded in the operations journal (`console_replay`, `console_resolve`,
//! `console_purge`: who, what selection, how many rows, the outcomes).

use crate::Console;
use oncely_ops::replay::{self, Decision, ReplayOptions, Replayed};
use oncely_ops::{dlq, events};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How many per-row results a job keeps for display (the summary counts all rows).
pub const KEPT_RESULTS: usize = 1000;

/// What a bulk job does to each row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Action {
    /// `oncely dlq replay` per row, with its refusals.
    Replay,
    /// `oncely dlq resolve --keep-stored` per row.
    Resolve,
    /// Delete the row.
    Purge,
}

impl Action {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "replay" => Some(Self::Replay),
            "resolve" => Some(Self::Resolve),
            "purge" => Some(Self::Purge),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Replay => "replay",
            Self::Resolve => "resolve",
            Self::Purge => "purge",
        }
    }
}

/// A job's state: progress while it runs, the summary once it has finished.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JobStatus {
    /// Job id.
    pub id: u64,
    /// `replay`, `resolve` or `purge`.
    pub action: String,
    /// Who started it.
    pub actor: String,
    /// Whether replay was forced past `refused_old`.
    pub forced: bool,
    /// The selection: `{"ids": […]}` or `{"filter": {…}}`.
    pub selection: serde_json::Value,
    /// Rows selected.
    pub total: u64,
    /// Rows done.
    pub done: u64,
    /// True once every row is done.
    pub finished: bool,
    /// Rows per outcome (`applied`, `needs_decision`, `already_applied`, `refused_old`,
    /// `kept_stored`, `purged`, `gone`, `no_handler`, `error`, …).
    pub outcomes: BTreeMap<String, u64>,
    /// Per-row results (the first [`KEPT_RESULTS`]).
    pub results: Vec<Replayed>,
}

/// The jobs of this console process.
#[derive(Default)]
pub(crate) struct Jobs {
    next: AtomicU64,
    all: Mutex<HashMap<u64, Arc<Mutex<JobStatus>>>>,
}

/// What a new job covers.
pub(crate) struct Plan {
    pub action: Action,
    pub ids: Vec<i64>,
    pub selection: serde_json::Value,
    pub force: bool,
    pub actor: String,
}

impl Jobs {
    /// A job's state.
    pub fn get(&self, id: u64) -> Option<JobStatus> {
        let all = self.all.lock().ok()?;
        let job = all.get(&id)?.lock().ok()?;
        Some(job.clone())
    }

    /// Starts `plan` in the background; returns its id.
    pub fn start(&self, console: &Console, plan: Plan) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let status = Arc::new(Mutex::new(JobStatus {
            id,
            action: plan.action.name().to_owned(),
            actor: plan.actor.clone(),
            forced: plan.force,
            selection: plan.selection.clone(),
            total: plan.ids.len() as u64,
            done: 0,
            finished: false,
            outcomes: BTreeMap::new(),
            results: Vec::new(),
        }));
        if let Ok(mut all) = self.all.lock() {
            all.insert(id, status.clone());
        }
        tokio::spawn(run(console.clone(), plan, status));
        id
    }
}

fn note(status: &Mutex<JobStatus>, result: Replayed) {
    if let Ok(mut s) = status.lock() {
        s.done += 1;
        *s.outcomes.entry(result.outcome.clone()).or_default() += 1;
        if s.results.len() < KEPT_RESULTS {
            s.results.push(result);
        }
    }
}

fn bare(id: i64, outcome: &str, detail: Option<String>) -> Replayed {
    Replayed {
        id,
        consumer: String::new(),
        message_id: None,
        outcome: outcome.to_owned(),
        row_deleted: false,
        detail,
        warning: None,
    }
}

/// One row of a job.
async fn one(console: &Console, action: Action, id: i64, options: &ReplayOptions) -> Replayed {
    let inner = &console.inner;
    let ops = &inner.ops;
    let result = match action {
        Action::Replay => match dlq::show(ops, id).await {
            Ok(None) => Ok(bare(
                id,
                "gone",
                Some("no such dead letter (any more)".into()),
            )),
            Ok(Some(row)) => match inner.replayers.get(&row.consumer) {
                None => {
                    let mut r = bare(
                        id,
                        "no_handler",
                        Some("no handler registered for this consumer".into()),
                    );
                    r.consumer = row.consumer;
                    Ok(r)
                }
                Some(replayer) => replayer.replay(ops, &inner.store, id, options).await,
            },
            Err(e) => Err(e),
        },
        Action::Resolve => match dlq::show(ops, id).await {
            Ok(None) => Ok(bare(
                id,
                "gone",
                Some("no such dead letter (any more)".into()),
            )),
            Ok(Some(_)) => replay::resolve(ops, id, Decision::KeepStored).await,
            Err(e) => Err(e),
        },
        Action::Purge => dlq::delete(ops, id).await.map(|deleted| {
            let mut r = bare(id, if deleted { "purged" } else { "gone" }, None);
            r.row_deleted = deleted;
            r
        }),
    };
    result.unwrap_or_else(|e| {
        tracing::warn!(
            dead_letter = id,
            action = action.name(),
            "console action failed: {e}"
        );
        bare(
            id,
            "error",
            Some("the database refused (see the console's log)".into()),
        )
    })
}

async fn run(console: Console, plan: Plan, status: Arc<Mutex<JobStatus>>) {
    let options = ReplayOptions {
        window: console.inner.window,
        force: plan.force,
    };
    for &id in &plan.ids {
        note(&status, one(&console, plan.action, id, &options).await);
    }
    let summary = match status.lock() {
        Ok(s) => serde_json::json!({
            "actor": s.actor, "selection": s.selection, "rows": s.total,
            "forced": s.forced, "outcomes": s.outcomes, "job": s.id,
        }),
        Err(_) => return,
    };
    let kind = format!("console_{}", plan.action.name());
    if let Err(e) = events::record(&console.inner.ops, &kind, None, &summary).await {
        tracing::warn!("recording a console action in the operations journal: {e}");
    }
    // Finished only once it is in the journal, so whoever waits for it finds the entry.
    if let Ok(mut s) = status.lock() {
        s.finished = true;
    }
}
