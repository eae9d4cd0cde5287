//! The driver's state behind its one lock: the scheduler, the live batches, the inputs of the
//! next step, and what the step under way hands out; and how batches leave it (rejected,
//! retired, or all closed with the driver). Every method here is synchronous and quick;
//! nothing calls host code while the lock is held.

use std::collections::{BTreeMap, HashMap};
use std::sync::Weak;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use turnstile_engine::schedule::{HostSettle, Releases, Scheduler};

use super::batch::Batch;
use super::errors::{Abort, PauseError, RunError};
use super::inner::Inner;
use super::options::{Call, OnOutcome};
use super::outcome::{EntryOutcome, Outcomes};
use crate::clock::Clock;

/// What a batch's [`Run`](super::Run) resolves with.
pub(crate) type RunResult = Result<Outcomes, RunError>;

/// A host's pause or lift, with whom to tell.
pub(crate) struct PauseInput {
    pub(crate) key: String,
    /// `None` for a lift.
    pub(crate) until: Option<u64>,
    pub(crate) done: oneshot::Sender<Result<(), PauseError>>,
}

/// The inputs of the next step; each entry input with its batch's first entry.
#[derive(Default)]
pub(crate) struct Pending {
    pub(crate) approve: Vec<(u64, u64)>,
    pub(crate) granted: Vec<(u64, u64)>,
    pub(crate) settle: Vec<(u64, HostSettle, u64)>,
    pub(crate) denied: Vec<(u64, u64)>,
    pub(crate) ask: Vec<(u64, u64)>,
    pub(crate) answer: Vec<(u64, u64)>,
    pub(crate) ok: Vec<(u64, u64)>,
    pub(crate) failed: Vec<(u64, u64)>,
    pub(crate) retry: Vec<(u64, u64, u64)>,
    pub(crate) cancel: Vec<(u64, u64)>,
    pub(crate) pause: Vec<PauseInput>,
}

impl Pending {
    pub(crate) fn is_empty(&self) -> bool {
        !self.changes_state()
            && self.denied.is_empty()
            && self.ask.is_empty()
            && self.answer.is_empty()
            && self.pause.is_empty()
    }

    /// Whether the saved state changes with these inputs (all but questions and pauses).
    pub(crate) fn changes_state(&self) -> bool {
        !(self.approve.is_empty()
            && self.settle.is_empty()
            && self.ok.is_empty()
            && self.failed.is_empty()
            && self.retry.is_empty()
            && self.cancel.is_empty()
            && self.denied.is_empty()
            && self.granted.is_empty())
    }
}

/// An outcome to hand to the host's hook after the step that took it.
pub(crate) struct Report {
    pub(crate) hook: OnOutcome,
    pub(crate) outcome: EntryOutcome,
    pub(crate) call: Call,
}

/// A retired batch kept in the snapshot until `forget`.
pub(crate) struct Retired {
    pub(crate) batch: u64,
    pub(crate) text: String,
}

/// Everything behind the lock.
pub(crate) struct State {
    pub(crate) scheduler: Scheduler,
    pub(crate) out: Releases,
    pub(crate) pending: Pending,
    /// Live batches by first entry.
    pub(crate) batches: BTreeMap<u64, Batch>,
    /// Batch number to first entry.
    pub(crate) by_batch: HashMap<u64, u64>,
    pub(crate) closed: bool,
    pub(crate) last_now: u64,
    pub(crate) wake_at: Option<u64>,
    pub(crate) serial: u64,
    /// Snapshots the rounds took so far (the last one's number).
    pub(crate) snapshots_taken: u64,
    /// A `forget`, a submission or a `flush` asks for a snapshot: the next step persists.
    pub(crate) dirty: bool,
    pub(crate) retired: Vec<Retired>,
    pub(crate) reports: Vec<Report>,
    pub(crate) starts: Vec<(u64, u32)>,
    pub(crate) retiring: Vec<(Option<oneshot::Sender<RunResult>>, Outcomes)>,
    pub(crate) has_persist: bool,
    /// The driver itself, for what the state hands out (executions, their tasks).
    pub(crate) self_ref: Weak<Inner>,
    /// The runtime the driver was made in: every task of the driver is spawned here, so the
    /// host may call it (`run`, `close`, dropping a `Run`) from outside the runtime's context.
    pub(crate) runtime: Handle,
    /// Entries of shared keys with a permit requested or held, until the engine lists them
    /// in `release` (or a denial, or close).
    pub(crate) holds: HashMap<u64, super::holds::Hold>,
}

