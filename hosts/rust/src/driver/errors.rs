//! The driver's errors: one small type per operation, each with a clear sentence and the name
//! the JS and Python drivers give the same error (`name()`), so a host's logs read alike.

use std::fmt;
use std::sync::Arc;

use turnstile_engine::schedule::{Refusal, ResumeError as SavedStateError, SubmitError};

/// An error raised by host code (an execution, `decide`): its kind, as JS names an error's
/// class (`"Error"`, `"TypeError"`, your own), and its message. What a snapshot saves of an
/// error, and what comes back after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostError {
    /// The error's kind (`"Error"` unless you say otherwise).
    pub name: String,
    /// What went wrong.
    pub message: String,
}

impl HostError {
    /// An error with a kind and a message.
    pub fn new(name: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            message: message.into(),
        }
    }

    /// An error of kind `"Error"`.
    pub fn msg(message: impl Into<String>) -> Self {
        Self::new("Error", message)
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.message)
    }
}

impl std::error::Error for HostError {}

/// Why the driver stopped an execution ([`Execution::cancelled`](super::Execution::cancelled)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Abort {
    /// It ran past its batch's `execution_timeout` (`limit_ms`).
    Deadline {
        /// Its label.
        label: String,
        /// The batch's execution limit in milliseconds.
        limit_ms: Option<u32>,
    },
    /// Its batch was cancelled (a [`CancelToken`](super::CancelToken), a dropped
    /// [`Run`](super::Run)).
    Cancelled,
    /// Its batch failed (`decide` failed, an input was refused): the batch's error.
    BatchFailed(HostError),
    /// The driver was closed.
    Closed,
    /// A `persist` failed: the driver broke.
    PersistFailed,
    /// The shared key's permit was lost (its lease ended, its store stayed unreachable).
    LeaseLost(HostError),
}

impl Abort {
    /// The name JS gives the abort's reason (`TimeoutError` for a deadline).
    pub fn name(&self) -> &str {
        match self {
            Self::Deadline { .. } => "TimeoutError",
            Self::Cancelled => "AbortError",
            Self::BatchFailed(e) => &e.name,
            Self::Closed => "DisposedError",
            Self::PersistFailed => "PersistError",
            Self::LeaseLost(e) => &e.name,
        }
    }
}

impl fmt::Display for Abort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Deadline {
                label,
                limit_ms: Some(ms),
            } => write!(f, "{label} ran past execution_timeout ({ms} ms)"),
            Self::Deadline { label, .. } => write!(f, "{label} ran past its execution timeout"),
            Self::Cancelled => f.write_str("the batch was cancelled"),
            Self::BatchFailed(e) => write!(f, "the batch failed: {e}"),
            Self::Closed => f.write_str("the driver was closed"),
            Self::PersistFailed => f.write_str("the driver could not persist its snapshot"),
            Self::LeaseLost(e) => write!(f, "the permit was lost: {}", e.message),
        }
    }
}

/// How an execution failed: what `execute`'s future resolves to on error.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExecError {
    /// The tool failed.
    Failed(HostError),
    /// The tool hit a rate limit: the scheduler pauses its key and runs it again after
    /// `retry_after_ms` (or settles it `rate-limited` past its key's retries).
    RateLimited {
        /// How long to wait, in milliseconds.
        retry_after_ms: u64,
    },
    /// It stopped because the driver aborted it (what
    /// [`Execution::cancelled`](super::Execution::cancelled) gave).
    Aborted(Abort),
    /// `execute` or its future panicked (the message, when it was a string).
    Panicked(String),
}

impl ExecError {
    /// A failure of kind `name` (`"Error"`, `"TypeError"`, your own).
    pub fn failed(name: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Failed(HostError::new(name, message))
    }

