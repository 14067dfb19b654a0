//! Confirmed acks, one confirmation per batch.
//!
//! JetStream's acks are per message (no cumulative ack), and a confirmed ack is a request the
//! server answers. Answering every ack costs the server a reply message and both sides a
//! round trip per message. Here the acks asked for together (a group's, handed off at once)
//! go out as one batch: every ack but the last is a plain `+ACK` publish, the last is the
//! confirmed request. The server reads a connection's messages in order and its consumer
//! handles acks in the order they arrive, so the answer to the last ack comes after the ones
//! before it were handled; each ack of the batch resolves with that answer. Batches do not
//! wait for each other: at low load every ack is its own batch, confirmed as before.

use async_nats::jetstream::AckKind;
use async_nats::{Client, Request, Subject};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use oncely_core::{Error, Result};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long a confirmed ack waits for the server's answer (JetStream's API timeout).
const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// Most acks in one batch.
const MAX_BATCH: usize = 1024;

struct Ask {
    reply: Subject,
    answer: oneshot::Sender<Result<()>>,
}

/// Sends a client's confirmed acks in batches (see the module docs).
#[derive(Clone)]
pub(crate) struct AckBatcher {
    asks: mpsc::UnboundedSender<Ask>,
}

impl AckBatcher {
    /// Starts the batching task for `client` (it ends when the last batcher is dropped).
    pub fn start(client: Client) -> Self {
        let (asks, queue) = mpsc::unbounded_channel();
        tokio::spawn(run(client, queue));
        Self { asks }
    }

    /// Acks the delivery whose reply subject is `reply`; resolves with the server's answer
    /// to its batch.
    pub async fn ack(&self, reply: Subject) -> Result<()> {
        let (answer, answered) = oneshot::channel();
        self.asks
            .send(Ask { reply, answer })
            .map_err(|_| Error::transient("NATS: the ack task has stopped"))?;
        answered
            .await
            .unwrap_or_else(|_| Err(Error::transient("NATS: the ack task has stopped")))
    }
}

async fn run(client: Client, mut queue: mpsc::UnboundedReceiver<Ask>) {
    let mut in_flight = FuturesUnordered::new();
    loop {
        tokio::select! {
            ask = queue.recv() => {
                let Some(first) = ask else { break };
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match queue.try_recv() {
                        Ok(ask) => batch.push(ask),
                        Err(_) => break,
                    }
                }
                in_flight.push(send(client.clone(), batch));
            }
            Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
        }
    }
    while in_flight.next().await.is_some() {}
}

/// Sends one batch: plain acks, then the last as the confirmed request; answers each ask.
async fn send(client: Client, mut batch: Vec<Ask>) {
    let Some(last) = batch.pop() else { return };
    let mut plain = Vec::with_capacity(batch.len());
    for ask in batch {
        let sent = client
            .publish(ask.reply.clone(), AckKind::Ack.into())
            .await
            .map_err(|e| e.to_string());
        plain.push((ask.answer, sent));
    }
    let request = Request::new()
        .payload(AckKind::Ack.into())
        .timeout(Some(ACK_TIMEOUT));
    let confirmed = client
        .send_request(last.reply, request)
        .await
        .map(drop)
        .map_err(|e| e.to_string());
    let _ = last.answer.send(answered(&confirmed));
    for (answer, sent) in plain {
        let _ = answer.send(match sent {
            Ok(()) => answered(&confirmed),
            Err(why) => Err(failed("ack", &why)),
        });
    }
}

fn answered(confirmed: &std::result::Result<(), String>) -> Result<()> {
    confirmed
        .as_ref()
        .map(|_| ())
        .map_err(|why| failed("confirmed ack", why))
}

fn failed(what: &str, why: &str) -> Error {
    crate::source::nats_err(what, why)
}
