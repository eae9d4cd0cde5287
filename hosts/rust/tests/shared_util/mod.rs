//! What the shared-key tests share: a store that can go down or stop answering, a clock that
//! can die (a process killed with SIGKILL), a watcher that records its wake-ups.
#![allow(dead_code, unreachable_pub, clippy::panic, clippy::unwrap_used)]

pub mod contract;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use turnstile::clock::{Clock, Sleep, TokioClock};
use turnstile::shared::{
    KeyInspection, MemoryStore, MemoryStoreOptions, Removal, SharedKeys, SharedKeysOptions, Store,
    StoreError, StoreFuture, Terms, TicketState, Wake, Watch, Watcher,
};

pub const DAY: u64 = 86_400_000;

/// A memory store on a fresh tokio clock (zero now), the store's time starting at `start_ms`.
pub fn memory(start_ms: u64) -> (Arc<TokioClock>, MemoryStore) {
    let clock = Arc::new(TokioClock::new());
    let store = MemoryStore::new(MemoryStoreOptions {
        clock: clock.clone(),
        start_ms,
    })
    .unwrap();
    (clock, store)
}

/// Sleeps until `ms` on `clock`, then lets every task woken at `ms` run (the store's timers).
pub async fn run_until(clock: &TokioClock, ms: u64) {
    clock.sleep_until(ms).await;
    settle().await;
}

/// Lets every task that is ready run (nothing on the paused clock moves meanwhile).
pub async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

pub fn terms(limit: u32, delay_ms: u32, lease_ms: u32) -> Terms {
    Terms {
        limit,
        delay_ms,
        rates: Vec::new(),
        weight: 1,
        lease_ms,
    }
}

pub fn keys(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    owner: &str,
    lease_ms: u32,
) -> SharedKeys {
    SharedKeys::new(
        store,
        SharedKeysOptions {
            lease_ms,
            owner: Some(owner.to_owned()),
            clock,
        },
    )
    .unwrap()
}

/// A short name of a state: `"a-1 granted"`, `"b-1 waiting"`, `"c-1 lost"`.
pub fn short(state: &TicketState) -> String {
    match state {
        TicketState::Waiting { ticket, .. } => format!("{ticket} waiting"),
        TicketState::Granted { ticket, .. } => format!("{ticket} granted"),
        TicketState::Lost { ticket } => format!("{ticket} lost"),
    }
}

/// A watcher of fixed tickets that records `(clock ms, states)` of every wake-up.
pub struct Recorder {
    pub tickets: Vec<String>,
    pub clock: Arc<TokioClock>,
    pub log: Mutex<Vec<(u64, Vec<TicketState>)>>,
    /// Records each state once, and watches only the tickets that still wait (a polling store
    /// reports a watched ticket's state at every poll).
    pub once: bool,
}

impl Recorder {
    pub fn new(clock: &Arc<TokioClock>, tickets: &[&str]) -> Arc<Self> {
        Arc::new(Self {
            tickets: tickets.iter().map(|t| (*t).to_owned()).collect(),
            clock: clock.clone(),
            log: Mutex::new(Vec::new()),
            once: false,
        })
    }

    /// A recorder of each state once (for a polling store).
    pub fn once(clock: &Arc<TokioClock>, tickets: &[&str]) -> Arc<Self> {
        let mut recorder = Arc::into_inner(Self::new(clock, tickets)).unwrap();
        recorder.once = true;
        Arc::new(recorder)
    }

    /// `(ms, "ticket state, ...")` per wake-up.
    pub fn seen(&self) -> Vec<(u64, String)> {
        let log = self.log.lock().unwrap();
        log.iter()
            .map(|(at, states)| (*at, states.iter().map(short).collect::<Vec<_>>().join(",")))
            .collect()
    }
}

