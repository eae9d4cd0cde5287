//! The state behind [`SharedKeys`](super::SharedKeys): one [`LeaseSchedule`] for every ticket
//! of the client, the local tickets by key, and what the schedule's polls say to do (the JS
//! package's private half of `keys.ts`).
//!
//! Everything lives under one mutex, never held across an `.await` nor while calling into the
//! store (a store calls its watchers back, which take the mutex). Store calls run either in
//! the caller's future (`acquire`, `release`) or in tasks spawned on the runtime captured at the
//! first `acquire` (renewals, checks, give-backs); the timers (the schedule's wake-up and each
//! key's retry) are one background task (`lease.rs`).
//!
//! `mod.rs` holds the state and what the caller's futures do (a request sent and answered, a
//! wait withdrawn, a permit given back, `close`); `lease.rs` what the lease schedule and the
//! store's wake-ups make happen in the background (renewals, give-ups, grants and losses).

mod lease;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::runtime::Handle;
use tokio::sync::{Notify, oneshot, watch};
use turnstile_engine::shared::{LeaseErrorCode, LeaseSchedule};

use super::store::{TicketState, Watch};
use super::{SharedError, Store, StoreError};
use crate::clock::Clock;

/// The client's shared half (see the module doc).
pub(super) struct Client {
    pub(super) store: Arc<dyn Store>,
    pub(super) lease_ms: u32,
    pub(super) owner: String,
    /// `<owner>-<tag>`: every ticket id starts with it.
    prefix: String,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    /// Tells the background task that a deadline moved, or that the client closed.
    wakeup: Arc<Notify>,
}

struct State {
    lease: LeaseSchedule,
    keys: HashMap<String, KeyTickets>,
    /// One watch per key once a ticket of it waited, kept until `close` (`None`: being made).
    watches: HashMap<String, Option<Watch>>,
    /// The schedule's next wake-up.
    lease_wake_ms: Option<u64>,
    last_now_ms: u64,
    /// The store's error from the latest failed renewal, for the message of a ticket given up.
    last_error: Option<StoreError>,
    count: u64,
    closed: bool,
    runtime: Option<Handle>,
}

/// One key's local tickets.
#[derive(Default)]
struct KeyTickets {
    waiting: HashMap<String, Waiter>,
    held: HashMap<String, (u64, Arc<PermitCell>)>,
    /// Requests sent and not answered, each with the way to fail its `acquire` at once when
    /// the schedule gives it up or the client closes. A wake-up can report their grant before
    /// the answer arrives, and `early` keeps it until then.
    pending: HashMap<String, oneshot::Sender<SharedError>>,
    early: HashMap<String, TicketState>,
    /// When to ask the store again about the head (the clock's ms).
    retry_at_ms: Option<u64>,
    checking: bool,
}

struct Waiter {
    n: u64,
    tx: oneshot::Sender<Result<Grant, SharedError>>,
}

/// A grant as it reaches the waiting `acquire`.
pub(super) struct Grant {
    pub(super) seq: u64,
    pub(super) grant: u64,
    pub(super) granted_ms: u64,
    pub(super) cell: Arc<PermitCell>,
}

/// Where a permit learns it was lost.
pub(super) struct PermitCell {
    pub(super) lost: watch::Sender<Option<SharedError>>,
}

/// A request about to be sent (see [`Client::begin`]).
pub(super) struct Begun {
    pub(super) n: u64,
    pub(super) ticket: String,
    pub(super) failed: oneshot::Receiver<SharedError>,
}

/// What became of a request once answered.
pub(super) enum Answered {
    Granted(Grant),
    Waiting(oneshot::Receiver<Result<Grant, SharedError>>),
}

impl PermitCell {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            lost: watch::Sender::new(None),
        })
    }

    /// Records `error` (the first one wins).
    pub(super) fn lose(&self, error: SharedError) {
        self.lost.send_if_modified(|lost| {
            if lost.is_some() {
                return false;
            }
            *lost = Some(error);
            true
        });
    }

    pub(super) fn is_lost(&self) -> bool {
        self.lost.borrow().is_some()
    }
}

impl Client {
    pub(super) fn new(
        store: Arc<dyn Store>,
        lease: LeaseSchedule,
        lease_ms: u32,
        owner: String,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let prefix = format!("{owner}-{}", super::keys::tag());
        Self {
            store,
            lease_ms,
            owner,
            prefix,
            clock,
            state: Mutex::new(State {
                lease,
                keys: HashMap::new(),
                watches: HashMap::new(),
                lease_wake_ms: None,
                last_now_ms: 0,
                last_error: None,
                count: 0,
                closed: false,
                runtime: None,
            }),
            wakeup: Arc::new(Notify::new()),
        }
    }

