//! The store contract (SHARED.md, "The store contract"; the JS package's `contract.ts`): what a
//! store must do so that [`SharedKeys`](super::SharedKeys) can hold one limit across processes.
//!
//! The grant rule, applied by the store atomically in every operation that changes a key:
//!
//! ```text
//! while the key's earliest waiting ticket (by seq, the store's arrival order) exists,
//!   and fewer than ITS limit tickets of the key are granted,
//!   and the store's now >= max(last grant + ITS delay_ms (when > 0), paused until,
//!                              when each of ITS rates lets ITS weight through):
//!   grant it (granted at now, lease renewed, grant = the key's grant count, and each of its
//!   rate windows' arrival times moved past the grant: GCRA, the engine's arithmetic)
//! ```
//!
//! Before that, every ticket whose lease expired (`expires <= now`), granted or waiting, is
//! removed. A store keeps one clock; clients give it durations, never times. The rule is the
//! engine's [`decide`](turnstile_engine::shared::grant::decide).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use turnstile_engine::config::RateWindow;
pub use turnstile_engine::shared::grant::Arrival;

use super::StoreError;

/// What every store operation returns: a boxed future, so `Arc<dyn Store>` works.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A store of shared keys. Every operation is atomic in the store (one transaction or one
/// script, one round trip), applies the grant rule (module doc), and is idempotent for a ticket
/// id the caller chose: a retried [`request`](Store::request) for a live ticket only renews its
/// lease, so a retry after a lost reply never makes a second ticket, and a retried
/// [`release`](Store::release) finds [`Removal::Lost`].
///
/// Errors: [`StoreError::Unavailable`] when the store cannot be reached (or stays locked) within
/// its own timeout, and after [`close`](Store::close); [`StoreError::Failed`] for an answer of
/// an unexpected shape; [`StoreError::Split`] when the store is no longer the one it opened.
/// Arguments are checked by [`SharedKeys`](super::SharedKeys), not here. Every operation
/// settles within a bounded time.
pub trait Store: Send + Sync + 'static {
    /// `"memory"`, `"sqlite"`, `"redis"`, ... (for messages).
    fn kind(&self) -> &str;

    /// Enters `ticket` at the end of `key`'s FIFO with the next `seq` (or only renews its
    /// lease, when it is live already); returns its state after the grant rule.
    fn request<'a>(
        &'a self,
        key: &'a str,
        ticket: &'a str,
        terms: &'a Terms,
    ) -> StoreFuture<'a, TicketState>;

    /// The heartbeat: extends the leases of the live `tickets` by their own `lease_ms`, then
    /// returns their states, in the same order. With no tickets it only applies the rule.
    fn renew<'a>(
        &'a self,
        key: &'a str,
        tickets: &'a [String],
    ) -> StoreFuture<'a, Vec<TicketState>>;

    /// Gives back a granted ticket (its execution ended).
    fn release<'a>(&'a self, key: &'a str, ticket: &'a str) -> StoreFuture<'a, Removal>;

    /// Withdraws a waiting ticket, or gives back a grant never used: the same effect in the
    /// store as [`release`](Store::release), a separate name so logs can tell them apart.
    fn abandon<'a>(&'a self, key: &'a str, ticket: &'a str) -> StoreFuture<'a, Removal>;

    /// No grant on `key` before the store's now + `for_ms` (a pause only extends); returns the
    /// pause's end on the store's clock.
    fn pause<'a>(&'a self, key: &'a str, for_ms: u32) -> StoreFuture<'a, u64>;

    /// Tells `watcher` when tickets of `key` may have changed (see [`Wake`]). A store without
    /// push polls here, with a bounded back-off. Dropping the [`Watch`] ends it.
    fn watch(&self, key: &str, watcher: Arc<dyn Watcher>) -> Watch;

    /// The key as the store holds it (for tests and operators).
    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, KeyInspection>;

    /// Closes connections; later calls fail with [`StoreError::Unavailable`].
    fn close(&self) -> StoreFuture<'_, ()>;
}

/// What a request asks for; the head ticket's own terms decide its grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terms {
    /// How many tickets of the key may be granted at once (processes should agree on it).
    pub limit: u32,
    /// The least time between two grants on the key, in ms (0: none).
    pub delay_ms: u32,
    /// Rate windows every grant on the key keeps within (each window once).
    pub rates: Vec<RateWindow>,
    /// Units this ticket's grant costs in each rate window (1 without windows).
    pub weight: u32,
    /// How long the ticket lives without a renewal, waiting or granted.
    pub lease_ms: u32,
}

