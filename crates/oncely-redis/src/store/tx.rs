//! [`RedisTx`]: the claims, guarded reads and buffered writes of one commit step.

use super::script::slot;
use super::{Layout, redis_error};
use oncely_core::{Error, PayloadHash, Result};
use redis::ToRedisArgs;
use redis::aio::ConnectionManager;

/// A read the commit step checks again: the value (or its absence) must be unchanged.
pub(crate) struct Guard {
    pub(crate) key: String,
    /// `None` for `GET`, the field for `HGET`.
    pub(crate) field: Option<Vec<u8>>,
    pub(crate) seen: Option<Vec<u8>>,
}

/// A buffered write: a command, its key and its other arguments.
pub(crate) struct Write {
    pub(crate) command: &'static str,
    pub(crate) key: String,
    pub(crate) args: Vec<Vec<u8>>,
}

/// Commands a handler may buffer. The commit step checks each one's key type (and, for
/// `INCRBY`/`DECRBY`, that the value is an integer) before it writes anything: a Lua script
/// is atomic but has no rollback, so a command failing half-way is ruled out beforehand.
pub const WRITE_COMMANDS: &[&str] = &[
    "SET",
    "DEL",
    "EXPIRE",
    "PEXPIRE",
    "INCRBY",
    "DECRBY",
    "INCRBYFLOAT",
    "APPEND",
    "HSET",
    "HDEL",
    "HINCRBY",
    "HINCRBYFLOAT",
    "SADD",
    "SREM",
    "RPUSH",
    "LPUSH",
    "ZADD",
    "ZREM",
    "ZINCRBY",
];

/// The transaction of a [`RedisStore`](super::RedisStore): the claims, the reads the
/// handler made (re-checked by the commit step) and the writes it buffered. Nothing reaches
/// Redis before [`Store::commit`](oncely_core::Store::commit), which runs one Lua script
/// that applies all of it or nothing.
///
/// Every key must lie in the store's Redis Cluster slot: name keys with [`RedisTx::key`]
/// (which adds the store's hash tag, `{oncely}:` by default). A key in another slot is
/// refused with a permanent error (the message is dead-lettered with it), on a single
/// server too, so code that works there works on Cluster.
///
/// A read sees the committed value with this transaction's own buffered writes to that key
/// applied (`SET`, `DEL`, `INCRBY`, `DECRBY`, `EXPIRE`/`PEXPIRE` for [`RedisTx::get`];
/// `HSET`, `HDEL`, `HINCRBY`, `DEL` for [`RedisTx::hget`]), so two messages of one group may
/// read-modify-write the same key; a read of a key another buffered command wrote is refused.
pub struct RedisTx {
    pub(crate) conn: ConnectionManager,
    pub(crate) layout: Layout,
    pub(crate) claims: Vec<(String, PayloadHash)>,
    pub(crate) guards: Vec<Guard>,
    pub(crate) writes: Vec<Write>,
}

fn int(bytes: Option<&[u8]>, key: &str) -> Result<i64> {
    bytes
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| Error::permanent(format!("Redis key {key}: not an integer")))
}

fn add(value: Option<&[u8]>, by: i64, key: &str) -> Result<Vec<u8>> {
    let now = match value {
        None => 0,
        Some(v) => int(Some(v), key)?,
    };
    let sum = now
        .checked_add(by)
        .ok_or_else(|| Error::permanent(format!("Redis key {key}: integer overflow")))?;
    Ok(sum.to_string().into_bytes())
}

impl RedisTx {
    /// `name` with the store's hash tag in front (`{oncely}:name` by default): a key in the
    /// store's slot.
    pub fn key(&self, name: &str) -> String {
        self.layout.key(name)
    }

