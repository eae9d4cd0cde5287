//! The seeded simulator: a deliberately simple reference model of RFD 129's rules (eligibility
//! recomputed from scratch after every event, quadratic and obviously right) and the engine,
//! driven side by side with random configs and random events, host mistakes and restarts
//! included. After every step both must agree (outputs, errors, states) and the invariants must
//! hold. A failure prints its seed; `TURNSTILE_SEED=N` replays one, `TURNSTILE_SEEDS=N` sets
//! how many run (default 2000).
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::collections::{BTreeMap, HashMap, HashSet};

use turnstile_engine::config::{self, Layer, OnError, Policy};
use turnstile_engine::schedule::{
    BatchId, Call, EntryId, HostSettle, Outcome, Reason, Scheduler, State,
};

mod common;

use common::Rng;

/// A random valid config: keys shared across tools, limits 0 to 5, fan-out with and without
/// stop. Returns the TOML and the tool names (plus one unconfigured tool).
fn random_config(rng: &mut Rng) -> (String, Vec<String>) {
    let keys = 1 + rng.below(3);
    let key_limits: Vec<u32> = (0..keys).map(|_| rng.below(6) as u32).collect();
    let mut text = String::new();
    let mut tools = Vec::new();
    for t in 0..1 + rng.below(5) {
        let name = format!("t{t}");
        text.push_str(&format!("[conversation.tools.{name}]\n"));
        let declared: u32 = match rng.below(4) {
            0 => 0,
            1 => {
                let n = rng.below(6) as u32;
                text.push_str(&format!("concurrency = {n}\n"));
                n
            }
            _ => {
                let k = rng.below(keys);
                let limit = key_limits[k];
                if limit == 1 && rng.chance(50) {
                    text.push_str(&format!("concurrency = {{ key = \"k{k}\" }}\n"));
                } else {
                    text.push_str(&format!(
                        "concurrency = {{ key = \"k{k}\", limit = {limit} }}\n"
                    ));
                }
                limit
            }
        };
        match rng.below(3) {
            0 => {}
            1 => text.push_str("fan_out = true\n"),
            _ if declared >= 1 => text.push_str("fan_out = { on_error = \"stop\" }\n"),
            _ => text.push_str("fan_out = { on_error = \"continue\" }\n"),
        }
        tools.push(name);
    }
    tools.push("ghost".to_owned());
    (text, tools)
}

#[derive(Clone, Debug)]
struct MEntry {
    batch: usize,
    call: String,
    op: Option<u32>,
    key: Option<(String, u32)>,
    stop: bool,
    state: State,
}

impl MEntry {
    fn label(&self) -> String {
        match self.op {
            Some(op) => format!("{}#{op}", self.call),
            None => self.call.clone(),
        }
    }
}

/// The reference model: a list of entries in (batch, written) order and nothing else.
#[derive(Clone, Debug, Default)]
struct Model {
    entries: Vec<MEntry>,
    cancelled: Vec<bool>,
}

