//! The server-rendered pages other than the dead-letter ones ([`crate::letters`]) and the
//! overview ([`crate::overview`]): an action's preview and confirmation, a job's progress
//! and its cancel, the audit journal.

use crate::Console;
use crate::actions::{self, Answer, Ask, Selection};
use crate::auth::Role;
use crate::html::{count, csrf_field, cut, error, page, table, when, when_opt};
use crate::jobs::Action;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
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
            let keep: Vec<&(String, String)> = pairs
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "csrf" | "confirm" | "confirm_force"))
                .collect();
            let what = match &ask.selection {
                Selection::Ids(_) => "selected",
                Selection::Filter(_) => "matching the filter",
            };
            let a = action.name();
            let body = html! {
                h1 { "Confirm " (a) }
                p id="preview" { (a) " " (count("preview", matched)) " dead letter(s) " (what) "?" }
                form method="post" action={ (base) "/actions/" (a) } {
                    (csrf_field(&c.inner.csrf))
                    @for (k, v) in keep {
                        input type="hidden" name=(k) value=(v);
                    }
                    @if ask.force {
                        p class="warn" {
                            "Forced replay runs rows refused as " b { "refused_old" } ": their \
                             claim may have been pruned, so a replay could apply a message twice. \
                             Only go on if you know these messages were never applied."
                        }
                        p {
                            label {
                                input type="checkbox" name="confirm_force" value="1" id="confirm_force";
                                " I confirm the force: these messages were never applied"
                            }
                            @if needs_force_confirmation && ask.confirm {
                                " " span class="err" { "(tick this to go on)" }
                            }
                        }
                    }
                    input type="hidden" name="confirm" value="1";
                    button id="confirm" class="danger" { "Yes, " (a) " " (matched) }
                }
                p { a href={ (base) "/dead-letters" } { "Cancel" } }
            };
            page(base, "Confirm", html! {}, body)
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
    let outcomes: Vec<Vec<Markup>> = j
        .outcomes
        .iter()
        .map(|(o, n)| vec![html! { (o) }, count(&format!("outcome:{o}"), n)])
        .collect();
    let results: Vec<Vec<Markup>> = j
        .results
        .iter()
        .map(|r| {
            vec![
                html! { a href={ (base) "/dead-letters/" (r.id) } { (r.id) } },
                html! { (r.consumer) },
                html! { (cut(r.message_id.as_deref().unwrap_or("(none)"), 80)) },
                html! { span class="outcome" data-id=(r.id) { (r.outcome) } },
                html! { (r.detail.as_deref().unwrap_or("")) },
                html! { (r.warning.as_deref().unwrap_or("")) },
            ]
        })
        .collect();
    let state = match (j.finished, j.cancelled) {
        (true, true) => "cancelled",
        (true, false) => "finished",
        (false, true) => "cancelling",
        (false, false) => "running",
    };
    let cancel = !j.finished && !j.cancelled && operator(role);
    let head = html! {
        @if !j.finished { meta http-equiv="refresh" content="1"; }
    };
    let body = html! {
        h1 { "Job " (id) ": " (j.action) }
        p id="job-state" data-state=(state) {
            (state) ": " progress max=(j.total.max(1)) value=(j.done) {}
            " " (j.done) " of " (j.total) " rows, by " (j.actor)
        }
        @if cancel {
            form method="post" action={ (base) "/jobs/" (id) "/cancel" } {
                (csrf_field(&c.inner.csrf))
                button id="cancel" class="danger" { "Cancel the job" } " "
                span class="muted" { "(stops before the next row; rows done stay done)" }
            }
        }
        p class="muted" {
            "Jobs live in this console process: a restart forgets this page, not what was done \
             (each row's outcome is in the database; the summary goes to the audit journal when \
             the job ends)."
        }
        h2 { "Summary" }
        (table("outcomes", &["outcome", "rows"], &outcomes))
        h2 { "Rows" }
        (table(
            "results",
            &["id", "consumer", "message id", "outcome", "detail", "warning"],
            &results
        ))
    };
    page(base, "Job", head, body)
}

/// `/audit`: the operations journal, newest first.
pub(crate) async fn audit(State(c): State<Console>, RawQuery(q): RawQuery) -> Response {
    let base = &c.inner.base;
    let before = crate::auth::query_param(q.as_deref(), "before").and_then(|b| b.parse().ok());
    let rows = match events::list(&c.inner.ops, before, 100).await {
        Ok(r) => r,
        Err(e) => return error(base, StatusCode::SERVICE_UNAVAILABLE, &actions::db(e).0),
    };
    let cells: Vec<Vec<Markup>> = rows
        .iter()
        .map(|e| {
            vec![
                html! { (e.id) },
                html! { (when(e.at)) },
                html! { span class="kind" { (e.kind) } },
                html! { (when_opt(e.cutoff)) },
                html! { code { (cut(&e.detail, 2000)) } },
            ]
        })
        .collect();
    let older = rows.last().filter(|_| rows.len() == 100);
    let body = html! {
        h1 { "Audit" }
        p class="muted" {
            "Every operation recorded in the operations journal: prune cutoffs, replays and \
             resolutions (by the CLI or this console), console jobs with who ran them, their \
             selection and outcomes."
        }
        (table("audit", &["#", "when", "what", "prune cutoff", "detail"], &cells))
        @if let Some(e) = older {
            p { a href={ (base) "/audit?before=" (e.id) } { "Older →" } }
        }
    };
    page(base, "Audit", html! {}, body)
}

/// True when the request may act.
pub(crate) fn operator(role: Role) -> bool {
    role == Role::Operator
}
