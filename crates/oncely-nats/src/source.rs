//! [`NatsSource`]: a durable JetStream pull consumer as an oncely [`Source`].

use crate::acks::AckBatcher;
use crate::durable::durable_name;
use crate::mapping::envelope_of;
use async_nats::Subject;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::{self, AckKind, Context, stream};
use futures::StreamExt;
use futures::future::BoxFuture;
use oncely_core::wire::UrlParams;
use oncely_core::{Acker, Delivery, Error, LogThrottle, Result, Source};
use std::time::Duration;
use tracing::{debug, warn};

/// Default stream name.
pub const DEFAULT_STREAM: &str = "ONCELY";
/// Default subject.
pub const DEFAULT_SUBJECT: &str = "oncely.messages";

/// Settings of a [`NatsSource`] (and of the stream a producer creates).
#[derive(Debug, Clone)]
pub struct NatsOptions {
    /// Stream name (created if missing, capturing [`NatsOptions::subject`]).
    pub stream: String,
    /// Subject the stream captures and producers publish to.
    pub subject: String,
    /// Durable consumer name (shared by all processes of one logical consumer).
    pub durable: String,
    /// Redelivery after this long without an ack (default 30 s).
    pub ack_wait: Duration,
    /// Messages per pull request. Unset (the default): what the consumer keeps in hand
    /// ([`Source::read_ahead`]), or [`DEFAULT_BATCH`] when not told.
    pub batch: Option<usize>,
    /// The stream's `Nats-Msg-Id` dedup window, used when creating it (default 2 min).
    pub duplicate_window: Duration,
    /// Copies of the stream in a JetStream cluster, used when creating it (default 1; 3 for
    /// a stream that survives the loss of a server: `?replicas=3`).
    pub replicas: usize,
}

impl NatsOptions {
    /// Defaults for consumer `consumer`: stream `ONCELY`, subject `oncely.messages`,
    /// durable name = [`durable_name`] of the consumer name (readable and injective).
    pub fn new(consumer: &str) -> Self {
        Self {
            stream: DEFAULT_STREAM.to_owned(),
            subject: DEFAULT_SUBJECT.to_owned(),
            durable: durable_name(consumer),
            ack_wait: Duration::from_secs(30),
            batch: None,
            duplicate_window: Duration::from_secs(120),
            replicas: 1,
        }
    }

    /// Options from a URL's `?stream=`, `?subject=`, `?durable=`, `?ack_wait_ms=`,
    /// `?batch=`, `?dup_window_ms=`, `?replicas=`; returns the URL without them.
    pub fn from_url(url: &str, consumer: &str) -> Result<(String, Self)> {
        let p = UrlParams::new(url);
        let d = Self::new(consumer);
        let o = Self {
            stream: p.text_or("stream", &d.stream),
            subject: p.text_or("subject", &d.subject),
            durable: p.text_or("durable", &d.durable),
            ack_wait: p.millis("ack_wait_ms")?.unwrap_or(d.ack_wait),
            batch: p.number::<usize>("batch")?.map(|b| b.max(1)).or(d.batch),
            duplicate_window: p.millis("dup_window_ms")?.unwrap_or(d.duplicate_window),
            replicas: p
                .number::<usize>("replicas")?
                .map_or(d.replicas, |r| r.max(1)),
        };
        Ok((p.rest(), o))
    }
}

pub(crate) fn nats_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::transient(format!("NATS: {what}: {e}"))
}

/// Connects to the server, or to any of the servers of a cluster written as a comma-separated
/// list (`nats://h1:4222,nats://h2:4222` or `nats://h1:4222,h2:4222`); the client moves to
/// another server of the list when the one in use goes away.
pub(crate) async fn connect_client(url: &str, name: &str) -> Result<async_nats::Client> {
    let servers = url
        .split(',')
        .map(|server| server.trim().parse::<async_nats::ServerAddr>())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| nats_err("parsing the server list", e))?;
    async_nats::ConnectOptions::new()
        .name(name)
        .connect(servers)
        .await
        .map_err(|e| nats_err("connect", e))
}

/// Creates the stream if missing (an existing stream is used as it is).
pub(crate) async fn ensure_stream(js: &Context, o: &NatsOptions) -> Result<stream::Stream> {
    js.get_or_create_stream(stream::Config {
        name: o.stream.clone(),
        subjects: vec![o.subject.clone()],
        duplicate_window: o.duplicate_window,
        num_replicas: o.replicas,
        ..stream::Config::default()
    })
    .await
    .map_err(|e| nats_err("creating the stream", e))
}

