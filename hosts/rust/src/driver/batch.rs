//! One live batch's bookkeeping: its calls and entries, each started execution, and the
//! entry-level changes the state makes to it (outcomes recorded, settlements, cancellation,
//! failure, one execution's abort).

use std::sync::Arc;

use tokio::sync::{oneshot, watch};
use turnstile_engine::schedule::{HostSettle, Reason, explain};

use super::errors::{Abort, ExecError, HostError, RunError};
use super::inner::Inner;
use super::options::{Call, Decide, Execute, OnOutcome};
use super::outcome::{CallOutcome, EntryOutcome, Outcomes, Status};
use super::state::{Report, RunResult, State};

/// Names one start of an entry: its batch's first entry, its offset, and the start's serial
/// (an entry runs again after a rate limit: a late report of an earlier run is ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunKey {
    pub(crate) first: u64,
    pub(crate) offset: u32,
    pub(crate) serial: u64,
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
    /// A batch as the engine just took it: its entries laid out from `calls`, none decided,
    /// started or ended; no `decide`, `on_outcome` or execution limit (callers set those with
    /// struct update syntax).
    pub(crate) fn new(
        id: u64,
        first: u64,
        calls: Vec<Call>,
        execute: Execute,
        tx: oneshot::Sender<RunResult>,
    ) -> Self {
        let at = layout(&calls);
        let count = at.len();
        Self {
            id,
            first,
            calls,
            at,
            execute,
            decide: None,
            on_outcome: None,
            outcomes: vec![None; count],
            running: (0..count).map(|_| None).collect(),
            cancelled: false,
            failed: false,
            done: false,
            execution_ms: None,
            abort_reason: None,
            decide_error: None,
            decided: 0,
            tx: Some(tx),
            unwatched: false,
            done_signal: None,
            keep_alive: None,
        }
    }

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

impl State {
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
}

/// Each entry's call index and operation, in written order.
fn layout(calls: &[Call]) -> Vec<(u32, Option<u32>)> {
    let mut at = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        match c.operations {
            Some(n) => at.extend((0..n).map(|op| (i as u32, Some(op)))),
            None => at.push((i as u32, None)),
        }
    }
    at
}
