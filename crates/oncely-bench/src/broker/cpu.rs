//! CPU time over a cell's timed phase, by who spent it (Linux, from `/proc`; elsewhere the
//! cells carry none): this process (oncely, or the bare consumer), the broker's server, the
//! database's server, and the machine as a whole. It tells whether a cell was bound by the
//! machine's cores (then every component's CPU per message adds up to the rate) or by
//! waiting (round trips, the broker's pacing).

use serde::Serialize;
use std::time::Instant;

/// CPU spent during a cell's timed phase, summed over its rounds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuUse {
    /// Messages of the timed phase.
    pub messages: u64,
    /// Wall time, ms.
    pub wall_ms: f64,
    /// This process (oncely or the bare consumer): µs of CPU per message.
    pub client_us_per_msg: f64,
    /// The broker's server (`beam.smp`, `nats-server`, `redis-server`, `mosquitto`,
    /// `tansu`): µs of CPU per message.
    pub broker_us_per_msg: f64,
    /// The database's server (`postgres`, `mariadbd`; SQLite runs in this process): µs of CPU
    /// per message.
    pub database_us_per_msg: f64,
    /// Share of the machine's cores busy, 0 to 1 (niced work, which yields, counts as idle).
    pub machine_busy: f64,
    #[serde(skip)]
    sums: Counters,
}

/// CPU milliseconds by who spent them: read from `/proc` at an instant, or the difference of
/// two readings, or the sum of such differences.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    client: f64,
    broker: f64,
    database: f64,
    /// The machine's cores busy.
    busy: f64,
    /// The machine's cores in all (busy or not).
    capacity: f64,
}

impl Counters {
    /// Each counter of `self` and `o` combined by `f`.
    fn zip(self, o: Counters, f: impl Fn(f64, f64) -> f64) -> Counters {
        Counters {
            client: f(self.client, o.client),
            broker: f(self.broker, o.broker),
            database: f(self.database, o.database),
            busy: f(self.busy, o.busy),
            capacity: f(self.capacity, o.capacity),
        }
    }
}

impl CpuUse {
    fn finish(mut self) -> Self {
        let per_msg = |ms: f64| ms * 1000.0 / (self.messages.max(1)) as f64;
        self.client_us_per_msg = per_msg(self.sums.client);
        self.broker_us_per_msg = per_msg(self.sums.broker);
        self.database_us_per_msg = per_msg(self.sums.database);
        self.machine_busy = self.sums.busy / self.sums.capacity.max(1e-9);
        self
    }

    /// Two phases' sums together.
    pub(crate) fn merge(self, o: CpuUse) -> CpuUse {
        CpuUse {
            messages: self.messages + o.messages,
            wall_ms: self.wall_ms + o.wall_ms,
            sums: self.sums.zip(o.sums, |a, b| a + b),
            ..Default::default()
        }
        .finish()
    }
}

/// CPU counters at the start of a timed phase.
pub(crate) struct Meter {
    broker: &'static str,
    database: Option<&'static str>,
    started: Instant,
    at_start: Option<Counters>,
}

impl Meter {
    /// Starts counting; `broker` and `database` are the servers' process names.
    pub(crate) fn start(broker: &'static str, database: Option<&'static str>) -> Self {
        Self {
            broker,
            database,
            started: Instant::now(),
            at_start: snapshot(broker, database),
        }
    }

    /// What was spent since [`Meter::start`], over `messages` messages (None off Linux).
    pub(crate) fn stop(self, messages: usize) -> Option<CpuUse> {
        let wall_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        let (a, b) = (self.at_start?, snapshot(self.broker, self.database)?);
        Some(
            CpuUse {
                messages: messages as u64,
                wall_ms,
                sums: b.zip(a, |b, a| b - a),
                ..Default::default()
            }
            .finish(),
        )
    }
}

/// Clock ticks per second of `/proc` (`USER_HZ`, 100 on Linux).
const TICK_MS: f64 = 10.0;

fn snapshot(broker: &str, database: Option<&str>) -> Option<Counters> {
    let machine = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<f64> = machine
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    let total: f64 = ticks.iter().take(8).sum();
    // Idle, waiting for I/O, or running niced work (which yields to everything else).
    let idle = ticks.get(1)? + ticks.get(3)? + ticks.get(4)?;
    let (mut broker_ms, mut database_ms) = (0.0, 0.0);
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else {
            continue;
        };
        let comm = comm.trim();
        if comm == broker {
            broker_ms += process_ms(&pid.to_string()).unwrap_or(0.0);
        } else if Some(comm) == database {
            database_ms += process_ms(&pid.to_string()).unwrap_or(0.0);
        }
    }
    Some(Counters {
        client: process_ms("self")?,
        broker: broker_ms,
        database: database_ms,
        busy: (total - idle) * TICK_MS,
        capacity: total * TICK_MS,
    })
}

/// User + system CPU of `/proc/<pid>`, ms.
fn process_ms(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces), from field 3 on.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let (utime, stime): (f64, f64) = (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
    Some((utime + stime) * TICK_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_this_process_cpu() {
        let meter = Meter::start("no-such-broker", None);
        let before = process_ms("self").expect("/proc is there on Linux");
        let mut x = 0u64;
        let started = Instant::now();
        // Spin until this process has used 150 ms of CPU by its own count (however loaded
        // the machine), or 20 s have passed.
        while process_ms("self").unwrap_or(before) - before < 150.0
            && started.elapsed().as_secs() < 20
        {
            for _ in 0..100_000 {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
        }
        std::hint::black_box(x);
        let used = meter.stop(1000).expect("/proc is there on Linux");
        // 150 ms over 1,000 messages: at least 150 µs each.
        assert!(used.client_us_per_msg >= 150.0, "{used:?}");
        assert_eq!(used.broker_us_per_msg, 0.0);
        assert!(
            used.machine_busy > 0.0 && used.machine_busy <= 1.0,
            "{used:?}"
        );
    }
}
