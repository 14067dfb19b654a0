//! [`MqttSource`]: an MQTT 5 subscription (QoS 1, persistent session, manual acks) as an
//! oncely [`Source`].

use crate::hold::{Hold, Item};
use crate::mapping::envelope_of;
use futures::future::BoxFuture;
use oncely_core::wire::UrlParams;
use oncely_core::{Acker, Delivery, Error, Result, Source};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot};
use tracing::{info, warn};

/// Default topic.
pub const DEFAULT_TOPIC: &str = "oncely/messages";

/// Settings of an [`MqttSource`].
#[derive(Debug, Clone)]
pub struct MqttOptions5 {
    /// Host name or address.
    pub host: String,
    /// Port (default 1883).
    pub port: u16,
    /// Topic filter subscribed with QoS 1.
    pub topic: String,
    /// Client id: the broker keeps the session (subscription and unacked messages) under it.
    pub client_id: String,
    /// Unacked messages the broker may send at once (MQTT 5 receive maximum, default
    /// [`DEFAULT_INFLIGHT`]). Fixed per connection, so it cannot follow the consumer's
    /// read-ahead once connected; the default is what the default consumer keeps in hand.
    pub inflight: u16,
    /// How long the broker keeps the session while disconnected (default 1 day).
    pub session_expiry: Duration,
}

/// The default receive maximum: what a consumer at oncely's defaults keeps in hand (two
/// groups of [`oncely_core::DEFAULT_GROUP_COMMIT`] per lane, [`oncely_core::DEFAULT_CONCURRENCY`]
/// lanes), as AMQP's prefetch, the NATS pull batch and the Redis `COUNT` follow
/// [`oncely_core::Source::read_ahead`]. Set `?inflight=` for a consumer sized otherwise.
pub const DEFAULT_INFLIGHT: u16 =
    (2 * oncely_core::DEFAULT_CONCURRENCY * oncely_core::DEFAULT_GROUP_COMMIT) as u16;

impl MqttOptions5 {
    /// Options from `mqtt://host:port?topic=…&client_id=…&inflight=…&session_expiry=SECS`;
    /// the client id defaults to `oncely-{consumer}`.
    pub fn from_url(url: &str, consumer: &str) -> Result<Self> {
        let p = UrlParams::new(url);
        let hostport = p
            .base()
            .strip_prefix("mqtt://")
            .or_else(|| p.base().strip_prefix("tcp://"))
            .ok_or_else(|| Error::config(format!("not an mqtt:// URL: {url}")))?
            .trim_end_matches('/');
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, port)) => (
                h.to_owned(),
                port.parse()
                    .map_err(|_| Error::config(format!("bad port in {url}")))?,
            ),
            None => (hostport.to_owned(), 1883),
        };
        let options = Self {
            host,
            port,
            topic: p.text_or("topic", DEFAULT_TOPIC),
            client_id: p
                .text("client_id")
                .map_or_else(|| format!("oncely-{consumer}"), str::to_owned),
            inflight: p
                .number::<u64>("inflight")?
                .map_or(DEFAULT_INFLIGHT, |n| n.clamp(1, 65_535) as u16),
            session_expiry: p
                .secs("session_expiry")?
                .unwrap_or(Duration::from_secs(86_400)),
        };
        // The client takes settings, not a URL: anything else in the query is a mistake.
        if let Some((key, _)) = p.others().next() {
            return Err(Error::config(format!(
                "unknown mqtt URL parameter {key:?} in {url}"
            )));
        }
        Ok(options)
    }

    pub(crate) fn client_options(&self, client_id: &str, persistent: bool) -> MqttOptions {
        let mut o = MqttOptions::new(client_id, &self.host, self.port);
        o.set_keep_alive(Duration::from_secs(10));
        o.set_manual_acks(true);
        o.set_clean_start(!persistent);
        if persistent {
            o.set_session_expiry_interval(Some(self.session_expiry.as_secs() as u32));
        }
        o.set_receive_maximum(Some(self.inflight));
        o
    }
}

