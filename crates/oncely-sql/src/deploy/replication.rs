//! Streaming replicas (PostgreSQL): claims are taken on the primary only, and what a failover
//! can lose is checked at start and said once.
//!
//! - **The primary, never a standby.** Before the pool opens, every host of the URL is asked
//!   `pg_is_in_recovery()`; the first that answers `false` is used (a multi-host URL is
//!   rotated so that it comes first, keeping its order for [`crate::deploy::failover`]). A URL whose
//!   hosts are all standbys is an [`ErrorKind::Unavailable`] error naming each (where a host
//!   does not answer yet, the pool's connect waits for one as it always did). Every
//!   connection the pool opens later is checked the same way ([`refuse_standby`]): after a
//!   failover the pool's next host may still be a standby being promoted; its connections
//!   wait for the promotion (up to 3 s) and are refused if it does not come (sqlx retries
//!   until its acquire deadline, then the store's failover moves on), so no claim is ever
//!   written on, or read from, a read-only node.
//! - **What a failover can lose.** With asynchronous standbys (PostgreSQL's default:
//!   `synchronous_standby_names` empty), a commit returns once it is on the primary's disk and
//!   reaches the standby a moment later. If the primary dies in that moment and the standby
//!   is promoted, the commit is gone: the claim and the effect vanish together, but the broker
//!   was acked after that commit, so the message is lost. [`check`] reads the primary's
//!   replication state at start and logs one WARN naming the setting and the risk.
//! - **[`Replication::Replicated`]** makes each transaction of the store wait until a
//!   synchronous standby has flushed it (`SET LOCAL synchronous_commit = on`, sent in the
//!   statement that already checks the transaction before `COMMIT`, so it costs no round
//!   trip), and refuses to start where `synchronous_standby_names` is empty (a commit could
//!   not wait for anyone). `on` (the standby's WAL flushed) is what a promotion needs: a
//!   standby replays all the WAL it holds before it accepts writes. `remote_apply` would also
//!   wait for the replay, which only matters for reads on the standby.
//!
//! URL options (removed before sqlx sees the URL): `replication=replicated` (or
//! `replication=as-configured`) sets [`Replication`]; libpq's `target_session_attrs` is
//! accepted when it asks for `read-write` or `primary` (what oncely always does) and refused
//! otherwise.
//!
//! [`ErrorKind::Unavailable`]: oncely_core::ErrorKind::Unavailable

use oncely_core::{Error, Result};
#[cfg(feature = "postgres")]
pub(crate) use pg::{OPTION_NAMES, check, refuse_standby, replication_of};

/// What a commit of the store waits for, on a PostgreSQL primary with streaming replicas
/// ([`crate::ConnectOptions::replication`], or the URL option `?replication=replicated`).
///
/// ```
/// use oncely_sql::{ConnectOptions, Replication};
/// let options = ConnectOptions {
///     replication: Replication::Replicated,
///     ..ConnectOptions::default()
/// };
/// assert_eq!(options.replication, Replication::Replicated);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replication {
    /// As the server is configured (default): with `synchronous_standby_names` set and
    /// `synchronous_commit = on` (PostgreSQL's default) commits wait for a synchronous
    /// standby; otherwise they return once the primary has them. At start the store logs one
    /// WARN when the primary has asynchronous standbys: a commit acked then may be missing on
    /// a promoted replica, and its message is lost.
    #[default]
    AsConfigured,
    /// Each transaction of the store (claims with their effects, dead letters) commits with
    /// `synchronous_commit = on`: it returns once a synchronous standby has flushed it, so a
    /// promoted standby has every claim oncely acked. PostgreSQL only; the store refuses to
    /// start where `synchronous_standby_names` is empty.
    Replicated,
}

impl Replication {
    /// The statement sent before `COMMIT` (it also tells whether the transaction aborted).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn before_commit_sql(self) -> &'static str {
        match self {
            Self::AsConfigured => "SELECT 1",
            Self::Replicated => "SET LOCAL synchronous_commit = on",
        }
    }

    /// Refuses [`Replication::Replicated`] on a database without streaming replicas of this kind.
    pub(crate) fn supported_on(self, server: &str) -> Result<()> {
        match self {
            Self::AsConfigured => Ok(()),
            Self::Replicated => Err(Error::config(format!(
                "replication = replicated (wait for a synchronous standby at each commit) is \
                 supported on PostgreSQL only, not on {server}"
            ))),
        }
    }
}

