//! The benchmark suite, run by hand. Build it with the `perf` profile (release, with the
//! engine's debug assertions off, as in the shipped component; `--release` keeps them on for
//! the tests and measures them too):
//!
//! ```text
//! cargo run --profile perf -p turnstile-bench                      # sections 1-4
//! cargo run --profile perf -p turnstile-bench -- --quick           # smaller scaling sizes
//! cargo run --profile perf -p turnstile-bench -- boundary          # section 2 only
//! cargo run --profile perf -p turnstile-bench -- templated         # keys from arguments only
//! cargo run --profile perf -p turnstile-bench -- lifetime          # memory over a long life
//! cargo run --profile perf -p turnstile-bench -- lifetime --scale 0.01
//! cargo build --profile perf -p turnstile-bench && \
//!   valgrind --tool=callgrind target/perf/bench --drive 100000 10 [--small] [--wasm]
//! ```
//!
//! `--component PATH` (or `$TURNSTILE_WASM`) picks the component, default
//! `target/turnstile.wasm`. Every figure is measured side by side in one run and printed with
//! the ratio that matters, because absolute times on shared machines drift. Nothing here is a
//! test.
//!
//! 1. Scaling: N executions over K keys through the native engine, driven like a host
//!    ([`drive`]); ns per execution and the ratio between sizes.
//! 2. Boundary: the same inputs natively and through the component in wasmtime, for the
//!    issue's workload (batches of ~1,000 executions) and an agent host's (batches of 4 plain
//!    calls, ids reused); the native execution cycle against its goal.
//! 3. Footprint: component size, compile and instantiate times, bytes per queued execution.
//! 4. Config: resolving 1,000 tools over 5 layers; the rendering of 100 errors.
//!
//! `lifetime` ([`lifetime`]) pushes 100M executions through one native scheduler and 10M
//! through one component instance and reports memory growth; `--scale F` (or
//! `$TURNSTILE_BENCH_SCALE`) multiplies both counts for a quick check.
//! `--drive N KEYS [--small] [--wasm]` runs one drive (native, or through the component) and
//! nothing else, for counting instructions under callgrind (repeatable where timings are not).
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock; the engine never does

mod drive;
mod driver;
mod footprint;
mod lifetime;
mod workload;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use host_harness::{Harness, default_component_path};

use workload::Workload;

/// Counts live heap bytes, for bytes per queued execution and memory over a lifetime.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

#[allow(unsafe_code)] // a GlobalAlloc is unsafe by definition; this one only forwards
// SAFETY: every call forwards to `System` with the same arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// The issue's goals for the execution cycle.
const NATIVE_CYCLE_GOAL_NS: f64 = 120.0;
const COMPONENT_RATIO_GOAL: f64 = 1.5;

fn main() {
    if let Err(e) = run() {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str, i: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|p| args.get(p + i))
    };
    let component = value("--component", 1).map_or_else(default_component_path, PathBuf::from);
    if flag("--drive") {
        let n = value("--drive", 1)
            .and_then(|a| a.parse().ok())
            .unwrap_or(100_000);
        let keys = value("--drive", 2)
            .and_then(|a| a.parse().ok())
            .unwrap_or(10);
        let harness = if flag("--wasm") {
            Some(Harness::load(&component).map_err(|e| format!("{}: {e:#}", component.display()))?)
        } else {
            None
        };
        return one_drive(n, keys, flag("--small"), harness.as_ref());
    }
    println!("{}\n", assertions_note());
    if flag("lifetime") || flag("--lifetime") {
        let scale = match value("--scale", 1) {
            Some(s) => s.clone(),
            None => std::env::var("TURNSTILE_BENCH_SCALE").unwrap_or_else(|_| "1".to_owned()),
        };
        let scale: f64 = scale
            .parse()
            .ok()
            .filter(|s: &f64| *s > 0.0)
            .ok_or_else(|| format!("--scale {scale:?}: not a positive number"))?;
        return lifetime::run(scale, &component, live);
    }
    let harness =
        || Harness::load(&component).map_err(|e| format!("{}: {e:#}", component.display()));
    if flag("boundary") {
        return boundary(&harness()?);
    }
    // `driver [--quick]`: the Rust crate's tokio driver beside the engine loop.
    if flag("driver") {
        let n = if flag("--quick") { 10_000 } else { 100_000 };
        return driver::table(n, 3);
    }
    if flag("templated") {
        return scaling(flag("--quick"), Some("fs:{path}"));
    }
    // `--only TEXT`: the scaling rows whose label contains TEXT, side by side in one run.
    if let Some(only) = value("--only", 1) {
        return scaling(flag("--quick"), Some(only.as_str()));
    }
    scaling(flag("--quick"), None)?;
    let harness = harness()?;
    boundary(&harness)?;
    println!("\n## 3. Footprint\n");
    footprint::footprint(&component, &harness, live)?;
    println!("\n## 4. Config\n");
    footprint::config_bench(&harness)
}

