//! The scheduler's typed errors, one small type per operation. Every one means "the host made a
//! mistake and nothing changed" (for an input, nothing changed for that one input).

use std::fmt;

codes! {
    /// Why [`Scheduler::submit_batch`](super::Scheduler::submit_batch) refused a batch.
    SubmitErrorCode {
        /// A batch with no calls.
        EmptyBatch => "empty-batch",
        /// A call id or tool name is empty or too long, or a call id contains `#` or a newline.
        InvalidId => "invalid-id",
        /// A call id is used twice in the batch, or by a live batch.
        DuplicateId => "duplicate-id",
        /// Operations given for a tool whose policy does not fan out.
        NotFanOut => "not-fan-out",
        /// A fan-out call with zero operations.
        InvalidOperations => "invalid-operations",
        /// A size above a limit in [`crate::limits`].
        TooLarge => "too-large",
        /// A packed batch ([`unpack`](super::unpack)) whose texts hold different
        /// numbers of calls or do not end with a newline, or whose fan-out or arguments list
        /// names a call out of range or twice.
        MalformedBatch => "malformed-batch",
    }
}

codes! {
    /// Why one input was refused ([`Refusal`]).
    InputErrorCode {
        /// No live entry has this number (never handed out, or its batch retired).
        UnknownEntry => "unknown-entry",
        /// No live batch has this number.
        UnknownBatch => "unknown-batch",
        /// Approve or settle on an entry that is no longer pending.
        AlreadyDecided => "already-decided",
        /// A question or an end for an entry that is not running.
        NotRunning => "not-running",
        /// A question ended on an entry that has none outstanding.
        NotAsking => "not-asking",
        /// A grant or a denial for an entry that is not waiting for a permit.
        NotAcquiring => "not-acquiring",
        /// An end, or a question, for an execution that already ended.
        AlreadyEnded => "already-ended",
        /// The batch was already cancelled.
        BatchCancelled => "batch-cancelled",
        /// An end, or a question, for an execution the scheduler gave up on: it was aborted
        /// and its abort grace passed (settled `timed-out`); nothing changed.
        GivenUp => "given-up",
        /// `now` is earlier than a `now` given before (the host's clock must be monotonic).
        TimeBackwards => "time-backwards",
        /// A pause names a key no configured tool declares.
        UnknownKey => "unknown-key",
    }
}

codes! {
    /// Why [`Scheduler::resume`](super::Scheduler::resume) refused a state as a whole.
    ResumeErrorCode {
        /// Not a version this engine reads.
        UnsupportedVersion => "unsupported-version",
        /// More live entries than [`crate::limits::ENTRIES_MAX`].
        TooLarge => "too-large",
    }
}

codes! {
    /// Why `resume` left one call out.
    UnrestoredCode {
        /// Its tool no longer fans out, or its saved operations are out of range.
        InvalidOperations => "invalid-operations",
        /// Its id or tool name is not valid.
        InvalidId => "invalid-id",
        /// An earlier call of the state has its id.
        DuplicateId => "duplicate-id",
        /// Its numbers overlap another batch's, or lie beyond the state's next numbers.
        InvalidNumbers => "invalid-numbers",
    }
}

error_type!(
    /// A refused batch; nothing changed.
    SubmitError,
    SubmitErrorCode
);
error_type!(
    /// A refused state; no scheduler was made.
    ResumeError,
    ResumeErrorCode
);

/// What a refused input was about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum About {
    /// An entry.
    Entry(u64),
    /// A batch (a cancellation).
    Batch(u64),
    /// A key, by name (a pause).
    Key(String),
    /// The clock: the `now` given to `next_releases`.
    Clock(u64),
}

/// A refused input: what it was about, and why. Nothing of it applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The entry, batch, key or clock it was about.
    pub about: About,
    /// What went wrong.
    pub code: InputErrorCode,
    /// For people: lowercase, no trailing period, names the entry and its state.
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for Refusal {}

/// A call `resume` left out; the host answers it itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unrestored {
    /// Its batch.
    pub batch: u64,
    /// Its call id.
    pub call: String,
    /// Why.
    pub code: UnrestoredCode,
    /// For people.
    pub message: String,
}
