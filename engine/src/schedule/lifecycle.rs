//! The entry lifecycle. This file is the only place an entry's state changes: [`Lifecycle`]
//! holds it in a private field, [`next`] is the whole transition table, and an event that is
//! illegal in the current state is an error naming both. Events are the host's reports
//! ([`HostEvent`]) or the scheduler's own moves ([`SchedulerEvent`]). Each rule also names
//! what it implies ([`Effects`]: a batch's barrier and retirement counts, a key's slot, the
//! round's output), which [`Lifecycle::apply`] returns and `effects.rs` applies in one place.
//!
//! ```text
//!            approve              (release)           ask
//! pending ───────────▶ approved ───────────▶ running ◀────▶ asking
//!    │                 │  ▲   │                 │   answer    │
//!    │ reject/skip/fail│  └───┼──── retry ──────┴─────────────┤
//!    │                 │      │ cancel / stop   │ end         │ end
//!    ▼                 ▼      ▼                 ▼             ▼
//! settled(reason) ◀────┘ ◀── (give up) ──── ended(ok | failed)
//!    ▲ cancel
//! pending
//! ```
//!
//! `retry` (the execution hit a rate limit) puts a running or asking entry back to approved;
//! past its retry cap the scheduler gives up instead: settled `rate-limited`.
//!
//! A shared key puts two states between approved and running: the scheduler asks the host for
//! a permit (`request`: approved to acquiring, holding a local slot), the host reports the
//! store's grant (`grant`: acquiring to granted), and a granted entry is released in written
//! order (granted to running). A permit the store refuses (`deny`) settles the entry
//! `failed`; cancel and stop settle acquiring and granted entries like approved ones. When an
//! entry of a shared key hits a rate limit and goes back in line, the acquiring and granted
//! entries behind it `yield` (back to approved, their permits given back) and ask again after it.
//!
//! A running or asking execution the scheduler aborts (`abort`: its deadline passed, or its
//! batch was cancelled) is `aborted`: it keeps its slot and ends as usual, or, when its batch
//! has an abort grace and the grace passes first, the scheduler gives up on it (settled
//! `timed-out`, `deadline.rs`). An aborted execution asks no more questions and is not run again
//! after a rate limit.
//!
//! A restart (`resume`) is not an event: it builds entries anew from a saved state with
//! [`Lifecycle::restored`], where what had started comes back `pending` or settled
//! `interrupted`.

use std::num::NonZeroU32;

use super::effects::Effects;
use super::error::InputErrorCode;

/// Where one entry (a plain call, or one operation of a fanned-out call) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Submitted; the host has not decided it yet.
    Pending,
    /// Approved; waiting for release (parked while something blocks it).
    Approved,
    /// Its key is shared: the host was asked to acquire a permit from the store; it holds a
    /// local slot meanwhile.
    Acquiring,
    /// The store granted its permit; it starts once every earlier entry with its key has.
    Granted,
    /// Released and executing; holds its key's slot.
    Running,
    /// Released, with a question outstanding; still holds its slot.
    Asking,
    /// Released, and the scheduler told the host to abort it (its deadline passed, or its
    /// batch was cancelled); it holds its slot until it ends or its abort grace passes.
    Aborted(AbortCause),
    /// The execution ended. Terminal.
    Ended(Outcome),
    /// Got a response without ever being released. Terminal.
    Settled(Reason),
}

impl State {
    /// Released and not ended: holds a slot of its key and runs.
    pub fn is_started_unended(self) -> bool {
        matches!(self, Self::Running | Self::Asking | Self::Aborted(_))
    }

    /// Holds a permit request or a permit of a shared key (and a local slot) without running.
    pub fn holds_permit_unstarted(self) -> bool {
        matches!(self, Self::Acquiring | Self::Granted)
    }

    /// Has no response yet (a restart would run it again).
    pub fn lacks_response(self) -> bool {
        matches!(
            self,
            Self::Pending
                | Self::Approved
                | Self::Acquiring
                | Self::Granted
                | Self::Running
                | Self::Asking
                | Self::Aborted(_)
        )
    }

