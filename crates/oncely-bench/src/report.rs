//! The results: the terminal table, `--json`, the CSV and the charts, plus the ratios the
//! issue sets targets for.

use crate::broker::Broker;
use crate::cells::{Cell, Mode};
use crate::peer::PeerCell;
use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The machine a run was taken on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model.
    pub cpu: String,
    /// Logical cores.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// 1/5/15-minute load averages at the start (other users' builds show here).
    pub load_start: String,
    /// Load averages at the end.
    pub load_end: String,
    /// `SELECT version()`.
    pub postgres: Option<String>,
    /// MariaDB's `version()`.
    pub mariadb: Option<String>,
    /// `sqlite_version()`.
    pub sqlite: Option<String>,
    /// Unix time of the start.
    pub started_unix: u64,
    /// Wall time of the whole run.
    pub seconds: f64,
    /// Rounds of the matrix (each cell's figure over all of them).
    pub rounds: usize,
    /// Rounds of each broker's cells (the broker keys are medians over them).
    pub broker_rounds: usize,
    /// Rounds of the groups of PostgreSQL's in-process target keys (`--paired-rounds`).
    pub paired_rounds: usize,
    /// `--quick`.
    pub quick: bool,
    #[serde(skip)]
    clock: Option<Instant>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn loadavg() -> String {
    read("/proc/loadavg")
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

impl Machine {
    /// Reads what `/proc` tells about this machine.
    pub fn probe() -> Self {
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
            .unwrap_or_else(|| "unknown".to_owned());
        Self {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            load_start: loadavg(),
            load_end: String::new(),
            postgres: None,
            mariadb: None,
            sqlite: None,
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            seconds: 0.0,
            rounds: 1,
            broker_rounds: 1,
            paired_rounds: 1,
            quick: false,
            clock: Some(Instant::now()),
        }
    }

    /// Records the end of the run.
    pub fn finish(
        &mut self,
        rounds: usize,
        broker_rounds: usize,
        paired_rounds: usize,
        quick: bool,
    ) {
        self.load_end = loadavg();
        self.seconds = self.clock.map_or(0.0, |c| c.elapsed().as_secs_f64());
        self.rounds = rounds;
        self.broker_rounds = broker_rounds;
        self.paired_rounds = paired_rounds;
        self.quick = quick;
    }
}

/// A ratio with a target.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// JSON key.
    pub key: &'static str,
    /// What it compares.
    pub what: &'static str,
    /// Measured value (None: a cell was not run).
    pub value: Option<f64>,
    /// The bound that meets the target: the lowest value, or with `at_most` the highest.
    pub target: f64,
    /// The value must stay at or below `target` (a latency ratio) instead of above it.
    pub at_most: bool,
    /// Whether it holds.
    pub holds: Option<bool>,
}

/// All cells of a run and what follows from them.
#[derive(Debug, Clone)]
pub struct Report {
    /// Where it ran.
    pub machine: Machine,
    /// Every cell (best round).
    pub cells: Vec<Cell>,
    /// The Redis store cells: the peer's workload per durability setting.
    pub peer: Vec<PeerCell>,
}

impl Report {
    /// A report over `cells`.
    pub fn new(machine: Machine, cells: Vec<Cell>) -> Self {
        Self {
            machine,
            cells,
            peer: Vec::new(),
        }
    }

    /// The same report with the Redis store cells.
    pub fn with_peer(mut self, peer: Vec<PeerCell>) -> Self {
        self.peer = peer;
        self
    }

    fn peer_sum(&self, pick: fn(&crate::peer::PeerCheck) -> u64) -> u64 {
        self.peer
            .iter()
            .filter_map(|p| p.check.as_ref())
            .map(pick)
            .sum()
    }

    /// Effects beyond one per message, over every cell.
    pub fn double(&self) -> u64 {
        self.cells.iter().map(|c| c.check.double).sum::<u64>() + self.peer_sum(|c| c.double)
    }

