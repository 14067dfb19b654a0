//! [`Scope`]: whose key it is. A key row is `(scope, key)`: the same `Idempotency-Key` sent by
//! two clients is two keys, and a stored response is only ever replayed to the scope that
//! stored it. The layer cannot be built without choosing where the scope comes from.
//!
//! What is stored is never the identity in clear: a scope is kept as the hex SHA-256 of where
//! it came from and its value ([`ScopeId`]), or `''` for [`Scope::global`].

use http::HeaderName;
use http::request::Parts;
use sha2::{Digest, Sha256};
use std::sync::Arc;

type Resolve = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// Where the layer finds the scope of a request: the client (or tenant, account…) its
/// `Idempotency-Key` belongs to. Chosen once, when building the layer
/// ([`IdempotencyLayer::new`](crate::IdempotencyLayer::new) requires it).
///
/// - [`Scope::extension`]: a value your authentication layer put in the request extensions
///   (the usual case behind axum/tower auth; the idempotency layer must run inside it);
/// - [`Scope::header`]: a request header such as `authorization` (hashed, never stored in
///   clear);
/// - [`Scope::from_fn`]: any function of the request head;
/// - [`Scope::global`]: one scope for every request, for a service with a single client.
///
/// A request with a key but without a scope (no such header, no such extension) is refused
/// before anything runs: 400 for a header or a function, 500 for a missing extension (the
/// layer runs outside the auth layer that should set it). It is never served from the global
/// scope.
///
/// ```
/// use oncely_http::Scope;
///
/// #[derive(Clone)]
/// struct User { id: u64 }   // inserted by your auth layer
///
/// let by_user = Scope::extension(|user: &User| user.id.to_string());
/// let by_token = Scope::header("authorization");
/// let by_tenant = Scope::from_fn(|req| {
///     req.uri.path().strip_prefix("/tenants/")?.split('/').next().map(str::to_owned)
/// });
/// let single_client = Scope::global();
/// # let _ = (by_user, by_token, by_tenant, single_client);
/// ```
#[derive(Clone)]
pub struct Scope {
    source: Source,
}

#[derive(Clone)]
enum Source {
    Global,
    Header(HeaderName),
    Extension(&'static str, Arc<Resolve>),
    Function(Arc<Resolve>),
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            Source::Global => f.write_str("Scope::global()"),
            Source::Header(name) => write!(f, "Scope::header({:?})", name.as_str()),
            Source::Extension(ty, _) => write!(f, "Scope::extension::<{ty}>(..)"),
            Source::Function(_) => f.write_str("Scope::from_fn(..)"),
        }
    }
}

/// Why a request has no scope: the layer answers with a problem instead of running it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingScope {
    /// What the layer looked for, for the answer's `detail`.
    pub detail: String,
    /// Whether the server is misconfigured (an extension no layer set: 500) rather than the
    /// request incomplete (400).
    pub server_side: bool,
}

impl std::fmt::Display for MissingScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for MissingScope {}

impl Scope {
    /// Every request in one scope (stored as `''`): keys are shared by all clients, and any
    /// client sending the same key and request gets the stored response. Only for a service
    /// with a single client (or one that scopes keys itself).
    pub fn global() -> Self {
        Self {
            source: Source::Global,
        }
    }

    /// The value of the request header `name` (e.g. `authorization`, `x-api-key`): requests
    /// with the same value share keys. Stored as a SHA-256, never in clear. A request with a
    /// key but without the header (or with it repeated) is refused with 400.
    ///
    /// # Panics
    ///
    /// If `name` is not a valid header name.
    pub fn header(name: &str) -> Self {
        let name = HeaderName::try_from(name).expect("a valid header name");
        Self {
            source: Source::Header(name),
        }
    }

