//! What the ack waits for, and the server settings checked before a store serves a consumer.

use super::redis_error;
use oncely_core::{Error, Result};
use redis::aio::ConnectionManager;
use std::time::Duration;
use tracing::{info, warn};

/// What [`Store::commit`](oncely_core::Store::commit) waits for before it reports the claim
/// and the effect committed (and so before the runtime acks). Chosen with the URL option
/// `?durability=memory|aof|replicas:N` (and `?wait_ms=` for the replica timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The server applied the step in memory; it reaches disk as the server's own
    /// `appendonly`/`appendfsync`/RDB settings say (with `appendfsync everysec`, up to about a
    /// second of acked commits can be lost in a crash of the server's machine; with AOF off,
    /// everything since the last RDB snapshot). The default.
    Memory,
    /// The server must run with `appendonly yes` and `appendfsync always`: it answers a
    /// write only after it is fsynced to the AOF, so an acked commit survives a crash of
    /// the server. The store refuses to start otherwise. (`WAITAOF` is Redis 7.2+; the
    /// store does not use it, so this choice does not depend on it.)
    Aof,
    /// After the step, `WAIT count timeout`: the ack waits until `count` replicas have the
    /// write. A failover to a replica that had not got it can still lose it when fewer
    /// replicas answered; the commit then reports the store unavailable and the delivery is
    /// held (not acked) until `WAIT` succeeds.
    Replicas {
        /// Replicas that must acknowledge.
        count: u32,
        /// How long one `WAIT` may take.
        timeout: Duration,
    },
}

impl Durability {
    /// Parses `memory`, `aof` or `replicas:N` (with the replica timeout `timeout`).
    pub fn parse(text: &str, timeout: Duration) -> Result<Self> {
        match text {
            "memory" | "none" => Ok(Self::Memory),
            "aof" => Ok(Self::Aof),
            other => other
                .strip_prefix("replicas:")
                .and_then(|n| n.parse::<u32>().ok())
                .filter(|&n| n > 0)
                .map(|count| Self::Replicas { count, timeout })
                .ok_or_else(|| {
                    Error::config(format!(
                        "durability={other:?}: use memory, aof or replicas:N (N >= 1)"
                    ))
                }),
        }
    }

    /// After a commit step: waits for what was chosen.
    pub(crate) async fn wait(&self, conn: &mut ConnectionManager) -> Result<()> {
        let Self::Replicas { count, timeout } = *self else {
            return Ok(());
        };
        let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let got: u32 = redis::cmd("WAIT")
            .arg(count)
            .arg(millis)
            .query_async(conn)
            .await
            .map_err(|e| redis_error("WAIT", e))?;
        if got < count {
            return Err(Error::unavailable(format!(
                "Redis WAIT: {got} of {count} replicas acknowledged within {millis} ms; the delivery is held until they do"
            )));
        }
        Ok(())
    }
}

/// The server's settings that decide what a commit survives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// `maxmemory-policy`.
    pub eviction: String,
    /// `appendonly` (`yes`/`no`).
    pub appendonly: String,
    /// `appendfsync` (`always`/`everysec`/`no`).
    pub appendfsync: String,
}

/// Reads the settings with `CONFIG GET` and refuses what cannot keep claims: any eviction
/// policy but `noeviction` (`allkeys-*` evicts claims and effects; `volatile-*` evicts
/// exactly the claims, which carry a TTL), and [`Durability::Aof`] without `appendonly yes`
/// and `appendfsync always`.
pub(crate) async fn check(
    conn: &mut ConnectionManager,
    durability: Durability,
) -> Result<ServerSettings> {
    let get = |name: &'static str| {
        let mut conn = conn.clone();
        async move {
            let pair: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async(&mut conn)
                .await
                .map_err(|e| match e.kind() {
                    redis::ErrorKind::Server(_) => Error::config(format!(
                        "Redis store: cannot read {name} with CONFIG GET ({e}); the store needs it to check that claims are neither evicted nor lost"
                    )),
                    _ => redis_error("CONFIG GET", e),
                })?;
            Ok::<_, Error>(pair.get(1).cloned().unwrap_or_default())
        }
    };
    let settings = ServerSettings {
        eviction: get("maxmemory-policy").await?,
        appendonly: get("appendonly").await?,
        appendfsync: get("appendfsync").await?,
    };
    if settings.eviction != "noeviction" {
        return Err(Error::config(format!(
            "Redis store: maxmemory-policy is {}; claims would be evicted silently and their messages applied again. Set maxmemory-policy noeviction",
            settings.eviction
        )));
    }
    let aof_always = settings.appendonly == "yes" && settings.appendfsync == "always";
    match durability {
        Durability::Aof if !aof_always => {
            return Err(Error::config(format!(
                "Redis store: durability=aof needs appendonly yes and appendfsync always; the server has appendonly {} and appendfsync {}",
                settings.appendonly, settings.appendfsync
            )));
        }
        Durability::Memory if settings.appendonly != "yes" => warn!(
            "Redis store: appendonly is no: a crash of the Redis server loses every commit since its last RDB snapshot (acked messages are not redelivered)"
        ),
        Durability::Memory if settings.appendfsync != "always" => warn!(
            "Redis store: appendfsync {}: a crash of the Redis server's machine can lose about the last second of acked commits",
            settings.appendfsync
        ),
        _ => {}
    }
    info!(?settings, ?durability, "Redis store settings");
    Ok(settings)
}