    /// Messages without an effect, over every cell.
    pub fn lost(&self) -> u64 {
        self.cells.iter().map(|c| c.check.lost).sum::<u64>() + self.peer_sum(|c| c.lost)
    }

    /// The cell of `backend`, `mode`, batch `b`, concurrency `c`, if it ran.
    pub fn find(&self, backend: &str, mode: Mode, b: usize, c: usize) -> Option<&Cell> {
        self.cells.iter().find(|x| {
            x.backend == backend
                && x.spec.mode == mode
                && x.spec.batch == b
                && x.spec.concurrency == c
        })
    }

    fn rate(&self, backend: &str, mode: Mode, b: usize, c: usize) -> Option<f64> {
        self.find(backend, mode, b, c).map(|x| x.msgs_per_sec)
    }

    /// The cells of `backend`, `mode`, batch `b`, concurrency `c` (the same spec may run in
    /// more than one group).
    fn all(
        &self,
        (backend, mode, b, c): (&str, Mode, usize, usize),
    ) -> impl Iterator<Item = &Cell> {
        self.cells.iter().filter(move |x| {
            x.backend == backend
                && x.spec.mode == mode
                && x.spec.batch == b
                && x.spec.concurrency == c
        })
    }

    /// `a`'s figure over `b`'s. Where the two ran in one group (side by side, round by
    /// round), the median of the rounds' ratios, `round(a) / round(b)`: a round that hit a
    /// burst of load on this shared machine moves both sides alike, or is outvoted. Else the
    /// ratio of the figures over all rounds.
    fn ratio(&self, a: (&str, Mode, usize, usize), b: (&str, Mode, usize, usize)) -> Option<f64> {
        let paired = self.all(a).find_map(|x| {
            let y = self.all(b).find(|y| y.group == x.group)?;
            paired_median(&x.round_msgs_per_sec, &y.round_msgs_per_sec)
        });
        paired.or_else(|| Some(self.rate(a.0, a.1, a.2, a.3)? / self.rate(b.0, b.1, b.2, b.3)?))
    }

    fn dup_speedup(&self, backend: &str, b: usize) -> Option<f64> {
        self.dup_speedup_of(backend, Mode::Duplicate, b)
    }

    fn dup_speedup_of(&self, backend: &str, mode: Mode, b: usize) -> Option<f64> {
        let cell = self.find(backend, mode, b, 1)?;
        Some(cell.msgs_per_sec / cell.first_msgs_per_sec?)
    }

    /// Each round's oncely through `broker` / the lower of the bare consumer and oncely in
    /// process (at the same defaults, run beside them in the same round): how much of the
    /// ceiling the broker path reaches.
    fn broker_rounds(&self, broker: Broker, backend: &str) -> Option<Vec<f64>> {
        let (g, lanes) = (crate::plan::GROUP, oncely_core::DEFAULT_CONCURRENCY);
        let rounds = |mode, b, c| {
            self.find(backend, mode, b, c)
                .map(|cell| cell.round_msgs_per_sec.clone())
        };
        let oncely = rounds(Mode::Through(broker), g, lanes)?;
        let bare = rounds(Mode::Bare(broker), 1, 1)?;
        let in_process = rounds(Mode::InProcess(broker), g, lanes)?;
        if bare.len() != in_process.len() {
            return None;
        }
        let ceiling: Vec<f64> = bare
            .iter()
            .zip(&in_process)
            .map(|(b, i)| b.min(*i))
            .collect();
        round_ratios(&oncely, &ceiling)
    }

    /// Each round's `amqp_demo` (the oncely binary's demo, the user's path) / the bare lapin
    /// consumer of an equally full queue run beside it (`amqp_existing_bare`).
    fn demo_rounds(&self, backend: &str) -> Option<Vec<f64>> {
        let (g, lanes) = (crate::plan::GROUP, oncely_core::DEFAULT_CONCURRENCY);
        let demo = self.find(backend, Mode::AmqpDemo, g, lanes)?;
        let bare = self.find(backend, Mode::AmqpExistingBare, 1, 1)?;
        round_ratios(&demo.round_msgs_per_sec, &bare.round_msgs_per_sec)
    }

