//! One cell of the matrix: a consumer kind, a batch size and a concurrency on one database,
//! timed over a fixed set of messages and checked against the database afterwards.

use crate::bed::{Counts, Ops};
use crate::broker::{Broker, CpuUse, PathStats};
use crate::{group, runners};
use anyhow::{Result, bail};
use oncely_core::{ConsumerName, MemorySource, RawEnvelope};
use serde::Serialize;
use std::time::{Duration, Instant};

/// What a cell runs (serialized as its [`Mode::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// An at-least-once consumer with the same effect and no dedup (the baseline).
    Plain,
    /// oncely per-message mode (`Consumer`), or batch mode when `batch > 1`.
    Oncely,
    /// The same claims and effect written by hand through sqlx.
    Raw,
    /// oncely: every message delivered twice; the figure is the redelivery's rate.
    Duplicate,
    /// As `Duplicate`, with `Consumer::check_inbox_first` (per-message only).
    DuplicateChecked,
    /// oncely with group commit: the per-message handler, up to `batch` ready deliveries per
    /// transaction, `concurrency` groups in flight.
    Group,
    /// As `Group`, every message delivered twice; the figure is the redelivery's rate (found
    /// with one inbox read per group, acked without a transaction).
    GroupDuplicate,
    /// The floor for a duplicate: one primary-key `SELECT` per message on one connection,
    /// after oncely applied them.
    PkLookup,
    /// Messages published one every 20 ms (idle: slower than any per-message cell) to one consumer with group commit up to `batch`
    /// (1: off); the cell reports publish-to-ack latency quantiles.
    Latency,
    /// Through a real broker: a bare consumer of the client library oncely uses, consume +
    /// ack only (see `broker/`).
    Bare(Broker),
    /// Through a real broker: oncely with its defaults and a plain URL, into the database.
    Through(Broker),
    /// oncely with its defaults fed in process, run beside a broker's cells in each round
    /// (the in-process ceiling at the same moment).
    InProcess(Broker),
    /// The user's path through RabbitMQ, on PostgreSQL: the `oncely` binary's
    /// `demo --consume-only --crash-rate 0` at its defaults with a plain URL, on a quorum
    /// queue filled before it starts (see `broker/demo.rs`).
    AmqpDemo,
    /// A bare lapin consumer of an equally full quorum queue, beside [`Mode::AmqpDemo`].
    AmqpExistingBare,
}

impl Serialize for Mode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl Mode {
    /// Short name for tables and keys.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Oncely => "oncely",
            Self::Raw => "raw",
            Self::Duplicate => "duplicate",
            Self::DuplicateChecked => "duplicate_checked",
            Self::Group => "group",
            Self::GroupDuplicate => "group_duplicate",
            Self::PkLookup => "pk_lookup",
            Self::Latency => "latency",
            Self::Bare(broker) => broker.bare_name(),
            Self::Through(broker) => broker.name(),
            Self::InProcess(broker) => broker.in_process_name(),
            Self::AmqpDemo => "amqp_demo",
            Self::AmqpExistingBare => "amqp_existing_bare",
        }
    }

    /// A cell of a broker's group (run with the broker rounds, see `plan.rs`).
    pub fn is_broker(self) -> bool {
        matches!(
            self,
            Self::Bare(_)
                | Self::Through(_)
                | Self::InProcess(_)
                | Self::AmqpDemo
                | Self::AmqpExistingBare
        )
    }

    /// A cell that runs on PostgreSQL only (the demo's, into its own schema).
    pub fn postgres_only(self) -> bool {
        matches!(self, Self::AmqpDemo | Self::AmqpExistingBare)
    }
}

/// A cell to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Spec {
    /// Consumer kind.
    pub mode: Mode,
    /// Deliveries per transaction (1: per-message).
    pub batch: usize,
    /// Consumers (deliveries or batches in flight at once).
    pub concurrency: usize,
    /// Distinct messages published.
    pub messages: usize,
}

/// The checker's verdict for one cell, from the database alone.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Check {
    /// Distinct messages published.
    pub published: u64,
    /// Ledger rows found (one per applied effect).
    pub effect_rows: u64,
    /// Effects beyond one per message id.
    pub double: u64,
    /// Published ids with neither an effect nor a dead letter.
    pub lost: u64,
    /// Dead-letter rows (the bench expects none).
    pub dead_letters: u64,
    /// Sum of amounts published, once per id.
    pub expected_total: i64,
    /// Sum of balances found.
    pub balance_total: i64,
    /// Inbox rows found (0 for the plain consumer, one per id otherwise).
    pub inbox_rows: u64,
    /// Everything as expected.
    pub ok: bool,
}