impl State {
    pub(crate) fn new(
        scheduler: Scheduler,
        has_persist: bool,
        self_ref: Weak<Inner>,
        runtime: Handle,
    ) -> Self {
        Self {
            scheduler,
            out: Releases::default(),
            pending: Pending::default(),
            batches: BTreeMap::new(),
            by_batch: HashMap::new(),
            closed: false,
            last_now: 0,
            wake_at: None,
            serial: 0,
            snapshots_taken: 0,
            dirty: false,
            retired: Vec::new(),
            reports: Vec::new(),
            starts: Vec::new(),
            retiring: Vec::new(),
            has_persist,
            self_ref,
            runtime,
            holds: HashMap::new(),
        }
    }

    /// The clock in whole ms, never below a `now` given before.
    pub(crate) fn now(&mut self, clock: &dyn Clock) -> u64 {
        self.last_now = self.last_now.max(clock.now_ms());
        self.last_now
    }

    /// The live batch holding an entry: its first entry.
    pub(crate) fn find(&self, entry: u64) -> Option<u64> {
        let (&first, batch) = self.batches.range(..=entry).next_back()?;
        (entry - first < u64::from(batch.count())).then_some(first)
    }

    pub(crate) fn insert(&mut self, batch: Batch) {
        self.by_batch.insert(batch.id, batch.first);
        self.batches.insert(batch.first, batch);
    }

    pub(crate) fn reject(batch: &mut Batch, error: RunError) {
        if batch.done {
            return;
        }
        batch.done = true;
        batch.done_signal = None;
        if let Some(tx) = batch.tx.take() {
            let _ = tx.send(Err(error));
        }
    }

    pub(crate) fn abort_running(batch: &mut Batch, now: u64, reason: &Abort) {
        batch.abort_reason.get_or_insert_with(|| reason.clone());
        for run in batch.running.iter_mut().flatten() {
            if !run.ended {
                run.abort(now, reason.clone());
            }
        }
    }

    /// Closes the driver: every live batch fails with `error`, its executions are aborted,
    /// pauses waiting for a step fail.
    pub(crate) fn close(&mut self, error: &RunError, now: u64) {
        if self.closed {
            return;
        }
        self.closed = true;
        let abort = error.as_abort();
        for batch in self.batches.values_mut() {
            Self::reject(batch, error.clone());
            Self::abort_running(batch, now, &abort);
            // Nothing steps a closed driver: a dropped run's batch no longer keeps it alive
            // (the caller holds the driver, so this is never its last reference).
            batch.keep_alive = None;
        }
        self.drop_holds();
        for p in std::mem::take(&mut self.pending.pause) {
            let _ = p.done.send(Err(PauseError::Closed));
        }
        self.pending = Pending::default();
        self.wake_at = None;
    }

    /// A batch left the scheduler: it resolves once the step's snapshot is persisted.
    pub(crate) fn retire(&mut self, id: u64) {
        let Some(first) = self.by_batch.remove(&id) else {
            return;
        };
        let Some(mut batch) = self.batches.remove(&first) else {
            return;
        };
        batch.done_signal = None;
        if batch.done {
            return;
        }
        batch.done = true;
        let Some(outcomes) = batch.call_outcomes() else {
            Self::reject(
                &mut batch,
                RunError::Bug(format!("batch {id} retired with an entry unanswered")),
            );
            return;
        };
        if self.has_persist && !batch.unwatched {
            self.retired.push(Retired {
                batch: id,
                text: super::snapshot::retired_json(id, &outcomes),
            });
        }
        self.retiring.push((batch.tx.take(), outcomes));
    }

    pub(crate) fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }
}
