//! The scheduler's typed errors, one small type per operation. Every one means "the host made a
//! mistake and nothing changed" (for `step`, nothing changed for that one input).

use std::fmt;

codes! {
    /// Why [`Scheduler::submit`](super::Scheduler::submit) refused a batch.
    SubmitErrorCode {
        /// A batch with no calls.
        EmptyBatch => "empty-batch",
        /// A call id or tool name is empty, too long, or (call ids) contains `#` or a newline.
        InvalidId => "invalid-id",
        /// A call id is used twice in the batch, or by a live batch.
        DuplicateId => "duplicate-id",
        /// Operations given for a tool whose policy does not fan out.
        NotFanOut => "not-fan-out",
        /// Zero operations, or packed lists of different lengths.
        InvalidOperations => "invalid-operations",
        /// A size above a limit in [`crate::limits`].
        TooLarge => "too-large",
        /// Arguments given for no call of the batch, or twice for one (the packed form).
        InvalidArguments => "invalid-arguments",
    }
}

codes! {
    /// Why one input of [`Scheduler::step`](super::Scheduler::step) was refused.
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

/// Which list of [`Inputs`](super::Inputs) an input was in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InputKind {
    /// [`Inputs::approve`](super::Inputs::approve).
    Approve,
    /// [`Inputs::settle`](super::Inputs::settle).
    Settle,
    /// [`Inputs::granted`](super::Inputs::granted).
    Granted,
    /// [`Inputs::denied`](super::Inputs::denied).
    Denied,
    /// [`Inputs::ask`](super::Inputs::ask).
    Ask,
    /// [`Inputs::answer`](super::Inputs::answer).
    Answer,
    /// [`Inputs::ok`](super::Inputs::ok).
    Ok,
    /// [`Inputs::failed`](super::Inputs::failed).
    Failed,
    /// [`Inputs::cancel`](super::Inputs::cancel).
    Cancel,
    /// [`Inputs::now`](super::Inputs::now).
    Now,
    /// [`Inputs::retry`](super::Inputs::retry).
    Retry,
    /// [`Inputs::pause`](super::Inputs::pause).
    Pause,
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

/// A refused input of a `step`: its list, its position there, and why. Nothing of it applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    /// Its list.
    pub input: InputKind,
    /// Its zero-based position in that list.
    pub index: u32,
    /// What went wrong.
    pub code: InputErrorCode,
    /// For people: lowercase, no trailing period, names the entry and its state.
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} input {}: {}: {}",
            self.input,
            self.index,
            self.code.as_str(),
            self.message
        )
    }
}

impl std::error::Error for InputError {}

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
