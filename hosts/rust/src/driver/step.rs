//! The stepper: one task per driver that owns the scheduler's rounds. Everything the batches
//! report until it runs (approvals, settlements, questions, ends, cancellations, pauses) goes
//! into ONE round; the round's actions are performed in the engine's order; with `persist`, the
//! snapshot is saved before anything of the round reaches the host (hosts/DRIVERS.md, the four
//! rules), one `persist` at a time.

use std::sync::{Arc, Weak};

use tokio::sync::{Notify, oneshot, watch};
use turnstile_engine::schedule::{
    AbortCause, BatchId, End, EntryId, Input, InputErrorCode, Reason, Refusal,
};

use super::batch::{RunKey, RunState};
use super::errors::{ExecError, PauseError, PersistError, RunError};
use super::execution::Execution;
use super::inner::Inner;
use super::outcome::{EntryOutcome, Outcomes, Status};
use super::state::{Pending, Report, RunResult, State};
use crate::clock::{Clock, Sleep};

/// What a refused input was, for what its refusal means.
#[derive(Clone, Copy)]
enum Kind {
    Granted(u64),
    Denied,
    Other,
}

/// What one round hands to the host once its snapshot is saved.
struct Step {
    /// The snapshot's number and text.
    snapshot: Option<(u64, String)>,
    reports: Vec<Report>,
    starts: Vec<(u64, u32)>,
    retiring: Vec<(Option<oneshot::Sender<RunResult>>, Outcomes)>,
}

/// The stepper's loop: waits for inputs or the engine's wake-up, runs a round, persists,
/// hands out. Ends when the driver is closed or dropped.
pub(crate) async fn stepper(driver: Weak<Inner>, wake: Arc<Notify>, clock: Arc<dyn Clock>) {
    // However it ends (returned, or dropped with its runtime), `flush` learns of it.
    let _stopped = Stopped(driver.clone());
    // The one timer, for the latest `wake-at`.
    let mut timer: Option<(u64, Sleep)> = None;
    loop {
        match &mut timer {
            Some((_, sleep)) => {
                tokio::select! {
                    () = wake.notified() => {}
                    () = sleep.as_mut() => timer = None,
                }
            }
            None => wake.notified().await,
        }
        let Some(inner) = driver.upgrade() else {
            return;
        };
        let (step, wake_at) = {
            let mut s = inner.lock();
            if s.closed {
                return;
            }
            let step = inner.round(&mut s);
            // What the round queued itself (a cancellation after a refusal) goes in the next.
            if !s.pending.is_empty() {
                wake.notify_one();
            }
            (step, s.wake_at)
        };
        // Armed with the round, before anything it starts sets a timer of its own.
        if timer.as_ref().map(|t| t.0) != wake_at {
            timer = wake_at.map(|at| (at, clock.sleep_until(at)));
        }
        let Some(mut step) = step else { continue };
        if let (Some((number, text)), Some(persist)) = (step.snapshot.take(), inner.persist.clone())
        {
            // A task of its own, as `execute` and `decide` are: a panic in the host's `persist`
            // is a failed `persist`, never the stepper's end.
            let runtime = inner.lock().runtime.clone();
            let saved = match runtime.spawn(async move { (persist.0)(text).await }).await {
                Ok(saved) => saved,
                Err(e) if e.is_panic() => {
                    Err(format!("persist panicked: {}", panic_message(e.into_panic())).into())
                }
                // The runtime is shutting down.
                Err(_) => return,
            };
            if let Err(cause) = saved {
                inner.persist_failed(cause, step.retiring);
                return;
            }
            inner
                .persisted
                .send_modify(|p| p.saved = p.saved.max(number));
        }
        inner.hand_out(step);
    }
}

/// Tells [`Driver::flush`](super::Driver::flush) the stepper ended.
struct Stopped(Weak<Inner>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner.persisted.send_modify(|p| p.stopped = true);
        }
    }
}

impl Inner {
    /// One round: the queued inputs, `next_releases`, and the actions performed on the
    /// driver's state. `None` when there is nothing to save or hand out.
    fn round(&self, s: &mut State) -> Option<Step> {
        let now = self.now(s);
        let p = std::mem::take(&mut s.pending);
        let changed = p.changes_state();
        self.dispatch(s, p, now);
        if s.closed {
            return None;
        }
        if s.reports.is_empty()
            && s.starts.is_empty()
            && s.retiring.is_empty()
            && !s.dirty
            && !(changed && s.has_persist)
        {
            return None;
        }
        let snapshot = s.has_persist.then(|| {
            s.dirty = false;
            s.snapshots_taken += 1;
            (s.snapshots_taken, super::snapshot::snapshot(s))
        });
        Some(Step {
            snapshot,
            reports: std::mem::take(&mut s.reports),
            starts: std::mem::take(&mut s.starts),
            retiring: std::mem::take(&mut s.retiring),
        })
    }

