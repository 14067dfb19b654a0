//! # oncely-console
//!
//! The operator console of an oncely installation: dead letters (filtered, grouped, paged),
//! one dead letter with where its id is now, safe replay / resolve / purge on one row, a
//! selection or everything matching a filter (preview count, confirmation, background job with
//! progress and a summary per outcome), the audit journal, and a JSON API for all of it.
//! The admin logic is `oncely-ops`'; this crate only renders it.
//!
//! [`Console::router`] is an axum [`Router`]: mount it in your own service behind your own
//! authentication, or serve it with [`serve`] (what `oncely console` does).
//!
//! ```no_run
//! # async fn f() -> oncely_core::Result<()> {
//! let store = oncely_sql::AnyStore::connect("sqlite:oncely.db").await?;
//! let console = oncely_console::Console::new(store).operator_token("s3cret");
//! let app = axum::Router::new().nest("/ops", console.router());
//! # let _ = app; Ok(()) }
//! ```
//!
//! Pages are rendered on the server and use no JavaScript: the only asset is the console's
//! own stylesheet (no third-party code is vendored). Security: see [`security`].

mod actions;
mod api;
pub mod auth;
mod charts;
mod groups;
mod html;
mod jobs;
mod letters;
mod overview;
mod pages;
mod prune;
mod replayers;
pub mod security;

pub use auth::{Actor, Role};
pub use jobs::JobStatus;

use axum::Router;
use axum::routing::{get, post};
use oncely_core::Handler;
use oncely_ops::Ops;
use oncely_sql::{AnyStore, AnyTx};
use std::sync::Arc;

/// A console over one store: its configuration, then [`Console::router`].
#[derive(Clone)]
pub struct Console {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub store: AnyStore,
    pub ops: Ops,
    pub access: auth::Access,
    pub csrf: String,
    pub replayers: replayers::Replayers,
    pub jobs: jobs::Jobs,
    pub redact: Vec<String>,
    pub hide_payloads: bool,
    pub groups: groups::Groups,
    pub window: std::time::Duration,
    pub base: String,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No tokens: they are credentials.
        f.debug_struct("Console")
            .field("tables", self.inner.ops.tables())
            .finish_non_exhaustive()
    }
}

