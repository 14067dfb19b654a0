//! The server-rendered pages other than the dead-letter ones ([`crate::letters`]) and the
//! overview ([`crate::overview`]): an action's preview and confirmation, a job's progress
//! and its cancel, the audit journal.

use crate::actions::{self, Answer, Ask, Selection};
use crate::auth::Role;
use crate::html::{csrf_field, error, esc, page, table};
use crate::jobs::Action;
use crate::{Console, time};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use oncely_ops::events;

pub(crate) use crate::letters::{dead_letter, dead_letters};
pub(crate) use crate::overview::{groups_table, overview, prune};

/// The stylesheet.
pub(crate) async fn css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../assets/console.css"),
    )
        .into_response()
}

/// The icon (so browsers do not ask for a `/favicon.ico` the console may not own).
pub(crate) async fn favicon() -> Response {
    (
        [(header::CONTENT_TYPE, "image/svg+xml")],
        include_str!("../assets/favicon.svg"),
    )
        .into_response()
}

pub(crate) fn when(ms: Option<i64>) -> String {
    ms.map_or_else(|| "-".to_owned(), time::format)
}

/// A number with the name a test compares it by.
pub(crate) fn count(key: &str, n: impl std::fmt::Display) -> String {
    format!("<span data-count=\"{}\">{n}</span>", esc(key))
}

/// `POST /jobs/{id}/cancel`: asks the job to stop, back to its page.
pub(crate) async fn cancel(State(c): State<Console>, Path(id): Path<u64>) -> Response {
    let base = &c.inner.base;
    match c.inner.jobs.cancel(id) {
        crate::jobs::Cancel::Unknown => error(
            base,
            StatusCode::NOT_FOUND,
            "no such job (jobs live as long as the console process)",
        ),
        _ => Redirect::to(&format!("{base}/jobs/{id}")).into_response(),
    }
}

/// The fields of an action form (`id` repeated, or `all` + filter fields).
fn ask_of(action: Action, pairs: &[(String, String)]) -> Result<Ask, String> {
    let has = |k: &str| pairs.iter().any(|(key, v)| key == k && !v.is_empty());
    let selection = if has("all") {
        Selection::Filter(actions::query_of(
            pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ))
    } else {
        let ids = pairs
            .iter()
            .filter(|(k, _)| k == "id")
            .map(|(_, v)| {
                v.parse::<i64>()
                    .map_err(|_| "a row id is not a number".to_owned())
            })
            .collect::<Result<Vec<_>, _>>()?;
        Selection::Ids(ids)
    };
    Ok(Ask {
        action,
        selection,
        confirm: has("confirm"),
        force: has("force"),
        confirm_force: has("confirm_force"),
    })
}

/// `POST /actions/{action}`: the preview (count, confirmation) or, confirmed, the job.
pub(crate) async fn action(
    State(c): State<Console>,
    Path(action): Path<String>,
    Extension(actor): Extension<crate::Actor>,
    body: Bytes,
) -> Response {
    let base = &c.inner.base;
    let Some(action) = Action::parse(&action) else {
        return error(base, StatusCode::NOT_FOUND, "no such action");
    };
    let pairs: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
    let ask = match ask_of(action, &pairs) {
        Ok(a) => a,
        Err(e) => return error(base, StatusCode::BAD_REQUEST, &e),
    };
    match actions::act(&c, ask.clone(), &actor.0).await {
        Err(e) => error(base, StatusCode::CONFLICT, &e.0),
        Ok(Answer::Started(job)) => Redirect::to(&format!("{base}/jobs/{job}")).into_response(),
        Ok(Answer::Preview {
            matched,
            needs_force_confirmation,
        }) => {
            let keep: String = pairs
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "csrf" | "confirm" | "confirm_force"))
                .map(|(k, v)| {
                    format!(
                        "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
                        esc(k),
                        esc(v)
                    )
                })
                .collect();
            let what = match &ask.selection {
                Selection::Ids(_) => "selected".to_owned(),
                Selection::Filter(_) => "matching the filter".to_owned(),
            };
            let force = if ask.force {
                format!(
                    "<p class=\"warn\">Forced replay runs rows refused as <b>refused_old</b>: their \
                     claim may have been pruned, so a replay could apply a message twice. Only go on \
                     if you know these messages were never applied.</p>\
                     <p><label><input type=\"checkbox\" name=\"confirm_force\" value=\"1\" id=\"confirm_force\"> \
                     I confirm the force: these messages were never applied</label>{}</p>",
                    if needs_force_confirmation && ask.confirm {
                        " <span class=\"err\">(tick this to go on)</span>"
                    } else {
                        ""
                    }
                )
            } else {
                String::new()
            };
            let body = format!(
                "<h1>Confirm {a}</h1><p id=\"preview\">{a} {} dead letter(s) {what}?</p>\
                 <form method=\"post\" action=\"{b}/actions/{a}\">{}{keep}{force}\
                 <input type=\"hidden\" name=\"confirm\" value=\"1\">\
                 <button id=\"confirm\" class=\"danger\">Yes, {a} {matched}</button></form>\
                 <p><a href=\"{b}/dead-letters\">Cancel</a></p>",
                count("preview", matched),
                csrf_field(&c.inner.csrf),
                a = action.name(),
                b = esc(base),
            );
            page(base, "Confirm", "", &body)
        }
    }
}

