//! The host loop, natively and through the component: per batch, `submit`, one `step`
//! approving its entries, then one `step` per round reporting every execution the previous
//! step started as ended `ok`, until nothing starts. Both sides run the same [`Workload`] and
//! can sample memory after chosen rounds.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock; the engine never does

use std::time::Instant;

use host_harness::{Harness, Instance, wit_config as wc, wit_scheduler as ws};
use turnstile_engine::schedule::{Call, EntryId, Inputs, Outputs, Scheduler};

use crate::workload::Workload;

/// What one drive measured.
pub(crate) struct Drive {
    /// Nanoseconds from creating the scheduler to the last step (policy resolution, building
    /// the inputs and instantiation excluded).
    pub(crate) ns: f64,
    /// Memory just before the scheduler was created.
    pub(crate) base: usize,
    /// Memory after each round in `marks`.
    pub(crate) samples: Vec<usize>,
}

impl Drive {
    pub(crate) fn per_execution(&self, w: &Workload) -> f64 {
        self.ns / w.executions as f64
    }
}

/// Counts what a drive did and checks it against the workload at the end.
#[derive(Default)]
struct Tally {
    ended: usize,
    retired: usize,
}

impl Tally {
    fn check(&self, w: &Workload, side: &str) -> Result<(), String> {
        if self.ended != w.executions || self.retired != w.rounds {
            return Err(format!(
                "the {side} drive ended {} of {} executions and retired {} of {} batches",
                self.ended, w.executions, self.retired, w.rounds
            ));
        }
        Ok(())
    }
}

/// Drives the workload through the engine; `memory` is sampled after each round in `marks`
/// (ascending, one-based round counts).
pub(crate) fn native(
    w: &Workload,
    marks: &[usize],
    memory: impl Fn() -> usize,
) -> Result<Drive, String> {
    let policy = w.policy()?;
    let calls: Vec<Vec<Call<'_>>> = w.patterns.iter().map(|b| b.calls()).collect();
    let mut out = Outputs::default();
    let mut approve: Vec<EntryId> = Vec::new();
    let mut ended: Vec<EntryId> = Vec::new();
    let mut samples = Vec::with_capacity(marks.len());
    let mut tally = Tally::default();
    let base = memory();
    let start = Instant::now();
    let mut s = Scheduler::new(policy);
    let mut now = 0u64;
    for round in 0..w.rounds {
        let b = s
            .submit(&calls[round % calls.len()])
            .map_err(|e| format!("native submit: {}", e.message))?;
        approve.clear();
        approve.extend((b.first.0..b.first.0 + u64::from(b.count)).map(EntryId));
        s.step(
            &Inputs {
                approve: &approve,
                ..Inputs::default()
            },
            &mut out,
        );
        loop {
            if let Some(e) = out.errors.first() {
                return Err(format!("native step refused an input: {}", e.message));
            }
            tally.retired += out.retired.len();
            if out.start.is_empty() {
                // Something waits on the clock (a key's delay): the host's timer fires.
                let Some(at) = out.wake_at else {
                    break;
                };
                now = now.max(at);
                s.step(
                    &Inputs {
                        now: Some(now),
                        ..Inputs::default()
                    },
                    &mut out,
                );
                continue;
            }
            tally.ended += out.start.len();
            std::mem::swap(&mut ended, &mut out.start);
            s.step(
                &Inputs {
                    now: Some(now),
                    ok: &ended,
                    ..Inputs::default()
                },
                &mut out,
            );
        }
        if marks.get(samples.len()) == Some(&(round + 1)) {
            samples.push(memory());
        }
    }
    let ns = start.elapsed().as_nanos() as f64;
    drop(s);
    tally.check(w, "native")?;
    Ok(Drive { ns, base, samples })
}

/// Drives the workload through the component in a fresh instance; memory is the instance's
/// linear memory size, sampled after each round in `marks`.
pub(crate) fn component(harness: &Harness, w: &Workload, marks: &[usize]) -> Result<Drive, String> {
    component_inner(harness, w, marks).map_err(|e| format!("component drive: {e:#}"))
}

