//! The tool-call serializer of a binding without `allow_parallel`: the tree of tool calls in
//! flight, and the re-entrant calls waiting in it.
//!
//! A call (and a re-entrant call whose ancestors have all ended, an *orphan*) is admitted only
//! when no tool call is in flight; a re-entrant call with an ancestor in flight skips the
//! serializer and is bounded by the budget only. So every tool call in flight descends from the
//! one call admitted last onto an idle serializer (through its parents, ended ones included),
//! and they form a tree: each under its *nearest in-flight ancestor*, the first link in flight
//! up its line of parents. An ended link is skipped, not a break: a re-entrant call whose
//! parent ended while the grandparent is in flight still descends from that grandparent.
//!
//! Waiting re-entrant calls hang in the same tree, under their nearest in-flight ancestor; they
//! are *ready* (bounded by the budget only) while they have one, and become orphans when the
//! last of their ancestors ends. When a tool call ends, what hung directly below it (tool calls
//! in flight and waiting calls) moves below its own nearest in-flight ancestor, or becomes a
//! root (a waiting one an orphan): O(k) amortized for k of them, and O(log n) for each new
//! orphan. That happens only when a call ends while calls it issued are still in flight or
//! waiting; in the usual nesting a call's children have ended before it does, and k is 0.
//!
//! What hangs below a call, and the ready waiters, are [`Lane`]s: a member's liveness is read
//! from `up` (and, for a waiter, from its request being queued, which the caller tells). Ready
//! waiters join in ticket order (at `begin`), so that lane is ordered; orphans join in any order
//! (when a root ends), so they sit in a min-heap with lazy removal, the heap type the scheduler's
//! idle keys use.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Ticket;
use super::lane::Lane;
use crate::fx::FxHashMap;

/// Whether a waiting request is still queued (its state, which the caller holds).
pub(super) type Queued<'a> = &'a dyn Fn(Ticket) -> bool;

/// The tree of tool calls in flight and the re-entrant calls waiting in it.
#[derive(Debug, Default)]
pub(super) struct Serializer {
    /// Every tool call in flight and every ready waiter: its nearest in-flight ancestor (`None`
    /// for a tool call in flight at the root).
    up: FxHashMap<Ticket, Option<Ticket>>,
    /// For each tool call in flight with any: what hangs directly below it (no lane is empty).
    /// A member hangs there while `up` says so.
    down: FxHashMap<Ticket, Lane>,
    /// Tool calls in flight.
    in_flight: usize,
    /// Waiting re-entrant calls with an ancestor in flight, by arrival: members while queued
    /// and in `up`.
    ready: Lane,
    /// Waiting re-entrant calls with no ancestor in flight, earliest first (`(ticket, 0)`):
    /// members while queued and not in `up`. The top is always a member.
    orphans: BinaryHeap<Reverse<(u64, u32)>>,
    /// The members of `orphans`; the heap holds these and dead items.
    orphans_live: usize,
}

impl Serializer {
    /// True when no tool call is in flight: a call or an orphan may be admitted.
    pub(super) fn is_idle(&self) -> bool {
        self.in_flight == 0
    }

    /// The tool calls in flight.
    pub(super) fn len(&self) -> usize {
        self.in_flight
    }

    /// Queues re-entrant call `ticket` below `parent`, a tool call in flight.
    pub(super) fn wait(&mut self, ticket: Ticket, parent: Ticket) {
        debug_assert!(self.up.contains_key(&parent), "a parent is in flight");
        self.hang(ticket, Some(parent));
        self.ready.push_newest(ticket);
    }

    /// The earliest waiting re-entrant call that may be admitted now: a ready one, or an orphan
    /// when no tool call is in flight.
    pub(super) fn candidate(&self) -> Option<Ticket> {
        let orphan = self.orphans.peek().filter(|_| self.is_idle());
        let orphan = orphan.map(|&Reverse((ticket, _))| Ticket(ticket));
        [self.ready.first(), orphan].into_iter().flatten().min()
    }

    /// Takes waiting re-entrant call `ticket` out of the wait, to admit it where it hangs
    /// ([`Serializer::admit`]) or to [`forget`](Serializer::forget) it. It is still queued.
    pub(super) fn withdraw(&mut self, ticket: Ticket, queued: Queued<'_>) {
        debug_assert!(queued(ticket), "withdrew {ticket:?}, not waiting");
        if self.up.contains_key(&ticket) {
            debug_assert!(self.ready.holds(ticket), "{ticket:?} is not a ready waiter");
            let up = &self.up;
            self.ready
                .remove(ticket, &|t| queued(t) && up.contains_key(&t));
        } else {
            self.remove_orphan(ticket, queued);
        }
    }

