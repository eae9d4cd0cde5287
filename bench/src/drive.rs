//! The host loop, natively and through the component: per batch, `submit`, one `step`
//! approving its entries, then one `step` per round reporting every execution the previous
//! step started as ended `ok`, until nothing starts. Both sides run the same [`Workload`] and
//! can sample memory after chosen rounds.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock; the engine never does

use std::time::Instant;

use host_harness::{Harness, Instance, wit_config as wc, wit_scheduler as ws};
use turnstile_engine::schedule::{Call, End, EntryId, Input, Releases, Scheduler};

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
    let mut out = Releases::default();
    let mut ended: Vec<EntryId> = Vec::new();
    let mut samples = Vec::with_capacity(marks.len());
    let mut tally = Tally::default();
    let base = memory();
    let start = Instant::now();
    let mut s = Scheduler::new(policy);
    let mut now = 0u64;
    for round in 0..w.rounds {
        let b = s
            .submit_batch(&calls[round % calls.len()])
            .map_err(|e| format!("native submit: {}", e.message))?;
        for e in b.first.0..b.first.0 + u64::from(b.count) {
            s.on_event(Input::Approve(EntryId(e)))
                .map_err(|r| format!("native approve refused: {}", r.message))?;
        }
        s.next_releases(Some(now), &mut out);
        loop {
            if let Some(r) = &out.refused {
                return Err(format!("native round refused the clock: {}", r.message));
            }
            tally.retired += out.retired.len();
            if out.start.is_empty() {
                // Something waits on the clock (a key's delay): the host's timer fires.
                let Some(at) = out.wake_at else {
                    break;
                };
                now = now.max(at);
                s.next_releases(Some(now), &mut out);
                continue;
            }
            tally.ended += out.start.len();
            std::mem::swap(&mut ended, &mut out.start);
            for &e in &ended {
                s.on_ended(e, End::Ok)
                    .map_err(|r| format!("native end refused: {}", r.message))?;
            }
            s.next_releases(Some(now), &mut out);
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
    let mut events: Vec<ws::Event> = Vec::new();
    let mut ends = ws::Ends {
        ok: Vec::new(),
        failed: Vec::new(),
        rate_limited: Vec::new(),
    };
    let mut samples = Vec::with_capacity(marks.len());
    let mut tally = Tally::default();
    let base = store.data().memory_peak();
    let start = Instant::now();
    let s = iface.call_constructor(&mut *store, policy)?;
    let mut now = 0u64;
    for round in 0..w.rounds {
        let b = w.batch(round);
        let sub = iface
            .call_submit_batch(
                &mut *store,
                s,
                &b.wit_calls,
                ws::Limits {
                    execution_ms: None,
                    abort_grace_ms: None,
                },
            )?
            .map_err(|e| wasmtime::format_err!("submit: {}", e.message))?;
        events.clear();
        events.push(ws::Event::Approve(
            (sub.first..sub.first + u64::from(sub.count)).collect(),
        ));
        if let Some(r) = iface.call_on_events(&mut *store, s, &events, None)?.first() {
            wasmtime::bail!("approve refused: {}", r.message);
        }
        let mut out = host_harness::next_releases(&iface, &mut *store, s, Some(now))?;
        loop {
            let unexpected = out.refused.is_some()
                || !out.abort.is_empty()
                || !out.pause_store.is_empty()
                || !out.release.is_empty()
                || !out.settled.is_empty()
                || !out.acquire.is_empty();
            if unexpected {
                wasmtime::bail!("unexpected actions {out:?}");
            }
            tally.retired += out.retired.len();
            ends.ok.clear();
            ends.ok.extend(&out.start);
            if ends.ok.is_empty() {
                // Something waits on the clock (a key's delay): the host's timer fires.
                let Some(at) = out.wake_at else {
                    break;
                };
                now = now.max(at);
                out = host_harness::next_releases(&iface, &mut *store, s, Some(now))?;
                continue;
            }
            tally.ended += ends.ok.len();
            if let Some(r) = iface.call_on_ended(&mut *store, s, &ends, None)?.first() {
                wasmtime::bail!("end refused: {}", r.message);
            }
            out = host_harness::next_releases(&iface, &mut *store, s, Some(now))?;
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
/// `label` of an unknown entry (a number in, `none` out), an empty round (`on-ended` of no ends
/// and `next-releases` with no actions: the two crossings of an idle driver round), and
/// `submit-batch` of one plain call.
pub(crate) fn call_costs(harness: &Harness) -> Result<Vec<(&'static str, f64)>, String> {
    call_costs_inner(harness).map_err(|e| format!("call costs: {e:#}"))
}

fn call_costs_inner(harness: &Harness) -> wasmtime::Result<Vec<(&'static str, f64)>> {
    const CALLS: usize = 100_000;
    let ids: Vec<String> = (0..CALLS).map(|i| format!("c{i}")).collect();
    let calls: Vec<ws::Batch> = (ids.iter())
        .map(|id| host_harness::pack([(id.as_str(), "t", None, None)]))
        .collect();
    let no_ends = ws::Ends {
        ok: Vec::new(),
        failed: Vec::new(),
        rate_limited: Vec::new(),
    };
    let (mut label, mut round, mut submit) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
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
        let t = Instant::now();
        for _ in 0..CALLS {
            let _ = iface.call_on_ended(&mut *store, s, &no_ends, None)?;
            let _ = host_harness::next_releases(&iface, &mut *store, s, None)?;
        }
        round = round.min(t.elapsed().as_nanos() as f64);
        let t = Instant::now();
        for call in &calls {
            let _ = iface.call_submit_batch(
                &mut *store,
                s,
                call,
                ws::Limits {
                    execution_ms: None,
                    abort_grace_ms: None,
                },
            )?;
        }
        submit = submit.min(t.elapsed().as_nanos() as f64);
    }
    let per = |ns: f64| ns / CALLS as f64;
    Ok(vec![
        ("`label` (u64 in, option<string> out)", per(label)),
        ("an empty round (`on-ended`, `next-releases`)", per(round)),
        ("`submit-batch` of one plain call", per(submit)),
    ])
}
