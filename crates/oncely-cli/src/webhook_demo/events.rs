//! What the demo's senders send: per source a set of events (ids as each provider makes
//! them), some sent as concurrent copies, some followed by a changed body under the same
//! id, some slow enough to time the sender out; and forged requests. Secrets for both sides.

use oncely_webhook::{Provider, Verifier};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::{SystemTime, UNIX_EPOCH};

/// Every source of the demo, in the report's order.
pub const PROVIDERS: [Provider; 3] = [
    Provider::StandardWebhooks,
    Provider::Stripe,
    Provider::GitHub,
];

/// The secrets each source holds: the current one and the one being rotated out (a sender
/// signing with either passes).
fn secrets(provider: Provider) -> [&'static str; 2] {
    match provider {
        Provider::StandardWebhooks => [
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_b25jZWx5LXdlYmhvb2stZGVtby1wcmV2aW91cw==",
        ],
        Provider::Stripe => ["whsec_demo_stripe_current", "whsec_demo_stripe_previous"],
        Provider::GitHub => [
            "demo github secret (current)",
            "demo github secret (previous)",
        ],
    }
}

/// A secret no source holds: what the forger signs with.
fn forged_secret(provider: Provider) -> &'static str {
    match provider {
        Provider::StandardWebhooks => "whsec_Zm9yZ2VkLWZvcmdlZC1mb3JnZWQ=",
        Provider::Stripe => "whsec_forged",
        Provider::GitHub => "not the secret",
    }
}

fn verifier(provider: Provider, secrets: &[&str]) -> Verifier {
    let verifier = match provider {
        Provider::StandardWebhooks => Verifier::standard_webhooks(secrets),
        Provider::Stripe => Verifier::stripe(secrets),
        Provider::GitHub => Verifier::github(secrets),
    };
    verifier.expect("the demo's secrets are valid")
}

/// The receiver's verifier for `provider`: both secrets.
pub fn receiver(provider: Provider) -> Verifier {
    verifier(provider, &secrets(provider))
}

/// The consumer name (the inbox key's first half) and the path of `provider`'s source.
pub fn source_name(provider: Provider) -> &'static str {
    match provider {
        Provider::StandardWebhooks => "standard",
        Provider::Stripe => "stripe",
        Provider::GitHub => "github",
    }
}

/// One event a sender delivers until it is accepted.
#[derive(Debug, Clone)]
pub struct Event {
    pub provider: Provider,
    pub id: String,
    pub account: String,
    pub amount: i64,
    /// Copies sent at once (a sender retrying while the first is in flight).
    pub copies: usize,
    /// After acceptance, the same id with another amount (a conflict).
    pub changed: bool,
    /// The handler holds its transaction this long (past the sender's timeout) before
    /// the commit; 0: a few milliseconds at random.
    pub slow_ms: u64,
    /// Signs with the secret being rotated out.
    pub old_secret: bool,
    /// When the event happened (Stripe's `created`), fixed once: a retry is the same body.
    pub created: u64,
}

impl Event {
    /// The body sent first.
    pub fn body(&self) -> String {
        self.body_with(self.amount)
    }

    /// The body of the changed copy: the same id, one more credit.
    pub fn changed_body(&self) -> String {
        self.body_with(self.amount + 1)
    }

    /// The JSON body as `provider` would shape it, carrying the demo's credit.
    fn body_with(&self, amount: i64) -> String {
        let credit = format!(
            r#""account":"{}","amount":{amount},"slow_ms":{}"#,
            self.account, self.slow_ms
        );
        match self.provider {
            Provider::StandardWebhooks => format!(r#"{{"type":"credit.added",{credit}}}"#),
            Provider::Stripe => format!(
                r#"{{"id":"{}","object":"event","type":"credit.added","created":{},{credit}}}"#,
                self.id, self.created
            ),
            Provider::GitHub => format!(r#"{{"action":"credited",{credit}}}"#),
        }
    }

    /// The sender's signer for this event.
    pub fn signer(&self) -> Verifier {
        let [current, previous] = secrets(self.provider);
        verifier(
            self.provider,
            &[if self.old_secret { previous } else { current }],
        )
    }
}

/// A request signed with a secret the receiver does not hold.
#[derive(Debug, Clone)]
pub struct Forged {
    pub provider: Provider,
    pub id: String,
}

impl Forged {
    pub fn body(&self) -> String {
        Event {
            provider: self.provider,
            id: self.id.clone(),
            account: "acct-forged".into(),
            amount: 1_000,
            copies: 1,
            changed: false,
            slow_ms: 0,
            old_secret: false,
            created: now_secs(),
        }
        .body()
    }

    pub fn signer(&self) -> Verifier {
        verifier(self.provider, &[forged_secret(self.provider)])
    }
}

/// Everything the senders send, drawn from one seed.
#[derive(Debug, Clone)]
pub struct Plan {
    pub events: Vec<Event>,
    pub forged: Vec<Forged>,
}

impl Plan {
    /// `per_source` events for each provider: 25% sent as 2–3 concurrent copies, 5% followed
    /// by a changed body, 1% slower than the sender's timeout, half signed with the previous
    /// secret; and one forged request per 20 events. Ids as each provider makes them:
    /// `msg_<uuid>` (Standard Webhooks), `evt_<uuid>` (Stripe), a UUID (GitHub).
    pub fn generate(per_source: usize, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let uuid =
            |rng: &mut ChaCha8Rng| uuid::Builder::from_random_bytes(rng.random()).into_uuid();
        let mut plan = Plan {
            events: Vec::new(),
            forged: Vec::new(),
        };
        for n in 0..per_source {
            for provider in PROVIDERS {
                let u = uuid(&mut rng);
                let id = match provider {
                    Provider::StandardWebhooks => format!("msg_{}", u.simple()),
                    Provider::Stripe => format!("evt_{}", u.simple()),
                    Provider::GitHub => u.to_string(),
                };
                plan.events.push(Event {
                    provider,
                    id,
                    account: format!("acct-{}", rng.random_range(0..20)),
                    amount: rng.random_range(1..=100),
                    copies: if rng.random_bool(0.25) {
                        rng.random_range(2..=3)
                    } else {
                        1
                    },
                    changed: rng.random_bool(0.05),
                    slow_ms: if rng.random_bool(0.01) { 1_500 } else { 0 },
                    old_secret: rng.random_bool(0.5),
                    created: now_secs(),
                });
                if n % 20 == 19 {
                    plan.forged.push(Forged {
                        provider,
                        id: format!("forged-{}", uuid(&mut rng)),
                    });
                }
            }
        }
        plan
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}