    /// Sends the inputs (each judged on its own, at `now`), runs the round and performs its
    /// actions in the engine's order.
    fn dispatch(&self, s: &mut State, p: Pending, now: u64) {
        let mut errors: Vec<(Refusal, u64, Kind)> = Vec::new();
        // A clock that went back is refused here and again by the round, which reports it.
        let _ = s.scheduler.observe_clock(now);
        let sched = &mut s.scheduler;
        let mut event = |input: Input<'_>, owner: u64, errors: &mut Vec<(Refusal, u64, Kind)>| {
            if let Err(r) = sched.on_event(input) {
                let kind = match input {
                    Input::Granted(e) => Kind::Granted(e.0),
                    Input::Denied(_) => Kind::Denied,
                    _ => Kind::Other,
                };
                errors.push((r, owner, kind));
            }
        };
        for &(e, owner) in &p.approve {
            event(Input::Approve(EntryId(e)), owner, &mut errors);
        }
        for &(e, how, owner) in &p.settle {
            event(Input::NotRun(EntryId(e), how), owner, &mut errors);
        }
        for &(e, owner) in &p.granted {
            event(Input::Granted(EntryId(e)), owner, &mut errors);
        }
        for &(e, owner) in &p.denied {
            event(Input::Denied(EntryId(e)), owner, &mut errors);
        }
        for &(e, owner) in &p.ask {
            event(Input::Ask(EntryId(e)), owner, &mut errors);
        }
        for &(e, owner) in &p.answer {
            event(Input::Answer(EntryId(e)), owner, &mut errors);
        }
        let ends = p.ok.iter().map(|&(e, o)| (e, End::Ok, o));
        let failed = p.failed.iter().map(|&(e, o)| (e, End::Failed, o));
        let retry = p
            .retry
            .iter()
            .map(|&(e, until, o)| (e, End::RateLimited(until), o));
        for (e, end, owner) in ends.chain(failed).chain(retry) {
            if let Err(r) = s.scheduler.on_ended(EntryId(e), end) {
                errors.push((r, owner, Kind::Other));
            }
        }
        for &(b, owner) in &p.cancel {
            if let Err(r) = s.scheduler.on_event(Input::Cancel(BatchId(b)))
                && !matches!(
                    r.code,
                    InputErrorCode::BatchCancelled | InputErrorCode::UnknownBatch
                )
            {
                errors.push((r, owner, Kind::Other));
            }
        }
        let mut pauses = Vec::new();
        for pause in p.pause {
            let input = match pause.until {
                Some(until) => Input::Pause(&pause.key, until),
                None => Input::LiftPause(&pause.key),
            };
            let result = s.scheduler.on_event(input).map_err(PauseError::Refused);
            pauses.push((pause.done, result));
        }
        let mut out = std::mem::take(&mut s.out);
        s.scheduler.next_releases(Some(now), &mut out);
        s.wake_at = out.wake_at;
        self.perform(s, &out, &p.retry, errors, now);
        for (done, result) in pauses {
            let _ = done.send(result);
        }
        s.out = out;
    }

    /// The round's actions: aborts, settlements, refusals, starts, retirements.
    fn perform(
        &self,
        s: &mut State,
        out: &turnstile_engine::schedule::Releases,
        retried: &[(u64, u64, u64)],
        errors: Vec<(Refusal, u64, Kind)>,
        now: u64,
    ) {
        for a in &out.abort {
            s.abort_entry(a.entry.0, now, a.cause == AbortCause::Deadline);
        }
        for settled in &out.settled {
            let entry = settled.entry.0;
            let Some(first) = s.find(entry) else { continue };
            let offset = (entry - first) as u32;
            let Some(batch) = s.batches.get_mut(&first) else {
                continue;
            };
            let run = batch.running[offset as usize].as_mut();
            let limited = run.and_then(|run| {
                if matches!(settled.reason, Reason::TimedOut { .. }) {
                    // Given up after its abort grace: whatever it does later is ignored.
                    run.ended = true;
                }
                run.limited.clone()
            });
            let label = batch.label(offset);
            if matches!(settled.reason, Reason::TimedOut { .. }) {
                s.detach_hold(entry);
            }
            // A cancelled batch's execution that ended with a 429 in this round: it ran, its
            // error is its outcome.
            if let Some(limited) = limited
                && settled.reason == Reason::Cancelled
                && retried.iter().any(|r| r.0 == entry)
            {
                let outcome = EntryOutcome {
                    entry,
                    label,
                    status: Status::Cancelled(Err(limited)),
                };
                s.record(first, offset, outcome, true);
                continue;
            }
            let outcome = EntryOutcome {
                entry,
                label,
                status: Status::Settled {
                    reason: settled.reason,
                    message: settled.message.clone(),
                    error: None,
                },
            };
            s.record(first, offset, outcome, true);
        }
        // A shared key's pause goes to its store before any permit goes back.
        for pause in &out.pause_store {
            self.pause_store(s, &pause.key, pause.until.saturating_sub(now));
        }
        for permit in &out.release {
            s.release_hold(permit.entry.0);
        }
        if let Some(refusal) = &out.refused {
            // Something else stepped the scheduler (one driver per scheduler): every live batch
            // fails with the refusal.
            let firsts: Vec<u64> = s.batches.keys().copied().collect();
            for first in firsts {
                s.fail(first, RunError::Refused(refusal.clone()));
            }
        }
        for (refusal, owner, kind) in errors {
            match kind {
                // A permit's answer that raced a cancellation or a stop (the entry was settled
                // and released first) changes nothing; a permit still held is given back.
                Kind::Granted(entry) => s.release_hold(entry),
                Kind::Denied => {}
                Kind::Other => s.fail(owner, RunError::Refused(refusal)),
            }
        }
        for request in &out.acquire {
            if let Some(first) = s.find(request.entry.0) {
                self.acquire(s, first, request);
            }
        }
        for &EntryId(entry) in &out.start {
            if let Some(first) = s.find(entry) {
                s.starts.push((first, (entry - first) as u32));
            }
        }
        for &BatchId(id) in &out.retired {
            s.retire(id);
        }
    }

    /// What a round decided, to the host: outcomes to `on_outcome`, executions started,
    /// retired batches resolved.
    fn hand_out(&self, step: Step) {
        for report in step.reports {
            let Report {
                hook,
                outcome,
                call,
            } = report;
            // A host's hook must not break the driver's round.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                (hook.0)(&outcome, &call);
            }));
        }
        if !step.starts.is_empty() {
            let mut s = self.lock();
            for (first, offset) in step.starts {
                self.start(&mut s, first, offset);
            }
        }
        for (tx, outcomes) in step.retiring {
            if let Some(tx) = tx {
                let _ = tx.send(Ok(outcomes));
            }
        }
    }

    /// Starts one execution as a task of its own (a panic in it is its failure).
    fn start(&self, s: &mut State, first: u64, offset: u32) {
        let closed = s.closed;
        let serial = s.next_serial();
        let Some(batch) = s.batches.get_mut(&first) else {
            return;
        };
        let entry = first + u64::from(offset);
        if batch.cancelled || batch.done || closed {
            // Cancelled (or failed) after the round that released it and before this hand-out:
            // it never runs. Settled cancelled; its slot is handed back (`failed` is its end).
            let outcome = State::settled(entry, batch.label(offset), Reason::Cancelled);
            s.record(first, offset, outcome, true);
            self.push(s, |p| p.failed.push((entry, first)));
            return;
        }
        let (abort, abort_rx) = watch::channel(None);
        batch.running[offset as usize] = Some(RunState {
            serial,
            ended: false,
            aborted: None,
            questions: 0,
            limited: None,
            abort,
        });
        let key = RunKey {
            first,
            offset,
            serial,
        };
        if let Err(lost) = s.hold_for_start(key) {
            // The lease was lost while it waited for earlier entries: it must not run.
            let error = ExecError::Aborted(super::errors::Abort::LeaseLost(
                super::holds::lost_error(&lost),
            ));
            self.end_locked(s, key, Err(error));
            return;
        }
        let Some(batch) = s.batches.get_mut(&first) else {
            return;
        };
        let (call, operation) = batch.at[offset as usize];
        let call = &batch.calls[call as usize];
        let execution = Execution {
            entry,
            label: batch.label(offset),
            call_id: call.id.clone(),
            tool: call.tool.clone(),
            operation,
            arguments: call.arguments.clone(),
            abort: abort_rx,
            driver: s.self_ref.clone(),
            key,
        };
        let execute = batch.execute.clone();
        let driver = s.self_ref.clone();
        let spawner = s.runtime.clone();
        s.runtime.spawn(async move {
            let task = spawner.spawn(async move { (execute.0)(execution).await });
            let result = match task.await {
                Ok(result) => result,
                Err(e) if e.is_panic() => Err(ExecError::Panicked(panic_message(e.into_panic()))),
                // The runtime is shutting down.
                Err(_) => return,
            };
            if let Some(inner) = driver.upgrade() {
                inner.end(key, result);
            }
        });
    }

    /// A failed `persist` breaks the driver loudly: every batch fails with `PersistError`,
    /// running executions are aborted, nothing starts, the driver is closed.
    fn persist_failed(
        &self,
        cause: Box<dyn std::error::Error + Send + Sync>,
        retiring: Vec<(Option<oneshot::Sender<RunResult>>, Outcomes)>,
    ) {
        let failed = PersistError {
            cause: Arc::from(cause),
        };
        self.persisted
            .send_modify(|p| p.failed = Some(failed.clone()));
        let error = RunError::Persist(failed);
        for (tx, _) in retiring {
            if let Some(tx) = tx {
                let _ = tx.send(Err(error.clone()));
            }
        }
        let mut s = self.lock();
        let now = self.now(&mut s);
        s.close(&error, now);
    }
}

/// A panic's message, when it was a string.
pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => payload
            .downcast_ref::<&str>()
            .map_or_else(|| "a panic".to_owned(), |s| (*s).to_owned()),
    }
}
