//! Shared keys' rules, decided once for every host: a shared key's limit holds across
//! processes through a store (SQLite, Redis) of tickets with leases, and the hosts' `shared/`
//! code does only the I/O. Two parts:
//!
//! - [`lease`]: the [`LeaseSchedule`], the sans-IO machine a client drives: when to renew each
//!   ticket's lease and when to give a ticket up before its lease can end at the store.
//! - [`grant`]: the store's grant rule ([`grant::decide`]), which a store applying it in the
//!   host (SQLite) asks between its statements.
//!
//! The store texts (the SQLite schema and statements, the Redis script) are data, not rules:
//! they live in `shared/store/` at the repository root, which both packages ship (the component
//! does not carry them; browsers never open a store). The tests here read them.

pub mod grant;
pub mod lease;

pub use lease::{GiveUpReason, GivenUp, LeaseError, LeaseErrorCode, LeaseSchedule, Poll, Renewal};

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