impl Model {
    fn find(&self, label: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.label() == label)
    }

    fn batch_open(&self, b: usize) -> bool {
        !self
            .entries
            .iter()
            .any(|e| e.batch == b && e.state == State::Pending)
    }

    /// Applies the rules from scratch; returns (started, settled) in entry order.
    fn evaluate(&mut self) -> (Vec<usize>, Vec<usize>) {
        let mut started = Vec::new();
        let mut settled = Vec::new();
        // Stop first: approved operations behind a failed one of their call, in open batches.
        for i in 0..self.entries.len() {
            let e = &self.entries[i];
            if e.state != State::Approved
                || !e.stop
                || !self.batch_open(e.batch)
                || self.cancelled[e.batch]
            {
                continue;
            }
            let Some(op) = e.op else { continue };
            let first_failed = self
                .entries
                .iter()
                .filter(|o| o.batch == e.batch && o.call == e.call && o.state.is_failure())
                .filter_map(|o| o.op)
                .filter(|&p| p < op)
                .min();
            if let Some(f) = first_failed {
                self.entries[i].state = State::Settled(Reason::Stopped { after: f + 1 });
                settled.push(i);
            }
        }
        // Unkeyed: every approved entry of an open batch.
        for i in 0..self.entries.len() {
            let e = &self.entries[i];
            if e.key.is_none()
                && e.state == State::Approved
                && self.batch_open(e.batch)
                && !self.cancelled[e.batch]
            {
                self.entries[i].state = State::Running;
                started.push(i);
            }
        }
        // Keyed: walk each key in order; release while there is room; the first entry that
        // cannot go blocks the rest.
        let keys: Vec<(String, u32)> = {
            let mut seen = Vec::new();
            for e in &self.entries {
                if let Some(k) = &e.key
                    && !seen.contains(k)
                {
                    seen.push(k.clone());
                }
            }
            seen
        };
        for (key, limit) in keys {
            let mut running = self
                .entries
                .iter()
                .filter(|e| {
                    e.key.as_ref().is_some_and(|k| k.0 == key) && e.state.is_started_unended()
                })
                .count() as u32;
            for i in 0..self.entries.len() {
                let e = &self.entries[i];
                if e.key.as_ref().is_none_or(|k| k.0 != key) {
                    continue;
                }
                match e.state {
                    State::Pending => break,
                    State::Approved => {
                        if !self.batch_open(e.batch) || self.cancelled[e.batch] || running >= limit
                        {
                            break;
                        }
                        self.entries[i].state = State::Running;
                        started.push(i);
                        running += 1;
                    }
                    _ => {}
                }
            }
        }
        started.sort_unstable();
        settled.sort_unstable();
        (started, settled)
    }
}

struct Sim {
    rng: Rng,
    policy: Policy,
    tools: Vec<String>,
    engine: Scheduler,
    model: Model,
    next_call: usize,
    /// Per key, the last started entry (model index), for the order invariant.
    last_start: HashMap<String, usize>,
    started_ever: HashSet<usize>,
    log: Vec<String>,
}

fn reason_line(r: Reason) -> String {
    match r {
        Reason::Stopped { after } => format!("stopped {after}"),
        other => other.name().to_owned(),
    }
}

impl Sim {
    fn new(seed: u64) -> Self {
        let mut rng = Rng(seed);
        let (text, tools) = random_config(&mut rng);
        let policy = config::resolve(&[Layer::new("sim", text.clone())]).unwrap_or_else(|d| {
            panic!(
                "seed {seed}: the generated config does not resolve:\n{text}\n{:?}",
                d[0].rendered
            )
        });
        Self {
            rng,
            engine: Scheduler::new(policy.clone()),
            policy,
            tools,
            model: Model::default(),
            next_call: 0,
            last_start: HashMap::new(),
            started_ever: HashSet::new(),
            log: vec![text],
        }
    }

    fn tool_info(&self, tool: &str) -> (Option<(String, u32)>, bool, bool) {
        match self.policy.tool(tool) {
            Some(t) => (
                t.concurrency
                    .as_ref()
                    .map(|c| (c.key.as_str().to_owned(), c.limit.get())),
                t.fan_out,
                t.on_error == OnError::Stop,
            ),
            None => (None, false, false),
        }
    }

    fn random_label(&mut self) -> String {
        if self.model.entries.is_empty() || self.rng.chance(5) {
            return ["zz", "c0#9", "#", ""][self.rng.below(4)].to_owned();
        }
        let i = self.rng.below(self.model.entries.len());
        self.model.entries[i].label()
    }

