//! The server-rendered pages other than the dead-letter ones ([`crate::letters`]): the
//! overview, an action's preview and confirmation, a job's progress, the audit journal.

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
use oncely_ops::browse::{self, Query};
use oncely_ops::{events, stats};

pub(crate) use crate::letters::{dead_letter, dead_letters};

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

fn when(ms: Option<i64>) -> String {
    ms.map_or_else(|| "-".to_owned(), time::format)
}

/// A number with the name a test compares it by.
pub(crate) fn count(key: &str, n: impl std::fmt::Display) -> String {
    format!("<span data-count=\"{}\">{n}</span>", esc(key))
}

/// `/`: per consumer, inbox rows and their age, dead letters by reason, store health.
pub(crate) async fn overview(State(c): State<Console>) -> Response {
    let base = &c.inner.base;
    let ops = &c.inner.ops;
    let started = std::time::Instant::now();
    let all = Query::default();
    let (s, groups, mark) = match tokio::try_join!(
        stats::stats(ops),
        browse::groups(ops, &all),
        events::prune_watermark(ops)
    ) {
        Ok(x) => x,
        Err(e) => return error(base, StatusCode::SERVICE_UNAVAILABLE, &actions::db(e).0),
    };
    let took = started.elapsed();
    let chart = chart(&c).await;
    let rows: Vec<Vec<String>> = s
        .consumers
        .iter()
        .map(|k| {
            let key = |what: &str| format!("{what}:{}", k.consumer);
            vec![
                format!(
                    "<a href=\"{}/dead-letters?consumer={}\">{}</a>",
                    esc(base),
                    esc(&crate::html::url(&k.consumer)),
                    esc(&k.consumer)
                ),
                count(&key("ids_held"), k.ids_held),
                esc(&when(k.oldest_ms)),
                esc(&when(k.newest_ms)),
                count(&key("dead_letters"), k.dead_letters),
            ]
        })
        .collect();
    let by_reason: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            vec![
                esc(&g.consumer),
                format!(
                    "<a href=\"{}/dead-letters?consumer={}&amp;reason={}\">{}</a>",
                    esc(base),
                    esc(&crate::html::url(&g.consumer)),
                    esc(&crate::html::url(&g.reason)),
                    esc(&g.reason)
                ),
                count(&format!("group:{}:{}", g.consumer, g.reason), g.rows),
                esc(&g.deliveries.to_string()),
                esc(&time::format(g.first_seen)),
                esc(&time::format(g.last_seen)),
            ]
        })
        .collect();
    let body = format!(
        "<h1>Overview</h1>\
         <p class=\"ok\" id=\"health\">Store answering ({} ms for these numbers). Inbox: {} ids; \
         dead letters: {}. Last prune cutoff: {}.</p>\
         <h2>Consumers</h2>{}<h2>Dead letters by reason</h2>{}{chart}",
        took.as_millis(),
        count("ids_held", s.ids_held),
        count("dead_letters", s.dead_letters),
        esc(&when(mark)),
        table(
            "consumers",
            &["consumer", "inbox ids", "oldest", "newest", "dead letters"],
            &rows
        ),
        table(
            "reasons",
            &[
                "consumer",
                "reason",
                "rows",
                "deliveries",
                "first seen",
                "last seen"
            ],
            &by_reason
        ),
    );
    page(base, "Overview", "", &body)
}

/// The last 24 hours per hour: inbox claims and dead letters, as bars (`<progress>`, so no
/// script and no inline style).
async fn chart(c: &Console) -> String {
    use oncely_ops::browse::{Timeline, per_hour};
    let ops = &c.inner.ops;
    let now = oncely_sql::now_ms();
    let since = now - now % 3_600_000 - 23 * 3_600_000;
    let (claims, dead) = match tokio::try_join!(
        per_hour(ops, Timeline::Claims, since),
        per_hour(ops, Timeline::DeadLetters, since)
    ) {
        Ok(x) => x,
        Err(e) => return format!("<p class=\"err\">{}</p>", esc(&actions::db(e).0)),
    };
    let at = |v: &[(i64, i64)], h: i64| v.iter().find(|(t, _)| *t == h).map_or(0, |(_, n)| *n);
    let max = claims
        .iter()
        .chain(&dead)
        .map(|(_, n)| *n)
        .max()
        .unwrap_or(0)
        .max(1);
    let rows: Vec<Vec<String>> = (0..24)
        .map(|i| since + i * 3_600_000)
        .rev()
        .map(|h| {
            let (a, d) = (at(&claims, h), at(&dead, h));
            vec![
                esc(&time::format(h)[..16]),
                format!(
                    "<progress max=\"{max}\" value=\"{a}\"></progress> {}",
                    count(&format!("claimed_hour:{h}"), a)
                ),
                format!(
                    "<progress class=\"bad\" max=\"{max}\" value=\"{d}\"></progress> {}",
                    count(&format!("dead_hour:{h}"), d)
                ),
            ]
        })
        .collect();
    format!(
        "<h2>Last 24 hours (UTC), per hour</h2><p class=\"muted\">From the tables' own \
         timestamps: ids claimed (messages applied) and dead letters first seen. Duplicates are not \
         written to the database: see the <code>oncely_deliveries_total</code> metric.</p>{}",
        table("timeline", &["hour", "claimed", "dead-lettered"], &rows)
    )
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
pub(crate) async fn job(State(c): State<Console>, Path(id): Path<u64>) -> Response {
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
    let state = if j.finished { "finished" } else { "running" };
    let head = if j.finished {
        ""
    } else {
        "<meta http-equiv=\"refresh\" content=\"1\">"
    };
    let body = format!(
        "<h1>Job {id}: {}</h1><p id=\"job-state\" data-state=\"{state}\">{state}: \
         <progress max=\"{}\" value=\"{}\"></progress> {} of {} rows, by {}</p>\
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
