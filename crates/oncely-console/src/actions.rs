//! What the action endpoints share (the page forms and `POST /api/dead-letters/{action}`):
//! parse a selection — ids, or everything matching a filter — count it for the preview, and
//! start the job only once confirmed; `force` replay needs a second confirmation of its own.

use crate::Console;
use crate::jobs::{Action, Plan};
use oncely_ops::browse::{self, Query};
use oncely_ops::time::parse_utc_ms;

/// At most this many rows per bulk job.
pub(crate) const MAX_ROWS: u32 = 1_000_000;

/// Which rows an action covers.
#[derive(Debug, Clone)]
pub(crate) enum Selection {
    /// These row ids.
    Ids(Vec<i64>),
    /// Every row matching the filter when the job starts.
    Filter(Query),
}

/// One action request.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub action: Action,
    pub selection: Selection,
    pub confirm: bool,
    pub force: bool,
    pub confirm_force: bool,
}

/// What the console answers.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// Nothing done yet: this many rows match; confirm to act (and, for a forced replay,
    /// confirm the force too).
    Preview {
        matched: i64,
        needs_force_confirmation: bool,
    },
    /// Started as this job.
    Started(u64),
}

/// Why an action was not taken.
#[derive(Debug, Clone)]
pub(crate) struct Refused(pub String);

/// A [`Query`] from `key=value` pairs (a query string or a form): consumer, reason, from, to
/// (unix ms or `YYYY-MM-DD[THH:MM]`, UTC), message_id, text. Empty values match everything.
pub(crate) fn query_of<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Query {
    let mut q = Query::default();
    for (k, v) in pairs {
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        match k {
            "consumer" => q.consumer = Some(v.to_owned()),
            "reason" => q.reason = Some(v.to_owned()),
            "from" => q.from_ms = parse_utc_ms(v),
            "to" => q.to_ms = parse_utc_ms(v),
            "message_id" => q.message_id = Some(v.to_owned()),
            "text" => q.text = Some(v.to_owned()),
            _ => {}
        }
    }
    q
}

impl Selection {
    pub fn describe(&self) -> serde_json::Value {
        match self {
            Self::Ids(ids) => serde_json::json!({ "ids": ids }),
            Self::Filter(q) => serde_json::json!({ "filter": q }),
        }
    }
}

/// Previews or starts `ask` for `actor`.
pub(crate) async fn act(console: &Console, ask: Ask, actor: &str) -> Result<Answer, Refused> {
    let ops = &console.inner.ops;
    if ask.force && ask.action != Action::Replay {
        return Err(Refused("force applies to replay only".into()));
    }
    if ask.action == Action::Replay && console.inner.replayers.is_empty() {
        return Err(Refused(
            "no handler is registered with this console, so it cannot replay".into(),
        ));
    }
    let matched = match &ask.selection {
        Selection::Ids(ids) if ids.is_empty() => return Err(Refused("no rows selected".into())),
        Selection::Ids(ids) => ids.len() as i64,
        Selection::Filter(q) => browse::count(ops, q).await.map_err(db)?,
    };
    let needs_force_confirmation = ask.force && !ask.confirm_force;
    if !ask.confirm || needs_force_confirmation {
        return Ok(Answer::Preview {
            matched,
            needs_force_confirmation,
        });
    }
    let ids = match &ask.selection {
        Selection::Ids(ids) => ids.clone(),
        Selection::Filter(q) => browse::ids(ops, q, MAX_ROWS).await.map_err(db)?,
    };
    let plan = Plan {
        action: ask.action,
        ids,
        selection: ask.selection.describe(),
        force: ask.force,
        actor: actor.to_owned(),
    };
    Ok(Answer::Started(console.inner.jobs.start(console, plan)))
}

/// A database error as the page shows it: what failed, not the driver's text (logged).
pub(crate) fn db(e: oncely_core::Error) -> Refused {
    tracing::warn!("console: {e}");
    Refused("the database refused the query (see the console's log)".into())
}