    /// One random event on both sides; checks that they agree.
    fn step(&mut self) {
        let roll = self.rng.below(100);
        let (expect_err, got): (Option<&'static str>, Result<(), String>) = match roll {
            0..=9 => self.submit(),
            10..=39 => {
                let label = self.random_label();
                let expect = self.model.find(&label).map_or(Some("unknown-entry"), |i| {
                    (self.model.entries[i].state != State::Pending).then_some("already-decided")
                });
                let how = self.rng.below(10);
                self.log.push(format!("decide {label} {how}"));
                let got = match how {
                    0 => self.engine.settle(&label, HostSettle::Rejected),
                    1 => self.engine.settle(&label, HostSettle::Skipped),
                    2 => self.engine.settle(&label, HostSettle::Failed),
                    _ => self.engine.approve(&label),
                };
                if expect.is_none() {
                    let i = self.model.find(&label).unwrap_or(0);
                    self.model.entries[i].state = match how {
                        0 => State::Settled(Reason::Rejected),
                        1 => State::Settled(Reason::Skipped),
                        2 => State::Settled(Reason::Failed),
                        _ => State::Approved,
                    };
                }
                (expect, got.map_err(|e| e.code.as_str().to_owned()))
            }
            40..=79 => {
                // Prefer running entries: ends drive progress.
                let running: Vec<usize> = (0..self.model.entries.len())
                    .filter(|&i| self.model.entries[i].state.is_started_unended())
                    .collect();
                let label = if !running.is_empty() && self.rng.chance(85) {
                    self.model.entries[running[self.rng.below(running.len())]].label()
                } else {
                    self.random_label()
                };
                let what = self.rng.below(10);
                self.log.push(format!("run-event {label} {what}"));
                let state = self.model.find(&label).map(|i| self.model.entries[i].state);
                let (expect, next, got) = match what {
                    0 => (
                        match state {
                            None => Some("unknown-entry"),
                            Some(State::Running) => None,
                            Some(State::Ended(_)) => Some("already-ended"),
                            Some(_) => Some("not-running"),
                        },
                        State::Asking,
                        self.engine.begin_question(&label),
                    ),
                    1 => (
                        match state {
                            None => Some("unknown-entry"),
                            Some(State::Asking) => None,
                            Some(State::Ended(_)) => Some("already-ended"),
                            Some(_) => Some("not-asking"),
                        },
                        State::Running,
                        self.engine.end_question(&label),
                    ),
                    n => {
                        let outcome = if n < 4 { Outcome::Failed } else { Outcome::Ok };
                        (
                            match state {
                                None => Some("unknown-entry"),
                                Some(State::Running | State::Asking) => None,
                                Some(State::Ended(_)) => Some("already-ended"),
                                Some(_) => Some("not-running"),
                            },
                            State::Ended(outcome),
                            self.engine.on_ended(&label, outcome),
                        )
                    }
                };
                if expect.is_none() {
                    let i = self.model.find(&label).unwrap_or(0);
                    self.model.entries[i].state = next;
                }
                (expect, got.map_err(|e| e.code.as_str().to_owned()))
            }
            80..=86 => {
                let batches = self.model.cancelled.len();
                let b = self.rng.below(batches + 2);
                self.log.push(format!("cancel {}", b + 1));
                let expect = if b >= batches {
                    Some("unknown-batch")
                } else if self.model.cancelled[b] {
                    Some("batch-cancelled")
                } else {
                    None
                };
                let got = self.engine.cancel_batch(BatchId(b as u32 + 1));
                let mut settled = Vec::new();
                if expect.is_none() {
                    self.model.cancelled[b] = true;
                    for (i, e) in self.model.entries.iter_mut().enumerate() {
                        if e.batch == b && matches!(e.state, State::Pending | State::Approved) {
                            e.state = State::Settled(Reason::Cancelled);
                            settled.push(i);
                        }
                    }
                }
                let got = got.map_err(|e| e.code.as_str().to_owned());
                self.compare(expect, got, settled);
                return;
            }
            87..=89 => {
                self.restart();
                return;
            }
            _ => self.submit(),
        };
        self.compare(expect_err, got, Vec::new());
    }

