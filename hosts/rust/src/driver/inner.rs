//! The driver as its handles, its stepper, its executions and its runs share it: its one lock,
//! the stepper's wake-up, how far the snapshots got, and what executions report (questions
//! and ends).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::{Notify, watch};

use super::batch::RunKey;
use super::errors::{ExecError, FlushError, PersistError};
use super::options::Persist;
use super::outcome::{EntryOutcome, Status};
use super::state::{Pending, State};
use crate::clock::Clock;

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