/// Whether this binary was built with the engine's debug assertions, judged by the profile
/// directory it runs from (an engine build does not say).
fn assertions_note() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let profile = exe
        .parent()
        .and_then(Path::file_name)
        .and_then(|p| p.to_str())
        .unwrap_or("?")
        .to_owned();
    match profile.as_str() {
        "perf" => "engine debug assertions: off (profile perf)".to_owned(),
        "release" | "debug" => format!(
            "WARNING: profile {profile}: the engine's debug assertions are ON and measured; \
             use `cargo run --profile perf -p turnstile-bench`"
        ),
        _ => format!("engine debug assertions: unknown (binary in {profile}/)"),
    }
}

/// `--drive N KEYS [--small] [--wasm]`: one drive of the issue's workload (or of small
/// batches), natively or through the component.
fn one_drive(n: usize, keys: usize, small: bool, harness: Option<&Harness>) -> Result<(), String> {
    let w = if small {
        Workload::small(n, keys)
    } else {
        Workload::large(n, keys)
    };
    let d = match harness {
        Some(h) => drive::component(h, &w, &[])?,
        None => drive::native(&w, &[], live)?,
    };
    println!(
        "{} executions over {keys} keys in {} batches: {:.0} ns each",
        w.executions,
        w.rounds,
        d.per_execution(&w)
    );
    Ok(())
}

/// Runs `f` (which returns nanoseconds) `n` times and keeps the fastest.
fn best_of(n: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..n).map(|_| f()).fold(f64::INFINITY, f64::min)
}

fn native_ns(w: &Workload) -> Result<f64, String> {
    Ok(drive::native(w, &[], live)?.per_execution(w))
}

