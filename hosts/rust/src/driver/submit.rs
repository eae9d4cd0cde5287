//! Submitting a batch: [`Driver::run`]'s path into the engine and the live batches, then
//! wiring its cancellation (the cancel watcher) and asking `decide` about its entries.

use tokio::sync::oneshot;
use turnstile_engine::schedule::{Limits, Submitted};

use super::arguments::arguments_texts;
use super::batch::Batch;
use super::errors::{Abort, RunError};
use super::execution::CancelToken;
use super::inner::Inner;
use super::options::{self, Call, Execute, RunOptions};
use super::state::{RunResult, State};
use super::{Driver, decide};

impl Driver {
    pub(super) fn submit(
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
        let limits = Limits {
            execution_ms,
            abort_grace_ms,
        };
        let submitted = self.submit_to_engine(&mut s, &calls, limits)?;
        let first = submitted.first.0;
        let id = submitted.batch.0;
        s.insert(Batch {
            decide: options.decide,
            on_outcome: options.on_outcome,
            execution_ms,
            ..Batch::new(id, first, calls, execute, tx)
        });
        if s.has_persist {
            // Saved from its first round on, even while `decide` is still out.
            s.dirty = true;
            self.inner.wake.notify_one();
        }
        self.inner.begin(&mut s, first, None, options.cancel);
        Ok((first, id))
    }

    /// Hands `calls` to the engine as one batch, each with its arguments text.
    fn submit_to_engine(
        &self,
        s: &mut State,
        calls: &[Call],
        limits: Limits,
    ) -> Result<Submitted, RunError> {
        let texts = arguments_texts(&self.inner.templates, calls);
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
        s.scheduler
            .submit_batch_with(&engine_calls, limits)
            .map_err(RunError::Submit)
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
}
