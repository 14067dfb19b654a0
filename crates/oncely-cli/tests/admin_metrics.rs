//! `--metrics-addr`: the Prometheus endpoint is scraped over HTTP after a run (held open with
//! `--metrics-hold`), and its counters are checked against the run's own report.

mod admin_support;
use admin_support::{Target, n};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scrape(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics endpoint");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    body
}

/// Sum of the samples of `name` whose labels contain every `label`.
fn sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Runs `oncely ARGS --metrics-addr … --metrics-hold`, reads its JSON report, scrapes, exits.
fn run_and_scrape(args: &[&str]) -> (serde_json::Value, String) {
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_oncely"))
        .args(args)
        .args([
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "--metrics-hold",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let report: serde_json::Value =
        serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"));
    let text = scrape(port);
    drop(child.stdin.take()); // end of stdin: the process stops holding and exits
    assert!(child.wait().unwrap().success());
    (report, text)
}

#[test]
fn demo_metrics_count_every_delivery() {
    let (report, text) = run_and_scrape(&["demo", "--json", "--messages", "1500", "--seed", "5"]);
    let by_outcome: BTreeMap<&str, f64> = [
        "applied",
        "duplicate",
        "conflict",
        "dead_lettered",
        "abandoned",
        "retry",
        "stale",
    ]
    .into_iter()
    .map(|o| {
        (
            o,
            sum(
                &text,
                "oncely_deliveries_total",
                &["consumer=\"demo\"", &format!("outcome=\"{o}\"")],
            ),
        )
    })
    .collect();
    let total: f64 = by_outcome.values().sum();
    // The demo's crashes come from oncely-testkit's wrappers: one after receipt drops the
    // delivery before the runtime sees it; every other one abandons the deliveries it held
    // (with group commit, the default, a whole group), each counted as `abandoned`. So every
    // delivery the broker handed out is either one outcome or one crash at receipt.
    let (crashes, at_receipt) = (n(&report["crashes"]), n(&report["crashes_at_receipt"]));
    let abandoned = by_outcome["abandoned"] as i64;
    assert!(
        abandoned > 0 && at_receipt > 0 && at_receipt < crashes,
        "{by_outcome:?} vs {report}"
    );
    assert!(
        abandoned >= crashes - at_receipt,
        "fewer abandoned than crashes after receipt: {by_outcome:?} vs {report}"
    );
    assert_eq!(
        total as i64 + at_receipt,
        n(&report["deliveries"]),
        "{by_outcome:?} vs {report}"
    );
    assert_eq!(
        by_outcome["duplicate"] as i64,
        n(&report["duplicates_skipped"]),
        "{by_outcome:?}"
    );
    // Every caught conflict was counted (a redelivered conflicting copy counts again), or
    // its group was abandoned by a crash after its dead letter and ack (group commit counts
    // every member of a crashed group as abandoned).
    assert!(
        by_outcome["conflict"] > 0.0
            && (by_outcome["conflict"] + by_outcome["abandoned"]) as i64
                >= n(&report["conflicts_caught"]),
        "{by_outcome:?} vs {report}"
    );
    assert!(n(&report["conflicts_caught"]) > 0, "{report}");
    // With group commit a crash after a group's commit counts its members as abandoned, and
    // they come back as duplicates: applied is not close to the messages, but never zero.
    assert!(by_outcome["applied"] > 0.0, "{by_outcome:?}");
    assert!(
        sum(&text, "oncely_commit_seconds_count", &["consumer=\"demo\""]) > 0.0,
        "{text}"
    );
    assert!(
        sum(&text, "oncely_handler_seconds_bucket", &["le=\"+Inf\""]) > 0.0,
        "{text}"
    );
}

#[tokio::test]
async fn prune_metrics_report_inbox_size_and_lag() {
    let t = Target::sqlite();
    t.seed_with_demo(300);
    let inbox = t.tables().inbox();
    let held = t.scalar(&format!("SELECT COUNT(*) FROM {inbox}")).await;
    let old = oncely_sql::clock::now_ms() - 9 * 86_400_000;
    t.exec(&format!("UPDATE {inbox} SET received_at = {old} WHERE message_id IN (SELECT message_id FROM {inbox} ORDER BY message_id LIMIT 100)")).await;
    let mut args = vec![
        "prune".to_owned(),
        "--json".to_owned(),
        "--batch-size".into(),
        "30".into(),
    ];
    args.extend(t.db_args());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (report, text) = run_and_scrape(&refs);
    assert_eq!(n(&report["deleted"]), 100, "{report}");
    assert_eq!(sum(&text, "oncely_pruned_total", &[]) as i64, 100, "{text}");
    assert_eq!(
        sum(&text, "oncely_inbox_rows", &[]) as i64,
        held - 100,
        "{text}"
    );
    assert_eq!(sum(&text, "oncely_prune_lag_seconds", &[]), 0.0, "{text}");
    assert_eq!(
        sum(&text, "oncely_prune_runs_total", &["result=\"ran\""]),
        1.0,
        "{text}"
    );
}