/// A ticket's state as the store saw it at the end of an operation. `seq` is its place in the
/// key's FIFO (arrival order at the store); `grant` counts the key's grants (1, 2, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TicketState {
    /// It waits in the key's FIFO.
    Waiting {
        /// The ticket id.
        ticket: String,
        /// Its place in the FIFO.
        seq: u64,
        /// When it is the head and only the delay, a rate window or a pause holds it, the ms
        /// until that ends (a store with wake-ups asks to be checked then).
        retry_ms: Option<u64>,
    },
    /// It holds one of the key's permits.
    Granted {
        /// The ticket id.
        ticket: String,
        /// Its place in the FIFO.
        seq: u64,
        /// The key's grant count at its grant.
        grant: u64,
        /// The grant's time on the store's clock.
        granted_ms: u64,
    },
    /// Unknown to the store: its lease expired, or it was never requested, or was removed.
    Lost {
        /// The ticket id.
        ticket: String,
    },
}

impl TicketState {
    /// The ticket id.
    pub fn ticket(&self) -> &str {
        match self {
            Self::Waiting { ticket, .. } | Self::Granted { ticket, .. } | Self::Lost { ticket } => {
                ticket
            }
        }
    }
}

/// What [`Store::release`] and [`Store::abandon`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Removal {
    /// A granted ticket, now given back.
    Released,
    /// A waiting ticket, now withdrawn.
    Withdrawn,
    /// None: its lease had expired (or it was given back already).
    Lost,
}

/// A nudge from a store's [`Store::watch`]: states it knows already (grants it made, tickets
/// it dropped), a head ticket to check again after a while, or a resync (wake-ups may have been
/// missed: check every waiting ticket).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wake {
    /// States of the watcher's tickets that changed.
    pub states: Vec<TicketState>,
    /// A head ticket to check again after `ms`.
    pub retry: Option<Retry>,
    /// Wake-ups may have been missed: check every waiting ticket.
    pub resync: bool,
}

/// Check `ticket` again after `ms` (see [`Wake::retry`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retry {
    /// The head ticket.
    pub ticket: String,
    /// Milliseconds from now.
    pub ms: u64,
}

/// The caller's side of a [`Store::watch`]. A store calls these from any task, never while
/// holding a lock of its own (they may call back into the store's caller).
pub trait Watcher: Send + Sync + 'static {
    /// The caller's tickets on the key that wait (or were just requested).
    fn tickets(&self) -> Vec<String>;
    /// Tickets of the key may have changed.
    fn wake(&self, wake: Wake);
}

/// The future [`Watch::ready`] gives out.
pub type Ready = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A running watch: [`ready`](Watch::ready) completes once wake-ups flow (a wake-up for a change
/// made after that is not missed); dropping the watch ends it.
pub struct Watch {
    ready: Option<Ready>,
    stop: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Watch {
    /// A watch that is ready once `ready` completes, and runs `stop` when dropped.
    pub fn new(ready: Ready, stop: impl FnOnce() + Send + Sync + 'static) -> Self {
        Self {
            ready: Some(ready),
            stop: Some(Box::new(stop)),
        }
    }

    /// Completes once wake-ups flow (at once after the first call took it).
    pub fn ready(&mut self) -> Ready {
        self.ready.take().unwrap_or_else(|| Box::pin(async {}))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop();
        }
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("ready_taken", &self.ready.is_none())
            .finish_non_exhaustive()
    }
}

/// A key as the store holds it (for tests and operators). Times are on the store's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyInspection {
    /// The key.
    pub key: String,
    /// The store's now when it was read.
    pub now_ms: u64,
    /// The last `seq` given (0: the key is not known).
    pub seq: u64,
    /// Grants made so far.
    pub grants: u64,
    /// The last grant's time (0: none).
    pub last_grant_ms: u64,
    /// No grant before this (0: no pause).
    pub paused_until_ms: u64,
    /// The arrival times of the key's rate windows, by count then length.
    pub arrivals: Vec<Arrival>,
    /// Granted tickets, by grant.
    pub held: Vec<HeldTicket>,
    /// Waiting tickets, by seq.
    pub waiting: Vec<WaitingTicket>,
}

/// A granted ticket in a [`KeyInspection`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldTicket {
    /// The ticket id.
    pub ticket: String,
    /// Its place in the FIFO.
    pub seq: u64,
    /// The key's grant count at its grant.
    pub grant: u64,
    /// The grant's time.
    pub granted_ms: u64,
    /// When its lease ends unless renewed.
    pub expires_ms: u64,
}

/// A waiting ticket in a [`KeyInspection`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingTicket {
    /// The ticket id.
    pub ticket: String,
    /// Its place in the FIFO.
    pub seq: u64,
    /// When its lease ends unless renewed.
    pub expires_ms: u64,
}
