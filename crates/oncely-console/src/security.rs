//! The console's guard, applied to every route:
//!
//! - **Authentication**: a request gets a [`Role`] from the configured tokens (or from the
//!   embedding service's request extensions); with tokens configured, none valid → 401.
//!   `?token=…` sets an `HttpOnly; SameSite=Strict` cookie and redirects to the same page
//!   without the token, so it does not stay in the address bar or in the history.
//! - **Roles**: a [`Role::Viewer`] may not POST (403).
//! - **CSRF**: every POST carries the console's CSRF token (a random 256-bit value made when
//!   the console is built, embedded in each page's forms and answered by `GET /api/csrf`),
//!   as header `X-CSRF-Token` or form field `csrf`; without it or with another → 403.
//!   Another site's page can neither read the token (same-origin policy) nor send the
//!   header without a CORS preflight the console never answers.
//! - **Headers** on every answer: a `Content-Security-Policy` that allows only the console's
//!   own stylesheet (no script at all, no inline style, no frames, forms only to itself),
//!   `X-Frame-Options: DENY`, `X-Content-Type-Options: nosniff`, `Referrer-Policy:
//!   no-referrer`, `Cache-Control: no-store`.
//! - **Binding**: [`check_bind`] refuses a non-loopback address without a token.
//!
//! Errors never contain a token, a URL with credentials or a database error's text (those
//! are logged server-side; the page says what failed).

use crate::Console;
use crate::auth::{self, Role};
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The policy on every answer.
pub const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
                       frame-ancestors 'none'; base-uri 'none'";

/// The largest form or JSON body a POST may have.
pub const MAX_BODY: usize = 4 << 20;

/// Refuses to serve on a non-loopback address unless a token is configured.
///
/// ```
/// use oncely_console::security::check_bind;
/// assert!(check_bind(&"127.0.0.1:9898".parse().unwrap(), false).is_ok());
/// assert!(check_bind(&"[::1]:9898".parse().unwrap(), false).is_ok());
/// assert!(check_bind(&"0.0.0.0:9898".parse().unwrap(), false).is_err());
/// assert!(check_bind(&"0.0.0.0:9898".parse().unwrap(), true).is_ok());
/// ```
pub fn check_bind(addr: &std::net::SocketAddr, has_token: bool) -> oncely_core::Result<()> {
    if addr.ip().is_loopback() || has_token {
        return Ok(());
    }
    Err(oncely_core::Error::config(format!(
        "refusing to serve the console on {addr}, which is not a loopback address, without an \
         access token: set --token (and --viewer-token), or bind 127.0.0.1"
    )))
}

fn refuse(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text.to_owned(),
    )
        .into_response()
}

/// The CSRF token a POST presents: its header, else its form field `csrf`. Returns the
/// request rebuilt with its body (read once for the form).
async fn csrf_of(req: Request) -> Result<(Option<String>, Request), Response> {
    if let Some(v) = req
        .headers()
        .get("x-csrf-token")
        .and_then(|v| v.to_str().ok())
    {
        let v = v.to_owned();
        return Ok((Some(v), req));
    }
    let is_form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return Ok((None, req));
    }
    let (parts, body) = req.into_parts();
    let bytes = to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| refuse(StatusCode::PAYLOAD_TOO_LARGE, "request body too large"))?;
    let token = form_urlencoded::parse(&bytes)
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.into_owned());
    Ok((token, Request::from_parts(parts, Body::from(bytes))))
}

/// The middleware: authentication, roles, CSRF, headers (see the module docs).
pub async fn guard(State(console): State<Console>, req: Request, next: Next) -> Response {
    let mut response = check(&console, req, next).await;
    let h = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CSP),
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    response
}

async fn check(console: &Console, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let Some((role, actor)) = console.inner.access.role(&parts) else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "401: this console needs an access token (Authorization: Bearer …, or open the page once with ?token=…)",
        );
    };
    if let Some(token) = auth::query_param(parts.uri.query(), "token")
        && parts.method == Method::GET
        && parts.extensions.get::<Role>().is_none()
    {
        // Move the token into a cookie and drop it from the address.
        let rest: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(
                form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
                    .filter(|(k, _)| k != "token"),
            )
            .finish();
        let path = parts.uri.path();
        let to = if rest.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{rest}")
        };
        let cookie = format!(
            "{}={token}; HttpOnly; SameSite=Strict; Path=/",
            auth::COOKIE
        );
        return Response::builder()
            .status(StatusCode::SEE_OTHER)
            .header(header::LOCATION, to)
            .header(header::SET_COOKIE, cookie)
            .body(Body::empty())
            .unwrap_or_else(|_| refuse(StatusCode::INTERNAL_SERVER_ERROR, "redirect failed"));
    }
    parts.extensions.insert(role);
    parts.extensions.insert(actor);
    let mut req = Request::from_parts(parts, body);
    if req.method() == Method::POST {
        if role != Role::Operator {
            return refuse(StatusCode::FORBIDDEN, "403: the read-only role cannot act");
        }
        let (token, rebuilt) = match csrf_of(req).await {
            Ok(x) => x,
            Err(response) => return response,
        };
        if !token.is_some_and(|t| auth::same(&t, &console.inner.csrf)) {
            return refuse(StatusCode::FORBIDDEN, "403: missing or wrong CSRF token");
        }
        req = rebuilt;
    } else if req.method() != Method::GET && req.method() != Method::HEAD {
        return refuse(StatusCode::METHOD_NOT_ALLOWED, "405");
    }
    next.run(req).await
}
