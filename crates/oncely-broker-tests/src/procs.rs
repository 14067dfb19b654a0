//! Consumer child processes (the `oncely-broker-consumer` binary) for the crash, scale-out,
//! node-loss and scaling runs: start one, wait for its one-line summary.

use std::path::Path;
use std::process::Stdio;
use tokio::process::{Child, Command};

/// The arguments of one consumer process (`--idle-exit` in seconds; `--schema` where given).
pub fn consumer_args(
    source: &str,
    consumer: &str,
    store: &str,
    schema: Option<&str>,
    idle_exit: u64,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "--source",
        source,
        "--consumer",
        consumer,
        "--store",
        store,
        "--idle-exit",
        &idle_exit.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(schema) = schema {
        args.extend(["--schema".to_owned(), schema.to_owned()]);
    }
    args
}

/// Starts `exe` (the consumer binary: `env!("CARGO_BIN_EXE_oncely-broker-consumer")` in an
/// integration test) with `args`; stdout is captured for [`finish`], stderr inherited, and
/// the process is killed if the handle is dropped.
pub fn spawn(exe: impl AsRef<Path>, args: &[String]) -> Child {
    Command::new(exe.as_ref())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("consumer starts")
}

/// Waits for a consumer process, prints its summary line under `who`, panics unless it
/// exited 0; returns the summary line.
pub async fn finish(child: Child, who: &str) -> String {
    let out = child.wait_with_output().await.expect("consumer runs");
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    eprintln!("{who}: {line} ({:?})", out.status);
    assert!(out.status.success(), "{who} failed");
    line
}
