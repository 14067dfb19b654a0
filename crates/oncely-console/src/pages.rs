//! The server-rendered pages other than the dead-letter ones ([`crate::letters`]): the
//! overview, an action's preview and confirmation, a job's progress, the audit journal.

use crate::actions::{self, Answer, Ask, Selection};
use crate::auth::Role;
use crate::groups::Shown;
use crate::html::{csrf_field, error, esc, page, table};
use crate::jobs::Action;
use crate::{Console, time};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use oncely_ops::browse::Query;
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

fn window_text(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => "0s".to_owned(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s => format!("{s}s"),
    }
}

/// The dead-letter groups (consumer, reason, error class) as a table, or why there is none
/// yet ([`crate::groups`]: a page does not wait for a slow `GROUP BY`).
pub(crate) fn groups_table(base: &str, id: &str, shown: &Shown) -> String {
    let (groups, age) = match shown {
        Shown::Ready(g, age) => (g, *age),
        Shown::Counting => {
            return format!(
                "<p class=\"muted\" id=\"{id}-counting\">The groups are being counted (many rows); \
                 reload the page to see them.</p>"
            );
        }
        Shown::Failed => {
            return "<p class=\"err\">The database refused the query (see the console's log).</p>"
                .to_owned();
        }
    };
    let rows: Vec<Vec<String>> = groups
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
                format!("<span class=\"class\">{}</span>", esc(&g.error_class)),
                count(
                    &format!("group:{}:{}:{}", g.consumer, g.reason, g.error_class),
                    g.rows,
                ),
                esc(&g.deliveries.to_string()),
                esc(&time::format(g.first_seen)),
                esc(&time::format(g.last_seen)),
            ]
        })
        .collect();
    let note = if age.as_secs() >= 1 {
        format!(
            "<p class=\"muted\">Counted {} s ago (recounting in the background).</p>",
            age.as_secs()
        )
    } else {
        String::new()
    };
    format!(
        "{}{note}",
        table(
            id,
            &[
                "consumer",
                "reason",
                "error class",
                "rows",
                "deliveries",
                "first seen",
                "last seen"
            ],
            &rows
        )
    )
}

/// The outbox and journal backlog (oncely-effects' tables; "not installed" without them).
fn backlog_section(b: &oncely_ops::backlog::Backlog) -> String {
    let outbox = match &b.outbox {
        None => "<p class=\"muted\" id=\"outbox-missing\">Outbox: not installed (no oncely-effects outbox table).</p>".to_owned(),
        Some(rows) => {
            let total: i64 = rows.iter().map(|r| r.rows).sum();
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        esc(&r.destination),
                        count(&format!("outbox:{}", r.destination), r.rows),
                        esc(&time::format(r.oldest_ms)),
                    ]
                })
                .collect();
            format!(
                "<p>Outbox backlog (written, not dispatched): {} rows.</p>{}",
                count("outbox_backlog", total),
                table("outbox", &["destination", "rows", "oldest"], &cells)
            )
        }
    };
    let journal = match &b.journal_pending {
        None => "<p class=\"muted\" id=\"journal-missing\">Effect journal: not installed (no oncely-effects journal table).</p>".to_owned(),
        Some(rows) => {
            let total: i64 = rows.iter().map(|r| r.rows).sum();
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        esc(r.consumer.as_deref().unwrap_or("(not known here)")),
                        format!("<code>{}</code>", esc(&r.key_part)),
                        count(&format!("journal:{}", r.key_part), r.rows),
                        esc(&time::format(r.oldest_ms)),
                    ]
                })
                .collect();
            format!(
                "<p>Effect-journal rows pending (outside calls begun, not settled): {} rows.</p>{}",
                count("journal_pending", total),
                table("journal", &["consumer", "key part", "pending", "oldest"], &cells)
            )
        }
    };
    format!("<h2>Outbox and effect journal</h2>{outbox}{journal}")
}

