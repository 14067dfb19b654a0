//! [`RedisStore`]: an oncely store whose claims and effects live in Redis and commit in one
//! Lua script (see docs/redis-store.md).

mod durability;
mod letters;
mod script;
mod tx;

pub use durability::{Durability, ServerSettings};
pub use script::slot;
pub use tx::{RedisTx, WRITE_COMMANDS};

use oncely_core::wire::UrlParams;
use oncely_core::{Claim, ConsumerName, Error, MessageId, PayloadHash, Result, Store};
use redis::aio::ConnectionManager;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The hash tag of a store's keys when the URL has no `?tag=`.
pub const DEFAULT_TAG: &str = "oncely";

/// Ids read per `MGET` when claims are looked up in bulk.
const MGET_CHUNK: usize = 500;

pub(crate) fn redis_error(what: &str, e: redis::RedisError) -> Error {
    let message = format!("Redis {what}");
    if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() || e.is_timeout() {
        Error::unavailable(message).with_source(e)
    } else {
        Error::transient(message).with_source(e)
    }
}

/// Where a store's keys are: all of them start with `{tag}:`, so they share one Redis
/// Cluster slot.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    prefix: String,
    pub(crate) slot: u16,
}

impl Layout {
    fn new(tag: &str) -> Self {
        let prefix = format!("{{{tag}}}:");
        Self {
            slot: slot(prefix.as_bytes()),
            prefix,
        }
    }

    pub(crate) fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// `{tag}:inbox:<consumer length>:<consumer>:<id>` (the length keeps `a:b`/`c` apart
    /// from `a`/`b:c`).
    fn inbox(&self, consumer: &str, id: &str) -> String {
        self.key(&format!("inbox:{}:{consumer}:{id}", consumer.len()))
    }
}

/// Settings of a [`RedisStore`].
#[derive(Debug, Clone)]
pub struct RedisStoreOptions {
    /// The hash tag every key carries (`{tag}:…`), default [`DEFAULT_TAG`].
    pub tag: String,
    /// How long a claim is kept (its TTL), default [`oncely_core::DEFAULT_RETENTION`]: at
    /// least the broker's redelivery window, as for the SQL stores' inbox.
    pub retention: Duration,
    /// What a commit waits for before the ack.
    pub durability: Durability,
}

impl Default for RedisStoreOptions {
    fn default() -> Self {
        Self {
            tag: DEFAULT_TAG.to_owned(),
            retention: oncely_core::DEFAULT_RETENTION,
            durability: Durability::Memory,
        }
    }
}

impl RedisStoreOptions {
    /// Options from a URL's `?tag=`, `?retention_secs=`, `?durability=` and `?wait_ms=`
    /// (replica timeout, default 1000); returns the URL without them.
    pub fn from_url(url: &str) -> Result<(String, Self)> {
        let p = UrlParams::new(url);
        let d = Self::default();
        let timeout = p.millis("wait_ms")?.unwrap_or(Duration::from_secs(1));
        let tag = p.text_or("tag", &d.tag);
        if tag.is_empty() || tag.contains(['{', '}']) {
            return Err(Error::config(format!(
                "tag={tag:?}: a hash tag is non-empty text without braces"
            )));
        }
        let o = Self {
            tag,
            retention: p.secs("retention_secs")?.unwrap_or(d.retention),
            durability: Durability::parse(&p.text_or("durability", "memory"), timeout)?,
        };
        Ok((p.rest(), o))
    }
}