fn component_inner(harness: &Harness, w: &Workload, marks: &[usize]) -> wasmtime::Result<Drive> {
    let mut inst = harness.instance()?;
    let policy = resolve_policy(&mut inst, &w.policy_text)?;
    let iface = inst.exports.turnstile_scheduler_scheduler().scheduler();
    let store = &mut inst.store;
    let mut inputs = empty_inputs();
    let mut samples = Vec::with_capacity(marks.len());
    let mut tally = Tally::default();
    let base = store.data().memory_peak();
    let start = Instant::now();
    let s = iface.call_constructor(&mut *store, policy)?;
    for round in 0..w.rounds {
        let b = w.batch(round);
        let sub = iface
            .call_submit(
                &mut *store,
                s,
                &b.packed_ids,
                &b.packed_tools,
                &b.operations,
                &b.packed_arguments,
            )?
            .map_err(|e| wasmtime::format_err!("submit: {}", e.message))?;
        inputs.ok.clear();
        inputs.approve.clear();
        inputs
            .approve
            .extend(sub.first..sub.first + u64::from(sub.count));
        let mut out = iface.call_step(&mut *store, s, &inputs)?;
        inputs.approve.clear();
        loop {
            if let Some(e) = out.errors.first() {
                wasmtime::bail!("step refused an input: {}", e.message);
            }
            tally.retired += out.retired.len();
            if out.start.is_empty() {
                break;
            }
            tally.ended += out.start.len();
            inputs.ok = out.start;
            out = iface.call_step(&mut *store, s, &inputs)?;
        }
        if marks.get(samples.len()) == Some(&(round + 1)) {
            samples.push(store.data().memory_peak());
        }
    }
    let ns = start.elapsed().as_nanos() as f64;
    s.resource_drop(&mut *store)?;
    tally.check(w, "component").map_err(wasmtime::Error::msg)?;
    Ok(Drive { ns, base, samples })
}

fn empty_inputs() -> ws::Inputs {
    host_harness::no_inputs()
}

/// Resolves one layer of policy text in the instance.
pub(crate) fn resolve_policy(
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

/// What one WIT call costs with (almost) nothing to do, best of 3 runs of 100,000 calls each:
/// `label` of an unknown entry (a number in, `none` out), `step` with empty inputs (seven empty
/// lists in, four out), and `submit` of one plain call (three short values in).
pub(crate) fn call_costs(harness: &Harness) -> Result<Vec<(&'static str, f64)>, String> {
    call_costs_inner(harness).map_err(|e| format!("call costs: {e:#}"))
}

fn call_costs_inner(harness: &Harness) -> wasmtime::Result<Vec<(&'static str, f64)>> {
    const CALLS: usize = 100_000;
    let ids: Vec<String> = (0..CALLS).map(|i| format!("c{i}")).collect();
    let (mut label, mut step, mut submit) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    for _ in 0..3 {
        let mut inst = harness.instance()?;
        let policy = resolve_policy(&mut inst, "")?;
        let iface = inst.exports.turnstile_scheduler_scheduler().scheduler();
        let store = &mut inst.store;
        let s = iface.call_constructor(&mut *store, policy)?;
        let t = Instant::now();
        for _ in 0..CALLS {
            let _ = iface.call_label(&mut *store, s, u64::MAX)?;
        }
        label = label.min(t.elapsed().as_nanos() as f64);
        let inputs = empty_inputs();
        let t = Instant::now();
        for _ in 0..CALLS {
            let _ = iface.call_step(&mut *store, s, &inputs)?;
        }
        step = step.min(t.elapsed().as_nanos() as f64);
        let t = Instant::now();
        for id in &ids {
            let _ = iface.call_submit(&mut *store, s, id, "t", &[0], &[])?;
        }
        submit = submit.min(t.elapsed().as_nanos() as f64);
    }
    let per = |ns: f64| ns / CALLS as f64;
    Ok(vec![
        ("`label` (u64 in, option<string> out)", per(label)),
        ("`step` with empty inputs", per(step)),
        ("`submit` of one plain call", per(submit)),
    ])
}
