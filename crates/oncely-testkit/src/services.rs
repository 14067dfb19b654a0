//! The one rule for tests that need a server, and where the test databases are.
//!
//! A test that needs a server (a database, a broker) runs when the server answers. When it does
//! not, the test **fails** if the environment says services are required (`CI` or
//! `ONCELY_REQUIRE_SERVICES` set, as `.ci/run` does), and otherwise passes after printing one
//! loud `SKIPPED` banner to stderr, written past the test harness's output capture so that it
//! shows even for a passing test.
//!
//! The databases: env `ONCELY_TEST_PG_URL` (default [`DEFAULT_PG_URL`]) and
//! `ONCELY_TEST_MYSQL_URL` (default [`DEFAULT_MYSQL_URL`]; `scripts/test.sh` points it at a
//! Galera node for the cluster group).
//!
//! ```no_run
//! use oncely_testkit::services;
//!
//! # async fn example() {
//! let url = services::pg_url();
//! if !services::available("my_test", "PostgreSQL", &url).await {
//!     return; // SKIPPED (never reached under CI: `available` panics there)
//! }
//! // ... connect to `url` and test ...
//! # }
//! ```

use std::fmt::Display;
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The PostgreSQL URL used when `ONCELY_TEST_PG_URL` is not set (trust auth on loopback).
pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// The MariaDB / MySQL URL used when `ONCELY_TEST_MYSQL_URL` is not set.
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";
/// Environment variable naming the test PostgreSQL server.
pub const PG_URL_VAR: &str = "ONCELY_TEST_PG_URL";
/// Environment variable naming the test MariaDB / MySQL server.
pub const MYSQL_URL_VAR: &str = "ONCELY_TEST_MYSQL_URL";

/// The test PgBouncer (transaction pooling, `scripts/pgbouncer.sh`) in front of the test
/// PostgreSQL, when [`PGBOUNCER_URL_VAR`] is unset.
pub const DEFAULT_PGBOUNCER_URL: &str = "postgres://postgres@127.0.0.1:16432/test";
/// The variable naming the test PgBouncer URL.
pub const PGBOUNCER_URL_VAR: &str = "ONCELY_TEST_PGBOUNCER_URL";

/// How long [`probe`] and [`probe_blocking`] wait for a TCP connection.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The workspace's root directory, found at run time: the nearest ancestor of the current
/// directory (a test runs in its package's directory, under `cargo test` and
/// `scripts/test.sh` alike) that holds `scripts/setup.sh`; else the root this crate was built
/// in. Not compiled in: a build cache shared by two checkouts (CI's and a worktree) can hold
/// a test built in the other one, whose compiled-in paths may no longer exist.
pub fn workspace_root() -> std::path::PathBuf {
    if let Ok(dir) = std::env::current_dir()
        && let Some(root) = dir
            .ancestors()
            .find(|d| d.join("scripts/setup.sh").is_file())
    {
        return root.to_path_buf();
    }
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// True when a missing server must fail the test: env `CI` or `ONCELY_REQUIRE_SERVICES` set
/// (to anything, even empty).
///
/// ```
/// let required = std::env::var_os("CI").is_some()
///     || std::env::var_os("ONCELY_REQUIRE_SERVICES").is_some();
/// assert_eq!(oncely_testkit::services::required(), required);
/// ```
pub fn required() -> bool {
    required_by(
        std::env::var_os("CI").is_some(),
        std::env::var_os("ONCELY_REQUIRE_SERVICES").is_some(),
    )
}

fn required_by(ci: bool, require_services: bool) -> bool {
    ci || require_services
}

/// The test PostgreSQL URL: env `ONCELY_TEST_PG_URL`, else [`DEFAULT_PG_URL`].
///
/// ```
/// let url = oncely_testkit::services::pg_url();
/// assert!(url.starts_with("postgres"));
/// ```
pub fn pg_url() -> String {
    url_or(std::env::var(PG_URL_VAR).ok(), DEFAULT_PG_URL)
}

/// The test MariaDB / MySQL URL: env `ONCELY_TEST_MYSQL_URL`, else [`DEFAULT_MYSQL_URL`].
///
/// ```
/// let url = oncely_testkit::services::mysql_url();
/// assert!(url.starts_with("mysql"));
/// ```
pub fn mysql_url() -> String {
    url_or(std::env::var(MYSQL_URL_VAR).ok(), DEFAULT_MYSQL_URL)
}

/// The test PgBouncer URL: env `ONCELY_TEST_PGBOUNCER_URL`, else [`DEFAULT_PGBOUNCER_URL`].
///
/// ```
/// let url = oncely_testkit::services::pgbouncer_url();
/// assert!(url.starts_with("postgres"));
/// ```
pub fn pgbouncer_url() -> String {
    url_or(std::env::var(PGBOUNCER_URL_VAR).ok(), DEFAULT_PGBOUNCER_URL)
}

fn url_or(set: Option<String>, default: &str) -> String {
    match set {
        Some(url) if !url.trim().is_empty() => url.trim().to_owned(),
        _ => default.to_owned(),
    }
}
/// `url` (`scheme://user@host:port/db?query`) with the database `db` in place of its own (or
/// added when it names none); the query is kept.
///
/// ```
/// use oncely_testkit::services::with_database;
/// assert_eq!(with_database("postgres://u@h:6432/test?x=1", "t1"), "postgres://u@h:6432/t1?x=1");
/// assert_eq!(with_database("mysql://root@h", "x"), "mysql://root@h/x");
/// ```
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let out = format!("{}/{db}", &base[..path]);
    query.map_or(out.clone(), |q| format!("{out}?{q}"))
}