/// The PostgreSQL side: what the URL asks for, and what the servers say at start.
#[cfg(feature = "postgres")]
mod pg {
    use super::*;
    use crate::error::db;

    use sqlx::postgres::{PgConnectOptions, PgConnection};
    use sqlx::{ConnectOptions as _, Connection, Row};

    use std::time::Duration;

    /// The URL options about replication that oncely takes off a PostgreSQL URL.
    pub(crate) const OPTION_NAMES: &[&str] = &[
        "replication",
        "target_session_attrs",
        "target-session-attrs",
    ];

    /// `url` without oncely's replication options, and the [`Replication`] they ask for
    /// (`default` when the URL does not say).
    #[cfg(test)]
    pub(crate) fn from_url(url: &str, default: Replication) -> Result<(String, Replication)> {
        let (url, taken) = crate::url::take_options(url, OPTION_NAMES);
        Ok((url, replication_of(&taken, default)?))
    }

    /// The [`Replication`] the options `taken` off a URL ask for (`default` when they do not
    /// say); a standby-only `target_session_attrs` is a configuration error.
    pub(crate) fn replication_of(
        taken: &[(String, String)],
        default: Replication,
    ) -> Result<Replication> {
        let mut replication = default;
        for (key, value) in taken {
            if !OPTION_NAMES.contains(&key.as_str()) {
                continue;
            }
            if key == "replication" {
                replication = match value.as_str() {
                    "replicated" => Replication::Replicated,
                    "as-configured" | "as_configured" => Replication::AsConfigured,
                    other => {
                        return Err(Error::config(format!(
                            "replication={other}: use replication=replicated (wait for a \
                         synchronous standby) or replication=as-configured"
                        )));
                    }
                }
            } else if !matches!(value.as_str(), "read-write" | "primary" | "any") {
                return Err(Error::config(format!(
                    "target_session_attrs={value}: oncely writes its claims on the primary \
                 only (read-write); a standby cannot take a claim"
                )));
            }
        }
        Ok(replication)
    }

    /// What one host said about itself and its standbys.
    #[derive(Debug, Default)]
    struct Node {
        in_recovery: bool,
        /// `synchronous_standby_names`, `synchronous_commit`; None where the server has no such
        /// settings (a PostgreSQL-compatible engine).
        names: Option<String>,
        commit: Option<String>,
        /// `application_name:sync_state` of each walsender (`?` where the role may not see it).
        standbys: Vec<String>,
    }

    const NODE_SQL: &str = "SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names'), \
     current_setting('synchronous_commit'), \
     (SELECT string_agg(application_name || ':' || coalesce(sync_state, '?'), ',' ORDER BY application_name) \
        FROM pg_stat_replication)";

    const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

    /// Whether the server is in recovery (a standby). Simple protocol, like every statement of
    /// this module: no prepared statement, so it is safe through a transaction pooler.
    async fn in_recovery(conn: &mut PgConnection) -> std::result::Result<bool, sqlx::Error> {
        sqlx::raw_sql("SELECT pg_is_in_recovery()")
            .fetch_one(&mut *conn)
            .await?
            .try_get(0)
    }

