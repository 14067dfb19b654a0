//! Prune as a console action: the preview (how many inbox ids are older than the window),
//! then, confirmed, `oncely_ops::prune::prune` as a background job — the same code as
//! `oncely prune`, so the same lock, batches, and cutoff recorded in the journal (`prune`,
//! which replay's `refused_old` check reads), plus a `console_prune` entry with who ran it.

use crate::Console;
use crate::actions::{Refused, db};
use crate::jobs::{Action, JobStatus, finish};
use oncely_ops::prune::{self, PruneOptions};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a prune request answers.
#[derive(Debug, Clone)]
pub(crate) enum PruneAnswer {
    /// Nothing done: this many ids are older than the window now.
    Preview { expired: u64, cutoff_ms: i64 },
    /// Started as this job.
    Started(u64),
}

/// The window of a request: `older_than` as `7d`, `36h`, `0s`… (the console's retention
/// window when empty).
pub(crate) fn window_of(console: &Console, text: Option<&str>) -> Result<Duration, Refused> {
    match text.map(str::trim).filter(|t| !t.is_empty()) {
        None => Ok(console.inner.window),
        Some(t) => oncely_ops::retention::parse_duration(t).map_err(|e| Refused(e.to_string())),
    }
}

/// Previews or (confirmed) starts a prune of the ids older than `window`, for `actor`.
pub(crate) async fn act(
    console: &Console,
    window: Duration,
    confirm: bool,
    actor: &str,
) -> Result<PruneAnswer, Refused> {
    let ops = &console.inner.ops;
    let expired = prune::expired(ops, window).await.map_err(db)?;
    if !confirm {
        let cutoff_ms = oncely_sql::clock::now_ms() - window.as_millis() as i64;
        return Ok(PruneAnswer::Preview { expired, cutoff_ms });
    }
    Ok(PruneAnswer::Started(
        console
            .inner
            .jobs
            .start_prune(console, window, expired, actor),
    ))
}

/// The job: one prune run, its progress in `status`, stopped after a batch by `cancel`.
pub(crate) async fn run(
    console: Console,
    window: Duration,
    status: Arc<Mutex<JobStatus>>,
    cancel: Arc<AtomicBool>,
) {
    let options = PruneOptions {
        window,
        stop: Some(cancel),
        ..PruneOptions::default()
    };
    let progress = status.clone();
    let mut on_batch = move |p: prune::PruneProgress| {
        if let Ok(mut s) = progress.lock() {
            s.total = s.total.max(p.expired_at_start);
            s.done = p.deleted;
            s.outcomes.insert("deleted".into(), p.deleted);
        }
    };
    let result = prune::prune(&console.inner.ops, &options, &mut on_batch).await;
    let (cutoff, report) = match result {
        Ok(r) => {
            if let Ok(mut s) = status.lock() {
                s.done = r.deleted;
                s.outcomes.insert("deleted".into(), r.deleted);
                if !r.ran {
                    s.outcomes.insert("another_pruner_running".into(), 1);
                }
            }
            (
                Some(r.cutoff_ms),
                serde_json::to_value(&r).unwrap_or_default(),
            )
        }
        Err(e) => {
            tracing::warn!("console prune failed: {e}");
            if let Ok(mut s) = status.lock() {
                s.outcomes.insert("error".into(), 1);
            }
            (
                None,
                serde_json::json!({ "error": "the database refused (see the console's log)" }),
            )
        }
    };
    let summary = match status.lock() {
        Ok(s) => serde_json::json!({
            "actor": s.actor, "selection": s.selection, "rows": s.done, "job": s.id,
            "outcomes": s.outcomes, "cancelled": s.cancelled, "report": report,
        }),
        Err(_) => return,
    };
    finish(&console, Action::Prune, cutoff, &summary, &status).await;
}
