//! Path keys (`concurrency = { key = "fs", path = "{p}" }`) against an oracle that shares
//! nothing with the engine but the public API: a seeded property test whose model normalizes
//! each call's paths itself (from the README's rules: `/` and `\` separate components; empty
//! ones, `.` and a leading `/` are dropped; `..` removes the component before it) and
//! recomputes from scratch after every round which entries must have started. In entry order,
//! an approved entry of an open batch starts when:
//!
//! - on the tree: no running entry has a path equal to one of its own, above it or below it,
//!   no earlier entry that still waits (pending, or approved and not started) has one, and the
//!   tree is not paused;
//! - on an exact key it also takes (`lim`, limit 2): the key has room, no earlier entry with
//!   it still waits, and it is not paused.
//!
//! A move (`mv`) takes two paths on the tree; `all` takes the root (every path); a fan-out
//! call's operations take their call's path, so they run one at a time; a call whose arguments
//! make no path takes the root. The host's inputs: approvals, rejections, ends, rate limits
//! (every key of the call pauses until the time asked; the entry goes back in line, up to 3
//! times, then is settled), cancellations, and restarts (`unfinished` then `resume`: what ran
//! or was approved is pending again, pauses and retry counts are forgotten, and every call
//! keeps its paths, which `inspect` names as `fs:/a/b`).
//!
//! The engine's starts must equal the model's every round, every entry's state must match,
//! and from the outputs alone no two running entries overlap; every run ends drained.
//!
//! `TURNSTILE_SEED=N` replays one seed, `TURNSTILE_SEEDS=N` sets how many run (`common::seeds`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

use std::collections::BTreeMap;

mod common;
use common::{Rng, seeds};

use turnstile_engine::config::{self, Layer, Policy};
use turnstile_engine::schedule::{
    BatchId, Call, End, EntryId, HostSettle, Input, Releases, Scheduler, Started, State, Wait,
};

const POLICY: &str = r#"
[conversation.tools.w]
concurrency = { key = "fs", path = "{p}" }
[conversation.tools.mv]
concurrency = [{ key = "fs", path = "{src}" }, { key = "fs", path = "{dst}" }]
[conversation.tools.wl]
concurrency = [{ key = "lim", limit = 2 }, { key = "fs", path = "{p}" }]
[conversation.tools.all]
concurrency = { key = "fs", path = "/" }
[conversation.tools.wf]
concurrency = { key = "fs", path = "{p}" }
fan_out = true
[conversation.tools.l]
concurrency = { key = "lim", limit = 2 }
"#;

/// Rate-limit retries per entry (README: `retries`, default 3).
const RETRIES: u32 = 3;

/// Raw paths the model writes, normalization's cases among them.
const PATHS: &[&str] = &[
    "a", "a/b", "./a/b/", "a//b/c", "/b", "b/../a", "c", "", ".", "\\c\\d", "../x", "a/b/c/..",
    "ab", "a/bc",
];

// ---------------------------------------------------------------------------------------------
// The model

/// The README's normalization, written as a stack of components.
fn normalize(raw: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in raw.split(['/', '\\']) {
        if part.is_empty() || part == "." {
            continue;
        }
        if part == ".." && parts.last().is_some_and(|&p| p != "..") {
            parts.pop();
        } else {
            parts.push(part);
        }
    }
    parts.join("/")
}

