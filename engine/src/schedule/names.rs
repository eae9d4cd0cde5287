//! Growth of vectors, and the set of call ids in use by live batches. A call id is stored once, in its
//! batch; the set maps its 64-bit hash to the call, and a second list holds the astronomically
//! rare ids whose hash another live id already has.

use std::hash::Hasher;

pub(crate) use crate::fx::FxHashMap;
use crate::fx::FxHasher;

/// Makes room for `additional` more elements, growing by half rather than doubling: still
/// amortized O(1) per element, with a quarter of the slack on average. Entries, calls and ids
/// are most of a queued execution's memory, and a wasm memory never shrinks.
pub(crate) fn grow<T>(v: &mut Vec<T>, additional: usize) {
    let needed = v.len().saturating_add(additional);
    if needed > v.capacity() {
        let target = needed.max(v.capacity().saturating_add(v.capacity() / 2));
        v.reserve_exact(target - v.len());
    }
}

/// Where a live call is: its batch's slot and its index in that batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallRef {
    pub(crate) slot: u32,
    pub(crate) call: u32,
}

impl CallRef {
    fn pack(self) -> u64 {
        (u64::from(self.slot) << 32) | u64::from(self.call)
    }

    fn unpack(packed: u64) -> Self {
        Self {
            slot: (packed >> 32) as u32,
            call: packed as u32,
        }
    }
}

/// The call ids of live batches, each unique among them. (Every map of the scheduler is
/// `u64 -> u64`, so the component carries one copy of the hash table's code.)
#[derive(Debug, Default)]
pub(crate) struct LiveIds {
    by_hash: FxHashMap<u64, u64>,
    /// Ids whose hash another live id holds in `by_hash`, with that hash.
    collided: Vec<(u64, CallRef)>,
}

/// The hash `LiveIds` files an id under.
pub(crate) fn id_hash(id: &str) -> u64 {
    let mut h = FxHasher::default();
    h.write(id.as_bytes());
    h.finish()
}

impl LiveIds {
    /// The live call with this id, given its hash; `id_of` reads a live call's id.
    pub(crate) fn find<'a>(
        &self,
        hash: u64,
        id: &str,
        id_of: impl Fn(CallRef) -> &'a str,
    ) -> Option<CallRef> {
        let first = CallRef::unpack(*self.by_hash.get(&hash)?);
        if id_of(first) == id {
            return Some(first);
        }
        self.collided
            .iter()
            .find(|&&(h, c)| h == hash && id_of(c) == id)
            .map(|&(_, c)| c)
    }

    /// Files a call whose id the caller checked is not live.
    pub(crate) fn insert(&mut self, hash: u64, call: CallRef) {
        match self.by_hash.entry(hash) {
            std::collections::hash_map::Entry::Occupied(_) => self.collided.push((hash, call)),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(call.pack());
            }
        }
    }

    /// Forgets a retiring call.
    pub(crate) fn remove(&mut self, hash: u64, call: CallRef) {
        if self.by_hash.get(&hash) == Some(&call.pack()) {
            self.by_hash.remove(&hash);
            if let Some(i) = self.collided.iter().position(|&(h, _)| h == hash) {
                let (_, promoted) = self.collided.swap_remove(i);
                self.by_hash.insert(hash, promoted.pack());
            }
        } else if let Some(i) = self
            .collided
            .iter()
            .position(|&(h, c)| h == hash && c == call)
        {
            self.collided.swap_remove(i);
        } else {
            debug_assert!(false, "a retiring call id was not live");
        }
    }

    /// Room for `calls` more ids.
    pub(crate) fn reserve(&mut self, calls: usize) {
        self.by_hash.reserve(calls);
    }
}
