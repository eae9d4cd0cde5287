//! What the lease schedule and the store's wake-ups make happen in the background: the
//! schedule's polls (renewals sent, tickets given up), the states stores report (grants, losses),
//! checks of a key, and the one task per client that keeps its timers, [`drive`].

use std::sync::{Arc, Weak};

use tokio::sync::Notify;
use turnstile_engine::shared::{GiveUpReason, GivenUp, Renewal};

use super::{Client, Grant, PermitCell, State, Waiter, forget, idle, spawn};
use crate::clock::Clock;
use crate::shared::store::{TicketState, Wake, Watcher};
use crate::shared::{RENEW_TICKETS_MAX, SharedError, StoreError};

impl Client {
    /// Polls the lease schedule and does what it says: gives tickets up, sends the renewals due,
    /// and moves [`drive`]'s wake-up.
    pub(super) fn pump(self: &Arc<Self>, st: &mut State) {
        if st.closed {
            return;
        }
        let now = self.now(st);
        let Ok(poll) = st.lease.poll(now) else {
            debug_assert!(
                false,
                "the schedule refused a poll on a clock that never goes back"
            );
            return;
        };
        for g in poll.given_up {
            self.given_up(st, &g);
        }
        for renewal in poll.renewals {
            let client = Arc::clone(self);
            spawn(st, async move { client.renew(renewal).await });
        }
        if st.lease_wake_ms != poll.wake_at_ms {
            st.lease_wake_ms = poll.wake_at_ms;
            self.wakeup.notify_one();
        }
    }

    /// One renewal the schedule asked for: the store's answer goes to the schedule, and the
    /// states it carries to the waiters and permits.
    pub(super) async fn renew(self: Arc<Self>, renewal: Renewal) {
        let tickets: Vec<String> = renewal.tickets.iter().map(|&n| self.ticket_id(n)).collect();
        let answer = self.store.renew(&renewal.key, &tickets).await;
        let mut st = self.lock();
        if st.closed {
            return;
        }
        let states = match answer {
            Err(e @ StoreError::Split { .. }) => return self.split(&mut st, &e),
            Err(e) => {
                let _ = st.lease.renew_failed(renewal.id);
                st.last_error = Some(e);
                None
            }
            Ok(states) => {
                let _ = st.lease.renewed(renewal.id);
                st.last_error = None;
                Some(states)
            }
        };
        if let Some(states) = states {
            self.apply(&mut st, &renewal.key, states);
        }
        self.pump(&mut st);
    }

    /// A ticket the schedule gave up: its request, its waiter fails, its permit is lost, with
    /// [`SharedError::StoreUnavailable`].
    pub(super) fn given_up(&self, st: &mut State, g: &GivenUp) {
        let Some(k) = st.keys.get_mut(&g.key) else {
            return;
        };
        let ticket = self.ticket_id(g.ticket);
        let why = format!(
            "ticket {ticket} on key {:?} was given up before its lease ({} ms) could end at the \
             store: {}",
            g.key,
            self.lease_ms,
            reason(g.reason)
        );
        let error = match &st.last_error {
            Some(StoreError::Unavailable { store, message }) => SharedError::StoreUnavailable {
                store: store.clone(),
                message: format!("{why} ({message})"),
            },
            Some(other) => SharedError::StoreUnavailable {
                store: self.store.kind().to_owned(),
                message: format!("{why} ({other})"),
            },
            None => SharedError::StoreUnavailable {
                store: self.store.kind().to_owned(),
                message: why,
            },
        };
        if let Some(failed) = k.pending.remove(&ticket) {
            let _ = failed.send(error.clone());
        }
        if let Some(waiter) = k.waiting.remove(&ticket) {
            let _ = waiter.tx.send(Err(error.clone()));
        }
        if let Some((_, cell)) = k.held.remove(&ticket) {
            cell.lose(error);
        }
        idle(st, &g.key);
    }

