//! The seeded simulator: a deliberately simple reference model of RFD 129's rules and the
//! engine, driven side by side through the public API only, with random configs (layers the
//! model reads through its own generator, never through the resolved policy), random steps
//! mixing legal inputs and host mistakes across batches, retirement with call ids reused, and
//! restarts under the same or a changed config. After every step the exact `Outputs` must
//! match (starts, settlements, refused inputs with list, index and code, retired batches), every
//! live entry's state must match, and the invariants must hold (per key running <= limit and
//! starts in (batch, written) order, nothing starts twice, retired numbers are unknown); at the
//! end everything is approved and ended until every batch retired (liveness). The model keeps
//! its own states and its own transition table and recomputes eligibility from scratch
//! (quadratic and obviously right); at a restart it predicts the export, what comes back
//! pending, what is interrupted and which calls are left out, instead of reading them back.
//! Queries (`inspect`, `label`) are compared too.
//!
//! A second property replays JP ticket 0ya5qnf: a restart after every end gives the same
//! executions in the same order as no restart.
//!
//! A failure prints its seed; `TURNSTILE_SEED=N` replays one, `TURNSTILE_SEEDS=N` sets how many
//! run (default 2000).
//!
//! Layout (in `sim/`): `generate` writes the configs, `model` is the reference model, `drive`
//! runs engine and model side by side, `inputs` makes each round's random events, `check` holds
//! the per-step properties, `restart` the restart property, `runner` the seed loop.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

#[path = "sim/check.rs"]
mod check;
mod common;
#[path = "sim/drive.rs"]
mod drive;
#[path = "sim/generate.rs"]
mod generate;
#[path = "sim/inputs.rs"]
mod inputs;
#[path = "sim/model.rs"]
mod model;
#[path = "sim/restart.rs"]
mod restart;
#[path = "sim/runner.rs"]
mod runner;

use std::collections::HashSet;

use drive::Sim;
use restart::run_to_end;
use runner::{Stats, run_seeds};

#[test]
fn engine_agrees_with_the_reference_model() {
    run_seeds("model", |seed, verbose| {
        let mut sim = Sim::new(seed, verbose);
        let rounds = 30 + sim.rng.below(150);
        for _ in 0..rounds {
            sim.round();
        }
        sim.drain();
        sim.stats
    });
}

/// A restart at every step gives the same executions, in the same order, as no restart: an
/// ended execution never runs again, and the rest release in written order (the restart-
/// reorder bug of JP ticket 0ya5qnf cannot happen).
#[test]
fn restart_at_every_step_keeps_the_order() {
    run_seeds("restart", |seed, _| {
        let plain = run_to_end(seed, false);
        let restarted = run_to_end(seed, true);
        let ends: Vec<&String> = plain.iter().filter(|l| l.starts_with("end ")).collect();
        let unique: HashSet<&String> = ends.iter().copied().collect();
        assert_eq!(ends.len(), unique.len(), "an execution ended twice");
        assert_eq!(plain, restarted);
        Stats::new()
    });
}
