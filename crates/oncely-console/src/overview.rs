//! The overview page (`/`): per consumer inbox rows and dead letters, dead letters by reason
//! and error class, the outbox and journal backlog, the charts ([`crate::charts`]), and for
//! operators the prune form, with its preview and confirmation (`POST /prune`).

use crate::Console;
use crate::actions;
use crate::auth::Role;
use crate::groups::Shown;
use crate::html::{count, csrf_field, error, page, table, url, when, when_opt};
use crate::pages::operator;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use oncely_ops::browse::Query;
use oncely_ops::{events, stats};

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
pub(crate) fn groups_table(base: &str, id: &str, shown: &Shown) -> Markup {
    let (groups, age) = match shown {
        Shown::Ready(g, age) => (g, *age),
        Shown::Counting => {
            return html! {
                p class="muted" id={ (id) "-counting" } {
                    "The groups are being counted (many rows); reload the page to see them."
                }
            };
        }
        Shown::Failed => {
            return html! {
                p class="err" { "The database refused the query (see the console's log)." }
            };
        }
    };
    let rows: Vec<Vec<Markup>> = groups
        .iter()
        .map(|g| {
            vec![
                html! { (g.consumer) },
                html! {
                    a href={
                        (base) "/dead-letters?consumer=" (url(&g.consumer)) "&reason=" (url(&g.reason))
                    } { (g.reason) }
                },
                html! { span class="class" { (g.error_class) } },
                count(
                    &format!("group:{}:{}:{}", g.consumer, g.reason, g.error_class),
                    g.rows,
                ),
                html! { (g.deliveries) },
                html! { (when(g.first_seen)) },
                html! { (when(g.last_seen)) },
            ]
        })
        .collect();
    let headers = [
        "consumer",
        "reason",
        "error class",
        "rows",
        "deliveries",
        "first seen",
        "last seen",
    ];
    html! {
        (table(id, &headers, &rows))
        @if age.as_secs() >= 1 {
            p class="muted" { "Counted " (age.as_secs()) " s ago (recounting in the background)." }
        }
    }
}

/// The outbox and journal backlog (oncely-effects' tables; "not installed" without them).
fn backlog_section(b: &oncely_ops::backlog::Backlog) -> Markup {
    html! {
        h2 { "Outbox and effect journal" }
        @match &b.outbox {
            None => {
                p class="muted" id="outbox-missing" { "Outbox: not installed (no oncely-effects outbox table)." }
            },
            Some(rows) => {
                @let total: i64 = rows.iter().map(|r| r.rows).sum();
                @let cells: Vec<Vec<Markup>> = rows
                    .iter()
                    .map(|r| {
                        vec![
                            html! { (r.destination) },
                            count(&format!("outbox:{}", r.destination), r.rows),
                            html! { (when(r.oldest_ms)) },
                        ]
                    })
                    .collect();
                p { "Outbox backlog (written, not dispatched): " (count("outbox_backlog", total)) " rows." }
                (table("outbox", &["destination", "rows", "oldest"], &cells))
            },
        }
        @match &b.journal_pending {
            None => {
                p class="muted" id="journal-missing" { "Effect journal: not installed (no oncely-effects journal table)." }
            },
            Some(rows) => {
                @let total: i64 = rows.iter().map(|r| r.rows).sum();
                @let cells: Vec<Vec<Markup>> = rows
                    .iter()
                    .map(|r| {
                        vec![
                            html! { (r.consumer.as_deref().unwrap_or("(not known here)")) },
                            html! { code { (r.key_part) } },
                            count(&format!("journal:{}", r.key_part), r.rows),
                            html! { (when(r.oldest_ms)) },
                        ]
                    })
                    .collect();
                p {
                    "Effect-journal rows pending (outside calls begun, not settled): "
                    (count("journal_pending", total)) " rows."
                }
                (table("journal", &["consumer", "key part", "pending", "oldest"], &cells))
            },
        }
    }
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
        Err(e) => html! { p class="err" { (actions::db(e).0) } },
    };
    let took = started.elapsed();
    let rows: Vec<Vec<Markup>> = s
        .consumers
        .iter()
        .map(|k| {
            let key = |what: &str| format!("{what}:{}", k.consumer);
            vec![
                html! {
                    a href={ (base) "/dead-letters?consumer=" (url(&k.consumer)) } { (k.consumer) }
                },
                count(&key("ids_held"), k.ids_held),
                html! { (when_opt(k.oldest_ms)) },
                html! { (when_opt(k.newest_ms)) },
                count(&key("dead_letters"), k.dead_letters),
            ]
        })
        .collect();
    let body = html! {
        h1 { "Overview" }
        p class="ok" id="health" {
            "Store answering (" (took.as_millis()) " ms for these numbers). Inbox: "
            (count("ids_held", s.ids_held)) " ids; dead letters: "
            (count("dead_letters", s.dead_letters)) ". Last prune cutoff: " (when_opt(mark)) "."
        }
        h2 { "Consumers" }
        (table(
            "consumers",
            &["consumer", "inbox ids", "oldest", "newest", "dead letters"],
            &rows
        ))
        h2 { "Dead letters by reason and error class" }
        (groups_table(base, "reasons", &groups))
        (backlog)
        (chart)
        @if operator(role) {
            h2 { "Prune" }
            form method="post" action={ (base) "/prune" } id="prune-form" {
                (csrf_field(&c.inner.csrf))
                label {
                    "Remove inbox ids received longer ago than "
                    input name="older_than" id="older_than" value=(window_text(c.inner.window)) size="6";
                }
                " "
                button id="prune" { "Prune…" }
            }
            p class="muted" {
                "As " code { "oncely prune --older-than" } ": a preview count first, then batches \
                 in the background. Replay then refuses dead letters older than the cutoff ("
                code { "refused_old" } ")."
            }
        }
    };
    page(base, "Overview", html! {}, body)
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
            let body = html! {
                h1 { "Confirm prune" }
                p id="preview" {
                    "Remove " (count("preview", expired)) " inbox id(s) received before "
                    (when(cutoff_ms)) "?"
                }
                p class="warn" {
                    "After this, replay refuses dead letters first seen before the cutoff ("
                    code { "refused_old" } "): their claims may be gone."
                }
                form method="post" action={ (base) "/prune" } {
                    (csrf_field(&c.inner.csrf))
                    input type="hidden" name="older_than" value=(window_text(window));
                    input type="hidden" name="confirm" value="1";
                    button id="confirm" class="danger" { "Yes, prune " (expired) }
                }
                p { a href={ (base) "/" } { "Cancel" } }
            };
            page(base, "Confirm prune", html! {}, body)
        }
    }
}