    /// `amqp_pg_demo_vs_bare_consumer`: the median of [`Self::demo_rounds`] on PostgreSQL
    /// (`None` when the demo's cells did not run: the key is then left out).
    pub fn demo_ratio(&self) -> Option<f64> {
        median(self.demo_rounds("postgres")?)
    }

    /// The median of [`Self::broker_rounds`].
    fn broker_ratio(&self, broker: Broker, backend: &str) -> Option<f64> {
        median(self.broker_rounds(broker, backend)?)
    }

    fn latency_ratio(
        &self,
        backend: &str,
        group: usize,
        pick: fn(&Cell) -> Option<f64>,
    ) -> Option<f64> {
        let on = pick(self.find(backend, Mode::Latency, group, 1)?)?;
        let off = pick(self.find(backend, Mode::Latency, 1, 1)?)?;
        Some(on / off.max(1e-9))
    }

    /// The median latency with group commit over the one without, round by round (the two
    /// ran side by side): the median of the rounds' ratios.
    fn p50_latency_ratio(&self, backend: &str, group: usize) -> Option<f64> {
        let on = self.find(backend, Mode::Latency, group, 1)?;
        let off = self.find(backend, Mode::Latency, 1, 1)?;
        paired_median(&on.round_p50_ms, &off.round_p50_ms)
            .or_else(|| self.latency_ratio(backend, group, |c| c.p50_ms))
    }

    /// The ratios with targets (the issues that set them: docs/performance.md).
    pub fn targets(&self) -> Vec<Target> {
        use Mode::*;
        let (pg, maria, g) = ("postgres", "mariadb", crate::plan::GROUP);
        let lanes = oncely_core::DEFAULT_CONCURRENCY;
        let t = |key, what, value: Option<f64>, target: f64| Target {
            key,
            what,
            value,
            target,
            at_most: false,
            holds: value.map(|v| v >= target),
        };
        let at_most = |key, what, value: Option<f64>, target: f64| Target {
            key,
            what,
            value,
            target,
            at_most: true,
            holds: value.map(|v| v <= target),
        };
        let mut targets = vec![t(
            "pg_group_commit_vs_plain_c16",
            "PostgreSQL: oncely's defaults (per-message handler, group commit, 4 lanes) / plain consumer at 16",
            self.ratio((pg, Group, g, lanes), (pg, Plain, 1, 16)),
            2.0,
        )];
        targets.extend(Broker::ALL.map(|broker| {
            let (key, what, target) = broker.bare_target();
            t(key, what, self.broker_ratio(broker, pg), target)
        }));
        targets.extend([
            t(
                "pg_duplicate_vs_pk_lookup",
                "PostgreSQL: redelivered duplicates through oncely (group commit) / bare primary-key SELECTs on one connection",
                self.ratio((pg, GroupDuplicate, g, 1), (pg, PkLookup, g, 1)),
                0.8,
            ),
            t(
                "pg_batch1000_vs_raw",
                "PostgreSQL, B=1000: oncely batch / raw SQL (unnest)",
                self.ratio((pg, Oncely, 1000, 1), (pg, Raw, 1000, 1)),
                0.9,
            ),
            t(
                "sqlite_normal_batch100_vs_raw",
                "SQLite synchronous=NORMAL, B=100: oncely batch / raw SQL",
                self.ratio(
                    ("sqlite_normal", Oncely, 100, 1),
                    ("sqlite_normal", Raw, 100, 1),
                ),
                0.9,
            ),
            at_most(
                "group_commit_p50_latency_ratio_c1",
                "PostgreSQL, one consumer, a message every 20 ms: p50 publish-to-ack latency with group commit / without",
                self.p50_latency_ratio(pg, g),
                1.1,
            ),
            t(
                "mariadb_group_commit_vs_plain_c16",
                "MariaDB, 16 consumers: oncely per-message handler with group commit / plain consumer",
                self.ratio((maria, Group, g, 16), (maria, Plain, 1, 16)),
                2.0,
            ),
            t(
                "mariadb_duplicate_vs_pk_lookup",
                "MariaDB: redelivered duplicates through oncely (group commit) / bare primary-key SELECTs",
                self.ratio((maria, GroupDuplicate, g, 1), (maria, PkLookup, g, 1)),
                0.8,
            ),
            t(
                "pg_per_message_vs_plain_c16",
                "PostgreSQL, 16 consumers: oncely per-message / plain consumer",
                self.ratio((pg, Oncely, 1, 16), (pg, Plain, 1, 16)),
                0.85,
            ),
            t(
                "pg_batch100_vs_per_message_c1",
                "PostgreSQL: oncely batch B=100 / oncely per-message, one consumer",
                self.ratio((pg, Oncely, 100, 1), (pg, Oncely, 1, 1)),
                20.0,
            ),
            t(
                "pg_batch100_vs_raw",
                "PostgreSQL, B=100: oncely batch / raw SQL (unnest)",
                self.ratio((pg, Oncely, 100, 1), (pg, Raw, 100, 1)),
                0.8,
            ),
            t(
                "duplicate_speedup",
                "PostgreSQL per-message: redelivered duplicate msgs/s / first delivery msgs/s",
                self.dup_speedup(pg, 1),
                10.0,
            ),
            t(
                "sqlite_full_vs_normal_b1000",
                "SQLite batch B=1000: synchronous=FULL / NORMAL",
                self.ratio(
                    ("sqlite_full", Oncely, 1000, 1),
                    ("sqlite_normal", Oncely, 1000, 1),
                ),
                0.75,
            ),
        ]);
        targets
    }

