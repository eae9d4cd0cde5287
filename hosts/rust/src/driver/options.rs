//! What the host gives the driver: calls, `execute`, and the options of a driver, a run and a
//! resume. Callbacks are cheap-to-clone handles (`Arc` inside) made from closures.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::errors::{ExecError, HostError};
use super::execution::{CancelToken, Execution};
use super::outcome::EntryOutcome;
use crate::clock::Clock;

/// A boxed, sendable future.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A tool call as the model wrote it.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// Unique among live calls.
    pub id: String,
    /// The tool's name (a tool the policy does not name is unbounded).
    pub tool: String,
    /// For a fan-out call, how many operations it has (entries `id#0` .. `id#(n-1)`).
    pub operations: Option<u32>,
    /// The call's arguments (a JSON object): a tool whose key is a template
    /// (`key = "fs:{path}"`) takes its key from the fields it names. Handed back to `execute`.
    pub arguments: Value,
}

impl Call {
    /// A plain call without arguments.
    pub fn new(id: impl Into<String>, tool: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            tool: tool.into(),
            operations: None,
            arguments: Value::Null,
        }
    }

    /// With arguments.
    #[must_use]
    pub fn with_arguments(mut self, arguments: Value) -> Self {
        self.arguments = arguments;
        self
    }

    /// A fan-out call of `n` operations.
    #[must_use]
    pub fn with_operations(mut self, n: u32) -> Self {
        self.operations = Some(n);
        self
    }
}

/// What the host decided about an entry before its batch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run it (when the scheduler releases it).
    Approve,
    /// The user declined it: settled `rejected`.
    Reject,
    /// Skipped (a remembered "no"): settled `skipped`.
    Skip,
    /// It cannot run (a malformed call): settled `failed`.
    Fail,
}

impl FromStr for Decision {
    type Err = HostError;

    /// `"approve"`, `"reject"`, `"skip"` or `"fail"`; anything else is a `RangeError` naming it.
    fn from_str(s: &str) -> Result<Self, HostError> {
        match s {
            "approve" => Ok(Self::Approve),
            "reject" => Ok(Self::Reject),
            "skip" => Ok(Self::Skip),
            "fail" => Ok(Self::Fail),
            other => Err(HostError::new(
                "RangeError",
                format!(
                    "a decision must be one of 'approve', 'reject', 'skip', 'fail', got {other:?}"
                ),
            )),
        }
    }
}

type ExecuteFn = dyn Fn(Execution) -> BoxFuture<Result<Value, ExecError>> + Send + Sync;
type DecideFn = dyn Fn(&str, &Call) -> BoxFuture<Result<Decision, HostError>> + Send + Sync;
type OutcomeFn = dyn Fn(&EntryOutcome, &Call) + Send + Sync;
type PersistFn =
    dyn Fn(String) -> BoxFuture<Result<(), Box<dyn std::error::Error + Send + Sync>>> + Send + Sync;

/// Runs one entry: `execute`, boxed. Made by [`Driver::run`](super::Driver::run) from a closure.
#[derive(Clone)]
pub struct Execute(pub(crate) Arc<ExecuteFn>);

impl Execute {
    /// From a closure returning a future of the entry's result.
    pub fn new<F, Fut>(execute: F) -> Self
    where
        F: Fn(Execution) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ExecError>> + Send + 'static,
    {
        Self(Arc::new(move |x| Box::pin(execute(x))))
    }
}

impl fmt::Debug for Execute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Execute(..)")
    }
}

/// Decides each entry in written order, by its label and its call; may take its time (a
/// prompt). An error (or a panic) settles the undecided entries `failed` and fails the batch.
#[derive(Clone)]
pub struct Decide(pub(crate) Arc<DecideFn>);

impl Decide {
    /// From a closure returning a future of the decision.
    pub fn new<F, Fut>(decide: F) -> Self
    where
        F: Fn(&str, &Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Decision, HostError>> + Send + 'static,
    {
        Self(Arc::new(move |label, call| Box::pin(decide(label, call))))
    }
}

impl fmt::Debug for Decide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Decide(..)")
    }
}

/// Told each entry's outcome as soon as it is known (and saved, with `persist`), with its
/// call: called from the driver's round, so it must not block; a panic in it is caught.
#[derive(Clone)]
pub struct OnOutcome(pub(crate) Arc<OutcomeFn>);

impl OnOutcome {
    /// From a closure.
    pub fn new<F>(hook: F) -> Self
    where
        F: Fn(&EntryOutcome, &Call) + Send + Sync + 'static,
    {
        Self(Arc::new(hook))
    }
}