impl Console {
    /// A console over `store`. Without tokens every request gets the operator role (mount it
    /// behind your own authentication, or set [`Role`] / [`Actor`] request extensions there).
    pub fn new(store: AnyStore) -> Self {
        let ops = Ops::from(&store);
        let csrf = hex::encode(rand::random::<[u8; 32]>());
        Self {
            inner: Arc::new(Inner {
                store,
                ops,
                access: auth::Access::default(),
                csrf,
                replayers: replayers::Replayers::default(),
                jobs: jobs::Jobs::default(),
                redact: Vec::new(),
                hide_payloads: false,
                groups: groups::Groups::default(),
                window: oncely_ops::retention::DEFAULT_WINDOW,
                base: String::new(),
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Inner)) -> Self {
        let inner = Arc::get_mut(&mut self.inner).expect("configure the console before cloning it");
        f(inner);
        self
    }

    /// Requests bearing this token (header `Authorization: Bearer …`, the console's cookie, or
    /// `?token=…` once, which sets the cookie) get the operator role; once any token is set,
    /// requests without a valid one are refused with 401.
    pub fn operator_token(self, token: impl Into<String>) -> Self {
        self.edit(|i| i.access.operator = Some(token.into()))
    }

    /// Requests bearing this token get the read-only (viewer) role.
    pub fn viewer_token(self, token: impl Into<String>) -> Self {
        self.edit(|i| i.access.viewer = Some(token.into()))
    }

    /// The role of requests when no token is configured (default [`Role::Operator`]).
    pub fn default_role(self, role: Role) -> Self {
        self.edit(|i| i.access.default_role = role)
    }

    /// True when a token is configured (what [`serve`] requires off loopback).
    pub fn has_token(&self) -> bool {
        self.inner.access.operator.is_some() || self.inner.access.viewer.is_some()
    }

    /// Replays dead letters of `consumer` through `handler`.
    pub fn handler<H: Handler<AnyTx> + Clone>(
        self,
        consumer: impl Into<String>,
        handler: H,
    ) -> Self {
        self.edit(|i| i.replayers.add(Some(consumer.into()), handler))
    }

    /// Replays dead letters of consumers without a handler of their own through `handler`.
    pub fn default_handler<H: Handler<AnyTx> + Clone>(self, handler: H) -> Self {
        self.edit(|i| i.replayers.add(None, handler))
    }

    /// Payload fields (JSON object keys, at any depth) shown as `"[redacted]"`.
    pub fn redact<I: IntoIterator<Item = S>, S: Into<String>>(self, fields: I) -> Self {
        self.edit(|i| i.redact = fields.into_iter().map(Into::into).collect())
    }

    /// Shows no payload at all (pages and API say only its size and hash), whatever
    /// [`Console::redact`] names: for installations whose payloads operators must not read.
    pub fn hide_payloads(self, hide: bool) -> Self {
        self.edit(|i| i.hide_payloads = hide)
    }

    /// The inbox retention window replay checks against (default 7 days; give what
    /// `oncely prune --older-than` uses).
    pub fn retention(self, window: std::time::Duration) -> Self {
        self.edit(|i| i.window = window)
    }

    /// The path the router is mounted under (`"/ops"` for `Router::new().nest("/ops", …)`),
    /// for the pages' links. Default: the root.
    pub fn base_path(self, path: impl Into<String>) -> Self {
        let path = path.into().trim_end_matches('/').to_owned();
        self.edit(|i| i.base = path)
    }

    /// The console's routes: pages `/`, `/dead-letters`, `/dead-letters/{id}`, `/audit`,
    /// `/jobs/{id}`, the forms' `POST /actions/{action}`, `/prune`, `/jobs/{id}/cancel`, the JSON API under `/api` (see docs/console.md), with authentication, CSRF
    /// checks and security headers applied.
    pub fn router(&self) -> Router {
        let state = self.clone();
        Router::new()
            .route("/", get(pages::overview))
            .route("/dead-letters", get(pages::dead_letters))
            .route("/dead-letters/{id}", get(pages::dead_letter))
            .route("/actions/{action}", post(pages::action))
            .route("/prune", post(pages::prune))
            .route("/jobs/{id}", get(pages::job))
            .route("/jobs/{id}/cancel", post(pages::cancel))
            .route("/audit", get(pages::audit))
            .route("/assets/console.css", get(pages::css))
            .route("/assets/favicon.svg", get(pages::favicon))
            .route("/api/csrf", get(api::csrf))
            .route("/api/overview", get(api::overview))
            .route("/api/dead-letters", get(api::dead_letters))
            .route("/api/dead-letters/groups", get(api::groups))
            // GET a row by id; POST `replay`, `resolve` or `purge`.
            .route(
                "/api/dead-letters/{id}",
                get(api::dead_letter).post(api::action),
            )
            .route("/api/prune", post(api::prune))
            .route("/api/jobs/{id}", get(api::job))
            .route("/api/jobs/{id}/cancel", post(api::cancel))
            .route("/api/audit", get(api::audit))
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                security::guard,
            ))
            .with_state(state)
    }
}

/// Serves `console` on `addr` until the process ends. Refuses a non-loopback address unless a
/// token is configured.
pub async fn serve(console: Console, addr: std::net::SocketAddr) -> oncely_core::Result<()> {
    security::check_bind(&addr, console.has_token())?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| oncely_core::Error::config(format!("binding {addr}: {e}")))?;
    axum::serve(listener, console.router())
        .await
        .map_err(|e| oncely_core::Error::config(format!("serving the console: {e}")))
}
