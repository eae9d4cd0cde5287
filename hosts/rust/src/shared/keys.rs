//! [`SharedKeys`]: the async client a host (the driver) uses over a [`Store`] (the JS package's
//! `keys.ts`). [`SharedKeys::acquire`] completes with a [`SharedPermit`] once the store granted
//! the ticket. Every ticket's lease, waiting or granted, is kept by the engine's
//! [`LeaseSchedule`]: this client reports each request, answer and renewal to it and does what
//! its polls say: send the renewals due (one `renew` per key, about every `lease_ms / 3`), give
//! tickets up, and wake it at the time it names.
//!
//! Failure rules:
//! - The store unreachable: `acquire`'s request fails with [`SharedError::StoreUnavailable`]
//!   (the store's own error, or, for a request the store leaves unanswered, once the lease
//!   schedule gives its ticket up, which it then gives back: unlike the JS client, which waits
//!   for the store's timeout, no wait here depends on the store ever answering). A
//!   waiting ticket or a permit whose renewals keep failing (or go unanswered) is given up
//!   before its lease can have expired in the store, counted from when its last confirmed
//!   renewal was sent: the waiter fails, and the permit's [`lost`](SharedPermit::lost)
//!   completes, with `StoreUnavailable`. The store cannot grant that place again before the
//!   lease ends, so nothing is granted twice. A request answered too late to be sure of its
//!   lease is given back and fails the same way.
//! - The store no longer knows a ticket (its lease expired): [`SharedError::LeaseLost`], the
//!   same way.
//! - The store is split ([`StoreError::Split`]): every ticket of every key is given up at once
//!   with it, and nothing is given back to the store.
//! - Two clients given the same `owner` never share a ticket: every ticket id holds a tag of
//!   its `SharedKeys` (`<owner>-<tag>-<n>`).
//! - Every wait ends: on a grant, on drop (the request is withdrawn), on a lost lease or store,
//!   or on [`SharedKeys::close`].
//!
//! The background work (renewals, the schedule's wake-ups, the retries a store asks for) runs
//! in one tokio task per client, spawned on the first `acquire`, plus a short task per store
//! call it makes. A task rather than work driven inside the `acquire` futures, because a
//! permit's renewals must go on after `acquire` returned, while nobody polls anything of this
//! client but the permit's [`lost`](SharedPermit::lost) (which the host may never poll). The
//! task holds the client weakly and ends with [`close`](SharedKeys::close) or the last clone.

use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::oneshot;
use turnstile_engine::shared::LeaseSchedule;

use super::client::{Answered, Begun, Client, Grant};
use super::store::{RateWindow, Terms};
use super::{
    DELAY_MS_MAX, KEY_LENGTH_MAX, LEASE_MS_MAX, LEASE_MS_MIN, LIMIT_MAX, RATE_COUNT_MAX,
    RATE_WINDOWS_MAX, SharedError, SharedKeysError, SharedPermit, Store, StoreError,
};
use crate::clock::{Clock, TokioClock};

/// How [`SharedKeys`] keep their leases.
#[derive(Clone)]
pub struct SharedKeysOptions {
    /// Each ticket's lease, waiting or granted (default 10000 ms; 300 ..= 3600000): a process
    /// killed holds its permits at most this long.
    pub lease_ms: u32,
    /// Starts every ticket id, so a store's tickets show which process holds them (default:
    /// the pid; 1 ..= 60 bytes). A tag of these keys follows it, so clients given the same owner
    /// never share a ticket.
    pub owner: Option<String>,
    /// The clock for leases and retries: the driver's clock, the same object (default: a
    /// [`TokioClock`]).
    pub clock: Arc<dyn Clock>,
}

impl Default for SharedKeysOptions {
    fn default() -> Self {
        Self {
            lease_ms: 10_000,
            owner: None,
            clock: Arc::new(TokioClock::new()),
        }
    }
}

/// What [`SharedKeys::acquire`] asks the store for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireTerms {
    /// The key's limit across every process (1 ..= 1000000); processes should agree on it.
    pub limit: u32,
    /// The least time between two grants on the key, in ms (0 ..= 86400000).
    pub delay_ms: u32,
    /// Rate windows every grant on the key keeps within, across processes (at most 8, each
    /// window once; count and burst 1 ..= 1000000, a length of 1 ms or more): GCRA at the
    /// store.
    pub rates: Vec<RateWindow>,
    /// Units this permit costs in each rate window (1 ..= the smallest burst; 1 without
    /// windows).
    pub weight: u32,
}

