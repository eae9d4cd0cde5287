//! Key sets: a call that takes several keys (`concurrency = [{ key = "fs:{src}" }, { key =
//! "fs:{dst}" }]`). Its entries wait in every one of its keys' queues and start only when each
//! of those keys has room, its gate is open, and the entry is first among the waiting entries
//! of every queue; they then take a slot of each, hold them all until they end, and give them
//! all back. Nothing is ever held partly: the check and the taking happen in one transition.
//!
//! Why this cannot deadlock or starve: every queue is in entry order, and entry numbers are
//! one global order (batch, then written order). Take the lowest-numbered waiting entry: if it
//! is pending, it waits for the host's decision, which no key holds; if it is approved (its
//! batch open), no waiting entry comes before it in any queue, so it waits only for room and
//! for time on its own keys, which running executions give back when they end. Each
//! key's walk releases in entry order, and a set entry is released only at the front of every
//! queue, so the per-key FIFO assertion (`Keys::released_in_order`) holds on every key of the
//! set, paired with the enqueue assertion (`Keys::enqueue`).
//!
//! A set may hold one shared key, its first: only that key's walk releases its entries, as a
//! permit request that takes a slot of every key of the set at once (`set_turn` sends any
//! other key's walk back to it), and a granted entry starts in written order on the shared key
//! (`shared.rs`). The argument above holds with "released" read as "asks for its permit".
//!
//! A key named by two members (two templates that made one name) counts once. A set has at
//! most one adaptive key, and a rate limit on a call of a set pauses each of its keys: the
//! host cannot say which resource answered 429, so every key the call holds waits.

use super::batch::distinct;
use super::{Scheduler, State, Turn};

impl Scheduler {
    /// Whether entry `index` of batch `slot` has a key set (more than one key). A batch without
    /// sets answers from its own vector, without looking the entry's call up.
    #[inline]
    pub(super) fn in_set(&self, slot: u32, index: u32) -> bool {
        let batch = self.batches.slot(slot);
        !batch.set_keys.is_empty()
            && batch.calls[batch.entries[index as usize].call as usize].set_len > 0
    }

    /// The range of entry `index`'s key set beyond its first key in its batch's `set_keys`.
    #[inline]
    pub(super) fn set_span(&self, slot: u32, index: u32) -> std::ops::Range<usize> {
        let batch = self.batches.slot(slot);
        if batch.set_keys.is_empty() {
            return 0..0;
        }
        let call = &batch.calls[batch.entries[index as usize].call as usize];
        let start = call.set_start as usize;
        start..start + call.set_len as usize
    }

    /// Key `j` of entry's key set beyond its first (in its batch's `set_keys`), with its
    /// weight; `None` for a member that repeats an earlier member's key.
    #[inline]
    pub(super) fn set_key(&self, slot: u32, j: usize) -> Option<(u32, u32)> {
        distinct(&self.batches.slot(slot).set_keys[j..=j]).next()
    }

    /// Every key of entry `index` of batch `slot`, each once: its first, then the rest of its
    /// set. A copy, so the caller may change the scheduler while it goes through them.
    pub(super) fn keys_of(&self, slot: u32, index: u32) -> Vec<u32> {
        let batch = self.batches.slot(slot);
        let first = batch.entries[index as usize].key.get();
        let rest = batch.other_keys(index).map(|(k, _)| k);
        first.into_iter().chain(rest).collect()
    }

    /// The one adaptive key of entry `index`'s key set (a set has at most one), if any.
    #[inline]
    pub(super) fn adaptive_key(&self, slot: u32, index: u32) -> Option<u32> {
        let first = self.batches.slot(slot).entries[index as usize].key.get()?;
        if self.keys.key(first).adapt.is_some() {
            return Some(first);
        }
        if !self.in_set(slot, index) {
            return None;
        }
        let batch = self.batches.slot(slot);
        let mut others = batch.other_keys(index).map(|(k, _)| k);
        others.find(|&k| self.keys.key(k).adapt.is_some())
    }

    /// The rest of a key set's turn, once key `k`'s walk found its entry `e` (entry `index` of
    /// batch `slot`) approved, with room and an open gate on `k`: it goes only when every other
    /// key of its set has room and an open gate too, and `e` is first among the waiting
    /// entries of each one's queue. A closed gate arms that key's wake-up.
    #[inline(never)]
    pub(super) fn set_turn(&mut self, k: u32, e: u64, slot: u32, index: u32) -> Turn {
        let first = self.batches.slot(slot).entries[index as usize].key.get();
        // A set with a shared key (its first) goes only through that key's walk, which asks
        // the store for the permit: another key's walk only wakes it.
        if let Some(shared) = first.filter(|&f| f != k && self.keys.key(f).shared) {
            self.keys.mark_dirty(shared);
            return Turn::Wait;
        }
        let rest = self.set_span(slot, index).map(Some);
        for j in std::iter::once(None).chain(rest) {
            let other = match j {
                None => first,
                Some(j) => self.set_key(slot, j).map(|(other, _)| other),
            };
            let Some(other) = other.filter(|&o| o != k) else {
                continue;
            };
            let key = self.keys.key(other);
            if !key.has_room() {
                return Turn::Wait;
            }
            let gate = key.gate(self.weight(other, slot, index));
            let first = if key.tree {
                self.paths_clear(other, e, (slot, index))
            } else {
                self.first_waiting(other, e)
            };
            if !first {
                return Turn::Wait;
            }
            if gate > self.now {
                self.arm_key(other, gate);
                return Turn::Wait;
            }
        }
        Turn::Go(slot, index)
    }

    /// Whether `e` is first among the entries waiting in key `k`'s queue (pending or
    /// approved). Entries at the front that no longer wait are dropped on the way, as the
    /// key's own walk would drop them.
    fn first_waiting(&mut self, k: u32, e: u64) -> bool {
        // A shared key's walk keeps entries that ask for or hold a permit: a set's shared key is
        // its first, which `set_turn` never checks here (it sends other keys' walks to it).
        debug_assert!(
            !self.keys.key(k).shared,
            "shared key {k} checked as a set's other key"
        );
        while let Some(&q) = self.keys.key(k).queue().front() {
            if q == e {
                return true;
            }
            if matches!(self.state_of(q), Some(State::Pending | State::Approved)) {
                return false;
            }
            self.keys.pop_front(k);
        }
        debug_assert!(false, "entry {e} is not queued on key {k} of its set");
        // Nothing waits ahead of it there: going fails safe, waiting would never wake.
        true
    }

    /// Entry `e` of a key set was released by key `k`'s walk: its other keys record the release
    /// for their FIFO assertion and walk, which drops it from their queues and lets what
    /// waited behind it go.
    #[inline(never)]
    pub(super) fn set_released(&mut self, k: u32, e: u64, slot: u32, index: u32) {
        for other in self.keys_of(slot, index) {
            if other != k {
                self.keys.released_in_order(other, e);
                self.keys.mark_dirty(other);
            }
        }
    }

    /// The state of a live entry by number.
    fn state_of(&self, e: u64) -> Option<State> {
        let (slot, index) = self.batches.locate(e)?;
        Some(self.batches.slot(slot).entries[index as usize].life.get())
    }
}