/// An oncely [`Store`] on Redis: a claim is a string key `{tag}:inbox:…` holding the payload
/// hash with a TTL of the retention; the handler's writes are buffered in the [`RedisTx`];
/// the commit runs one Lua script that checks every claim is still free (taken since the
/// claim read: the commit fails and the runtime retries, now seeing `Duplicate` or
/// `Conflict`), checks every guarded read is unchanged, and then writes the claims and the
/// effects — or nothing. Dead letters are hashes `{tag}:dlq:row:<id>`, one per
/// `(consumer, raw id, payload hash, reason)`, with a count.
///
/// At start ([`connect`](Self::connect)) and in [`Store::check_ready`] it reads the server's
/// `maxmemory-policy`, `appendonly` and `appendfsync` and refuses an evicting server; the
/// ack waits for what [`Durability`] says.
///
/// ```no_run
/// # async fn f() -> oncely_core::Result<()> {
/// let store = oncely_redis::RedisStore::connect("redis://127.0.0.1:6379/14?durability=memory").await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    layout: Layout,
    options: Arc<RedisStoreOptions>,
    settings: ServerSettings,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("options", &self.options)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects with the options in the URL (see [`RedisStoreOptions::from_url`]) and checks
    /// the server's settings.
    pub async fn connect(url: &str) -> Result<Self> {
        let (url, options) = RedisStoreOptions::from_url(url)?;
        Self::connect_with(&url, options).await
    }

    /// Connects to `url` (without store options) with `options`.
    pub async fn connect_with(url: &str, options: RedisStoreOptions) -> Result<Self> {
        let client =
            redis::Client::open(url).map_err(|e| Error::config(format!("Redis URL: {e}")))?;
        let mut conn = ConnectionManager::new(client)
            .await
            .map_err(|e| redis_error("connect", e))?;
        let settings = durability::check(&mut conn, options.durability).await?;
        Ok(Self {
            conn,
            layout: Layout::new(&options.tag),
            options: Arc::new(options),
            settings,
        })
    }

    /// The settings the server reported at start.
    pub fn settings(&self) -> &ServerSettings {
        &self.settings
    }

    /// The store's options.
    pub fn options(&self) -> &RedisStoreOptions {
        &self.options
    }

    /// `name` with the store's hash tag in front, as [`RedisTx::key`].
    pub fn key(&self, name: &str) -> String {
        self.layout.key(name)
    }

    /// A connection for reads outside a transaction (checkers, admin commands).
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// Every key matching `pattern` (a `SCAN … MATCH`, 1,000 per round trip), e.g.
    /// `store.key("balance:*")` for the balances a handler keeps under the store's tag.
    pub async fn scan_keys(&self, pattern: &str) -> Result<Vec<String>> {
        let mut conn = self.conn.clone();
        let (mut cursor, mut out) = (0u64, Vec::new());
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(|e| redis_error("SCAN", e))?;
            out.extend(batch);
            if next == 0 {
                return Ok(out);
            }
            cursor = next;
        }
    }

    async fn held(&self, keys: &[String]) -> Result<Vec<Option<PayloadHash>>> {
        let mut conn = self.conn.clone();
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MGET_CHUNK) {
            let values: Vec<Option<String>> = redis::cmd("MGET")
                .arg(chunk)
                .query_async(&mut conn)
                .await
                .map_err(|e| redis_error("MGET", e))?;
            out.extend(
                values
                    .into_iter()
                    .map(|v| v.and_then(|h| PayloadHash::from_hex(&h))),
            );
        }
        Ok(out)
    }

    async fn run_commit(&self, tx: RedisTx) -> Result<()> {
        let mut invocation = script::COMMIT.prepare_invoke();
        invocation
            .arg(self.options.retention.as_secs().max(1))
            .arg(tx.claims.len())
            .arg(tx.guards.len())
            .arg(tx.writes.len());
        for (key, hash) in &tx.claims {
            invocation.key(key).arg(hash.to_hex());
        }
        for g in &tx.guards {
            let kind = if g.field.is_some() { "h" } else { "g" };
            invocation
                .key(&g.key)
                .arg(kind)
                .arg(g.field.as_deref().unwrap_or_default())
                .arg(if g.seen.is_some() { "1" } else { "0" })
                .arg(g.seen.as_deref().unwrap_or_default());
        }
        for w in &tx.writes {
            invocation.key(&w.key).arg(w.command).arg(w.args.len());
            for a in &w.args {
                invocation.arg(a.as_slice());
            }
        }
        let mut conn = tx.conn.clone();
        let answer: Vec<String> = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error("commit script", e))?;
        match answer.first().map(String::as_str) {
            Some("ok") => Ok(()),
            Some("held") => Err(Error::transient(format!(
                "Redis store: claim {} was committed by another delivery since it was read; retrying sees it",
                answer.get(1).map_or("", String::as_str)
            ))),
            Some("stale") => Err(Error::transient(format!(
                "Redis store: {} changed since the handler read it; retrying",
                answer.get(1).map_or("", String::as_str)
            ))),
            Some("type") => Err(Error::permanent(format!(
                "Redis store: nothing written: key {} {}",
                answer.get(1).map_or("", String::as_str),
                answer.get(2).map_or("", String::as_str)
            ))),
            other => Err(Error::transient(format!(
                "Redis store: unexpected commit answer {other:?}"
            ))),
        }
    }
}