    fn submit(&mut self) -> (Option<&'static str>, Result<(), String>) {
        let n = self.rng.below(6);
        let mut calls = Vec::new();
        let mut expect = if n == 0 { Some("empty-batch") } else { None };
        let mut ids = HashSet::new();
        for _ in 0..n {
            let tool = self.tools[self.rng.below(self.tools.len())].clone();
            let (_, fan_out, _) = self.tool_info(&tool);
            let id = if self.rng.chance(3) && self.next_call > 0 {
                format!("c{}", self.rng.below(self.next_call))
            } else {
                self.next_call += 1;
                format!("c{}", self.next_call - 1)
            };
            if !ids.insert(id.clone()) || self.model.entries.iter().any(|e| e.call == id) {
                expect = expect.or(Some("duplicate-id"));
            }
            let operations = if fan_out && self.rng.chance(70) {
                Some(1 + self.rng.below(4) as u32)
            } else if !fan_out && self.rng.chance(3) {
                expect = expect.or(Some("not-fan-out"));
                Some(2)
            } else {
                None
            };
            calls.push(Call {
                id,
                tool,
                operations,
                finished: Vec::new(),
            });
        }
        self.log.push(format!("submit {calls:?}"));
        let got = self
            .engine
            .submit_batch(&calls)
            .map(|_| ())
            .map_err(|e| e.code.as_str().to_owned());
        if expect.is_none() {
            let b = self.model.cancelled.len();
            self.model.cancelled.push(false);
            for call in &calls {
                let (key, _, stop) = self.tool_info(&call.tool);
                let ops: Vec<Option<u32>> = match call.operations {
                    Some(n) => (0..n).map(Some).collect(),
                    None => vec![None],
                };
                for op in ops {
                    self.model.entries.push(MEntry {
                        batch: b,
                        call: call.id.clone(),
                        op,
                        key: key.clone(),
                        stop,
                        state: State::Pending,
                    });
                }
            }
        }
        (expect, got)
    }

    /// A fresh scheduler fed `unfinished`; the model keeps what has a response.
    fn restart(&mut self) {
        self.log.push("restart".to_owned());
        let unfinished = self.engine.unfinished();
        self.engine = Scheduler::new(self.policy.clone());
        for (_, calls) in &unfinished {
            self.engine
                .submit_batch(calls)
                .unwrap_or_else(|e| panic!("resubmitting after a restart failed: {e}"));
        }
        let old = std::mem::take(&mut self.model);
        let mut batch_map: BTreeMap<usize, usize> = BTreeMap::new();
        let mut calls_kept: Vec<(usize, String)> = Vec::new();
        for e in &old.entries {
            if old.cancelled[e.batch] || !e.state.lacks_response() {
                continue;
            }
            if !calls_kept.contains(&(e.batch, e.call.clone())) {
                calls_kept.push((e.batch, e.call.clone()));
            }
        }
        for e in &old.entries {
            if !calls_kept.contains(&(e.batch, e.call.clone())) {
                continue;
            }
            let next = batch_map.len();
            let b = *batch_map.entry(e.batch).or_insert(next);
            let state = if e.state.lacks_response() {
                State::Pending
            } else {
                State::Ended(if e.state.is_failure() {
                    Outcome::Failed
                } else {
                    Outcome::Ok
                })
            };
            self.model.entries.push(MEntry {
                batch: b,
                state,
                ..e.clone()
            });
        }
        self.model.cancelled = vec![false; batch_map.len()];
        self.last_start.clear();
        self.started_ever.clear();
        // Batches whose every entry is finished open at once; nothing runs, so nothing starts.
        self.compare(None, Ok(()), Vec::new());
    }

