//! # oncely-bench
//!
//! `oncely bench`: what exactly-once costs, measured as ratios taken side by side in one run
//! on the same database.
//!
//! Every cell applies the same effect (a ledger row plus an account balance, see [`bed`]) to
//! messages fed from an in-process [`oncely_core::MemorySource`] (so the broker is not
//! measured), or through a real broker in the broker cells, and acks after its commit:
//!
//! - `plain`: an at-least-once consumer with no dedup (the baseline a user has today);
//! - `oncely`: [`oncely_core::Consumer`] per message, and batch mode at B = 10, 100, 1000;
//! - `raw`: the same claims and effect written by hand through sqlx in the same transaction
//!   shape (`unnest` multi-row inserts for batches on PostgreSQL);
//! - `duplicate`: every message delivered a second time, to price a redelivered duplicate;
//! - `amqp_bare` and `amqp`, `nats_bare` and `nats`, `redis_bare` and `redis`, `mqtt_bare`
//!   and `mqtt`, `kafka_bare` and `kafka`: the same messages through RabbitMQ, NATS
//!   JetStream, Redis Streams, MQTT (a smaller backlog) and Kafka (the `kafka` feature, on by
//!   default), to a bare consumer of the client library oncely uses (consume + ack) and to
//!   oncely at its defaults with a plain URL, beside oncely in process (`<broker>_in_process`)
//!   in every round ([`broker`]);
//! - `redis_store/<durability>` ([`peer`]): the peer's workload (5,000 messages, 20 %
//!   duplicates, 5 % conflicting copies, credits in Redis) on the Redis store at `memory`,
//!   `aof` and `replicas:1`, reporting deliveries/s, conflicts caught and the final total.
//!
//! The others run on PostgreSQL and on SQLite with `synchronous=FULL` and `NORMAL`, at 1, 4, 16
//! and 32 consumers. After each cell an independent checker counts effect rows against the
//! unique messages published (0 double, 0 lost). Results go to a table, `--json`, a CSV and
//! SVG charts in the results folder.
//!
//! `--horizon` runs the long-horizon mode instead ([`horizon`]): the inbox prefilled to a
//! week of ids (10^6, 10^7 rows) beside the empty inbox, per layout; with
//! `--horizon-advised` on servers set as `oncely stats` advises for a large inbox.
//!
//! ## Soak mode
//!
//! `--soak` runs the soak mode instead ([`soak`]): a fixed offered load (`--soak-rate`, default
//! 2,000 msgs/s) through oncely with group commit on PostgreSQL for `--soak-minutes` (default
//! 20) while `oncely prune` runs every `--soak-prune-secs` (window `--soak-window-secs`), with
//! an idle transaction pinning the xmin horizon from 25 % to 50 % of the run and four
//! repeatable-read readers from 62.5 % to 87.5 %. Sampled every 10 s (throughput, backlog,
//! latency, prune, inbox rows, dead tuples, WAL); the targets are reported, the checker's
//! 0 double / 0 lost decides the exit code; `soak.json` goes to `--out`.

/// Two runs' figures as one: `merged!(a, b => T { sum: [..], max: [..], all: [..] })` adds the
/// `sum` fields, keeps the larger of the `max` fields, ands the `all` fields, and takes the rest
/// from `rest: expr` if given.
macro_rules! merged {
    ($a:expr, $b:expr => $ty:ident {
        sum: [$($s:ident),*], max: [$($m:ident),*], all: [$($l:ident),*] $(, rest: $rest:expr)?
    }) => {{
        let (a, b) = ($a, $b);
        $ty {
            $($s: a.$s + b.$s,)*
            $($m: a.$m.max(b.$m),)*
            $($l: a.$l && b.$l,)*
            $(..$rest)?
        }
    }};
}

mod advised;
pub mod bed;
pub mod broker;
pub mod cells;
mod chart;
mod group;
pub mod horizon;
mod innodb;
pub mod peer;
mod plan;
mod raw;
pub mod report;
mod runners;
pub mod soak;
#[cfg(test)]
mod tests;

pub use plan::{BenchArgs, run};