impl fmt::Debug for OnOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnOutcome(..)")
    }
}

/// Saves the driver's snapshot (a JSON text, the same as the JS and Python drivers'; the
/// crate's README, "Persistence and restart", says when); awaited, one at a time. An error
/// breaks the driver: every live batch fails with `PersistError`.
#[derive(Clone)]
pub struct Persist(pub(crate) Arc<PersistFn>);

impl Persist {
    /// From a closure returning a future.
    pub fn new<F, Fut, E>(persist: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        Self(Arc::new(move |text| {
            let saved = persist(text);
            Box::pin(async move { saved.await.map_err(Into::into) })
        }))
    }
}

impl fmt::Debug for Persist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Persist(..)")
    }
}

/// A driver's options.
#[derive(Clone, Default)]
pub struct DriverOptions {
    /// The clock (default: [`TokioClock`](crate::clock::TokioClock)).
    pub clock: Option<Arc<dyn Clock>>,
    /// Where the snapshot goes (default: nowhere; nothing is saved and values are not kept).
    pub persist: Option<Persist>,
    /// The store client for the policy's shared keys (required when it declares one; give it
    /// the driver's clock). The host closes it after closing the driver.
    pub shared_keys: Option<crate::shared::SharedKeys>,
}

impl fmt::Debug for DriverOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DriverOptions")
            .field("clock", &self.clock.as_ref().map(|_| ".."))
            .field("persist", &self.persist)
            .field("shared_keys", &self.shared_keys)
            .finish()
    }
}

/// A batch's options ([`Driver::run`](super::Driver::run)).
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Decides each entry (default: approve every one).
    pub decide: Option<Decide>,
    /// Aborts an execution once it has run this long (a question does not stop the clock):
    /// it sees [`Abort::Deadline`](super::Abort::Deadline). Whole milliseconds (rounded up),
    /// at most `u32::MAX`.
    pub execution_timeout: Option<Duration>,
    /// Once an execution was aborted, how long it may still take: past it, the engine gives
    /// up on it (settled `timed-out`, its slot freed). Default: it keeps its slot until it ends.
    pub abort_grace: Option<Duration>,
    /// Told each outcome as it is known.
    pub on_outcome: Option<OnOutcome>,
    /// Cancels the batch (dropping the [`Run`](super::Run) cancels it too, and discards its
    /// outcomes).
    pub cancel: Option<CancelToken>,
}

/// Gives a restored call its arguments back: by its batch number and the call (id, tool,
/// operations).
pub type ArgumentsOf = Arc<dyn Fn(u64, &Call) -> Value + Send + Sync>;

/// What [`Driver::resume`](super::Driver::resume) needs besides the policy and the snapshot.
#[derive(Clone)]
pub struct ResumeOptions {
    /// Runs the restored batches' entries.
    pub execute: Execute,
    /// What becomes of an entry that was running: run again, or settled `interrupted`.
    pub started: turnstile_engine::schedule::Started,
    /// Decides the restored batches' pending entries (default: approve).
    pub decide: Option<Decide>,
    /// Told every restored outcome, then every new one.
    pub on_outcome: Option<OnOutcome>,
    /// A restored call's arguments (they are not saved), by its batch number and saved call.
    pub arguments_of: Option<ArgumentsOf>,
    /// Cancels every restored batch.
    pub cancel: Option<CancelToken>,
    /// The new driver's options.
    pub driver: DriverOptions,
}

impl ResumeOptions {
    /// Options with `execute`, interrupting what had started, and nothing else.
    pub fn new(execute: Execute) -> Self {
        Self {
            execute,
            started: turnstile_engine::schedule::Started::Interrupt,
            decide: None,
            on_outcome: None,
            arguments_of: None,
            cancel: None,
            driver: DriverOptions::default(),
        }
    }
}

impl fmt::Debug for ResumeOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResumeOptions")
            .field("started", &self.started)
            .field("driver", &self.driver)
            .finish_non_exhaustive()
    }
}

/// Whole milliseconds of a duration (rounded up), or the sentence naming the option.
pub(crate) fn millis(d: Option<Duration>, name: &str) -> Result<Option<u32>, String> {
    let Some(d) = d else { return Ok(None) };
    let ms = d.as_nanos().div_ceil(1_000_000);
    u32::try_from(ms)
        .map(Some)
        .map_err(|_| format!("{name} must be at most {} ms, got {ms} ms", u32::MAX))
}
