//! Scale-out: three consumer processes share one RabbitMQ queue and one PostgreSQL schema;
//! one of them is killed with SIGKILL and restarted twice. 0 double, 0 lost.

use oncely_broker_tests::check::Report;
use oncely_broker_tests::ledger::postgres_db;
use oncely_broker_tests::procs;
use oncely_broker_tests::services::{AMQP_URL, PG_URL, available, unique};
use oncely_broker_tests::workload::Workload;
use std::time::Duration;
use tokio::process::Child;

const CONSUMER: &str = env!("CARGO_BIN_EXE_oncely-broker-consumer");

fn spawn(args: &[String]) -> Child {
    procs::spawn(CONSUMER, args)
}

async fn finish(child: Child, who: &str) {
    procs::finish(child, who).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_three_processes_one_postgres_schema_one_killed_twice() {
    let test = "amqp_three_processes_one_postgres_schema_one_killed_twice";
    if !available(test, "RabbitMQ", "127.0.0.1:5672")
        || !available(test, "PostgreSQL", "127.0.0.1:5432")
    {
        return;
    }
    let queue = unique("scale");
    let Some((db, place)) = postgres_db(test).await else {
        return;
    };
    let schema = place.schema().expect("a schema").to_owned();
    let url = format!("{AMQP_URL}?queue={queue}&prefetch=16");
    let workload = Workload::new(&queue, 10_000, 0.2, 3, 9);
    oncely_amqp::publish(&url, &workload.messages)
        .await
        .expect("publish");
    let args: Vec<String> = [
        "--source",
        &url,
        "--consumer",
        "scale",
        "--store",
        PG_URL,
        "--schema",
        &schema,
        "--idle-exit",
        "3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut victim = spawn(&args);
    let b = spawn(&args);
    let c = spawn(&args);
    for kill in 1..=2 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        victim.start_kill().expect("SIGKILL");
        let _ = victim.wait().await;
        let (rows, dead) = db.counts().await.expect("counts");
        eprintln!("kill {kill}: consumer A SIGKILLed; ledger rows {rows}, dead letters {dead}");
        victim = spawn(&args);
    }
    finish(victim, "A").await;
    finish(b, "B").await;
    finish(c, "C").await;
    let mut report = Report::read(&db, &workload).await.expect("report");
    if !report.complete() && report.double == 0 {
        // Something still in flight at idle exit: one more consumer drains it.
        finish(spawn(&args), "drain").await;
        report = Report::read(&db, &workload).await.expect("report");
    }
    report.assert_exact("scale-out (3 processes, RabbitMQ + PostgreSQL)");
}
