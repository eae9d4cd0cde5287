//! The entry lifecycle. This file is the only place an entry's state changes: [`next`] is the
//! whole transition table, and an event that is illegal in the current state is an error naming
//! both.
//!
//! ```text
//!            approve              (release)           ask
//! pending ───────────▶ approved ───────────▶ running ◀────▶ asking
//!    │                    │                     │   answer    │
//!    │ reject/skip/fail   │ cancel / stop       │ end         │ end
//!    ▼                    ▼                     ▼             ▼
//! settled(reason) ◀───────┘                  ended(ok | failed)
//!    ▲ cancel
//! pending
//! ```

use super::error::{Error, ErrorCode};

/// Where one entry (a plain call, or one operation of a fanned-out call) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Submitted; the host has not decided it yet.
    Pending,
    /// Approved; waiting for release (parked while something blocks it).
    Approved,
    /// Released and executing; holds its key's slot.
    Running,
    /// Released, with a question outstanding; still holds its slot.
    Asking,
    /// The execution ended. Terminal.
    Ended(Outcome),
    /// Got a response without ever being released. Terminal.
    Settled(Reason),
}

impl State {
    /// Holds a slot of its key.
    pub fn is_started_unended(self) -> bool {
        matches!(self, Self::Running | Self::Asking)
    }

    /// Has no response yet (a restart would run it again).
    pub fn lacks_response(self) -> bool {
        matches!(
            self,
            Self::Pending | Self::Approved | Self::Running | Self::Asking
        )
    }

    /// Counts as a failure for `on_error = "stop"`.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Self::Ended(Outcome::Failed) | Self::Settled(Reason::Failed)
        )
    }

    /// The lowercase name used in messages and case files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Running => "running",
            Self::Asking => "asking",
            Self::Ended(Outcome::Ok) => "ended-ok",
            Self::Ended(Outcome::Failed) => "ended-failed",
            Self::Settled(reason) => reason.name(),
        }
    }
}

/// How an execution ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A result.
    Ok,
    /// An error result. Frees the slot like any end; stops later operations of the call under
    /// `on_error = "stop"`.
    Failed,
}

/// Why an entry was settled without being released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The user declined it (host).
    Rejected,
    /// Skipped by a remembered "no" or `run = "skip"` (host).
    Skipped,
    /// Failed before running: a formatter error, an unavailable tool, a malformed envelope
    /// (host). Counts as a failure for `on_error = "stop"`.
    Failed,
    /// Its batch was cancelled before it was released (scheduler).
    Cancelled,
    /// An earlier operation of its call failed under `on_error = "stop"` (scheduler). `after`
    /// is the one-based position of the lowest failed operation at that moment.
    Stopped {
        /// One-based position of the failed operation.
        after: u32,
    },
}

impl Reason {
    /// The lowercase name used in messages and case files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Rejected => "rejected",
            Self::Skipped => "skipped",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Stopped { .. } => "stopped",
        }
    }
}

/// What the host may settle an entry as. Cancelled and stopped are the scheduler's to decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostSettle {
    /// See [`Reason::Rejected`].
    Rejected,
    /// See [`Reason::Skipped`].
    Skipped,
    /// See [`Reason::Failed`].
    Failed,
}

/// Everything that moves an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    Approve,
    Settle(HostSettle),
    Release,
    Ask,
    Answer,
    End(Outcome),
    Cancel,
    Stop { after: u32 },
}

impl Event {
    fn verb(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Settle(_) => "settle",
            Self::Release => "release",
            Self::Ask => "begin a question on",
            Self::Answer => "end a question on",
            Self::End(_) => "end",
            Self::Cancel => "cancel",
            Self::Stop { .. } => "stop",
        }
    }
}

/// An event that is illegal in the current state; the caller names the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Illegal {
    code: ErrorCode,
    event: Event,
    state: State,
}

impl Illegal {
    pub(crate) fn error(self, label: &str) -> Error {
        Error::new(
            self.code,
            format!(
                "cannot {} {label}: it is {}",
                self.event.verb(),
                self.state.name()
            ),
        )
    }
}

/// The transition table.
pub(crate) fn next(state: State, event: Event) -> Result<State, Illegal> {
    use State as S;
    let next = match (state, event) {
        (S::Pending, Event::Approve) => S::Approved,
        (S::Pending, Event::Settle(how)) => S::Settled(match how {
            HostSettle::Rejected => Reason::Rejected,
            HostSettle::Skipped => Reason::Skipped,
            HostSettle::Failed => Reason::Failed,
        }),
        (S::Approved, Event::Release) => S::Running,
        (S::Running, Event::Ask) => S::Asking,
        (S::Asking, Event::Answer) => S::Running,
        (S::Running | S::Asking, Event::End(outcome)) => S::Ended(outcome),
        (S::Pending | S::Approved, Event::Cancel) => S::Settled(Reason::Cancelled),
        (S::Approved, Event::Stop { after }) => S::Settled(Reason::Stopped { after }),
        (_, event) => {
            let code = match (state, event) {
                (_, Event::Approve | Event::Settle(_)) => ErrorCode::AlreadyDecided,
                (S::Ended(_), Event::Ask | Event::Answer | Event::End(_)) => {
                    ErrorCode::AlreadyEnded
                }
                (_, Event::Answer) => ErrorCode::NotAsking,
                _ => ErrorCode::NotRunning,
            };
            return Err(Illegal { code, event, state });
        }
    };
    Ok(next)
}