/// MQTT 5, QoS 1, persistent session (`clean_start = false`, session expiry), manual acks:
/// the PUBACK is sent only after the commit. A nack or a delivery dropped unsettled is
/// held in this process and delivered again after a backoff (50 ms, doubled per attempt, at
/// most 1 s); the broker sees no nack and keeps the message in flight (one slot of the
/// receive maximum) until it is acked. A lost connection is re-established with backoff
/// and the broker redelivers what was unacked; held publishes of the old connection are
/// then forgotten. Each connection gets its own client handle, so a stale ack can never
/// reach a later connection (where the packet id may name another message): such
/// deliveries are redelivered and end as `Duplicate`. `attempt` is 1, or 2 for a `DUP`
/// redelivery, raised by a local count of deliveries of the same id seen by this source
/// and by the number of in-process retries.
pub struct MqttSource {
    rx: mpsc::UnboundedReceiver<Item>,
    reconnect: Arc<Notify>,
    hold: Arc<Hold>,
    received: Count,
    acked: Count,
    seen: Arc<Mutex<HashMap<Vec<u8>, u32>>>,
    driver: tokio::task::JoinHandle<()>,
}

/// A running count kept by an [`MqttSource`]: publishes received from the broker
/// ([`MqttSource::received`]) or acked to it ([`MqttSource::acked`]).
#[derive(Clone, Debug, Default)]
pub struct Count(Arc<AtomicU64>);

impl Count {
    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl MqttSource {
    /// Connects and subscribes; returns once the broker confirmed the subscription (so
    /// messages published afterwards are kept for this session).
    pub async fn connect(options: MqttOptions5) -> Result<Self> {
        // Unbounded so that the event loop is never blocked (it must keep answering pings);
        // the broker's receive maximum bounds what is in flight per connection.
        let (tx, rx) = mpsc::unbounded_channel();
        let reconnect = Arc::new(Notify::new());
        let hold = Arc::new(Hold::default());
        let received = Count::default();
        let (ready_tx, ready_rx) = oneshot::channel();
        let link = Link {
            tx,
            reconnect: reconnect.clone(),
            hold: hold.clone(),
            received: received.clone(),
        };
        let driver = tokio::spawn(drive(options, link, ready_tx));
        match tokio::time::timeout(Duration::from_secs(15), ready_rx).await {
            Ok(Ok(())) => Ok(Self {
                rx,
                reconnect,
                hold,
                received,
                acked: Count::default(),
                seen: Arc::default(),
                driver,
            }),
            _ => {
                driver.abort();
                Err(Error::transient(
                    "MQTT: could not connect and subscribe within 15 s",
                ))
            }
        }
    }

    /// Drops the connection now (without DISCONNECT, as a crash would) and reconnects; the
    /// broker then redelivers everything unacked.
    pub fn reconnect_now(&self) {
        self.reconnect.notify_one();
    }

    /// Publishes received from the broker (redeliveries after a reconnect included). Fewer
    /// than were published means the broker dropped some (queue limit).
    pub fn received(&self) -> Count {
        self.received.clone()
    }

    /// Publishes acked to the broker (PUBACK sent after the commit). Mosquitto counts every
    /// unacked message, in flight or queued, against `max_queued_messages` (it does not
    /// stop at the receive maximum), so a producer in this process paces itself on this
    /// count ([`crate::MqttProducer::send_paced`]).
    pub fn acked(&self) -> Count {
        self.acked.clone()
    }

    /// Deliveries handed back and held for a retry in this process now.
    pub fn held(&self) -> usize {
        self.hold.len()
    }

    /// Waits for a held publish that is due, or for one from the broker.
    async fn receive(&mut self) -> Option<(Item, u32)> {
        loop {
            let due = match self.hold.take_due() {
                Ok(held) => return Some(held),
                Err(due) => due,
            };
            let sleep = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now));
            tokio::select! {
                item = self.rx.recv() => return item.map(|i| (i, 1)),
                _ = self.hold.changed() => {}
                _ = sleep, if due.is_some() => {}
            }
        }
    }

    /// A handle that can drop the connection from another task (see [`MqttSource::reconnect_now`]).
    pub fn reconnect_handle(&self) -> ReconnectHandle {
        ReconnectHandle(self.reconnect.clone())
    }
}

/// Drops an [`MqttSource`]'s connection from elsewhere; the source reconnects.
#[derive(Clone, Debug)]
pub struct ReconnectHandle(Arc<Notify>);

impl ReconnectHandle {
    /// Drops the connection now; the source reconnects and the broker redelivers.
    pub fn reconnect(&self) {
        self.0.notify_one();
    }
}

