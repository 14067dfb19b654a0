//! The transactional outbox: outgoing messages are rows written in the handler's transaction,
//! with ids derived from the incoming id, so they exist if and only if the effect committed,
//! and a reprocessed message emits the same ids.

use crate::EffectTables;
use oncely_core::{Error, MessageId, Meta, RawEnvelope, Result};
use oncely_sql::clock::{from_ms, now_ms};
use oncely_sql::{Column, SqlTx, Tables, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::SystemTime;
use uuid::Uuid;

/// Namespace of the UUID v5 ids of outgoing messages.
const NAMESPACE: Uuid = Uuid::from_u128(0x6f6e_6365_6c79_4f75_7462_6f78_0000_0001);

/// Header that carries an outgoing message's destination (topic, queue, subject).
pub const DESTINATION_HEADER: &str = "oncely-destination";

/// The id of the `seq`-th message emitted by `emitter` while processing `incoming`: a UUID v5
/// of the three, so the same inputs give the same id on every machine and every retry.
///
/// ```
/// use oncely_core::MessageId;
/// let incoming = MessageId::new("order-17:paid").unwrap();
/// let a = oncely_effects::derived_id("billing", &incoming, 0);
/// assert_eq!(a, oncely_effects::derived_id("billing", &incoming, 0));
/// assert_ne!(a, oncely_effects::derived_id("billing", &incoming, 1));
/// assert_ne!(a, oncely_effects::derived_id("shipping", &incoming, 0));
/// ```
pub fn derived_id(emitter: &str, incoming: &MessageId, seq: u32) -> MessageId {
    let name = format!("{emitter}\n{incoming}\n{seq}");
    let id = Uuid::new_v5(&NAMESPACE, name.as_bytes()).to_string();
    MessageId::new(id).expect("a UUID is a valid message id")
}

/// A message to send, as the handler describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Where it goes (topic, queue, subject); the publisher decides what it means.
    pub destination: String,
    /// The entity it is about: the relay keeps order per entity key.
    pub entity_key: String,
    /// Payload bytes.
    pub payload: Vec<u8>,
    /// Entity version it carries, for versioned apply downstream.
    pub version: Option<i64>,
    /// Extra headers.
    pub headers: BTreeMap<String, String>,
}

impl Outgoing {
    /// A message for `destination` about `entity_key`.
    pub fn new(
        destination: impl Into<String>,
        entity_key: impl Into<String>,
        payload: impl Into<Vec<u8>>,
    ) -> Self {
        Self {
            destination: destination.into(),
            entity_key: entity_key.into(),
            payload: payload.into(),
            version: None,
            headers: BTreeMap::new(),
        }
    }

    /// Sets the entity version.
    pub fn with_version(mut self, version: i64) -> Self {
        self.version = Some(version);
        self
    }

    /// Adds a header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }
}

/// An outbox row, as the relay dispatches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxMessage {
    /// Row id (dispatch order within an entity key).
    pub seq: i64,
    /// The message id (derived from the incoming id).
    pub id: MessageId,
    /// Destination.
    pub destination: String,
    /// Entity key.
    pub entity_key: String,
    /// Payload.
    pub payload: Vec<u8>,
    /// Entity version, if any.
    pub version: Option<i64>,
    /// Headers.
    pub headers: BTreeMap<String, String>,
    /// When it was enqueued.
    pub created_at: SystemTime,
    /// Failed dispatch attempts so far.
    pub attempts: u32,
    /// When it was dispatched, if it was.
    pub dispatched_at: Option<SystemTime>,
}

impl OutboxMessage {
    /// The message as a broker carries it: id, payload, entity key, version, source time, and
    /// headers including [`DESTINATION_HEADER`].
    pub fn to_raw(&self) -> RawEnvelope {
        let mut headers = self.headers.clone();
        headers.insert(DESTINATION_HEADER.to_owned(), self.destination.clone());
        RawEnvelope {
            id: Some(self.id.as_str().as_bytes().to_vec()),
            payload: self.payload.clone(),
            meta: Meta {
                entity_key: Some(self.entity_key.clone()),
                version: self.version,
                source_time: Some(self.created_at),
                headers,
            },
        }
    }
}

pub(crate) const ROW_COLS: &str = "id, message_id, destination, entity_key, payload, version, headers, created_at, attempts, dispatched_at";
pub(crate) const ROW_TYPES: &[Column] = &[
    Column::I64,
    Column::Text,
    Column::Text,
    Column::Text,
    Column::Bytes,
    Column::OptI64,
    Column::Text,
    Column::I64,
    Column::I64,
    Column::OptI64,
];