    /// A value your authentication layer put in the request extensions (`T`, e.g. the
    /// authenticated user), mapped to a string by `id` (e.g. the user id; stored as a
    /// SHA-256). The idempotency layer must run inside the layer that inserts `T`; a request
    /// with a key but without `T` is refused with 500 and an error in the log.
    ///
    /// Every `extension` and [`from_fn`](Scope::from_fn) scope hashes only the string: give
    /// different kinds of identity distinct prefixes (`user:42`, `tenant:42`) if routes
    /// sharing one key table use different kinds.
    pub fn extension<T, F>(id: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(&T) -> String + Send + Sync + 'static,
    {
        let resolve = move |parts: &Parts| parts.extensions.get::<T>().map(&id);
        Self {
            source: Source::Extension(std::any::type_name::<T>(), Arc::new(resolve)),
        }
    }

    /// Any function of the request head; `None` (no scope) is refused with 400. Stored as a
    /// SHA-256 of the string, like [`extension`](Scope::extension).
    pub fn from_fn<F>(scope: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        Self {
            source: Source::Function(Arc::new(scope)),
        }
    }

    /// The scope of a request, as stored in the key table's `scope` column: what the layer
    /// computes for each request with a key (e.g. to find or delete one client's keys).
    ///
    /// ```
    /// use oncely_http::Scope;
    /// let (alice, _) = http::Request::post("/orders")
    ///     .header("authorization", "Bearer alice")
    ///     .body(())
    ///     .unwrap()
    ///     .into_parts();
    /// let id = Scope::header("authorization").resolve(&alice).unwrap();
    /// assert_eq!(id.as_str().len(), 64);
    /// assert!(!id.as_str().contains("alice"));
    /// assert_eq!(Scope::global().resolve(&alice).unwrap().as_str(), "");
    /// let (anonymous, _) = http::Request::post("/orders").body(()).unwrap().into_parts();
    /// assert!(Scope::header("authorization").resolve(&anonymous).is_err());
    /// ```
    pub fn resolve(&self, parts: &Parts) -> Result<ScopeId, MissingScope> {
        match &self.source {
            Source::Global => Ok(ScopeId(String::new())),
            Source::Header(name) => {
                let mut values = parts.headers.get_all(name).iter();
                match (values.next(), values.next()) {
                    (Some(value), None) => Ok(ScopeId::hash(&[
                        b"header",
                        name.as_str().as_bytes(),
                        value.as_bytes(),
                    ])),
                    (None, _) => Err(MissingScope {
                        detail: format!(
                            "Idempotency-Keys on this route belong to the {name} header; the request has none"
                        ),
                        server_side: false,
                    }),
                    (Some(_), Some(_)) => Err(MissingScope {
                        detail: format!("more than one {name} header"),
                        server_side: false,
                    }),
                }
            }
            Source::Extension(ty, resolve) => match resolve(parts) {
                Some(value) => Ok(ScopeId::hash(&[b"value", value.as_bytes()])),
                None => Err(MissingScope {
                    detail: format!(
                        "the request has no {ty} extension to scope its Idempotency-Key by: \
                         the IdempotencyLayer must run inside the layer that inserts it"
                    ),
                    server_side: true,
                }),
            },
            Source::Function(resolve) => match resolve(parts) {
                Some(value) => Ok(ScopeId::hash(&[b"value", value.as_bytes()])),
                None => Err(MissingScope {
                    detail: "the request has no scope for its Idempotency-Key".to_owned(),
                    server_side: false,
                }),
            },
        }
    }
}

/// A request's scope as stored: `''` for [`Scope::global`] (and for the rows that existed
/// before scopes, migration `http` version 2), otherwise 64 lower-case hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScopeId(String);

impl ScopeId {
    fn hash(parts: &[&[u8]]) -> Self {
        let mut h = Sha256::new();
        for part in parts {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        Self(hex::encode(h.finalize()))
    }

    /// The value of the `scope` column.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ScopeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::post("/orders");
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn header_scopes_differ_per_value_and_name_and_hide_the_value() {
        let auth = Scope::header("authorization");
        let alice = auth
            .resolve(&parts(&[("authorization", "Bearer alice")]))
            .unwrap();
        let bob = auth
            .resolve(&parts(&[("authorization", "Bearer bob")]))
            .unwrap();
        assert_ne!(alice, bob);
        assert_eq!(
            alice,
            auth.resolve(&parts(&[("authorization", "Bearer alice")]))
                .unwrap()
        );
        let other = Scope::header("x-api-key")
            .resolve(&parts(&[("x-api-key", "Bearer alice")]))
            .unwrap();
        assert_ne!(alice, other, "the header's name is part of the scope");
        assert!(!alice.as_str().contains("alice"));
        assert!(alice.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        let twice = parts(&[("authorization", "a"), ("authorization", "b")]);
        assert!(!auth.resolve(&twice).unwrap_err().server_side);
        assert!(!auth.resolve(&parts(&[])).unwrap_err().server_side);
    }

    #[test]
    fn extension_scopes_and_misconfiguration() {
        #[derive(Clone)]
        struct User(u64);
        let scope = Scope::extension(|u: &User| format!("user:{}", u.0));
        let mut p = parts(&[]);
        let missing = scope.resolve(&p).unwrap_err();
        assert!(missing.server_side);
        assert!(missing.detail.contains("User"), "{}", missing.detail);
        p.extensions.insert(User(7));
        let seven = scope.resolve(&p).unwrap();
        let same = Scope::from_fn(|_| Some("user:7".into()))
            .resolve(&p)
            .unwrap();
        assert_eq!(
            seven, same,
            "a value is hashed the same way from either source"
        );
        assert_ne!(seven.as_str(), "");
        assert!(Scope::from_fn(|_| None).resolve(&p).is_err());
        assert_eq!(
            format!("{:?}", Scope::header("authorization")),
            "Scope::header(\"authorization\")"
        );
    }
}
