//! `cargo run --release -p turnstile-bench [-- --quick]`: the benchmark suite. Every figure is
//! measured side by side in one run and printed with the ratio that matters, because absolute
//! times on shared machines drift. Nothing here is a test.
//!
//! 1. Scaling: submit, approve, release and end N executions (plain calls and fan-out
//!    operations) over K keys with mixed limits, driven like a host (drain, end what started,
//!    repeat); ns per execution and the ratio between sizes.
//! 2. Boundary: the same work natively and through the component in wasmtime, one WIT call per
//!    entry and with the batched calls (`approve-many`, `on-ended-many`).
//! 3. Footprint: component size, compile and instantiate times, bytes per queued execution.
//! 4. Config: resolving 1,000 tools over 5 layers; the rendering of 100 errors.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock; the engine never does

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use host_harness::{
    Harness, Instance, default_component_path, wit_config as wc, wit_scheduler as ws,
};
use turnstile_engine::config::{self, Layer, Policy};
use turnstile_engine::schedule::{Call, Outcome, Scheduler};

/// Counts live heap bytes, for bytes per queued execution.
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

type Result<T> = std::result::Result<T, String>;

fn main() {
    if let Err(e) = run() {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    // `bench --drive N KEYS`: one native drive and nothing else, for counting instructions
    // under `valgrind --tool=callgrind` (repeatable where timings are not).
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--drive") {
        let n: usize = args
            .get(i + 1)
            .and_then(|a| a.parse().ok())
            .unwrap_or(100_000);
        let keys: usize = args.get(i + 2).and_then(|a| a.parse().ok()).unwrap_or(10);
        let w = Workload::new(n, keys);
        let ns = native_drive(&w);
        println!(
            "{} executions over {keys} keys: {:.0} ns each",
            w.executions,
            ns / n as f64
        );
        return Ok(());
    }
    let path = std::env::args()
        .skip_while(|a| a != "--component")
        .nth(1)
        .map_or_else(default_component_path, PathBuf::from);
    let sizes: &[usize] = if quick {
        &[10_000, 100_000]
    } else {
        &[10_000, 100_000, 1_000_000]
    };
    println!("## 1. Scaling (native engine)\n");
    println!("| executions | keys | ns/execution | vs previous size |");
    println!("| ---: | ---: | ---: | ---: |");
    for keys in [1usize, 10, 1000] {
        let mut previous: Option<f64> = None;
        for &n in sizes {
            let w = Workload::new(n, keys);
            let ns = best_of(5, || native_drive(&w)) / n as f64;
            let ratio = previous.map_or(String::from("-"), |p| {
                format!("{:.2}x time for 10x work", ns * 10.0 / p)
            });
            println!("| {n} | {keys} | {ns:.0} | {ratio} |");
            previous = Some(ns * 10.0 / 10.0);
        }
    }

    println!("\n## 2. Boundary: native vs the component in wasmtime (100k executions, 10 keys)\n");
    let harness = Harness::load(&path).map_err(|e| format!("{}: {e:#}", path.display()))?;
    let w = Workload::new(100_000, 10);
    let native = best_of(3, || native_drive(&w));
    let drive = |mode| {
        best_of(3, || {
            component_drive(&harness, &w, mode).unwrap_or(f64::NAN)
        })
    };
    let per_call = drive(Mode::PerCall);
    let batched = drive(Mode::Batched);
    let ids = drive(Mode::Ids);
    let per = |t: f64| t / w.executions as f64;
    println!("| driver | ns/execution | vs native |");
    println!("| --- | ---: | ---: |");
    println!("| native engine | {:.0} | 1.00x |", per(native));
    println!(
        "| component, one call per entry | {:.0} | {:.2}x |",
        per(per_call),
        per_call / native
    );
    println!(
        "| component, approve-many + on-ended-many | {:.0} | {:.2}x |",
        per(batched),
        batched / native
    );
    println!(
        "| component, entry ids (approve-ids, next-release-ids, on-ended-ids) | {:.0} | {:.2}x |",
        per(ids),
        ids / native
    );

    println!("\n## 3. Footprint\n");
    footprint(&path, &harness)?;

    println!("\n## 4. Config\n");
    config_bench(&harness)?;
    Ok(())
}

