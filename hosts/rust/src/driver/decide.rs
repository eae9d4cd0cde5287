//! `decide`: each entry of a batch (new or restored) asked about in written order, in a task of
//! its own; a failure or a panic settles the undecided entries `failed` and fails the batch.

use std::sync::{Arc, Weak};

use tokio::runtime::Handle;
use turnstile_engine::schedule::HostSettle;

use super::errors::{HostError, RunError};
use super::inner::Inner;
use super::options::{Decide, Decision};
use super::step::panic_message;

/// Asks `decide` about each entry in written order, in a task of its own (a panic is its
/// failure).
pub(crate) fn spawn_decide(
    runtime: &Handle,
    driver: Weak<Inner>,
    first: u64,
    decide: Decide,
    offsets: Vec<u32>,
) {
    let spawner = runtime.clone();
    runtime.spawn(async move {
        let offsets = Arc::new(offsets);
        let task = spawner.spawn(decide_all(driver.clone(), first, decide, offsets.clone()));
        if let Err(e) = task.await
            && e.is_panic()
            && let Some(inner) = driver.upgrade()
        {
            let error = HostError::new("Panic", panic_message(e.into_panic()));
            inner.decide_failed(first, error, &offsets);
        }
    });
}

async fn decide_all(driver: Weak<Inner>, first: u64, decide: Decide, offsets: Arc<Vec<u32>>) {
    for (k, &i) in offsets.iter().enumerate() {
        let (label, call) = {
            let Some(inner) = driver.upgrade() else {
                return;
            };
            let mut s = inner.lock();
            let Some(batch) = s.batches.get_mut(&first) else {
                return;
            };
            if batch.cancelled || batch.done {
                return;
            }
            batch.decided = k;
            (batch.label(i), batch.call(i).clone())
        };
        let decision = (decide.0)(&label, &call).await;
        let Some(inner) = driver.upgrade() else {
            return;
        };
        let mut s = inner.lock();
        let Some(batch) = s.batches.get(&first) else {
            return;
        };
        if batch.cancelled || batch.done {
            return;
        }
        let how = match decision {
            Ok(Decision::Approve) => {
                let entry = first + u64::from(i);
                inner.push(&mut s, |p| p.approve.push((entry, first)));
                continue;
            }
            Ok(Decision::Reject) => HostSettle::Rejected,
            Ok(Decision::Skip) => HostSettle::Skipped,
            Ok(Decision::Fail) => HostSettle::Failed,
            Err(error) => {
                drop(s);
                inner.decide_failed(first, error, &offsets);
                return;
            }
        };
        s.settle(first, i, how);
        inner.wake.notify_one();
    }
    if let Some(inner) = driver.upgrade()
        && let Some(batch) = inner.lock().batches.get_mut(&first)
    {
        batch.decided = offsets.len();
    }
}

impl Inner {
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