    /// Reads a string key now; the commit step fails (and the runtime retries the message)
    /// if its value changed before the commit.
    pub async fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>> {
        self.check_slot(key)?;
        let seen: Option<Vec<u8>> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| redis_error("GET", e))?;
        self.guard(key, None, seen.clone());
        self.own_view(key, None, seen)
    }

    /// Reads a hash field now, guarded as [`RedisTx::get`].
    pub async fn hget(&mut self, key: &str, field: &str) -> Result<Option<Vec<u8>>> {
        self.check_slot(key)?;
        let seen: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(key)
            .arg(field)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| redis_error("HGET", e))?;
        self.guard(key, Some(field.as_bytes().to_vec()), seen.clone());
        self.own_view(key, Some(field.as_bytes()), seen)
    }

    /// Reads an integer string key (0 when absent), guarded as [`RedisTx::get`].
    pub async fn get_i64(&mut self, key: &str) -> Result<i64> {
        let Some(bytes) = self.get(key).await? else {
            return Ok(0);
        };
        std::str::from_utf8(&bytes)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| Error::permanent(format!("Redis key {key} does not hold an integer")))
    }

    /// Buffers `command key args…`, one of [`WRITE_COMMANDS`].
    pub fn write(&mut self, command: &str, key: &str, args: impl ToRedisArgs) -> Result<()> {
        let upper = command.to_ascii_uppercase();
        let Some(&command) = WRITE_COMMANDS.iter().find(|c| **c == upper) else {
            return Err(Error::permanent(format!(
                "Redis store: {command} cannot be buffered; use one of {}",
                WRITE_COMMANDS.join(", ")
            )));
        };
        self.check_slot(key)?;
        self.writes.push(Write {
            command,
            key: key.to_owned(),
            args: args.to_redis_args(),
        });
        Ok(())
    }

    /// Buffers `INCRBY key by`.
    pub fn incr_by(&mut self, key: &str, by: i64) -> Result<()> {
        self.write("INCRBY", key, by)
    }

    /// Buffers `HINCRBY key field by`.
    pub fn hincr_by(&mut self, key: &str, field: &str, by: i64) -> Result<()> {
        self.write("HINCRBY", key, (field, by))
    }

    /// Buffers `SET key value`.
    pub fn set(&mut self, key: &str, value: impl ToRedisArgs) -> Result<()> {
        self.write("SET", key, value)
    }

    /// Buffers `RPUSH key value`.
    pub fn rpush(&mut self, key: &str, value: impl ToRedisArgs) -> Result<()> {
        self.write("RPUSH", key, value)
    }

    /// Whether the transaction has nothing for the commit step.
    pub(crate) fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.guards.is_empty() && self.writes.is_empty()
    }

    /// `committed` with this transaction's buffered writes to `key` (`field`) applied.
    fn own_view(
        &self,
        key: &str,
        field: Option<&[u8]>,
        committed: Option<Vec<u8>>,
    ) -> Result<Option<Vec<u8>>> {
        let mut value = committed;
        for w in self.writes.iter().filter(|w| w.key == key) {
            let arg = |i: usize| w.args.get(i).map(Vec::as_slice);
            value = match (w.command, field) {
                ("EXPIRE" | "PEXPIRE", _) => value,
                ("DEL", _) => None,
                ("SET", None) => arg(0).map(<[u8]>::to_vec),
                ("INCRBY" | "DECRBY", None) => {
                    let by = int(arg(0), key)?;
                    let by = if w.command == "DECRBY" { -by } else { by };
                    Some(add(value.as_deref(), by, key)?)
                }
                ("HSET", Some(f)) => {
                    let set = w.args.chunks(2).filter(|p| p[0] == f).last();
                    match set {
                        Some(pair) => pair.get(1).cloned(),
                        None => value,
                    }
                }
                ("HDEL", Some(f)) if w.args.iter().any(|a| a == f) => None,
                ("HDEL", Some(_)) => value,
                ("HINCRBY", Some(f)) if arg(0) == Some(f) => {
                    Some(add(value.as_deref(), int(arg(1), key)?, key)?)
                }
                ("HINCRBY", Some(_)) => value,
                (command, _) => {
                    return Err(Error::permanent(format!(
                        "Redis store: {key} was written with {command} in this transaction and cannot be read back before the commit"
                    )));
                }
            };
        }
        Ok(value)
    }

    fn guard(&mut self, key: &str, field: Option<Vec<u8>>, seen: Option<Vec<u8>>) {
        self.guards.push(Guard {
            key: key.to_owned(),
            field,
            seen,
        });
    }

    fn check_slot(&self, key: &str) -> Result<()> {
        let (own, theirs) = (self.layout.slot, slot(key.as_bytes()));
        if own == theirs {
            return Ok(());
        }
        Err(Error::permanent(format!(
            "Redis store: key {key:?} is in Cluster slot {theirs}, the store's claims in slot {own}; one commit step runs on one slot, so name effect keys with the store's hash tag (RedisTx::key gives {:?})",
            self.layout.key("…")
        )))
    }
}
