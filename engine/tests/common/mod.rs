//! What the simulators share: a small seedable random number generator (SplitMix64) and the
//! seed list (`TURNSTILE_SEED=N` replays one seed, `TURNSTILE_SEEDS=N` sets how many run).
//! In wasm (wasm-bindgen-test, `cargo xtask test`) there is no environment: `DEFAULT_SEEDS`
//! run, and a failing seed is named by the panic hook (`name_seed_on_panic`).

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

/// How many seeds run when `TURNSTILE_SEEDS` is not set: 2000 natively, fewer in wasm, where
/// the simulators run about as many times slower as they are run (Node and Chromium).
#[allow(dead_code)] // used by the simulators only
pub(crate) const DEFAULT_SEEDS: u64 = if cfg!(target_arch = "wasm32") {
    300
} else {
    2000
};

/// The seeds to run: `TURNSTILE_SEED=N` alone, else `0..TURNSTILE_SEEDS` (default
/// `DEFAULT_SEEDS`).
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
        .unwrap_or(DEFAULT_SEEDS);
    (0..n).collect()
}

// The admission simulator drives no scheduler: `step.rs` allows its own dead code.
pub(crate) mod step;

/// In wasm a panic aborts (no unwinding), so a seed loop's `catch_unwind` can neither rerun a
/// failing seed verbose nor say which it was: this names the seed running now, and a panic hook
/// (chained after wasm-bindgen-test's, which prints the message) prints it.
#[cfg(target_arch = "wasm32")]
#[allow(dead_code)] // used by the simulators only
pub(crate) fn name_seed_on_panic(what: &str, seed: u64) {
    use std::cell::RefCell;
    use std::sync::Once;
    thread_local!(static RUNNING: RefCell<String> = const { RefCell::new(String::new()) });
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            before(info);
            RUNNING.with(|r| wasm_bindgen_test::console_error!("{}", r.borrow()));
        }));
    });
    RUNNING.with(|r| {
        *r.borrow_mut() =
            format!("{what}: seed {seed} failed (replay natively: TURNSTILE_SEED={seed})");
    });
}
