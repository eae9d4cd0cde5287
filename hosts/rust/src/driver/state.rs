//! The driver's state behind its one lock: the scheduler, the live batches, the inputs of the
//! next step, and what the step under way hands out. Every method here is synchronous and
//! quick; nothing calls host code while the lock is held.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use serde_json::Value;
use tokio::runtime::Handle;
use tokio::sync::{Notify, oneshot, watch};
use turnstile_engine::schedule::{HostSettle, Reason, Releases, Scheduler, explain};

use super::errors::{Abort, ExecError, FlushError, HostError, PauseError, PersistError, RunError};
use super::options::{Call, Decide, Execute, OnOutcome, Persist};
use super::outcome::{CallOutcome, EntryOutcome, Outcomes, Status};
use crate::clock::Clock;

/// What a batch's [`Run`](super::Run) resolves with.
pub(crate) type RunResult = Result<Outcomes, RunError>;

/// Names one start of an entry: its batch's first entry, its offset, and the start's serial
/// (an entry runs again after a rate limit: a late report of an earlier run is ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunKey {
    pub(crate) first: u64,
    pub(crate) offset: u32,
    pub(crate) serial: u64,
}

/// The driver, shared by its handles, its stepper, its executions and its runs.
pub(crate) struct Inner {
    pub(crate) state: Mutex<State>,
    /// Wakes the stepper: inputs are queued (a permit is kept while it is busy).
    pub(crate) wake: Arc<Notify>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) persist: Option<Persist>,
    pub(crate) shared: Option<crate::shared::SharedKeys>,
    /// How far the snapshots got (the stepper writes it, [`Driver::flush`](super::Driver::flush)
    /// waits on it).
    pub(crate) persisted: watch::Sender<Persisted>,
    /// The top-level argument names each tool's key templates read (tools with none absent):
    /// a call's arguments go to the engine as these fields only.
    pub(crate) templates: HashMap<String, Vec<String>>,
}

/// How far the driver's snapshots got.
#[derive(Clone, Debug, Default)]
pub(crate) struct Persisted {
    /// The last snapshot `persist` saved, numbered in the order the rounds took them (0: none).
    pub(crate) saved: u64,
    /// The `persist` that failed: the driver broke, nothing is saved any more.
    pub(crate) failed: Option<PersistError>,
    /// The stepper ended (closed, broken, or its runtime shut down): no snapshot is taken.
    pub(crate) stopped: bool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The stepper holds only a weak reference: woken, it finds the driver gone and ends.
        self.wake.notify_one();
    }
}

/// One started execution.
pub(crate) struct RunState {
    pub(crate) serial: u64,
    pub(crate) ended: bool,
    /// When and why its abort was sent.
    pub(crate) aborted: Option<(u64, Abort)>,
    pub(crate) questions: u32,
    /// The rate limit it ended with (the engine decides what becomes of the entry).
    pub(crate) limited: Option<ExecError>,
    pub(crate) abort: watch::Sender<Option<Abort>>,
}

impl RunState {
    pub(crate) fn abort(&mut self, now: u64, reason: Abort) {
        if self.aborted.is_some() || self.ended {
            return;
        }
        self.aborted = Some((now, reason.clone()));
        self.abort.send_replace(Some(reason));
    }
}

/// One live batch.
pub(crate) struct Batch {
    pub(crate) id: u64,
    pub(crate) first: u64,
    pub(crate) calls: Vec<Call>,
    /// Each entry's call index and operation.
    pub(crate) at: Vec<(u32, Option<u32>)>,
    pub(crate) execute: Execute,
    pub(crate) decide: Option<Decide>,
    pub(crate) on_outcome: Option<OnOutcome>,
    pub(crate) outcomes: Vec<Option<EntryOutcome>>,
    pub(crate) running: Vec<Option<RunState>>,
    pub(crate) cancelled: bool,
    pub(crate) failed: bool,
    /// Its result was sent (resolved at retirement, or failed at its first error).
    pub(crate) done: bool,
    pub(crate) execution_ms: Option<u32>,
    pub(crate) abort_reason: Option<Abort>,
    pub(crate) decide_error: Option<HostError>,
    /// How far `decide` got (its undecided entries are settled failed when it fails).
    pub(crate) decided: usize,
    pub(crate) tx: Option<oneshot::Sender<RunResult>>,
    /// Its `Run` was dropped: its outcomes are not kept under `retired`.
    pub(crate) unwatched: bool,
    /// Dropped when the batch is done: ends its cancel watcher.
    pub(crate) done_signal: Option<oneshot::Sender<()>>,
    /// The driver, kept alive by a batch whose `Run` was dropped (see `Drop for Run`) until
    /// the batch retires or the driver closes.
    pub(crate) keep_alive: Option<Arc<Inner>>,
}