/// Reports a server a test needs but cannot use: panics when [`required`], otherwise writes
/// one loud `SKIPPED` banner to stderr (directly, so the harness's capture doesn't hide it)
/// and returns, so the caller can `return` from the test.
///
/// `test` names the test, `what` the server (`"PostgreSQL"`, `"Kafka"`), `why` what went
/// wrong (a connect error, a probe's message).
///
/// ```no_run
/// # async fn example() {
/// # async fn connect(_: &str) -> Result<(), String> { Ok(()) }
/// let url = oncely_testkit::services::pg_url();
/// if let Err(e) = connect(&url).await {
///     oncely_testkit::services::unavailable("my_test", "PostgreSQL", &e);
///     return;
/// }
/// # }
/// ```
pub fn unavailable(test: &str, what: &str, why: &dyn Display) {
    if required() {
        panic!("{}", failure(test, what, why));
    }
    skipped(
        test,
        &format_args!(
            "{what} unavailable ({why}); set CI or ONCELY_REQUIRE_SERVICES=1 to fail instead"
        ),
    );
}

/// How every SKIPPED banner's line starts: `scripts/test.sh` counts the lines of a test log
/// that begin with it as skipped tests (one banner per test that returned early).
pub const SKIPPED_BANNER: &str = "*** SKIPPED ";

/// Writes the SKIPPED banner of `test` to stderr (directly, past the harness's capture), one
/// line of its own starting with [`SKIPPED_BANNER`]: `*** SKIPPED <test>: <why> ***`. For a
/// test that returns early for a reason of its own (a missing tool); a missing server goes
/// through [`unavailable`], which also applies the CI rule. Call it once per skipped test.
pub fn skipped(test: &str, why: &dyn Display) {
    // This module's own unit tests exercise the skip path; their banner would be counted as
    // a skipped test by scripts/test.sh, so it is not written there ([`banner`] is tested).
    if cfg!(test) {
        return;
    }
    let _ = std::io::stderr().write_all(banner(test, why).as_bytes());
}

fn failure(test: &str, what: &str, why: &dyn Display) -> String {
    format!("{test}: {what} is required (CI / ONCELY_REQUIRE_SERVICES set) but unavailable: {why}")
}

/// The banner on a line of its own (a newline first: libtest may have written `test x ... `),
/// with any line breaks of `why` flattened so that the banner stays one countable line.
fn banner(test: &str, why: &dyn Display) -> String {
    let why = why.to_string().replace(['\r', '\n'], " ");
    format!("\n{SKIPPED_BANNER}{test}: {why} ***\n\n")
}

