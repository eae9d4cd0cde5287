//! `simulate`: submits a file's batches, approves every entry, and runs the executions on a
//! virtual clock (no sleeps), printing one line per step: what started, what ended, what was
//! settled, and why each waiting entry waits.

use std::fmt::Write as _;

use turnstile_corpus::{Case, parse_calls};
use wasmtime::component::ResourceAny;

use crate::subject::inspect_line;
use crate::{Instance, wit_config as wc, wit_scheduler as ws};

/// The embedded default: the RFD's renumber chain and three draft calls, all on key `rfd`.
pub const DEFAULT_CASE: &str = include_str!("../../tests/cases/sched-default-embedded.toml");

struct Running {
    label: String,
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
    for (n, batch) in case.batch.iter().enumerate() {
        let calls: Vec<ws::Call> = parse_calls(batch)?
            .into_iter()
            .map(|c| ws::Call {
                id: c.id,
                tool: c.tool,
                operations: c.operations,
                finished: Vec::new(),
            })
            .collect();
        let id = iface
            .call_submit_batch(&mut *store, sched, &calls)
            .map_err(trap)?
            .map_err(|e| format!("batch {}: {}", n + 1, e.message))?;
        let _ = writeln!(
            out,
            "{:>6}  {:<7} {:<10} {} calls",
            0,
            "submit",
            format!("batch {id}"),
            calls.len()
        );
        for call in &calls {
            let labels: Vec<String> = match call.operations {
                Some(n) => (0..n).map(|i| format!("{}#{i}", call.id)).collect(),
                None => vec![call.id.clone()],
            };
            for label in labels {
                iface
                    .call_approve(&mut *store, sched, &label)
                    .map_err(trap)?
                    .map_err(|e| e.message)?;
            }
        }
        batches.push(id);
    }
    let mut now_ms = 0u64;
    let mut seq = 0u64;
    let mut running: Vec<Running> = Vec::new();
    let mut shown: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    loop {
        let releases = iface.call_next_releases(&mut *store, sched).map_err(trap)?;
        for st in &releases.settle {
            let _ = writeln!(
                out,
                "{now_ms:>6}  {:<7} {:<10} {:?}",
                "settle", st.entry, st.reason
            );
        }
        for label in &releases.start {
            let key = key_of(&iface, store, sched, &batches, label)?;
            let _ = writeln!(out, "{now_ms:>6}  {:<7} {:<10} {key}", "start", label);
            running.push(Running {
                label: label.clone(),
                ends_at_ms: now_ms + duration_of(label),
                seq,
            });
            seq += 1;
        }
        for &b in &batches {
            let statuses = iface
                .call_inspect(&mut *store, sched, b)
                .map_err(trap)?
                .map_err(|e| e.message)?;
            for st in statuses.iter().filter(|s| s.wait.is_some()) {
                let line = inspect_line(st);
                let why = line.split_once(" waits ").map_or("", |(_, w)| w);
                if shown.get(&st.entry).is_some_and(|w| w == why) {
                    continue;
                }
                shown.insert(st.entry.clone(), why.to_owned());
                let _ = writeln!(out, "{now_ms:>6}  {:<7} {:<10} {why}", "wait", st.entry);
            }
        }
        let Some(next) = running
            .iter()
            .enumerate()
            .min_by_key(|(_, r)| (r.ends_at_ms, r.seq))
            .map(|(i, _)| i)
        else {
            break;
        };
        let done = running.swap_remove(next);
        now_ms = done.ends_at_ms;
        let outcome = if fails(&done.label) {
            ws::Outcome::Failed
        } else {
            ws::Outcome::Ok
        };
        iface
            .call_on_ended(&mut *store, sched, &done.label, outcome)
            .map_err(trap)?
            .map_err(|e| e.message)?;
        let word = if outcome == ws::Outcome::Ok {
            "ok"
        } else {
            "failed"
        };
        let _ = writeln!(out, "{now_ms:>6}  {:<7} {:<10} {word}", "end", done.label);
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

fn key_of(
    iface: &ws::GuestScheduler<'_>,
    store: &mut wasmtime::Store<crate::HostState>,
    sched: ResourceAny,
    batches: &[u32],
    label: &str,
) -> Result<String, String> {
    for &b in batches {
        let statuses = iface
            .call_inspect(&mut *store, sched, b)
            .map_err(|e| format!("trap: {e:#}"))?
            .map_err(|e| e.message)?;
        if let Some(st) = statuses.iter().find(|s| s.entry == label) {
            return Ok(match &st.key {
                Some(k) => format!("{} key {k}", st.tool),
                None => format!("{} unkeyed", st.tool),
            });
        }
    }
    Ok(String::new())
}
