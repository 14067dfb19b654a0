//! HTML building with `maud`: every value spliced into a page (`(value)`, in text and in
//! attribute values alike) is escaped by the macro, so nothing from the database reaches a
//! page unescaped unless a call site writes `PreEscaped` (none does). The page frame and small
//! helpers live here.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, Render, html};

/// A value for a URL query parameter.
pub(crate) fn url(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// Cuts `text` to at most `max` characters, marking the cut.
pub(crate) fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}… ({} bytes in all)", &text[..at], text.len()),
        None => text.to_owned(),
    }
}

/// `YYYY-MM-DD HH:MM:SSZ` (UTC) of a unix-ms time.
pub(crate) fn when(ms: i64) -> String {
    oncely_ops::time::format_utc_ms(ms)
}

/// [`when`] of an optional time, `-` for none.
pub(crate) fn when_opt(ms: Option<i64>) -> String {
    ms.map_or_else(|| "-".to_owned(), when)
}

/// A whole page: the frame around `body`, titled `title`, with `head` in its `<head>`.
pub(crate) fn page(base: &str, title: &str, head: Markup, body: Markup) -> Response {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · oncely console" }
                link rel="stylesheet" href={ (base) "/assets/console.css" };
                link rel="icon" href={ (base) "/assets/favicon.svg" };
                (head)
            }
            body {
                header {
                    strong { "oncely console" }
                    nav {
                        a href={ (base) "/" } { "Overview" } " "
                        a href={ (base) "/dead-letters" } { "Dead letters" } " "
                        a href={ (base) "/audit" } { "Audit" }
                    }
                }
                main { (body) }
            }
        }
    };
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page.into_string(),
    )
        .into_response()
}

/// A page that says what went wrong, with a status.
pub(crate) fn error(base: &str, status: StatusCode, text: &str) -> Response {
    let body = html! {
        h1 { (status.as_u16()) }
        p class="err" { (text) }
    };
    let mut r = page(base, "Error", html! {}, body);
    *r.status_mut() = status;
    r
}

/// A table from headers and rows of cells.
pub(crate) fn table(id: &str, headers: &[&str], rows: &[Vec<Markup>]) -> Markup {
    html! {
        table id=(id) {
            thead { tr { @for h in headers { th { (h) } } } }
            tbody {
                @for row in rows {
                    tr { @for cell in row { td { (cell) } } }
                }
            }
        }
    }
}

/// A number with the name a test compares it by.
pub(crate) fn count(key: &str, n: impl Render) -> Markup {
    html! { span data-count=(key) { (n) } }
}

/// The hidden CSRF field of a form.
pub(crate) fn csrf_field(token: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(token); }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_breaks_out_of_text_and_attributes() {
        let hostile = "\"><img src=x onerror=alert(1)>";
        let cell = html! { td title=(hostile) { (hostile) } }.into_string();
        assert_eq!(
            cell,
            "<td title=\"&quot;&gt;&lt;img src=x onerror=alert(1)&gt;\">\
             &quot;&gt;&lt;img src=x onerror=alert(1)&gt;</td>"
        );
        let script = html! { p { ("<script>'&'</script>") } }.into_string();
        assert!(!script.contains("<script>"), "{script}");
        assert!(script.contains("&lt;script&gt;") && script.contains("&amp;"));
        let t = table("t<", &["h\""], &[vec![html! { ("<b>") }]]).into_string();
        assert_eq!(
            t,
            "<table id=\"t&lt;\"><thead><tr><th>h&quot;</th></tr></thead>\
             <tbody><tr><td>&lt;b&gt;</td></tr></tbody></table>"
        );
        assert_eq!(cut("abcdef", 3), "abc… (6 bytes in all)");
        assert_eq!(cut("abc", 3), "abc");
    }
}
