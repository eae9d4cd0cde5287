//! The async driver: runs batches of tool calls under a policy, starting each execution when
//! the engine releases it, reporting every decision, question and end, and resolving each
//! batch with every call's outcome in written order (the contract the JS and Python drivers
//! follow too).
//!
//! One [`Driver`] per scheduler owns its rounds: a stepper task gathers everything the batches
//! report until it runs (approvals, settlements, questions, ends, cancellations, pauses) into
//! one round, performs the engine's actions in its order, saves the snapshot (with `persist`)
//! and only then hands out what the round decided. Every decision is the engine's.
//!
//! Never hangs, never leaks:
//! - `decide` that fails or panics: the batch's undecided entries are settled `failed`, the
//!   batch is cancelled and fails with the error; its keys are free for later batches.
//! - `execute` runs as a task of its own: a panic is that entry's failure
//!   ([`ExecError::Panicked`]), never the driver's.
//! - `persist` runs as a task of its own: a panic is a failed `persist` (every live batch
//!   fails with [`RunError::Persist`], the driver closes), never the stepper's end.
//! - A dropped [`Run`] cancels its batch even when it held the driver's last handle: the batch
//!   keeps the driver alive until it retires, so its executions are aborted and each shared
//!   permit goes back only once its execution ended.
//! - A question still open when its execution ends is closed: its answer is not reported.
//! - An execution that ignores its abort keeps its slot ([`Driver::inspect`] lists it under
//!   `aborted`) until it ends or its batch's abort grace gives up on it (settled `timed-out`).

mod decide;
mod errors;
mod execution;
mod holds;
mod options;
mod outcome;
mod policy;
mod restore;
mod run;
mod snapshot;
mod state;
mod step;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{Notify, oneshot, watch};
use turnstile_engine::schedule::{BatchId, EntryStatus, HostSettle, Limits, Scheduler};

pub use errors::{
    Abort, DriverError, ExecError, FlushError, HostError, PauseError, PersistError, ResumeError,
    RunError,
};
pub use execution::{CancelToken, Execution};
pub use options::{
    ArgumentsOf, Call, Decide, Decision, DriverOptions, Execute, OnOutcome, Persist, ResumeOptions,
    RunOptions,
};
pub use outcome::{CallOutcome, EntryOutcome, Outcomes, Status};
pub use policy::{
    Concurrency, ConcurrencyKey, ConfigError, Diagnostic, DiagnosticCode, DiagnosticLabel,
    DiagnosticSpan, KeyTemplate, Layer, OnError, Policy, RateWindow, Severity, ToolPolicy,
};
pub use restore::Resumed;
pub use run::Run;
pub use snapshot::Snapshot;

use crate::clock::TokioClock;
use state::{Batch, Inner, PauseInput, Persisted, RunResult, State};

/// Runs batches of tool calls on one scheduler. Cheap to clone: every clone is the same
/// driver, so several tasks may [`run`](Self::run) batches on it at once.
///
/// ```
/// use serde_json::{json, Value};
/// use turnstile::{Call, Driver, DriverOptions, ExecError, Policy, RunOptions, Status};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = Policy::from_toml("policy", "[conversation.tools.write]\nconcurrency = 1\n")?;
/// let driver = Driver::new(&policy, DriverOptions::default())?;
/// let calls = vec![
///     Call::new("w1", "write").with_arguments(json!({ "path": "a" })),
///     Call::new("w2", "write").with_arguments(json!({ "path": "b" })),
/// ];
/// // w2 starts once w1 ended: `write` runs one at a time.
/// let outcomes = driver
///     .run(calls, |x| async move { Ok::<Value, ExecError>(json!(format!("wrote {}", x.label()))) }, RunOptions::default())
///     .await?;
/// assert_eq!(outcomes[1].entries[0].status, Status::Ok(json!("wrote w2")));
/// driver.close();
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Driver {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").finish_non_exhaustive()
    }
}

/// A live batch as [`Driver::inspect`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveBatch {
    /// Its number.
    pub batch: u64,
    /// Cancelled (by the host, or because it failed).
    pub cancelled: bool,
    /// Its run failed (`decide` failed, an input was refused).
    pub failed: bool,
    /// The engine's view of every entry: its keys, its state, why an approved one waits.
    pub entries: Vec<EntryStatus>,
    /// Executions still running whose abort was sent: entry, label, and ms since the abort.
    pub aborted: Vec<(u64, String, u64)>,
}

