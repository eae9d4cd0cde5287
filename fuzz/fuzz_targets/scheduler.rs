//! Arbitrary byte-driven sequences against the scheduler: submits (valid, duplicate, malformed),
//! rounds mixing every input kind, in any order, with live, stale and never-issued numbers, restarts through
//! `unfinished` and `resume` (under the same or a changed policy, running again or
//! interrupting, sometimes from a tampered state), labels and inspections. Nothing may panic:
//! the engine's debug assertions (running <= limit, per-key order, paired counters) are on in
//! fuzz builds. Once the bytes run out, approving and ending everything must retire every batch.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use turnstile_engine::config::{self, Layer, Policy};
use turnstile_engine::limits::OPERATIONS_PER_CALL_MAX;
use turnstile_engine::schedule::{
    BatchId, Call, End, EntryId, HostSettle, Input, Limits, Outcome, Reason, Releases, Saved,
    SavedState, Scheduler, Started, State,
};

/// The policies a restart may switch between: `a` stops to fanning out, limits change, `c`
/// takes a key set (its own key and `k`) and then loses its limits, `t` takes its key from its arguments (one config spaces it), `k` becomes a
/// shared key (permits from a store, with a rate window its store keeps and `b` weighing 2), `p` moves between two paths of the tree `fs` and then
/// writes one, and one knows no tool at all.
const CONFIGS: [&str; 3] = [
    "[conversation.tools.a]\nconcurrency = { key = \"k\", limit = 2 }\nfan_out = { on_error = \"stop\" }\n\
     [conversation.tools.b]\nconcurrency = { key = \"k\", limit = 2 }\n\
     [conversation.tools.c]\nconcurrency = [{ key = \"c\" }, { key = \"k\", limit = 2 }]\nfan_out = true\n\
     [conversation.tools.t]\nconcurrency = { key = \"f:{p}/{q}\", limit = 1 }\nfan_out = true\n\
     [conversation.tools.p]\nconcurrency = [{ key = \"fs\", path = \"{p}\" }, { key = \"fs\", path = \"{q}\" }]\nfan_out = true\n",
    "[conversation.tools.a]\nconcurrency = { key = \"k\", shared = true, rate = \"2/ms\", burst = 2 }\n\
     [conversation.tools.b]\nconcurrency = { key = \"k\", shared = true, rate = \"2/ms\", burst = 2, weight = 2 }\nfan_out = true\n\
     [conversation.tools.c]\nfan_out = true\n\
     [conversation.tools.t]\nconcurrency = { key = \"f:{p}/{q}\", limit = 2, delay = 3 }\n\
     [conversation.tools.p]\nconcurrency = { key = \"fs\", path = \"{p}\" }\n",
    "",
];

const TOOLS: [&str; 7] = ["a", "b", "c", "t", "p", "ghost", ""];

/// Live entries are capped so that the final drain stays fast.
const LIVE_MAX: usize = 256;

/// The fuzzer's bytes, read one at a time; zeros once they run out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn done(&self) -> bool {
        self.0.is_empty()
    }

    /// An entry number: mostly small (live or retired), sometimes absurd.
    fn entry(&mut self) -> EntryId {
        match self.byte() {
            255 => EntryId(u64::MAX),
            b => EntryId(u64::from(b % 64)),
        }
    }

    /// A batch number: 0 and a few past the last are never live.
    fn batch(&mut self) -> BatchId {
        match self.byte() {
            255 => BatchId(u64::MAX),
            b => BatchId(u64::from(b % 24)),
        }
    }
}

fn submit(s: &mut Scheduler, input: &mut Bytes<'_>) {
    let n = input.byte() % 5;
    let calls: Vec<(String, &str, Option<u32>, Option<String>)> = (0..n)
        .map(|_| {
            let id = match input.byte() {
                250 => String::new(),
                251 => "a#1".to_owned(),
                b => format!("c{}", b % 10),
            };
            let tool = TOOLS[usize::from(input.byte()) % TOOLS.len()];
            let ops = match input.byte() % 8 {
                0..=3 => None,
                4 => Some(0),
                5 => Some(OPERATIONS_PER_CALL_MAX + 1),
                b => Some(u32::from(b) - 4),
            };
            // Arguments: none, a few keys, or the fuzzer's own bytes as text.
            let arguments = match input.byte() % 4 {
                0 => None,
                // Paths that nest (`a` above `a/b`) and one apart, for the tree `fs`.
                1 => Some(format!(
                    "{{\"p\":\"{}\",\"q\":{}}}",
                    ["a", "a/b", "b", "./a//"][usize::from(input.byte() % 4)],
                    input.byte()
                )),
                2 => Some(format!("{{\"p\":{}}}", input.byte() % 3)),
                _ => {
                    let len = usize::from(input.byte() % 24);
                    let bytes: Vec<u8> = (0..len).map(|_| input.byte()).collect();
                    Some(String::from_utf8_lossy(&bytes).into_owned())
                }
            };
            (id, tool, ops, arguments)
        })
        .collect();
    let calls: Vec<Call<'_>> = calls
        .iter()
        .map(|(id, tool, ops, arguments)| Call {
            id,
            tool,
            operations: *ops,
            arguments: arguments.as_deref(),
        })
        .collect();
    // Time limits: none, or a few milliseconds of execution and of abort grace (0 included).
    let limit = |b: u8| (b % 4 != 0).then_some(u32::from(b % 32));
    let limits = Limits {
        execution_ms: limit(input.byte()).map(|ms| ms + 1),
        abort_grace_ms: limit(input.byte()),
    };
    let _ = s.submit_batch_with(&calls, limits);
}