impl AcquireTerms {
    /// A limit with no delay, no rate window and a weight of 1.
    pub fn new(limit: u32) -> Self {
        Self {
            limit,
            delay_ms: 0,
            rates: Vec::new(),
            weight: 1,
        }
    }
}

/// This client's tickets on one key (see [`SharedKeys::inspect`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyTickets {
    /// The key.
    pub key: String,
    /// Tickets waiting for a grant.
    pub waiting: usize,
    /// Permits held.
    pub held: usize,
}

/// Shared keys over one store: one lease schedule for every ticket of this client. A client
/// holds only the permits it asked for: each `acquire` is one ticket. Clones share the client.
#[derive(Clone)]
pub struct SharedKeys {
    client: Arc<Client>,
}

impl SharedKeys {
    /// A client of `store`. Refuses a lease outside 300 ..= 3600000 ms and an owner that is
    /// not 1 ..= 60 bytes.
    pub fn new(store: Arc<dyn Store>, options: SharedKeysOptions) -> Result<Self, SharedKeysError> {
        let lease_ms = options.lease_ms;
        if !(LEASE_MS_MIN..=LEASE_MS_MAX).contains(&lease_ms) {
            return Err(SharedKeysError::LeaseOutOfRange { lease_ms });
        }
        let owner = options
            .owner
            .unwrap_or_else(|| std::process::id().to_string());
        if owner.is_empty() || owner.len() > 60 {
            return Err(SharedKeysError::OwnerLength { len: owner.len() });
        }
        let lease = LeaseSchedule::new(lease_ms)
            .map_err(|_| SharedKeysError::LeaseOutOfRange { lease_ms })?;
        let client = Client::new(store, lease, lease_ms, owner, options.clock);
        Ok(Self {
            client: Arc::new(client),
        })
    }

    /// The lease of every ticket, in ms.
    pub fn lease_ms(&self) -> u32 {
        self.client.lease_ms
    }

    /// The owner every ticket id starts with.
    pub fn owner(&self) -> &str {
        &self.client.owner
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.client.store
    }

    /// Waits for a permit on `key`: enters the key's FIFO at the store and completes when the
    /// store granted it. Dropping the future withdraws the request (or gives back a grant that
    /// raced the drop). Fails with [`SharedError::Invalid`] for a key or terms out of range,
    /// [`SharedError::StoreUnavailable`], [`SharedError::LeaseLost`],
    /// [`SharedError::StoreSplit`], or [`SharedError::Closed`] after [`close`](Self::close).
    pub async fn acquire(
        &self,
        key: &str,
        terms: AcquireTerms,
    ) -> Result<SharedPermit, SharedError> {
        check_key(key)?;
        let terms = check_terms(terms, self.client.lease_ms)?;
        let client = &self.client;
        let Begun {
            n,
            ticket,
            mut failed,
        } = client.begin(key)?;
        let mut request = RequestGuard {
            client: Arc::clone(client),
            key,
            ticket: &ticket,
            n,
            armed: true,
        };
        // A request the schedule gave up (unanswered in time), or one `close` ended, fails at
        // once; the guard gives its ticket back.
        let answer = tokio::select! {
            biased;
            answer = client.store.request(key, &ticket, &terms) => answer,
            Ok(error) = &mut failed => return Err(error),
        };
        request.armed = false;
        drop(request);
        let grant = match client.answered(key, &ticket, n, answer)? {
            Answered::Granted(grant) => grant,
            Answered::Waiting(rx) => {
                client.watch_key(key);
                let mut wait = WaitGuard {
                    client: Arc::clone(client),
                    key,
                    ticket: &ticket,
                    n,
                    rx,
                    done: false,
                };
                let outcome = (&mut wait.rx).await;
                wait.done = true;
                // A waiter dropped without an answer only happens once closed.
                outcome.unwrap_or(Err(SharedError::Closed))?
            }
        };
        Ok(SharedPermit::new(Arc::clone(client), key, ticket, n, grant))
    }

    /// No grant on `key`, in any process, before `ms` from now (0 ..= 86400000; a pause only
    /// extends).
    pub async fn pause(&self, key: &str, ms: u64) -> Result<(), SharedError> {
        check_key(key)?;
        let for_ms = u32::try_from(ms)
            .ok()
            .filter(|ms| *ms <= DELAY_MS_MAX)
            .ok_or_else(|| {
                SharedError::invalid(format!("ms must be in 0 ..= {DELAY_MS_MAX}, got {ms}"))
            })?;
        self.client.store.pause(key, for_ms).await?;
        Ok(())
    }

    /// How many of this client's tickets wait and are held, by key (sorted by key).
    pub fn inspect(&self) -> Vec<KeyTickets> {
        (self.client.counts().into_iter())
            .map(|(key, waiting, held)| KeyTickets { key, waiting, held })
            .collect()
    }