/// `/jobs/{id}`: progress while it runs (the page refreshes itself), then the summary.
pub(crate) async fn job(
    State(c): State<Console>,
    Extension(role): Extension<Role>,
    Path(id): Path<u64>,
) -> Response {
    let base = &c.inner.base;
    let Some(j) = c.inner.jobs.get(id) else {
        return error(
            base,
            StatusCode::NOT_FOUND,
            "no such job (jobs live as long as the console process)",
        );
    };
    let outcomes: Vec<Vec<String>> = j
        .outcomes
        .iter()
        .map(|(o, n)| vec![esc(o), count(&format!("outcome:{o}"), n)])
        .collect();
    let results: Vec<Vec<String>> = j
        .results
        .iter()
        .map(|r| {
            vec![
                format!(
                    "<a href=\"{}/dead-letters/{}\">{}</a>",
                    esc(base),
                    r.id,
                    r.id
                ),
                esc(&r.consumer),
                esc(&crate::html::cut(
                    r.message_id.as_deref().unwrap_or("(none)"),
                    80,
                )),
                format!(
                    "<span class=\"outcome\" data-id=\"{}\">{}</span>",
                    r.id,
                    esc(&r.outcome)
                ),
                esc(r.detail.as_deref().unwrap_or("")),
                esc(r.warning.as_deref().unwrap_or("")),
            ]
        })
        .collect();
    let state = match (j.finished, j.cancelled) {
        (true, true) => "cancelled",
        (true, false) => "finished",
        (false, true) => "cancelling",
        (false, false) => "running",
    };
    let cancel = if !j.finished && !j.cancelled && operator(role) {
        format!(
            "<form method=\"post\" action=\"{}/jobs/{id}/cancel\">{}<button id=\"cancel\" class=\"danger\">Cancel the job</button> \
             <span class=\"muted\">(stops before the next row; rows done stay done)</span></form>",
            esc(base),
            csrf_field(&c.inner.csrf)
        )
    } else {
        String::new()
    };
    let head = if j.finished {
        ""
    } else {
        "<meta http-equiv=\"refresh\" content=\"1\">"
    };
    let body = format!(
        "<h1>Job {id}: {}</h1><p id=\"job-state\" data-state=\"{state}\">{state}: \
         <progress max=\"{}\" value=\"{}\"></progress> {} of {} rows, by {}</p>{cancel}\
         <p class=\"muted\">Jobs live in this console process: a restart forgets this page, not \
         what was done (each row's outcome is in the database; the summary goes to the audit \
         journal when the job ends).</p>\
         <h2>Summary</h2>{}<h2>Rows</h2>{}",
        esc(&j.action),
        j.total.max(1),
        j.done,
        j.done,
        j.total,
        esc(&j.actor),
        table("outcomes", &["outcome", "rows"], &outcomes),
        table(
            "results",
            &[
                "id",
                "consumer",
                "message id",
                "outcome",
                "detail",
                "warning"
            ],
            &results
        ),
    );
    page(base, "Job", head, &body)
}

/// `/audit`: the operations journal, newest first.
pub(crate) async fn audit(State(c): State<Console>, RawQuery(q): RawQuery) -> Response {
    let base = &c.inner.base;
    let before = crate::auth::query_param(q.as_deref(), "before").and_then(|b| b.parse().ok());
    let rows = match events::list(&c.inner.ops, before, 100).await {
        Ok(r) => r,
        Err(e) => return error(base, StatusCode::SERVICE_UNAVAILABLE, &actions::db(e).0),
    };
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|e| {
            vec![
                e.id.to_string(),
                esc(&time::format(e.at)),
                format!("<span class=\"kind\">{}</span>", esc(&e.kind)),
                esc(&when(e.cutoff)),
                format!("<code>{}</code>", esc(&crate::html::cut(&e.detail, 2000))),
            ]
        })
        .collect();
    let older = rows
        .last()
        .filter(|_| rows.len() == 100)
        .map(|e| {
            format!(
                "<p><a href=\"{}/audit?before={}\">Older →</a></p>",
                esc(base),
                e.id
            )
        })
        .unwrap_or_default();
    let body = format!(
        "<h1>Audit</h1><p class=\"muted\">Every operation recorded in the operations journal: \
         prune cutoffs, replays and resolutions (by the CLI or this console), console jobs with \
         who ran them, their selection and outcomes.</p>{}{older}",
        table(
            "audit",
            &["#", "when", "what", "prune cutoff", "detail"],
            &cells
        )
    );
    page(base, "Audit", "", &body)
}

/// True when the request may act.
pub(crate) fn operator(role: Role) -> bool {
    role == Role::Operator
}