impl Driver {
    /// A driver for `policy`, inside a tokio runtime (it spawns its stepper and executions
    /// there, also when a method is later called from outside the runtime's context, as
    /// `handle.block_on(driver.run(..))` does). A policy with shared keys (`shared = true`) needs
    /// [`DriverOptions::shared_keys`].
    pub fn new(policy: &Policy, options: DriverOptions) -> Result<Self, DriverError> {
        Self::with_scheduler(policy, Scheduler::new(policy.inner.clone()), options)
    }

    pub(crate) fn with_scheduler(
        policy: &Policy,
        scheduler: Scheduler,
        options: DriverOptions,
    ) -> Result<Self, DriverError> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Err(DriverError::NoRuntime);
        };
        let keys = policy.shared_keys();
        if !keys.is_empty() && options.shared_keys.is_none() {
            return Err(DriverError::NoSharedKeys { keys });
        }
        let clock = options.clock.unwrap_or_else(|| Arc::new(TokioClock::new()));
        let wake = Arc::new(Notify::new());
        let persist = options.persist;
        let inner = Arc::new_cyclic(|me: &Weak<Inner>| Inner {
            state: Mutex::new(State::new(
                scheduler,
                persist.is_some(),
                me.clone(),
                runtime.clone(),
            )),
            wake: wake.clone(),
            clock: clock.clone(),
            persist,
            shared: options.shared_keys,
            persisted: watch::Sender::new(Persisted::default()),
            templates: templates_of(policy),
        });
        runtime.spawn(step::stepper(Arc::downgrade(&inner), wake, clock));
        Ok(Self { inner })
    }

    /// Resumes a snapshot (the text `persist` was given) under a new driver: retired
    /// batches not forgotten come back as runs that resolve at once with their saved outcomes;
    /// each live batch runs again, its ended entries keeping their saved values (errors as
    /// [`ExecError::Failed`] with the saved name and message), its pending entries decided and
    /// executed like a new batch's; `started` says what becomes of an entry that was running.
    ///
    /// `policy` may differ from the one the snapshot was made under
    /// ([`Policy::fingerprint`] tells): every call it can restore runs under the new policy,
    /// and a call it cannot (its tool no longer fans out, ...) is left out and listed in
    /// [`Resumed::unrestored`] for the host to answer.
    pub fn resume(
        policy: &Policy,
        snapshot: &str,
        options: ResumeOptions,
    ) -> Result<Resumed, ResumeError> {
        restore::resume(policy, snapshot, options)
    }

    /// Submits `calls` as a batch now, decides every entry, runs what the engine releases
    /// (each execution a task of its own), and resolves with every call's outcome in written
    /// order once the batch retires.
    ///
    /// Cancel the batch with [`RunOptions::cancel`] (the [`Run`] still resolves, with
    /// `cancelled` and `settled` outcomes) or by dropping the [`Run`] (its outcomes are
    /// discarded). Fails with [`RunError::Submit`] when the engine refuses the batch,
    /// [`RunError::Decide`] when `decide` fails, [`RunError::Refused`] when an input of it is
    /// refused, [`RunError::Closed`] / [`RunError::Persist`] when the driver closes or breaks.
    pub fn run<F, Fut>(&self, calls: Vec<Call>, execute: F, options: RunOptions) -> Run
    where
        F: Fn(Execution) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ExecError>> + Send + 'static,
    {
        self.run_with(calls, Execute::new(execute), options)
    }

    /// [`run`](Self::run) with an [`Execute`] already made (shared by several runs).
    pub fn run_with(&self, calls: Vec<Call>, execute: Execute, options: RunOptions) -> Run {
        let (tx, rx) = oneshot::channel();
        match self.submit(calls, execute, options, tx) {
            Ok((first, batch)) => Run::pending(rx, Some(self.inner.clone()), Some(first), batch),
            Err(e) => Run::ready(Err(e)),
        }
    }

    fn submit(
        &self,
        calls: Vec<Call>,
        execute: Execute,
        options: RunOptions,
        tx: oneshot::Sender<RunResult>,
    ) -> Result<(u64, u64), RunError> {
        let execution_ms = options::millis(options.execution_timeout, "execution_timeout")
            .map_err(RunError::InvalidArgument)?;
        let abort_grace_ms = options::millis(options.abort_grace, "abort_grace")
            .map_err(RunError::InvalidArgument)?;
        let mut s = self.inner.lock();
        if s.closed {
            return Err(RunError::Closed);
        }
        let texts: Vec<Option<String>> = calls
            .iter()
            .map(|c| {
                let names = self.inner.templates.get(&c.tool)?;
                arguments_text(&c.arguments, names)
            })
            .collect();
        let engine_calls: Vec<turnstile_engine::schedule::Call<'_>> = calls
            .iter()
            .zip(&texts)
            .map(|(c, text)| turnstile_engine::schedule::Call {
                id: &c.id,
                tool: &c.tool,
                operations: c.operations,
                arguments: text.as_deref(),
            })
            .collect();
        let limits = Limits {
            execution_ms,
            abort_grace_ms,
        };
        let submitted = s
            .scheduler
            .submit_batch_with(&engine_calls, limits)
            .map_err(RunError::Submit)?;
        drop(engine_calls);
        let at = layout(&calls);
        let first = submitted.first.0;
        let id = submitted.batch.0;
        let count = at.len();
        s.insert(Batch {
            id,
            first,
            calls,
            at,
            execute,
            decide: options.decide,
            on_outcome: options.on_outcome,
            outcomes: vec![None; count],
            running: (0..count).map(|_| None).collect(),
            cancelled: false,
            failed: false,
            done: false,
            execution_ms,
            abort_reason: None,
            decide_error: None,
            decided: 0,
            tx: Some(tx),
            unwatched: false,
            done_signal: None,
            keep_alive: None,
        });
        if s.has_persist {
            // Saved from its first round on, even while `decide` is still out.
            s.dirty = true;
            self.inner.wake.notify_one();
        }
        self.inner.begin(&mut s, first, None, options.cancel);
        Ok((first, id))
    }

    /// Pauses a key for `duration` from now (a pause only ever extends), for example after a
    /// 429 the host saw outside an execution. Queued at the call; the future completes once the
    /// engine applied it: [`PauseError::Refused`] (`unknown-key`) for a key no configured tool
    /// declares, [`PauseError::Closed`] after [`close`](Self::close).
    pub fn pause(
        &self,
        key: &str,
        duration: Duration,
    ) -> impl Future<Output = Result<(), PauseError>> + Send + 'static {
        let ms = duration.as_nanos().div_ceil(1_000_000);
        let queued = match u64::try_from(ms) {
            Ok(ms) => self.queue_pause(key, Some(ms)),
            Err(_) => Err(PauseError::InvalidArgument(format!(
                "pause duration must be at most {} ms, got {ms} ms",
                u64::MAX
            ))),
        };
        async move { queued?.await.unwrap_or(Err(PauseError::Closed)) }
    }

    /// Lifts the pauses the host set on a key (a rate limit's pause stays). Completes once the
    /// engine applied it; fails like [`pause`](Self::pause).
    pub fn lift_pause(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<(), PauseError>> + Send + 'static {
        let queued = self.queue_pause(key, None);
        async move { queued?.await.unwrap_or(Err(PauseError::Closed)) }
    }

    fn queue_pause(
        &self,
        key: &str,
        ms: Option<u64>,
    ) -> Result<oneshot::Receiver<Result<(), PauseError>>, PauseError> {
        let mut s = self.inner.lock();
        if s.closed {
            return Err(PauseError::Closed);
        }
        let now = self.inner.now(&mut s);
        let (done, rx) = oneshot::channel();
        let until = ms.map(|ms| now.saturating_add(ms));
        let key = key.to_owned();
        self.inner
            .push(&mut s, |p| p.pause.push(PauseInput { key, until, done }));
        Ok(rx)
    }

    /// Every live batch: the engine's view of every entry, and executions that ignore their
    /// abort.
    pub fn inspect(&self) -> Vec<LiveBatch> {
        let mut s = self.inner.lock();
        let now = self.inner.now(&mut s);
        let s = &*s;
        s.batches
            .values()
            .map(|b| LiveBatch {
                batch: b.id,
                cancelled: b.cancelled,
                failed: b.failed,
                entries: s.scheduler.inspect(BatchId(b.id)).unwrap_or_default(),
                aborted: b
                    .running
                    .iter()
                    .enumerate()
                    .filter_map(|(offset, run)| {
                        let run = run.as_ref()?;
                        let (at, _) = run.aborted.as_ref().filter(|_| !run.ended)?;
                        Some((
                            b.first + offset as u64,
                            b.label(offset as u32),
                            now.saturating_sub(*at),
                        ))
                    })
                    .collect(),
            })
            .collect()
    }

    /// Drops a retired batch from the snapshot, once the host kept its outcomes itself: the
    /// next round persists without it. Outcomes of no retired batch change nothing.
    ///
    /// Returns at once; await [`flush`](Self::flush) to know the snapshot without the batch
    /// was saved (before [`close`](Self::close) and exit: a snapshot that still holds it gives
    /// its outcomes back again on [`resume`](Self::resume)).
    pub fn forget(&self, outcomes: &Outcomes) {
        let mut s = self.inner.lock();
        let before = s.retired.len();
        s.retired.retain(|r| r.batch != outcomes.batch);
        if s.retired.len() != before {
            // Closed, nothing saves it any more: a `flush` then says so.
            s.dirty = true;
            self.inner.wake.notify_one();
        }
    }

    /// Waits until what the driver has taken so far is saved: resolves once a `persist`
    /// whose snapshot includes every change made before the call (submissions, ends,
    /// settlements, cancellations, [`forget`](Self::forget)) has completed, asking for one when
    /// none is under way or due. Resolves at once without [`DriverOptions::persist`], and when
    /// every change is saved already.
    ///
    /// Fails with [`FlushError::Persist`] when a `persist` failed (that one or an earlier one:
    /// the driver broke), and with [`FlushError::Closed`] when the driver was closed with a
    /// change not saved (flush first, then close). The future keeps the driver working until
    /// it resolves.
    ///
    /// ```
    /// # use std::sync::{Arc, Mutex};
    /// # use serde_json::{json, Value};
    /// # use turnstile::{Call, Driver, DriverOptions, ExecError, Persist, Policy, RunOptions};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let policy = Policy::from_toml("policy", "")?;
    /// let saved = Arc::new(Mutex::new(String::new()));
    /// let file = saved.clone();
    /// let persist = Persist::new(move |text: String| {
    ///     *file.lock().unwrap() = text; // a real host writes it to disk
    ///     async { Ok::<(), std::io::Error>(()) }
    /// });
    /// let driver = Driver::new(&policy, DriverOptions { persist: Some(persist), ..Default::default() })?;
    /// let outcomes = driver
    ///     .run(vec![Call::new("r1", "read")], |_x| async { Ok::<Value, ExecError>(json!(1)) }, RunOptions::default())
    ///     .await?;
    /// // ... keep the outcomes ...
    /// driver.forget(&outcomes);
    /// driver.flush().await?; // the saved snapshot no longer holds the batch
    /// assert!(saved.lock().unwrap().ends_with("\"retired\":[]}"));
    /// driver.close();
    /// # Ok(())
    /// # }
    /// ```
    pub fn flush(&self) -> impl Future<Output = Result<(), FlushError>> + Send + 'static {
        let target = self.inner.flush_target();
        let inner = self.inner.clone();
        async move {
            let Some(target) = target? else {
                return Ok(());
            };
            let mut persisted = inner.persisted.subscribe();
            let Ok(p) = persisted
                .wait_for(|p| p.saved >= target || p.failed.is_some() || p.stopped)
                .await
            else {
                return Err(FlushError::Closed);
            };
            if p.saved >= target {
                Ok(())
            } else if let Some(e) = &p.failed {
                Err(FlushError::Persist(e.clone()))
            } else {
                Err(FlushError::Closed)
            }
        }
    }

    /// The snapshot's JSON text now (what `persist` is given).
    pub fn snapshot(&self) -> String {
        snapshot::snapshot(&self.inner.lock())
    }

    /// Closes the driver: every live batch fails with [`RunError::Closed`], its executions are
    /// aborted ([`Abort::Closed`]), pending pauses fail, nothing starts any more, and nothing
    /// is saved any more: await [`flush`](Self::flush) first to see every change saved.
    pub fn close(&self) {
        let mut s = self.inner.lock();
        let now = self.inner.now(&mut s);
        s.close(&RunError::Closed, now);
        self.inner.wake.notify_one();
    }

    /// Whether [`close`](Self::close) was called (or a `persist` failed).
    pub fn is_closed(&self) -> bool {
        self.inner.lock().closed
    }

    /// Steps the driver's scheduler from outside with `now_ms` (what the contract forbids:
    /// the driver's next `now` is then refused and every live batch fails). For tests.
    #[doc(hidden)]
    pub fn step_scheduler_for_tests(&self, now_ms: u64) {
        let mut s = self.inner.lock();
        let mut out = turnstile_engine::schedule::Releases::default();
        s.scheduler.next_releases(Some(now_ms), &mut out);
    }
}