impl Watcher for Recorder {
    /// A recorder of each state once lists, as `SharedKeys` does, only the tickets that still
    /// wait (a granted or lost one is no longer watched).
    fn tickets(&self) -> Vec<String> {
        if !self.once {
            return self.tickets.clone();
        }
        let log = self.log.lock().unwrap();
        let settled = |t: &String| log.iter().flat_map(|(_, s)| s).any(|s| s.ticket() == t);
        self.tickets
            .iter()
            .filter(|t| !settled(t))
            .cloned()
            .collect()
    }

    fn wake(&self, wake: Wake) {
        let mut log = self.log.lock().unwrap();
        let mut states = wake.states;
        if self.once {
            states.retain(|s| !log.iter().any(|(_, seen)| seen.contains(s)));
            if states.is_empty() {
                return;
            }
        }
        log.push((self.clock.now_ms(), states));
    }
}

/// How a [`Flaky`] store answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// As its memory store does.
    Up,
    /// Fails every call with `StoreError::Unavailable` at once.
    Down,
    /// Fails every call with `StoreError::Split` at once (its file was replaced).
    Split,
    /// Fails every call with `StoreError::Failed` (an answer of an unexpected shape).
    Failed,
    /// Never answers.
    Hang,
}

/// A memory store in front of which the network can go down or stop answering, and whose
/// requests can be slow; it logs every call as `"op key"`.
pub struct Flaky {
    pub inner: MemoryStore,
    mode: Mutex<Mode>,
    /// Modes for `renew` only (`None`: the store's mode).
    renew_mode: Mutex<Option<Mode>>,
    /// Renewals to fail before the mode applies again.
    pub fail_renewals: AtomicU64,
    pub request_delay_ms: AtomicU64,
    /// A store without push: its watches never wake anyone.
    pub mute: AtomicBool,
    pub calls: Mutex<Vec<String>>,
    clock: Arc<TokioClock>,
}

impl Flaky {
    pub fn new(inner: MemoryStore, clock: Arc<TokioClock>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            mode: Mutex::new(Mode::Up),
            renew_mode: Mutex::new(None),
            fail_renewals: AtomicU64::new(0),
            request_delay_ms: AtomicU64::new(0),
            mute: AtomicBool::new(false),
            calls: Mutex::new(Vec::new()),
            clock,
        })
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    pub fn set_renew(&self, mode: Option<Mode>) {
        *self.renew_mode.lock().unwrap() = mode;
    }

    pub fn calls(&self, op: &str) -> Vec<String> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|c| c.starts_with(op))
            .cloned()
            .collect()
    }

    async fn gate(&self, op: &str, key: &str) -> Result<(), StoreError> {
        self.calls.lock().unwrap().push(format!("{op} {key}"));
        let mut mode = *self.mode.lock().unwrap();
        if op == "renew" {
            if let Some(m) = *self.renew_mode.lock().unwrap() {
                mode = m;
            }
            let fail = self.fail_renewals.load(Ordering::SeqCst);
            if fail > 0 {
                self.fail_renewals.store(fail - 1, Ordering::SeqCst);
                mode = Mode::Down;
            }
        }
        match mode {
            Mode::Up => Ok(()),
            Mode::Down => Err(StoreError::Unavailable {
                store: "flaky".to_owned(),
                message: "down".to_owned(),
            }),
            Mode::Split => Err(StoreError::Split {
                store: "flaky".to_owned(),
                path: "/tmp/shared.sqlite".to_owned(),
                message: "the file was replaced".to_owned(),
            }),
            Mode::Failed => Err(StoreError::Failed {
                store: "flaky".to_owned(),
                message: "schema 9 is not 3".to_owned(),
            }),
            Mode::Hang => std::future::pending().await,
        }
    }
}

impl Store for Flaky {
    fn kind(&self) -> &str {
        "flaky"
    }

