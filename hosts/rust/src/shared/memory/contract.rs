//! The store contract's operations on the memory store: each one [`MemoryStore::op`] (or a
//! read under the lock), so atomic; it runs when its future is first polled.

use std::sync::Arc;

use turnstile_engine::shared::grant::{KeyState, decide};

use super::key::{Ticket, head, refused, state};
use super::{MemoryStore, closed, lock};
use crate::shared::store::{HeldTicket, KeyInspection, Removal, StoreFuture, Terms, TicketState};
use crate::shared::store::{WaitingTicket, Watch, Watcher};
use crate::shared::{Store, StoreError};

impl MemoryStore {
    fn remove(&self, what: &str, key: &str, ticket: &str) -> Result<Removal, StoreError> {
        self.op(
            what,
            key,
            |k, _| {
                let Some(t) = k.tickets.remove(ticket) else {
                    return Ok(Removal::Lost);
                };
                if t.granted.is_some() {
                    k.held -= 1;
                    Ok(Removal::Released)
                } else {
                    k.queue.remove(&t.seq);
                    Ok(Removal::Withdrawn)
                }
            },
            |_, _, removal| removal,
        )
    }

    fn inspect_now(&self, key: &str) -> Result<KeyInspection, StoreError> {
        let mut st = lock(&self.inner.state);
        if st.closed {
            return Err(closed("inspect"));
        }
        let now_ms = self.inner.now(&mut st);
        let mut seen = KeyInspection {
            key: key.to_owned(),
            now_ms,
            seq: 0,
            grants: 0,
            last_grant_ms: 0,
            paused_until_ms: 0,
            arrivals: Vec::new(),
            held: Vec::new(),
            waiting: Vec::new(),
        };
        let Some(k) = st.keys.get(key) else {
            return Ok(seen);
        };
        seen.seq = k.seq;
        seen.grants = k.grants;
        seen.last_grant_ms = k.last_grant_ms;
        seen.paused_until_ms = k.paused_until_ms;
        seen.arrivals = k.arrivals.values().copied().collect();
        for (ticket, t) in &k.tickets {
            if let Some((grant, granted_ms)) = t.granted {
                seen.held.push(HeldTicket {
                    ticket: ticket.clone(),
                    seq: t.seq,
                    grant,
                    granted_ms,
                    expires_ms: t.expires_ms,
                });
            }
        }
        seen.held.sort_by_key(|h| h.grant);
        for (seq, ticket) in &k.queue {
            if let Some(t) = k.tickets.get(ticket) {
                seen.waiting.push(WaitingTicket {
                    ticket: ticket.clone(),
                    seq: *seq,
                    expires_ms: t.expires_ms,
                });
            }
        }
        Ok(seen)
    }
}

impl Store for MemoryStore {
    fn kind(&self) -> &str {
        "memory"
    }

    fn request<'a>(
        &'a self,
        key: &'a str,
        ticket: &'a str,
        terms: &'a Terms,
    ) -> StoreFuture<'a, TicketState> {
        Box::pin(async move {
            self.op(
                "request",
                key,
                |k, now| {
                    if let Some(t) = k.tickets.get_mut(ticket) {
                        t.expires_ms = now.saturating_add(u64::from(t.terms.lease_ms));
                        return Ok(());
                    }
                    // Terms the rule refuses never enter the key (they would refuse every
                    // later grant).
                    let fresh = KeyState {
                        held: 0,
                        last_grant_ms: 0,
                        paused_until_ms: 0,
                        arrivals: Vec::new(),
                    };
                    decide(Some(&head(terms)), &fresh, now).map_err(refused)?;
                    k.seq += 1;
                    let expires_ms = now.saturating_add(u64::from(terms.lease_ms));
                    k.tickets.insert(
                        ticket.to_owned(),
                        Ticket {
                            seq: k.seq,
                            terms: terms.clone(),
                            expires_ms,
                            granted: None,
                        },
                    );
                    k.queue.insert(k.seq, ticket.to_owned());
                    k.expiry_floor_ms = k.expiry_floor_ms.min(expires_ms);
                    Ok(())
                },
                |k, retry, ()| state(k, ticket, retry),
            )
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a str,
        tickets: &'a [String],
    ) -> StoreFuture<'a, Vec<TicketState>> {
        Box::pin(async move {
            self.op(
                "renew",
                key,
                |k, now| {
                    for ticket in tickets {
                        if let Some(t) = k.tickets.get_mut(ticket) {
                            t.expires_ms = now.saturating_add(u64::from(t.terms.lease_ms));
                        }
                    }
                    Ok(())
                },
                |k, retry, ()| tickets.iter().map(|t| state(k, t, retry)).collect(),
            )
        })
    }

    fn release<'a>(&'a self, key: &'a str, ticket: &'a str) -> StoreFuture<'a, Removal> {
        Box::pin(async move { self.remove("release", key, ticket) })
    }

    fn abandon<'a>(&'a self, key: &'a str, ticket: &'a str) -> StoreFuture<'a, Removal> {
        Box::pin(async move { self.remove("abandon", key, ticket) })
    }

    fn pause<'a>(&'a self, key: &'a str, for_ms: u32) -> StoreFuture<'a, u64> {
        Box::pin(async move {
            self.op(
                "pause",
                key,
                |k, now| {
                    k.paused_until_ms = k.paused_until_ms.max(now + u64::from(for_ms));
                    Ok(())
                },
                |k, _, ()| k.paused_until_ms,
            )
        })
    }

    fn watch(&self, key: &str, watcher: Arc<dyn Watcher>) -> Watch {
        let id = {
            let mut st = lock(&self.inner.state);
            let id = st.next_watch;
            st.next_watch += 1;
            st.watchers
                .entry(key.to_owned())
                .or_default()
                .push((id, watcher));
            id
        };
        let weak = Arc::downgrade(&self.inner);
        let key = key.to_owned();
        Watch::new(Box::pin(async {}), move || {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let mut st = lock(&inner.state);
            if let Some(list) = st.watchers.get_mut(&key) {
                list.retain(|(i, _)| *i != id);
                if list.is_empty() {
                    st.watchers.remove(&key);
                }
            }
        })
    }

    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, KeyInspection> {
        Box::pin(async move { self.inspect_now(key) })
    }

    /// Forgets every key and cancels every timer; later calls fail with
    /// [`StoreError::Unavailable`].
    fn close(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let mut st = lock(&self.inner.state);
            st.closed = true;
            for k in st.keys.values() {
                if let Some(t) = &k.timer {
                    t.task.abort();
                }
            }
            st.keys.clear();
            st.watchers.clear();
            Ok(())
        })
    }
}
