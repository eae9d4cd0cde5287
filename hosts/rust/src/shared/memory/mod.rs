//! The in-memory store (the JS package's `memory.ts`): shared keys held in this process's
//! memory, for tests and for several [`SharedKeys`](super::SharedKeys) (or drivers) of one
//! process. Several `SharedKeys` sharing one [`MemoryStore`] behave as several processes sharing
//! a SQLite file or a Redis server: one FIFO per key by arrival, leases kept by heartbeats, the
//! delay between grants, rate windows and pauses kept by the store.
//!
//! Time: the store runs on a [`Clock`] (the driver's, the same object, so a test's virtual clock
//! moves the store too) and keeps its own time base: its now is `start_ms` plus the clock's time
//! since [`MemoryStore::new`]. Clients give durations, never times, so the offset does not
//! matter; it must be at least 24 h because a last grant of 0 means "no grant yet".
//!
//! Waiting does not poll: the store arms one timer per key (a tokio task sleeping on the clock),
//! at the earliest of its next lease expiry, the end of the delay, rate window or pause holding
//! its head, and the time it may forget the key; when it fires (and after every operation) the
//! store applies the grant rule and wakes the watchers whose tickets it granted or dropped, as
//! Redis sends one message per grant. The watchers are told after the store's lock is let go.
//!
//! The grant rule is the engine's [`decide`](turnstile_engine::shared::grant::decide), never
//! decided here. Each operation runs under one lock when its future is first polled, so it is
//! atomic; it costs O(log n) plus the tickets it grants, and a scan of the key's tickets only
//! when its earliest lease may have ended.
//!
//! `mod.rs` holds the store's state and the one atomic step every operation and timer takes
//! (purge, change, grant, wake, re-arm); `contract.rs` the contract's operations; `key.rs` one
//! key and the grant rule applied to it.

mod contract;
mod key;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tokio::runtime::Handle;
use tokio::task::AbortHandle;

use key::{HeadRetry, Key, Timer, promote, purge};

use super::store::{TicketState, Watcher};
use super::{DELAY_MS_MAX, MemoryStoreError, StoreError, Wake};
use crate::clock::{Clock, TokioClock};

/// How a [`MemoryStore`] keeps time.
#[derive(Clone)]
pub struct MemoryStoreOptions {
    /// The clock the store's time and timers run on: give the drivers' clock to run everything
    /// on one virtual clock (default: a [`TokioClock`]).
    pub clock: Arc<dyn Clock>,
    /// The store's time at [`MemoryStore::new`], in ms (at least 86400000; default 86400000).
    pub start_ms: u64,
}

impl Default for MemoryStoreOptions {
    fn default() -> Self {
        Self {
            clock: Arc::new(TokioClock::new()),
            start_ms: u64::from(DELAY_MS_MAX),
        }
    }
}

/// A shared-key store in this process's memory (see the module doc). Clones share the store.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    clock: Arc<dyn Clock>,
    start_ms: u64,
    /// The clock's time at `new`.
    clock_start_ms: u64,
    /// Where timers are spawned when an operation runs outside a runtime.
    runtime: Option<Handle>,
    state: Mutex<State>,
}

/// A watch id and its watcher.
type Watching = (u64, Arc<dyn Watcher>);

#[derive(Default)]
struct State {
    last_now_ms: u64,
    keys: HashMap<String, Key>,
    /// Each key's watchers, by watch id.
    watchers: HashMap<String, Vec<Watching>>,
    next_watch: u64,
    next_timer: u64,
    closed: bool,
}

/// Watchers to tell, after the lock is let go, about the tickets that changed.
struct Wakes {
    watchers: Vec<Arc<dyn Watcher>>,
    changed: HashMap<String, TicketState>,
}

impl MemoryStore {
    /// An empty store on `options.clock`. Refuses a `start_ms` under 24 h.
    pub fn new(options: MemoryStoreOptions) -> Result<Self, MemoryStoreError> {
        if options.start_ms < u64::from(DELAY_MS_MAX) {
            return Err(MemoryStoreError::StartTooEarly {
                start_ms: options.start_ms,
            });
        }
        let clock_start_ms = options.clock.now_ms();
        Ok(Self {
            inner: Arc::new(Inner {
                clock: options.clock,
                start_ms: options.start_ms,
                clock_start_ms,
                runtime: Handle::try_current().ok(),
                state: Mutex::new(State::default()),
            }),
        })
    }

    /// One atomic operation on `key`: drops expired leases, runs `change`, applies the grant
    /// rule, reads `answer` after it, wakes watchers, re-arms the key's timer.
    fn op<C, R>(
        &self,
        what: &str,
        key: &str,
        change: impl FnOnce(&mut Key, u64) -> Result<C, StoreError>,
        answer: impl FnOnce(&Key, Option<&HeadRetry>, C) -> R,
    ) -> Result<R, StoreError> {
        let mut st = lock(&self.inner.state);
        if st.closed {
            return Err(closed(what));
        }
        let now = self.inner.now(&mut st);
        let k = st.keys.entry(key.to_owned()).or_insert_with(Key::new);
        let mut changed = purge(k, now);
        let outcome = change(k, now).and_then(|c| {
            let retry = promote(key, k, now, &mut changed)?;
            Ok((answer(k, retry.as_ref(), c), retry))
        });
        let retry = outcome.as_ref().ok().and_then(|(_, r)| r.as_ref());
        let wakes = self.settle(&mut st, key, now, retry, changed);
        drop(st);
        wakes.deliver();
        outcome.map(|(r, _)| r)
    }