impl Inner {
    /// Wires the batch's cancellation and decides it (`pending`: offsets to decide, `None`
    /// for all).
    pub(crate) fn begin(
        &self,
        s: &mut State,
        first: u64,
        pending: Option<Vec<u32>>,
        cancel: Option<CancelToken>,
    ) {
        if let Some(token) = cancel {
            if token.is_cancelled() {
                s.cancel(first, Abort::Cancelled);
                self.wake.notify_one();
                return;
            }
            let (done, done_rx) = oneshot::channel::<()>();
            if let Some(batch) = s.batches.get_mut(&first) {
                batch.done_signal = Some(done);
            }
            let cancelled = token.cancelled();
            let driver = s.self_ref.clone();
            s.runtime.spawn(async move {
                tokio::select! {
                    () = cancelled => {
                        if let Some(inner) = driver.upgrade() {
                            inner.cancel_batch(first, Abort::Cancelled);
                        }
                    }
                    _ = done_rx => {}
                }
            });
        }
        let Some(batch) = s.batches.get(&first) else {
            return;
        };
        let offsets: Vec<u32> = pending.unwrap_or_else(|| (0..batch.count()).collect());
        if let Some(decide) = batch.decide.clone() {
            decide::spawn_decide(&s.runtime, s.self_ref.clone(), first, decide, offsets);
        } else {
            for i in offsets {
                let entry = first + u64::from(i);
                self.push(s, |p| p.approve.push((entry, first)));
            }
        }
    }