    /// A rate limit from a `Retry-After` header value (delta-seconds or an HTTP-date, read by
    /// the engine's reader at the wall clock's time); `fallback_ms` for a value it refuses or
    /// no header at all (1000 in the JS and Python drivers).
    #[allow(
        clippy::disallowed_methods,
        reason = "an HTTP-date is read against the wall clock, as in the JS and Python drivers"
    )]
    pub fn rate_limited_from_header(header: Option<&str>, fallback_ms: u64) -> Self {
        let wall_now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let wait =
            header.and_then(|h| turnstile_engine::retry_after::retry_after(h, wall_now_ms).ok());
        Self::RateLimited {
            retry_after_ms: wait.unwrap_or(fallback_ms),
        }
    }

    /// The error's kind, as JS names it: the host's name, `RateLimitedError`, the abort's
    /// (`TimeoutError`), `Panic`.
    pub fn name(&self) -> &str {
        match self {
            Self::Failed(e) => &e.name,
            Self::RateLimited { .. } => "RateLimitedError",
            Self::Aborted(a) => a.name(),
            Self::Panicked(_) => "Panic",
        }
    }

    /// The error's message.
    pub fn message(&self) -> String {
        match self {
            Self::Failed(e) => e.message.clone(),
            Self::RateLimited { retry_after_ms } => {
                format!("rate limited; retry after {retry_after_ms} ms")
            }
            Self::Aborted(a) => a.to_string(),
            Self::Panicked(m) => m.clone(),
        }
    }

    /// The error as a snapshot saves it (and a restart gives it back).
    pub fn to_host_error(&self) -> HostError {
        match self {
            Self::Failed(e) => e.clone(),
            other => HostError::new(other.name(), other.message()),
        }
    }
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name(), self.message())
    }
}

impl std::error::Error for ExecError {}

impl From<HostError> for ExecError {
    fn from(e: HostError) -> Self {
        Self::Failed(e)
    }
}

impl From<Abort> for ExecError {
    fn from(a: Abort) -> Self {
        Self::Aborted(a)
    }
}

/// A `persist` that failed: the driver broke (every live batch fails with it, running
/// executions are aborted, the driver is closed).
#[derive(Clone, Debug)]
pub struct PersistError {
    /// What `persist` returned.
    pub cause: Arc<dyn std::error::Error + Send + Sync>,
}

impl fmt::Display for PersistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "persist failed: {}", self.cause)
    }
}

impl std::error::Error for PersistError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.cause)
    }
}

/// Why [`Driver::flush`](super::Driver::flush) could not see the driver's changes saved.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum FlushError {
    /// A `persist` failed (this one or an earlier one: the driver broke), with what it
    /// returned.
    Persist(PersistError),
    /// The driver was closed with changes not saved yet: they never will be (flush before
    /// [`close`](super::Driver::close)).
    Closed,
}

impl FlushError {
    /// The name the JS driver gives this error (`PersistError`, `DisposedError`).
    pub fn name(&self) -> &str {
        match self {
            Self::Persist(_) => "PersistError",
            Self::Closed => "DisposedError",
        }
    }
}

impl fmt::Display for FlushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Persist(e) => e.fmt(f),
            Self::Closed => f.write_str("the driver was closed before its changes were saved"),
        }
    }
}

impl std::error::Error for FlushError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Persist(e) => Some(e),
            Self::Closed => None,
        }
    }
}

/// Why [`Driver::run`](super::Driver::run) did not give a batch's outcomes.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum RunError {
    /// The scheduler refused the batch (nothing of it was submitted).
    Submit(SubmitError),
    /// An argument was out of range (nothing of the batch was submitted).
    InvalidArgument(String),
    /// One of the batch's inputs was refused (or the scheduler's clock: another stepper).
    Refused(Refusal),
    /// `decide` failed (an error, a panic): its undecided entries were settled `failed`.
    Decide(HostError),
    /// The driver was closed ([`Driver::close`](super::Driver::close)) before the batch
    /// ended, or the tokio runtime it ran on shut down. Dropping every `Driver` clone does not
    /// close it: a pending [`Run`](super::Run) keeps the driver working until its batch ends.
    Closed,
    /// A `persist` failed.
    Persist(PersistError),
    /// The driver's own bug (a batch retired with an entry unanswered).
    Bug(String),
}