    /// Counts as a failure for `on_error = "stop"`.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Self::Ended(Outcome::Failed)
                | Self::Settled(
                    Reason::Failed
                        | Reason::RateLimited { .. }
                        | Reason::TimedOut {
                            cause: AbortCause::Deadline
                        }
                )
        )
    }

    /// The lowercase name used in messages and case files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Acquiring => "acquiring",
            Self::Granted => "granted",
            Self::Running => "running",
            Self::Asking => "asking",
            Self::Aborted(_) => "aborted",
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

/// Why the scheduler aborts an execution ([`Action::Abort`](super::Action::Abort)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AbortCause {
    /// It ran as long as its batch's execution limit allows.
    Deadline,
    /// Its batch was cancelled while it ran.
    Cancel,
}

impl AbortCause {
    /// The lowercase name used in messages and case files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Deadline => "deadline",
            Self::Cancel => "cancel",
        }
    }
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
    /// It had started and had no response when the state was exported; the host chose, on
    /// resume, not to run it again (scheduler).
    Interrupted,
    /// Its execution hit a rate limit once more than its key's retry cap allows, or asked to
    /// wait longer than its key's maximum wait (scheduler). Counts as a failure for
    /// `on_error = "stop"`.
    RateLimited {
        /// How many times it had already run again.
        retries: u32,
        /// The wait the endpoint asked for, in whole seconds (rounded up, saturating at
        /// `u32::MAX`, 136 years), when it was longer than the key's maximum wait and the
        /// scheduler settled the entry for that (the key was not paused); `None` when the
        /// retry cap was reached.
        asked_s: Option<NonZeroU32>,
    },
    /// It was aborted (`cause`) and had not ended when its batch's abort grace passed: the
    /// scheduler gave up on it, freed its slot, and refuses its late end (scheduler). Its
    /// result is unknown and it may have had effects. Counts as a failure for
    /// `on_error = "stop"` when its deadline aborted it.
    TimedOut {
        /// Why it was aborted.
        cause: AbortCause,
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
            Self::Interrupted => "interrupted",
            Self::RateLimited { .. } => "rate-limited",
            Self::TimedOut { .. } => "timed-out",
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

/// What the host reports about one entry ([`super::Scheduler::on_event`],
/// [`super::Scheduler::on_ended`]). Any of them may be a host's mistake, refused as
/// [`Illegal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostEvent {
    Approve,
    Settle(HostSettle),
    /// The store granted the permit.
    Grant,
    /// The store refused the permit (unreachable, timed out): a failure before running.
    Deny,
    Ask,
    Answer,
    End(Outcome),
}

/// What the scheduler does to an entry by its own rules. Only `Retry` and `GiveUp` (a rate
/// limit the host reported) can meet an entry in the wrong state; for the others that is the
/// scheduler's bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SchedulerEvent {
    Release,
    /// A shared key's entry is handed to the host to acquire a permit.
    Request,
    /// An earlier entry of its shared key hit a rate limit and asks again: this one gives its
    /// permit (or request) back and asks again after it, so no process holds permits for
    /// entries that wait behind one without a request.
    Yield,
    Cancel,
    Stop {
        after: u32,
    },
    Retry,
    /// The scheduler will not run a retried execution again (its cap, or its batch cancelled),
    /// or an aborted one ended not within its grace (`deadline.rs`).
    GiveUp(Reason),
    /// The scheduler tells the host to stop a running execution (`deadline.rs`).
    Abort(AbortCause),
}

/// Everything that moves an entry: the host's reports and the scheduler's own moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    Host(HostEvent),
    Scheduler(SchedulerEvent),
}

impl From<HostEvent> for Event {
    fn from(event: HostEvent) -> Self {
        Self::Host(event)
    }
}

impl From<SchedulerEvent> for Event {
    fn from(event: SchedulerEvent) -> Self {
        Self::Scheduler(event)
    }
}

