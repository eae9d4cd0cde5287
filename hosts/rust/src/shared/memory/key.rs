//! One key of the memory store: its counters, tickets and timer, and the grant rule applied to
//! it (the engine's [`decide`]): leases purged, heads granted.

use std::collections::{BTreeMap, HashMap};

use tokio::task::AbortHandle;
use turnstile_engine::shared::grant::{Decision, GrantError, Head, KeyState, decide};

use crate::shared::{Arrival, StoreError, Terms, TicketState};

/// The most grants one operation makes (the contract's bound).
const GRANTS_PER_CALL_MAX: usize = 10_000;

/// One key: its counters, its tickets, its timer.
pub(super) struct Key {
    pub(super) seq: u64,
    pub(super) grants: u64,
    pub(super) last_grant_ms: u64,
    pub(super) paused_until_ms: u64,
    /// The longest delay a granted ticket had: the key is forgotten only once it has passed.
    pub(super) delay_max_ms: u64,
    /// Each rate window's arrival time, by count and length.
    pub(super) arrivals: BTreeMap<(u32, u32), Arrival>,
    /// The key's windows pace as fresh ones from then: it is kept until then at least.
    pub(super) rested_ms: u64,
    pub(super) tickets: HashMap<String, Ticket>,
    /// The waiting tickets by seq.
    pub(super) queue: BTreeMap<u64, String>,
    pub(super) held: u32,
    /// No lease ends before this (a lower bound: renewals only lengthen leases; `u64::MAX`:
    /// no ticket).
    pub(super) expiry_floor_ms: u64,
    pub(super) timer: Option<Timer>,
}

pub(super) struct Ticket {
    pub(super) seq: u64,
    pub(super) terms: Terms,
    pub(super) expires_ms: u64,
    /// The grant's number and time, once granted.
    pub(super) granted: Option<(u64, u64)>,
}

pub(super) struct Timer {
    pub(super) at_ms: u64,
    pub(super) id: u64,
    pub(super) task: AbortHandle,
}

/// The head left waiting when only its delay, a rate window or a pause holds it.
pub(super) struct HeadRetry {
    pub(super) ticket: String,
    pub(super) ms: u64,
}

impl Key {
    pub(super) fn new() -> Self {
        Self {
            seq: 0,
            grants: 0,
            last_grant_ms: 0,
            paused_until_ms: 0,
            delay_max_ms: 0,
            arrivals: BTreeMap::new(),
            rested_ms: 0,
            tickets: HashMap::new(),
            queue: BTreeMap::new(),
            held: 0,
            expiry_floor_ms: u64::MAX,
            timer: None,
        }
    }
}

/// Drops every ticket whose lease ended (`expires <= now`), granted or waiting; returns them as
/// lost.
pub(super) fn purge(k: &mut Key, now: u64) -> HashMap<String, TicketState> {
    let mut changed = HashMap::new();
    if now < k.expiry_floor_ms {
        return changed;
    }
    let mut floor = u64::MAX;
    let (queue, held) = (&mut k.queue, &mut k.held);
    k.tickets.retain(|ticket, t| {
        if t.expires_ms > now {
            floor = floor.min(t.expires_ms);
            return true;
        }
        if t.granted.is_some() {
            *held -= 1;
        } else {
            queue.remove(&t.seq);
        }
        let lost = TicketState::Lost {
            ticket: ticket.clone(),
        };
        changed.insert(ticket.clone(), lost);
        false
    });
    k.expiry_floor_ms = floor;
    changed
}

/// The grant rule (the engine's [`decide`]): grants heads while it says so; returns the head
/// left waiting when only its delay, a rate window or a pause holds it.
pub(super) fn promote(
    key: &str,
    k: &mut Key,
    now: u64,
    changed: &mut HashMap<String, TicketState>,
) -> Result<Option<HeadRetry>, StoreError> {
    for _ in 0..GRANTS_PER_CALL_MAX {
        let first = k.queue.first_key_value().map(|(_, id)| id.clone());
        let head_terms = (first.as_ref())
            .and_then(|id| k.tickets.get(id))
            .map(|t| head(&t.terms));
        let state = KeyState {
            held: k.held,
            last_grant_ms: k.last_grant_ms,
            paused_until_ms: k.paused_until_ms,
            arrivals: k.arrivals.values().copied().collect(),
        };
        let (arrivals, rested_ms) = match decide(head_terms.as_ref(), &state, now) {
            Err(e) => return Err(refused(e)),
            Ok(Decision::Empty | Decision::Full) => return Ok(None),
            Ok(Decision::Wait { retry_ms }) => {
                let ticket = first.unwrap_or_default();
                return Ok(Some(HeadRetry {
                    ticket,
                    ms: retry_ms,
                }));
            }
            Ok(Decision::Grant {
                arrivals,
                rested_ms,
            }) => (arrivals, rested_ms),
        };
        let Some((seq, id)) = k.queue.pop_first() else {
            return Ok(None);
        };
        for a in arrivals {
            k.arrivals.insert((a.count, a.per_ms), a);
        }
        k.rested_ms = k.rested_ms.max(rested_ms);
        k.grants += 1;
        k.last_grant_ms = now;
        k.held += 1;
        if let Some(t) = k.tickets.get_mut(&id) {
            t.granted = Some((k.grants, now));
            t.expires_ms = now.saturating_add(u64::from(t.terms.lease_ms));
            k.delay_max_ms = k.delay_max_ms.max(u64::from(t.terms.delay_ms));
        }
        let granted = TicketState::Granted {
            ticket: id.clone(),
            seq,
            grant: k.grants,
            granted_ms: now,
        };
        changed.insert(id, granted);
    }
    Err(StoreError::Failed {
        store: "memory".to_owned(),
        message: format!("more than {GRANTS_PER_CALL_MAX} grants in one operation on key {key:?}"),
    })
}

pub(super) fn state(k: &Key, ticket: &str, retry: Option<&HeadRetry>) -> TicketState {
    let ticket_id = ticket.to_owned();
    match k.tickets.get(ticket) {
        None => TicketState::Lost { ticket: ticket_id },
        Some(t) => match t.granted {
            Some((grant, granted_ms)) => TicketState::Granted {
                ticket: ticket_id,
                seq: t.seq,
                grant,
                granted_ms,
            },
            None => TicketState::Waiting {
                ticket: ticket_id,
                seq: t.seq,
                retry_ms: retry.filter(|r| r.ticket == ticket).map(|r| r.ms),
            },
        },
    }
}

pub(super) fn head(terms: &Terms) -> Head {
    Head {
        limit: terms.limit,
        delay_ms: terms.delay_ms,
        rates: terms.rates.clone(),
        weight: terms.weight,
    }
}

pub(super) fn refused(e: GrantError) -> StoreError {
    StoreError::Failed {
        store: "memory".to_owned(),
        message: format!("the store holds a ticket no client writes: {}", e.message),
    }
}
