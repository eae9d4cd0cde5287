//! [`SharedPermit`]: a granted ticket, and how it is given back.

use std::future::Future;
use std::sync::Arc;

use super::client::{Client, Grant, PermitCell};
use super::{Removal, SharedError, StoreError};

/// A granted ticket. Give it back with [`release`](Self::release) (the execution ended) or
/// [`abandon`](Self::abandon) (it never started); dropping it abandons it in the background.
/// [`lost`](Self::lost) completes when its lease is lost ([`SharedError::LeaseLost`]), its store
/// stayed unreachable ([`SharedError::StoreUnavailable`]) or split, or the keys closed: the
/// execution should then stop.
pub struct SharedPermit {
    client: Arc<Client>,
    key: String,
    ticket: String,
    n: u64,
    seq: u64,
    grant: u64,
    granted_ms: u64,
    cell: Arc<PermitCell>,
    done: bool,
}

#[derive(Clone, Copy)]
enum End {
    Release,
    Abandon,
}

impl SharedPermit {
    pub(super) fn new(
        client: Arc<Client>,
        key: &str,
        ticket: String,
        n: u64,
        grant: Grant,
    ) -> Self {
        Self {
            client,
            key: key.to_owned(),
            ticket,
            n,
            seq: grant.seq,
            grant: grant.grant,
            granted_ms: grant.granted_ms,
            cell: grant.cell,
            done: false,
        }
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The ticket id (`<owner>-<tag>-<n>`).
    pub fn ticket(&self) -> &str {
        &self.ticket
    }

    /// The ticket's place in the key's FIFO at the store.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The key's grant count at this grant (1, 2, ...).
    pub fn grant(&self) -> u64 {
        self.grant
    }

    /// The grant's time on the store's clock.
    pub fn granted_ms(&self) -> u64 {
        self.granted_ms
    }

    /// Why the permit was lost, once it was (see [`lost`](Self::lost)).
    pub fn lost_error(&self) -> Option<SharedError> {
        self.cell.lost.borrow().clone()
    }

    /// Completes when the lease is lost, the store stays unreachable or splits, or the keys
    /// close (the JS permit's `signal` aborting); never, once the permit was given back.
    pub fn lost(&self) -> impl Future<Output = SharedError> + Send + 'static {
        let mut rx = self.cell.lost.subscribe();
        async move {
            let seen = match rx.wait_for(Option::is_some).await {
                Ok(lost) => lost.clone(),
                Err(_) => None,
            };
            match seen {
                Some(error) => error,
                None => std::future::pending().await,
            }
        }
    }

    /// The execution ended: gives the permit back (store errors ignored: the lease then ends on
    /// its own).
    pub async fn release(self) {
        let _ = self.try_release().await;
    }

    /// A permit never used: gives it back (store errors ignored).
    pub async fn abandon(self) {
        let _ = self.try_abandon().await;
    }

    /// [`release`](Self::release), with what the store found: [`Removal::Lost`] when the lease
    /// had ended first (and without a store call when the permit was lost already).
    pub async fn try_release(mut self) -> Result<Removal, StoreError> {
        self.end(End::Release).await
    }

    /// [`abandon`](Self::abandon), with what the store found.
    pub async fn try_abandon(mut self) -> Result<Removal, StoreError> {
        self.end(End::Abandon).await
    }

    async fn end(&mut self, how: End) -> Result<Removal, StoreError> {
        self.done = true;
        if !self.client.end(&self.key, &self.ticket, self.n, &self.cell) {
            return Ok(Removal::Lost);
        }
        let store = &self.client.store;
        match how {
            End::Release => store.release(&self.key, &self.ticket).await,
            End::Abandon => store.abandon(&self.key, &self.ticket).await,
        }
    }
}

impl Drop for SharedPermit {
    fn drop(&mut self) {
        if !self.done && self.client.end(&self.key, &self.ticket, self.n, &self.cell) {
            self.client.give_back_dropped(&self.key, &self.ticket);
        }
    }
}

impl std::fmt::Debug for SharedPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPermit")
            .field("key", &self.key)
            .field("ticket", &self.ticket)
            .field("seq", &self.seq)
            .field("grant", &self.grant)
            .field("granted_ms", &self.granted_ms)
            .finish_non_exhaustive()
    }
}
