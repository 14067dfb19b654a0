//! The dead-letter pages: `/dead-letters` (filter, groups, a keyset page, actions on a
//! selection or on everything matching) and `/dead-letters/{id}` (one row, its payload, and
//! where its id is now).

use crate::Console;
use crate::actions::{self, query_of};
use crate::auth::Role;
use crate::html::{count, csrf_field, cut, error, page, table, url, when, when_opt};
use crate::pages::operator;
use axum::Extension;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use oncely_ops::browse::{self, Query};
use oncely_ops::{dlq, inspect};

/// Rows per page.
pub(crate) const PAGE: u32 = 50;
/// Payload characters a page shows.
pub(crate) const PAYLOAD_SHOWN: usize = 64 * 1024;

fn pairs(q: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(q.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

/// The filter's fields (name, value), as hidden inputs and a query string carry them.
fn filter_fields(q: &Query) -> Vec<(&'static str, String)> {
    [
        ("consumer", q.consumer.clone()),
        ("reason", q.reason.clone()),
        ("from", q.from_ms.map(|m| m.to_string())),
        ("to", q.to_ms.map(|m| m.to_string())),
        ("message_id", q.message_id.clone()),
        ("text", q.text.clone()),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k, v?)))
    .collect()
}

fn input(name: &str, label: &str, value: Option<String>, hint: &str) -> Markup {
    html! {
        label {
            (label)
            input name=(name) id={ "f-" (name) } value=(value.unwrap_or_default()) placeholder=(hint);
        }
    }
}

