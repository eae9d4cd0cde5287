//! A lane: tickets in the order they joined, with lazy removal, in place of an ordered set.
//!
//! A member leaves by [`Lane::remove`], which only counts it out and drops dead tickets from the
//! front; the others stay in place until they reach the front or the lane is compacted. Whether
//! a ticket is still a member is read from the request's own state (the `live` predicate the
//! caller passes), so the front is always a live member, each ticket is pushed and dropped
//! once, and the lane holds at most twice its live members (plus a few): O(1) amortized per
//! operation. The lanes whose tickets join in ticket order (the waiting queues: tickets are
//! handed out in increasing order) are ordered sets with O(1) `first`.

use std::collections::VecDeque;

use super::Ticket;

/// Tickets in joining order, with lazy removal. See the [module docs](self).
#[derive(Debug, Default)]
pub(super) struct Lane {
    tickets: VecDeque<u64>,
    /// Live members; `tickets` holds these and dead ones.
    live: usize,
}

impl Lane {
    /// Live members.
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// The earliest live member.
    pub(super) fn first(&self) -> Option<Ticket> {
        self.tickets.front().copied().map(Ticket)
    }

    /// Adds `ticket` at the back.
    pub(super) fn push(&mut self, ticket: Ticket) {
        self.tickets.push_back(ticket.0);
        self.live += 1;
    }

    /// Adds `ticket`, later than every ticket in the lane, at the back: the lane stays ordered.
    pub(super) fn push_newest(&mut self, ticket: Ticket) {
        debug_assert!(
            self.tickets.back().is_none_or(|&last| last < ticket.0),
            "ticket {ticket:?} joined out of order (or twice)"
        );
        self.push(ticket);
    }

    /// Whether `ticket` is in an ordered lane, live or not (for assertions).
    pub(super) fn holds(&self, ticket: Ticket) -> bool {
        self.tickets.binary_search(&ticket.0).is_ok()
    }

    /// Counts member `ticket` out. `live` tells whether another ticket of the lane is still a
    /// member (it may still say so of `ticket`, which the caller is taking out).
    pub(super) fn remove(&mut self, ticket: Ticket, live: &dyn Fn(Ticket) -> bool) {
        debug_assert!(self.live > 0, "removed {ticket:?} from an empty lane");
        self.live = self.live.saturating_sub(1);
        let member = |t: u64| t != ticket.0 && live(Ticket(t));
        while self.tickets.front().is_some_and(|&t| !member(t)) {
            self.tickets.pop_front();
        }
        // Dead tickets outnumber live ones: at least as many removals as the lane now holds
        // were counted since the last compaction, which pays for this one.
        if self.tickets.len() > 2 * self.live + 16 {
            self.tickets.retain(|&t| member(t));
            debug_assert_eq!(self.tickets.len(), self.live);
        }
    }

    /// Empties the lane, appending its live members to `out` in order.
    pub(super) fn take_into(&mut self, out: &mut Vec<u64>, live: &dyn Fn(Ticket) -> bool) {
        self.live = 0;
        let tickets = std::mem::take(&mut self.tickets);
        out.extend(tickets.into_iter().filter(|&t| live(Ticket(t))));
    }
}
