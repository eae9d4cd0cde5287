//! Hashing, and the set of call ids in use by live batches. A call id is stored once, in its
//! batch; the set maps its 64-bit hash to the call, and a second list holds the astronomically
//! rare ids whose hash another live id already has.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// rustc's Fx hash: fast on short keys. Keys here come from the host, which is trusted with its
/// own scheduler; there is no cross-tenant flooding to defend against.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    /// Fx leaves the low bits weak (they depend only on the low input bits, and short ids
    /// differ mostly in their high bytes), while hash tables index by the low bits: finish
    /// with murmur3's avalanche so every bit counts.
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;
pub(crate) type FxHashMap<K, V> = HashMap<K, V, FxBuild>;

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
