//! Who a request is: its [`Role`] (from a token, or set by the embedding service) and the
//! [`Actor`] the audit journal names.

use axum::http::HeaderMap;
use axum::http::request::Parts;
use subtle::ConstantTimeEq;

/// What a request may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Read every page and API answer; act on nothing.
    Viewer,
    /// Also replay, resolve and purge.
    Operator,
}

/// Who acted, as the audit journal records it. An embedding service that authenticates
/// requests itself inserts one as a request extension (with a [`Role`]) before the console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor(pub String);

/// The configured tokens.
#[derive(Debug, Clone)]
pub(crate) struct Access {
    pub operator: Option<String>,
    pub viewer: Option<String>,
    pub default_role: Role,
}

impl Default for Access {
    fn default() -> Self {
        Self {
            operator: None,
            viewer: None,
            default_role: Role::Operator,
        }
    }
}

/// The console's cookie holding the access token.
pub(crate) const COOKIE: &str = "oncely_console_token";

/// Compares in constant time for tokens of one length (`subtle`): no early exit on the first
/// differing byte. Only the length may show.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

/// The token a request presents: bearer header, then cookie, then `?token=`.
pub(crate) fn presented(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    if let Some(v) = headers.get("authorization").and_then(|v| v.to_str().ok())
        && let Some(t) = v.strip_prefix("Bearer ")
    {
        return Some(t.trim().to_owned());
    }
    if let Some(t) = cookie(headers, COOKIE) {
        return Some(t);
    }
    query_param(query, "token")
}

/// A cookie's value.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all("cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// A query-string parameter.
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

impl Access {
    /// The role of a request, `None` when tokens are configured and it has no valid one.
    pub fn role(&self, parts: &Parts) -> Option<(Role, Actor)> {
        if let Some(role) = parts.extensions.get::<Role>() {
            let actor = parts
                .extensions
                .get::<Actor>()
                .cloned()
                .unwrap_or_else(|| Actor("embedding service".into()));
            return Some((*role, actor));
        }
        if self.operator.is_none() && self.viewer.is_none() {
            let who = match self.default_role {
                Role::Operator => "operator (no token configured)",
                Role::Viewer => "viewer (no token configured)",
            };
            return Some((self.default_role, Actor(who.into())));
        }
        let token = presented(&parts.headers, parts.uri.query())?;
        if self.operator.as_deref().is_some_and(|t| same(t, &token)) {
            return Some((Role::Operator, Actor("operator token".into())));
        }
        if self.viewer.as_deref().is_some_and(|t| same(t, &token)) {
            return Some((Role::Viewer, Actor("viewer token".into())));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(same("s3cret", "s3cret"));
        assert!(same("", ""));
        assert!(!same("s3cret", "s3creT"));
        assert!(!same("s3cret", "s3cret "));
        assert!(!same("s3cret", ""));
    }
}
