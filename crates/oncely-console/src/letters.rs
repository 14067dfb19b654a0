//! The dead-letter pages: `/dead-letters` (filter, groups, a keyset page, actions on a
//! selection or on everything matching) and `/dead-letters/{id}` (one row, its payload, and
//! where its id is now).

use crate::actions::{self, query_of};
use crate::auth::Role;
use crate::html::{csrf_field, cut, error, esc, page, table, url};
use crate::pages::{count, operator};
use crate::{Console, time};
use axum::Extension;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
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

/// The filter's fields as hidden inputs and as a query string.
fn filter_fields(q: &Query) -> (String, String) {
    let fields = [
        ("consumer", q.consumer.clone()),
        ("reason", q.reason.clone()),
        ("from", q.from_ms.map(|m| m.to_string())),
        ("to", q.to_ms.map(|m| m.to_string())),
        ("message_id", q.message_id.clone()),
        ("text", q.text.clone()),
    ];
    let mut hidden = String::new();
    let mut query = String::new();
    for (k, v) in fields {
        if let Some(v) = v {
            hidden.push_str(&format!(
                "<input type=\"hidden\" name=\"{k}\" value=\"{}\">",
                esc(&v)
            ));
            query.push_str(&format!("&amp;{k}={}", esc(&url(&v))));
        }
    }
    (hidden, query)
}

