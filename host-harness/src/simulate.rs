//! `simulate`: submits a file's batches, approves every entry, and runs the executions on a
//! virtual clock (no sleeps), printing one line per step: what started, what ended, what was
//! settled, and why each waiting entry waits.

use std::collections::HashMap;
use std::fmt::Write as _;

use turnstile_corpus::{Case, parse_calls};

use crate::subject::inspect_line;
use crate::{Instance, wit_config as wc, wit_scheduler as ws};

/// The embedded default: the RFD's renumber chain and three draft calls, all on key `rfd`.
pub const DEFAULT_CASE: &str = include_str!("../../tests/cases/sched-default-embedded.toml");

struct Running {
    entry: u64,
    ends_at_ms: u64,
    seq: u64,
}

/// Runs the simulation and returns the timeline.
pub fn simulate(instance: &mut Instance, case: &Case) -> Result<String, String> {
    let trap = |e: wasmtime::Error| format!("trap: {e:#}");
    let spec = case.simulate.as_ref();
    let duration_of = |label: &str| {
        spec.and_then(|s| s.durations.get(label).copied())
            .or_else(|| spec.and_then(|s| s.duration_ms))
            .unwrap_or(10)
    };
    let fails = |label: &str| spec.is_some_and(|s| s.fail.iter().any(|f| f == label));
    let layers: Vec<wc::Layer> = case
        .layer
        .iter()
        .enumerate()
        .map(|(i, l)| wc::Layer {
            name: l.name.clone().unwrap_or_else(|| format!("L{}", i + 1)),
            text: l.text.clone(),
        })
        .collect();
    let store = &mut instance.store;
    let config = instance.exports.turnstile_scheduler_config().policy();
    let policy = match config.call_resolve(&mut *store, &layers).map_err(trap)? {
        Ok(p) => p,
        Err(diags) => {
            let text: Vec<String> = diags.into_iter().map(|d| d.rendered).collect();
            return Err(text.join("\n"));
        }
    };
    let iface = instance.exports.turnstile_scheduler_scheduler().scheduler();
    let sched = iface.call_constructor(&mut *store, policy).map_err(trap)?;
    let mut out = String::new();
    let _ = writeln!(out, "{:>6}  {:<7} {:<10} detail", "t(ms)", "event", "entry");
    let mut batches = Vec::new();
    // Entry number to (label, "tool key K" / "tool unkeyed"), read once after submit.
    let mut entries: HashMap<u64, (String, String)> = HashMap::new();
    let mut approve = Vec::new();
    for (n, batch) in case.batch.iter().enumerate() {
        let calls = parse_calls(batch)?;
        let join = |f: fn(&turnstile_corpus::CallSpec) -> &str| {
            calls.iter().map(f).collect::<Vec<_>>().join("\n")
        };
        let operations: Vec<u32> = calls.iter().map(|c| c.operations.unwrap_or(0)).collect();
        let submitted = iface
            .call_submit(
                &mut *store,
                sched,
                &join(|c| &c.id),
                &join(|c| &c.tool),
                &operations,
            )
            .map_err(trap)?
            .map_err(|e| format!("batch {}: {}", n + 1, e.message))?;
        let _ = writeln!(
            out,
            "{:>6}  {:<7} {:<10} {} calls",
            0,
            "submit",
            format!("batch {}", submitted.batch),
            calls.len()
        );
        let statuses = iface
            .call_inspect(&mut *store, sched, submitted.batch)
            .map_err(trap)?
            .unwrap_or_default();
        for st in statuses {
            let key = match &st.key {
                Some(k) => format!("{} key {k}", st.tool),
                None => format!("{} unkeyed", st.tool),
            };
            entries.insert(st.entry, (st.label, key));
        }
        approve.extend(submitted.first..submitted.first + u64::from(submitted.count));
        batches.push(submitted.batch);
    }
    let label = |e: u64| {
        entries
            .get(&e)
            .map_or_else(|| format!("#{e}"), |(l, _)| l.clone())
    };
    let mut now_ms = 0u64;
    let mut seq = 0u64;
    let mut running: Vec<Running> = Vec::new();
    let mut shown: HashMap<String, String> = HashMap::new();
    let mut inputs = ws::Inputs {
        approve,
        settle: Vec::new(),
        ask: Vec::new(),
        answer: Vec::new(),
        ok: Vec::new(),
        failed: Vec::new(),
        cancel: Vec::new(),
        now: Some(0),
        retry: Vec::new(),
        pause: Vec::new(),
    };
    loop {
        let step = iface.call_step(&mut *store, sched, &inputs).map_err(trap)?;
        if let Some(e) = step.errors.first() {
            return Err(format!("the scheduler refused an input: {}", e.message));
        }
        for st in &step.settle {
            let _ = writeln!(
                out,
                "{now_ms:>6}  {:<7} {:<10} {:?}",
                "settle",
                label(st.entry),
                st.reason
            );
        }
        for &e in &step.start {
            let key = entries.get(&e).map_or("", |(_, k)| k.as_str());
            let _ = writeln!(out, "{now_ms:>6}  {:<7} {:<10} {key}", "start", label(e));
            running.push(Running {
                entry: e,
                ends_at_ms: now_ms + duration_of(&label(e)),
                seq,
            });
            seq += 1;
        }
        batches.retain(|b| !step.retired.contains(b));
        for &b in &batches {
            let statuses = iface
                .call_inspect(&mut *store, sched, b)
                .map_err(trap)?
                .unwrap_or_default();
            for st in statuses.iter().filter(|s| s.wait.is_some()) {
                let line = inspect_line(st);
                let why = line.split_once(" waits ").map_or("", |(_, w)| w);
                if shown.get(&st.label).is_some_and(|w| w == why) {
                    continue;
                }
                shown.insert(st.label.clone(), why.to_owned());
                let _ = writeln!(out, "{now_ms:>6}  {:<7} {:<10} {why}", "wait", st.label);
            }
        }
        let next = running
            .iter()
            .enumerate()
            .min_by_key(|(_, r)| (r.ends_at_ms, r.seq))
            .map(|(i, r)| (i, r.ends_at_ms));
        // Something waits on time (a key's delay) and nothing ends before it: wake then.
        if let Some(wake) = step
            .wake_at
            .filter(|&w| next.is_none_or(|(_, end)| w < end))
        {
            now_ms = wake.max(now_ms);
            inputs = ws::Inputs {
                approve: Vec::new(),
                settle: Vec::new(),
                ask: Vec::new(),
                answer: Vec::new(),
                ok: Vec::new(),
                failed: Vec::new(),
                cancel: Vec::new(),
                now: Some(now_ms),
                retry: Vec::new(),
                pause: Vec::new(),
            };
            continue;
        }
        let Some((next, _)) = next else {
            break;
        };
        let done = running.swap_remove(next);
        now_ms = done.ends_at_ms;
        let done_label = label(done.entry);
        let failed = fails(&done_label);
        inputs = ws::Inputs {
            approve: Vec::new(),
            settle: Vec::new(),
            ask: Vec::new(),
            answer: Vec::new(),
            ok: if failed { Vec::new() } else { vec![done.entry] },
            failed: if failed { vec![done.entry] } else { Vec::new() },
            cancel: Vec::new(),
            now: Some(now_ms),
            retry: Vec::new(),
            pause: Vec::new(),
        };
        let word = if failed { "failed" } else { "ok" };
        let _ = writeln!(out, "{now_ms:>6}  {:<7} {:<10} {word}", "end", done_label);
    }
    let _ = writeln!(
        out,
        "{now_ms:>6}  {:<7} {:<10} every entry ended or settled",
        "done", ""
    );
    sched.resource_drop(&mut *store).map_err(trap)?;
    policy.resource_drop(&mut *store).map_err(trap)?;
    Ok(out)
}