    pub(super) fn ticket_id(&self, n: u64) -> String {
        format!("{}-{n}", self.prefix)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The schedule's clock: whole ms, never below a reading given before.
    fn now(&self, st: &mut State) -> u64 {
        st.last_now_ms = st.last_now_ms.max(self.clock.now_ms());
        st.last_now_ms
    }

    /// A request is about to be sent: numbers it, reports it to the schedule, marks it pending.
    /// The receiver completes when the request must fail before its answer (given up, closed).
    pub(super) fn begin(self: &Arc<Self>, key: &str) -> Result<Begun, SharedError> {
        let mut st = self.lock();
        if st.closed {
            return Err(SharedError::Closed);
        }
        if st.runtime.is_none() {
            let runtime = Handle::try_current()
                .map_err(|_| SharedError::invalid("shared keys need a tokio runtime".to_owned()))?;
            runtime.spawn(lease::drive(
                Arc::downgrade(self),
                Arc::clone(&self.wakeup),
                Arc::clone(&self.clock),
            ));
            st.runtime = Some(runtime);
        }
        let n = st.count + 1;
        let now = self.now(&mut st);
        st.lease.requested(key, n, now).map_err(|e| {
            SharedError::invalid(format!("the lease schedule refused a request: {e}"))
        })?;
        st.count = n;
        let ticket = self.ticket_id(n);
        let (tx, rx) = oneshot::channel();
        (st.keys.entry(key.to_owned()).or_default())
            .pending
            .insert(ticket.clone(), tx);
        self.pump(&mut st);
        Ok(Begun {
            n,
            ticket,
            failed: rx,
        })
    }

    /// The store answered request `n` (or failed): the ticket becomes a permit or a waiter, or
    /// the request fails (given back first when its answer came too late).
    pub(super) fn answered(
        self: &Arc<Self>,
        key: &str,
        ticket: &str,
        n: u64,
        answer: Result<TicketState, StoreError>,
    ) -> Result<Answered, SharedError> {
        let mut st = self.lock();
        let early = st.keys.get_mut(key).and_then(|k| {
            k.pending.remove(ticket);
            k.early.remove(ticket)
        });
        let result = self.settle_answer(&mut st, key, ticket, n, answer, early);
        idle(&mut st, key);
        self.pump(&mut st);
        result
    }

    fn settle_answer(
        self: &Arc<Self>,
        st: &mut State,
        key: &str,
        ticket: &str,
        n: u64,
        answer: Result<TicketState, StoreError>,
        early: Option<TicketState>,
    ) -> Result<Answered, SharedError> {
        let state = match answer {
            Err(e) => {
                forget(st, n);
                if matches!(e, StoreError::Split { .. }) {
                    self.split(st, &e);
                }
                return Err(e.into());
            }
            Ok(state) => state,
        };
        if st.closed {
            self.give_back(st, key, ticket);
            return Err(SharedError::Closed);
        }
        let state = match (state, early) {
            (TicketState::Waiting { .. }, Some(early)) => early,
            (state, _) => state,
        };
        if matches!(state, TicketState::Lost { .. }) {
            forget(st, n);
            return Err(lost_as_requested(key, ticket));
        }
        self.pump(st); // gives the ticket up first when its answer came too late
        if let Err(e) = st.lease.answered(n) {
            debug_assert_eq!(e.code, LeaseErrorCode::UnknownTicket);
            self.give_back(st, key, ticket);
            return Err(SharedError::StoreUnavailable {
                store: self.store.kind().to_owned(),
                message: format!(
                    "the request for ticket {ticket} on key {key:?} was answered too late to be \
                     sure of its lease ({} ms); it was given back",
                    self.lease_ms
                ),
            });
        }
        let now = self.now(st);
        let k = st.keys.entry(key.to_owned()).or_default();
        match state {
            TicketState::Granted {
                seq,
                grant,
                granted_ms,
                ..
            } => {
                let cell = PermitCell::new();
                k.held.insert(ticket.to_owned(), (n, Arc::clone(&cell)));
                Ok(Answered::Granted(Grant {
                    seq,
                    grant,
                    granted_ms,
                    cell,
                }))
            }
            TicketState::Waiting { retry_ms, .. } => {
                let (tx, rx) = oneshot::channel();
                k.waiting.insert(ticket.to_owned(), Waiter { n, tx });
                if let Some(ms) = retry_ms {
                    k.retry_at_ms = Some(lease::retry_at(now, ms));
                    self.wakeup.notify_one();
                }
                Ok(Answered::Waiting(rx))
            }
            TicketState::Lost { .. } => Err(lost_as_requested(key, ticket)),
        }
    }

    /// An `acquire` dropped while its request was in flight: the ticket is forgotten and given
    /// back (the store may have entered it).
    pub(super) fn withdraw_request(self: &Arc<Self>, key: &str, ticket: &str, n: u64) {
        let mut st = self.lock();
        if let Some(k) = st.keys.get_mut(key) {
            k.pending.remove(ticket);
            k.early.remove(ticket);
        }
        forget(&mut st, n);
        self.give_back(&st, key, ticket);
        idle(&mut st, key);
        self.pump(&mut st);
    }

    /// An `acquire` dropped while it waited: withdraws the ticket when it still waits; returns
    /// `false` when a grant or a failure reached it first.
    pub(super) fn withdraw_waiter(self: &Arc<Self>, key: &str, ticket: &str) -> bool {
        let mut st = self.lock();
        let Some(waiter) = st.keys.get_mut(key).and_then(|k| k.waiting.remove(ticket)) else {
            return false;
        };
        forget(&mut st, waiter.n);
        self.give_back(&st, key, ticket);
        idle(&mut st, key);
        self.pump(&mut st);
        true
    }

    /// A permit given back (released, abandoned or dropped): the client forgets it. Returns
    /// whether the store should be told (not when the permit was lost: its lease ended, or
    /// `close` gave it back).
    pub(super) fn end(
        self: &Arc<Self>,
        key: &str,
        ticket: &str,
        n: u64,
        cell: &PermitCell,
    ) -> bool {
        let mut st = self.lock();
        if let Some(k) = st.keys.get_mut(key) {
            k.held.remove(ticket);
        }
        idle(&mut st, key);
        if cell.is_lost() {
            return false;
        }
        forget(&mut st, n);
        self.pump(&mut st);
        true
    }

    /// Gives a ticket back in the background (its errors ignored: the lease ends anyway).
    fn give_back(&self, st: &State, key: &str, ticket: &str) {
        let store = Arc::clone(&self.store);
        let (key, ticket) = (key.to_owned(), ticket.to_owned());
        spawn(st, async move {
            let _ = store.abandon(&key, &ticket).await;
        });
    }

    /// A permit dropped without `release` or `abandon`: given back in the background.
    pub(super) fn give_back_dropped(self: &Arc<Self>, key: &str, ticket: &str) {
        let st = self.lock();
        self.give_back(&st, key, ticket);
    }

    /// Ends every wait with [`SharedError::Closed`] and loses every permit with it; returns the
    /// tickets to give back.
    pub(super) fn close(&self) -> Vec<(String, String)> {
        let (returns, watches) = {
            let mut st = self.lock();
            if st.closed {
                return Vec::new();
            }
            st.closed = true;
            let mut returns = Vec::new();
            for (key, k) in st.keys.drain() {
                for (ticket, waiter) in k.waiting {
                    let _ = waiter.tx.send(Err(SharedError::Closed));
                    returns.push((key.clone(), ticket));
                }
                for (ticket, (_, cell)) in k.held {
                    cell.lose(SharedError::Closed);
                    returns.push((key.clone(), ticket));
                }
                for (ticket, failed) in k.pending {
                    let _ = failed.send(SharedError::Closed);
                    returns.push((key.clone(), ticket));
                }
            }
            let watches: Vec<Option<Watch>> = st.watches.drain().map(|(_, w)| w).collect();
            (returns, watches)
        };
        drop(watches);
        self.wakeup.notify_one();
        returns
    }

    /// How many of this client's tickets wait and are held, by key (sorted by key).
    pub(super) fn counts(&self) -> Vec<(String, usize, usize)> {
        let st = self.lock();
        let mut counts: Vec<(String, usize, usize)> = (st.keys.iter())
            .map(|(key, k)| (key.clone(), k.waiting.len(), k.held.len()))
            .collect();
        counts.sort();
        counts
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.wakeup.notify_one();
    }
}

/// The schedule no longer tracks ticket `n` (given back, or lost at the store). A ticket it
/// gave up already is unknown, which is fine here.
fn forget(st: &mut State, n: u64) {
    if !st.closed {
        let _ = st.lease.remove(n);
    }
}

/// Clears the retry when no ticket of `key` waits, and forgets the key when it has no ticket.
fn idle(st: &mut State, key: &str) {
    let Some(k) = st.keys.get_mut(key) else {
        return;
    };
    if k.waiting.is_empty() {
        k.retry_at_ms = None;
    }
    if k.waiting.is_empty() && k.held.is_empty() && k.pending.is_empty() && !k.checking {
        st.keys.remove(key);
    }
}

/// Spawns on the runtime captured at the first `acquire` (a store may call back from a thread
/// of its own).
fn spawn(st: &State, task: impl Future<Output = ()> + Send + 'static) {
    if let Some(runtime) = &st.runtime {
        runtime.spawn(task);
    } else if let Ok(runtime) = Handle::try_current() {
        runtime.spawn(task);
    }
}

fn lost_as_requested(key: &str, ticket: &str) -> SharedError {
    let message = format!("ticket {ticket} on key {key:?} was lost as it was requested");
    SharedError::lease_lost(key, ticket, message)
}
