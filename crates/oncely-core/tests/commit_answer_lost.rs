//! A commit whose answer is lost after it landed (the connection drops between COMMIT and
//! its reply) on the last attempt: the runtime must not dead-letter `attempts_exhausted` a
//! message whose effect is committed, not even when the store cannot answer at once whether
//! the commit landed. Found by oncely-sim (seeds 419 and 145488; docs/testing.md).

use oncely_core::{
    Claim, Consumer, ConsumerName, DeadLetter, Envelope, Error, Handled, Handler, MemorySource,
    MessageId, Outcome, PayloadHash, RawEnvelope, Result, RetryPolicy, Source, Store,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Tables {
    inbox: HashMap<String, PayloadHash>,
    effects: Vec<String>,
    dead_letters: Vec<String>,
}

/// Commits land; while `lose_answers` is on, each commit then answers a transient error.
#[derive(Clone, Default)]
struct LostAnswers {
    tables: Arc<Mutex<Tables>>,
    lose_answers: Arc<AtomicBool>,
    /// Commits fail for real (rolled back) instead.
    fail_commits: Arc<AtomicBool>,
    /// Inbox reads that fail (the store unavailable) before one answers.
    failing_reads: Arc<AtomicU32>,
}

#[derive(Default)]
struct Tx {
    claims: Vec<(String, PayloadHash)>,
    effects: Vec<String>,
}

impl Store for LostAnswers {
    type Tx = Tx;

    async fn begin(&self) -> Result<Tx> {
        Ok(Tx::default())
    }

    async fn claim(
        &self,
        tx: &mut Tx,
        _consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<Claim> {
        Ok(match self.tables.lock().unwrap().inbox.get(id.as_str()) {
            None => {
                tx.claims.push((id.as_str().to_owned(), hash));
                Claim::Fresh
            }
            Some(stored) if *stored == hash => Claim::Duplicate,
            Some(stored) => Claim::Conflict { stored: *stored },
        })
    }

    async fn committed_claim(
        &self,
        _consumer: &ConsumerName,
        id: &MessageId,
        hash: PayloadHash,
    ) -> Result<bool> {
        let left = self.failing_reads.load(Relaxed);
        if left > 0 {
            self.failing_reads.store(left - 1, Relaxed);
            return Err(Error::unavailable("connection refused"));
        }
        Ok(self.tables.lock().unwrap().inbox.get(id.as_str()) == Some(&hash))
    }

    async fn commit(&self, tx: Tx) -> Result<()> {
        if self.fail_commits.load(Relaxed) {
            return Err(Error::transient("could not serialize access (rolled back)"));
        }
        let mut t = self.tables.lock().unwrap();
        t.inbox.extend(tx.claims);
        t.effects.extend(tx.effects);
        if self.lose_answers.load(Relaxed) {
            return Err(Error::transient("connection lost after COMMIT"));
        }
        Ok(())
    }

    async fn rollback(&self, _tx: Tx) -> Result<()> {
        Ok(())
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<()> {
        let reason = letter.reason.code().to_owned();
        self.tables.lock().unwrap().dead_letters.push(reason);
        Ok(())
    }
}

struct Effect;

impl Handler<Tx> for Effect {
    async fn handle(&self, tx: &mut Tx, message: &Envelope) -> Result<Handled> {
        tx.effects.push(message.id().as_str().to_owned());
        Ok(Handled::Applied)
    }
}

async fn one_attempt(store: &LostAnswers) -> Outcome {
    let consumer = Consumer::new(ConsumerName::new("c").unwrap(), store.clone(), Effect)
        .retry(RetryPolicy::default().max_attempts(1));
    let mut source = MemorySource::new();
    source.publish(RawEnvelope::new("m-1", "5"));
    let delivery = source.next().await.unwrap().unwrap();
    let outcome = consumer.process(delivery).await;
    assert_eq!(source.unacked(), 0, "the delivery was settled");
    outcome
}

#[tokio::test]
async fn a_last_commit_that_landed_is_acked_not_dead_lettered() {
    let store = LostAnswers::default();
    store.lose_answers.store(true, Relaxed);
    let outcome = one_attempt(&store).await;
    let t = store.tables.lock().unwrap();
    assert!(matches!(outcome, Outcome::Applied), "{outcome:?}");
    assert_eq!(t.effects, vec!["m-1".to_owned()]);
    assert!(t.dead_letters.is_empty(), "{:?}", t.dead_letters);
}

#[tokio::test]
async fn a_last_commit_that_failed_is_still_dead_lettered() {
    let store = LostAnswers::default();
    store.fail_commits.store(true, Relaxed);
    let outcome = one_attempt(&store).await;
    let t = store.tables.lock().unwrap();
    assert!(matches!(outcome, Outcome::DeadLettered(_)), "{outcome:?}");
    assert!(t.effects.is_empty());
    assert_eq!(t.dead_letters, vec!["attempts_exhausted".to_owned()]);
}

#[tokio::test]
async fn the_inbox_read_waits_for_the_store_rather_than_dead_letter() {
    let store = LostAnswers::default();
    store.lose_answers.store(true, Relaxed);
    store.failing_reads.store(2, Relaxed);
    let outcome = one_attempt(&store).await;
    let t = store.tables.lock().unwrap();
    assert!(matches!(outcome, Outcome::Applied), "{outcome:?}");
    assert_eq!(t.effects, vec!["m-1".to_owned()]);
    assert!(t.dead_letters.is_empty(), "{:?}", t.dead_letters);
    assert_eq!(store.failing_reads.load(Relaxed), 0, "the read was retried");
}