    /// Ends every wait with [`SharedError::Closed`], loses every permit with it, and gives
    /// every ticket back to the store (waiting for the store, its errors ignored: leases end
    /// anyway). Later `acquire`s fail with `Closed`. The store stays open.
    pub async fn close(&self) {
        let returns = self.client.close();
        let mut tasks = tokio::task::JoinSet::new();
        for (key, ticket) in returns {
            let store = Arc::clone(&self.client.store);
            tasks.spawn(async move {
                let _: Result<_, StoreError> = store.abandon(&key, &ticket).await;
            });
        }
        while tasks.join_next().await.is_some() {}
    }
}

impl std::fmt::Debug for SharedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedKeys")
            .field("store", &self.client.store.kind())
            .field("owner", &self.client.owner)
            .field("lease_ms", &self.client.lease_ms)
            .finish_non_exhaustive()
    }
}

/// Withdraws a request whose `acquire` was dropped while the store had it.
struct RequestGuard<'a> {
    client: Arc<Client>,
    key: &'a str,
    ticket: &'a str,
    n: u64,
    armed: bool,
}

impl Drop for RequestGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.client.withdraw_request(self.key, self.ticket, self.n);
        }
    }
}

/// Withdraws a waiting ticket whose `acquire` was dropped, or gives back the grant that raced
/// the drop.
struct WaitGuard<'a> {
    client: Arc<Client>,
    key: &'a str,
    ticket: &'a str,
    n: u64,
    rx: oneshot::Receiver<Result<Grant, SharedError>>,
    done: bool,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if self.done || self.client.withdraw_waiter(self.key, self.ticket) {
            return;
        }
        if let Ok(Ok(grant)) = self.rx.try_recv() {
            let permit = SharedPermit::new(
                Arc::clone(&self.client),
                self.key,
                self.ticket.to_owned(),
                self.n,
                grant,
            );
            drop(permit); // abandons it
        }
    }
}

/// 12 hex digits, different for every `SharedKeys` of every process: std's randomly seeded
/// hasher over the pid and a counter (no random-number crate needed).
pub(super) fn tag() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    format!("{:012x}", hasher.finish() & 0xffff_ffff_ffff)
}

fn check_key(key: &str) -> Result<(), SharedError> {
    if key.is_empty() || key.len() > KEY_LENGTH_MAX {
        return Err(SharedError::invalid(format!(
            "key must be 1 ..= {KEY_LENGTH_MAX} bytes of UTF-8, got {}",
            key.len()
        )));
    }
    Ok(())
}

/// The terms as the store gets them, checked: the limit, the delay, at most 8 windows (each
/// once, count and burst 1 ..= 1000000, a length of 1 ms or more), the weight.
fn check_terms(terms: AcquireTerms, lease_ms: u32) -> Result<Terms, SharedError> {
    let range = |what: &str, value: u32, low: u32, high: u32| {
        if (low..=high).contains(&value) {
            Ok(value)
        } else {
            Err(SharedError::invalid(format!(
                "{what} must be in {low} ..= {high}, got {value}"
            )))
        }
    };
    range("terms.limit", terms.limit, 1, LIMIT_MAX)?;
    range("terms.delay_ms", terms.delay_ms, 0, DELAY_MS_MAX)?;
    if terms.rates.len() > RATE_WINDOWS_MAX {
        return Err(SharedError::invalid(format!(
            "terms.rates must hold at most {RATE_WINDOWS_MAX} windows, got {}",
            terms.rates.len()
        )));
    }
    for (i, w) in terms.rates.iter().enumerate() {
        range(
            &format!("terms.rates[{i}].count"),
            w.count,
            1,
            RATE_COUNT_MAX,
        )?;
        range(
            &format!("terms.rates[{i}].burst"),
            w.burst,
            1,
            RATE_COUNT_MAX,
        )?;
        range(&format!("terms.rates[{i}].per_ms"), w.per_ms, 1, u32::MAX)?;
        if (terms.rates[..i].iter()).any(|o| o.count == w.count && o.per_ms == w.per_ms) {
            return Err(SharedError::invalid(format!(
                "terms.rates[{i}] names the window {}/{} ms a second time",
                w.count, w.per_ms
            )));
        }
    }
    let burst_min = terms.rates.iter().map(|w| w.burst).min().unwrap_or(1);
    range("terms.weight", terms.weight, 1, burst_min)?;
    Ok(Terms {
        limit: terms.limit,
        delay_ms: terms.delay_ms,
        rates: terms.rates,
        weight: terms.weight,
        lease_ms,
    })
}