impl Event {
    fn verb(self) -> &'static str {
        match self {
            Self::Host(event) => match event {
                HostEvent::Approve => "approve",
                HostEvent::Settle(_) => "settle",
                HostEvent::Grant => "grant a permit to",
                HostEvent::Deny => "deny a permit to",
                HostEvent::Ask => "begin a question on",
                HostEvent::Answer => "end a question on",
                HostEvent::End(_) => "end",
            },
            Self::Scheduler(event) => match event {
                SchedulerEvent::Release => "release",
                SchedulerEvent::Request => "request a permit for",
                SchedulerEvent::Yield => "give back the permit of",
                SchedulerEvent::Cancel => "cancel",
                SchedulerEvent::Stop { .. } => "stop",
                SchedulerEvent::Retry => "retry",
                SchedulerEvent::GiveUp(_) => "give up on",
                SchedulerEvent::Abort(_) => "abort",
            },
        }
    }
}

/// An event that is illegal in the current state; the caller names the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Illegal {
    pub(crate) code: InputErrorCode,
    event: Event,
    state: State,
}

impl Illegal {
    pub(crate) fn message(self, label: &str) -> String {
        format!(
            "cannot {} {label}: it is {}",
            self.event.verb(),
            self.state.name()
        )
    }
}

/// One entry's state, writable only through the transition table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lifecycle(State);

impl Lifecycle {
    /// A newly submitted entry.
    pub(crate) const PENDING: Self = Self(State::Pending);

    /// An entry rebuilt by a restart: what had a response keeps it; what had started is
    /// pending again or settled interrupted; the rest is pending.
    /// In a cancelled batch nothing starts again: what has no response is settled.
    pub(crate) fn restored(saved: Option<Saved>, rerun_started: bool, cancelled: bool) -> Self {
        Self(match saved {
            None if cancelled => State::Settled(Reason::Cancelled),
            None => State::Pending,
            Some(Saved::Started) if rerun_started => State::Pending,
            Some(Saved::Started) => State::Settled(Reason::Interrupted),
            Some(Saved::Ended(outcome)) => State::Ended(outcome),
            Some(Saved::Settled(reason)) => State::Settled(reason),
        })
    }

    /// An entry of a call a restart could not restore: it keeps a saved response; without
    /// one it is interrupted (the host answers it). Never released.
    pub(crate) fn unrestored(saved: Option<Saved>) -> Self {
        Self(match saved {
            Some(Saved::Ended(outcome)) => State::Ended(outcome),
            Some(Saved::Settled(reason)) => State::Settled(reason),
            Some(Saved::Started) | None => State::Settled(Reason::Interrupted),
        })
    }

    pub(crate) fn get(self) -> State {
        self.0
    }

    /// Applies `event` and says what that implies, or says why it is illegal and changes
    /// nothing.
    #[inline(always)]
    pub(crate) fn apply(&mut self, event: Event) -> Result<Effects, Illegal> {
        let before = self.0;
        let (after, effects) = next(before, event)?;
        debug_assert_eq!(
            effects,
            Effects::implied(before, after, event),
            "the effects of {event:?} from {before:?}"
        );
        self.0 = after;
        Ok(effects)
    }
}

/// An entry's state in an exported state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Saved {
    /// Running or asking at export: it started and has no response.
    Started,
    /// Its execution ended.
    Ended(Outcome),
    /// It was settled.
    Settled(Reason),
}

impl Saved {
    /// How `state` is saved; `None` for pending and approved entries (decided again).
    pub fn of(state: State) -> Option<Self> {
        match state {
            State::Pending | State::Approved | State::Acquiring | State::Granted => None,
            State::Running | State::Asking | State::Aborted(_) => Some(Self::Started),
            State::Ended(outcome) => Some(Self::Ended(outcome)),
            State::Settled(reason) => Some(Self::Settled(reason)),
        }
    }
}

