//! What the simulators share: a small seedable random number generator (SplitMix64) and the
//! seed list (`TURNSTILE_SEED=N` replays one seed, `TURNSTILE_SEEDS=N` sets how many run).

/// SplitMix64: small, seedable, good enough to explore.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// True `percent` times in a hundred.
    #[allow(dead_code)] // used by one simulator only
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// One item of a list, or `None` when it is empty.
    #[allow(dead_code)] // used by one simulator only
    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        if items.is_empty() {
            return None;
        }
        Some(items[self.below(items.len())])
    }

    /// Shuffles a list in place (Fisher-Yates).
    #[allow(dead_code)] // used by one simulator only
    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// The seeds to run: `TURNSTILE_SEED=N` alone, else `0..TURNSTILE_SEEDS` (default 2000).
#[allow(dead_code)] // used by one simulator only
pub(crate) fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("TURNSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let n = std::env::var("TURNSTILE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    (0..n).collect()
}

#[allow(dead_code)] // the admission simulator drives no scheduler
pub(crate) mod step;
