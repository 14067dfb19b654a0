//! The scenarios every broker runs, each written once over the [`Broker`] fixture. A broker's
//! test file names the ones that apply to it with [`broker_scenarios!`](crate::broker_scenarios):
//!
//! ```ignore
//! oncely_broker_tests::broker_scenarios!(Broker::RabbitMq => source_suite, connection_loss, sigkill_crash);
//! ```
//!
//! - [`source_suite`]: the source conformance suite (`oncely_testkit::exercise_source`) at
//!   the broker's defaults (plain URLs, no redelivery tuning).
//! - [`connection_loss`]: 3,000 messages (20% duplicates, bad ids) consumed in-process while
//!   the connection is cut twice from the server side.
//! - [`sigkill_crash`]: 10,000 messages consumed by the consumer binary, SIGKILLed six times
//!   mid-stream, then run to the end.
//!
//! Each checks 0 double, 0 lost against the database, never the consumer's own counters.

use crate::brokers::{AnySource, connect_source, publish};
use crate::faults::crash_run;
use crate::fixture::{Broker, Destination};
use crate::ledger::{Db, sqlite_db};
use crate::procs::consumer_args;
use crate::workload::Workload;
use oncely_core::{RawEnvelope, Result};
use oncely_testkit::{SourceHarness, SourceTraits, exercise_source};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The test a scenario runs as: its name (for messages and skip banners) and the consumer
/// binary of this crate (`env!("CARGO_BIN_EXE_oncely-broker-consumer")`, known only to the
/// integration test that [`broker_scenarios!`](crate::broker_scenarios) expands in).
#[derive(Debug, Clone, Copy)]
pub struct Test {
    /// `module::scenario`.
    pub name: &'static str,
    /// Path of the `oncely-broker-consumer` binary.
    pub consumer_binary: &'static str,
}

/// Generates one `#[tokio::test]` per named scenario of [`crate::scenarios`], on `broker`.
#[macro_export]
macro_rules! broker_scenarios {
    ($broker:expr => $($scenario:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                let test = $crate::scenarios::Test {
                    name: concat!(module_path!(), "::", stringify!($scenario)),
                    consumer_binary: env!("CARGO_BIN_EXE_oncely-broker-consumer"),
                };
                $crate::scenarios::$scenario($broker, test).await;
            }
        )+
    };
}

/// The source conformance suite, each case on its own destination at the broker's defaults.
pub async fn source_suite(broker: Broker, test: Test) {
    if broker.up(test.name) {
        exercise_source(&Suite {
            broker,
            urls: Mutex::default(),
        })
        .await;
    }
}

struct Suite {
    broker: Broker,
    urls: Mutex<HashMap<String, String>>,
}

impl SourceHarness for Suite {
    type Source = AnySource;

    async fn fresh(&self, case: &str) -> Result<AnySource> {
        let dest = self
            .broker
            .plain_destination(&format!("suite_{}", case.replace('-', "_")))
            .await?;
        let source = connect_source(&dest.url, &dest.name).await?;
        self.urls.lock().unwrap().insert(case.to_owned(), dest.url);
        Ok(source)
    }

    async fn publish(&self, case: &str, messages: Vec<RawEnvelope>) -> Result<()> {
        let url = self.urls.lock().unwrap()[case].clone();
        publish(&url, &messages).await
    }

    fn traits(&self) -> SourceTraits {
        // Each adapter gives a dropped or nacked delivery back at once in-process; the
        // broker-side timeouts (NATS ack_wait, Redis reclaim) stay at their 30 s defaults.
        let (redelivery_within, quiet) = match self.broker {
            // The first delivery waits for the consumer group to form.
            Broker::Kafka => (Duration::from_secs(20), Duration::from_secs(2)),
            _ => (Duration::from_secs(10), Duration::from_secs(1)),
        };
        SourceTraits {
            redelivery_within,
            quiet,
            carries_control_ids: self.broker.carries_control_ids(),
            ..SourceTraits::default()
        }
    }
}

/// A fault scenario's destination, ready to receive, and its workload: `n` unique messages,
/// 20% of them published twice, up to `bad` without a usable id ([`Broker::bad_ids`]).
/// `None` when the broker is not running (and services are not required).
async fn fresh(
    broker: Broker,
    test_name: &str,
    prefix: &str,
    n: usize,
    bad: usize,
    seed: u64,
) -> Option<(Destination, Workload)> {
    if !broker.up(test_name) {
        return None;
    }
    let dest = broker.destination(prefix).await.expect("destination");
    broker.prepare(&dest).await.expect("prepare");
    let workload = Workload::new(&dest.name, n, 0.2, broker.bad_ids(bad), seed);
    Some((dest, workload))
}

/// 3,000 messages consumed in-process into SQLite while the connection is cut twice (at a
/// quarter and at half of the unique ids applied).
pub async fn connection_loss(broker: Broker, test: Test) {
    let test_name = test.name;
    let Some((dest, workload)) = fresh(broker, test_name, "connloss", 3000, 2, 3).await else {
        return;
    };
    let (db, _dir) = sqlite_db().await;
    let source = connect_source(&dest.url, &dest.name)
        .await
        .expect("connect");
    let cutter = Broker::cutter(&source)
        .unwrap_or_else(|| panic!("{test_name}: {} has no connection cut", broker.name()));
    let publisher = broker.publish(&dest, &workload, &db).await;
    crate::faults::connection_loss(
        test_name,
        &db,
        &workload,
        source,
        || cutter.cut(),
        broker.idle_after_cut(),
    )
    .await;
    publisher.await.expect("join").expect("publish");
}

/// 10,000 messages (20% duplicates, bad ids) consumed into SQLite by the consumer binary,
/// SIGKILLed six times mid-stream, then run until it has drained the destination.
pub async fn sigkill_crash(broker: Broker, test: Test) {
    let test_name = test.name;
    let Some((dest, workload)) = fresh(broker, test_name, "crash", 10_000, 5, 42).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let store = format!("sqlite:{}", dir.path().join("crash.db").display());
    let db = Db::open(&store, None).await.expect("db");
    let publisher = broker.publish(&dest, &workload, &db).await;
    let idle = broker.idle_after_kill().as_secs();
    let args = consumer_args(&dest.url, "crash", &store, None, idle);
    let run = crash_run(test.consumer_binary, &args, &db, &workload, 6).await;
    publisher.await.expect("join").expect("publish");
    eprintln!(
        "{test_name}: {} of 6 kills hit a running consumer",
        run.kills
    );
    run.report.assert_exact(test_name);
    assert!(
        run.kills >= 3,
        "{test_name}: only {} kills hit a running consumer",
        run.kills
    );
}