    /// The key's timer `id` for `at_ms` fired: the same as an operation that changes nothing.
    /// The store's time is at least `at_ms` then.
    fn tick(&self, key: &str, at_ms: u64, id: u64) {
        let mut st = lock(&self.inner.state);
        if st.closed {
            return;
        }
        let Some(k) = st.keys.get_mut(key) else {
            return;
        };
        if k.timer.as_ref().is_some_and(|t| t.id == id) {
            k.timer = None;
        }
        st.last_now_ms = st.last_now_ms.max(at_ms);
        let now = self.inner.now(&mut st);
        let Some(k) = st.keys.get_mut(key) else {
            return;
        };
        let mut changed = purge(k, now);
        // A refusal cannot happen here: every ticket's terms passed the rule at its request.
        let retry = promote(key, k, now, &mut changed).ok().flatten();
        let wakes = self.settle(&mut st, key, now, retry.as_ref(), changed);
        drop(st);
        wakes.deliver();
    }

    /// After an operation: collects the watchers to wake, then forgets the key or re-arms its
    /// timer.
    fn settle(
        &self,
        st: &mut State,
        key: &str,
        now: u64,
        retry: Option<&HeadRetry>,
        changed: HashMap<String, TicketState>,
    ) -> Wakes {
        let watchers = if changed.is_empty() {
            Vec::new()
        } else {
            (st.watchers.get(key).into_iter().flatten())
                .map(|(_, w)| Arc::clone(w))
                .collect()
        };
        let wakes = Wakes { watchers, changed };
        let timer_id = st.next_timer;
        let Some(k) = st.keys.get_mut(key) else {
            return wakes;
        };
        let idle = k.tickets.is_empty();
        let forget_at_ms = (k.paused_until_ms)
            .max(k.last_grant_ms.saturating_add(k.delay_max_ms))
            .max(k.rested_ms);
        if idle && now >= forget_at_ms {
            if let Some(t) = k.timer.take() {
                t.task.abort();
            }
            st.keys.remove(key);
            return wakes;
        }
        let due_ms = if idle {
            forget_at_ms
        } else {
            let retry_at = retry.map_or(u64::MAX, |r| now.saturating_add(r.ms));
            k.expiry_floor_ms.min(retry_at)
        };
        if k.timer.as_ref().is_some_and(|t| t.at_ms == due_ms) {
            return wakes;
        }
        if let Some(t) = k.timer.take() {
            t.task.abort();
        }
        if due_ms == u64::MAX {
            return wakes;
        }
        if let Some(task) = self.arm(key, due_ms, timer_id) {
            k.timer = Some(Timer {
                at_ms: due_ms,
                id: timer_id,
                task,
            });
            st.next_timer += 1;
        }
        wakes
    }

    /// Spawns the key's timer for `due_ms` (the store's time); `None` without a runtime.
    fn arm(&self, key: &str, due_ms: u64, id: u64) -> Option<AbortHandle> {
        let runtime = Handle::try_current().ok().or(self.inner.runtime.clone())?;
        let at_clock_ms =
            (self.inner.clock_start_ms).saturating_add(due_ms.saturating_sub(self.inner.start_ms));
        let sleep = self.inner.clock.sleep_until(at_clock_ms);
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let key = key.to_owned();
        let task = runtime.spawn(async move {
            sleep.await;
            if let Some(inner) = weak.upgrade() {
                Self { inner }.tick(&key, due_ms, id);
            }
        });
        Some(task.abort_handle())
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("start_ms", &self.inner.start_ms)
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// The store's time: whole ms, never below a time it read before.
    fn now(&self, st: &mut State) -> u64 {
        let elapsed = self.clock.now_ms().saturating_sub(self.clock_start_ms);
        st.last_now_ms = st.last_now_ms.max(self.start_ms.saturating_add(elapsed));
        st.last_now_ms
    }
}

impl Wakes {
    /// Each watcher hears about the tickets of its own that were granted or dropped.
    fn deliver(self) {
        for watcher in self.watchers {
            let states: Vec<TicketState> = (watcher.tickets().iter())
                .filter_map(|t| self.changed.get(t).cloned())
                .collect();
            if !states.is_empty() {
                watcher.wake(Wake {
                    states,
                    ..Wake::default()
                });
            }
        }
    }
}

fn closed(what: &str) -> StoreError {
    StoreError::Unavailable {
        store: "memory".to_owned(),
        message: format!("{what}: the store is closed"),
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}