impl Check {
    /// A bare broker consumer writes nothing: it received and acked every message (it fails
    /// the run otherwise), which is all it is checked for; no balances are expected of it.
    pub(crate) fn delivered(published: u64) -> Self {
        Self {
            published,
            ok: true,
            ..Self::default()
        }
    }

    /// The verdict of a run whose inbox was pruned while it ran (the soak mode): the ledger and
    /// the balances against the published messages as [`Check::new`] counts them; the inbox rows
    /// are reported, not compared (prune removed some of them).
    pub(crate) fn pruned(published: u64, expected_total: i64, c: Counts) -> Self {
        let counted = Counts {
            inbox_rows: published,
            ..c
        };
        Self {
            inbox_rows: c.inbox_rows,
            ..Self::new(published, expected_total, counted, true)
        }
    }

    pub(crate) fn new(published: u64, expected_total: i64, c: Counts, expect_inbox: bool) -> Self {
        let double = c.ledger_rows - c.ledger_ids;
        let lost = published.saturating_sub(c.ledger_ids + c.dead_letters);
        let inbox_ok = if expect_inbox {
            c.inbox_rows == published
        } else {
            c.inbox_rows == 0
        };
        Self {
            published,
            effect_rows: c.ledger_rows,
            double,
            lost,
            dead_letters: c.dead_letters,
            expected_total,
            balance_total: c.balance_total,
            inbox_rows: c.inbox_rows,
            ok: double == 0
                && lost == 0
                && c.dead_letters == 0
                && c.ledger_ids == published
                && c.balance_total == expected_total
                && inbox_ok,
        }
    }
}

/// A measured cell.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// `postgres`, `sqlite_full` or `sqlite_normal`.
    pub backend: String,
    /// What ran.
    #[serde(flatten)]
    pub spec: Spec,
    /// Wall time of the timed phase.
    pub seconds: f64,
    /// Messages per second of the timed phase (for duplicates: the redelivery).
    pub msgs_per_sec: f64,
    /// Duplicate cells: the first delivery's messages per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_msgs_per_sec: Option<f64>,
    /// Latency cells: median publish-to-ack latency, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    /// Latency cells: 99th percentile publish-to-ack latency, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
    /// Latency cells: the median latency of each round, ms, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub round_p50_ms: Vec<f64>,
    /// Which group of the sweep the cell ran in: cells of one group ran round by round
    /// side by side, so their ratios are taken round by round (see `report.rs`).
    #[serde(skip)]
    pub(crate) group: usize,
    /// Latency cells: every message's latency, sorted (rounds merge their samples).
    #[serde(skip)]
    latencies: Vec<Duration>,
    /// Messages per second of each round, in order.
    pub round_msgs_per_sec: Vec<f64>,
    /// oncely at its defaults (broker cells): where the time went, summed over rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathStats>,
    /// Broker cells: the CPU each process spent, summed over rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUse>,
    /// The checker's verdict.
    pub check: Check,
}

impl Cell {
    /// Adds another round of the same cell: messages and time summed, checks combined.
    pub(crate) fn merge(mut self, other: Cell) -> Cell {
        let first = |c: &Cell| c.first_msgs_per_sec.map(|r| c.spec.messages as f64 / r);
        let first_secs = first(&self).zip(first(&other)).map(|(a, b)| a + b);
        self.spec.messages += other.spec.messages;
        self.seconds += other.seconds;
        self.msgs_per_sec = self.spec.messages as f64 / self.seconds.max(1e-9);
        self.first_msgs_per_sec = first_secs.map(|s| self.spec.messages as f64 / s.max(1e-9));
        self.round_msgs_per_sec.extend(other.round_msgs_per_sec);
        self.round_p50_ms.extend(other.round_p50_ms);
        self.path = match (self.path, other.path) {
            (Some(a), Some(b)) => Some(a.merge(b)),
            (a, b) => a.or(b),
        };
        self.cpu = match (self.cpu, other.cpu) {
            (Some(a), Some(b)) => Some(a.merge(b)),
            (a, b) => a.or(b),
        };
        // Latency quantiles over the samples of every round.
        if !other.latencies.is_empty() {
            self.latencies.extend(other.latencies);
            self.latencies.sort();
            self.p50_ms = Some(group::quantile_ms(&self.latencies, 0.5));
            self.p99_ms = Some(group::quantile_ms(&self.latencies, 0.99));
        }
        let (a, b) = (self.check, other.check);
        self.check = Check {
            published: a.published + b.published,
            effect_rows: a.effect_rows + b.effect_rows,
            double: a.double + b.double,
            lost: a.lost + b.lost,
            dead_letters: a.dead_letters + b.dead_letters,
            expected_total: a.expected_total + b.expected_total,
            balance_total: a.balance_total + b.balance_total,
            inbox_rows: a.inbox_rows + b.inbox_rows,
            ok: a.ok && b.ok,
        };
        self
    }