    fn compare(&mut self, expect: Option<&str>, got: Result<(), String>, mut settled: Vec<usize>) {
        let ctx = || self.log.join("\n");
        match (&expect, &got) {
            (None, Ok(())) => {}
            (Some(w), Err(g)) if w == g => {}
            _ => panic!("expected {expect:?}, engine said {got:?}\n{}", ctx()),
        }
        let (started, mut more) = if got.is_ok() {
            self.model.evaluate()
        } else {
            (Vec::new(), Vec::new())
        };
        settled.append(&mut more);
        settled.sort_unstable();
        let want_start: Vec<String> = started
            .iter()
            .map(|&i| self.model.entries[i].label())
            .collect();
        let want_settle: Vec<String> = settled
            .iter()
            .map(|&i| {
                let e = &self.model.entries[i];
                let State::Settled(r) = e.state else {
                    unreachable!()
                };
                format!("{} {}", e.label(), reason_line(r))
            })
            .collect();
        let r = self.engine.next_releases();
        let got_start: Vec<String> = r.start.iter().map(|&e| self.engine.label(e)).collect();
        let got_settle: Vec<String> = r
            .settle
            .iter()
            .map(|&(e, reason)| format!("{} {}", self.engine.label(e), reason_line(reason)))
            .collect();
        if want_start != got_start || want_settle != got_settle {
            panic!(
                "model start {want_start:?} settle {want_settle:?}\nengine start {got_start:?} settle {got_settle:?}\n{}",
                ctx()
            );
        }
        // Invariants: nothing starts twice, starts follow written order per key, states agree,
        // no key over its limit.
        for &i in &started {
            assert!(
                self.started_ever.insert(i),
                "{} started twice\n{}",
                self.model.entries[i].label(),
                ctx()
            );
            if let Some((key, _)) = &self.model.entries[i].key {
                if let Some(&last) = self.last_start.get(key) {
                    assert!(
                        last < i,
                        "key {key}: {} started after a later entry\n{}",
                        self.model.entries[i].label(),
                        ctx()
                    );
                }
                self.last_start.insert(key.clone(), i);
            }
        }
        let mut running: HashMap<&str, (u32, u32)> = HashMap::new();
        for (i, e) in self.model.entries.iter().enumerate() {
            let engine_state = self.engine.state(EntryId(i as u32));
            assert_eq!(
                engine_state,
                Some(e.state),
                "state of {} differs\n{}",
                e.label(),
                ctx()
            );
            if let (Some((k, limit)), true) = (&e.key, e.state.is_started_unended()) {
                let slot = running.entry(k).or_insert((0, *limit));
                slot.0 += 1;
                assert!(
                    slot.0 <= slot.1,
                    "key {k} over its limit {}\n{}",
                    slot.1,
                    ctx()
                );
            }
        }
    }

    /// Liveness: approve everything pending, end everything running, until nothing is left;
    /// every entry must end or settle.
    fn drain(&mut self) {
        for _ in 0..10_000 {
            let pending = self
                .model
                .entries
                .iter()
                .position(|e| e.state == State::Pending);
            let running = self
                .model
                .entries
                .iter()
                .position(|e| e.state.is_started_unended());
            let label = match (pending, running) {
                (Some(i), _) => {
                    let label = self.model.entries[i].label();
                    self.model.entries[i].state = State::Approved;
                    let got = self
                        .engine
                        .approve(&label)
                        .map_err(|e| e.code.as_str().to_owned());
                    self.log.push(format!("drain approve {label}"));
                    self.compare(None, got, Vec::new());
                    continue;
                }
                (None, Some(i)) => self.model.entries[i].label(),
                (None, None) => {
                    let stuck: Vec<String> = self
                        .model
                        .entries
                        .iter()
                        .filter(|e| e.state.lacks_response() && !self.model.cancelled[e.batch])
                        .map(MEntry::label)
                        .collect();
                    assert!(
                        stuck.is_empty(),
                        "stalled with {stuck:?}\n{}",
                        self.log.join("\n")
                    );
                    return;
                }
            };
            let i = self.model.find(&label).unwrap_or(0);
            self.model.entries[i].state = State::Ended(Outcome::Ok);
            let got = self
                .engine
                .on_ended(&label, Outcome::Ok)
                .map_err(|e| e.code.as_str().to_owned());
            self.log.push(format!("drain end {label}"));
            self.compare(None, got, Vec::new());
        }
        panic!("drain did not finish\n{}", self.log.join("\n"));
    }
}

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("TURNSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let n = std::env::var("TURNSTILE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    (0..n).collect()
}

#[test]
fn engine_agrees_with_the_reference_model() {
    let seeds = seeds();
    for &seed in &seeds {
        let result = std::panic::catch_unwind(|| {
            let mut sim = Sim::new(seed);
            let steps = 20 + sim.rng.below(120);
            for _ in 0..steps {
                sim.step();
            }
            sim.drain();
        });
        if let Err(e) = result {
            let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
            panic!("seed {seed} failed (replay: TURNSTILE_SEED={seed}): {msg}");
        }
    }
    eprintln!("simulated {} seeds", seeds.len());
}

