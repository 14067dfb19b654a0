//! The overview page (`/`): per consumer inbox rows and dead letters, dead letters by reason
//! and error class, the outbox and journal backlog, the charts ([`crate::charts`]), and for
//! operators the prune form, with its preview and confirmation (`POST /prune`).

use crate::actions;
use crate::auth::Role;
use crate::groups::Shown;
use crate::html::{csrf_field, error, esc, page, table};
use crate::pages::{count, operator, when};
use crate::{Console, time};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
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
