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
use oncely_ops::{backlog, dlq, events, inspect, stats};
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

/// `GET /api/overview`: `oncely stats`, dead letters by consumer, reason and error class, the
/// prune watermark, the outbox and journal backlog (`null`: not installed), and rows per
/// minute (last hour) and per hour (last day) of applied, conflicts and dead letters.
pub(crate) async fn overview(State(c): State<Console>) -> Response {
    use browse::{Timeline, per_bucket};
    let ops = &c.inner.ops;
    let all = Query::default();
    let now = oncely_sql::clock::now_ms();
    let (min, hour) = (
        now - now % 60_000 - 59 * 60_000,
        now - now % 3_600_000 - 23 * 3_600_000,
    );
    let timeline = |since, size| async move {
        Ok::<_, oncely_core::Error>(json!({
            "since": since, "bucket_ms": size,
            "applied": per_bucket(ops, Timeline::Claims, since, size).await?,
            "conflicts": per_bucket(ops, Timeline::Conflicts, since, size).await?,
            "dead_letters": per_bucket(ops, Timeline::DeadLetters, since, size).await?,
            "duplicates": null,
        }))
    };
    let s = match stats::stats(ops).await {
        Ok(s) => s,
        Err(e) => return db(e),
    };
    let names: Vec<String> = s.consumers.iter().map(|k| k.consumer.clone()).collect();
    match tokio::try_join!(
        browse::groups(ops, &all),
        events::prune_watermark(ops),
        backlog::backlog(ops, &names),
        timeline(min, 60_000),
        timeline(hour, 3_600_000),
    ) {
        Ok((g, w, b, per_minute, per_hour)) => Json(json!({
            "stats": s, "groups": g, "prune_watermark": w, "backlog": b,
            "per_minute": per_minute, "per_hour": per_hour,
            "duplicates": "not recorded by any table: see the oncely_deliveries_total metric",
        }))
        .into_response(),
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

/// `GET /api/dead-letters/groups?…`: the rows matching the filter by consumer, reason and
/// error class (waits for the query, unlike the pages).
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
    let mut shown = dlq::DeadLetterJson::from(&row);
    shown.payload_text = if c.inner.hide_payloads {
        String::new()
    } else {
        crate::letters::payload_text(&row.payload, &c.inner.redact)
    };
    Json(json!({ "dead_letter": shown, "payload_hidden": c.inner.hide_payloads, "inbox": claimed }))
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

/// The body of `POST /api/prune`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub(crate) struct PruneBody {
    /// The window, `7d`, `36h`, `0s`… (the console's retention window when absent).
    older_than: Option<String>,
    /// False (default): only the preview count.
    confirm: bool,
}

/// `POST /api/prune`: without `"confirm": true` the preview `{"expired": n, "cutoff_ms"}`;
/// confirmed, `202 {"job": id}` running `oncely_ops::prune`.
pub(crate) async fn prune(
    State(c): State<Console>,
    Extension(actor): Extension<crate::Actor>,
    body: axum::body::Bytes,
) -> Response {
    let body: PruneBody = if body.is_empty() {
        PruneBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => return fail(StatusCode::BAD_REQUEST, &format!("body: {e}")),
        }
    };
    let window = match crate::prune::window_of(&c, body.older_than.as_deref()) {
        Ok(w) => w,
        Err(e) => return fail(StatusCode::BAD_REQUEST, &e.0),
    };
    match crate::prune::act(&c, window, body.confirm, &actor.0).await {
        Err(e) => fail(StatusCode::SERVICE_UNAVAILABLE, &e.0),
        Ok(crate::prune::PruneAnswer::Preview { expired, cutoff_ms }) => Json(json!({
            "expired": expired, "cutoff_ms": cutoff_ms,
            "older_than_ms": window.as_millis() as u64,
            "note": "nothing done: send confirm: true to prune",
        }))
        .into_response(),
        Ok(crate::prune::PruneAnswer::Started(job)) => {
            (StatusCode::ACCEPTED, Json(json!({ "job": job }))).into_response()
        }
    }
}

/// `POST /api/jobs/{id}/cancel`: the job stops before its next row (a prune: batch).
pub(crate) async fn cancel(State(c): State<Console>, Path(id): Path<u64>) -> Response {
    use crate::jobs::Cancel;
    match c.inner.jobs.cancel(id) {
        Cancel::Asked => (
            StatusCode::ACCEPTED,
            Json(json!({ "job": id, "cancelled": true })),
        )
            .into_response(),
        Cancel::Finished => fail(StatusCode::CONFLICT, "the job has ended already"),
        Cancel::Unknown => fail(
            StatusCode::NOT_FOUND,
            "no such job (jobs live as long as the console process)",
        ),
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