    /// The store is split: every waiter fails and every permit is lost with `error`, at once,
    /// and no ticket is given back (the store refuses every call from now on).
    pub(super) fn split(&self, st: &mut State, error: &StoreError) {
        let error = SharedError::from(error.clone());
        let keys: Vec<String> = st.keys.keys().cloned().collect();
        for key in keys {
            let Some(k) = st.keys.get_mut(&key) else {
                continue;
            };
            let waiting: Vec<Waiter> = k.waiting.drain().map(|(_, w)| w).collect();
            let held: Vec<(u64, Arc<PermitCell>)> = k.held.drain().map(|(_, h)| h).collect();
            for waiter in waiting {
                forget(st, waiter.n);
                let _ = waiter.tx.send(Err(error.clone()));
            }
            for (n, cell) in held {
                forget(st, n);
                cell.lose(error.clone());
            }
            idle(st, &key);
        }
    }

    /// States from the store: grants resolve waiters, losses fail them or lose permits (and
    /// leave the lease schedule).
    pub(super) fn apply(self: &Arc<Self>, st: &mut State, key: &str, states: Vec<TicketState>) {
        let now = self.now(st);
        let State { keys, lease, .. } = &mut *st;
        let Some(k) = keys.get_mut(key) else {
            return;
        };
        let mut give_back = Vec::new();
        for state in states {
            let ticket = state.ticket().to_owned();
            if let Some(waiter) = k.waiting.remove(&ticket) {
                match state {
                    TicketState::Waiting { retry_ms, .. } => {
                        k.waiting.insert(ticket, waiter);
                        if let Some(ms) = retry_ms {
                            k.retry_at_ms = Some(retry_at(now, ms));
                            self.wakeup.notify_one();
                        }
                    }
                    TicketState::Granted {
                        seq,
                        grant,
                        granted_ms,
                        ..
                    } => {
                        let cell = PermitCell::new();
                        let grant = Grant {
                            seq,
                            grant,
                            granted_ms,
                            cell: Arc::clone(&cell),
                        };
                        if waiter.tx.send(Ok(grant)).is_ok() {
                            k.held.insert(ticket, (waiter.n, cell));
                        } else {
                            let _ = lease.remove(waiter.n);
                            give_back.push(ticket);
                        }
                    }
                    TicketState::Lost { .. } => {
                        let _ = lease.remove(waiter.n);
                        let _ = waiter.tx.send(Err(SharedError::expired(key, &ticket)));
                    }
                }
            } else if k.pending.contains_key(&ticket) {
                if matches!(state, TicketState::Granted { .. }) {
                    k.early.insert(ticket, state);
                }
            } else if matches!(state, TicketState::Lost { .. })
                && let Some((n, cell)) = k.held.remove(&ticket)
            {
                let _ = lease.remove(n);
                cell.lose(SharedError::expired(key, &ticket));
            }
        }
        for ticket in give_back {
            self.give_back(st, key, &ticket);
        }
        idle(st, key);
    }

    /// A store's wake-up for `key`.
    pub(super) fn on_wake(self: &Arc<Self>, key: &str, wake: Wake) {
        let mut st = self.lock();
        if st.closed || !st.keys.contains_key(key) {
            return;
        }
        self.apply(&mut st, key, wake.states);
        if wake.resync {
            let client = Arc::clone(self);
            let key = key.to_owned();
            spawn(&st, async move { client.check(&key).await });
        }
        if let Some(retry) = wake.retry {
            let now = self.now(&mut st);
            if let Some(k) = st.keys.get_mut(key)
                && k.waiting.contains_key(&retry.ticket)
            {
                k.retry_at_ms = Some(retry_at(now, retry.ms));
                self.wakeup.notify_one();
            }
        }
        self.pump(&mut st);
    }

    /// Asks the store for the states of every local ticket of `key` (a retry, a resync, a watch
    /// that became ready) and applies them. It renews their leases at the store too, which only
    /// lengthens them: the lease schedule counts only its own renewals. At most one check per
    /// key at a time; a failure is left to the schedule's renewals (a split store gives every
    /// ticket up now).
    pub(super) async fn check(self: Arc<Self>, key: &str) {
        let tickets: Vec<String> = {
            let mut st = self.lock();
            if st.closed {
                return;
            }
            let Some(k) = st.keys.get_mut(key) else {
                return;
            };
            if k.checking || (k.waiting.is_empty() && k.held.is_empty()) {
                return;
            }
            k.checking = true;
            k.waiting.keys().chain(k.held.keys()).cloned().collect()
        };
        for chunk in tickets.chunks(RENEW_TICKETS_MAX) {
            let answer = self.store.renew(key, chunk).await;
            let mut st = self.lock();
            match answer {
                Ok(states) => self.apply(&mut st, key, states),
                Err(e) => {
                    if matches!(e, StoreError::Split { .. }) {
                        self.split(&mut st, &e);
                    }
                    break;
                }
            }
        }
        let mut st = self.lock();
        if let Some(k) = st.keys.get_mut(key) {
            k.checking = false;
        }
        idle(&mut st, key);
        self.pump(&mut st);
    }

