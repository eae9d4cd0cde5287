//! `bench lifetime [--scale F]`: a long-lived scheduler must keep its memory flat. 100,000,000
//! executions through one native scheduler and 10,000,000 through one component instance, in
//! batches of 4 plain calls `call_0` .. `call_3` over 10 keys (the ids are reused every batch),
//! each approved, run and ended, so every batch retires. Memory is sampled at 10 %, 50 % and
//! 100 % of each run: natively the live heap the scheduler holds (counting allocator), in
//! the component the instance's linear memory (which never shrinks).
//!
//! The last line reads `lifetime: N executions, memory last/first-tenth X.XXx`, for whichever
//! side grew the most (N is that side's count; on a tie, the larger count); it must stay under
//! 1.10x.

use std::path::Path;

use host_harness::Harness;

use crate::drive::{self, Drive};
use crate::workload::Workload;

const NATIVE_EXECUTIONS: f64 = 100_000_000.0;
const COMPONENT_EXECUTIONS: f64 = 10_000_000.0;
const KEYS: usize = 10;

/// One side's result.
struct Side {
    name: &'static str,
    executions: usize,
    ns_per_execution: f64,
    /// Memory at 10 %, 50 % and 100 %.
    memory: [usize; 3],
}

impl Side {
    fn new(name: &'static str, w: &Workload, drive: &Drive, relative_to_base: bool) -> Self {
        let at = |i: usize| {
            let m = drive.samples.get(i).copied().unwrap_or(0);
            if relative_to_base {
                m.saturating_sub(drive.base)
            } else {
                m
            }
        };
        Self {
            name,
            executions: w.executions,
            ns_per_execution: drive.per_execution(w),
            memory: [at(0), at(1), at(2)],
        }
    }

    fn growth(&self) -> f64 {
        self.memory[2] as f64 / self.memory[0].max(1) as f64
    }
}

/// Runs both sides with counts multiplied by `scale`; the component side is skipped (and
/// said so) when the component cannot be loaded.
pub(crate) fn run(scale: f64, component: &Path, live: impl Fn() -> usize) -> Result<(), String> {
    let count = |n: f64| ((n * scale).round() as usize).max(40);
    println!(
        "## Lifetime: batches of 4 plain calls over {KEYS} keys, call ids reused every batch\n"
    );
    let mut sides = Vec::new();
    let w = Workload::small(count(NATIVE_EXECUTIONS), KEYS);
    let d = drive::native(&w, &marks(w.rounds), live)?;
    sides.push(Side::new("native engine, live heap", &w, &d, true));
    match Harness::load(component) {
        Ok(harness) => {
            let w = Workload::small(count(COMPONENT_EXECUTIONS), KEYS);
            let d = drive::component(&harness, &w, &marks(w.rounds))?;
            sides.push(Side::new("component, linear memory", &w, &d, false));
        }
        Err(e) => println!("(component skipped: {}: {e:#})\n", component.display()),
    }
    println!(
        "| side | executions | ns/execution | memory at 10 % | at 50 % | at 100 % | last/first-tenth |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for s in &sides {
        println!(
            "| {} | {} | {:.0} | {} | {} | {} | {:.2}x |",
            s.name,
            s.executions,
            s.ns_per_execution,
            bytes(s.memory[0]),
            bytes(s.memory[1]),
            bytes(s.memory[2]),
            s.growth()
        );
    }
    let worst = sides
        .iter()
        .max_by(|a, b| {
            let growth = a.growth().total_cmp(&b.growth());
            growth.then(a.executions.cmp(&b.executions))
        })
        .ok_or("no side ran")?;
    println!();
    println!(
        "lifetime: {} executions, memory last/first-tenth {:.2}x",
        worst.executions,
        worst.growth()
    );
    Ok(())
}

/// The rounds after which memory is sampled: a tenth, half, all.
fn marks(rounds: usize) -> [usize; 3] {
    [(rounds / 10).max(1), (rounds / 2).max(1), rounds]
}

fn bytes(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{:.2} MiB", n as f64 / f64::from(1u32 << 20))
    } else {
        format!("{n} B")
    }
}