/// `/`: per consumer, inbox rows and their age, dead letters by reason and error class, store
/// health, the outbox and journal backlog, charts over time, and (operators) prune.
pub(crate) async fn overview(
    State(c): State<Console>,
    Extension(role): Extension<Role>,
) -> Response {
    let base = &c.inner.base;
    let ops = &c.inner.ops;
    let started = std::time::Instant::now();
    let all = Query::default();
    let (s, mark) = match tokio::try_join!(stats::stats(ops), events::prune_watermark(ops)) {
        Ok(x) => x,
        Err(e) => return error(base, StatusCode::SERVICE_UNAVAILABLE, &actions::db(e).0),
    };
    let names: Vec<String> = s.consumers.iter().map(|k| k.consumer.clone()).collect();
    let (backlog, groups, chart) = tokio::join!(
        oncely_ops::backlog::backlog(ops, &names),
        c.inner.groups.get(&c, &all),
        crate::charts::section(&c)
    );
    let backlog = match backlog {
        Ok(b) => backlog_section(&b),
        Err(e) => format!("<p class=\"err\">{}</p>", esc(&actions::db(e).0)),
    };
    let took = started.elapsed();
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
    let prune = if operator(role) {
        format!(
            "<h2>Prune</h2><form method=\"post\" action=\"{}/prune\" id=\"prune-form\">{}\
             <label>Remove inbox ids received longer ago than \
             <input name=\"older_than\" id=\"older_than\" value=\"{}\" size=\"6\"></label> \
             <button id=\"prune\">Prune…</button></form><p class=\"muted\">As <code>oncely prune \
             --older-than</code>: a preview count first, then batches in the background. Replay then \
             refuses dead letters older than the cutoff (<code>refused_old</code>).</p>",
            esc(base),
            csrf_field(&c.inner.csrf),
            esc(&window_text(c.inner.window)),
        )
    } else {
        String::new()
    };
    let body = format!(
        "<h1>Overview</h1>\
         <p class=\"ok\" id=\"health\">Store answering ({} ms for these numbers). Inbox: {} ids; \
         dead letters: {}. Last prune cutoff: {}.</p>\
         <h2>Consumers</h2>{}<h2>Dead letters by reason and error class</h2>{}{backlog}{chart}{prune}",
        took.as_millis(),
        count("ids_held", s.ids_held),
        count("dead_letters", s.dead_letters),
        esc(&when(mark)),
        table(
            "consumers",
            &["consumer", "inbox ids", "oldest", "newest", "dead letters"],
            &rows
        ),
        groups_table(base, "reasons", &groups),
    );
    page(base, "Overview", "", &body)
}

/// `POST /prune` (form `older_than`, `confirm`): the preview, or the job.
pub(crate) async fn prune(
    State(c): State<Console>,
    Extension(actor): Extension<crate::Actor>,
    body: Bytes,
) -> Response {
    let base = &c.inner.base;
    let pairs: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
    let field = |k: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let window = match crate::prune::window_of(&c, field("older_than")) {
        Ok(w) => w,
        Err(e) => return error(base, StatusCode::BAD_REQUEST, &e.0),
    };
    let confirm = field("confirm").is_some_and(|v| !v.is_empty());
    match crate::prune::act(&c, window, confirm, &actor.0).await {
        Err(e) => error(base, StatusCode::SERVICE_UNAVAILABLE, &e.0),
        Ok(crate::prune::PruneAnswer::Started(job)) => {
            Redirect::to(&format!("{base}/jobs/{job}")).into_response()
        }
        Ok(crate::prune::PruneAnswer::Preview { expired, cutoff_ms }) => {
            let body = format!(
                "<h1>Confirm prune</h1><p id=\"preview\">Remove {} inbox id(s) received before {}?</p>\
                 <p class=\"warn\">After this, replay refuses dead letters first seen before the cutoff \
                 (<code>refused_old</code>): their claims may be gone.</p>\
                 <form method=\"post\" action=\"{b}/prune\">{}<input type=\"hidden\" name=\"older_than\" value=\"{}\">\
                 <input type=\"hidden\" name=\"confirm\" value=\"1\">\
                 <button id=\"confirm\" class=\"danger\">Yes, prune {expired}</button></form>\
                 <p><a href=\"{b}/\">Cancel</a></p>",
                count("preview", expired),
                esc(&time::format(cutoff_ms)),
                csrf_field(&c.inner.csrf),
                esc(&window_text(window)),
                b = esc(base),
            );
            page(base, "Confirm prune", "", &body)
        }
    }
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