/// `host:port` to probe for `target`, a URL or already `host:port`: the URL's authority
/// without user info, with the scheme's default port added when the URL names none
/// (PostgreSQL 5432, MySQL/MariaDB 3306, Redis 6379, AMQP 5672, MQTT 1883, NATS 4222,
/// Kafka 9092).
///
/// ```
/// use oncely_testkit::services::address;
/// assert_eq!(address("postgres://postgres@127.0.0.1:5432/test"), "127.0.0.1:5432");
/// assert_eq!(address("mysql://root@127.0.0.1/test"), "127.0.0.1:3306");
/// assert_eq!(address("127.0.0.1:9092"), "127.0.0.1:9092");
/// ```
pub fn address(target: &str) -> String {
    let rest = target.split_once("://").map_or(target, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, h)| h)
        .to_owned();
    let has_port = match authority.rsplit_once(':') {
        // `[::1]:5432` has a port; a bare `[::1]` does not.
        Some((host, port)) => {
            port.parse::<u16>().is_ok() && (!host.starts_with('[') || host.ends_with(']'))
        }
        None => false,
    };
    if has_port {
        return authority;
    }
    let scheme = target.split_once("://").map_or("", |(s, _)| s);
    let port = match scheme {
        "postgres" | "postgresql" => 5432,
        "mysql" | "mariadb" => 3306,
        "redis" | "rediss" => 6379,
        "amqp" => 5672,
        "mqtt" => 1883,
        "nats" => 4222,
        "kafka" => 9092,
        _ => return authority,
    };
    format!("{authority}:{port}")
}

/// Checks within [`PROBE_TIMEOUT`] that something accepts TCP connections at `target`
/// (a URL or `host:port`, see [`address`]); the error says what failed. A quick way to tell
/// "no server" apart before a connection pool's long acquire timeout.
///
/// ```no_run
/// # async fn example() {
/// use oncely_testkit::services;
/// if let Err(why) = services::probe(&services::mysql_url()).await {
///     services::unavailable("my_test", "MariaDB", &why);
///     return;
/// }
/// # }
/// ```
pub async fn probe(target: &str) -> Result<(), String> {
    let addr = address(target);
    let connect = tokio::net::TcpStream::connect(addr.clone());
    match tokio::time::timeout(PROBE_TIMEOUT, connect).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("nothing listens at {addr}: {e}")),
        Err(_) => Err(format!(
            "{addr} did not answer within {} s",
            PROBE_TIMEOUT.as_secs()
        )),
    }
}

/// [`probe`] for synchronous tests (blocks the thread up to [`PROBE_TIMEOUT`] per address).
///
/// ```no_run
/// assert!(oncely_testkit::services::probe_blocking("127.0.0.1:5432").is_ok());
/// ```
pub fn probe_blocking(target: &str) -> Result<(), String> {
    let addr = address(target);
    let addrs = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {addr}: {e}"))?;
    let mut last = format!("{addr} resolves to no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, PROBE_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(e) => last = format!("nothing listens at {addr}: {e}"),
        }
    }
    Err(last)
}

/// Whether a test may use the server at `target`: true when [`probe`] succeeds; otherwise
/// [`unavailable`] (panics under `CI` / `ONCELY_REQUIRE_SERVICES`, else a SKIPPED banner)
/// and false.
///
/// ```no_run
/// # async fn example() {
/// use oncely_testkit::services;
/// if !services::available("my_test", "NATS", "nats://127.0.0.1:4222").await {
///     return;
/// }
/// # }
/// ```
pub async fn available(test: &str, what: &str, target: &str) -> bool {
    match probe(target).await {
        Ok(()) => true,
        Err(why) => {
            unavailable(test, what, &why);
            false
        }
    }
}

/// [`available`] for synchronous tests.
///
/// ```no_run
/// if !oncely_testkit::services::available_blocking("my_test", "Redis", "127.0.0.1:6379") {
///     return;
/// }
/// ```
pub fn available_blocking(test: &str, what: &str, target: &str) -> bool {
    match probe_blocking(target) {
        Ok(()) => true,
        Err(why) => {
            unavailable(test, what, &why);
            false
        }
    }
}

