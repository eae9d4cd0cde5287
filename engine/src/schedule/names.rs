//! Call ids and tool names, each stored once. Call ids live in one text arena, found through a
//! map from their 64-bit hash (a second map holds the astronomically rare colliding ids), so a
//! queued plain call costs a few bytes beyond its id, not two heap strings.

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

/// A key that already is a hash: passed through.
#[derive(Default, Clone, Copy)]
pub(crate) struct PassHasher(u64);

impl Hasher for PassHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    /// The table takes its index from the low bits and its tag from the top seven: a 32-bit
    /// hash goes in both halves.
    fn write_u32(&mut self, n: u32) {
        self.0 = (u64::from(n) << 32) | u64::from(n);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

fn hash(id: &str) -> u32 {
    let mut h = FxHasher::default();
    h.write(id.as_bytes());
    let h = h.finish();
    (h ^ (h >> 32)) as u32
}

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

/// Call ids by call number: the ids end to end in one string, the end of each, and a map from
/// a 32-bit hash to the call number (8 bytes a slot). Ids whose hash is taken, about one in
/// 8,000 at a million calls, go to a second map keyed by the id itself.
#[derive(Debug, Default)]
pub(crate) struct CallIds {
    text: String,
    ends: Vec<u32>,
    by_hash: HashMap<u32, u32, BuildHasherDefault<PassHasher>>,
    collisions: HashMap<Box<str>, u32>,
}

impl CallIds {
    /// The call number of `id`.
    pub(crate) fn get(&self, id: &str) -> Option<u32> {
        let &call = self.by_hash.get(&hash(id))?;
        if self.id(call) == id {
            return Some(call);
        }
        self.collisions.get(id).copied()
    }

    /// Adds `id` as the next call number. The caller checked that it is new.
    pub(crate) fn push(&mut self, id: &str) -> u32 {
        let call = self.ends.len() as u32;
        self.text.push_str(id);
        self.ends.push(self.text.len() as u32);
        match self.by_hash.entry(hash(id)) {
            std::collections::hash_map::Entry::Occupied(_) => {
                self.collisions.insert(id.into(), call);
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(call);
            }
        }
        call
    }

    /// The id of call number `call`.
    pub(crate) fn id(&self, call: u32) -> &str {
        let Some(&end) = self.ends.get(call as usize) else {
            return "";
        };
        let start = match call.checked_sub(1) {
            Some(previous) => self.ends.get(previous as usize).copied().unwrap_or(0),
            None => 0,
        };
        self.text.get(start as usize..end as usize).unwrap_or("")
    }

    /// Reserves room for `calls` more ids.
    pub(crate) fn reserve(&mut self, calls: usize) {
        grow(&mut self.ends, calls);
        self.by_hash.reserve(calls);
    }
}