    fn request<'a>(
        &'a self,
        key: &'a str,
        ticket: &'a str,
        terms: &'a Terms,
    ) -> StoreFuture<'a, TicketState> {
        Box::pin(async move {
            self.gate("request", key).await?;
            let state = self.inner.request(key, ticket, terms).await;
            let delay = self.request_delay_ms.load(Ordering::SeqCst);
            if delay > 0 {
                self.clock.sleep_until(self.clock.now_ms() + delay).await;
            }
            state
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a str,
        tickets: &'a [String],
    ) -> StoreFuture<'a, Vec<TicketState>> {
        Box::pin(async move {
            self.gate("renew", &format!("{key} {}", tickets.len()))
                .await?;
            self.inner.renew(key, tickets).await
        })
    }

    fn release<'a>(&'a self, key: &'a str, ticket: &'a str) -> StoreFuture<'a, Removal> {
        Box::pin(async move {
            self.gate("release", key).await?;
            self.inner.release(key, ticket).await
        })
    }

    fn abandon<'a>(&'a self, key: &'a str, ticket: &'a str) -> StoreFuture<'a, Removal> {
        Box::pin(async move {
            self.gate("abandon", key).await?;
            self.inner.abandon(key, ticket).await
        })
    }

    fn pause<'a>(&'a self, key: &'a str, for_ms: u32) -> StoreFuture<'a, u64> {
        Box::pin(async move {
            self.gate("pause", key).await?;
            self.inner.pause(key, for_ms).await
        })
    }

    fn watch(&self, key: &str, watcher: Arc<dyn Watcher>) -> Watch {
        if self.mute.load(Ordering::SeqCst) {
            return Watch::new(Box::pin(async {}), || {});
        }
        self.inner.watch(key, watcher)
    }

    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, KeyInspection> {
        self.inner.inspect(key)
    }

    fn close(&self) -> StoreFuture<'_, ()> {
        self.inner.close()
    }
}

/// A clock whose timers stop firing once [`Mortal::kill`] (or [`Mortal::stop`]) ran: a process
/// killed with SIGKILL (its heartbeat stops; the store keeps its tickets until their leases
/// end), or stopped with SIGSTOP until [`Mortal::cont`].
pub struct Mortal {
    clock: Arc<TokioClock>,
    stopped: tokio::sync::watch::Sender<bool>,
}

impl Mortal {
    pub fn new(clock: &Arc<TokioClock>) -> Arc<Self> {
        Arc::new(Self {
            clock: clock.clone(),
            stopped: tokio::sync::watch::Sender::new(false),
        })
    }

    pub fn kill(&self) {
        self.stop();
    }

    pub fn stop(&self) {
        self.stopped.send_replace(true);
    }

    pub fn cont(&self) {
        self.stopped.send_replace(false);
    }
}

impl Clock for Mortal {
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn sleep_until(&self, at_ms: u64) -> Sleep {
        let sleep = self.clock.sleep_until(at_ms);
        let mut stopped = self.stopped.subscribe();
        Box::pin(async move {
            sleep.await;
            let _ = stopped.wait_for(|stopped| !*stopped).await;
        })
    }
}

/// Polls `f` once: `Some` when it completed at once.
pub fn now_or_never<F: Future>(f: F) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// `f`, which must complete within `ms` of the (paused) clock: a wait that never ends fails the
/// test instead of running virtual time forever.
#[track_caller]
pub fn within<F: Future>(ms: u64, f: F) -> impl Future<Output = F::Output> {
    let caller = std::panic::Location::caller();
    async move {
        match tokio::time::timeout(std::time::Duration::from_millis(ms), f).await {
            Ok(v) => v,
            Err(_) => panic!("{caller}: not done within {ms} ms"),
        }
    }
}

/// The memory store on tokio's paused clock, its time starting at 24 h: every time exact.
pub struct MemoryHarness {
    pub clock: Arc<TokioClock>,
    pub store: MemoryStore,
}

impl MemoryHarness {
    pub fn new() -> Self {
        let (clock, store) = memory(DAY);
        Self { clock, store }
    }
}

impl contract::Harness for MemoryHarness {
    fn store(&self) -> &dyn Store {
        &self.store
    }

    fn clock(&self) -> &Arc<TokioClock> {
        &self.clock
    }

    fn base_ms(&self) -> u64 {
        DAY
    }
}
