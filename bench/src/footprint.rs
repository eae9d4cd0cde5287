//! Sections 3 and 4: the component's size, compile and instantiate times, memory per queued
//! execution (native heap and component linear memory); resolving a large config and rendering
//! many errors, natively and through the component.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock; the engine never does

use std::path::Path;
use std::time::Instant;

use host_harness::{Harness, wit_config as wc, wit_scheduler as ws};
use turnstile_engine::config::{self, Layer};
use turnstile_engine::schedule::{Call, Scheduler};

use crate::best_of;
use crate::drive::resolve_policy;

const QUEUE_POLICY: &str = "[conversation.tools.f]\nconcurrency = 1\nfan_out = true\n";

pub(crate) fn footprint(
    path: &Path,
    harness: &Harness,
    live: impl Fn() -> usize,
) -> Result<(), String> {
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
    for fan_out in [false, true] {
        let (native, linear) = queued(harness, fan_out, &live)?;
        let what = if fan_out {
            "fan-out operations"
        } else {
            "plain calls"
        };
        println!("| heap per queued execution at 1M, {what}, native | {native:.0} B | < 100 B |");
        println!(
            "| linear memory per queued execution at 1M, {what}, component | {linear:.0} B | < 100 B |"
        );
    }
    Ok(())
}

/// Bytes per entry with 1M entries submitted and pending: native heap, component linear memory.
fn queued(
    harness: &Harness,
    fan_out: bool,
    live: &impl Fn() -> usize,
) -> Result<(f64, f64), String> {
    let batches: Vec<(Vec<String>, u32)> = (0..10)
        .map(|b| {
            if fan_out {
                ((0..10_000).map(|i| format!("c{b}_{i}")).collect(), 10)
            } else {
                ((0..100_000).map(|i| format!("c{b}_{i}")).collect(), 0)
            }
        })
        .collect();
    let entries: usize = batches
        .iter()
        .map(|(ids, n)| ids.len() * (*n).max(1) as usize)
        .sum();
    let policy = config::resolve(&[Layer::new("m", QUEUE_POLICY)]).map_err(|_| "policy")?;
    let calls: Vec<Vec<Call<'_>>> = batches
        .iter()
        .map(|(ids, n)| {
            ids.iter()
                .map(|id| Call {
                    id,
                    tool: "f",
                    operations: (*n > 0).then_some(*n),
                    arguments: None,
                })
                .collect()
        })
        .collect();
    let before = live();
    let mut s = Scheduler::new(policy);
    for c in &calls {
        s.submit_batch(c).map_err(|e| e.message)?;
    }
    let native = live().saturating_sub(before) as f64 / entries as f64;
    drop(s);

    let mut inst = harness.instance().map_err(|e| e.to_string())?;
    let policy = resolve_policy(&mut inst, QUEUE_POLICY).map_err(|e| e.to_string())?;
    let iface = inst.exports.turnstile_scheduler_scheduler().scheduler();
    let base = inst.store.data().memory_peak();
    let s = iface
        .call_constructor(&mut inst.store, policy)
        .map_err(|e| e.to_string())?;
    for (ids, n) in &batches {
        let calls = host_harness::pack(
            (ids.iter()).map(|id| (id.as_str(), "f", (*n > 0).then_some(*n), None)),
        );
        iface
            .call_submit_batch(
                &mut inst.store,
                s,
                &calls,
                ws::Limits {
                    execution_ms: None,
                    abort_grace_ms: None,
                },
            )
            .map_err(|e| e.to_string())?
            .map_err(|e| e.message)?;
    }
    let linear = inst.store.data().memory_peak().saturating_sub(base) as f64 / entries as f64;
    Ok((native, linear))
}

pub(crate) fn config_bench(harness: &Harness) -> Result<(), String> {
    let layers: Vec<Layer> = (0..5)
        .map(|l| {
            let mut text = String::new();
            for t in 0..1000 {
                text.push_str(&format!(
                    "[conversation.tools.tool_{t}]\nsource = \"local\"\nrun = \"ask\"\n\
                     concurrency = {{ key = \"k{}\", limit = {} }}\n\
                     fan_out = {{ on_error = \"continue\" }}\n",
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
        let resolved = iface.call_resolve(&mut inst.store, &wit);
        let elapsed = t.elapsed().as_nanos() as f64;
        match resolved {
            Ok(Ok(policy)) => {
                let _ = policy.resource_drop(&mut inst.store);
                elapsed
            }
            _ => f64::NAN,
        }
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