/// `/dead-letters`.
pub(crate) async fn dead_letters(
    State(c): State<Console>,
    Extension(role): Extension<Role>,
    RawQuery(raw): RawQuery,
) -> Response {
    let base = &c.inner.base;
    let ops = &c.inner.ops;
    let p = pairs(raw.as_deref());
    let q = query_of(p.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let before = p
        .iter()
        .find(|(k, _)| k == "before")
        .and_then(|(_, v)| v.parse().ok());
    let ((rows, total), groups) = match tokio::join!(
        async { tokio::try_join!(browse::page(ops, &q, before, PAGE), browse::count(ops, &q)) },
        c.inner.groups.get(&c, &q)
    ) {
        (Ok(x), g) => (x, g),
        (Err(e), _) => return error(base, StatusCode::SERVICE_UNAVAILABLE, &actions::db(e).0),
    };
    let fields = filter_fields(&q);
    let query: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{k}={}", url(v)))
        .collect();
    let query = query.join("&");
    let act = operator(role);
    let cells: Vec<Vec<Markup>> = rows
        .iter()
        .map(|r| {
            let mut row = Vec::new();
            if act {
                row.push(html! {
                    input type="checkbox" name="id" value=(r.id) form="selection" class="pick";
                });
            }
            row.extend([
                html! { a href={ (base) "/dead-letters/" (r.id) } class="row-link" { (r.id) } },
                html! { (r.consumer) },
                html! { span class="mid" { (cut(r.message_id.as_deref().unwrap_or("(none)"), 80)) } },
                html! { span class="reason" { (r.reason) } },
                html! { (r.deliveries) },
                html! { (when(r.dead_lettered_at)) },
                html! { (when(r.last_seen)) },
                html! { (r.payload_len) },
                html! { (cut(&r.detail, 120)) },
            ]);
            row
        })
        .collect();
    let mut headers = vec![
        "id",
        "consumer",
        "message id",
        "reason",
        "deliveries",
        "first seen",
        "last seen",
        "payload bytes",
        "detail",
    ];
    if act {
        headers.insert(0, "");
    }
    let older = rows
        .last()
        .filter(|_| rows.len() == PAGE as usize)
        .map(|last| match query.as_str() {
            "" => format!("{base}/dead-letters?before={}", last.id),
            query => format!("{base}/dead-letters?before={}&{query}", last.id),
        });
    let off = c.inner.replayers.is_empty();
    let buttons = |scope: &str| {
        html! {
            button disabled[off] formaction={ (base) "/actions/replay" } id={ (scope) "-replay" } { "Replay" } " "
            button disabled[off] formaction={ (base) "/actions/replay" } name="force" value="1" id={ (scope) "-force" } {
                "Replay with force…"
            } " "
            button disabled[off] formaction={ (base) "/actions/resolve" } id={ (scope) "-resolve" } {
                "Resolve (keep stored)"
            } " "
            button disabled[off] formaction={ (base) "/actions/purge" } class="danger" id={ (scope) "-purge" } { "Purge" }
        }
    };
    let body = html! {
        h1 { "Dead letters" }
        form class="filter" method="get" action={ (base) "/dead-letters" } {
            (input("consumer", "consumer", q.consumer.clone(), ""))
            (input("reason", "reason", q.reason.clone(), "conflict, permanent, late…"))
            (input("from", "first seen from (UTC)", q.from_ms.map(when), "2026-12-01 10:00"))
            (input("to", "to", q.to_ms.map(when), ""))
            (input("message_id", "message id", q.message_id.clone(), "exact"))
            (input("text", "text in id or detail", q.text.clone(), ""))
            button id="apply" { "Filter" } " "
            a href={ (base) "/dead-letters" } { "Clear" }
        }
        p { b { (count("total", total)) } " dead letters match." }
        h2 { "By consumer, reason and error class" }
        (crate::pages::groups_table(base, "groups", &groups))
        @if act {
            form method="post" id="selection" action={ (base) "/actions/replay" } {
                (csrf_field(&c.inner.csrf))
                b { "Selected rows:" } " " (buttons("sel"))
            }
            form method="post" id="matching" action={ (base) "/actions/replay" } {
                (csrf_field(&c.inner.csrf))
                @for (k, v) in &fields {
                    input type="hidden" name=(k) value=(v);
                }
                input type="hidden" name="all" value="1";
                b { "All " (total) " rows matching the filter:" } " " (buttons("all"))
            }
        } @else {
            p class="muted" id="read-only" { "Read-only: this role cannot act." }
        }
        h2 { "Rows, newest first" }
        (table("rows", &headers, &cells))
        p {
            a href={ (base) "/dead-letters?" (query) } { "Newest" } " "
            @if let Some(href) = older {
                a id="older" href=(href) { "Older →" }
            }
        }
    };
    page(base, "Dead letters", html! {}, body)
}

/// The payload as the page shows it: pretty JSON with the configured fields redacted, else
/// (lossy) text; cut to [`PAYLOAD_SHOWN`] characters.
pub(crate) fn payload_text(payload: &[u8], redact: &[String]) -> String {
    fn scrub(v: &mut serde_json::Value, redact: &[String]) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m.iter_mut() {
                    if redact.iter().any(|r| r == k) {
                        *v = serde_json::Value::String("[redacted]".into());
                    } else {
                        scrub(v, redact);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|v| scrub(v, redact)),
            _ => {}
        }
    }
    if payload.len() <= 1 << 20
        && let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(payload)
    {
        scrub(&mut v, redact);
        return cut(
            &serde_json::to_string_pretty(&v).unwrap_or_default(),
            PAYLOAD_SHOWN,
        );
    }
    let head = &payload[..payload.len().min(PAYLOAD_SHOWN * 4)];
    let text = String::from_utf8_lossy(head);
    match text.char_indices().nth(PAYLOAD_SHOWN) {
        Some((at, _)) => format!("{}… ({} bytes in all)", &text[..at], payload.len()),
        None if head.len() < payload.len() => format!("{text}… ({} bytes in all)", payload.len()),
        None => text.into_owned(),
    }
}

