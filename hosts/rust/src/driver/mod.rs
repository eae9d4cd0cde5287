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

mod arguments;
mod batch;
mod decide;
mod errors;
mod execution;
mod holds;
mod inner;
mod options;
mod outcome;
mod policy;
mod restore;
mod run;
mod snapshot;
mod state;
mod step;
mod submit;

use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{Notify, oneshot, watch};
use turnstile_engine::schedule::{BatchId, EntryStatus, Scheduler};

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
use arguments::templates_of;
use inner::{Inner, Persisted};
use state::{PauseInput, State};

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