pub(crate) fn message_of(row: &[Value]) -> Result<OutboxMessage> {
    let id = row[1].text();
    Ok(OutboxMessage {
        seq: row[0].i64(),
        id: MessageId::new(&id)
            .map_err(|e| Error::permanent(format!("outbox row holds a bad id {id:?}: {e}")))?,
        destination: row[2].text(),
        entity_key: row[3].text(),
        payload: row[4].bytes(),
        version: row[5].opt_i64(),
        headers: serde_json::from_str(&row[6].text()).unwrap_or_default(),
        created_at: from_ms(row[7].i64()),
        attempts: row[8].i64().max(0) as u32,
        dispatched_at: row[9].opt_i64().map(from_ms),
    })
}

/// Wakes the relay listening on the channel bound as `$1` at commit (PostgreSQL's
/// `LISTEN`/`NOTIFY`; the other databases have none and the relay polls).
const NOTIFY: &str = "SELECT pg_notify($1, '')";

/// The PostgreSQL NOTIFY channel of an outbox table: short, whatever the schema and prefix.
pub(crate) fn channel(tables: &Tables) -> String {
    let digest = Sha256::digest(tables.outbox().as_bytes());
    format!("oncely_outbox_{}", &hex::encode(digest)[..16])
}

/// Writes outgoing messages into `{prefix}outbox` inside the handler's transaction.
///
/// ```no_run
/// # use oncely_effects::{Outbox, Outgoing};
/// # async fn f(tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>, msg: &oncely_core::Envelope) -> oncely_core::Result<()> {
/// let outbox = Outbox::new("credit-ledger", oncely_sql::Tables::default());
/// let event = Outgoing::new("credits.granted", "account-7", br#"{"amount":5}"#.to_vec());
/// let id = outbox.enqueue(tx, msg.id(), 0, &event).await?; // same id on every retry
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Outbox {
    emitter: String,
    tables: Tables,
}

impl Outbox {
    /// The outbox of `tables`; `emitter` (usually the consumer's name) is part of every derived
    /// id, so two consumers reacting to one message emit distinct ids.
    pub fn new(emitter: impl Into<String>, tables: Tables) -> Self {
        Self {
            emitter: emitter.into(),
            tables,
        }
    }

    /// Enqueues `message` as the `seq`-th output of `incoming`, inside `tx`, and returns its id
    /// ([`derived_id`]). Enqueuing the same `(incoming, seq)` again is a no-op. Where the
    /// transaction's engine has `LISTEN`/`NOTIFY` ([`Engine::notifies`](oncely_sql::Engine::notifies):
    /// PostgreSQL, not in portable mode) the relay is woken by a NOTIFY delivered at commit;
    /// elsewhere (CockroachDB, YugabyteDB, Citus, a transaction pooler) it finds the row by
    /// polling.
    ///
    /// The current span's W3C trace context is stored in the row's headers (`traceparent`,
    /// `tracestate`; see [`oncely_core::trace::inject_current`]) unless `message` carries a
    /// `traceparent` already, so the relay and the next consumer continue this trace.
    pub async fn enqueue(
        &self,
        tx: &mut impl SqlTx,
        incoming: &MessageId,
        seq: u32,
        message: &Outgoing,
    ) -> Result<MessageId> {
        let d = tx.dialect();
        let id = derived_id(&self.emitter, incoming, seq);
        let sql = format!(
            "INSERT INTO {} (message_id, entity_key, destination, payload, headers, version, created_at, attempts, next_attempt_at) VALUES ({}) {}",
            self.tables.outbox(),
            d.params(1, 9),
            d.on_conflict_do_nothing("message_id")
        );
        let now = now_ms();
        // The trace this message was created in travels with it (unless it names one itself).
        let mut headers = message.headers.clone();
        oncely_core::trace::inject_current(&mut headers);
        let headers = serde_json::to_string(&headers).unwrap_or_else(|_| "{}".into());
        let args = vec![
            id.as_str().into(),
            message.entity_key.as_str().into(),
            message.destination.as_str().into(),
            Value::Bytes(message.payload.clone()),
            headers.into(),
            message.version.into(),
            now.into(),
            Value::I64(0),
            now.into(),
        ];
        tx.execute(&sql, &args)
            .await
            .map_err(|e| e.context("enqueuing an outgoing message"))?;
        if tx.engine().notifies() {
            tx.execute(NOTIFY, &[channel(&self.tables).into()]).await?;
        }
        Ok(id)
    }
}

/// Every outbox row of `tables`, in id order (checks and admin).
pub async fn outbox_rows(tx: &mut impl SqlTx, tables: &Tables) -> Result<Vec<OutboxMessage>> {
    let sql = format!("SELECT {ROW_COLS} FROM {} ORDER BY id", tables.outbox());
    tx.fetch(&sql, &[], ROW_TYPES)
        .await?
        .iter()
        .map(|r| message_of(r))
        .collect()
}