impl Batch {
    pub(crate) fn count(&self) -> u32 {
        self.at.len() as u32
    }

    pub(crate) fn label(&self, offset: u32) -> String {
        let (call, op) = self.at[offset as usize];
        let id = &self.calls[call as usize].id;
        match op {
            Some(i) => format!("{id}#{i}"),
            None => id.clone(),
        }
    }

    pub(crate) fn call(&self, offset: u32) -> &Call {
        &self.calls[self.at[offset as usize].0 as usize]
    }

    /// Every call's outcomes, or `None` while an entry has none.
    pub(crate) fn call_outcomes(&self) -> Option<Outcomes> {
        let mut calls: Vec<CallOutcome> = self
            .calls
            .iter()
            .map(|c| CallOutcome {
                id: c.id.clone(),
                tool: c.tool.clone(),
                entries: Vec::new(),
            })
            .collect();
        for (offset, &(call, _)) in self.at.iter().enumerate() {
            calls[call as usize]
                .entries
                .push(self.outcomes[offset].clone()?);
        }
        Some(Outcomes {
            batch: self.id,
            calls,
        })
    }
}

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

    /// The one place an entry's outcome is recorded; the first one goes to `on_outcome`
    /// after the step that takes it.
    pub(crate) fn record(
        &mut self,
        first: u64,
        offset: u32,
        mut outcome: EntryOutcome,
        report: bool,
    ) {
        let Some(batch) = self.batches.get_mut(&first) else {
            return;
        };
        if let Status::Settled { error, .. } = &mut outcome.status
            && error.is_none()
        {
            error.clone_from(&batch.decide_error);
        }
        let slot = &mut batch.outcomes[offset as usize];
        let is_first = slot.is_none();
        *slot = Some(outcome.clone());
        if is_first
            && report
            && let Some(hook) = &batch.on_outcome
        {
            self.reports.push(Report {
                hook: hook.clone(),
                outcome,
                call: batch.call(offset).clone(),
            });
        }
    }

    /// A settled outcome with the engine's sentence.
    pub(crate) fn settled(entry: u64, label: String, reason: Reason) -> EntryOutcome {
        let message = explain::settled_sentence(reason, &label);
        EntryOutcome {
            entry,
            label,
            status: Status::Settled {
                reason,
                message,
                error: None,
            },
        }
    }

    /// The host settles an entry (a decision): recorded now, reported to the engine next step.
    pub(crate) fn settle(&mut self, first: u64, offset: u32, how: HostSettle) {
        let Some(batch) = self.batches.get(&first) else {
            return;
        };
        let reason = match how {
            HostSettle::Rejected => Reason::Rejected,
            HostSettle::Skipped => Reason::Skipped,
            HostSettle::Failed => Reason::Failed,
        };
        let outcome = Self::settled(first + u64::from(offset), batch.label(offset), reason);
        self.record(first, offset, outcome, true);
        if !self.closed {
            self.pending
                .settle
                .push((first + u64::from(offset), how, first));
        }
    }

    /// Cancels a batch (once): the engine settles its parked entries and says which running
    /// ones to abort.
    pub(crate) fn cancel(&mut self, first: u64, reason: Abort) {
        let Some(batch) = self.batches.get_mut(&first) else {
            return;
        };
        if batch.cancelled {
            return;
        }
        batch.cancelled = true;
        batch.abort_reason = Some(reason);
        let id = batch.id;
        self.pending.cancel.push((id, first));
    }

    /// Fails a batch with its first error and cancels it, so that its parked entries free
    /// their keys; its running executions still report their ends.
    pub(crate) fn fail(&mut self, first: u64, error: RunError) {
        let Some(batch) = self.batches.get_mut(&first) else {
            return;
        };
        if batch.done {
            return;
        }
        batch.failed = true;
        let abort = error.as_abort();
        Self::reject(batch, error);
        self.cancel(first, abort);
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

    /// Aborts one execution (an `abort` action).
    pub(crate) fn abort_entry(&mut self, entry: u64, now: u64, deadline: bool) {
        let Some(first) = self.find(entry) else {
            return;
        };
        let Some(batch) = self.batches.get_mut(&first) else {
            return;
        };
        let offset = (entry - first) as u32;
        let reason = if deadline {
            Abort::Deadline {
                label: batch.label(offset),
                limit_ms: batch.execution_ms,
            }
        } else {
            batch.abort_reason.clone().unwrap_or(Abort::Cancelled)
        };
        if let Some(run) = batch.running[offset as usize].as_mut() {
            run.abort(now, reason);
        }
    }

    /// A running execution of `key`, when it is the live one.
    pub(crate) fn run_mut(&mut self, key: RunKey) -> Option<&mut RunState> {
        let batch = self.batches.get_mut(&key.first)?;
        batch.running[key.offset as usize]
            .as_mut()
            .filter(|r| r.serial == key.serial)
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

impl Inner {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn now(&self, state: &mut State) -> u64 {
        state.now(&*self.clock)
    }

    /// The snapshot a `flush` waits for: `None` when nothing taken so far is unsaved (or there
    /// is no `persist`); asks the stepper for one when a change is not in a snapshot yet.
    pub(crate) fn flush_target(&self) -> Result<Option<u64>, FlushError> {
        if self.persist.is_none() {
            return Ok(None);
        }
        let mut s = self.lock();
        let (saved, failed) = {
            let p = self.persisted.borrow();
            (p.saved, p.failed.clone())
        };
        if let Some(e) = failed {
            return Err(FlushError::Persist(e));
        }
        if s.dirty || s.pending.changes_state() {
            if s.closed {
                return Err(FlushError::Closed);
            }
            s.dirty = true;
            self.wake.notify_one();
            return Ok(Some(s.snapshots_taken + 1));
        }
        Ok((s.snapshots_taken > saved).then_some(s.snapshots_taken))
    }

    /// Queues an entry input and wakes the stepper.
    pub(crate) fn push(&self, state: &mut State, f: impl FnOnce(&mut Pending)) {
        if state.closed {
            return;
        }
        f(&mut state.pending);
        self.wake.notify_one();
    }

    /// A question was asked: reported when it is the first open one and the execution was not
    /// aborted. Whether it was reported.
    pub(crate) fn ask(&self, key: RunKey) -> bool {
        let mut s = self.lock();
        let entry = key.first + u64::from(key.offset);
        let Some(run) = s.run_mut(key) else {
            return false;
        };
        if run.ended || run.aborted.is_some() {
            return false;
        }
        run.questions += 1;
        if run.questions == 1 {
            // Answered and asked again before the stepper ran: still asking, nothing to send
            // (the engine takes a round's questions before its answers).
            let answers = &mut s.pending.answer;
            if let Some(i) = answers.iter().position(|&(e, _)| e == entry) {
                answers.remove(i);
            } else {
                self.push(&mut s, |p| p.ask.push((entry, key.first)));
            }
        }
        true
    }

    /// A reported question ended: the last one answers, unless the execution ended or was
    /// aborted meanwhile.
    pub(crate) fn answered(&self, key: RunKey) {
        let mut s = self.lock();
        let entry = key.first + u64::from(key.offset);
        let Some(run) = s.run_mut(key) else {
            return;
        };
        run.questions = run.questions.saturating_sub(1);
        if run.questions == 0 && !run.ended && run.aborted.is_none() {
            self.push(&mut s, |p| p.answer.push((entry, key.first)));
        }
    }

    /// An execution ended.
    pub(crate) fn end(&self, key: RunKey, result: Result<Value, ExecError>) {
        let mut s = self.lock();
        self.end_locked(&mut s, key, result);
    }

    pub(crate) fn end_locked(&self, s: &mut State, key: RunKey, result: Result<Value, ExecError>) {
        let now = self.now(s);
        let entry = key.first + u64::from(key.offset);
        let closed = s.closed;
        let Some(run) = s.run_mut(key) else {
            return;
        };
        if run.ended {
            return;
        }
        run.ended = true;
        let limited = match &result {
            Err(ExecError::RateLimited { retry_after_ms }) if !closed => Some(*retry_after_ms),
            _ => None,
        };
        if limited.is_some() {
            run.limited = result.clone().err();
        }
        s.detach_hold(entry);
        if let Some(retry_after_ms) = limited {
            // Not an end: the engine decides (runs it again after the pause, or settles it).
            let until = now.saturating_add(retry_after_ms);
            self.push(s, |p| p.retry.push((entry, until, key.first)));
            return;
        }
        let Some(batch) = s.batches.get(&key.first) else {
            return;
        };
        let label = batch.label(key.offset);
        let ok = result.is_ok();
        let status = if batch.cancelled {
            Status::Cancelled(result)
        } else {
            match result {
                Ok(v) => Status::Ok(v),
                Err(e) => Status::Failed(e),
            }
        };
        let outcome = EntryOutcome {
            entry,
            label,
            status,
        };
        s.record(key.first, key.offset, outcome, true);
        if ok {
            self.push(s, |p| p.ok.push((entry, key.first)));
        } else {
            self.push(s, |p| p.failed.push((entry, key.first)));
        }
    }
}