/// The fuzzer's clock: mostly forward, sometimes backwards (a refused `now`).
fn now(clock: &mut u64, input: &mut Bytes<'_>) -> Option<u64> {
    match input.byte() % 4 {
        0 => None,
        1 => Some(clock.saturating_sub(u64::from(input.byte()))),
        _ => {
            *clock += u64::from(input.byte() % 16);
            Some(*clock)
        }
    }
}

const PAUSED: [&str; 5] = ["k", "f:{p}/{q}", "f:1/2", "f:0/0", "nope"];

/// One round: inputs of every kind in any order (each applied as it arrives), then
/// `next_releases`.
fn step(s: &mut Scheduler, input: &mut Bytes<'_>, out: &mut Releases, clock: &mut u64) {
    let hows = [
        HostSettle::Rejected,
        HostSettle::Skipped,
        HostSettle::Failed,
    ];
    let n = usize::from(input.byte() % 16);
    for _ in 0..n {
        let refused = match input.byte() % 12 {
            0 => s.on_event(Input::Approve(input.entry())),
            1 => {
                let e = input.entry();
                s.on_event(Input::NotRun(e, hows[usize::from(input.byte()) % 3]))
            }
            2 => s.on_event(Input::Ask(input.entry())),
            3 => s.on_event(Input::Answer(input.entry())),
            4 => s.on_ended(input.entry(), End::Ok),
            5 => s.on_ended(input.entry(), End::Failed),
            6 => s.on_event(Input::Cancel(input.batch())),
            7 => s.on_event(Input::Granted(input.entry())),
            8 => s.on_event(Input::Denied(input.entry())),
            9 => {
                let e = input.entry();
                let wait = u64::from(input.byte() % 32);
                s.on_ended(e, End::RateLimited(*clock + wait))
            }
            10 => {
                let key = PAUSED[usize::from(input.byte()) % PAUSED.len()];
                s.on_event(Input::Pause(key, *clock + u64::from(input.byte() % 32)))
            }
            _ => s.on_event(Input::LiftPause(
                PAUSED[usize::from(input.byte()) % PAUSED.len()],
            )),
        };
        if let Err(r) = refused {
            assert!(!r.message.is_empty(), "a refusal without a message");
        }
    }
    let now = now(clock, input);
    s.next_releases(now, out);
    assert!(out.start.is_sorted() && out.settled.is_sorted_by_key(|s| s.entry));
    assert!(out.settled.iter().all(|s| !s.message.is_empty()));
}

/// A hostile edit of an exported state: `resume` must refuse it or restore what it can.
fn tamper(state: &mut SavedState, input: &mut Bytes<'_>) {
    let b = usize::from(input.byte());
    let arg = input.byte();
    let n = state.batches.len();
    match input.byte() % 10 {
        0 => state.version = state.version.wrapping_add(u32::from(arg)),
        1 => state.next_entry = u64::from(arg % 8),
        2 => state.next_batch = u64::from(arg % 4),
        3 if n > 1 => state.batches.swap(b % n, (b + 1) % n),
        4 if n > 0 => state.batches[b % n].first.0 ^= u64::from(arg % 4),
        5 if n > 0 => state.batches[b % n].cancelled ^= true,
        _ if n == 0 => {}
        k => {
            let batch = &mut state.batches[b % n];
            let c = usize::from(arg) % batch.calls.len().max(1);
            let Some(call) = batch.calls.get_mut(c) else {
                return;
            };
            match k {
                6 => {
                    call.operations = match arg % 4 {
                        0 => None,
                        1 => Some(0),
                        2 => Some(u32::MAX),
                        _ => Some(1 + u32::from(arg % 3)),
                    }
                }
                7 => call.entries.push((
                    u32::from(arg % 4),
                    [
                        Saved::Started,
                        Saved::Ended(Outcome::Failed),
                        Saved::Settled(Reason::Stopped { after: 0 }),
                    ][usize::from(arg) % 3],
                )),
                8 => call.id = ["c0", "", "x#1", "c1"][usize::from(arg) % 4].to_owned(),
                _ => call.tool = TOOLS[usize::from(arg) % TOOLS.len()].to_owned(),
            }
        }
    }
}