    /// Cancels a batch from outside the stepper.
    pub(crate) fn cancel_batch(&self, first: u64, reason: Abort) {
        let mut s = self.lock();
        if s.closed {
            return;
        }
        s.cancel(first, reason);
        self.wake.notify_one();
    }

    /// `decide` failed: the undecided entries are settled failed, the batch is cancelled and
    /// fails with the error.
    pub(crate) fn decide_failed(&self, first: u64, error: HostError, offsets: &[u32]) {
        let mut s = self.lock();
        let Some(batch) = s.batches.get_mut(&first) else {
            return;
        };
        batch.decide_error.get_or_insert_with(|| error.clone());
        if !batch.done && !batch.cancelled {
            let from = batch.decided;
            for &i in offsets.iter().skip(from) {
                s.settle(first, i, HostSettle::Failed);
            }
        }
        s.fail(first, RunError::Decide(error));
        self.wake.notify_one();
    }
}

/// Each entry's call index and operation, in written order.
fn layout(calls: &[Call]) -> Vec<(u32, Option<u32>)> {
    let mut at = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        match c.operations {
            Some(n) => at.extend((0..n).map(|op| (i as u32, Some(op)))),
            None => at.push((i as u32, None)),
        }
    }
    at
}

/// The top-level argument names each tool's keys read (every member's of a key set: its
/// template's, then its path's, each once, in written order), for the tools that have any.
fn templates_of(policy: &Policy) -> HashMap<String, Vec<String>> {
    let mut out = HashMap::new();
    for tool in policy.tools() {
        let mut names: Vec<String> = Vec::new();
        for c in &tool.concurrency {
            let templates = [c.key.template(), c.path.as_ref().and_then(|p| p.template())];
            for field in templates.into_iter().flatten().flat_map(|t| t.fields()) {
                if !names.contains(field) {
                    names.push(field.clone());
                }
            }
        }
        if !names.is_empty() {
            out.insert(tool.name.clone(), names);
        }
    }
    out
}

/// The JSON text of a call's arguments for the engine: only the fields its tool's key
/// templates name (`names`) that can make a key (a string, a number, a boolean), as the JS and
/// Python drivers send them. Nothing when the arguments are not an object, when no named field
/// can make a key, or when the text is over the engine's size limit: the call then takes the
/// template's own key (limited, never unbounded). A large field no template names (a file's
/// `content`) never moves a call off its key.
fn arguments_text(arguments: &Value, names: &[String]) -> Option<String> {
    let arguments = arguments.as_object()?;
    let mut picked = serde_json::Map::new();
    for name in names {
        if let Some(value @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) =
            arguments.get(name)
        {
            picked.insert(name.clone(), value.clone());
        }
    }
    if picked.is_empty() {
        return None;
    }
    let text = serde_json::to_string(&picked).ok()?;
    (text.len() <= turnstile_engine::limits::ARGUMENTS_BYTES_MAX).then_some(text)
}