/// The transition table: each rule's next state and what it implies.
#[inline(always)]
fn next(state: State, event: Event) -> Result<(State, Effects), Illegal> {
    use Effects as E;
    use HostEvent as H;
    use SchedulerEvent as I;
    use State as S;
    // What every way of getting a response implies, and of giving a held slot back.
    const ANSWER: Effects = E::ANSWERED.and(E::WALKS);
    const GIVE_BACK: Effects = E::FREES_SLOT.and(E::RETURNS_PERMIT).and(E::WALKS);
    let failed = |s: State| E::NONE.and_if(E::FAILED, s.is_failure());
    let next = match (state, event) {
        (S::Pending, Event::Host(H::Approve)) => (S::Approved, E::DECIDED),
        (S::Pending, Event::Host(H::Settle(how))) => {
            let settled = S::Settled(match how {
                HostSettle::Rejected => Reason::Rejected,
                HostSettle::Skipped => Reason::Skipped,
                HostSettle::Failed => Reason::Failed,
            });
            (settled, E::DECIDED.and(ANSWER).and(failed(settled)))
        }
        (S::Approved, Event::Scheduler(I::Release)) => (S::Running, E::TAKES_SLOT.and(E::STARTS)),
        (S::Granted, Event::Scheduler(I::Release)) => (S::Running, E::STARTS),
        (S::Approved, Event::Scheduler(I::Request)) => {
            (S::Acquiring, E::TAKES_SLOT.and(E::ACQUIRES))
        }
        (S::Acquiring, Event::Host(H::Grant)) => (S::Granted, E::WALKS),
        (S::Acquiring | S::Granted, Event::Host(H::Deny)) => (
            S::Settled(Reason::Failed),
            ANSWER.and(E::FREES_SLOT).and(E::FAILED),
        ),
        (S::Acquiring | S::Granted, Event::Scheduler(I::Yield)) => (S::Approved, GIVE_BACK),
        (S::Running, Event::Host(H::Ask)) => (S::Asking, E::NONE),
        (S::Asking, Event::Host(H::Answer)) => (S::Running, E::NONE),
        (S::Running | S::Asking | S::Aborted(_), Event::Host(H::End(outcome))) => {
            let ended = S::Ended(outcome);
            (ended, ANSWER.and(GIVE_BACK).and(E::RAN).and(failed(ended)))
        }
        (S::Pending, Event::Scheduler(I::Cancel)) => (
            S::Settled(Reason::Cancelled),
            E::DECIDED.and(ANSWER).and(E::REPORTED),
        ),
        (S::Approved, Event::Scheduler(I::Cancel)) => {
            (S::Settled(Reason::Cancelled), ANSWER.and(E::REPORTED))
        }
        (S::Acquiring | S::Granted, Event::Scheduler(I::Cancel)) => (
            S::Settled(Reason::Cancelled),
            ANSWER.and(GIVE_BACK).and(E::REPORTED),
        ),
        (S::Approved, Event::Scheduler(I::Stop { after })) => (
            S::Settled(Reason::Stopped { after }),
            ANSWER.and(E::REPORTED),
        ),
        (S::Acquiring | S::Granted, Event::Scheduler(I::Stop { after })) => (
            S::Settled(Reason::Stopped { after }),
            ANSWER.and(GIVE_BACK).and(E::REPORTED),
        ),
        (S::Running | S::Asking, Event::Scheduler(I::Retry)) => {
            (S::Approved, GIVE_BACK.and(E::REQUEUED))
        }
        // Aborted: it holds its slot and runs on until it ends or its grace passes.
        (S::Running | S::Asking, Event::Scheduler(I::Abort(cause))) => (S::Aborted(cause), E::NONE),
        (S::Running | S::Asking | S::Aborted(_), Event::Scheduler(I::GiveUp(reason))) => {
            let settled = S::Settled(reason);
            let effects = ANSWER.and(GIVE_BACK).and(E::REPORTED).and(E::RAN);
            (settled, effects.and(failed(settled)))
        }
        (_, event) => {
            let code = match (state, event) {
                (_, Event::Host(H::Approve | H::Settle(_))) => InputErrorCode::AlreadyDecided,
                (
                    S::Settled(Reason::TimedOut { .. }),
                    Event::Host(H::Ask | H::Answer | H::End(_)) | Event::Scheduler(I::Retry),
                ) => InputErrorCode::GivenUp,
                (
                    S::Ended(_),
                    Event::Host(H::Ask | H::Answer | H::End(_)) | Event::Scheduler(I::Retry),
                ) => InputErrorCode::AlreadyEnded,
                (_, Event::Host(H::Answer)) => InputErrorCode::NotAsking,
                (_, Event::Host(H::Grant | H::Deny)) => InputErrorCode::NotAcquiring,
                _ => InputErrorCode::NotRunning,
            };
            return Err(Illegal { code, event, state });
        }
    };
    Ok(next)
}