/// A durable JetStream pull consumer. Acks are sent only after the commit and confirmed: the
/// acks of a group go out together, every one but the last as a plain `+ACK`, the last as a
/// request the server answers once those before it were handled (see [`crate::acks`]); a nack (or a delivery dropped unsettled) sends `-NAK` for a prompt
/// redelivery; an ack that never arrives leads to a redelivery after `ack_wait`.
/// `attempt` is JetStream's delivery count. The client reconnects by itself; the pull
/// stream is re-opened when it ends or falls silent (two 1 s idle heartbeats missed).
pub struct NatsSource {
    client: async_nats::Client,
    acks: AckBatcher,
    consumer: PullConsumer,
    options: NatsOptions,
    /// What the consumer said it keeps in hand ([`Source::read_ahead`]).
    read_ahead: Option<usize>,
    messages: Option<pull::Stream>,
    /// Re-opens of a silent pull stream: WARN once a minute, DEBUG in between.
    reopens_logged: LogThrottle,
}

/// The idle heartbeat asked of the server while a pull request waits; two missed re-open the
/// pull stream. Short, because a silent stream is not always a lost server: async-nats' pull
/// stream (0.51–0.52) counts a request's messages from the moment its task reports the request
/// sent, and messages that arrive and are read before that report are not counted off, so the
/// stream can wait for messages nobody asked for while the server holds no request of it
/// (seen as an `oncely demo` via NATS that stopped after 640 of 1,000 messages, once in 40
/// runs, with a 5 s heartbeat silent for 10 s). With 1 s it costs 2 s; the price is a re-open
/// when the server is over 2 s late with a heartbeat: what it then sends the old request comes
/// back after `ack_wait`.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// Messages per pull request of a source that neither its URL nor its consumer sized.
pub const DEFAULT_BATCH: usize = 64;

impl NatsSource {
    /// Connects, creates the stream and the durable consumer if missing.
    pub async fn connect(url: &str, options: NatsOptions) -> Result<Self> {
        let client = connect_client(url, &format!("oncely:{}", options.durable)).await?;
        let js = jetstream::new(client.clone());
        let stream = ensure_stream(&js, &options).await?;
        let consumer: PullConsumer = stream
            .get_or_create_consumer(
                &options.durable,
                pull::Config {
                    durable_name: Some(options.durable.clone()),
                    ack_policy: AckPolicy::Explicit,
                    ack_wait: options.ack_wait,
                    deliver_policy: DeliverPolicy::All,
                    filter_subject: options.subject.clone(),
                    ..pull::Config::default()
                },
            )
            .await
            .map_err(|e| nats_err("creating the durable consumer", e))?;
        Ok(Self {
            acks: AckBatcher::start(client.clone()),
            client,
            consumer,
            options,
            read_ahead: None,
            messages: None,
            reopens_logged: LogThrottle::per_minute(),
        })
    }

    /// The client (e.g. to force a reconnect in a test).
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The options in use.
    pub fn options(&self) -> &NatsOptions {
        &self.options
    }

    /// Messages per pull request: the URL's `?batch=`, else the consumer's read-ahead, else 64.
    pub fn batch(&self) -> usize {
        self.options
            .batch
            .or(self.read_ahead)
            .unwrap_or(DEFAULT_BATCH)
    }

    async fn open(&self) -> Result<pull::Stream> {
        self.consumer
            .stream()
            .max_messages_per_batch(self.batch())
            .heartbeat(HEARTBEAT)
            .expires(Duration::from_secs(30))
            .messages()
            .await
            .map_err(|e| nats_err("pull", e))
    }
}