    /// A cell of `spec` whose rounds ran at `rounds` msgs/s (for tests of the report).
    #[cfg(test)]
    pub(crate) fn with_rounds(backend: &str, spec: Spec, rounds: &[f64]) -> Cell {
        let cell = |rate: f64| Cell {
            backend: backend.to_owned(),
            spec,
            seconds: spec.messages as f64 / rate,
            msgs_per_sec: rate,
            first_msgs_per_sec: None,
            p50_ms: None,
            p99_ms: None,
            round_p50_ms: Vec::new(),
            group: 0,
            latencies: Vec::new(),
            round_msgs_per_sec: vec![rate],
            path: None,
            cpu: None,
            check: Check::delivered(spec.messages as u64),
        };
        let mut rounds = rounds.iter().map(|r| cell(*r));
        let first = rounds.next().expect("a round");
        rounds.fold(first, Cell::merge)
    }

    /// Key of the cell in `--json`'s `msgs_per_sec` map, e.g. `postgres/oncely/b100/c1`.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/b{}/c{}",
            self.backend,
            self.spec.mode.name(),
            self.spec.batch,
            self.spec.concurrency
        )
    }
}

/// The messages of a cell: unique ids, a few hundred accounts, small amounts.
pub(crate) fn workload(n: usize, tag: &str) -> (Vec<RawEnvelope>, i64) {
    workload_with(n, |i| format!("{tag}-{i:07}"))
}

/// [`workload`] with the `i`-th message's id made by `id`; returns the messages and the sum
/// of their amounts.
pub(crate) fn workload_with(n: usize, id: impl Fn(usize) -> String) -> (Vec<RawEnvelope>, i64) {
    let mut total = 0;
    let msgs = (0..n)
        .map(|i| {
            let (message, amount) = credit_message(i, id(i));
            total += amount;
            message
        })
        .collect();
    (msgs, total)
}

/// The `i`-th message of a workload, with id `id`: a credit of a small amount to one of a few
/// hundred accounts; returns the message and its amount.
pub(crate) fn credit_message(i: usize, id: String) -> (RawEnvelope, i64) {
    let amount = 1 + (i % 97) as i64;
    let payload = format!(
        r#"{{"account":"acct-{}","amount":{amount}}}"#,
        (i * 7919) % 500
    );
    (RawEnvelope::new(id, payload), amount)
}

fn source_of(msgs: &[RawEnvelope]) -> MemorySource {
    let source = MemorySource::new();
    for m in msgs {
        source.publish(m.clone());
    }
    source.close();
    source
}