fn input(name: &str, label: &str, value: Option<String>, hint: &str) -> String {
    format!(
        "<label>{label}<input name=\"{name}\" id=\"f-{name}\" value=\"{}\" placeholder=\"{}\"></label>",
        esc(&value.unwrap_or_default()),
        esc(hint)
    )
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
    let (hidden, query) = filter_fields(&q);
    let act = operator(role);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row = Vec::new();
            if act {
                row.push(format!("<input type=\"checkbox\" name=\"id\" value=\"{}\" form=\"selection\" class=\"pick\">", r.id));
            }
            row.extend([
                format!("<a href=\"{}/dead-letters/{}\" class=\"row-link\">{}</a>", esc(base), r.id, r.id),
                esc(&r.consumer),
                format!("<span class=\"mid\">{}</span>", esc(&cut(r.message_id.as_deref().unwrap_or("(none)"), 80))),
                format!("<span class=\"reason\">{}</span>", esc(&r.reason)),
                r.deliveries.to_string(),
                esc(&time::format(r.dead_lettered_at)),
                esc(&time::format(r.last_seen)),
                r.payload_len.to_string(),
                esc(&cut(&r.detail, 120)),
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
    let groups_html = crate::pages::groups_table(base, "groups", &groups);
    let older = match rows.last() {
        Some(last) if rows.len() == PAGE as usize => format!(
            "<a id=\"older\" href=\"{}/dead-letters?before={}{query}\">Older →</a>",
            esc(base),
            last.id
        ),
        _ => String::new(),
    };
    let buttons = |scope: &str| {
        let mut b = format!(
            "<button formaction=\"{0}/actions/replay\" id=\"{scope}-replay\">Replay</button> \
             <button formaction=\"{0}/actions/replay\" name=\"force\" value=\"1\" id=\"{scope}-force\">Replay with force…</button> \
             <button formaction=\"{0}/actions/resolve\" id=\"{scope}-resolve\">Resolve (keep stored)</button> \
             <button formaction=\"{0}/actions/purge\" class=\"danger\" id=\"{scope}-purge\">Purge</button>",
            esc(base)
        );
        if c.inner.replayers.is_empty() {
            b = b.replace("<button formaction", "<button disabled formaction");
        }
        b
    };
    let actions = if act {
        format!(
            "<form method=\"post\" id=\"selection\" action=\"{b}/actions/replay\">{csrf}<b>Selected rows:</b> {sel}</form>\
             <form method=\"post\" id=\"matching\" action=\"{b}/actions/replay\">{csrf}{hidden}\
             <input type=\"hidden\" name=\"all\" value=\"1\"><b>All {total} rows matching the filter:</b> {all}</form>",
            b = esc(base),
            csrf = csrf_field(&c.inner.csrf),
            sel = buttons("sel"),
            all = buttons("all"),
        )
    } else {
        "<p class=\"muted\" id=\"read-only\">Read-only: this role cannot act.</p>".to_owned()
    };
    let body = format!(
        "<h1>Dead letters</h1><form class=\"filter\" method=\"get\" action=\"{b}/dead-letters\">{}{}{}{}{}{}<button id=\"apply\">Filter</button> <a href=\"{b}/dead-letters\">Clear</a></form>\
         <p><b>{}</b> dead letters match.</p><h2>By consumer, reason and error class</h2>{}{actions}<h2>Rows, newest first</h2>{}<p><a href=\"{b}/dead-letters?{}\">Newest</a> {older}</p>",
        input("consumer", "consumer", q.consumer.clone(), ""),
        input(
            "reason",
            "reason",
            q.reason.clone(),
            "conflict, permanent, late…"
        ),
        input(
            "from",
            "first seen from (UTC)",
            q.from_ms.map(time::format),
            "2026-12-01 10:00"
        ),
        input("to", "to", q.to_ms.map(time::format), ""),
        input("message_id", "message id", q.message_id.clone(), "exact"),
        input("text", "text in id or detail", q.text.clone(), ""),
        count("total", total),
        groups_html,
        table("rows", &headers, &cells),
        query.trim_start_matches("&amp;"),
        b = esc(base),
    );
    page(base, "Dead letters", "", &body)
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
    let field = |k: &str, v: String| vec![esc(k), v];
    let fields = vec![
        field("id", j.id.to_string()),
        field("consumer", esc(&j.consumer)),
        field(
            "message id",
            format!(
                "<span id=\"message-id\">{}</span>",
                esc(&cut(j.message_id.as_deref().unwrap_or("(none)"), 500))
            ),
        ),
        field(
            "raw id (hex)",
            esc(&cut(j.raw_id_hex.as_deref().unwrap_or("-"), 500)),
        ),
        field(
            "reason",
            format!("<span id=\"reason\">{}</span>", esc(&j.reason)),
        ),
        field("detail", esc(&cut(&j.detail, 2000))),
        field("attempts", j.attempts.to_string()),
        field("deliveries", j.deliveries.to_string()),
        field("first seen", esc(&time::format(j.dead_lettered_at))),
        field("last seen", esc(&time::format(j.last_seen))),
        field("payload hash", esc(&j.payload_hash)),
        field(
            "inbox's hash (conflicts)",
            esc(j.stored_hash.as_deref().unwrap_or("-")),
        ),
        field(
            "entity key",
            esc(&cut(j.entity_key.as_deref().unwrap_or("-"), 500)),
        ),
        field("version", j.version.map_or("-".into(), |v| v.to_string())),
        field(
            "source time",
            esc(&j.source_time.map_or("-".into(), time::format)),
        ),
        field("payload bytes", j.payload_len.to_string()),
    ];
    let headers = serde_json::from_str::<serde_json::Value>(&j.headers)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or(j.headers.clone());
    let where_now = match &row.message_id {
        None => "<p class=\"muted\">No usable message id.</p>".to_owned(),
        Some(mid) => match inspect::inspect(ops, mid).await {
            Err(e) => format!("<p class=\"err\">{}</p>", esc(&actions::db(e).0)),
            Ok(i) => {
                let claimed: Vec<Vec<String>> = i
                    .claimed
                    .iter()
                    .map(|k| {
                        vec![
                            esc(&k.consumer),
                            esc(&k.payload_hash),
                            esc(&time::format(k.received_at)),
                        ]
                    })
                    .collect();
                format!(
                    "<p>Inbox: {} claim(s); other dead letters of this id: {}; effect journal rows: {}; outbox rows: {}.</p>{}",
                    count("claims", i.claimed.len()),
                    i.dead_letters.len().saturating_sub(1),
                    i.effect_journal
                        .map_or("n/a".into(), |r| r.len().to_string()),
                    i.outbox.map_or("n/a".into(), |r| r.len().to_string()),
                    table(
                        "claims",
                        &["consumer", "payload hash", "received"],
                        &claimed
                    )
                )
            }
        },
    };
    let actions = if operator(role) {
        let disabled = if c.inner.replayers.is_empty() {
            " disabled"
        } else {
            ""
        };
        format!(
            "<form method=\"post\" id=\"row-actions\" action=\"{b}/actions/replay\">{}<input type=\"hidden\" name=\"id\" value=\"{id}\">\
             <button id=\"row-replay\"{disabled}>Replay</button> <button name=\"force\" value=\"1\" id=\"row-force\"{disabled}>Replay with force…</button> \
             <button formaction=\"{b}/actions/resolve\" id=\"row-resolve\">Resolve: keep the stored effect, drop this payload</button> \
             <button formaction=\"{b}/actions/purge\" class=\"danger\" id=\"row-purge\">Purge</button></form>",
            csrf_field(&c.inner.csrf),
            b = esc(base),
        )
    } else {
        "<p class=\"muted\" id=\"read-only\">Read-only: this role cannot act.</p>".to_owned()
    };
    let body = format!(
        "<h1>Dead letter {id}</h1>{actions}<h2>Envelope</h2>{}<h2>Headers</h2><pre id=\"headers\">{}</pre>\
         <h2>Payload</h2><pre id=\"payload\">{}</pre><h2>Where the id is now</h2>{where_now}",
        table("envelope", &["field", "value"], &fields),
        esc(&cut(&headers, 8000)),
        if c.inner.hide_payloads {
            format!(
                "(hidden by the console's configuration: {} bytes, sha256 {})",
                row.payload.len(),
                esc(&row.payload_hash)
            )
        } else {
            esc(&payload_text(&row.payload, &c.inner.redact))
        },
    );
    page(base, &format!("Dead letter {id}"), "", &body)
}