/// A fresh name `t_<tag>_<pid>_<n>_<random>`: lower case ASCII, at most 48 bytes, unique per
/// process and call, and across runs (a schema, database, queue or stream name of one test;
/// brokers keep their queues between runs).
///
/// ```
/// let (a, b) = (oncely_testkit::services::unique("x"), oncely_testkit::services::unique("x"));
/// assert_ne!(a, b);
/// assert!(a.starts_with("t_x_") && a.len() <= 48);
/// ```
pub fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let short: String = tag
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(20)
        .collect();
    let random: u32 = rand::random();
    format!("t_{short}_{}_{n}_{random:08x}", std::process::id()).to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_variable_requires_services() {
        assert!(!required_by(false, false));
        assert!(required_by(true, false));
        assert!(required_by(false, true));
        assert!(required_by(true, true));
    }

    #[test]
    fn urls_fall_back_to_the_defaults() {
        assert_eq!(url_or(None, DEFAULT_PG_URL), DEFAULT_PG_URL);
        assert_eq!(
            url_or(Some("  ".into()), DEFAULT_MYSQL_URL),
            DEFAULT_MYSQL_URL
        );
        assert_eq!(
            url_or(Some("postgres://u@h:1/db ".into()), DEFAULT_PG_URL),
            "postgres://u@h:1/db"
        );
    }

    #[test]
    fn the_env_or_the_default_is_used() {
        let pg = std::env::var(PG_URL_VAR).unwrap_or_else(|_| DEFAULT_PG_URL.into());
        assert_eq!(pg_url(), pg.trim());
        let my = std::env::var(MYSQL_URL_VAR).unwrap_or_else(|_| DEFAULT_MYSQL_URL.into());
        assert_eq!(mysql_url(), my.trim());
    }

    #[test]
    fn banner_and_failure_name_the_test_the_server_and_the_cause() {
        let b = banner(
            "t1",
            &"PostgreSQL unavailable (refused\nat connect); set CI",
        );
        let lines: Vec<&str> = b
            .lines()
            .filter(|l| l.starts_with(SKIPPED_BANNER))
            .collect();
        assert_eq!(
            lines,
            ["*** SKIPPED t1: PostgreSQL unavailable (refused at connect); set CI ***"],
            "{b:?}"
        );
        assert!(b.starts_with('\n'), "{b:?}");
        let f = failure("t1", "MariaDB", &"timed out");
        assert!(f.starts_with("t1: MariaDB is required"), "{f}");
        assert!(f.ends_with("timed out"), "{f}");
    }

    #[test]
    fn addresses_get_the_schemes_default_port() {
        assert_eq!(address(DEFAULT_PG_URL), "127.0.0.1:5432");
        assert_eq!(address(DEFAULT_MYSQL_URL), "127.0.0.1:3306");
        assert_eq!(
            address("postgres://postgres@127.0.0.1/test"),
            "127.0.0.1:5432"
        );
        assert_eq!(
            address("mysql://root:pw@db.local/test?ssl=0"),
            "db.local:3306"
        );
        assert_eq!(address("postgres://[::1]/test"), "[::1]:5432");
        assert_eq!(address("postgres://[::1]:6543/test"), "[::1]:6543");
        assert_eq!(address("nats://127.0.0.1"), "127.0.0.1:4222");
        assert_eq!(address("127.0.0.1:9092"), "127.0.0.1:9092");
        assert_eq!(address("somewhere"), "somewhere");
    }

    /// A loopback port that was just free (the listener is dropped).
    fn closed_port() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    }

    #[tokio::test]
    async fn probe_tells_a_listener_from_a_closed_port() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = l.local_addr().unwrap().to_string();
        assert_eq!(probe(&open).await, Ok(()));
        assert_eq!(probe(&format!("postgres://u@{open}/db")).await, Ok(()));
        let closed = closed_port();
        let why = probe(&closed).await.unwrap_err();
        assert!(why.contains(&closed), "{why}");
    }

    #[test]
    fn blocking_probe_tells_a_listener_from_a_closed_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = l.local_addr().unwrap().to_string();
        assert_eq!(probe_blocking(&open), Ok(()));
        assert!(probe_blocking(&closed_port()).is_err());
        assert!(probe_blocking("no.such.host.invalid:1").is_err());
    }

    #[tokio::test]
    async fn a_listening_server_is_available_whatever_the_environment() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = l.local_addr().unwrap().to_string();
        assert!(available("t", "test server", &open).await);
        assert!(available_blocking("t", "test server", &open));
    }

    #[tokio::test]
    async fn a_missing_server_skips_or_fails_by_the_rule() {
        let closed = closed_port();
        let outcome =
            tokio::spawn(async move { available("t", "test server", &closed).await }).await;
        if required() {
            assert!(outcome.unwrap_err().is_panic(), "must fail under CI");
        } else {
            assert!(!outcome.unwrap(), "must skip (false) outside CI");
        }
    }
}