    /// Counts orphan `ticket` out and drops dead items from the top, and compacts the heap
    /// once dead items outnumber live ones (paid for by as many removals).
    fn remove_orphan(&mut self, ticket: Ticket, queued: Queued<'_>) {
        debug_assert!(self.orphans_live > 0, "{ticket:?} is not an orphan");
        self.orphans_live = self.orphans_live.saturating_sub(1);
        let up = &self.up;
        let member = |t: u64| t != ticket.0 && queued(Ticket(t)) && !up.contains_key(&Ticket(t));
        while self
            .orphans
            .peek()
            .is_some_and(|&Reverse((t, _))| !member(t))
        {
            self.orphans.pop();
        }
        if self.orphans.len() > 2 * self.orphans_live + 16 {
            self.orphans.retain(|&Reverse((t, _))| member(t));
            debug_assert_eq!(self.orphans.len(), self.orphans_live);
        }
    }

    /// Forgets withdrawn re-entrant call `ticket` (abandoned while queued).
    pub(super) fn forget(&mut self, ticket: Ticket) {
        if let Some(up) = self.up.remove(&ticket) {
            self.unhang(ticket, up);
        }
    }

    /// Tool call `ticket` is admitted: a call or an orphan onto an idle serializer, at the root;
    /// a withdrawn ready waiter where it hangs.
    pub(super) fn admit(&mut self, ticket: Ticket) {
        // Paired with `release`: only a ready waiter joins tool calls in flight.
        let ready = self.up.contains_key(&ticket);
        debug_assert!(
            ready || self.is_idle(),
            "a call admitted next to a tool call"
        );
        if !ready {
            self.hang(ticket, None);
        }
        self.in_flight += 1;
    }

    /// Tool call `ticket` ended: what hangs below it moves below its nearest in-flight ancestor,
    /// or becomes a root (a waiting call an orphan).
    pub(super) fn release(&mut self, ticket: Ticket, queued: Queued<'_>) {
        let Some(up) = self.up.remove(&ticket) else {
            debug_assert!(false, "released a tool call not in the tree");
            return;
        };
        debug_assert!(self.in_flight > 0);
        self.in_flight -= 1;
        self.unhang(ticket, up);
        let Some(mut lane) = self.down.remove(&ticket) else {
            return;
        };
        let mut hanging = Vec::with_capacity(lane.len());
        let ups = &self.up;
        lane.take_into(&mut hanging, &|t| ups.get(&t) == Some(&Some(ticket)));
        for below in hanging.into_iter().map(Ticket) {
            if up.is_none() && queued(below) {
                // A ready waiter loses its last ancestor in flight.
                self.up.remove(&below);
                let ups = &self.up;
                self.ready
                    .remove(below, &|t| queued(t) && ups.contains_key(&t));
                self.orphans.push(Reverse((below.0, 0)));
                self.orphans_live += 1;
            } else {
                self.hang(below, up);
            }
        }
    }

    /// Every waiting re-entrant call, emptied onto `out` (shutdown). The tool calls in flight
    /// stay.
    pub(super) fn take_waiting(&mut self, out: &mut Vec<u64>, queued: Queued<'_>) {
        // Orphans first: forgetting a ready waiter takes it out of `up`, as an orphan is.
        let up = &self.up;
        let orphans = std::mem::take(&mut self.orphans);
        out.extend(
            orphans
                .into_iter()
                .map(|Reverse((t, _))| t)
                .filter(|&t| queued(Ticket(t)) && !up.contains_key(&Ticket(t))),
        );
        self.orphans_live = 0;
        let start = out.len();
        self.ready
            .take_into(out, &|t| queued(t) && up.contains_key(&t));
        for &ticket in &out[start..] {
            self.forget(Ticket(ticket));
        }
    }

    /// Whether every lane and the orphan heap keep their dead items within bounds (for tests).
    #[cfg(test)]
    pub(super) fn bounded(&self) -> bool {
        self.ready.bounded()
            && self.down.values().all(Lane::bounded)
            && self.orphans.len() <= 2 * self.orphans_live + 16
    }

    /// Puts `ticket` below `up` (or at the root).
    fn hang(&mut self, ticket: Ticket, up: Option<Ticket>) {
        self.up.insert(ticket, up);
        if let Some(up) = up {
            self.down.entry(up).or_default().push(ticket);
        }
    }

    /// Takes `ticket` from below `up`.
    fn unhang(&mut self, ticket: Ticket, up: Option<Ticket>) {
        let Some(up) = up else {
            return;
        };
        let Some(lane) = self.down.get_mut(&up) else {
            debug_assert!(false, "{ticket:?} did not hang below {up:?}");
            return;
        };
        let ups = &self.up;
        lane.remove(ticket, &|t| ups.get(&t) == Some(&Some(up)));
        if lane.len() == 0 {
            self.down.remove(&up);
        }
    }
}
