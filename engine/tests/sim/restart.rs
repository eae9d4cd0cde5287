//! Restart at every step (JP ticket 0ya5qnf): random batches run to the end with and without
//! a restart after every end.

use std::collections::HashMap;

use turnstile_engine::config::{self, Layer};
use turnstile_engine::schedule::{Call, EntryId, Outcome, Reason, Scheduler, Started, State};

use crate::common::step::{Inputs, Outputs, Step};

use crate::common::Rng;

fn reason_line(r: Reason) -> String {
    match r {
        Reason::Stopped { after } => format!("stopped {after}"),
        other => other.name().to_owned(),
    }
}

/// Runs random batches to the end, ending the first running entry (in written order) each
/// step, with a fixed outcome per entry. With `restart`, after every end the scheduler is
/// replaced by one resumed from `unfinished()` (what was running runs again) and everything
/// pending is approved again in reverse order. Returns the ends and the settlements, in order.
pub(super) fn run_to_end(seed: u64, restart: bool) -> Vec<String> {
    let mut rng = Rng(seed);
    let mut text = String::new();
    for t in 0..4 {
        text.push_str(&format!("[conversation.tools.t{t}]\n"));
        let keyed = match rng.below(4) {
            0 => false,
            1 => {
                text.push_str("concurrency = 1\n");
                true
            }
            k => {
                text.push_str(&format!("concurrency = {{ key = \"k{}\" }}\n", k - 2));
                true
            }
        };
        match rng.below(3) {
            0 => {}
            1 => text.push_str("fan_out = true\n"),
            _ if keyed => text.push_str("fan_out = { on_error = \"stop\" }\n"),
            _ => text.push_str("fan_out = true\n"),
        }
    }
    let policy = config::resolve(&[Layer::new("restart", text)])
        .unwrap_or_else(|_| panic!("seed {seed}: config"));
    let mut s = Scheduler::new(policy.clone());
    let mut labels = Vec::new();
    let mut id = 0;
    for _ in 0..1 + rng.below(3) {
        let mut calls = Vec::new();
        for _ in 0..1 + rng.below(5) {
            let tool = format!("t{}", rng.below(4));
            let fan_out = policy.tool(&tool).is_some_and(|t| t.fan_out);
            let ops = (fan_out && rng.below(2) == 0).then(|| 1 + rng.below(3) as u32);
            calls.push((format!("c{id}"), tool, ops));
            id += 1;
        }
        let calls: Vec<Call<'_>> = calls
            .iter()
            .map(|(id, tool, ops)| Call {
                id,
                tool,
                operations: *ops,
                arguments: None,
            })
            .collect();
        let batch = s.submit_batch(&calls).unwrap_or_else(|e| panic!("{e}"));
        let mut n = batch.first.0;
        for c in &calls {
            match c.operations {
                None => labels.push((n, c.id.to_owned())),
                Some(ops) => {
                    labels.extend((0..ops).map(|op| (n + u64::from(op), format!("{}#{op}", c.id))))
                }
            }
            n += u64::from(c.operations.unwrap_or(1));
        }
    }
    let labels: HashMap<u64, String> = labels.into_iter().collect();
    let label = |e: EntryId| labels[&e.0].clone();
    let mut out = Outputs::default();
    let approve_all = |s: &mut Scheduler, out: &mut Outputs| {
        let next = s.unfinished().next_entry;
        let pending: Vec<EntryId> = (0..next)
            .rev()
            .map(EntryId)
            .filter(|&e| s.state(e) == Some(State::Pending))
            .collect();
        s.step(
            &Inputs {
                approve: &pending,
                ..Inputs::default()
            },
            out,
        );
        assert!(out.errors.is_empty(), "{:?}", out.errors);
    };
    let outcome = |label: &str| {
        let h = label
            .bytes()
            .fold(seed, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        if h % 3 == 0 {
            Outcome::Failed
        } else {
            Outcome::Ok
        }
    };
    approve_all(&mut s, &mut out);
    let mut log = Vec::new();
    let mut running: Vec<EntryId> = Vec::new();
    for _ in 0..1000 {
        for &(e, reason) in &out.settle {
            log.push(format!("settle {} {}", label(e), reason_line(reason)));
        }
        running.extend(&out.start);
        running.sort_unstable();
        running.dedup();
        if running.is_empty() {
            assert!(s.unfinished().batches.is_empty(), "seed {seed}: stalled");
            return log;
        }
        let e = running.remove(0);
        let o = outcome(&label(e));
        let one = [e];
        let inputs = match o {
            Outcome::Ok => Inputs {
                ok: &one,
                ..Inputs::default()
            },
            Outcome::Failed => Inputs {
                failed: &one,
                ..Inputs::default()
            },
        };
        s.step(&inputs, &mut out);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        log.push(format!("end {} {o:?}", label(e)));
        if restart {
            for &(e, reason) in &out.settle {
                log.push(format!("settle {} {}", label(e), reason_line(reason)));
            }
            let saved = s.unfinished();
            let (fresh, unrestored) = Scheduler::resume(policy.clone(), &saved, Started::RunAgain)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(unrestored.is_empty(), "{unrestored:?}");
            s = fresh;
            // The host cancelled what was running; it runs again when released again.
            running.clear();
            approve_all(&mut s, &mut out);
        }
    }
    panic!("seed {seed}: did not finish");
}