    /// Ratios without a target, for the docs.
    pub fn extras(&self) -> Map<String, Value> {
        use Mode::*;
        let mut m = Map::new();
        let g = crate::plan::GROUP;
        for backend in ["postgres", "mariadb", "sqlite_full", "sqlite_normal"] {
            m.insert(
                format!("{backend}_group_commit_p99_latency_ratio_c1"),
                json!(self.latency_ratio(backend, g, |c| c.p99_ms)),
            );
            for broker in Broker::ALL {
                m.insert(
                    format!("{}_{backend}_vs_bare_consumer", broker.name()),
                    json!(self.broker_ratio(broker, backend)),
                );
                m.insert(
                    format!("{}_{backend}_vs_bare_consumer_rounds", broker.name()),
                    json!(self.broker_rounds(broker, backend)),
                );
            }
            for c in [1, 2, 4] {
                let v = self.ratio((backend, Group, g, c), (backend, Plain, 1, 16));
                m.insert(
                    format!("{backend}_group_commit_c{c}_vs_plain_c16"),
                    json!(v),
                );
            }
            for c in [1, 16] {
                let v = self.ratio((backend, Group, g, c), (backend, Plain, 1, c));
                m.insert(format!("{backend}_group_commit_vs_plain_c{c}"), json!(v));
                let v = self.ratio((backend, Group, g, c), (backend, Oncely, 1, c));
                m.insert(
                    format!("{backend}_group_commit_vs_per_message_c{c}"),
                    json!(v),
                );
            }
            let v = self.ratio((backend, GroupDuplicate, g, 1), (backend, PkLookup, g, 1));
            m.insert(format!("{backend}_duplicate_vs_pk_lookup"), json!(v));
            for c in [1, 4, 16, 32] {
                let v = self.ratio((backend, Oncely, 1, c), (backend, Plain, 1, c));
                m.insert(format!("{backend}_per_message_vs_plain_c{c}"), json!(v));
                let v = self.ratio((backend, Oncely, 1, c), (backend, Raw, 1, c));
                m.insert(format!("{backend}_per_message_vs_raw_c{c}"), json!(v));
            }
            for b in [10, 100, 1000] {
                let v = self.ratio((backend, Oncely, b, 1), (backend, Raw, b, 1));
                m.insert(format!("{backend}_batch{b}_vs_raw"), json!(v));
                let v = self.ratio((backend, Oncely, b, 1), (backend, Oncely, 1, 1));
                m.insert(format!("{backend}_batch{b}_vs_per_message_c1"), json!(v));
            }
            m.insert(
                format!("{backend}_duplicate_speedup"),
                json!(self.dup_speedup(backend, 1)),
            );
            m.insert(
                format!("{backend}_duplicate_speedup_inbox_check"),
                json!(self.dup_speedup_of(backend, Mode::DuplicateChecked, 1)),
            );
            m.insert(
                format!("{backend}_duplicate_speedup_batch100"),
                json!(self.dup_speedup(backend, 100)),
            );
        }
        m.insert(
            "amqp_postgres_demo_vs_bare_consumer_rounds".into(),
            json!(self.demo_rounds("postgres")),
        );
        m.retain(|_, v| !v.is_null());
        m
    }

