//! Outcomes: how each entry of a batch ended, and a batch's outcomes in written order.

use std::fmt;
use std::ops::Deref;

use serde_json::Value;
use turnstile_engine::schedule::Reason;

use super::errors::{ExecError, HostError};

/// How one entry ended. `entry` and `label` name it.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryOutcome {
    /// The entry number (unique over the scheduler's life, kept across a restart).
    pub entry: u64,
    /// `id`, or `id#i` for an operation of a fan-out call.
    pub label: String,
    /// What happened.
    pub status: Status,
}

/// What happened to an entry.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    /// Its execution returned this value.
    Ok(Value),
    /// Its execution failed (after a restart, the saved error: its name and message).
    Failed(ExecError),
    /// It had started and its batch was cancelled (by the host, or by the batch's failure)
    /// before it ended; what it returned or failed with afterwards is kept.
    Cancelled(Result<Value, ExecError>),
    /// It never ran (or was given up): `reason` says why, and `message` is the engine's
    /// sentence to show a user or hand back to the model as the call's result. `error` is
    /// `decide`'s error for an entry settled because `decide` failed.
    Settled {
        /// Why.
        reason: Reason,
        /// The sentence (`"not run: the batch was cancelled"`).
        message: String,
        /// `decide`'s error, when it is why.
        error: Option<HostError>,
    },
}

impl Status {
    /// `ok`, `failed`, `cancelled` or `settled`: the snapshot's and the JS driver's word.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Ok(_) => "ok",
            Self::Failed(_) => "failed",
            Self::Cancelled(_) => "cancelled",
            Self::Settled { .. } => "settled",
        }
    }
}

/// `ok VALUE` (the value as compact JSON), `failed NAME: message`, `cancelled`, or
/// `settled REASON: sentence` (`settled rejected: not run: the user rejected this call`).
impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ok(value) => write!(f, "ok {value}"),
            Self::Failed(e) => write!(f, "failed {e}"),
            Self::Cancelled(_) => f.write_str("cancelled"),
            Self::Settled {
                reason, message, ..
            } => write!(f, "settled {}: {message}", reason.name()),
        }
    }
}

/// One call's outcome: its entries' outcomes in operation order.
#[derive(Clone, Debug, PartialEq)]
pub struct CallOutcome {
    /// The call's id.
    pub id: String,
    /// Its tool.
    pub tool: String,
    /// One per entry (one for a plain call, one per operation of a fan-out call).
    pub entries: Vec<EntryOutcome>,
}

/// A batch's outcomes, one per call in written order (derefs to `[CallOutcome]`). Hand it to
/// [`Driver::forget`](super::Driver::forget) once you kept it, so the snapshot drops it.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcomes {
    pub(crate) batch: u64,
    pub(crate) calls: Vec<CallOutcome>,
}

impl Outcomes {
    /// The batch's number.
    pub fn batch(&self) -> u64 {
        self.batch
    }

    /// The calls' outcomes.
    pub fn into_calls(self) -> Vec<CallOutcome> {
        self.calls
    }
}

impl Deref for Outcomes {
    type Target = [CallOutcome];

    fn deref(&self) -> &[CallOutcome] {
        &self.calls
    }
}
