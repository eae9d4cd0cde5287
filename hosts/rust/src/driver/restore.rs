//! Restart: a snapshot resumed under a new driver (hosts/DRIVERS.md, "Persistence").

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::oneshot;
use turnstile_engine::schedule::{
    BatchId, Outcome, Reason, Saved, SavedBatch, Scheduler, State as EntryState, Unrestored,
};

use super::batch::Batch;
use super::errors::{ExecError, ResumeError};
use super::inner::Inner;
use super::options::{Call, ResumeOptions};
use super::outcome::{EntryOutcome, Status};
use super::snapshot::{Snapshot, host_error, value_json};
use super::state::{Retired, State};
use super::{Driver, Run};

/// What [`Driver::resume`] gives back: the driver, every saved batch as a [`Run`] (retired
/// ones first, resolving at once with their saved outcomes, then live ones, in the
/// snapshot's order), and the calls the engine could not restore.
#[derive(Debug)]
pub struct Resumed {
    /// The new driver.
    pub driver: Driver,
    /// Every saved batch.
    pub batches: Vec<Run>,
    /// Calls the engine could not restore (the host answers them).
    pub unrestored: Vec<Unrestored>,
}

pub(crate) fn resume(
    policy: &super::Policy,
    text: &str,
    options: ResumeOptions,
) -> Result<Resumed, ResumeError> {
    let snapshot = Snapshot::parse(text)?;
    let (scheduler, unrestored) =
        Scheduler::resume(policy.inner.clone(), &snapshot.state, options.started)
            .map_err(ResumeError::State)?;
    let driver = Driver::with_scheduler(policy, scheduler, options.driver.clone())
        .map_err(ResumeError::Driver)?;
    let ended: HashMap<u64, &Value> = snapshot.ended.iter().map(|(e, v)| (*e, v)).collect();
    let mut batches = Vec::new();
    let inner = driver.inner.clone();
    for (batch, outcomes, saved) in snapshot.retired {
        if inner.persist.is_some() {
            let mut text = String::new();
            value_json(&mut text, &saved);
            inner.lock().retired.push(Retired { batch, text });
        }
        // Its outcomes are reported again (the host cannot know which it saw before the
        // crash), then it resolves.
        let (tx, rx) = oneshot::channel();
        let hook = options.on_outcome.clone();
        let runtime = inner.lock().runtime.clone();
        runtime.spawn(async move {
            if let Some(hook) = hook {
                for call in &outcomes.calls {
                    let c = Call::new(call.id.clone(), call.tool.clone());
                    for o in &call.entries {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            (hook.0)(o, &c)
                        }));
                    }
                }
            }
            let _ = tx.send(Ok(outcomes));
        });
        batches.push(Run::pending(rx, None, None, batch));
    }
    for saved in &snapshot.state.batches {
        batches.push(restore_batch(&inner, saved, &options, &ended));
    }
    inner.wake.notify_one();
    Ok(Resumed {
        driver,
        batches,
        unrestored,
    })
}

/// One live batch of the snapshot, back under the driver.
fn restore_batch(
    inner: &Arc<Inner>,
    saved: &SavedBatch,
    options: &ResumeOptions,
    ended: &HashMap<u64, &Value>,
) -> Run {
    let id = saved.batch.0;
    let first = saved.first.0;
    let calls: Vec<Call> = saved
        .calls
        .iter()
        .map(|c| {
            let mut call = Call::new(c.id.clone(), c.tool.clone());
            call.operations = c.operations;
            if let Some(args) = &options.arguments_of {
                call.arguments = args(id, &call);
            }
            call
        })
        .collect();
    let (tx, rx) = oneshot::channel();
    let mut s = inner.lock();
    let statuses = s.scheduler.inspect(BatchId(id));
    let batch = Batch {
        decide: options.decide.clone(),
        on_outcome: options.on_outcome.clone(),
        cancelled: saved.cancelled,
        execution_ms: saved.limits.execution_ms,
        ..Batch::new(id, first, calls, options.execute.clone(), tx)
    };
    let count = batch.count();
    s.insert(batch);
    let mut pending = Vec::new();
    for offset in 0..count {
        let Some(batch) = s.batches.get(&first) else {
            break;
        };
        let (call, op) = batch.at[offset as usize];
        let entry = first + u64::from(offset);
        let label = batch.label(offset);
        let from_save = saved.calls[call as usize]
            .entries
            .iter()
            .find(|(o, _)| *o == op.unwrap_or(0))
            .map(|&(_, state)| state);
        match from_save {
            Some(Saved::Ended(outcome)) => {
                let status =
                    restored_status(ended.get(&entry).copied(), outcome, saved.cancelled, entry);
                let o = EntryOutcome {
                    entry,
                    label,
                    status,
                };
                s.record(first, offset, o, true);
            }
            Some(Saved::Settled(reason)) => {
                s.record(first, offset, State::settled(entry, label, reason), true);
            }
            _ => match &statuses {
                // Nothing of the batch is live (every call unrestored): interrupted.
                None => s.record(
                    first,
                    offset,
                    State::settled(entry, label, Reason::Interrupted),
                    false,
                ),
                Some(statuses) => {
                    let live = statuses.get(offset as usize).is_some_and(|st| {
                        !matches!(st.state, EntryState::Settled(_) | EntryState::Ended(_))
                    });
                    if live {
                        pending.push(offset);
                    }
                    // Else settled by the resume itself (interrupted): the first round reports it.
                }
            },
        }
    }
    if statuses.is_none() {
        if let Some(mut batch) = s.batches.remove(&first) {
            s.by_batch.remove(&id);
            batch.done = true;
            let outcomes = batch.call_outcomes();
            if let (Some(tx), Some(outcomes)) = (batch.tx.take(), outcomes) {
                let _ = tx.send(Ok(outcomes));
            }
        }
        return Run::pending(rx, None, None, id);
    }
    if !pending.is_empty() {
        inner.begin(&mut s, first, Some(pending), options.cancel.clone());
    }
    Run::pending(rx, Some(inner.clone()), Some(first), id)
}

/// An ended entry's saved value (or error) as its outcome.
fn restored_status(kept: Option<&Value>, outcome: Outcome, cancelled: bool, entry: u64) -> Status {
    let value = kept
        .and_then(|k| k.get("value"))
        .cloned()
        .unwrap_or(Value::Null);
    let error = kept.and_then(|k| k.get("error")).map(|e| {
        host_error(e, &format!("snapshot.ended[\"{entry}\"].error"))
            .map_or_else(|m| ExecError::failed("Error", m), ExecError::Failed)
    });
    match (cancelled, outcome, error) {
        (true, _, Some(e)) => Status::Cancelled(Err(e)),
        (true, _, None) => Status::Cancelled(Ok(value)),
        (false, Outcome::Ok, _) => Status::Ok(value),
        (false, Outcome::Failed, e) => {
            Status::Failed(e.unwrap_or_else(|| ExecError::failed("Error", "no error was saved")))
        }
    }
}
