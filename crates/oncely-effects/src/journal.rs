//! The effect journal: for a call that cannot join the transaction (an email provider, a
//! payment API), `pending` is committed before the call, the call carries the idempotency key,
//! and `done` with the provider's reference is committed after.

use crate::EffectTables;
use oncely_core::{Error, Result};
use oncely_sql::clock::{from_ms, now_ms};
use oncely_sql::{AnyPool, Column, SqlTx, Tables, Value};
use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime};

/// State of a journal row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectState {
    /// Recorded before the call; the call may or may not have happened.
    Pending,
    /// The provider confirmed; its reference is stored.
    Done,
    /// Given up (by the reconciler's check or by the caller).
    Failed,
}

impl EffectState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "done" => Self::Done,
            "failed" => Self::Failed,
            _ => Self::Pending,
        }
    }
}

/// One journal row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// The idempotency key (see [`crate::effect_key`]).
    pub key: String,
    /// What kind of effect (e.g. `email`).
    pub kind: String,
    /// Current state.
    pub state: EffectState,
    /// The request, as recorded, so a reconciler can repeat the call.
    pub request: Vec<u8>,
    /// The provider's reference, once done.
    pub provider_ref: Option<String>,
    /// Why it failed, or the last error.
    pub detail: Option<String>,
    /// Calls started (counted before each call).
    pub calls: u32,
    /// When it was first recorded.
    pub recorded_at: SystemTime,
    /// Last change (recording, a call starting, a resolution).
    pub updated_at: SystemTime,
}

/// What [`Journal::perform`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Performed {
    /// The call was made now (perhaps again: the provider deduplicates by key).
    Called {
        /// The provider's reference.
        provider_ref: String,
    },
    /// An earlier run had completed it; nothing was called.
    AlreadyDone {
        /// The provider's reference recorded then.
        provider_ref: String,
    },
}

impl Performed {
    /// The provider's reference.
    pub fn provider_ref(&self) -> &str {
        match self {
            Self::Called { provider_ref } | Self::AlreadyDone { provider_ref } => provider_ref,
        }
    }
}

/// The journal table (`{prefix}effect_journal`) over a pool. It commits each step on its own
/// connection, never in the handler's transaction: `pending` must be durable before the call.
///
/// On SQLite, which has a single writer per file, keep the journal in its own database file
/// when it is used from inside a handler (the handler's transaction holds the write lock).
#[derive(Clone)]
pub struct Journal {
    pool: AnyPool,
    tables: Tables,
}

impl fmt::Debug for Journal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Journal")
            .field("table", &self.tables.effect_journal())
            .finish()
    }
}

const COLS: &str =
    "effect_key, kind, state, request, provider_ref, detail, calls, recorded_at, updated_at";
const COL_TYPES: &[Column] = &[
    Column::Text,
    Column::Text,
    Column::Text,
    Column::Bytes,
    Column::OptText,
    Column::OptText,
    Column::I64,
    Column::I64,
    Column::I64,
];

fn entry_of(row: &[Value]) -> JournalEntry {
    JournalEntry {
        key: row[0].text(),
        kind: row[1].text(),
        state: EffectState::parse(&row[2].text()),
        request: row[3].bytes(),
        provider_ref: row[4].opt_text(),
        detail: row[5].opt_text(),
        calls: row[6].i64().max(0) as u32,
        recorded_at: from_ms(row[7].i64()),
        updated_at: from_ms(row[8].i64()),
    }
}

impl Journal {
    /// The journal of `tables` in `pool` (run [`crate::migrate`] first): a store's pool
    /// (`AnyStore::pool`, `SqlStore::any_pool`) or a sqlx pool.
    pub fn new(pool: impl Into<AnyPool>, tables: Tables) -> Self {
        Self {
            pool: pool.into(),
            tables,
        }
    }