impl Drop for MqttSource {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// What the connection task shares with the source.
struct Link {
    tx: mpsc::UnboundedSender<Item>,
    reconnect: Arc<Notify>,
    hold: Arc<Hold>,
    received: Count,
}

async fn drive(options: MqttOptions5, link: Link, ready: oneshot::Sender<()>) {
    let mut ready = Some(ready);
    let mut delay = Duration::from_millis(100);
    loop {
        let (client, mut eventloop) =
            AsyncClient::new(options.client_options(&options.client_id, true), 256);
        let connection = link.hold.new_connection();
        loop {
            let event = tokio::select! {
                e = eventloop.poll() => e,
                _ = link.reconnect.notified() => {
                    info!("MQTT: reconnecting on request; the broker redelivers unacked messages");
                    break;
                }
            };
            match event {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    delay = Duration::from_millis(100);
                    if let Err(e) = client
                        .subscribe(options.topic.clone(), QoS::AtLeastOnce)
                        .await
                    {
                        warn!(error = %e, "MQTT: subscribe request failed");
                    }
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    if let Some(r) = ready.take() {
                        let _ = r.send(());
                    }
                }
                Ok(Event::Incoming(Packet::Publish(publish))) => {
                    link.received.add();
                    let item = Item {
                        publish,
                        client: client.clone(),
                        connection,
                    };
                    if link.tx.send(item).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(error = %e, ?delay, "MQTT: connection lost; reconnecting");
                    break;
                }
            }
        }
        drop(eventloop);
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

impl Source for MqttSource {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        let Some((
            Item {
                publish,
                client,
                connection,
            },
            held,
        )) = self.receive().await
        else {
            return Err(Error::transient("MQTT: connection task ended"));
        };
        let (raw, defect) = match oncely_core::map_envelope(|| {
            envelope_of(publish.properties.as_ref(), &publish.payload)
        }) {
            Ok(raw) => (raw, None),
            Err(why) => {
                let payload = publish.payload.to_vec();
                (
                    oncely_core::RawEnvelope {
                        id: None,
                        payload,
                        meta: Default::default(),
                    },
                    Some(why),
                )
            }
        };
        let key = raw.id.clone().unwrap_or_else(|| raw.payload.clone());
        let local = {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            let n = seen.entry(key.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let attempt = local.max(held).max(if publish.dup { 2 } else { 1 });
        let acker = MqttAcker {
            inner: Some(Item {
                publish,
                client,
                connection,
            }),
            attempt,
            hold: self.hold.clone(),
            acked: self.acked.clone(),
            seen: self.seen.clone(),
            key,
        };
        Ok(Some(match defect {
            None => Delivery::new(raw, attempt, Box::new(acker)),
            Some(why) => Delivery::undecodable(raw, attempt, Box::new(acker), why),
        }))
    }
}

struct MqttAcker {
    /// Set until settled; a nack or a drop puts it on hold.
    inner: Option<Item>,
    attempt: u32,
    hold: Arc<Hold>,
    acked: Count,
    seen: Arc<Mutex<HashMap<Vec<u8>, u32>>>,
    key: Vec<u8>,
}

impl Acker for MqttAcker {
    fn ack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        let Item {
            client, publish, ..
        } = self.inner.take().expect("settled once");
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
        let acked = self.acked.clone();
        Box::pin(async move {
            client
                .ack(&publish)
                .await
                .map_err(|e| Error::transient(format!("MQTT: PUBACK not sent: {e}")))?;
            acked.add();
            Ok(())
        })
    }

    /// Holds the publish in this process and delivers it again after a backoff; the
    /// broker is not told.
    fn nack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        self.hand_back();
        Box::pin(async { Ok(()) })
    }
}

impl MqttAcker {
    fn hand_back(&mut self) {
        if let Some(item) = self.inner.take() {
            self.hold.put(item, self.attempt);
        }
    }
}

impl Drop for MqttAcker {
    fn drop(&mut self) {
        self.hand_back();
    }
}

/// Connects a source for consumer `consumer` from a URL such as
/// `mqtt://127.0.0.1:1883?topic=credits&client_id=billing-1` (client id default
/// `oncely-{consumer}`; its persistent session holds the subscription).
pub async fn connect_source(url: &str, consumer: &str) -> Result<MqttSource> {
    MqttSource::connect(MqttOptions5::from_url(url, consumer)?).await
}
