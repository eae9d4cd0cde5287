//! Execution deadlines and the abort grace: rules the engine keeps, so every host agrees. The
//! host says how long ([`Limits`], per batch, at `submit_batch`); the engine says when, on the
//! host's clock (the `now` of `next_releases`).
//!
//! - An execution of a batch with an execution limit is aborted once it has run that long
//!   since its start (a question does not stop the clock: the limit bounds how long it holds
//!   its slot, and a slot is held through questions). A run again after a rate limit is a new
//!   start with a new deadline. The round reports [`Action::Abort`](super::Action::Abort); the
//!   host stops the execution and reports its end as usual.
//! - Cancelling a batch aborts its running and asking entries the same way (cause `cancel`).
//! - An aborted execution keeps its slot until it ends. With an abort grace, once the grace has
//!   passed since its abort and it has not ended, the scheduler gives up on it: its slot (and a
//!   shared key's permit, through `release`) is freed and it is settled `timed-out`; its late
//!   end, or question, is refused (`given-up`) and changes nothing.
//!
//! One deadline per entry is live at a time: its execution deadline while it runs, its grace
//! while it is aborted. Which one a due item is follows from the entry's state then. Deadlines
//! are a min-heap of `(time, entry)` beside a map of live ones; an item that no longer matches
//! its entry's live deadline is stale and skipped, and once stale items outnumber live ones the
//! heap keeps only the live ones, so each input costs O(1) amortized (O(log n) per push).

use super::lifecycle::{AbortCause, SchedulerEvent};
use super::names::FxHashMap;
use super::stale_heap::StaleHeap;
use super::{Reason, Scheduler, State};

/// How long a batch's executions may take, as the host sets them at `submit_batch`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// An execution is aborted once it has run this many milliseconds; `None`: never.
    pub execution_ms: Option<u32>,
    /// An aborted execution that has not ended this many milliseconds after its abort is
    /// given up (settled `timed-out`, its slot freed); `None`: it keeps its slot until it ends.
    pub abort_grace_ms: Option<u32>,
}

/// Live deadlines, earliest first; stale heap items are skipped.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    heap: StaleHeap<u64>,
    /// Entry to its one live deadline.
    live: FxHashMap<u64, u64>,
}

impl Deadlines {
    /// Sets entry `e`'s live deadline to `at`, replacing any other.
    fn arm(&mut self, e: u64, at: u64) {
        self.live.insert(e, at);
        let live = &self.live;
        self.heap
            .push(at, e, live.len(), |at, e| live.get(&e) == Some(&at));
    }

    /// Entry `e` has no live deadline any more (its heap item, if any, is stale now).
    pub(crate) fn disarm(&mut self, e: u64) {
        if !self.live.is_empty() {
            self.live.remove(&e);
        }
    }

    /// Removes and returns the earliest live deadline due at `now`.
    fn pop_due(&mut self, now: u64) -> Option<u64> {
        while let Some((at, e)) = self.heap.pop_due(now) {
            if self.live.get(&e) == Some(&at) {
                self.live.remove(&e);
                return Some(e);
            }
        }
        None
    }

    /// The earliest live deadline (stale items at the top are dropped).
    fn next(&mut self) -> Option<u64> {
        let live = &self.live;
        self.heap.first_live(|at, e| live.get(&e) == Some(&at))
    }

    /// How many entries have a live deadline, and how many heap items there are.
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.live.len(), self.heap.len())
    }
}

impl Scheduler {
    /// Entry `index` of batch `slot` just started: its execution deadline, if its batch has
    /// an execution limit.
    pub(super) fn arm_execution(&mut self, slot: u32, index: u32) {
        let batch = self.batches.slot(slot);
        if let Some(ms) = batch.limits.execution_ms {
            let e = batch.first + u64::from(index);
            self.deadlines
                .arm(e, self.now.saturating_add(u64::from(ms)));
        }
    }

    /// Aborts a running or asking entry: the round reports it, and its grace (if its batch
    /// has one) replaces its execution deadline.
    pub(super) fn abort(&mut self, slot: u32, index: u32, cause: AbortCause) {
        self.make(slot, index, SchedulerEvent::Abort(cause));
        let batch = self.batches.slot(slot);
        let e = batch.first + u64::from(index);
        let grace = batch.limits.abort_grace_ms;
        self.aborts.push(e);
        match grace {
            Some(ms) => self
                .deadlines
                .arm(e, self.now.saturating_add(u64::from(ms))),
            None => self.deadlines.disarm(e),
        }
    }

    /// Acts on every deadline due by the clock: a running entry is aborted, an aborted one
    /// given up. Called by `advance`, after the clock moved.
    pub(super) fn expire_deadlines(&mut self) {
        while let Some(e) = self.deadlines.pop_due(self.now) {
            let Some((slot, index)) = self.batches.locate(e) else {
                debug_assert!(false, "deadline of entry {e}, which is not live");
                continue;
            };
            match self.batches.slot(slot).entries[index as usize].life.get() {
                State::Running | State::Asking => self.abort(slot, index, AbortCause::Deadline),
                State::Aborted(cause) => self.give_up(slot, index, cause),
                other => debug_assert!(false, "deadline of entry {e}, which is {other:?}"),
            }
        }
    }

    /// An aborted entry's grace passed: it is settled `timed-out`; its transition's effects
    /// free its slot and permit, report it, and count a deadline's as a failure. Its late end
    /// will be refused.
    fn give_up(&mut self, slot: u32, index: u32, cause: AbortCause) {
        let reason = Reason::TimedOut { cause };
        self.make(slot, index, SchedulerEvent::GiveUp(reason));
    }

    /// The earliest live deadline, for `wake_at`.
    pub(super) fn next_deadline(&mut self) -> Option<u64> {
        self.deadlines.next()
    }
}
