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
//! root (a waiting one an orphan): O(k log n) for k of them. That happens only when a call ends
//! while calls it issued are still in flight or waiting; in the usual nesting a call's children
//! have ended before it does, and k is 0.

use std::collections::BTreeSet;

use super::Ticket;
use crate::fx::FxHashMap;

/// The tree of tool calls in flight and the re-entrant calls waiting in it.
#[derive(Debug, Default)]
pub(super) struct Serializer {
    /// Every tool call in flight and every ready waiter: its nearest in-flight ancestor (`None`
    /// for a tool call in flight at the root).
    up: FxHashMap<Ticket, Option<Ticket>>,
    /// For each tool call in flight with any: what hangs directly below it (no set is empty).
    down: FxHashMap<Ticket, BTreeSet<Ticket>>,
    /// Tool calls in flight.
    in_flight: usize,
    /// Waiting re-entrant calls with an ancestor in flight, by arrival.
    ready: BTreeSet<Ticket>,
    /// Waiting re-entrant calls with no ancestor in flight, by arrival.
    orphans: BTreeSet<Ticket>,
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
        let queued = self.ready.insert(ticket);
        debug_assert!(queued);
    }

    /// The earliest waiting re-entrant call that may be admitted now: a ready one, or an orphan
    /// when no tool call is in flight.
    pub(super) fn candidate(&self) -> Option<Ticket> {
        let orphan = self.orphans.first().filter(|_| self.is_idle());
        [self.ready.first(), orphan]
            .into_iter()
            .flatten()
            .min()
            .copied()
    }

    /// Takes waiting re-entrant call `ticket` out of the wait, to admit it where it hangs
    /// ([`Serializer::admit`]) or to [`forget`](Serializer::forget) it. False if it was not
    /// waiting (a bug of ours).
    pub(super) fn withdraw(&mut self, ticket: Ticket) -> bool {
        self.ready.remove(&ticket) || self.orphans.remove(&ticket)
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
    pub(super) fn release(&mut self, ticket: Ticket) {
        let Some(up) = self.up.remove(&ticket) else {
            debug_assert!(false, "released a tool call not in the tree");
            return;
        };
        debug_assert!(self.in_flight > 0);
        self.in_flight -= 1;
        self.unhang(ticket, up);
        for below in self.down.remove(&ticket).unwrap_or_default() {
            if up.is_none() && self.ready.remove(&below) {
                self.up.remove(&below);
                self.orphans.insert(below);
            } else {
                self.hang(below, up);
            }
        }
    }

    /// Every waiting re-entrant call, emptied (shutdown). The tool calls in flight stay.
    pub(super) fn take_waiting(&mut self) -> Vec<Ticket> {
        let ready = std::mem::take(&mut self.ready);
        for &ticket in &ready {
            self.forget(ticket);
        }
        let mut all: Vec<Ticket> = std::mem::take(&mut self.orphans).into_iter().collect();
        all.extend(ready);
        all
    }

    /// Puts `ticket` below `up` (or at the root).
    fn hang(&mut self, ticket: Ticket, up: Option<Ticket>) {
        self.up.insert(ticket, up);
        if let Some(up) = up {
            let inserted = self.down.entry(up).or_default().insert(ticket);
            debug_assert!(inserted);
        }
    }

    /// Takes `ticket` from below `up`.
    fn unhang(&mut self, ticket: Ticket, up: Option<Ticket>) {
        let Some(up) = up else {
            return;
        };
        let Some(set) = self.down.get_mut(&up) else {
            debug_assert!(false, "{ticket:?} did not hang below {up:?}");
            return;
        };
        let removed = set.remove(&ticket);
        debug_assert!(removed);
        if set.is_empty() {
            self.down.remove(&up);
        }
    }
}
