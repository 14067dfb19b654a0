//! HTML building: every value goes through [`esc`] (text and attribute values alike), the
//! page frame, and small helpers. Nothing from the database reaches a page unescaped.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::fmt::Write;

/// Escapes `&`, `<`, `>`, `"` and `'`: safe in text and in quoted attribute values
/// (`"><img src=x>` becomes `&quot;&gt;&lt;img src=x&gt;`).
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

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

/// A whole page: the frame around `body`, titled `title`.
pub(crate) fn page(base: &str, title: &str, head: &str, body: &str) -> Response {
    let mut out = String::with_capacity(body.len() + 1024);
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · oncely console</title><link rel=\"stylesheet\" href=\"{b}/assets/console.css\">\
         <link rel=\"icon\" href=\"{b}/assets/favicon.svg\">{head}\
         </head><body><header><strong>oncely console</strong><nav><a href=\"{b}/\">Overview</a> \
         <a href=\"{b}/dead-letters\">Dead letters</a> <a href=\"{b}/audit\">Audit</a></nav></header>\
         <main>{body}</main></body></html>",
        esc(title),
        b = esc(base),
    );
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], out).into_response()
}

/// A page that says what went wrong, with a status.
pub(crate) fn error(base: &str, status: StatusCode, text: &str) -> Response {
    let mut r = page(
        base,
        "Error",
        "",
        &format!(
            "<h1>{}</h1><p class=\"err\">{}</p>",
            status.as_u16(),
            esc(text)
        ),
    );
    *r.status_mut() = status;
    r
}

/// A table from headers and rows of already-escaped cells.
pub(crate) fn table(id: &str, headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("<table id=\"{}\"><thead><tr>", esc(id));
    for h in headers {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// The hidden CSRF field of a form.
pub(crate) fn csrf_field(token: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(token)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_breaks_out_of_text_and_attributes() {
        assert_eq!(
            esc("\"><img src=x onerror=alert(1)>"),
            "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
        );
        assert_eq!(
            esc("<script>'&'</script>"),
            "&lt;script&gt;&#39;&amp;&#39;&lt;/script&gt;"
        );
        assert_eq!(cut("abcdef", 3), "abc… (6 bytes in all)");
        assert_eq!(cut("abc", 3), "abc");
    }
}
