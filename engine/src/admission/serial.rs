//! The tool-call serializer of a binding without `allow_parallel`: the chain of tool calls in
//! flight, and the re-entrant calls waiting below it.
//!
//! Every tool call is admitted only when all tool calls in flight are its ancestors, and an
//! ancestor is always admitted before its descendants, so the tool calls in flight form one
//! chain ordered by admission number: each descends from every one before it, and the last (the
//! *tip*) is the deepest.
//!
//! Hence a waiting re-entrant call `R` whose parent had admission number `p` when `R` began has
//! as in-flight ancestors exactly the chain's members numbered `p` or less (they were in flight
//! when `R` began, so they were `R`'s parent and its ancestors; anything admitted later is not
//! an ancestor). Its *nearest* in-flight ancestor is the last of them, and `R` may be admitted
//! exactly when that is the tip (or nothing is in flight: an orphan waits like a call).
//!
//! So waiting re-entrant calls are kept in groups by their nearest in-flight ancestor, each
//! ordered by ticket (arrival). The admissible ones are the tip's group (or the orphans when the
//! chain is empty), and the earliest of them is the candidate; a waiter in another group never
//! stands in its way. When a chain member ends, its group joins the group of the member before
//! it (or the orphans), the smaller set moved into the larger: O(min(a, b) log n). That happens
//! only when a call ends while re-entrant calls it issued still wait; in the usual nesting a
//! call's children have ended before it does.

use std::collections::{BTreeMap, BTreeSet};

use super::Ticket;
use crate::fx::FxHashMap;

/// The chain of tool calls in flight and the re-entrant calls waiting on it.
#[derive(Debug, Default)]
pub(super) struct Serializer {
    /// Tool calls in flight by admission number.
    chain: BTreeMap<u64, Ticket>,
    /// Waiting re-entrant calls by their nearest in-flight ancestor (a chain member); no set is
    /// empty.
    below: FxHashMap<Ticket, BTreeSet<Ticket>>,
    /// Waiting re-entrant calls with no ancestor in flight.
    orphans: BTreeSet<Ticket>,
}

impl Serializer {
    /// The deepest tool call in flight, with its admission number.
    pub(super) fn tip(&self) -> Option<(u64, Ticket)> {
        self.chain.last_key_value().map(|(&seq, &t)| (seq, t))
    }

    /// True when no tool call is in flight: a call may be admitted.
    pub(super) fn is_idle(&self) -> bool {
        self.chain.is_empty()
    }

    /// The tool calls in flight.
    pub(super) fn len(&self) -> usize {
        self.chain.len()
    }

    /// Queues re-entrant call `ticket`, whose parent `parent` (admission number `parent_seq`)
    /// is in flight, so in the chain: it is the nearest in-flight ancestor.
    pub(super) fn wait(&mut self, ticket: Ticket, parent: Ticket, parent_seq: u64) {
        debug_assert_eq!(self.chain.get(&parent_seq), Some(&parent));
        self.below.entry(parent).or_default().insert(ticket);
    }

    /// The earliest waiting re-entrant call that may be admitted now.
    pub(super) fn candidate(&self) -> Option<Ticket> {
        match self.tip() {
            Some((_, tip)) => self.below.get(&tip).and_then(|g| g.first().copied()),
            None => self.orphans.first().copied(),
        }
    }

    /// Removes waiting re-entrant call `ticket` whose parent had admission number
    /// `parent_seq`. False if it was not waiting (a bug of ours).
    pub(super) fn remove(&mut self, ticket: Ticket, parent_seq: u64) -> bool {
        match self.chain.range(..=parent_seq).next_back() {
            Some((_, &nearest)) => {
                let Some(group) = self.below.get_mut(&nearest) else {
                    return false;
                };
                let removed = group.remove(&ticket);
                if group.is_empty() {
                    self.below.remove(&nearest);
                }
                removed
            }
            None => self.orphans.remove(&ticket),
        }
    }

    /// Adds tool call `ticket` with admission number `seq` to the chain. `parent_seq` is its
    /// parent's admission number (re-entrant calls); `None` for a call.
    pub(super) fn admit(&mut self, ticket: Ticket, seq: u64, parent_seq: Option<u64>) {
        // Paired with `release`: the chain stays a chain. A call needs an empty chain; a
        // re-entrant call needs every member to be its ancestor (numbered at most its parent's).
        debug_assert!(match (parent_seq, self.tip()) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(parent_seq), Some((tip_seq, _))) => tip_seq <= parent_seq,
        });
        debug_assert!(self.tip().is_none_or(|(tip_seq, _)| tip_seq < seq));
        debug_assert!(!self.below.contains_key(&ticket));
        self.chain.insert(seq, ticket);
    }

    /// Removes tool call `ticket` (admission number `seq`) from the chain; the re-entrant calls
    /// waiting directly below it now wait below the member before it, or as orphans.
    pub(super) fn release(&mut self, ticket: Ticket, seq: u64) {
        let removed = self.chain.remove(&seq);
        debug_assert_eq!(
            removed,
            Some(ticket),
            "released a tool call not in the chain"
        );
        let Some(mut group) = self.below.remove(&ticket) else {
            return;
        };
        let target = match self.chain.range(..seq).next_back() {
            Some((_, &before)) => self.below.entry(before).or_default(),
            None => &mut self.orphans,
        };
        if group.len() > target.len() {
            std::mem::swap(&mut group, target);
        }
        for waiter in group {
            target.insert(waiter);
        }
    }

    /// Every waiting re-entrant call, emptied (shutdown). The chain stays.
    pub(super) fn take_waiting(&mut self) -> Vec<Ticket> {
        let mut all: Vec<Ticket> = std::mem::take(&mut self.orphans).into_iter().collect();
        for (_, group) in self.below.drain() {
            all.extend(group);
        }
        all
    }
}