/// Runs `spec`'s consumer over `msgs` once; returns the elapsed time.
async fn consume<B: Ops>(
    bed: &B,
    name: &ConsumerName,
    spec: Spec,
    msgs: &[RawEnvelope],
) -> Result<Duration> {
    let source = source_of(msgs);
    let started = Instant::now();
    match (spec.mode, spec.batch) {
        (Mode::Group | Mode::GroupDuplicate, g) => {
            group::oncely_group(bed, name, source, g, spec.concurrency).await?;
        }
        (
            Mode::PkLookup
            | Mode::Latency
            | Mode::Bare(_)
            | Mode::Through(_)
            | Mode::InProcess(_)
            | Mode::AmqpDemo
            | Mode::AmqpExistingBare,
            _,
        ) => {
            bail!("{:?} is not a consumer of the in-process source", spec.mode)
        }
        (Mode::Plain, _) => runners::plain(bed, source, spec.concurrency).await?,
        (Mode::Raw, b) => runners::raw(bed, name.as_str(), source, b, spec.concurrency).await?,
        (Mode::Oncely | Mode::Duplicate | Mode::DuplicateChecked, 1) => {
            let check_first = spec.mode == Mode::DuplicateChecked;
            let stats = runners::oncely(bed, name, source, spec.concurrency, check_first).await?;
            if stats.nacked + stats.dead_lettered > 0 {
                bail!("oncely gave up on deliveries: {stats:?}");
            }
        }
        (Mode::Oncely | Mode::Duplicate | Mode::DuplicateChecked, b) => {
            let (stats, batches) = runners::oncely_batch(bed, name, source, b).await?;
            if stats.nacked + stats.dead_lettered + batches.fallbacks > 0 {
                bail!("oncely batch mode fell back or gave up: {stats:?} {batches:?}");
            }
        }
    }
    Ok(started.elapsed())
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

/// Resets the tables, runs the cell, checks the database.
pub(crate) async fn run_cell<B: Ops>(
    bed: &B,
    backend: &str,
    spec: Spec,
    tag: &str,
) -> Result<Cell> {
    bed.reset().await?;
    let name = ConsumerName::new("bench")?;
    let (msgs, total) = workload(spec.messages, tag);
    let mut first = None;
    let mut latencies = Vec::new();
    let mut path = None;
    let mut cpu = None;
    let database = crate::broker::database_process(backend);
    let mut demo_check = None;
    let elapsed = match spec.mode {
        Mode::Duplicate | Mode::DuplicateChecked | Mode::GroupDuplicate => {
            let t = consume(bed, &name, spec, &msgs).await?;
            first = Some(rate(msgs.len(), t));
            consume(bed, &name, spec, &msgs).await?
        }
        Mode::PkLookup => {
            let fill = Spec {
                mode: Mode::Group,
                ..spec
            };
            let t = consume(bed, &name, fill, &msgs).await?;
            first = Some(rate(msgs.len(), t));
            group::pk_lookups(bed, &name, &msgs).await?
        }
        Mode::Latency => {
            let gap = Duration::from_millis(20);
            let (t, lat) = group::latencies(bed, &name, &msgs, spec.batch, gap).await?;
            latencies = lat;
            t
        }
        Mode::Bare(broker) => {
            let (t, c) = crate::broker::bare(broker, database, &msgs).await?;
            cpu = c;
            t
        }
        Mode::AmqpExistingBare => {
            let (t, c) = crate::broker::bare(Broker::Amqp, database, &msgs).await?;
            cpu = c;
            t
        }
        Mode::AmqpDemo => {
            let (t, check) = crate::broker::demo::run(&msgs, total).await?;
            demo_check = Some(check);
            t
        }
        Mode::Through(broker) => {
            let (t, p, c) = crate::broker::oncely(broker, bed, database, &name, &msgs).await?;
            (path, cpu) = (Some(p), c);
            t
        }
        Mode::InProcess(broker) => {
            let (t, p, c) = crate::broker::in_process(broker, bed, database, &name, &msgs).await?;
            (path, cpu) = (Some(p), c);
            t
        }
        _ => consume(bed, &name, spec, &msgs).await?,
    };
    let counts = bed.counts().await?;
    let check = if let Some(check) = demo_check {
        check
    } else if matches!(spec.mode, Mode::Bare(_) | Mode::AmqpExistingBare) {
        Check::delivered(msgs.len() as u64)
    } else {
        Check::new(msgs.len() as u64, total, counts, spec.mode != Mode::Plain)
    };
    Ok(Cell {
        backend: backend.to_owned(),
        spec,
        seconds: elapsed.as_secs_f64(),
        msgs_per_sec: rate(msgs.len(), elapsed),
        first_msgs_per_sec: first,
        p50_ms: (!latencies.is_empty()).then(|| group::quantile_ms(&latencies, 0.5)),
        p99_ms: (!latencies.is_empty()).then(|| group::quantile_ms(&latencies, 0.99)),
        round_p50_ms: if latencies.is_empty() {
            Vec::new()
        } else {
            vec![group::quantile_ms(&latencies, 0.5)]
        },
        group: 0,
        latencies,
        round_msgs_per_sec: vec![rate(msgs.len(), elapsed)],
        path,
        cpu,
        check,
    })
}
