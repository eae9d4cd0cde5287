//! Shared keys: one limit across processes, through a store (in Turnstile's repository,
//! SHARED.md is their guide and the store contract every store follows).
//!
//! A shared key keeps its state in a [`Store`] that every process using it shares. The store
//! decides only which process gets the key's next permit, by the engine's grant rule
//! ([`decide`](turnstile_engine::shared::grant::decide)); [`SharedKeys`] is the client a host
//! (the driver) asks for permits, which keeps every ticket's lease by the engine's
//! [`LeaseSchedule`](turnstile_engine::shared::LeaseSchedule). [`MemoryStore`] is one
//! process's memory on a [`Clock`](crate::clock::Clock): for tests, and for several
//! `SharedKeys` (or drivers) of one process.
//!
//! ```text
//! host ──acquire(key, terms)──▶ SharedKeys ──request / renew / release──▶ Store (grant rule)
//!      ◀── SharedPermit ──────  (lease schedule) ◀── ticket states, wake-ups ──
//! ```
//!
//! ```
//! use std::sync::Arc;
//!
//! use turnstile::shared::{AcquireTerms, MemoryStore, MemoryStoreOptions, SharedKeys};
//! use turnstile::shared::SharedKeysOptions;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(MemoryStore::new(MemoryStoreOptions::default())?);
//! let keys = SharedKeys::new(store, SharedKeysOptions::default())?;
//!
//! let permit = keys.acquire("github", AcquireTerms::new(4)).await?;
//! let lost = permit.lost(); // completes if the lease is lost: the call should stop
//! tokio::select! {
//!     () = async { /* call GitHub */ } => {}
//!     error = lost => eprintln!("permit lost: {error}"),
//! }
//! permit.release().await;
//! keys.close().await;
//! # Ok(())
//! # }
//! ```
//!
//! Files, one concept each: `store.rs` the contract (the trait and its types), `error.rs` the
//! errors, `memory/` the memory store (`mod.rs` its atomic step, `contract.rs` its
//! operations, `key.rs` one key and the grant rule applied to it),
//! `keys.rs` the client's API (`acquire`, `pause`, `close`), `client/` its state (`mod.rs`:
//! what the caller's futures do; `lease.rs`: the background task, renewals, give-ups and the
//! states stores report), `permit.rs` the permit.

mod client;
mod error;
mod keys;
mod memory;
mod permit;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;

pub use error::{MemoryStoreError, SharedError, SharedKeysError, StoreError};
pub use keys::{AcquireTerms, KeyTickets, SharedKeys, SharedKeysOptions};
pub use memory::{MemoryStore, MemoryStoreOptions};
pub use permit::SharedPermit;
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteStore, SqliteStoreError, SqliteStoreOptions};
pub use store::{
    Arrival, HeldTicket, KeyInspection, RateWindow, Ready, Removal, Retry, Store, StoreFuture,
    Terms, TicketState, WaitingTicket, Wake, Watch, Watcher,
};

/// The longest key name, in bytes of UTF-8 (the engine's one key length).
pub const KEY_LENGTH_MAX: usize = turnstile_engine::limits::KEY_BYTES_MAX;
/// The longest ticket id a store accepts.
pub const TICKET_LENGTH_MAX: usize = 100;
/// The most tickets one [`Store::renew`] may name.
pub const RENEW_TICKETS_MAX: usize = turnstile_engine::limits::RENEW_TICKETS_MAX;
/// The shortest lease: a heartbeat runs every lease / 3, so a shorter one beats too often.
pub const LEASE_MS_MIN: u32 = turnstile_engine::limits::LEASE_MS_MIN;
/// The longest lease: a dead process's permits are held that long.
pub const LEASE_MS_MAX: u32 = turnstile_engine::limits::LEASE_MS_MAX;
/// The largest limit of a shared key.
pub const LIMIT_MAX: u32 = turnstile_engine::limits::SHARED_LIMIT_MAX;
/// The longest delay or pause (24 h).
pub const DELAY_MS_MAX: u32 = turnstile_engine::limits::SHARED_DELAY_MS_MAX;
/// A rate window's largest count and burst at a store (its arrival times stay exact in 53
/// bits).
pub const RATE_COUNT_MAX: u32 = turnstile_engine::limits::SHARED_RATE_COUNT_MAX;
/// The most rate windows one key may carry.
pub const RATE_WINDOWS_MAX: usize = turnstile_engine::limits::RATE_WINDOWS_MAX;