impl Store for RedisStore {
    type Tx = RedisTx;

    async fn begin(&self) -> Result<RedisTx> {
        Ok(RedisTx {
            conn: self.conn.clone(),
            layout: self.layout.clone(),
            claims: Vec::new(),
            guards: Vec::new(),
            writes: Vec::new(),
        })
    }

    async fn claim(
        &self,
        tx: &mut RedisTx,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<Claim> {
        let one = [(id.clone(), hash)];
        let claims = self.claim_batch(tx, consumer, &one).await?;
        Ok(claims[0])
    }

    /// Reads every claim with `MGET` (optimistic: the commit step checks again, atomically).
    async fn claim_batch(
        &self,
        tx: &mut RedisTx,
        consumer: &ConsumerName,
        items: &[(MessageId, PayloadHash)],
    ) -> Result<Vec<Claim>> {
        let keys: Vec<String> = items
            .iter()
            .map(|(id, _)| self.layout.inbox(consumer.as_str(), id.as_str()))
            .collect();
        let held = self.held(&keys).await?;
        let mut own: HashMap<String, PayloadHash> = tx.claims.iter().cloned().collect();
        let mut claims = Vec::with_capacity(items.len());
        for ((key, (_, hash)), stored) in keys.into_iter().zip(items).zip(held) {
            let claim = Claim::given(stored.or_else(|| own.get(&key).copied()), *hash);
            if claim == Claim::Fresh {
                own.insert(key.clone(), *hash);
                tx.claims.push((key, *hash));
            }
            claims.push(claim);
        }
        Ok(claims)
    }

    async fn committed_claim(
        &self,
        consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<bool> {
        let one = [(id.clone(), hash)];
        Ok(self.committed_claims(consumer, &one).await?[0])
    }

    async fn committed_claims(
        &self,
        consumer: &ConsumerName,
        items: &[(MessageId, PayloadHash)],
    ) -> Result<Vec<bool>> {
        let keys: Vec<String> = items
            .iter()
            .map(|(id, _)| self.layout.inbox(consumer.as_str(), id.as_str()))
            .collect();
        let held = self.held(&keys).await?;
        Ok(held
            .into_iter()
            .zip(items)
            .map(|(stored, (_, hash))| stored == Some(*hash))
            .collect())
    }

    async fn commit(&self, tx: RedisTx) -> Result<()> {
        let mut conn = tx.conn.clone();
        if !tx.is_empty() {
            self.run_commit(tx).await?;
        }
        self.options.durability.wait(&mut conn).await
    }

    async fn rollback(&self, tx: RedisTx) -> Result<()> {
        drop(tx);
        Ok(())
    }

    async fn dead_letter(&self, letter: &oncely_core::DeadLetter) -> Result<()> {
        letters::write(self, letter).await?;
        let mut conn = self.conn.clone();
        self.options.durability.wait(&mut conn).await
    }

    async fn check_ready(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        durability::check(&mut conn, self.options.durability)
            .await
            .map(drop)
    }
}

impl oncely_core::Inspect for RedisStore {
    async fn claimed_hash(&self, consumer: &ConsumerName, id: &str) -> Result<Option<PayloadHash>> {
        let key = self.layout.inbox(consumer.as_str(), id);
        Ok(self.held(&[key]).await?.pop().flatten())
    }

    async fn dead_letters(
        &self,
        consumer: Option<&ConsumerName>,
    ) -> Result<Vec<oncely_core::StoredDeadLetter>> {
        letters::read(self, consumer).await
    }
}
