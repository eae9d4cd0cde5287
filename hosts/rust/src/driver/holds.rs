//! Shared keys (SHARED.md, "What the driver does"): the engine lists an entry of a shared key
//! in `acquire`; the driver asks [`SharedKeys`] for a permit with the key's terms, reports
//! `granted` when the store grants it (the entry then starts in written order) or `denied`
//! when the request fails (the entry is settled failed with the store's error). Every entry
//! the engine lists in `release` gives its permit back: released when it ran, abandoned when it
//! never started, or the pending request is withdrawn. A permit whose lease is lost aborts its
//! execution. A shared key's pause (`pause-store`) goes to its store, for every process.
//! Closing the driver gives back every permit and withdraws every request.

use tokio::runtime::Handle;
use tokio::task::AbortHandle;
use turnstile_engine::schedule::{PermitRequest, Reason};

use super::batch::RunKey;
use super::errors::{Abort, HostError};
use super::inner::Inner;
use super::state::State;
use crate::shared::{AcquireTerms, DELAY_MS_MAX, LIMIT_MAX, SharedError, SharedPermit};

/// One entry's permit of a shared key: the request until the store answers, then the permit.
pub(crate) struct Hold {
    serial: u64,
    permit: Option<SharedPermit>,
    /// Its execution started: the permit is released (else abandoned).
    started: bool,
    /// The task waiting for the grant (aborting it withdraws the request).
    request: Option<AbortHandle>,
    /// The task watching a started execution's lease.
    lost: Option<AbortHandle>,
}

/// The error a lost permit or a denied request carries.
pub(crate) fn lost_error(e: &SharedError) -> HostError {
    host_error(e)
}

/// The error an entry denied a permit carries.
fn host_error(e: &SharedError) -> HostError {
    HostError::new("SharedError", format!("{}: {e}", e.code()))
}

impl Hold {
    /// Gives the permit back (or withdraws the request), in the background: a store that
    /// cannot be reached now lets the lease end on its own.
    fn give_back(self, runtime: &Handle) {
        if let Some(lost) = self.lost {
            lost.abort();
        }
        match self.permit {
            Some(permit) if self.started => {
                runtime.spawn(permit.release());
            }
            Some(permit) => {
                runtime.spawn(permit.abandon());
            }
            None => {
                if let Some(request) = self.request {
                    request.abort();
                }
            }
        }
    }
}

impl State {
    /// Gives back the entry's permit (the engine listed it in `release`).
    pub(crate) fn release_hold(&mut self, entry: u64) {
        if let Some(hold) = self.holds.remove(&entry) {
            hold.give_back(&self.runtime);
        }
    }

    /// Every permit given back and every request withdrawn (close).
    pub(crate) fn drop_holds(&mut self) {
        for (_, hold) in self.holds.drain() {
            hold.give_back(&self.runtime);
        }
    }

    /// Stops watching the lease of an execution that ended (or was given up).
    pub(crate) fn detach_hold(&mut self, entry: u64) {
        if let Some(lost) = self.holds.get_mut(&entry).and_then(|h| h.lost.take()) {
            lost.abort();
        }
    }

    /// A started execution's permit: `Err` when its lease was lost while it waited (it must
    /// not run), else its lease is watched from now on (a loss aborts it).
    pub(crate) fn hold_for_start(&mut self, key: RunKey) -> Result<(), SharedError> {
        let entry = key.first + u64::from(key.offset);
        let driver = self.self_ref.clone();
        let Some(hold) = self.holds.get_mut(&entry) else {
            return Ok(());
        };
        let Some(permit) = &hold.permit else {
            return Ok(());
        };
        if let Some(lost) = permit.lost_error() {
            return Err(lost);
        }
        hold.started = true;
        let lost = permit.lost();
        let watcher = self.runtime.spawn(async move {
            let error = lost.await;
            if let Some(inner) = driver.upgrade() {
                inner.lease_lost(key, &error);
            }
        });
        hold.lost = Some(watcher.abort_handle());
        Ok(())
    }
}

impl Inner {
    /// Asks the store for an entry's permit (an `acquire` action), or denies it when the
    /// driver has no store.
    pub(crate) fn acquire(&self, s: &mut State, first: u64, request: &PermitRequest) {
        let entry = request.entry.0;
        let offset = (entry - first) as u32;
        let Some(keys) = self.shared.clone() else {
            if let Some(batch) = s.batches.get(&first) {
                let outcome = State::settled(entry, batch.label(offset), Reason::Failed);
                s.record(first, offset, outcome, true);
            }
            s.pending.denied.push((entry, first));
            return;
        };
        let serial = s.next_serial();
        // A key written `limit = 0` with a delay is unbounded but spaced: the store's largest.
        let terms = AcquireTerms {
            limit: request.limit.unwrap_or(LIMIT_MAX).min(LIMIT_MAX),
            delay_ms: request.delay_ms.min(DELAY_MS_MAX),
            rates: request.rates.clone(),
            weight: request.weight,
        };
        let key = request.key.clone();
        let driver = s.self_ref.clone();
        let task = s.runtime.spawn(async move {
            let answer = keys.acquire(&key, terms).await;
            match driver.upgrade() {
                Some(inner) => inner.acquired(entry, first, serial, answer),
                None => {
                    if let Ok(permit) = answer {
                        permit.abandon().await;
                    }
                }
            }
        });
        s.holds.insert(
            entry,
            Hold {
                serial,
                permit: None,
                started: false,
                request: Some(task.abort_handle()),
                lost: None,
            },
        );
    }

    /// The store answered an entry's request.
    fn acquired(
        &self,
        entry: u64,
        first: u64,
        serial: u64,
        answer: Result<SharedPermit, SharedError>,
    ) {
        let mut s = self.lock();
        let live = !s.closed && s.holds.get(&entry).is_some_and(|h| h.serial == serial);
        match answer {
            Ok(permit) if !live => {
                // Withdrawn (or the driver closed) while the grant was on its way.
                s.runtime.spawn(permit.abandon());
            }
            Ok(permit) => {
                if let Some(hold) = s.holds.get_mut(&entry) {
                    hold.permit = Some(permit);
                    hold.request = None;
                }
                self.push(&mut s, |p| p.granted.push((entry, first)));
            }
            Err(_) if !live => {}
            Err(e) => {
                s.holds.remove(&entry);
                if let Some(batch) = s.batches.get(&first) {
                    let offset = (entry - first) as u32;
                    let mut outcome = State::settled(entry, batch.label(offset), Reason::Failed);
                    if let super::Status::Settled { error, .. } = &mut outcome.status {
                        *error = Some(host_error(&e));
                    }
                    s.record(first, offset, outcome, true);
                }
                self.push(&mut s, |p| p.denied.push((entry, first)));
            }
        }
    }

    /// A started execution's lease was lost: it is aborted.
    fn lease_lost(&self, key: RunKey, error: &SharedError) {
        let mut s = self.lock();
        let now = self.now(&mut s);
        if let Some(run) = s.run_mut(key) {
            run.abort(now, Abort::LeaseLost(host_error(error)));
        }
    }

    /// Pauses a shared key at its store, for every process (a store error changes nothing).
    pub(crate) fn pause_store(&self, s: &State, key: &str, ms: u64) {
        if let Some(keys) = self.shared.clone() {
            let key = key.to_owned();
            s.runtime.spawn(async move {
                let _ = keys.pause(&key, ms.min(u64::from(DELAY_MS_MAX))).await;
            });
        }
    }
}