/// Runs `f` (which returns nanoseconds) `n` times and keeps the fastest.
fn best_of(n: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..n).map(|_| f()).fold(f64::INFINITY, f64::min)
}

/// N executions over K keys: half plain calls, half fan-out calls of 8 operations, in batches
/// of about 1,000 executions; tool i has key `k{i % K}` with limit 1 + i % 4.
struct Workload {
    executions: usize,
    policy_text: String,
    batches: Vec<Vec<Call>>,
    labels: Vec<Vec<String>>,
}

impl Workload {
    fn new(executions: usize, keys: usize) -> Self {
        let mut text = String::new();
        for k in 0..keys {
            let limit = 1 + k % 4;
            text.push_str(&format!(
                "[conversation.tools.t{k}]\nconcurrency = {{ key = \"k{k}\", limit = {limit} }}\n\
                 [conversation.tools.f{k}]\nconcurrency = {{ key = \"k{k}\", limit = {limit} }}\nfan_out = true\n"
            ));
        }
        let mut batches = Vec::new();
        let mut labels = Vec::new();
        let mut made = 0usize;
        let mut id = 0usize;
        while made < executions {
            let mut calls = Vec::new();
            let mut batch_labels = Vec::new();
            let mut in_batch = 0;
            while in_batch < 1000 && made < executions {
                let k = id % keys;
                if id.is_multiple_of(2) || executions - made < 8 {
                    calls.push(Call::plain(format!("c{id}"), format!("t{k}")));
                    batch_labels.push(format!("c{id}"));
                    made += 1;
                    in_batch += 1;
                } else {
                    calls.push(Call::fan_out(format!("c{id}"), format!("f{k}"), 8));
                    batch_labels.extend((0..8).map(|i| format!("c{id}#{i}")));
                    made += 8;
                    in_batch += 8;
                }
                id += 1;
            }
            batches.push(calls);
            labels.push(batch_labels);
        }
        Self {
            executions: made,
            policy_text: text,
            batches,
            labels,
        }
    }

    fn policy(&self) -> Policy {
        config::resolve(&[Layer::new("bench", self.policy_text.clone())]).unwrap_or_default()
    }
}

/// Drives the workload natively; returns nanoseconds (policy resolution excluded).
fn native_drive(w: &Workload) -> f64 {
    let policy = w.policy();
    let start = Instant::now();
    let mut s = Scheduler::new(policy);
    let mut ended = 0usize;
    for (calls, labels) in w.batches.iter().zip(&w.labels) {
        if s.submit_batch(calls).is_err() {
            return f64::NAN;
        }
        for label in labels {
            let _ = s.approve(label);
        }
        loop {
            let r = s.next_releases();
            if r.start.is_empty() {
                break;
            }
            for e in r.start {
                let label = s.label(e);
                let _ = s.on_ended(&label, Outcome::Ok);
                ended += 1;
            }
        }
    }
    assert_eq!(
        ended, w.executions,
        "the native drive did not end every execution"
    );
    start.elapsed().as_nanos() as f64
}