    async fn node(conn: &mut PgConnection) -> std::result::Result<Node, sqlx::Error> {
        let row = sqlx::raw_sql(NODE_SQL)
            .fetch_one(&mut *conn)
            .await
            .and_then(|r| {
                Ok((
                    r.try_get::<bool, _>(0)?,
                    r.try_get::<String, _>(1)?,
                    r.try_get::<String, _>(2)?,
                    r.try_get::<Option<String>, _>(3)?,
                ))
            });
        match row {
            Ok((in_recovery, names, commit, standbys)) => Ok(Node {
                in_recovery,
                names: Some(names),
                commit: Some(commit),
                standbys: standbys
                    .map(|s| s.split(',').map(str::to_owned).collect())
                    .unwrap_or_default(),
            }),
            // An engine without these settings or views: whether it is in recovery, if it can say.
            Err(sqlx::Error::Database(_)) => {
                let in_recovery = in_recovery(conn).await.unwrap_or(false);
                Ok(Node {
                    in_recovery,
                    ..Node::default()
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Asks one host what it is (one connection, closed again).
    async fn ask(options: &PgConnectOptions) -> Result<Node> {
        let asked = async {
            let mut conn = options.connect().await?;
            let node = node(&mut conn).await;
            let _ = conn.close().await;
            node
        };
        match tokio::time::timeout(CHECK_TIMEOUT, asked).await {
            Ok(answer) => answer.map_err(|e| db("connecting to PostgreSQL", e)),
            Err(_) => Err(Error::unavailable(format!(
                "PostgreSQL did not answer within {CHECK_TIMEOUT:?}"
            ))),
        }
    }

    /// Which of `hosts` (label and connect options, parsed once from the URL) to open first
    /// (the primary; 0 while none answers and the pool may wait for one) after checking that
    /// the URL reaches a primary and what that primary's standbys can lose; logs the one WARN or
    /// refuses [`Replication::Replicated`] (see the module's documentation).
    pub(crate) async fn check(
        hosts: &[(String, PgConnectOptions)],
        replication: Replication,
    ) -> Result<usize> {
        let mut seen = Vec::with_capacity(hosts.len());
        let mut unreachable = 0;
        for (i, (host, options)) in hosts.iter().enumerate() {
            match ask(options).await {
                Ok(node) if !node.in_recovery => {
                    if i > 0 {
                        tracing::info!(primary = %host, skipped = %seen.join("; "), "using the PostgreSQL primary");
                    }
                    judge(host, &node, replication)?;
                    return Ok(i);
                }
                Ok(_) => seen.push(format!(
                    "{host} is a read-only standby (pg_is_in_recovery())"
                )),
                Err(e) if e.is_unavailable() => {
                    unreachable += 1;
                    seen.push(format!("{host}: {}", error_chain(&e)))
                }
                Err(e) => return Err(e),
            }
        }
        if unreachable > 0 && replication == Replication::AsConfigured {
            // A host may be restarting or being promoted: the pool's own connect waits for it as
            // it always did, and refuses its connections while it is a standby (`refuse_standby`).
            tracing::debug!(hosts = %seen.join("; "), "no PostgreSQL primary answered yet; the pool waits for one");
            return Ok(0);
        }
        Err(Error::unavailable(format!(
            "no PostgreSQL host of the URL accepts writes: {}. oncely takes claims on the primary \
         only (a claim on a standby fails, and an inbox read there may lag behind the primary); \
         list the primary's host in the URL, or every node (postgres://user@host1,host2/db) to \
         follow a failover",
            seen.join("; ")
        )))
    }

    fn error_chain(e: &Error) -> String {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        text
    }

    /// The WARN (or, for [`Replication::Replicated`], the refusal) for the primary `host`.
    fn judge(host: &str, node: &Node, replication: Replication) -> Result<()> {
        let Some(names) = node.names.as_deref() else {
            return match replication {
                Replication::AsConfigured => Ok(()),
                Replication::Replicated => Err(Error::config(format!(
                    "replication = replicated: {host} has no synchronous_standby_names setting to \
                 wait on (not a PostgreSQL primary?)"
                ))),
            };
        };
        let commit = node.commit.as_deref().unwrap_or("on");
        let standbys = node.standbys.join(", ");
        let unsafe_standbys: Vec<&str> = node
            .standbys
            .iter()
            .filter(|s| s.ends_with(":async") || s.ends_with(":potential"))
            .map(String::as_str)
            .collect();
        match replication {
            Replication::Replicated => {
                if names.trim().is_empty() {
                    return Err(Error::config(format!(
                        "replication = replicated: synchronous_standby_names is empty on the \
                     PostgreSQL primary {host}, so a commit cannot wait for a standby. Set it \
                     (e.g. ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (replica1, \
                     replica2)'; SELECT pg_reload_conf()) or drop the option (standbys now: {})",
                        if standbys.is_empty() {
                            "none"
                        } else {
                            &standbys
                        }
                    )));
                }
                if !node
                    .standbys
                    .iter()
                    .any(|s| s.ends_with(":sync") || s.ends_with(":quorum") || s.ends_with(":?"))
                {
                    tracing::warn!(
                        primary = host,
                        synchronous_standby_names = names,
                        standbys = %standbys,
                        "replication = replicated, but no synchronous standby is connected now: \
                         every commit waits until one connects"
                    );
                } else {
                    tracing::info!(
                        primary = host,
                        synchronous_standby_names = names,
                        standbys = %standbys,
                        "each claim's transaction waits for a synchronous standby (synchronous_commit = on)"
                    );
                }
                Ok(())
            }
            Replication::AsConfigured => {
                if node.standbys.is_empty() {
                    return Ok(());
                }
                let risk = "a commit oncely acked may be missing on a promoted replica: its claim \
                        and effect vanish, the broker was acked, so the message is lost. Set \
                        synchronous_standby_names on the primary and open the store with \
                        replication = replicated (URL option ?replication=replicated), see \
                        docs/postgres-production.md";
                if names.trim().is_empty() {
                    tracing::warn!(
                        primary = host,
                        standbys = %standbys,
                        synchronous_standby_names = "",
                        "the PostgreSQL primary replicates asynchronously (synchronous_standby_names \
                         is empty): {risk}"
                    );
                } else if matches!(commit, "off" | "local") {
                    tracing::warn!(
                        primary = host,
                        standbys = %standbys,
                        synchronous_commit = commit,
                        "synchronous_commit = {commit}: commits do not wait for the synchronous \
                         standbys: {risk}"
                    );
                } else if !unsafe_standbys.is_empty() {
                    tracing::warn!(
                        primary = host,
                        synchronous_standby_names = names,
                        asynchronous = %unsafe_standbys.join(", "),
                        "some standbys of the PostgreSQL primary are asynchronous (sync_state async \
                         or potential): if one of them is promoted, {risk}"
                    );
                }
                Ok(())
            }
        }
    }

    /// How long a new connection to a standby waits for it to be promoted before it is refused;
    /// below the multi-host acquire timeout, so the store's failover still moves on in time.
    const PROMOTION_WAIT: Duration = Duration::from_secs(3);

    /// The pool's `after_connect`: a connection to a standby waits (polling every 50 ms, up to
    /// [`PROMOTION_WAIT`]) for the standby to be promoted, the common case right after a
    /// failover, and is refused if it is not (sqlx then retries until its acquire deadline; see
    /// the module's documentation). Waiting rather than refusing at once keeps sqlx from logging
    /// an error per attempt during a promotion. One round trip per new connection to a primary.
    pub(crate) async fn refuse_standby(
        conn: &mut PgConnection,
    ) -> std::result::Result<(), sqlx::Error> {
        let start = std::time::Instant::now();
        loop {
            match in_recovery(conn).await {
                Ok(false) | Err(sqlx::Error::Database(_)) => return Ok(()),
                Ok(true) if start.elapsed() < PROMOTION_WAIT => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(true) => {
                    return Err(sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::ReadOnlyFilesystem,
                        "the host is a read-only standby (pg_is_in_recovery()): oncely takes claims \
                     on the primary only",
                    )));
                }
                Err(e) => return Err(e),
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn url_options() {
            let (url, r) = from_url("postgres://u@h1,h2/db", Replication::AsConfigured).unwrap();
            assert_eq!(
                (url.as_str(), r),
                ("postgres://u@h1,h2/db", Replication::AsConfigured)
            );
            let (url, r) = from_url(
            "postgres://u@h/db?sslmode=disable&replication=replicated&target_session_attrs=read-write",
            Replication::AsConfigured,
        )
        .unwrap();
            assert_eq!(
                (url.as_str(), r),
                ("postgres://u@h/db?sslmode=disable", Replication::Replicated)
            );
            let (url, r) = from_url(
                "postgres://u@h/db?replication=as-configured",
                Replication::Replicated,
            )
            .unwrap();
            assert_eq!(
                (url.as_str(), r),
                ("postgres://u@h/db", Replication::AsConfigured)
            );
            assert!(
                from_url(
                    "postgres://u@h/db?replication=yes",
                    Replication::AsConfigured
                )
                .is_err()
            );
            assert!(
                from_url(
                    "postgres://u@h/db?target_session_attrs=standby",
                    Replication::AsConfigured
                )
                .is_err()
            );
        }

        #[test]
        fn replicated_needs_synchronous_names() {
            let node = |names: &str, standbys: &[&str]| Node {
                in_recovery: false,
                names: Some(names.to_owned()),
                commit: Some("on".to_owned()),
                standbys: standbys.iter().map(|s| s.to_string()).collect(),
            };
            let e = judge("h:1", &node("", &["n2:async"]), Replication::Replicated).unwrap_err();
            assert!(
                e.to_string().contains("synchronous_standby_names is empty"),
                "{e}"
            );
            assert!(judge("h:1", &node("*", &["n2:sync"]), Replication::Replicated).is_ok());
            assert!(judge("h:1", &node("", &["n2:async"]), Replication::AsConfigured).is_ok());
            assert!(Replication::Replicated.supported_on("MySQL").is_err());
            assert_eq!(
                Replication::Replicated.before_commit_sql(),
                "SET LOCAL synchronous_commit = on"
            );
        }
    }
}
