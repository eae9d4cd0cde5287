// The crate's documentation is its README (a tour, the policy syntax, persistence): one text
// for crates.io, docs.rs and the repository. Its links are rustdoc's intra-doc links.
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod driver;
pub mod shared;

pub use driver::{
    Abort, ArgumentsOf, Call, CallOutcome, CancelToken, Concurrency, ConcurrencyKey, ConfigError,
    Decide, Decision, Diagnostic, DiagnosticCode, DiagnosticLabel, DiagnosticSpan, Driver,
    DriverError, DriverOptions, EntryOutcome, ExecError, Execute, Execution, FlushError, HostError,
    KeyTemplate, Layer, LiveBatch, OnError, OnOutcome, Outcomes, PauseError, Persist, PersistError,
    Policy, RateWindow, ResumeError, ResumeOptions, Resumed, Run, RunError, RunOptions, Severity,
    Snapshot, Status, ToolPolicy,
};

/// (The engine's: see [Types from the engine](crate#types-from-the-engine).)
#[doc(inline)]
pub use turnstile_engine::schedule::{
    AbortCause, About, BatchId, EntryId, EntryStatus, InputErrorCode, Limits,
    Outcome as EndOutcome, Reason, Refusal, ResumeError as SavedStateError, ResumeErrorCode, Saved,
    SavedBatch, SavedCall, SavedState, Started, State as EntryState, SubmitError, SubmitErrorCode,
    Unrestored, UnrestoredCode, Wait,
};
