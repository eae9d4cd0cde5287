//! The seed runner: every seed (`TURNSTILE_SEEDS`, or the one `TURNSTILE_SEED`, as
//! `common::seeds` reads them) quiet, a failing one again verbose, reported with its number.

use std::collections::BTreeMap;

use crate::common::seeds;

/// Counts of what the seeds exercised, by kind and detail.
pub(super) type Stats = BTreeMap<(&'static str, &'static str), u64>;

/// Runs `f(seed, verbose)` for every seed. A failing seed is run again verbose (with its log)
/// and reported with its number; quiet runs keep 2000 seeds fast.
pub(super) fn run_seeds(what: &str, f: impl Fn(u64, bool) -> Stats + std::panic::RefUnwindSafe) {
    let seeds = seeds();
    let replay = seeds.len() == 1;
    let mut stats = Stats::new();
    for &seed in &seeds {
        #[cfg(target_arch = "wasm32")]
        crate::common::name_seed_on_panic(what, seed);
        let result = std::panic::catch_unwind(|| f(seed, replay))
            .or_else(|_| std::panic::catch_unwind(|| f(seed, true)));
        match result {
            Ok(seen) => {
                for (k, v) in seen {
                    *stats.entry(k).or_insert(0) += v;
                }
            }
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                panic!("{what}: seed {seed} failed (replay: TURNSTILE_SEED={seed}): {msg}");
            }
        }
    }
    eprintln!("{what}: {} seeds", seeds.len());
    for ((kind, detail), n) in stats {
        eprintln!("  {n:>8}  {kind} {detail}");
    }
}