/// `/dead-letters/{id}`.
pub(crate) async fn dead_letter(
    State(c): State<Console>,
    Extension(role): Extension<Role>,
    Path(id): Path<i64>,
) -> Response {
    let base = &c.inner.base;
    let ops = &c.inner.ops;
    let row = match dlq::show(ops, id).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return error(
                base,
                StatusCode::NOT_FOUND,
                "no dead letter with this id (resolved, replayed or purged?)",
            );
        }
        Err(e) => return error(base, StatusCode::SERVICE_UNAVAILABLE, &actions::db(e).0),
    };
    let j = dlq::DeadLetterJson::from(&row);
    let field = |k: &str, v: Markup| vec![html! { (k) }, v];
    let text = |v: &str| html! { (v) };
    let fields = vec![
        field("id", html! { (j.id) }),
        field("consumer", text(&j.consumer)),
        field(
            "message id",
            html! { span id="message-id" { (cut(j.message_id.as_deref().unwrap_or("(none)"), 500)) } },
        ),
        field(
            "raw id (hex)",
            text(&cut(j.raw_id_hex.as_deref().unwrap_or("-"), 500)),
        ),
        field("reason", html! { span id="reason" { (j.reason) } }),
        field("detail", text(&cut(&j.detail, 2000))),
        field("attempts", html! { (j.attempts) }),
        field("deliveries", html! { (j.deliveries) }),
        field("first seen", text(&when(j.dead_lettered_at))),
        field("last seen", text(&when(j.last_seen))),
        field("payload hash", text(&j.payload_hash)),
        field(
            "inbox's hash (conflicts)",
            text(j.stored_hash.as_deref().unwrap_or("-")),
        ),
        field(
            "entity key",
            text(&cut(j.entity_key.as_deref().unwrap_or("-"), 500)),
        ),
        field(
            "version",
            text(&j.version.map_or("-".into(), |v| v.to_string())),
        ),
        field("source time", text(&when_opt(j.source_time))),
        field("payload bytes", html! { (j.payload_len) }),
    ];
    let headers = serde_json::from_str::<serde_json::Value>(&j.headers)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or(j.headers.clone());
    let where_now = match &row.message_id {
        None => html! { p class="muted" { "No usable message id." } },
        Some(mid) => match inspect::inspect(ops, mid).await {
            Err(e) => html! { p class="err" { (actions::db(e).0) } },
            Ok(i) => {
                let claimed: Vec<Vec<Markup>> = i
                    .claimed
                    .iter()
                    .map(|k| {
                        vec![
                            text(&k.consumer),
                            text(&k.payload_hash),
                            text(&when(k.received_at)),
                        ]
                    })
                    .collect();
                let rows = |r: Option<usize>| r.map_or("n/a".into(), |n| n.to_string());
                html! {
                    p {
                        "Inbox: " (count("claims", i.claimed.len())) " claim(s); other dead letters of this id: "
                        (i.dead_letters.len().saturating_sub(1)) "; effect journal rows: "
                        (rows(i.effect_journal.as_ref().map(Vec::len))) "; outbox rows: "
                        (rows(i.outbox.as_ref().map(Vec::len))) "."
                    }
                    (table("claims", &["consumer", "payload hash", "received"], &claimed))
                }
            }
        },
    };
    let off = c.inner.replayers.is_empty();
    let payload = if c.inner.hide_payloads {
        format!(
            "(hidden by the console's configuration: {} bytes, sha256 {})",
            row.payload.len(),
            row.payload_hash
        )
    } else {
        payload_text(&row.payload, &c.inner.redact)
    };
    let body = html! {
        h1 { "Dead letter " (id) }
        @if operator(role) {
            form method="post" id="row-actions" action={ (base) "/actions/replay" } {
                (csrf_field(&c.inner.csrf))
                input type="hidden" name="id" value=(id);
                button id="row-replay" disabled[off] { "Replay" } " "
                button name="force" value="1" id="row-force" disabled[off] { "Replay with force…" } " "
                button formaction={ (base) "/actions/resolve" } id="row-resolve" {
                    "Resolve: keep the stored effect, drop this payload"
                } " "
                button formaction={ (base) "/actions/purge" } class="danger" id="row-purge" { "Purge" }
            }
        } @else {
            p class="muted" id="read-only" { "Read-only: this role cannot act." }
        }
        h2 { "Envelope" }
        (table("envelope", &["field", "value"], &fields))
        h2 { "Headers" }
        pre id="headers" { (cut(&headers, 8000)) }
        h2 { "Payload" }
        pre id="payload" { (payload) }
        h2 { "Where the id is now" }
        (where_now)
    };
    page(base, &format!("Dead letter {id}"), html! {}, body)
}
