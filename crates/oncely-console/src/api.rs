//! The JSON API: everything the pages show and do (documented in docs/console.md).

use crate::Console;
use crate::actions::{self, Answer, Ask, Selection, query_of};
use crate::jobs::Action;
use axum::Extension;
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use oncely_ops::browse::{self, Query};
use oncely_ops::{dlq, events, inspect, stats};
use serde_json::json;

fn fail(status: StatusCode, text: &str) -> Response {
    (status, Json(json!({ "error": text }))).into_response()
}

fn db(e: oncely_core::Error) -> Response {
    fail(StatusCode::SERVICE_UNAVAILABLE, &actions::db(e).0)
}

fn pairs(q: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(q.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

fn param<T: std::str::FromStr>(p: &[(String, String)], name: &str) -> Option<T> {
    p.iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.parse().ok())
}

/// `GET /api/csrf`: the token every POST carries as `X-CSRF-Token`.
pub(crate) async fn csrf(State(c): State<Console>) -> Response {
    Json(json!({ "csrf": c.inner.csrf })).into_response()
}

/// `GET /api/overview`: `oncely stats`, dead letters by consumer and reason, the prune watermark.
pub(crate) async fn overview(State(c): State<Console>) -> Response {
    let ops = &c.inner.ops;
    let all = Query::default();
    match tokio::try_join!(
        stats::stats(ops),
        browse::groups(ops, &all),
        events::prune_watermark(ops)
    ) {
        Ok((s, g, w)) => {
            Json(json!({ "stats": s, "groups": g, "prune_watermark": w })).into_response()
        }
        Err(e) => db(e),
    }
}

/// `GET /api/dead-letters?consumer&reason&from&to&message_id&text&before&limit`: a page of
/// rows (newest first), the `total` matching the filter, and `next_before` for the next page.
pub(crate) async fn dead_letters(State(c): State<Console>, RawQuery(raw): RawQuery) -> Response {
    let p = pairs(raw.as_deref());
    let q = query_of(p.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let limit = param::<u32>(&p, "limit").unwrap_or(50).clamp(1, 1000);
    let before = param::<i64>(&p, "before");
    let ops = &c.inner.ops;
    match tokio::try_join!(browse::page(ops, &q, before, limit), browse::count(ops, &q)) {
        Ok((rows, total)) => {
            let next = rows
                .last()
                .filter(|_| rows.len() == limit as usize)
                .map(|r| r.id);
            Json(json!({ "filter": q, "total": total, "rows": rows, "next_before": next }))
                .into_response()
        }
        Err(e) => db(e),
    }
}

/// `GET /api/dead-letters/groups?…`: the rows matching the filter by consumer and reason.
pub(crate) async fn groups(State(c): State<Console>, RawQuery(raw): RawQuery) -> Response {
    let p = pairs(raw.as_deref());
    let q = query_of(p.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    match browse::groups(&c.inner.ops, &q).await {
        Ok(g) => Json(json!({ "filter": q, "groups": g })).into_response(),
        Err(e) => db(e),
    }
}

/// `GET /api/dead-letters/{id}`: the row as `oncely dlq show --json`, and `inspect` of its id.
pub(crate) async fn dead_letter(State(c): State<Console>, Path(id): Path<i64>) -> Response {
    let ops = &c.inner.ops;
    let row = match dlq::show(ops, id).await {
        Ok(Some(r)) => r,
        Ok(None) => return fail(StatusCode::NOT_FOUND, "no dead letter with this id"),
        Err(e) => return db(e),
    };
    let found = match &row.message_id {
        Some(m) => match inspect::inspect(ops, m).await {
            Ok(i) => Some(i),
            Err(e) => return db(e),
        },
        None => None,
    };
    let claimed = found.as_ref().map(|i| &i.claimed);
    Json(json!({ "dead_letter": dlq::DeadLetterJson::from(&row), "inbox": claimed }))
        .into_response()
}

/// The body of `POST /api/dead-letters/{replay|resolve|purge}`.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ActionBody {
    /// These rows…
    #[serde(default)]
    ids: Option<Vec<i64>>,
    /// …or every row matching this filter.
    #[serde(default)]
    filter: Option<Query>,
    /// False (default): only the preview count.
    #[serde(default)]
    confirm: bool,
    /// Replay rows refused as `refused_old` anyway.
    #[serde(default)]
    force: bool,
    /// The second confirmation a forced replay needs.
    #[serde(default)]
    confirm_force: bool,
}

/// `POST /api/dead-letters/{action}`: `{"ids": […]}` or `{"filter": {…}}`; without
/// `"confirm": true` the answer is the preview `{"matched": n}`; confirmed, `202 {"job": id}`.
pub(crate) async fn action(
    State(c): State<Console>,
    Path(action): Path<String>,
    Extension(actor): Extension<crate::Actor>,
    body: axum::body::Bytes,
) -> Response {
    let Some(action) = Action::parse(&action) else {
        return fail(
            StatusCode::NOT_FOUND,
            "no such action (replay, resolve, purge)",
        );
    };
    let body: ActionBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return fail(StatusCode::BAD_REQUEST, &format!("body: {e}")),
    };
    let selection = match (body.ids, body.filter) {
        (Some(ids), None) => Selection::Ids(ids),
        (None, Some(f)) => Selection::Filter(f),
        _ => return fail(StatusCode::BAD_REQUEST, "give either ids or filter"),
    };
    let ask = Ask {
        action,
        selection,
        confirm: body.confirm,
        force: body.force,
        confirm_force: body.confirm_force,
    };
    match actions::act(&c, ask, &actor.0).await {
        Err(e) => fail(StatusCode::CONFLICT, &e.0),
        Ok(Answer::Preview {
            matched,
            needs_force_confirmation,
        }) => {
            let status = if needs_force_confirmation && body.confirm {
                StatusCode::CONFLICT
            } else {
                StatusCode::OK
            };
            let note = if needs_force_confirmation {
                "a forced replay may apply a message whose claim was pruned twice: send confirm_force: true as well"
            } else {
                "nothing done: send confirm: true to act"
            };
            (status, Json(json!({ "action": action.name(), "matched": matched, "needs_force_confirmation": needs_force_confirmation, "note": note }))).into_response()
        }
        Ok(Answer::Started(job)) => {
            (StatusCode::ACCEPTED, Json(json!({ "job": job }))).into_response()
        }
    }
}

/// `GET /api/jobs/{id}`: progress and per-outcome summary.
pub(crate) async fn job(State(c): State<Console>, Path(id): Path<u64>) -> Response {
    match c.inner.jobs.get(id) {
        Some(j) => Json(j).into_response(),
        None => fail(StatusCode::NOT_FOUND, "no such job"),
    }
}

/// `GET /api/audit?before&limit`: the operations journal, newest first.
pub(crate) async fn audit(State(c): State<Console>, RawQuery(raw): RawQuery) -> Response {
    let p = pairs(raw.as_deref());
    let limit = param::<u32>(&p, "limit").unwrap_or(100).clamp(1, 1000);
    match events::list(&c.inner.ops, param(&p, "before"), limit).await {
        Ok(e) => Json(json!({ "events": e })).into_response(),
        Err(e) => db(e),
    }
}