/// Runs a random batch set to the end, ending the first running entry (in written order) each
/// step, with a fixed outcome per entry. With `restart`, after every end the scheduler is
/// replaced by a fresh one fed `unfinished()` and everything pending is approved again in
/// reverse order. Returns the ends and the scheduler's settlements, in order.
fn run_to_end(seed: u64, restart: bool) -> Vec<String> {
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
    let policy =
        config::resolve(&[Layer::new("restart", text)]).unwrap_or_else(|_| panic!("config"));
    let mut order: HashMap<String, usize> = HashMap::new();
    let mut s = Scheduler::new(policy.clone());
    let mut id = 0;
    for _ in 0..1 + rng.below(3) {
        let mut calls = Vec::new();
        for _ in 0..1 + rng.below(5) {
            let tool = format!("t{}", rng.below(4));
            let fan_out = policy.tool(&tool).is_some_and(|t| t.fan_out);
            let ops = (fan_out && rng.below(2) == 0).then(|| 1 + rng.below(3) as u32);
            let call = Call {
                id: format!("c{id}"),
                tool,
                operations: ops,
                finished: Vec::new(),
            };
            id += 1;
            match ops {
                Some(n) => (0..n).for_each(|i| {
                    let at = order.len();
                    order.insert(format!("{}#{i}", call.id), at);
                }),
                None => {
                    let at = order.len();
                    order.insert(call.id.clone(), at);
                }
            }
            calls.push(call);
        }
        s.submit_batch(&calls).unwrap_or_else(|e| panic!("{e}"));
    }
    let approve_all = |s: &mut Scheduler| {
        let mut pending = Vec::new();
        for b in 1.. {
            let Ok(statuses) = s.inspect(BatchId(b)) else {
                break;
            };
            pending.extend(
                statuses
                    .into_iter()
                    .filter(|st| st.state == State::Pending)
                    .map(|st| st.label),
            );
        }
        for label in pending.iter().rev() {
            s.approve(label).unwrap_or_else(|e| panic!("{e}"));
        }
    };
    approve_all(&mut s);
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
    let mut log = Vec::new();
    let mut running: Vec<String> = Vec::new();
    for _ in 0..1000 {
        let r = s.next_releases();
        for (e, reason) in r.settle {
            log.push(format!("settle {} {}", s.label(e), reason_line(reason)));
        }
        running.extend(r.start.iter().map(|&e| s.label(e)));
        running.sort_by_key(|l| order.get(l).copied().unwrap_or(usize::MAX));
        running.dedup();
        if running.is_empty() {
            return log;
        }
        let label = running.remove(0);
        let o = outcome(&label);
        s.on_ended(&label, o).unwrap_or_else(|e| panic!("{e}"));
        log.push(format!("end {label} {o:?}"));
        if restart {
            let r = s.next_releases();
            for (e, reason) in r.settle {
                log.push(format!("settle {} {}", s.label(e), reason_line(reason)));
            }
            let unfinished = s.unfinished();
            s = Scheduler::new(policy.clone());
            for (_, calls) in &unfinished {
                s.submit_batch(calls).unwrap_or_else(|e| panic!("{e}"));
            }
            // The host cancelled what was running; it runs again when released again.
            running.clear();
            approve_all(&mut s);
        }
    }
    panic!("seed {seed}: did not finish");
}

/// A restart at every step gives the same executions, in the same order, as no restart: an
/// ended execution never runs again, and the rest release in written order (the restart-
/// reorder bug of JP ticket 0ya5qnf cannot happen).
#[test]
fn restart_at_every_step_keeps_the_order() {
    let seeds = seeds();
    for &seed in &seeds {
        let plain = run_to_end(seed, false);
        let restarted = run_to_end(seed, true);
        let ends: Vec<&String> = plain.iter().filter(|l| l.starts_with("end ")).collect();
        let unique: HashSet<&String> = ends.iter().copied().collect();
        assert_eq!(
            ends.len(),
            unique.len(),
            "seed {seed}: an execution ended twice"
        );
        assert_eq!(
            plain, restarted,
            "seed {seed} (replay: TURNSTILE_SEED={seed})"
        );
    }
}
