//! The scheduler's typed errors. Every one means "the host made a mistake and nothing changed".

use std::fmt;

/// What went wrong; the kebab-case spelling from [`ErrorCode::as_str`] crosses the boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// No entry has this label.
    UnknownEntry,
    /// No batch has this id.
    UnknownBatch,
    /// A call id is already used in this batch or an earlier one.
    DuplicateId,
    /// A call id or tool name is empty, too long, or (call ids) contains `#`.
    InvalidId,
    /// A batch with no calls.
    EmptyBatch,
    /// A size above a limit in [`crate::limits`].
    TooLarge,
    /// Operations given for a tool whose policy does not fan out.
    NotFanOut,
    /// Zero operations, or a finished operation outside the call or listed twice.
    InvalidOperations,
    /// Approve or settle on an entry that is no longer pending.
    AlreadyDecided,
    /// A question or an end for an entry that is not running.
    NotRunning,
    /// A question ended on an entry that has none outstanding.
    NotAsking,
    /// An end, or a question, for an execution that already ended.
    AlreadyEnded,
    /// The batch was already cancelled.
    BatchCancelled,
}

impl ErrorCode {
    /// The stable kebab-case spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownEntry => "unknown-entry",
            Self::UnknownBatch => "unknown-batch",
            Self::DuplicateId => "duplicate-id",
            Self::InvalidId => "invalid-id",
            Self::EmptyBatch => "empty-batch",
            Self::TooLarge => "too-large",
            Self::NotFanOut => "not-fan-out",
            Self::InvalidOperations => "invalid-operations",
            Self::AlreadyDecided => "already-decided",
            Self::NotRunning => "not-running",
            Self::NotAsking => "not-asking",
            Self::AlreadyEnded => "already-ended",
            Self::BatchCancelled => "batch-cancelled",
        }
    }
}

/// A rejected call: the code to match on and a message for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// What went wrong.
    pub code: ErrorCode,
    /// Lowercase, no trailing period, names the entry and its state where there is one.
    pub message: String,
}

impl Error {
    pub(crate) fn new(code: ErrorCode, message: String) -> Self {
        Self { code, message }
    }

    /// The error for an entry id no entry has.
    pub fn unknown_entry_id(id: u32) -> Self {
        Self::new(ErrorCode::UnknownEntry, format!("no entry has id {id}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for Error {}