    /// Every checker passed.
    pub fn all_ok(&self) -> bool {
        self.cells.iter().all(|c| c.check.ok) && self.peer.iter().all(PeerCell::ok)
    }

    /// The `--json` object: the target ratios as top-level keys, `msgs_per_sec` of every cell,
    /// the targets, extra ratios, cells with their checks, and the machine.
    pub fn json(&self) -> Value {
        let mut top = Map::new();
        let targets = self.targets();
        for t in &targets {
            top.insert(t.key.to_owned(), json!(t.value));
        }
        let rates: Map<String, Value> = self
            .cells
            .iter()
            .map(|c| (c.key(), json!(c.msgs_per_sec)))
            .collect();
        // The user's path (the oncely binary's demo): only when its cells ran, never `null`.
        if let Some(v) = self.demo_ratio() {
            top.insert(DEMO_KEY.into(), json!(v));
        }
        top.insert("msgs_per_sec".into(), Value::Object(rates));
        top.insert("targets".into(), json!(targets));
        top.insert("other_ratios".into(), Value::Object(self.extras()));
        let peer_rates: Map<String, Value> = self
            .peer
            .iter()
            .map(|p| (p.durability.to_owned(), json!(p.deliveries_per_sec)))
            .collect();
        top.insert(
            "redis_store_deliveries_per_sec".into(),
            Value::Object(peer_rates),
        );
        top.insert("redis_store".into(), json!(self.peer));
        top.insert("double".into(), json!(self.double()));
        top.insert("lost".into(), json!(self.lost()));
        top.insert("ok".into(), json!(self.all_ok()));
        top.insert("cells".into(), json!(self.cells));
        top.insert("machine".into(), json!(self.machine));
        Value::Object(top)
    }