/// Whether one path is the other or lies under it, component by component.
fn meet(a: &str, b: &str) -> bool {
    let split = |p: &str| -> Vec<String> {
        if p.is_empty() {
            Vec::new()
        } else {
            p.split('/').map(str::to_owned).collect()
        }
    };
    let (a, b) = (split(a), split(b));
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum M {
    Pending,
    Approved,
    Running,
    Done,
}

#[derive(Debug)]
struct MEntry {
    batch: usize,
    paths: Vec<String>,
    lim: bool,
    state: M,
    retries: u32,
}

#[derive(Debug, Default)]
struct Model {
    entries: BTreeMap<u64, MEntry>,
    /// Per batch: whether it was cancelled.
    cancelled: BTreeMap<usize, bool>,
    fs_paused: u64,
    lim_paused: u64,
}

impl Model {
    fn open(&self, batch: usize) -> bool {
        !self.cancelled[&batch]
            && self
                .entries
                .values()
                .all(|m| m.batch != batch || m.state != M::Pending)
    }

    /// Starts what may start, in entry order; returns it.
    fn starts(&mut self, now: u64) -> Vec<u64> {
        let mut waiting: Vec<u64> = Vec::new();
        let mut started = Vec::new();
        let numbers: Vec<u64> = self.entries.keys().copied().collect();
        for e in numbers {
            let m = &self.entries[&e];
            if !matches!(m.state, M::Pending | M::Approved) {
                continue;
            }
            let may = m.state == M::Approved && self.open(m.batch) && {
                let overlaps = |other: &MEntry| {
                    m.paths
                        .iter()
                        .any(|p| other.paths.iter().any(|q| meet(p, q)))
                };
                let tree_free = m.paths.is_empty()
                    || self.fs_paused <= now
                        && !self
                            .entries
                            .values()
                            .any(|o| o.state == M::Running && overlaps(o))
                        && !waiting.iter().any(|w| overlaps(&self.entries[w]));
                let running_lim = self
                    .entries
                    .values()
                    .filter(|o| o.lim && o.state == M::Running)
                    .count();
                let lim_free = !m.lim
                    || (self.lim_paused <= now
                        && running_lim < 2
                        && !waiting.iter().any(|w| self.entries[w].lim));
                tree_free && lim_free
            };
            if may {
                self.entries.get_mut(&e).unwrap().state = M::Running;
                started.push(e);
            } else {
                waiting.push(e);
            }
        }
        started
    }
}

// ---------------------------------------------------------------------------------------------
// The run

/// A call the run submits: `(id, tool, operations, arguments, the raw paths the model reads)`.
type Planned<'a> = (String, &'a str, Option<u32>, Option<String>, Vec<&'a str>);

struct Run {
    rng: Rng,
    s: Scheduler,
    out: Releases,
    model: Model,
    now: u64,
    batches: Vec<BatchId>,
    log: Vec<String>,
}

fn policy() -> Policy {
    config::resolve(&[Layer::new("t.toml", POLICY)]).expect("valid config")
}

impl Run {
    fn fail(&self, seed: u64, what: &str) -> ! {
        panic!("seed {seed}: {what}\nlog:\n{}", self.log.join("\n"));
    }

    fn round(&mut self, seed: u64) {
        self.s.next_releases(Some(self.now), &mut self.out);
        let mut got: Vec<u64> = self.out.start.iter().map(|e| e.0).collect();
        got.sort_unstable();
        let want = self.model.starts(self.now);
        self.log
            .push(format!("  round at {}: starts {got:?}", self.now));
        if got != want {
            self.fail(seed, &format!("engine started {got:?}, the model {want:?}"));
        }
        // From the engine's states alone: no two running entries overlap.
        let running: Vec<&MEntry> = self
            .model
            .entries
            .iter()
            .filter(|(e, _)| {
                matches!(
                    self.s.state(EntryId(**e)),
                    Some(State::Running | State::Aborted(_))
                )
            })
            .map(|(_, m)| m)
            .collect();
        for (i, a) in running.iter().enumerate() {
            for b in &running[i + 1..] {
                if a.paths.iter().any(|p| b.paths.iter().any(|q| meet(p, q))) {
                    self.fail(seed, &format!("overlapping paths run at once: {a:?} {b:?}"));
                }
            }
        }
        self.compare_states(seed);
    }

    fn compare_states(&self, seed: u64) {
        for (&e, m) in &self.model.entries {
            let state = self.s.state(EntryId(e));
            let ok = match m.state {
                M::Pending => state == Some(State::Pending),
                M::Approved => state == Some(State::Approved),
                M::Running => matches!(state, Some(State::Running | State::Aborted(_))),
                M::Done => !matches!(
                    state,
                    Some(State::Pending | State::Approved | State::Running)
                ),
            };
            if !ok {
                self.fail(seed, &format!("entry {e}: engine {state:?}, model {m:?}"));
            }
        }
    }

    fn submit(&mut self) {
        let n = 1 + self.rng.below(4);
        let batch = self.batches.len();
        let mut calls: Vec<Planned<'_>> = Vec::new();
        for c in 0..n {
            let id = format!("b{batch}c{c}");
            let pick = |rng: &mut Rng| PATHS[rng.below(PATHS.len())];
            let one = |p: &str| Some(format!(r#"{{"p":{p:?}}}"#));
            let (tool, args, raw) = match self.rng.below(6) {
                0 => {
                    let (s, d) = (pick(&mut self.rng), pick(&mut self.rng));
                    let args = format!(r#"{{"src":{s:?},"dst":{d:?}}}"#);
                    ("mv", Some(args), vec![s, d])
                }
                1 => {
                    let p = pick(&mut self.rng);
                    ("wl", one(p), vec![p])
                }
                2 if self.rng.chance(30) => ("all", None, vec!["/"]),
                3 => {
                    let p = pick(&mut self.rng);
                    ("wf", one(p), vec![p])
                }
                4 if self.rng.chance(50) => ("l", None, Vec::new()),
                // Arguments that make no path: the root.
                _ if self.rng.chance(5) => ("w", Some("{}".to_owned()), vec![""]),
                _ => {
                    let p = pick(&mut self.rng);
                    ("w", one(p), vec![p])
                }
            };
            let ops = (tool == "wf").then(|| 1 + self.rng.below(3) as u32);
            calls.push((id, tool, ops, args, raw));
        }
        let engine_calls: Vec<Call<'_>> = calls
            .iter()
            .map(|(id, tool, ops, args, _)| Call {
                id,
                tool,
                operations: *ops,
                arguments: args.as_deref(),
            })
            .collect();
        let sub = self.s.submit_batch(&engine_calls).expect("submit");
        self.batches.push(sub.batch);
        self.model.cancelled.insert(batch, false);
        let mut e = sub.first.0;
        for (_, tool, ops, _, raw) in &calls {
            // A path its arguments do not make (or make empty) is the root.
            let paths: Vec<String> = raw.iter().map(|p| normalize(p)).collect();
            for _ in 0..ops.unwrap_or(1) {
                self.model.entries.insert(
                    e,
                    MEntry {
                        batch,
                        paths: paths.clone(),
                        lim: matches!(*tool, "wl" | "l"),
                        state: M::Pending,
                        retries: 0,
                    },
                );
                e += 1;
            }
        }
        self.log
            .push(format!("submit {calls:?} -> first {}", sub.first.0));
    }

    fn pick(&mut self, want: M) -> Option<u64> {
        let list: Vec<u64> = self
            .model
            .entries
            .iter()
            .filter(|(_, m)| m.state == want)
            .map(|(e, _)| *e)
            .collect();
        (!list.is_empty()).then(|| list[self.rng.below(list.len())])
    }

    fn step(&mut self, seed: u64) {
        self.now += self.rng.below(4) as u64;
        match self.rng.below(10) {
            0 | 1 => self.submit(),
            2..=4 => {
                if let Some(e) = self.pick(M::Pending) {
                    if self.rng.chance(90) {
                        self.log.push(format!("approve {e}"));
                        self.s
                            .on_event(Input::Approve(EntryId(e)))
                            .expect("approve");
                        self.model.entries.get_mut(&e).unwrap().state = M::Approved;
                    } else {
                        self.log.push(format!("reject {e}"));
                        let input = Input::NotRun(EntryId(e), HostSettle::Rejected);
                        self.s.on_event(input).expect("reject");
                        self.model.entries.get_mut(&e).unwrap().state = M::Done;
                    }
                }
            }
            5..=7 => {
                if let Some(e) = self.pick(M::Running) {
                    let cancelled = self.model.cancelled[&self.model.entries[&e].batch];
                    if self.rng.chance(15) {
                        let until = self.now + 1 + self.rng.below(20) as u64;
                        self.log.push(format!("rate-limited {e} until {until}"));
                        self.s
                            .on_ended(EntryId(e), End::RateLimited(until))
                            .expect("rate-limited");
                        let m = self.model.entries.get_mut(&e).unwrap();
                        if !m.paths.is_empty() {
                            self.model.fs_paused = self.model.fs_paused.max(until);
                        }
                        if m.lim {
                            self.model.lim_paused = self.model.lim_paused.max(until);
                        }
                        if m.retries < RETRIES && !cancelled {
                            m.retries += 1;
                            m.state = M::Approved;
                        } else {
                            m.state = M::Done;
                        }
                    } else {
                        self.log.push(format!("ok {e}"));
                        self.s.on_ended(EntryId(e), End::Ok).expect("end");
                        self.model.entries.get_mut(&e).unwrap().state = M::Done;
                    }
                }
            }
            8 => {
                let live: Vec<usize> = self
                    .model
                    .entries
                    .values()
                    .filter(|m| m.state != M::Done && !self.model.cancelled[&m.batch])
                    .map(|m| m.batch)
                    .collect();
                if !live.is_empty() && self.rng.chance(30) {
                    let b = live[self.rng.below(live.len())];
                    self.log.push(format!("cancel batch {b}"));
                    self.s
                        .on_event(Input::Cancel(self.batches[b]))
                        .expect("cancel");
                    self.model.cancelled.insert(b, true);
                    for m in self.model.entries.values_mut() {
                        if m.batch == b && matches!(m.state, M::Pending | M::Approved) {
                            m.state = M::Done;
                        }
                    }
                }
            }
            _ => {
                if self.rng.chance(20) {
                    self.restart(seed);
                }
            }
        }
        self.round(seed);
    }

    fn restart(&mut self, seed: u64) {
        self.log.push("restart".to_owned());
        let saved = self.s.unfinished();
        let (s, unrestored) =
            Scheduler::resume(policy(), &saved, Started::RunAgain).expect("resume");
        assert!(unrestored.is_empty(), "seed {seed}: {unrestored:?}");
        self.s = s;
        self.model.fs_paused = 0;
        self.model.lim_paused = 0;
        for m in self.model.entries.values_mut() {
            m.retries = 0;
            match m.state {
                M::Running if self.model.cancelled[&m.batch] => m.state = M::Done,
                M::Running | M::Approved => m.state = M::Pending,
                _ => {}
            }
        }
        // Every call keeps its paths, named as `fs:/path`.
        for &b in &self.batches {
            let Some(statuses) = self.s.inspect(b) else {
                continue;
            };
            for st in statuses {
                let m = &self.model.entries[&st.entry.0];
                let mut want: Vec<String> = Vec::new();
                if m.lim {
                    want.push("lim".to_owned());
                }
                for p in &m.paths {
                    let name = format!("fs:/{p}");
                    if !want.contains(&name) {
                        want.push(name);
                    }
                }
                let mut got = st.keys.clone();
                got.sort();
                want.sort();
                if got != want {
                    self.fail(
                        seed,
                        &format!("entry {}: keys {got:?}, model {want:?}", st.entry.0),
                    );
                }
            }
        }
    }

    /// Approves and ends everything left: the run must drain.
    fn drain(&mut self, seed: u64) {
        for _ in 0..10_000 {
            self.now += 25;
            if let Some(e) = self.pick(M::Pending) {
                self.s
                    .on_event(Input::Approve(EntryId(e)))
                    .expect("approve");
                self.model.entries.get_mut(&e).unwrap().state = M::Approved;
            } else if let Some(e) = self.pick(M::Running) {
                self.s.on_ended(EntryId(e), End::Ok).expect("end");
                self.model.entries.get_mut(&e).unwrap().state = M::Done;
            } else if self.model.entries.values().all(|m| m.state == M::Done) {
                self.round(seed);
                if self.s.live_entries() != 0 {
                    self.fail(seed, "drained, but entries are live");
                }
                return;
            } else {
                // Approved entries wait with nothing running and nothing pending.
                self.round(seed);
                if self.pick(M::Running).is_none() {
                    self.fail(seed, "approved entries wait for nothing (deadlock)");
                }
                continue;
            }
            self.round(seed);
        }
        self.fail(seed, "did not drain");
    }
}

fn run(seed: u64) {
    let mut r = Run {
        rng: Rng(seed),
        s: Scheduler::new(policy()),
        out: Releases::default(),
        model: Model::default(),
        now: 0,
        batches: Vec::new(),
        log: Vec::new(),
    };
    let steps = 20 + r.rng.below(60);
    for _ in 0..steps {
        r.step(seed);
    }
    r.drain(seed);
}

#[test]
fn path_keys_agree_with_the_reference_model() {
    for seed in seeds() {
        run(seed);
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-written cases

struct T {
    s: Scheduler,
    out: Releases,
}

impl T {
    fn new() -> Self {
        Self {
            s: Scheduler::new(policy()),
            out: Releases::default(),
        }
    }

    fn submit(&mut self, calls: &[(&str, &str, &str)]) -> (BatchId, Vec<EntryId>) {
        let calls: Vec<Call<'_>> = calls
            .iter()
            .map(|&(id, tool, arguments)| Call {
                id,
                tool,
                operations: None,
                arguments: Some(arguments),
            })
            .collect();
        let b = self.s.submit_batch(&calls).expect("submit");
        let entries = (0..u64::from(b.count))
            .map(|i| EntryId(b.first.0 + i))
            .collect();
        (b.batch, entries)
    }

    fn approve(&mut self, entries: &[EntryId]) -> Vec<EntryId> {
        for &e in entries {
            self.s.on_event(Input::Approve(e)).expect("approve");
        }
        self.s.next_releases(Some(0), &mut self.out);
        self.out.start.clone()
    }

    fn ok(&mut self, e: EntryId) -> Vec<EntryId> {
        self.s.on_ended(e, End::Ok).expect("end");
        self.s.next_releases(Some(0), &mut self.out);
        self.out.start.clone()
    }
}

/// A call on `a` waits for one on `a/b` and one on the root, not for one on `b`; a call on
/// `a/c` passes a waiting call on `a/b`, and one on `a/b/d` waits behind it, named in `inspect`.
#[test]
fn overlapping_paths_wait_and_apart_ones_pass() {
    let mut t = T::new();
    let (b, e) = t.submit(&[
        ("r", "w", r#"{"p":"a/b"}"#),
        ("s", "w", r#"{"p":"./a/"}"#),
        ("u", "w", r#"{"p":"b"}"#),
        ("v", "w", r#"{"p":"a/c"}"#),
        ("x", "w", r#"{"p":"a//b/d"}"#),
    ]);
    assert_eq!(t.approve(&e), [e[0], e[2]]);
    let status = t.s.inspect(b).expect("live");
    assert_eq!(status[1].keys, ["fs:/a"]);
    assert_eq!(
        status[1].wait,
        Some(Wait::KeyFull {
            key: "fs:/a".to_owned(),
            limit: 1,
            running: vec!["r".to_owned()]
        })
    );
    // v on a/c overlaps s on a, which waits: v waits behind it.
    assert_eq!(
        status[3].wait,
        Some(Wait::Behind {
            label: "s".to_owned(),
            key: "fs:/a/c".to_owned()
        })
    );
    assert_eq!(t.ok(e[2]), []);
    assert_eq!(t.ok(e[0]), [e[1]]);
    assert_eq!(t.ok(e[1]), [e[3], e[4]]);
}

/// A move takes both its paths, and its source and destination being one path counts once.
#[test]
fn a_move_takes_both_paths() {
    let mut t = T::new();
    let (b, e) = t.submit(&[
        ("m", "mv", r#"{"src":"a","dst":"b/c"}"#),
        ("w1", "w", r#"{"p":"b"}"#),
        ("w2", "w", r#"{"p":"c"}"#),
        ("m2", "mv", r#"{"src":"d","dst":"d"}"#),
    ]);
    assert_eq!(t.approve(&e), [e[0], e[2], e[3]]);
    let status = t.s.inspect(b).expect("live");
    assert_eq!(status[0].keys, ["fs:/a", "fs:/b/c"]);
    assert_eq!(status[3].keys, ["fs:/d"]);
    assert_eq!(t.ok(e[0]), [e[1]]);
}

/// A template that can make a path key's name must agree it is a path key: otherwise its
/// calls would take the tree without a path and overlap nothing.
#[test]
fn a_template_that_can_make_a_path_key_must_agree() {
    let text = r#"
[conversation.tools.a]
concurrency = { key = "fs", path = "{p}" }
[conversation.tools.b]
concurrency = { key = "{x}" }
"#;
    let errors = config::resolve(&[Layer::new("t.toml", text)]).expect_err("refused");
    let codes: Vec<&str> = errors.iter().map(|d| d.code.as_str()).collect();
    assert!(codes.contains(&"concurrency-path-conflict"), "{codes:?}");
}