fn restart(s: &mut Scheduler, policies: &[Policy], input: &mut Bytes<'_>) {
    let mut state = s.unfinished();
    let flags = input.byte();
    if flags & 0x10 != 0 {
        tamper(&mut state, input);
    }
    let policy = policies[usize::from(flags) % policies.len()].clone();
    let started = if flags & 0x20 != 0 {
        Started::Interrupt
    } else {
        Started::RunAgain
    };
    if let Ok((fresh, _unrestored)) = Scheduler::resume(policy, &state, started) {
        *s = fresh;
    }
}

/// Approves everything pending and ends everything running until every batch retired.
fn drain(s: &mut Scheduler, out: &mut Releases, clock: &mut u64) {
    for _ in 0..8 * LIVE_MAX + 16 {
        // Whatever waits on time becomes due: the host's timer fires.
        *clock = (*clock).max(out.wake_at.unwrap_or(0));
        let state = s.unfinished();
        if state.batches.is_empty() {
            break;
        }
        let mut approve = Vec::new();
        let mut ok = Vec::new();
        let mut granted = Vec::new();
        for batch in &state.batches {
            let count: u64 = batch
                .calls
                .iter()
                .map(|c| u64::from(c.operations.unwrap_or(1)))
                .sum();
            for e in (batch.first.0..batch.first.0 + count).map(EntryId) {
                match s.state(e) {
                    Some(State::Pending) => approve.push(e),
                    Some(State::Running | State::Asking | State::Aborted(_)) => ok.push(e),
                    Some(State::Acquiring) => granted.push(e),
                    _ => {}
                }
            }
        }
        let waited = out.wake_at.is_some();
        let inputs = approve.len() + ok.len() + granted.len();
        for &e in &approve {
            s.on_event(Input::Approve(e)).expect("the drain's approval");
        }
        for &e in &granted {
            s.on_event(Input::Granted(e)).expect("the drain's grant");
        }
        for &e in &ok {
            s.on_ended(e, End::Ok).expect("the drain's end");
        }
        s.next_releases(Some(*clock), out);
        assert!(out.refused.is_none(), "the drain's clock was refused");
        assert!(
            waited || out.wake_at.is_some() || inputs > 0 || !out.is_empty(),
            "stalled with live batches: {state:?}"
        );
    }
    assert_eq!(s.live_entries(), 0, "live entries after the drain");
    assert!(
        s.unfinished().batches.is_empty(),
        "unfinished after the drain"
    );
}

fn policies() -> &'static [Policy] {
    static POLICIES: OnceLock<Vec<Policy>> = OnceLock::new();
    POLICIES.get_or_init(|| {
        let policies: Vec<Policy> = CONFIGS
            .iter()
            .filter_map(|text| config::resolve(&[Layer::new("fuzz", *text)]).ok())
            .collect();
        assert_eq!(
            policies.len(),
            CONFIGS.len(),
            "a fuzz config does not resolve"
        );
        policies
    })
}

fuzz_target!(|data: &[u8]| {
    let policies = policies();
    let mut input = Bytes(data);
    let mut s = Scheduler::new(policies[usize::from(input.byte()) % policies.len()].clone());
    let mut out = Releases::default();
    let mut clock = 0u64;
    while !input.done() {
        match input.byte() % 8 {
            0 | 1 if s.live_entries() < LIVE_MAX => submit(&mut s, &mut input),
            2..=4 => step(&mut s, &mut input, &mut out, &mut clock),
            5 => restart(&mut s, policies, &mut input),
            6 => {
                let e = input.entry();
                assert_eq!(s.label(e).is_some(), s.state(e).is_some());
            }
            _ => {
                let b = input.batch();
                if let Some(statuses) = s.inspect(b) {
                    for st in statuses {
                        assert_eq!(s.state(st.entry), Some(st.state));
                        assert!(
                            st.wait.is_none()
                                || matches!(
                                    st.state,
                                    State::Approved | State::Acquiring | State::Granted
                                )
                        );
                        assert_eq!(st.wait.is_some(), st.why.is_some());
                    }
                }
            }
        }
    }
    drain(&mut s, &mut out, &mut clock);
});
