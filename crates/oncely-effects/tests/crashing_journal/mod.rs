//! Crashes between the steps of the effect journal's `perform`, as a wrapper over the
//! journal's public steps: nothing test-only in `oncely_effects::Journal`. Test code, so it
//! lives here (oncely-testkit cannot depend on oncely-effects: every SQL crate dev-depends on
//! the testkit, which would make a cycle in `cargo publish`'s order); the welcome-email
//! example includes this file by path.
#![allow(dead_code)] // each includer uses part of it

use oncely_core::{Error, Result};
use oncely_effects::{Journal, JournalEntry, Performed, Resolve};
use std::future::Future;
use std::sync::Arc;

/// The steps of [`Journal::perform`] a [`CrashingJournal`] can crash after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JournalStep {
    /// Before anything was recorded.
    BeforeRecord,
    /// `pending` committed, call not made.
    Recorded,
    /// Call returned, `done` not yet recorded.
    Called,
    /// `done` committed.
    Marked,
}

type CrashAt = Arc<dyn Fn(JournalStep, &str) -> bool + Send + Sync>;

/// A [`Journal`] whose [`CrashingJournal::perform`] "crashes" (returns a transient error, as
/// if the process died there) after the steps `crash_at(step, key)` picks. What the crash
/// leaves is what a real one leaves: `pending` rows, a call made and not marked `done`.
///
#[derive(Clone)]
pub struct CrashingJournal {
    journal: Journal,
    crash_at: CrashAt,
}

impl CrashingJournal {
    /// `journal`, crashing after each step for which `crash_at(step, key)` is true.
    pub fn new(
        journal: Journal,
        crash_at: impl Fn(JournalStep, &str) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self {
            journal,
            crash_at: Arc::new(crash_at),
        }
    }

    /// The journal underneath.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    fn crash(&self, step: JournalStep, key: &str) -> Result<()> {
        if (self.crash_at)(step, key) {
            return Err(Error::transient(format!(
                "injected crash at {step:?} of effect {key}"
            )));
        }
        Ok(())
    }

    /// [`Journal::perform`] through its public steps ([`Journal::open`],
    /// [`Journal::start_call`], [`Journal::complete`]), with the crash points between them.
    pub async fn perform<Fut: Future<Output = Result<String>> + Send>(
        &self,
        key: &str,
        kind: &str,
        request: &[u8],
        call: impl FnOnce(JournalEntry) -> Fut + Send,
    ) -> Result<Performed> {
        self.crash(JournalStep::BeforeRecord, key)?;
        let opened = self.journal.open(key, kind, request).await?;
        self.crash(JournalStep::Recorded, key)?;
        let entry = match opened {
            Ok(pending) => pending,
            Err(finished) => return Ok(finished),
        };
        self.journal.start_call(key).await?;
        let provider_ref = call(entry).await?;
        self.crash(JournalStep::Called, key)?;
        let performed = self.journal.complete(key, provider_ref).await?;
        self.crash(JournalStep::Marked, key)?;
        Ok(performed)
    }

    /// `Journal::perform_checked` through its public steps ([`Journal::open`],
    /// [`Journal::check_before_call`], [`Journal::start_call`], [`Journal::complete`]), with
    /// the crash points between them.
    pub async fn perform_checked<R: Resolve>(
        &self,
        key: &str,
        kind: &str,
        request: &[u8],
        resolver: &R,
    ) -> Result<Performed> {
        self.crash(JournalStep::BeforeRecord, key)?;
        let opened = self.journal.open(key, kind, request).await?;
        self.crash(JournalStep::Recorded, key)?;
        let entry = match opened {
            Ok(pending) => pending,
            Err(finished) => return Ok(finished),
        };
        if let Some(resolved) = self.journal.check_before_call(&entry, resolver).await? {
            return Ok(resolved);
        }
        self.journal.start_call(key).await?;
        let provider_ref = resolver.call(&entry).await?;
        self.crash(JournalStep::Called, key)?;
        let performed = self.journal.complete(key, provider_ref).await?;
        self.crash(JournalStep::Marked, key)?;
        Ok(performed)
    }
}