fn wit_calls(calls: &[Call]) -> Vec<ws::Call> {
    calls
        .iter()
        .map(|c| ws::Call {
            id: c.id.clone(),
            tool: c.tool.clone(),
            operations: c.operations,
            finished: Vec::new(),
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `approve` and `on-ended` once per entry.
    PerCall,
    /// `approve-many` and `on-ended-many` with labels.
    Batched,
    /// `approve-ids`, `next-release-ids` and `on-ended-ids`: no strings after submission.
    Ids,
}

/// Drives the workload through the component; returns nanoseconds (instantiation, policy and
/// the conversion of the workload to WIT values excluded).
fn component_drive(harness: &Harness, w: &Workload, mode: Mode) -> wasmtime::Result<f64> {
    let mut inst = harness.instance()?;
    let policy = resolve_policy(&mut inst, &w.policy_text)?;
    let wit: Vec<Vec<ws::Call>> = w.batches.iter().map(|c| wit_calls(c)).collect();
    let iface = inst.exports.turnstile_scheduler_scheduler().scheduler();
    let store = &mut inst.store;
    let start = Instant::now();
    let s = iface.call_constructor(&mut *store, policy)?;
    let mut ended = 0usize;
    for (calls, labels) in wit.iter().zip(&w.labels) {
        let batch = iface
            .call_submit_batch(&mut *store, s, calls)?
            .map_err(|e| wasmtime::format_err!("{}", e.message))?;
        if mode == Mode::Ids {
            let range = iface
                .call_batch_entries(&mut *store, s, batch)?
                .map_err(|e| wasmtime::format_err!("{}", e.message))?;
            let all: Vec<u32> = (range.first..range.first + range.count).collect();
            let _ = iface.call_approve_ids(&mut *store, s, &all)?;
            loop {
                let r = iface.call_next_release_ids(&mut *store, s)?;
                if r.start.is_empty() {
                    break;
                }
                ended += r.start.len();
                let _ = iface.call_on_ended_ids(&mut *store, s, &r.start, &[])?;
            }
            continue;
        }
        if mode == Mode::Batched {
            let _ = iface.call_approve_many(&mut *store, s, labels)?;
        } else {
            for label in labels {
                let _ = iface.call_approve(&mut *store, s, label)?;
            }
        }
        loop {
            let r = iface.call_next_releases(&mut *store, s)?;
            if r.start.is_empty() {
                break;
            }
            ended += r.start.len();
            if mode == Mode::Batched {
                let ends: Vec<ws::Ended> = r
                    .start
                    .into_iter()
                    .map(|entry| ws::Ended {
                        entry,
                        outcome: ws::Outcome::Ok,
                    })
                    .collect();
                let _ = iface.call_on_ended_many(&mut *store, s, &ends)?;
            } else {
                for label in &r.start {
                    let _ = iface.call_on_ended(&mut *store, s, label, ws::Outcome::Ok)?;
                }
            }
        }
    }
    let elapsed = start.elapsed().as_nanos() as f64;
    assert_eq!(
        ended, w.executions,
        "the component drive did not end every execution"
    );
    Ok(elapsed)
}

fn resolve_policy(
    inst: &mut Instance,
    text: &str,
) -> wasmtime::Result<wasmtime::component::ResourceAny> {
    let iface = inst.exports.turnstile_scheduler_config().policy();
    let layers = [wc::Layer {
        name: "bench".to_owned(),
        text: text.to_owned(),
    }];
    iface
        .call_resolve(&mut inst.store, &layers)?
        .map_err(|d| wasmtime::format_err!("{} diagnostics", d.len()))
}

fn footprint(path: &PathBuf, harness: &Harness) -> Result<()> {
    let size = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    let t = Instant::now();
    let _ = Harness::load(path).map_err(|e| e.to_string())?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let n = 1000;
    let t = Instant::now();
    for _ in 0..n {
        let _ = harness.instance().map_err(|e| e.to_string())?;
    }
    let instantiate_us = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    println!("| figure | value | goal |");
    println!("| --- | ---: | ---: |");
    println!(
        "| component size | {:.1} KB | < 300 KB |",
        size as f64 / 1000.0
    );
    println!("| compile (Cranelift), wasmtime | {compile_ms:.0} ms | - |");
    println!("| instantiate from InstancePre, wasmtime | {instantiate_us:.0} us | < 1 ms |");
    // Bytes per queued execution: 1M entries submitted and pending.
    for (what, fan_out) in [("plain calls", false), ("fan-out operations", true)] {
        let policy = config::resolve(&[Layer::new(
            "m",
            "[conversation.tools.f]\nconcurrency = 1\nfan_out = true\n",
        )])
        .map_err(|_| "policy")?;
        let batches: Vec<Vec<Call>> = (0..10)
            .map(|b| {
                if fan_out {
                    (0..10_000)
                        .map(|i| Call::fan_out(format!("c{b}_{i}"), "f", 10))
                        .collect()
                } else {
                    (0..100_000)
                        .map(|i| Call::plain(format!("c{b}_{i}"), "f"))
                        .collect()
                }
            })
            .collect();
        let before = LIVE.load(Ordering::Relaxed);
        let mut s = Scheduler::new(policy);
        for calls in &batches {
            s.submit_batch(calls).map_err(|e| e.to_string())?;
        }
        let native = (LIVE.load(Ordering::Relaxed).saturating_sub(before)) as f64 / 1e6;
        drop(s);
        let mut inst = harness.instance().map_err(|e| e.to_string())?;
        let policy = resolve_policy(
            &mut inst,
            "[conversation.tools.f]\nconcurrency = 1\nfan_out = true\n",
        )
        .map_err(|e| e.to_string())?;
        let iface = inst.exports.turnstile_scheduler_scheduler().scheduler();
        let base = inst.store.data().memory_peak();
        let s = iface
            .call_constructor(&mut inst.store, policy)
            .map_err(|e| e.to_string())?;
        for calls in &batches {
            let wit = wit_calls(calls);
            let _ = iface
                .call_submit_batch(&mut inst.store, s, &wit)
                .map_err(|e| e.to_string())?;
        }
        let linear = (inst.store.data().memory_peak().saturating_sub(base)) as f64 / 1e6;
        println!("| heap per queued execution at 1M, {what}, native | {native:.0} B | < 100 B |");
        println!(
            "| linear memory per queued execution at 1M, {what}, component | {linear:.0} B | < 100 B |"
        );
    }
    Ok(())
}

fn config_bench(harness: &Harness) -> Result<()> {
    let layers: Vec<Layer> = (0..5)
        .map(|l| {
            let mut text = String::new();
            for t in 0..1000 {
                text.push_str(&format!(
                    "[conversation.tools.tool_{t}]\nsource = \"local\"\nrun = \"ask\"\nconcurrency = {{ key = \"k{}\", limit = {} }}\nfan_out = {{ on_error = \"continue\" }}\n",
                    t % 50,
                    1 + (t % 50) % 3
                ));
            }
            Layer::new(format!("layer{l}"), text)
        })
        .collect();
    let bytes: usize = layers.iter().map(|l| l.text.len()).sum();
    let native_ms = best_of(5, || {
        let t = Instant::now();
        let ok = config::resolve(&layers).is_ok();
        assert!(ok, "the 1,000-tool config must resolve");
        t.elapsed().as_nanos() as f64
    }) / 1e6;
    let mut inst = harness.instance().map_err(|e| e.to_string())?;
    let wit: Vec<wc::Layer> = layers
        .iter()
        .map(|l| wc::Layer {
            name: l.name.clone(),
            text: l.text.clone(),
        })
        .collect();
    let iface = inst.exports.turnstile_scheduler_config().policy();
    let component_ms = best_of(5, || {
        let t = Instant::now();
        let ok = matches!(iface.call_resolve(&mut inst.store, &wit), Ok(Ok(_)));
        assert!(ok, "the 1,000-tool config must resolve in the component");
        t.elapsed().as_nanos() as f64
    }) / 1e6;
    let bad: String = (0..100)
        .map(|t| format!("[conversation.tools.bad_{t}]\nconcurrency = \"{t}\"\n"))
        .collect();
    let diags = config::resolve(&[Layer::new("bad.toml", bad)])
        .err()
        .unwrap_or_default();
    let rendered: usize = diags.iter().map(|d| d.rendered.len()).sum();
    println!("| figure | value |");
    println!("| --- | ---: |");
    println!(
        "| resolve 1,000 tools x 5 layers ({:.1} MB of TOML), native | {native_ms:.1} ms |",
        bytes as f64 / 1e6
    );
    println!(
        "| the same through the component | {component_ms:.1} ms ({:.2}x native) |",
        component_ms / native_ms
    );
    println!(
        "| 100 errors: diagnostics / rendered bytes | {} / {rendered} B ({} B each) |",
        diags.len(),
        rendered / diags.len().max(1)
    );
    Ok(())
}
