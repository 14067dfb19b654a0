//! Where the test clusters of `scripts/cluster.sh` listen, and how to kill or restart their
//! nodes from a test. The script owns the ports; these defaults mirror it, and the
//! environment variables override them (`ONCELY_GALERA_URLS`, `ONCELY_NATS_CLUSTER_URLS`,
//! comma-separated, node 1 first).

/// The three Galera nodes' URLs (`mysql://root@127.0.0.1:2330N/test`).
///
/// ```
/// assert_eq!(oncely_testkit::cluster::galera_urls().len(), 3);
/// ```
pub fn galera_urls() -> Vec<String> {
    urls("ONCELY_GALERA_URLS", |n| {
        format!("mysql://root@127.0.0.1:{}/test", 23305 + n)
    })
}

/// The three NATS cluster nodes' client URLs (`nats://127.0.0.1:1422N`, N = 2..4).
pub fn nats_urls() -> Vec<String> {
    urls("ONCELY_NATS_CLUSTER_URLS", |n| {
        format!("nats://127.0.0.1:{}", 14221 + n)
    })
}

fn urls(var: &str, default: impl Fn(u16) -> String) -> Vec<String> {
    match std::env::var(var) {
        Ok(list) if !list.trim().is_empty() => {
            list.split(',').map(|s| s.trim().to_owned()).collect()
        }
        _ => (1..=3).map(default).collect(),
    }
}

/// `host:port` of a URL (for a TCP probe).
///
/// ```
/// let url = "mysql://root@127.0.0.1:23306/test";
/// assert_eq!(oncely_testkit::cluster::host_port(url), "127.0.0.1:23306");
/// ```
pub fn host_port(url: &str) -> String {
    crate::services::address(url)
}

/// Runs `scripts/cluster.sh ARGS…` (e.g. `["kill", "galera", "1"]`), from the workspace root;
/// true when it exits 0.
pub fn script(args: &[&str]) -> bool {
    let root = crate::services::workspace_root();
    std::process::Command::new("bash")
        .arg(root.join("scripts/cluster.sh"))
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// True when every node of `urls` accepts TCP connections (each within
/// [`services::PROBE_TIMEOUT`](crate::services::PROBE_TIMEOUT)).
pub async fn answers(urls: &[String]) -> bool {
    for url in urls {
        if crate::services::probe(url).await.is_err() {
            return false;
        }
    }
    true
}

/// Whether a cluster test may run: true when the cluster answers; otherwise
/// [`services::unavailable`](crate::services::unavailable): fails under `CI` or
/// `ONCELY_REQUIRE_SERVICES`, prints the loud SKIPPED banner elsewhere.
///
/// ```no_run
/// # async fn example() {
/// use oncely_testkit::cluster;
/// if !cluster::available("galera_node_kill", "galera", &cluster::galera_urls()).await {
///     return;
/// }
/// # }
/// ```
pub async fn available(test: &str, cluster: &str, urls: &[String]) -> bool {
    if answers(urls).await {
        return true;
    }
    let why =
        format!("no answer at {urls:?}; start it with `bash scripts/cluster.sh start {cluster}`");
    crate::services::unavailable(test, &format!("the {cluster} cluster"), &why);
    false
}