    /// The cells as CSV.
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "backend,mode,batch,concurrency,messages,seconds,msgs_per_sec,first_msgs_per_sec,effect_rows,double,lost,ok\n",
        );
        for c in &self.cells {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{:.3},{:.1},{},{},{},{},{}",
                c.backend,
                c.spec.mode.name(),
                c.spec.batch,
                c.spec.concurrency,
                c.spec.messages,
                c.seconds,
                c.msgs_per_sec,
                c.first_msgs_per_sec
                    .map(|f| format!("{f:.1}"))
                    .unwrap_or_default(),
                c.check.effect_rows,
                c.check.double,
                c.check.lost,
                c.check.ok
            );
        }
        out
    }

    /// The terminal table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        if !self.cells.is_empty() {
            self.cells_table(&mut out);
        }
        self.peer_table(&mut out);
        let _ = writeln!(
            out,
            "\nchecker: {} double, {} lost over {} cells",
            self.double(),
            self.lost(),
            self.cells.len() + self.peer.len()
        );
        out
    }

    /// The cells and the target ratios.
    fn cells_table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "{:<14} {:<16} {:>5} {:>4} {:>8} {:>11} {:>13} {:>7} {:>5} {:>3}",
            "backend", "mode", "B", "c", "msgs", "msgs/s", "ratio", "double", "lost", "ok"
        );
        for c in &self.cells {
            let s = c.spec;
            // per-message: vs plain at the same concurrency; batch: vs raw; duplicate: vs first.
            let ratio = match (s.mode, s.batch) {
                (Mode::Oncely, 1) => self
                    .rate(&c.backend, Mode::Plain, 1, s.concurrency)
                    .map(|p| format!("{:.2}xP", c.msgs_per_sec / p)),
                (Mode::Oncely, b) => self
                    .rate(&c.backend, Mode::Raw, b, s.concurrency)
                    .map(|r| format!("{:.2}xR", c.msgs_per_sec / r)),
                (Mode::Duplicate | Mode::DuplicateChecked | Mode::GroupDuplicate, _) => c
                    .first_msgs_per_sec
                    .map(|f| format!("{:.1}x1st", c.msgs_per_sec / f)),
                (Mode::Group, g) => self
                    .rate(&c.backend, Mode::Plain, 1, s.concurrency)
                    .map(|p| format!("{:.2}xP", c.msgs_per_sec / p))
                    .filter(|_| g > 1),
                (Mode::Latency, _) => c
                    .p50_ms
                    .zip(c.p99_ms)
                    .map(|(a, b)| format!("{a:.1}/{b:.1}ms")),
                _ => None,
            };
            let _ = writeln!(
                out,
                "{:<14} {:<16} {:>5} {:>4} {:>8} {:>11.0} {:>13} {:>7} {:>5} {:>3}",
                c.backend,
                s.mode.name(),
                s.batch,
                s.concurrency,
                s.messages,
                c.msgs_per_sec,
                ratio.unwrap_or_default(),
                c.check.double,
                c.check.lost,
                if c.check.ok { "yes" } else { "NO" }
            );
        }
        let _ = writeln!(
            out,
            "\nxP: vs the plain consumer at the same concurrency; xR: vs raw SQL at the same B; x1st: vs the first delivery\n"
        );
        for t in self.targets() {
            let value = t.value.map_or("not run".to_owned(), |v| format!("{v:.2}"));
            let verdict = match t.holds {
                Some(true) => "holds",
                Some(false) => "MISSED",
                None => "-",
            };
            let bound = if t.at_most { "<=" } else { ">=" };
            let _ = writeln!(
                out,
                "{:<34} {:>8}  (target {bound} {:<5}) {verdict}",
                t.key, value, t.target
            );
        }
        if let Some(v) = self.demo_ratio() {
            let _ = writeln!(
                out,
                "{DEMO_KEY:<34} {v:>8.2}  (the user's path: `oncely demo --consume-only` on a full quorum queue / bare lapin, no target)"
            );
        }
        self.path_table(out);
    }

    /// The Redis store cells: the peer's workload per durability setting.
    fn peer_table(&self, out: &mut String) {
        if self.peer.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\nRedis store, the peer's workload (20 % duplicates, 5 % conflicting copies, credits in Redis; the peer's figures: docs/redis-store.md):"
        );
        let _ = writeln!(
            out,
            "{:<12} {:>8} {:>11} {:>10} {:>7} {:>5} {:>10} {:>3}",
            "durability", "msgs", "deliveries", "dlv/s", "double", "lost", "conflicts", "ok"
        );
        for p in &self.peer {
            let Some(c) = p.check else {
                let why = p.skipped.as_deref().unwrap_or("not run");
                let _ = writeln!(out, "{:<12} SKIPPED: {why}", p.durability);
                continue;
            };
            let _ = writeln!(
                out,
                "{:<12} {:>8} {:>11} {:>10.0} {:>7} {:>5} {:>10} {:>3}  total off by {}",
                p.durability,
                p.messages * p.rounds,
                p.deliveries * p.rounds,
                p.deliveries_per_sec.unwrap_or_default(),
                c.double,
                c.lost,
                format!("{}/{}", c.conflicts_caught, c.conflicts_injected),
                if c.ok { "yes" } else { "NO" },
                c.total_off
            );
        }
    }

    /// Where oncely's time went in the broker cells (sums over the rounds).
    fn path_table(&self, out: &mut String) {
        let cells: Vec<_> = self
            .cells
            .iter()
            .filter_map(|c| Some((c, c.path?)))
            .collect();
        if cells.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\nwhere the time goes (oncely at its defaults; groups: commits and messages per commit; tx: mean group transaction; source: share of wall time inside Source::next; ack: mean / max)"
        );
        let _ = writeln!(
            out,
            "{:<14} {:<16} {:>7} {:>6} {:>7} {:>8} {:>7} {:>9} {:>17}",
            "backend", "mode", "groups", "size", "singles", "tx ms", "source", "1st ms", "ack ms"
        );
        for (c, p) in cells {
            let _ = writeln!(
                out,
                "{:<14} {:<16} {:>7} {:>6.1} {:>7} {:>8.2} {:>6.0}% {:>9.0} {:>8.2} / {:<7.1}",
                c.backend,
                c.spec.mode.name(),
                p.groups,
                p.mean_group,
                p.singles,
                p.mean_group_ms,
                p.source_share * 100.0,
                p.first_delivery_ms,
                p.mean_ack_ms,
                p.max_ack_ms
            );
        }
    }

    /// Writes bench.json, bench.csv and the two SVG charts into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let json = serde_json::to_string_pretty(&self.json())?;
        std::fs::write(dir.join("bench.json"), json)?;
        std::fs::write(dir.join("bench.csv"), self.csv())?;
        crate::chart::concurrency(self, &dir.join("throughput_vs_concurrency.svg"))?;
        crate::chart::batch(self, &dir.join("throughput_vs_batch.svg"))?;
        Ok(())
    }
}