impl Source for NatsSource {
    async fn next(&mut self) -> Result<Option<Delivery>> {
        let mut delay = Duration::from_millis(100);
        let mut errors = 0;
        loop {
            let messages = match self.messages.as_mut() {
                Some(m) => m,
                None => match self.open().await {
                    Ok(m) => self.messages.insert(m),
                    Err(e) => {
                        warn!(error = %e, ?delay, "NATS: opening the pull stream failed; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(5));
                        continue;
                    }
                },
            };
            match messages.next().await {
                Some(Ok(msg)) => {
                    let info = msg.info().ok();
                    let attempt = info
                        .as_ref()
                        .map_or(0, |i| u32::try_from(i.delivered).unwrap_or(u32::MAX));
                    let published = info.map(|i| i.published);
                    let msg = msg.message;
                    let acker = Box::new(NatsAcker {
                        client: self.client.clone(),
                        acks: self.acks.clone(),
                        reply: msg.reply.clone(),
                    });
                    let mapped = oncely_core::map_envelope(|| {
                        envelope_of(msg.headers.as_ref(), &msg.payload, published)
                    });
                    return Ok(Some(match mapped {
                        Ok(raw) => Delivery::new(raw, attempt, acker),
                        Err(why) => Delivery::undecodable(
                            oncely_core::RawEnvelope {
                                id: None,
                                payload: msg.payload.to_vec(),
                                meta: Default::default(),
                            },
                            attempt,
                            acker,
                            why,
                        ),
                    }));
                }
                Some(Err(e)) if e.kind() == pull::MessagesErrorKind::MissingHeartbeat => {
                    // Two heartbeats missed: the server holding our pull request is gone (a
                    // consumer leader lost in a cluster, while our own connection to another
                    // server stays up and no reconnect re-issues the request), or the stream
                    // lost count of its request (see HEARTBEAT). The stream alone would wait
                    // for the request to expire; open a new one now.
                    if let Some(held_back) = self.reopens_logged.turn() {
                        warn!(error = %e, held_back, "NATS: pull stream silent for two heartbeats ({HEARTBEAT:?} each); re-opening it ({held_back} more re-opens since the last such line; further ones this minute at DEBUG)");
                    } else {
                        debug!(error = %e, "NATS: pull stream silent; re-opening it");
                    }
                    self.messages = None;
                }
                Some(Err(e)) => {
                    // Other errors (e.g. during a reconnect) are recovered by the stream
                    // itself; if they persist, re-open the pull stream.
                    errors += 1;
                    warn!(error = %e, errors, "NATS: pull stream error");
                    if errors >= 5 {
                        self.messages = None;
                        errors = 0;
                    }
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                None => {
                    warn!("NATS: pull stream ended; re-opening");
                    self.messages = None;
                }
            }
        }
    }

    /// Sizes the pull batch to `deliveries` unless the URL set `?batch=`; takes effect when
    /// the pull stream opens (the first `next`, and each re-open).
    fn read_ahead(&mut self, deliveries: usize) {
        self.read_ahead = Some(deliveries.max(1));
    }
}

/// Settles one JetStream delivery through its reply subject (`$JS.ACK.…`): the ack is
/// confirmed, one confirmation per batch of acks asked for together (see [`crate::acks`]).
///
/// The confirmation is a request on the client's shared reply subscription, the way the
/// client's own JetStream API calls are made. (async-nats' `double_ack` subscribes to a fresh
/// inbox for every ack and drops the subscription after: a `SUB`, a `PUB` and an `UNSUB` per
/// message, and a subscription added to and removed from the server's interest graph each
/// time, which cost CPU on both sides.)
struct NatsAcker {
    client: async_nats::Client,
    acks: AckBatcher,
    /// Taken when the delivery is settled; still here on drop means unsettled.
    reply: Option<Subject>,
}

impl NatsAcker {
    fn take_reply(&mut self) -> Result<Subject> {
        self.reply
            .take()
            .ok_or_else(|| Error::permanent("NATS: the message has no reply subject to ack"))
    }
}

impl Acker for NatsAcker {
    fn ack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        let reply = self.take_reply();
        let acks = self.acks.clone();
        Box::pin(async move { acks.ack(reply?).await })
    }

    fn nack(mut self: Box<Self>) -> BoxFuture<'static, Result<()>> {
        let reply = self.take_reply();
        let client = self.client.clone();
        Box::pin(async move {
            client
                .publish(reply?, AckKind::Nak(None).into())
                .await
                .map_err(|e| nats_err("nak", e))
        })
    }
}

impl Drop for NatsAcker {
    /// A delivery dropped unsettled is nak'ed for a prompt redelivery (else `ack_wait`).
    fn drop(&mut self) {
        if let Some(reply) = self.reply.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let client = self.client.clone();
            rt.spawn(async move {
                let _ = client.publish(reply, AckKind::Nak(None).into()).await;
            });
        }
    }
}

/// Connects a source for consumer `consumer` from a URL such as
/// `nats://127.0.0.1:4222?stream=CREDITS&subject=credits&ack_wait_ms=30000`
/// (durable consumer name = consumer name).
pub async fn connect_source(url: &str, consumer: &str) -> Result<NatsSource> {
    let (url, options) = NatsOptions::from_url(url, consumer)?;
    NatsSource::connect(&url, options).await
}