    /// The pool.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    fn table(&self) -> String {
        self.tables.effect_journal()
    }

    async fn exec(&self, doing: &str, sql: String, args: Vec<Value>) -> Result<u64> {
        let done = self.pool.clone().execute(&sql, &args).await;
        Ok(done.map_err(|e| e.context(doing))?.rows)
    }

    async fn query(&self, doing: &str, sql: String, args: Vec<Value>) -> Result<Vec<JournalEntry>> {
        let rows = self.pool.clone().fetch(&sql, &args, COL_TYPES).await;
        let rows = rows.map_err(|e| e.context(doing))?;
        Ok(rows.iter().map(|r| entry_of(r)).collect())
    }

    /// Commits a `pending` row for `key` unless one exists, and returns the row as stored
    /// (an existing row keeps its state: a redelivery sees `done` and calls nothing).
    pub async fn record(&self, key: &str, kind: &str, request: &[u8]) -> Result<JournalEntry> {
        let d = self.pool.dialect();
        let insert = format!(
            "INSERT INTO {} (effect_key, kind, state, request, calls, recorded_at, updated_at) VALUES ({}) {}",
            self.table(),
            d.params(1, 7),
            d.on_conflict_do_nothing("effect_key")
        );
        let now = now_ms();
        let args = vec![
            key.into(),
            kind.into(),
            EffectState::Pending.as_str().into(),
            Value::Bytes(request.to_vec()),
            Value::I64(0),
            now.into(),
            now.into(),
        ];
        self.exec("recording a pending effect", insert, args)
            .await?;
        self.get(key)
            .await?
            .ok_or_else(|| Error::transient(format!("journal row {key} vanished after recording")))
    }

    /// The row of `key`, if any.
    pub async fn get(&self, key: &str) -> Result<Option<JournalEntry>> {
        let sql = format!(
            "SELECT {COLS} FROM {} WHERE effect_key = {}",
            self.table(),
            self.pool.dialect().param(1)
        );
        Ok(self
            .query("reading the journal", sql, vec![key.into()])
            .await?
            .pop())
    }

    /// Counts a call about to start and refreshes `updated_at`, so that the reconciler leaves
    /// the row alone while the call is in flight. Commits before returning.
    pub async fn start_call(&self, key: &str) -> Result<()> {
        let d = self.pool.dialect();
        let sql = format!(
            "UPDATE {} SET calls = calls + 1, updated_at = {} WHERE effect_key = {} AND state = 'pending'",
            self.table(),
            d.param(1),
            d.param(2)
        );
        self.exec("counting a call", sql, vec![now_ms().into(), key.into()])
            .await
            .map(drop)
    }

    /// Marks `key` done with the provider's reference. Returns false if it was not pending
    /// (already done or failed).
    pub async fn mark_done(&self, key: &str, provider_ref: &str) -> Result<bool> {
        self.resolve(key, EffectState::Done, Some(provider_ref), None)
            .await
    }

    /// Marks `key` failed with a reason. Returns false if it was not pending.
    pub async fn mark_failed(&self, key: &str, reason: &str) -> Result<bool> {
        self.resolve(key, EffectState::Failed, None, Some(reason))
            .await
    }

    async fn resolve(
        &self,
        key: &str,
        state: EffectState,
        provider_ref: Option<&str>,
        detail: Option<&str>,
    ) -> Result<bool> {
        let d = self.pool.dialect();
        let sql = format!(
            "UPDATE {} SET state = {}, provider_ref = {}, detail = {}, updated_at = {} WHERE effect_key = {} AND state = 'pending'",
            self.table(),
            d.param(1),
            d.param(2),
            d.param(3),
            d.param(4),
            d.param(5)
        );
        let args = vec![
            state.as_str().into(),
            provider_ref.map(str::to_owned).into(),
            detail.map(str::to_owned).into(),
            now_ms().into(),
            key.into(),
        ];
        Ok(self.exec("resolving an effect", sql, args).await? == 1)
    }

    /// Rows still `pending` whose last change is at least `age` old and that no reconciler
    /// holds a lease on, oldest first. A reconciler must [`Journal::lease`] a row before acting.
    pub async fn pending_older_than(&self, age: Duration, limit: u32) -> Result<Vec<JournalEntry>> {
        let d = self.pool.dialect();
        let sql = format!(
            "SELECT {COLS} FROM {} WHERE state = 'pending' AND updated_at <= {} \
             AND (lease_until IS NULL OR lease_until < {}) ORDER BY updated_at LIMIT {}",
            self.table(),
            d.param(1),
            d.param(2),
            d.param(3)
        );
        let now = now_ms();
        let cutoff = now - age.as_millis() as i64;
        self.query(
            "reading pending effects",
            sql,
            vec![cutoff.into(), now.into(), i64::from(limit).into()],
        )
        .await
    }

    /// Takes a lease on `key` for `ttl` as `holder`: true when this caller now holds it.
    ///
    /// One atomic conditional `UPDATE` on every database: it succeeds only while the row is
    /// still `pending`, unchanged for `age` (no call in flight), and not leased by anyone else
    /// (or the lease expired). Two reconcilers racing for the row: exactly one gets it.
    pub async fn lease(
        &self,
        key: &str,
        holder: &str,
        age: Duration,
        ttl: Duration,
    ) -> Result<bool> {
        let d = self.pool.dialect();
        let sql = format!(
            "UPDATE {} SET lease_until = {}, leased_by = {} WHERE effect_key = {} AND state = 'pending' \
             AND updated_at <= {} AND (lease_until IS NULL OR lease_until < {})",
            self.table(),
            d.param(1),
            d.param(2),
            d.param(3),
            d.param(4),
            d.param(5)
        );
        let now = now_ms();
        let args = vec![
            (now + ttl.as_millis() as i64).into(),
            holder.into(),
            key.into(),
            (now - age.as_millis() as i64).into(),
            now.into(),
        ];
        Ok(self.exec("leasing a pending effect", sql, args).await? == 1)
    }

    /// Gives up `holder`'s lease on `key` (after a failed attempt), so the next pass can retry.
    pub async fn release(&self, key: &str, holder: &str) -> Result<()> {
        let d = self.pool.dialect();
        let sql = format!(
            "UPDATE {} SET lease_until = NULL, leased_by = NULL WHERE effect_key = {} AND leased_by = {}",
            self.table(),
            d.param(1),
            d.param(2)
        );
        self.exec("releasing a lease", sql, vec![key.into(), holder.into()])
            .await
            .map(drop)
    }

    /// All rows, by key (checks and admin).
    pub async fn entries(&self) -> Result<Vec<JournalEntry>> {
        let sql = format!("SELECT {COLS} FROM {} ORDER BY effect_key", self.table());
        self.query("reading the journal", sql, vec![]).await
    }

    /// Record → call → mark done, for `key`.
    ///
    /// 1. commits `pending` (or finds the existing row: `done` returns
    ///    [`Performed::AlreadyDone`] without calling; `failed` is a permanent error);
    /// 2. counts the call and runs `call(&entry)`, which must pass `entry.key` to the provider as
    ///    its idempotency key and return the provider's reference;
    /// 3. commits `done` with that reference.
    ///
    /// A crash between steps leaves `pending`: the redelivery runs this again and calls again
    /// with the same key (the provider deduplicates), or the reconciler resolves it. The
    /// steps are public ([`Journal::open`], [`Journal::start_call`], [`Journal::complete`]):
    /// the crash tests (`tests/crashing_journal`) crash between them.
    pub async fn perform<F, Fut>(
        &self,
        key: &str,
        kind: &str,
        request: &[u8],
        call: F,
    ) -> Result<Performed>
    where
        F: FnOnce(JournalEntry) -> Fut + Send,
        Fut: Future<Output = Result<String>> + Send,
    {
        let entry = match self.open(key, kind, request).await? {
            Ok(pending) => pending,
            Err(finished) => return Ok(finished),
        };
        self.start_call(key).await?;
        let provider_ref = call(entry).await?;
        self.complete(key, provider_ref).await
    }

    /// The first step of [`Journal::perform`]: records `pending` (or finds the row) and
    /// answers for a row already resolved (`Ok(Err(AlreadyDone))`; `failed` is a permanent
    /// error). `Ok(Ok(entry))` means: call now ([`Journal::start_call`] first).
    pub async fn open(
        &self,
        key: &str,
        kind: &str,
        request: &[u8],
    ) -> Result<std::result::Result<JournalEntry, Performed>> {
        let entry = self.record(key, kind, request).await?;
        match entry.state {
            EffectState::Done => Ok(Err(Performed::AlreadyDone {
                provider_ref: entry.provider_ref.unwrap_or_default(),
            })),
            EffectState::Failed => Err(Error::permanent(format!(
                "effect {key} failed earlier: {}",
                entry.detail.unwrap_or_default()
            ))),
            EffectState::Pending => Ok(Ok(entry)),
        }
    }

    /// The last step of [`Journal::perform`], after the call returned `provider_ref`: commits
    /// `done` (a row the reconciler marked `failed` meanwhile is a permanent error).
    pub async fn complete(&self, key: &str, provider_ref: String) -> Result<Performed> {
        if !self.mark_done(key, &provider_ref).await? {
            // Resolved meanwhile (by the reconciler): report what is stored.
            let stored = self.get(key).await?;
            if let Some(JournalEntry {
                state: EffectState::Failed,
                detail,
                ..
            }) = stored
            {
                return Err(Error::permanent(format!(
                    "effect {key} was marked failed: {}",
                    detail.unwrap_or_default()
                )));
            }
        }
        Ok(Performed::Called { provider_ref })
    }
}