/// The scaling table; `only` keeps the rows whose label contains it.
fn scaling(quick: bool, only: Option<&str>) -> Result<(), String> {
    let sizes: &[usize] = if quick {
        &[10_000, 100_000]
    } else {
        &[10_000, 100_000, 1_000_000]
    };
    println!("## 1. Scaling (native engine)\n");
    println!("| batches | executions | keys | ns/execution | vs previous size |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    type Make = fn(usize, usize) -> Workload;
    let rows: [(&str, usize, Make); 13] = [
        ("~1,000 executions", 1, Workload::large),
        ("~1,000 executions", 10, Workload::large),
        ("~1,000 executions", 1000, Workload::large),
        ("4 plain calls", 10, Workload::small),
        // Every key spaces its starts 1 ms apart: the host steps at each wake-up.
        ("~1,000, delay = 1", 10, |n, k| {
            Workload::large(n, k).spaced()
        }),
        ("~1,000, delay = 1", 1000, |n, k| {
            Workload::large(n, k).spaced()
        }),
        // Two rate windows and a burst on every key (GCRA lanes in exact integers).
        ("~1,000, rate 4/ms + 1000/s, burst 4", 10, |n, k| {
            Workload::large(n, k).rated()
        }),
        // Every key's limit adaptive (AIMD), every end clean.
        ("~1,000, adaptive limits", 10, |n, k| {
            Workload::large(n, k).adaptive()
        }),
        // Key sets: every call takes its own key and the next one (or three), all at once.
        ("~1,000, key sets of 2", 10, |n, k| {
            Workload::large(n, k).sets(k, 2)
        }),
        ("~1,000, key sets of 4", 10, |n, k| {
            Workload::large(n, k).sets(k, 4)
        }),
        // Keys from arguments: `fs:{path}`, each key made, forgotten when idle, made again.
        ("1,000 plain, key fs:{path}", 100_000, Workload::templated),
        // Path keys: one tree, every path apart (all start at once), or 10 calls per path
        // (each waits behind the one before it, and every end walks the tree).
        (
            "1,000 plain, path key fs, paths apart",
            100_000,
            Workload::pathed,
        ),
        (
            "1,000 plain, path key fs, 10 per path",
            100,
            Workload::pathed,
        ),
    ];
    for (batches, keys, make) in rows {
        if only.is_some_and(|o| !batches.contains(o)) {
            continue;
        }
        let mut previous: Option<f64> = None;
        for &n in sizes {
            let w = make(n, keys);
            let mut ns = f64::INFINITY;
            for _ in 0..5 {
                ns = ns.min(native_ns(&w)?);
            }
            let ratio = previous.map_or_else(
                || "-".to_owned(),
                |p| format!("{:.2}x time for 10x work", ns * 10.0 / p),
            );
            println!("| {batches} | {n} | {keys} | {ns:.0} | {ratio} |");
            previous = Some(ns);
        }
    }
    Ok(())
}

/// One workload natively and through the component, runs interleaved, fastest of each.
fn side_by_side(harness: &Harness, w: &Workload, runs: usize) -> Result<(f64, f64), String> {
    let (mut native, mut component) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..runs {
        native = native.min(native_ns(w)?);
        component = component.min(drive::component(harness, w, &[])?.per_execution(w));
    }
    Ok((native, component))
}

fn boundary(harness: &Harness) -> Result<(), String> {
    println!("\n## 2. Boundary: native vs the component in wasmtime (100k executions, 10 keys)\n");
    println!(
        "Per batch: `submit-batch`, one `on-events` approving its entries and `next-releases`, \
         then per round one `on-ended` ending in `ok` everything the previous round started \
         and `next-releases`.\n"
    );
    let large = Workload::large(100_000, 10);
    let small = Workload::small(100_000, 10);
    let (large_native, large_component) = side_by_side(harness, &large, 5)?;
    let (small_native, small_component) = side_by_side(harness, &small, 5)?;
    println!("| batches | native ns/execution | component ns/execution | component / native |");
    println!("| --- | ---: | ---: | ---: |");
    for (what, w, native, component) in [
        (
            "~1,000 executions (half fan-out of 8)",
            &large,
            large_native,
            large_component,
        ),
        (
            "4 plain calls, ids reused",
            &small,
            small_native,
            small_component,
        ),
    ] {
        println!(
            "| {what}, {} batches | {native:.0} | {component:.0} | {:.2}x |",
            w.rounds,
            component / native
        );
    }
    println!("\n| one WIT call, fixed cost | ns/call |");
    println!("| --- | ---: |");
    for (what, ns) in drive::call_costs(harness)? {
        println!("| {what} | {ns:.0} |");
    }
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    println!("\n| figure | value | goal | |");
    println!("| --- | ---: | ---: | --- |");
    for (what, ns) in [
        ("batches of ~1,000", large_native),
        ("batches of 4", small_native),
    ] {
        println!(
            "| native execution cycle (submit, approve, release, end), {what} | {ns:.0} ns | \
             < {NATIVE_CYCLE_GOAL_NS:.0} ns | {} |",
            verdict(ns < NATIVE_CYCLE_GOAL_NS)
        );
    }
    for (what, ratio) in [
        ("batches of ~1,000", large_component / large_native),
        ("batches of 4", small_component / small_native),
    ] {
        println!(
            "| component / native, {what} | {ratio:.2}x | < {COMPONENT_RATIO_GOAL:.1}x | {} |",
            verdict(ratio < COMPONENT_RATIO_GOAL)
        );
    }
    Ok(())
}
