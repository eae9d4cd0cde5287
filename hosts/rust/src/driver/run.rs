//! [`Run`]: a batch's outcomes to come, and what dropping it means.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use super::errors::{Abort, RunError};
use super::inner::Inner;
use super::state::RunResult;

/// A batch's outcomes to come: a future of [`Driver::run`](crate::Driver::run)'s result. Dropping it before it
/// resolves cancels the batch and forgets its outcomes.
#[must_use = "dropping a Run cancels its batch"]
pub struct Run {
    rx: Option<oneshot::Receiver<RunResult>>,
    ready: Option<RunResult>,
    /// Keeps the driver alive while the batch runs (its handles may all be dropped).
    driver: Option<Arc<Inner>>,
    first: Option<u64>,
    batch: Option<u64>,
    finished: bool,
}

impl Run {
    pub(crate) fn ready(result: RunResult) -> Self {
        Self {
            rx: None,
            ready: Some(result),
            driver: None,
            first: None,
            batch: None,
            finished: false,
        }
    }

    pub(crate) fn pending(
        rx: oneshot::Receiver<RunResult>,
        driver: Option<Arc<Inner>>,
        first: Option<u64>,
        batch: u64,
    ) -> Self {
        Self {
            rx: Some(rx),
            ready: None,
            driver,
            first,
            batch: Some(batch),
            finished: false,
        }
    }

    /// The batch's number (`None` when it was refused).
    pub fn batch(&self) -> Option<u64> {
        self.batch
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("batch", &self.batch)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl Future for Run {
    type Output = RunResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RunResult> {
        if let Some(result) = self.ready.take() {
            self.finished = true;
            return Poll::Ready(result);
        }
        let Some(rx) = self.rx.as_mut() else {
            return Poll::Ready(Err(RunError::Bug(
                "a Run polled after it resolved".to_owned(),
            )));
        };
        match Pin::new(rx).poll(cx) {
            Poll::Ready(result) => {
                self.finished = true;
                self.rx = None;
                self.driver = None;
                Poll::Ready(result.unwrap_or(Err(RunError::Closed)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let (Some(first), Some(inner)) = (self.first, self.driver.take()) else {
            return;
        };
        let mut s = inner.lock();
        if s.closed {
            return;
        }
        let Some(batch) = s.batches.get_mut(&first) else {
            return;
        };
        // The batch keeps the driver alive until it retires (or the driver closes): this Run
        // may hold its last reference, and the stepper (which holds only a weak one) must live
        // to carry out the cancellation, abort the running executions, give up on those that
        // ignore it after the abort grace, and give each shared permit back only once its
        // execution ended. Carrying it out through the engine, as a cancellation by a live
        // handle is, rather than aborting everything when the driver drops, keeps the engine's
        // rules (and its `release` of each permit) the only ones.
        batch.keep_alive = Some(inner.clone());
        if batch.done {
            // Failed: cancelled already, its executions still run.
            return;
        }
        batch.unwatched = true;
        s.cancel(first, Abort::Cancelled);
        inner.wake.notify_one();
    }
}
