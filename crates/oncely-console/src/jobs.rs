//! Bulk actions in the background: one task per job, one row at a time, its progress and
//! per-outcome summary readable while it runs (`/jobs/{id}`, `GET /api/jobs/{id}`). When a
//! job ends it is recorded in the operations journal (`console_replay`, `console_resolve`,
//! `console_purge`, `console_prune`: who, what selection, how many rows, the outcomes).
//!
//! A job can be cancelled ([`Jobs::cancel`]): a dead-letter job stops before its next row
//! (the rows not reached count as `not_run`); a prune stops after its current batch. Jobs
//! live in the console process only: a restart forgets them and their progress, not their
//! effects (each row's outcome is in the database, each job's summary in the journal once it
//! has ended; a job cut short by a restart has no summary there).

use crate::Console;
use oncely_ops::replay::{self, Decision, ReplayOptions, Replayed};
use oncely_ops::{dlq, events};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// Prune the inbox (not a dead-letter action: [`Jobs::start_prune`]).
    Prune,
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
            Self::Prune => "prune",
        }
    }
}

/// A job's state: progress while it runs, the summary once it has finished.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JobStatus {
    /// Job id.
    pub id: u64,
    /// `replay`, `resolve`, `purge` or `prune`.
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
    /// True once the job has ended (every row done, or cancelled).
    pub finished: bool,
    /// True once a cancel was asked for; the job stops before its next row (prune: batch).
    pub cancelled: bool,
    /// Always false: jobs live in the console process, a restart forgets them (the effects
    /// of the rows done stay, each in the database).
    pub survives_restart: bool,
    /// Rows per outcome (`applied`, `needs_decision`, `already_applied`, `refused_old`,
    /// `kept_stored`, `purged`, `gone`, `no_handler`, `error`, `not_run` after a cancel; for a
    /// prune `deleted`).
    pub outcomes: BTreeMap<String, u64>,
    /// Per-row results (the first [`KEPT_RESULTS`]).
    pub results: Vec<Replayed>,
}

/// One job: its state and its cancel flag.
#[derive(Clone)]
struct Job {
    status: Arc<Mutex<JobStatus>>,
    cancel: Arc<AtomicBool>,
}

/// The jobs of this console process (in memory: a restart forgets them).
#[derive(Default)]
pub(crate) struct Jobs {
    next: AtomicU64,
    all: Mutex<HashMap<u64, Job>>,
}

/// What [`Jobs::cancel`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cancel {
    /// The job will stop before its next row (or batch).
    Asked,
    /// It had ended already.
    Finished,
    /// No such job in this process.
    Unknown,
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
        let job = all.get(&id)?.status.lock().ok()?;
        Some(job.clone())
    }

    /// Asks job `id` to stop.
    pub fn cancel(&self, id: u64) -> Cancel {
        let Some(job) = self.all.lock().ok().and_then(|a| a.get(&id).cloned()) else {
            return Cancel::Unknown;
        };
        let Ok(mut s) = job.status.lock() else {
            return Cancel::Unknown;
        };
        if s.finished {
            return Cancel::Finished;
        }
        s.cancelled = true;
        job.cancel.store(true, Ordering::SeqCst);
        Cancel::Asked
    }

    fn add(
        &self,
        action: Action,
        actor: &str,
        selection: serde_json::Value,
        total: u64,
    ) -> (u64, Job) {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let job = Job {
            status: Arc::new(Mutex::new(JobStatus {
                id,
                action: action.name().to_owned(),
                actor: actor.to_owned(),
                forced: false,
                selection,
                total,
                done: 0,
                finished: false,
                cancelled: false,
                survives_restart: false,
                outcomes: BTreeMap::new(),
                results: Vec::new(),
            })),
            cancel: Arc::new(AtomicBool::new(false)),
        };
        if let Ok(mut all) = self.all.lock() {
            all.insert(id, job.clone());
        }
        (id, job)
    }

    /// Starts `plan` in the background; returns its id.
    pub fn start(&self, console: &Console, plan: Plan) -> u64 {
        let (id, job) = self.add(
            plan.action,
            &plan.actor,
            plan.selection.clone(),
            plan.ids.len() as u64,
        );
        if let Ok(mut s) = job.status.lock() {
            s.forced = plan.force;
        }
        tokio::spawn(run(console.clone(), plan, job));
        id
    }

    /// Starts a prune of the inbox ids older than `window` (`oncely_ops::prune`, which records
    /// its cutoff in the journal); `expected` is the preview's count. Returns the job's id.
    pub fn start_prune(
        &self,
        console: &Console,
        window: std::time::Duration,
        expected: u64,
        actor: &str,
    ) -> u64 {
        let selection = serde_json::json!({ "older_than_ms": window.as_millis() as u64 });
        let (id, job) = self.add(Action::Prune, actor, selection, expected);
        tokio::spawn(crate::prune::run(
            console.clone(),
            window,
            job.status,
            job.cancel,
        ));
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
        Action::Prune => Ok(bare(id, "error", Some("not a dead-letter action".into()))),
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

async fn run(console: Console, plan: Plan, job: Job) {
    let status = job.status;
    let options = ReplayOptions {
        window: console.inner.window,
        force: plan.force,
    };
    for (at, &id) in plan.ids.iter().enumerate() {
        if job.cancel.load(Ordering::SeqCst) {
            let left = (plan.ids.len() - at) as u64;
            if let Ok(mut s) = status.lock() {
                *s.outcomes.entry("not_run".to_owned()).or_default() += left;
            }
            break;
        }
        note(&status, one(&console, plan.action, id, &options).await);
    }
    let summary = match status.lock() {
        Ok(s) => serde_json::json!({
            "actor": s.actor, "selection": s.selection, "rows": s.total,
            "forced": s.forced, "outcomes": s.outcomes, "job": s.id, "cancelled": s.cancelled,
        }),
        Err(_) => return,
    };
    finish(&console, plan.action, None, &summary, &status).await;
}

/// Records the job's `summary` in the journal, then marks it finished (only then, so whoever
/// waits for it finds the entry).
pub(crate) async fn finish(
    console: &Console,
    action: Action,
    cutoff: Option<i64>,
    summary: &serde_json::Value,
    status: &Mutex<JobStatus>,
) {
    console.inner.groups.clear();
    let kind = format!("console_{}", action.name());
    if let Err(e) = events::record(&console.inner.ops, &kind, cutoff, summary).await {
        tracing::warn!("recording a console action in the operations journal: {e}");
    }
    if let Ok(mut s) = status.lock() {
        s.finished = true;
    }
}
