//! The errors of shared keys: [`StoreError`] is what a [`Store`](super::Store) fails with,
//! [`SharedError`] what [`SharedKeys`](super::SharedKeys) and a
//! [`SharedPermit`](super::SharedPermit) fail with (a store's error, or a lease lost, or the
//! keys closed), and one small error per constructor.
//!
//! Every error is cheap to clone: one error reaches every waiter and permit a split store ends.

use std::fmt;

/// A store operation failed (the store contract's errors: every store fails with these).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached, or stayed locked, within its own timeout (code
    /// `store-unavailable`); a closed store fails every call with it.
    Unavailable {
        /// The store's kind (`"memory"`, `"sqlite"`, ...).
        store: String,
        /// What failed.
        message: String,
    },
    /// The store's file is no longer the one this process opened (code `store-split`): the
    /// store fails closed, and every later call fails with this too.
    Split {
        /// The store's kind.
        store: String,
        /// The file it opened.
        path: String,
        /// What changed.
        message: String,
    },
    /// The store answered something no client writes or expects (code `store-failed`): a
    /// schema of another version, a ticket whose terms the grant rule refuses.
    Failed {
        /// The store's kind.
        store: String,
        /// What it answered.
        message: String,
    },
}

impl StoreError {
    /// The stable code: `store-unavailable`, `store-split` or `store-failed`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unavailable { .. } => "store-unavailable",
            Self::Split { .. } => "store-split",
            Self::Failed { .. } => "store-failed",
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unavailable { store, message } | Self::Failed { store, message } => {
                write!(f, "{store}: {message}")
            }
            Self::Split {
                store,
                path,
                message,
            } => write!(f, "{store}: {path}: {message}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// Why a wait for a permit ended without one, or why a permit was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SharedError {
    /// The store could not be reached (code `store-unavailable`): a request failed, or renewals
    /// kept failing and the ticket was given up before its lease could end at the store, or a
    /// request was answered too late to be sure of its lease.
    StoreUnavailable {
        /// The store's kind.
        store: String,
        /// What failed, naming the ticket when one was given up.
        message: String,
    },
    /// The store no longer knows the ticket (code `lease-lost`): its lease ended before it was
    /// given back, so the store may grant its place again.
    LeaseLost {
        /// The key.
        key: String,
        /// The ticket id.
        ticket: String,
        /// For people.
        message: String,
    },
    /// The store is split (code `store-split`): every ticket of these keys was given up at once.
    StoreSplit {
        /// The store's kind.
        store: String,
        /// The file it opened.
        path: String,
        /// What changed.
        message: String,
    },
    /// The store answered something unexpected (code `store-failed`).
    StoreFailed {
        /// The store's kind.
        store: String,
        /// What it answered.
        message: String,
    },
    /// [`SharedKeys::close`](super::SharedKeys::close) ran (code `disposed`).
    Closed,
    /// An argument is out of range (code `invalid-argument`); nothing reached the store.
    Invalid {
        /// Which argument, and its range.
        message: String,
    },
}

impl SharedError {
    /// The stable code: `store-unavailable`, `lease-lost`, `store-split`, `store-failed`,
    /// `disposed` or `invalid-argument`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::StoreUnavailable { .. } => "store-unavailable",
            Self::LeaseLost { .. } => "lease-lost",
            Self::StoreSplit { .. } => "store-split",
            Self::StoreFailed { .. } => "store-failed",
            Self::Closed => "disposed",
            Self::Invalid { .. } => "invalid-argument",
        }
    }

    pub(crate) fn lease_lost(key: &str, ticket: &str, message: String) -> Self {
        Self::LeaseLost {
            key: key.to_owned(),
            ticket: ticket.to_owned(),
            message,
        }
    }

    pub(crate) fn expired(key: &str, ticket: &str) -> Self {
        Self::lease_lost(
            key,
            ticket,
            format!("the lease of ticket {ticket} on key {key:?} expired before it was given back"),
        )
    }

    pub(crate) fn invalid(message: String) -> Self {
        Self::Invalid { message }
    }
}

impl From<StoreError> for SharedError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable { store, message } => Self::StoreUnavailable { store, message },
            StoreError::Split {
                store,
                path,
                message,
            } => Self::StoreSplit {
                store,
                path,
                message,
            },
            StoreError::Failed { store, message } => Self::StoreFailed { store, message },
        }
    }
}

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StoreUnavailable { store, message } | Self::StoreFailed { store, message } => {
                write!(f, "{store}: {message}")
            }
            Self::StoreSplit {
                store,
                path,
                message,
            } => write!(f, "{store}: {path}: {message}"),
            Self::LeaseLost { message, .. } | Self::Invalid { message } => f.write_str(message),
            Self::Closed => f.write_str("these shared keys were closed"),
        }
    }
}

impl std::error::Error for SharedError {}

/// [`SharedKeys::new`](super::SharedKeys::new) refused its options.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SharedKeysError {
    /// `lease_ms` is not in 300 ..= 3600000.
    LeaseOutOfRange {
        /// The lease given.
        lease_ms: u32,
    },
    /// `owner` is not 1 ..= 60 bytes.
    OwnerLength {
        /// Its length in bytes.
        len: usize,
    },
}

impl fmt::Display for SharedKeysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LeaseOutOfRange { lease_ms } => write!(
                f,
                "options.lease_ms must be in {} ..= {}, got {lease_ms}",
                super::LEASE_MS_MIN,
                super::LEASE_MS_MAX
            ),
            Self::OwnerLength { len } => {
                write!(f, "options.owner must be 1 ..= 60 bytes, got {len}")
            }
        }
    }
}

impl std::error::Error for SharedKeysError {}

/// [`MemoryStore::new`](super::MemoryStore::new) refused its options.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryStoreError {
    /// `start_ms` is under 24 h (a last grant at 0 means "no grant yet").
    StartTooEarly {
        /// The start given.
        start_ms: u64,
    },
}

impl fmt::Display for MemoryStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StartTooEarly { start_ms } => write!(
                f,
                "options.start_ms must be at least {} (24 h: a last grant of 0 means none), got \
                 {start_ms}",
                super::DELAY_MS_MAX
            ),
        }
    }
}

impl std::error::Error for MemoryStoreError {}