    /// Makes `key`'s watch once a ticket of it waited (outside the lock: a store may call its
    /// watcher back at once); checks the key once it is ready.
    pub(in crate::shared) fn watch_key(self: &Arc<Self>, key: &str) {
        {
            let mut st = self.lock();
            if st.closed || st.watches.contains_key(key) {
                return;
            }
            st.watches.insert(key.to_owned(), None);
        }
        let watcher = Arc::new(KeyWatcher {
            client: Arc::downgrade(self),
            key: key.to_owned(),
        });
        let mut watch = self.store.watch(key, watcher);
        let ready = watch.ready();
        let mut st = self.lock();
        if st.closed {
            drop(st);
            drop(watch);
            return;
        }
        st.watches.insert(key.to_owned(), Some(watch));
        let client = Arc::clone(self);
        let key = key.to_owned();
        // A grant made between the request and the watch being ready sent no wake-up here.
        spawn(&st, async move {
            ready.await;
            client.check(&key).await;
        });
    }

    /// [`drive`]'s turn: polls the schedule when its time came and starts the checks due;
    /// returns the next deadline (`Err` once closed).
    pub(super) fn on_timer(self: &Arc<Self>) -> Result<Option<u64>, ()> {
        let mut st = self.lock();
        if st.closed {
            return Err(());
        }
        let now = self.now(&mut st);
        if st.lease_wake_ms.is_some_and(|at| at <= now) {
            self.pump(&mut st);
        }
        let mut due = Vec::new();
        for (key, k) in &mut st.keys {
            if k.retry_at_ms.is_some_and(|at| at <= now) {
                k.retry_at_ms = None;
                due.push(key.clone());
            }
        }
        for key in due {
            let client = Arc::clone(self);
            spawn(&st, async move { client.check(&key).await });
        }
        let retry = st.keys.values().filter_map(|k| k.retry_at_ms).min();
        Ok(match (st.lease_wake_ms, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }
}

/// The client's timers, one task per client: waits for the earliest of the schedule's wake-up
/// and the keys' retries (or a change of them), then takes [`Client::on_timer`]'s turn. It holds
/// the client weakly, and ends when the client closes or is gone.
pub(super) async fn drive(client: Weak<Client>, wakeup: Arc<Notify>, clock: Arc<dyn Clock>) {
    loop {
        let Some(Ok(next)) = client.upgrade().map(|c| c.on_timer()) else {
            return;
        };
        match next {
            Some(at_ms) => {
                tokio::select! {
                    () = wakeup.notified() => {}
                    () = clock.sleep_until(at_ms) => {}
                }
            }
            None => wakeup.notified().await,
        }
    }
}

/// The client's side of a key's watch.
struct KeyWatcher {
    client: Weak<Client>,
    key: String,
}

impl Watcher for KeyWatcher {
    fn tickets(&self) -> Vec<String> {
        let Some(client) = self.client.upgrade() else {
            return Vec::new();
        };
        let st = client.lock();
        st.keys.get(&self.key).map_or_else(Vec::new, |k| {
            k.waiting.keys().chain(k.pending.keys()).cloned().collect()
        })
    }

    fn wake(&self, wake: Wake) {
        if let Some(client) = self.client.upgrade() {
            client.on_wake(&self.key, wake);
        }
    }
}

/// A retry `ms` from `now_ms`, a millisecond late so the store's gate has opened.
pub(super) fn retry_at(now_ms: u64, ms: u64) -> u64 {
    now_ms.saturating_add(ms).saturating_add(1)
}

/// Why the lease schedule gave a ticket up, for its error's message.
fn reason(reason: GiveUpReason) -> &'static str {
    match reason {
        GiveUpReason::RequestUnanswered => "its request was not answered in time",
        GiveUpReason::RenewalFailed => "its renewals failed",
        GiveUpReason::RenewalUnanswered => "its renewal was not answered in time",
        GiveUpReason::NotRenewed => "it was not renewed in time (the runtime was blocked)",
    }
}
