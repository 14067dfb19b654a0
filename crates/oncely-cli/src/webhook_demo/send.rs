//! The sender simulator: signs each request as its provider does (a fresh signature per
//! attempt), waits at most [`TIMEOUT`] for an answer, and retries a timeout, a 5xx or a
//! refused connection on a compressed schedule (25 ms doubling to 400 ms, instead of
//! minutes doubling to hours) until it gets a 2xx or a 4xx, giving up after [`GIVE_UP`].

use super::events::{Event, Forged, Plan, source_name};
use oncely_webhook::Verifier;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Semaphore;

/// How long a sender waits for an answer (real senders: GitHub 10 s, Stripe about 20 s).
const TIMEOUT: Duration = Duration::from_secs(1);

/// How long a sender keeps retrying one request (real senders: about 3 days).
const GIVE_UP: Duration = Duration::from_secs(120);

/// The last answer a request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 2xx: the sender stops.
    Accepted(u16),
    /// 4xx: the sender stops; a genuine event should never get one.
    Refused(u16),
    /// Retried until [`GIVE_UP`] without a 2xx or 4xx.
    GaveUp,
}

/// What happened to one event of the plan.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The answer to the first body (the best of its concurrent copies).
    pub first: Answer,
    /// The answer to the changed body, when one was sent (after the first was accepted).
    pub changed: Option<Answer>,
}

/// What the senders counted on the wire.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    /// Requests sent, every attempt of every copy.
    pub requests: u64,
    /// Attempts repeated after a timeout, a 5xx or a failed connection.
    pub retries: u64,
    /// Attempts that got no answer within the timeout.
    pub timeouts: u64,
    /// Attempts answered 5xx.
    pub unavailable: u64,
    /// Attempts whose connection failed (the server was down).
    pub connection_errors: u64,
    /// Answers 200 with `"outcome":"duplicate"`.
    pub duplicates_answered: u64,
}

/// The senders of all three sources, sharing one HTTP client.
pub struct Sender {
    client: reqwest::Client,
    base: String,
    finished: AtomicUsize,
    requests: AtomicU64,
    retries: AtomicU64,
    timeouts: AtomicU64,
    unavailable: AtomicU64,
    connection_errors: AtomicU64,
    duplicates: AtomicU64,
}

impl Sender {
    pub fn new(base: &str) -> Self {
        Self {
            client: reqwest::Client::builder()
                .timeout(TIMEOUT)
                .build()
                .expect("an HTTP client"),
            base: base.to_owned(),
            finished: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            unavailable: AtomicU64::new(0),
            connection_errors: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
        }
    }

    /// Events finished so far (accepted, refused or given up).
    pub fn finished(&self) -> usize {
        self.finished.load(Ordering::Relaxed)
    }

    pub fn counts(&self) -> Counts {
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        Counts {
            requests: get(&self.requests),
            retries: get(&self.retries),
            timeouts: get(&self.timeouts),
            unavailable: get(&self.unavailable),
            connection_errors: get(&self.connection_errors),
            duplicates_answered: get(&self.duplicates),
        }
    }

    /// Sends the whole plan, `concurrency` events at a time, the forged requests among them;
    /// returns the events' outcomes (in the plan's order) and the forged requests' answers.
    pub async fn send_all(
        self: Arc<Self>,
        plan: &Plan,
        concurrency: usize,
    ) -> (Vec<Outcome>, Vec<Answer>) {
        let permits = Arc::new(Semaphore::new(concurrency.max(1)));
        let mut events = tokio::task::JoinSet::new();
        for (n, event) in plan.events.iter().enumerate() {
            let (sender, event) = (self.clone(), event.clone());
            let permit = permits.clone().acquire_owned().await.expect("open");
            events.spawn(async move {
                let outcome = sender.event(&event).await;
                sender.finished.fetch_add(1, Ordering::Relaxed);
                drop(permit);
                (n, outcome)
            });
        }
        let mut forged = tokio::task::JoinSet::new();
        for (n, f) in plan.forged.iter().enumerate() {
            let (sender, f) = (self.clone(), f.clone());
            forged.spawn(async move { (n, sender.forged(&f).await) });
        }
        let mut outcomes = vec![None; plan.events.len()];
        while let Some(done) = events.join_next().await {
            let (n, outcome) = done.expect("a sender task");
            outcomes[n] = Some(outcome);
        }
        let mut answers = vec![Answer::GaveUp; plan.forged.len()];
        while let Some(done) = forged.join_next().await {
            let (n, answer) = done.expect("a forger task");
            answers[n] = answer;
        }
        (
            outcomes
                .into_iter()
                .map(|o| o.expect("every event sent"))
                .collect(),
            answers,
        )
    }

    /// One event: its copies at once, then (once accepted) its changed body if planned.
    async fn event(&self, event: &Event) -> Outcome {
        let (body, signer) = (event.body(), event.signer());
        let copies =
            (0..event.copies).map(|_| self.deliver(event.provider, &event.id, &body, &signer));
        let answers = futures::future::join_all(copies).await;
        let first = answers
            .iter()
            .copied()
            .find(|a| matches!(a, Answer::Accepted(_)))
            .or_else(|| {
                answers
                    .iter()
                    .copied()
                    .find(|a| matches!(a, Answer::Refused(_)))
            })
            .unwrap_or(Answer::GaveUp);
        let changed = match (first, event.changed) {
            (Answer::Accepted(_), true) => {
                let body = event.changed_body();
                Some(
                    self.deliver(event.provider, &event.id, &body, &signer)
                        .await,
                )
            }
            _ => None,
        };
        Outcome { first, changed }
    }

    async fn forged(&self, forged: &Forged) -> Answer {
        self.deliver(
            forged.provider,
            &forged.id,
            &forged.body(),
            &forged.signer(),
        )
        .await
    }

    /// Posts `body` until it gets a 2xx or a 4xx, signing each attempt anew.
    async fn deliver(
        &self,
        provider: oncely_webhook::Provider,
        id: &str,
        body: &str,
        signer: &Verifier,
    ) -> Answer {
        let url = format!("{}/webhooks/{}", self.base, source_name(provider));
        let started = Instant::now();
        for attempt in 0u32.. {
            if attempt > 0 {
                self.retries.fetch_add(1, Ordering::Relaxed);
                let pause = Duration::from_millis(25 << attempt.min(4));
                tokio::time::sleep(pause).await;
            }
            self.requests.fetch_add(1, Ordering::Relaxed);
            let headers = signer.sign(id, body.as_bytes(), SystemTime::now());
            let sent = self
                .client
                .post(&url)
                .headers(headers)
                .body(body.to_owned())
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => {
                    let status = r.status().as_u16();
                    if r.text().await.is_ok_and(|t| t.contains("\"duplicate\"")) {
                        self.duplicates.fetch_add(1, Ordering::Relaxed);
                    }
                    return Answer::Accepted(status);
                }
                Ok(r) if r.status().is_client_error() => {
                    return Answer::Refused(r.status().as_u16());
                }
                Ok(_) => self.unavailable.fetch_add(1, Ordering::Relaxed),
                Err(e) if e.is_timeout() => self.timeouts.fetch_add(1, Ordering::Relaxed),
                Err(_) => self.connection_errors.fetch_add(1, Ordering::Relaxed),
            };
            if started.elapsed() > GIVE_UP {
                break;
            }
        }
        Answer::GaveUp
    }
}
