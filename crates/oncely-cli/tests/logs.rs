//! The binary's logs: `RUST_LOG` is honoured (`RUST_LOG=oncely=debug` prints debug lines) and
//! without it nothing below WARN is printed.

use std::process::{Command, Output};

fn demo(log: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oncely"));
    cmd.args(["demo", "--json", "--messages", "300", "--seed", "5"])
        .env_remove("RUST_LOG")
        .env_remove("ONCELY_LOG");
    if let Some(filter) = log {
        cmd.env("RUST_LOG", filter);
    }
    let out = cmd.output().expect("run oncely demo");
    assert!(out.status.success(), "demo failed: {}", text(&out.stderr));
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Lines of `stderr` whose level field is `level` (the fmt layer writes `<time> <LEVEL> …`).
fn lines_at<'a>(stderr: &'a str, level: &str) -> Vec<&'a str> {
    stderr
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(level))
        .collect()
}

#[test]
fn rust_log_oncely_debug_prints_debug_lines() {
    let out = demo(Some("oncely=debug"));
    let stderr = text(&out.stderr);
    let debug = lines_at(&stderr, "DEBUG");
    assert!(
        debug.iter().any(|l| l.contains("oncely::demo")),
        "no debug line of the demo: {stderr}"
    );
    assert!(
        debug.iter().any(|l| l.contains("oncely_core::consumer")),
        "no debug line of the runtime: {stderr}"
    );
    // Plain text to a pipe: no colour codes.
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
}

#[test]
fn without_rust_log_nothing_below_warn_is_printed() {
    let out = demo(None);
    let stderr = text(&out.stderr);
    for level in ["DEBUG", "INFO", "TRACE"] {
        assert!(
            lines_at(&stderr, level).is_empty(),
            "{level} lines: {stderr}"
        );
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["ok"], true, "{report}");
}