/// The key of the user's path through RabbitMQ into PostgreSQL (`--json`, top level).
pub const DEMO_KEY: &str = "amqp_pg_demo_vs_bare_consumer";

/// Each round's `a[i] / b[i]`, when both ran the same rounds (`None` if not, or none).
fn round_ratios(a: &[f64], b: &[f64]) -> Option<Vec<f64>> {
    if a.is_empty() || a.len() != b.len() {
        return None;
    }
    Some(a.iter().zip(b).map(|(x, y)| x / y.max(1e-9)).collect())
}

/// The median of `ratios` (`None` if empty): every paired key, in process or through a
/// broker, is the median of its rounds' ratios.
pub(crate) fn median(mut ratios: Vec<f64>) -> Option<f64> {
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    let mid = ratios.len() / 2;
    Some(if ratios.len() % 2 == 1 {
        ratios[mid]
    } else {
        (ratios[mid - 1] + ratios[mid]) / 2.0
    })
}

/// The median of `a[i] / b[i]` over rounds, when both have the same rounds (`None` if not).
fn paired_median(a: &[f64], b: &[f64]) -> Option<f64> {
    median(round_ratios(a, b)?)
}

#[cfg(test)]
mod paired_tests {
    use super::paired_median;

    #[test]
    fn the_median_of_round_ratios_outvotes_one_bad_round() {
        // Round 2 of `b` hit a burst of load: the figures over all rounds say 1.5, the rounds 1.0.
        let a = [100.0, 100.0, 100.0];
        let b = [100.0, 40.0, 100.0];
        assert_eq!(paired_median(&a, &b), Some(1.0));
        assert_eq!(paired_median(&[3.0, 1.0], &[1.0, 1.0]), Some(2.0));
        assert_eq!(paired_median(&[1.0], &[]), None);
        assert_eq!(paired_median(&[], &[]), None);
    }
}
