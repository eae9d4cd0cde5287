//! The snapshot's JSON text (hosts/DRIVERS.md, "Persistence"), byte for byte what the JS and
//! Python drivers write: fields in a fixed order, no spaces, u64 numbers as decimal strings,
//! every character outside printable ASCII escaped (`\uXXXX`, lowercase, UTF-16 units)
//! (`write.rs`), and its reading back, each field checked with a sentence that names it
//! (`read.rs`).

mod read;
mod write;

use std::fmt::Write as _;

use serde_json::Value;
use turnstile_engine::schedule::{Saved, SavedState};

use super::errors::{HostError, ResumeError};
use super::outcome::{Outcomes, Status};
use super::state::State;

pub(crate) use read::host_error;
use write::{error_field, state_json};
pub(crate) use write::{retired_json, value_json};

/// A snapshot read back: the scheduler's saved state, the saved values of ended entries, and
/// the retired batches not forgotten. [`Snapshot::to_json`] writes the same text again.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The scheduler's state (`Scheduler::unfinished`).
    pub state: SavedState,
    /// By entry number, `{"value": ...}` or `{"error": {"name", "message"}}`, in saved order.
    pub ended: Vec<(u64, Value)>,
    /// Retired batches not forgotten: their number, their outcomes, and their saved text.
    pub retired: Vec<(u64, Outcomes, Value)>,
}

impl Snapshot {
    /// Reads a snapshot text (what `persist` was given).
    pub fn parse(text: &str) -> Result<Self, ResumeError> {
        read::parse(text).map_err(ResumeError::Snapshot)
    }

    /// The snapshot's text, as `persist` was given it.
    pub fn to_json(&self) -> String {
        let mut out = String::from("{\"turnstile-snapshot\":1,\"state\":");
        out.push_str(&state_json(&self.state));
        out.push_str(",\"ended\":{");
        for (i, (entry, kept)) in self.ended.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "\"{entry}\":");
            value_json(&mut out, kept);
        }
        out.push_str("},\"retired\":[");
        for (i, (_, _, text)) in self.retired.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            value_json(&mut out, text);
        }
        out.push_str("]}");
        out
    }
}

/// The driver's snapshot: the scheduler's `unfinished()`, the values of ended entries of live
/// batches, and retired batches not forgotten.
pub(crate) fn snapshot(s: &State) -> String {
    let state = s.scheduler.unfinished();
    let mut out = String::from("{\"turnstile-snapshot\":1,\"state\":");
    out.push_str(&state_json(&state));
    out.push_str(",\"ended\":{");
    let mut any = false;
    for saved in &state.batches {
        let Some(batch) = s
            .by_batch
            .get(&saved.batch.0)
            .and_then(|first| s.batches.get(first))
        else {
            continue;
        };
        let starts = call_starts(&batch.at);
        for (c, call) in saved.calls.iter().enumerate() {
            for &(op, state) in &call.entries {
                if !matches!(state, Saved::Ended(_)) {
                    continue;
                }
                let offset = starts.get(c).copied().unwrap_or(0) + op as usize;
                let Some(Some(o)) = batch.outcomes.get(offset) else {
                    continue;
                };
                if any {
                    out.push(',');
                }
                any = true;
                let _ = write!(out, "\"{}\":{{", batch.first + offset as u64);
                match &o.status {
                    Status::Settled { message, .. } => {
                        error_field(&mut out, &HostError::msg(message.clone()));
                    }
                    Status::Failed(e) | Status::Cancelled(Err(e)) => {
                        error_field(&mut out, &e.to_host_error());
                    }
                    Status::Ok(v) | Status::Cancelled(Ok(v)) => {
                        out.push_str("\"value\":");
                        value_json(&mut out, v);
                    }
                }
                out.push('}');
            }
        }
    }
    out.push_str("},\"retired\":[");
    for (i, r) in s.retired.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&r.text);
    }
    out.push_str("]}");
    out
}

/// Each call's first offset in a batch.
pub(crate) fn call_starts(at: &[(u32, Option<u32>)]) -> Vec<usize> {
    let mut starts = Vec::new();
    for (offset, &(call, _)) in at.iter().enumerate() {
        if starts.len() == call as usize {
            starts.push(offset);
        }
    }
    starts
}