impl RunError {
    /// The name the JS driver gives this error (`SubmitError`, `RefusedInputError`,
    /// `DisposedError`, `PersistError`, `RangeError`, or `decide`'s error's own).
    pub fn name(&self) -> &str {
        match self {
            Self::Submit(_) => "SubmitError",
            Self::InvalidArgument(_) => "RangeError",
            Self::Refused(_) => "RefusedInputError",
            Self::Decide(e) => &e.name,
            Self::Closed => "DisposedError",
            Self::Persist(_) => "PersistError",
            Self::Bug(_) => "Error",
        }
    }

    /// The abort an execution of a batch failing with this error sees.
    pub(crate) fn as_abort(&self) -> Abort {
        match self {
            Self::Closed => Abort::Closed,
            Self::Persist(_) => Abort::PersistFailed,
            other => Abort::BatchFailed(HostError::new(other.name(), other.to_string())),
        }
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Submit(e) => write!(f, "the batch was refused: {e}"),
            Self::InvalidArgument(m) => f.write_str(m),
            Self::Refused(r) => write!(f, "an input of the batch was refused: {r}"),
            Self::Decide(e) => write!(f, "decide failed: {e}"),
            Self::Closed => f.write_str("the driver was closed"),
            Self::Persist(e) => e.fmt(f),
            Self::Bug(m) => write!(f, "turnstile driver: {m} (a bug)"),
        }
    }
}

impl std::error::Error for RunError {}

/// Why [`Driver::pause`](super::Driver::pause) or
/// [`Driver::lift_pause`](super::Driver::lift_pause) did nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PauseError {
    /// The scheduler refused it (`unknown-key`: no configured tool declares the key).
    Refused(Refusal),
    /// The duration is longer than the clock can hold (the sentence names it, in ms).
    InvalidArgument(String),
    /// The driver was closed.
    Closed,
}

impl PauseError {
    /// The name the JS driver gives this error.
    pub fn name(&self) -> &str {
        match self {
            Self::Refused(_) => "RefusedInputError",
            Self::InvalidArgument(_) => "RangeError",
            Self::Closed => "DisposedError",
        }
    }
}

impl fmt::Display for PauseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused(r) => write!(f, "the pause was refused: {r}"),
            Self::InvalidArgument(m) => f.write_str(m),
            Self::Closed => f.write_str("the driver was closed"),
        }
    }
}

impl std::error::Error for PauseError {}

/// Why a [`Driver`](super::Driver) could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DriverError {
    /// Not inside a tokio runtime (the driver spawns its stepper and its executions there).
    NoRuntime,
    /// The policy declares shared keys and the driver has no store for them.
    NoSharedKeys {
        /// The shared keys the policy declares.
        keys: Vec<String>,
    },
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoRuntime => f.write_str(
                "a driver must be made inside a tokio runtime (it spawns its executions there)",
            ),
            Self::NoSharedKeys { keys } => write!(
                f,
                "the policy declares shared keys ({}) but the driver has no store for them",
                keys.iter()
                    .map(|k| format!("{k:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

impl std::error::Error for DriverError {}

/// Why [`Driver::resume`](super::Driver::resume) could not resume a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResumeError {
    /// The snapshot text is not what `persist` was given: the sentence names the field.
    Snapshot(String),
    /// The scheduler refused the saved state (another version, too large).
    State(SavedStateError),
    /// The driver could not be made.
    Driver(DriverError),
}

impl fmt::Display for ResumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Snapshot(m) => write!(f, "snapshot: {m}"),
            Self::State(e) => write!(f, "the saved state was refused: {e}"),
            Self::Driver(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ResumeError {}
