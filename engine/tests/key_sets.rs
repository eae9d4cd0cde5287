//! Key sets (`concurrency = [{ key = "fs:{src}" }, { key = "fs:{dst}" }]`) against an oracle
//! that shares nothing with the engine but the public API: a seeded property test whose model
//! names each entry's keys itself (from the tool's members and the call's arguments, each name
//! once) and recomputes from scratch after every round which entries must have started (the
//! lowest-numbered approved entry of an open batch whose every key has room and no earlier
//! waiting entry, again and again). The engine's starts must equal the model's, and from the
//! outputs alone: per key, running <= limit; nothing starts twice or before its batch's barrier;
//! no entry starts while an earlier entry with one of its keys still waits (no overtaking on any
//! key of a set). Every run ends drained (liveness: no deadlock, every batch retires).
//! Then a few hand-written cases: crossing sets, a waiting set that holds nothing, two members
//! that make one key.
//!
//! A failure prints its seed, config and log; `TURNSTILE_SEED=N` replays one seed,
//! `TURNSTILE_SEEDS=N` sets how many run (default 500).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use turnstile_engine::config::{self, Layer, Policy};
use turnstile_engine::schedule::{
    BatchId, Call, End, EntryId, HostSettle, Input, Reason, Releases, Scheduler, State, Wait,
};

// ---------------------------------------------------------------------------------------------
// Seeds and randomness

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// True `percent` times in a hundred.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// `TURNSTILE_SEED=N` alone, else `0..TURNSTILE_SEEDS` (default 500; fewer in wasm, which has
/// no environment and runs slower).
fn seeds() -> Vec<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    if let Some(seed) = var("TURNSTILE_SEED") {
        return vec![seed];
    }
    let default = if cfg!(target_arch = "wasm32") {
        100
    } else {
        500
    };
    (0..var("TURNSTILE_SEEDS").unwrap_or(default)).collect()
}

// ---------------------------------------------------------------------------------------------
// The generated world: fixed keys `k0..k3`, the templates `t:{a}` and `t:{b}`, and tools

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Member {
    /// The fixed key `k{i}`.
    Fixed(usize),
    /// The template `t:{field}`, `field` being `a` or `b`.
    Template(&'static str),
}

struct Tool {
    name: String,
    members: Vec<Member>,
    fan_out: bool,
    /// How the TOML writes it: 0 a set (or `[]`), 1 a table (one member), 2 `0` or nothing
    /// (no member).
    form: u8,
}

struct World {
    /// The fixed keys' limits.
    limits: Vec<u32>,
    /// The limit of every key the templates make.
    template_limit: u32,
    tools: Vec<Tool>,
}

impl World {
    fn random(rng: &mut Rng) -> Self {
        let keys = rng.range(2, 4);
        let limits: Vec<u32> = (0..keys).map(|_| rng.range(1, 3) as u32).collect();
        let template_limit = rng.range(1, 3) as u32;
        let mut tools = Vec::new();
        for t in 0..rng.range(2, 5) {
            let mut candidates: Vec<Member> = (0..keys).map(Member::Fixed).collect();
            candidates.push(Member::Template("a"));
            candidates.push(Member::Template("b"));
            rng.shuffle(&mut candidates);
            let mut members: Vec<Member> = candidates.into_iter().take(rng.below(4)).collect();
            // Often both templates, so that equal arguments make one key named twice.
            if rng.chance(35) {
                for m in [Member::Template("a"), Member::Template("b")] {
                    if !members.contains(&m) {
                        let at = rng.below(members.len() + 1);
                        members.insert(at, m);
                    }
                }
            }
            let form = match members.len() {
                0 => u8::from(rng.chance(50)) * 2,
                1 => u8::from(rng.chance(50)),
                _ => 0,
            };
            tools.push(Tool {
                name: format!("tool{t}"),
                members,
                fan_out: rng.chance(30),
                form,
            });
        }
        Self {
            limits,
            template_limit,
            tools,
        }
    }

    fn member_toml(&self, m: Member) -> String {
        match m {
            Member::Fixed(i) => format!("{{ key = \"k{i}\", limit = {} }}", self.limits[i]),
            Member::Template(f) => {
                format!("{{ key = \"t:{{{f}}}\", limit = {} }}", self.template_limit)
            }
        }
    }

    fn toml(&self) -> String {
        let mut text = String::new();
        for tool in &self.tools {
            let concurrency = match (tool.form, tool.members.as_slice()) {
                (1, [m]) => Some(self.member_toml(*m)),
                (2, []) => tool.fan_out.then(|| "0".to_owned()),
                _ => {
                    let members: Vec<String> =
                        tool.members.iter().map(|&m| self.member_toml(m)).collect();
                    Some(format!("[{}]", members.join(", ")))
                }
            };
            if concurrency.is_none() && !tool.fan_out {
                continue; // a tool no layer configures: unbounded
            }
            writeln!(text, "[conversation.tools.{}]", tool.name).unwrap();
            if let Some(c) = concurrency {
                writeln!(text, "concurrency = {c}").unwrap();
            }
            if tool.fan_out {
                writeln!(text, "fan_out = true").unwrap();
            }
        }
        text
    }

    /// The model's own naming of a call's keys: each member's name, each name once, sorted.
    fn keys(&self, tool: usize, a: &str, b: &str) -> Vec<String> {
        let names: BTreeSet<String> = self.tools[tool]
            .members
            .iter()
            .map(|m| match m {
                Member::Fixed(i) => format!("k{i}"),
                Member::Template("a") => format!("t:{a}"),
                Member::Template(_) => format!("t:{b}"),
            })
            .collect();
        names.into_iter().collect()
    }

    fn limit(&self, key: &str) -> usize {
        if key.starts_with("t:") {
            self.template_limit as usize
        } else {
            self.limits[key[1..].parse::<usize>().unwrap()] as usize
        }
    }
}

/// One call to submit.
struct CallSpec {
    id: String,
    tool: usize,
    operations: Option<u32>,
    arguments: String,
    keys: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// The reference model

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Pending,
    Approved,
    Running,
    Done,
}

struct Entry {
    id: u64,
    batch: usize,
    keys: Vec<String>,
    st: St,
}

#[derive(Default)]
struct Model {
    /// In entry order (numbers only grow).
    entries: Vec<Entry>,
}

impl Model {
    fn open(&self, batch: usize) -> bool {
        !self
            .entries
            .iter()
            .any(|e| e.batch == batch && e.st == St::Pending)
    }

    fn running(&self, key: &str) -> usize {
        self.entries
            .iter()
            .filter(|e| e.st == St::Running && e.keys.iter().any(|k| k == key))
            .count()
    }

    /// Whether an entry before `i` with `key` still waits (pending or approved).
    fn earlier_waits(&self, i: usize, key: &str) -> bool {
        self.entries[..i]
            .iter()
            .any(|f| matches!(f.st, St::Pending | St::Approved) && f.keys.iter().any(|k| k == key))
    }

    /// What must start now: repeatedly the lowest-numbered approved entry of an open batch whose
    /// every key has room and no earlier waiting entry.
    fn releases(&mut self, world: &World) -> Vec<u64> {
        let mut started = Vec::new();
        loop {
            let found = (0..self.entries.len()).find(|&i| {
                let e = &self.entries[i];
                e.st == St::Approved
                    && self.open(e.batch)
                    && e.keys
                        .iter()
                        .all(|k| self.running(k) < world.limit(k) && !self.earlier_waits(i, k))
            });
            let Some(i) = found else { break };
            self.entries[i].st = St::Running;
            started.push(self.entries[i].id);
        }
        started.sort_unstable();
        started
    }

    fn set(&mut self, id: u64, st: St) {
        let e = self.entries.iter_mut().find(|e| e.id == id).unwrap();
        e.st = st;
    }

    fn with(&self, st: St) -> Vec<u64> {
        self.entries
            .iter()
            .filter(|e| e.st == st)
            .map(|e| e.id)
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Engine and model side by side

/// What the engine's outputs say, kept apart from the model: which entries were approved,
/// settled by the host, started and ended, by number.
#[derive(Default)]
struct Seen {
    approved: BTreeSet<u64>,
    rejected: BTreeSet<u64>,
    started: BTreeSet<u64>,
    running: BTreeSet<u64>,
    /// Every submitted entry: its batch and keys (as the model named them).
    entries: BTreeMap<u64, (usize, Vec<String>)>,
}

#[derive(Default)]
struct Stats {
    rounds: u64,
    starts: u64,
    set_entries: u64,
    one_key_from_two_members: u64,
    set_waits: u64,
    full_keys: u64,
}

struct Sim {
    seed: u64,
    rng: Rng,
    world: World,
    text: String,
    s: Scheduler,
    model: Model,
    seen: Seen,
    out: Releases,
    now: u64,
    log: String,
    stats: Stats,
    next_call: usize,
}

impl Sim {
    fn new(seed: u64) -> Self {
        let mut rng = Rng(seed);
        let world = World::random(&mut rng);
        let text = world.toml();
        let policy = config::resolve(&[Layer::new("t.toml", &text)])
            .unwrap_or_else(|d| panic!("seed {seed}: config refused:\n{text}\n{d:#?}"));
        Self {
            seed,
            rng,
            world,
            text,
            s: Scheduler::new(policy),
            model: Model::default(),
            seen: Seen::default(),
            out: Releases::default(),
            now: 0,
            log: String::new(),
            stats: Stats::default(),
            next_call: 0,
        }
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "seed {} (replay: TURNSTILE_SEED={}): {what}\n--- config\n{}--- log\n{}",
            self.seed, self.seed, self.text, self.log
        );
    }

    fn random_batch(&mut self) -> Vec<CallSpec> {
        let n = self.rng.range(1, 8);
        let values = ["x", "y", "z"];
        (0..n)
            .map(|_| {
                let tool = self.rng.below(self.world.tools.len());
                let a = values[self.rng.below(2)];
                // Often the same value twice: two members, one key.
                let b = if self.rng.chance(40) {
                    a
                } else {
                    values[self.rng.below(3)]
                };
                let operations = (self.world.tools[tool].fan_out && self.rng.chance(50))
                    .then(|| self.rng.range(1, 3) as u32);
                self.next_call += 1;
                CallSpec {
                    id: format!("c{}", self.next_call),
                    tool,
                    operations,
                    arguments: format!(r#"{{"a":"{a}","b":"{b}"}}"#),
                    keys: self.world.keys(tool, a, b),
                }
            })
            .collect()
    }

    fn submit(&mut self, batch: usize, specs: &[CallSpec]) {
        let calls: Vec<Call<'_>> = specs
            .iter()
            .map(|c| Call {
                id: &c.id,
                tool: &self.world.tools[c.tool].name,
                operations: c.operations,
                arguments: Some(&c.arguments),
            })
            .collect();
        let b = match self.s.submit_batch(&calls) {
            Ok(b) => b,
            Err(err) => self.fail(&format!("submit refused: {err:?}")),
        };
        let mut next = b.first.0;
        let mut line = format!("submit batch {batch} ({:?}):", b.batch);
        for c in specs {
            let n = c.operations.unwrap_or(1);
            for _ in 0..n {
                write!(
                    line,
                    " e{next}={}{} {:?}",
                    self.world.tools[c.tool].name, c.arguments, c.keys
                )
                .unwrap();
                let members = self.world.tools[c.tool].members.len();
                if members > 1 {
                    self.stats.set_entries += 1;
                }
                if c.keys.len() < members {
                    self.stats.one_key_from_two_members += 1;
                }
                self.model.entries.push(Entry {
                    id: next,
                    batch,
                    keys: c.keys.clone(),
                    st: St::Pending,
                });
                self.seen.entries.insert(next, (batch, c.keys.clone()));
                next += 1;
            }
        }
        self.log.push_str(&line);
        self.log.push('\n');
        if next - b.first.0 != u64::from(b.count) {
            self.fail(&format!(
                "{} entries, the model counts {}",
                b.count,
                next - b.first.0
            ));
        }
        // The engine names the same keys as the model, each once.
        let status = self.s.inspect(b.batch).unwrap();
        for st in status {
            let mut keys = st.keys.clone();
            keys.sort_unstable();
            let (_, model) = &self.seen.entries[&st.entry.0];
            if keys.len() != st.keys.len() || &keys != model {
                self.fail(&format!(
                    "e{} has keys {:?}, the model names {model:?}",
                    st.entry.0, st.keys
                ));
            }
        }
    }

    fn approve(&mut self, e: u64) {
        writeln!(self.log, "approve e{e}").unwrap();
        if let Err(r) = self.s.on_event(Input::Approve(EntryId(e))) {
            self.fail(&format!("approve e{e} refused: {r:?}"));
        }
        self.model.set(e, St::Approved);
        self.seen.approved.insert(e);
    }

    fn reject(&mut self, e: u64) {
        writeln!(self.log, "reject e{e}").unwrap();
        if let Err(r) = self
            .s
            .on_event(Input::NotRun(EntryId(e), HostSettle::Rejected))
        {
            self.fail(&format!("reject e{e} refused: {r:?}"));
        }
        self.model.set(e, St::Done);
        self.seen.rejected.insert(e);
    }

    fn end(&mut self, e: u64, ok: bool) {
        writeln!(self.log, "end e{e} {}", if ok { "ok" } else { "failed" }).unwrap();
        let end = if ok { End::Ok } else { End::Failed };
        if let Err(r) = self.s.on_ended(EntryId(e), end) {
            self.fail(&format!("end e{e} refused: {r:?}"));
        }
        self.model.set(e, St::Done);
        self.seen.running.remove(&e);
    }

    /// A round: the engine's starts against the model's, then the invariants from the outputs.
    fn round(&mut self) {
        self.now += 1;
        self.s.next_releases(Some(self.now), &mut self.out);
        let mut got: Vec<u64> = self.out.start.iter().map(|e| e.0).collect();
        got.sort_unstable();
        let want = self.model.releases(&self.world);
        writeln!(self.log, "round {}: start {got:?}", self.now).unwrap();
        self.stats.rounds += 1;
        self.stats.starts += got.len() as u64;
        if got != want {
            self.fail(&format!(
                "round {}: the engine started {got:?}, the model {want:?}",
                self.now
            ));
        }
        self.check(&got);
        // Every live entry's state agrees with the model's.
        for e in &self.model.entries {
            let state = self.s.state(EntryId(e.id));
            let agrees = matches!(
                (e.st, state),
                (St::Pending, Some(State::Pending))
                    | (St::Approved, Some(State::Approved))
                    | (St::Running, Some(State::Running))
                    | (St::Done, None | Some(State::Ended(_) | State::Settled(_)))
            );
            if !agrees {
                self.fail(&format!(
                    "e{} is {state:?} in the engine, {:?} in the model",
                    e.id, e.st
                ));
            }
        }
        let waiting_sets = self
            .model
            .entries
            .iter()
            .filter(|e| e.st == St::Approved && e.keys.len() > 1)
            .count();
        self.stats.set_waits += waiting_sets as u64;
    }

    /// The invariants, from the outputs and inputs alone.
    fn check(&mut self, started: &[u64]) {
        for &e in started {
            if !self.seen.started.insert(e) {
                self.fail(&format!("e{e} started twice"));
            }
            if !self.seen.approved.contains(&e) {
                self.fail(&format!("e{e} started without approval"));
            }
            self.seen.running.insert(e);
        }
        // Waiting: submitted, neither started nor settled by the host.
        let waiting: Vec<u64> = self
            .seen
            .entries
            .keys()
            .copied()
            .filter(|e| !self.seen.started.contains(e) && !self.seen.rejected.contains(e))
            .collect();
        for &e in started {
            let (batch, keys) = &self.seen.entries[&e];
            if let Some(p) = waiting
                .iter()
                .find(|&&f| self.seen.entries[&f].0 == *batch && !self.seen.approved.contains(&f))
            {
                self.fail(&format!("e{e} started while e{p} of its batch is pending"));
            }
            for k in keys {
                if let Some(f) = waiting
                    .iter()
                    .find(|&&f| f < e && self.seen.entries[&f].1.contains(k))
                {
                    self.fail(&format!("e{e} overtook e{f} on key {k}"));
                }
            }
        }
        let mut per_key: BTreeMap<&str, usize> = BTreeMap::new();
        for e in &self.seen.running {
            for k in &self.seen.entries[e].1 {
                *per_key.entry(k).or_default() += 1;
            }
        }
        for (k, n) in per_key {
            let limit = self.world.limit(k);
            if n > limit {
                self.fail(&format!("{n} executions hold key {k}, limit {limit}"));
            }
            if n == limit {
                self.stats.full_keys += 1;
            }
        }
    }

    /// One step: one input (sometimes two or three), then a round.
    fn step(&mut self, batches: &mut Vec<Vec<CallSpec>>, submitted: &mut usize) {
        let inputs = if self.rng.chance(75) {
            1
        } else {
            self.rng.range(0, 3)
        };
        for _ in 0..inputs {
            let pending = self.model.with(St::Pending);
            let running = self.model.with(St::Running);
            if !batches.is_empty() && (self.rng.chance(15) || pending.len() + running.len() == 0) {
                let specs = batches.remove(0);
                self.submit(*submitted, &specs);
                *submitted += 1;
                continue;
            }
            let roll = self.rng.below(100);
            if !pending.is_empty() && (roll < 60 || running.is_empty()) {
                let e = pending[self.rng.below(pending.len())];
                if self.rng.chance(12) {
                    self.reject(e);
                } else {
                    self.approve(e);
                }
            } else if !running.is_empty() {
                let e = running[self.rng.below(running.len())];
                let ok = self.rng.chance(75);
                self.end(e, ok);
            }
        }
        self.round();
    }

    /// Approves and ends everything, one round at a time, until every batch retired.
    fn drain(&mut self, batches: &mut Vec<Vec<CallSpec>>, submitted: &mut usize) {
        for specs in std::mem::take(batches) {
            self.submit(*submitted, &specs);
            *submitted += 1;
        }
        for _ in 0..200 {
            for e in self.model.with(St::Pending) {
                self.approve(e);
            }
            self.round();
            let running = self.model.with(St::Running);
            if running.is_empty() && self.model.entries.iter().all(|e| e.st == St::Done) {
                break;
            }
            if let Some(&e) = running.first() {
                self.end(e, true);
            }
            self.round();
        }
        if let Some(e) = self.model.entries.iter().find(|e| e.st != St::Done) {
            self.fail(&format!("drained, yet e{} is {:?} (deadlock)", e.id, e.st));
        }
        if self.s.live_entries() != 0 {
            self.fail(&format!(
                "{} live entries after the drain",
                self.s.live_entries()
            ));
        }
    }
}

fn run(seed: u64) -> Stats {
    let mut sim = Sim::new(seed);
    let mut batches: Vec<Vec<CallSpec>> = (0..sim.rng.range(1, 3))
        .map(|_| sim.random_batch())
        .collect();
    let mut submitted = 0;
    let steps = sim.rng.range(10, 80);
    for _ in 0..steps {
        sim.step(&mut batches, &mut submitted);
    }
    sim.drain(&mut batches, &mut submitted);
    sim.stats
}

#[test]
fn key_sets_agree_with_the_reference_model() {
    let seeds = seeds();
    let mut total = Stats::default();
    for &seed in &seeds {
        let s = run(seed);
        total.rounds += s.rounds;
        total.starts += s.starts;
        total.set_entries += s.set_entries;
        total.one_key_from_two_members += s.one_key_from_two_members;
        total.set_waits += s.set_waits;
        total.full_keys += s.full_keys;
    }
    eprintln!(
        "key sets: {} seeds, {} rounds, {} starts, {} entries with a set, {} of them with two \
         members making one key, {} waiting set entries seen, {} full keys seen",
        seeds.len(),
        total.rounds,
        total.starts,
        total.set_entries,
        total.one_key_from_two_members,
        total.set_waits,
        total.full_keys
    );
    assert!(seeds.len() < 50 || total.one_key_from_two_members > 0);
    assert!(seeds.len() < 50 || total.set_waits > 0);
}

// ---------------------------------------------------------------------------------------------
// Hand-written cases

fn policy(text: &str) -> Policy {
    config::resolve(&[Layer::new("t.toml", text)]).expect("valid config")
}

/// A scheduler and its rounds, entries named by number.
struct T {
    s: Scheduler,
    out: Releases,
    now: u64,
}

impl T {
    fn new(text: &str) -> Self {
        Self {
            s: Scheduler::new(policy(text)),
            out: Releases::default(),
            now: 0,
        }
    }

    /// Submits `(id, tool, arguments)`; returns its batch and entries.
    fn submit(&mut self, calls: &[(&str, &str, Option<&str>)]) -> (BatchId, Vec<EntryId>) {
        let calls: Vec<Call<'_>> = calls
            .iter()
            .map(|&(id, tool, arguments)| Call {
                id,
                tool,
                operations: None,
                arguments,
            })
            .collect();
        let b = self.s.submit_batch(&calls).expect("submit");
        let entries = (0..u64::from(b.count))
            .map(|i| EntryId(b.first.0 + i))
            .collect();
        (b.batch, entries)
    }

    fn round(&mut self) -> Vec<EntryId> {
        self.now += 1;
        self.s.next_releases(Some(self.now), &mut self.out);
        self.out.start.clone()
    }

    fn approve(&mut self, entries: &[EntryId]) -> Vec<EntryId> {
        for &e in entries {
            self.s.on_event(Input::Approve(e)).expect("approve");
        }
        self.round()
    }

    fn ok(&mut self, e: EntryId) -> Vec<EntryId> {
        self.s.on_ended(e, End::Ok).expect("end");
        self.round()
    }

    fn wait(&self, batch: BatchId, i: usize) -> Option<Wait> {
        self.s.inspect(batch).expect("live")[i].wait.clone()
    }
}

/// `a` takes x then y, `b` takes y then x: in entry order, one at a time, never a deadlock,
/// whatever order the approvals come in and across batches.
#[test]
fn crossing_sets_never_deadlock() {
    let text = r#"
[conversation.tools.a]
concurrency = [{ key = "x", limit = 1 }, { key = "y", limit = 1 }]
[conversation.tools.b]
concurrency = [{ key = "y", limit = 1 }, { key = "x", limit = 1 }]
"#;
    let mut t = T::new(text);
    let (_, e) = t.submit(&[("a1", "a", None), ("b1", "b", None)]);
    let (_, f) = t.submit(&[("b2", "b", None), ("a2", "a", None)]);
    assert!(
        t.approve(&[f[1], f[0]]).is_empty(),
        "b2, a2 are behind a1, b1"
    );
    assert!(t.approve(&[e[1]]).is_empty(), "the barrier holds b1");
    assert_eq!(t.approve(&[e[0]]), [e[0]]);
    assert_eq!(t.ok(e[0]), [e[1]]);
    assert_eq!(t.ok(e[1]), [f[0]]);
    assert_eq!(t.ok(f[0]), [f[1]]);
    assert!(t.ok(f[1]).is_empty());
    assert_eq!(t.s.live_entries(), 0);

    // With room for two on each key, both cross at once.
    let mut t = T::new(&text.replace("limit = 1", "limit = 2"));
    let (_, e) = t.submit(&[("a1", "a", None), ("b1", "b", None), ("a2", "a", None)]);
    assert_eq!(t.approve(&[e[2], e[1], e[0]]), [e[0], e[1]]);
    assert_eq!(t.ok(e[1]), [e[2]]);
}

/// A call whose set waits on one key holds no slot of its other key: calls ahead of it on that
/// key run, calls behind it wait their turn in line (not for a slot it took), and when it goes
/// away without running, the next call on that key starts at once.
#[test]
fn a_set_waiting_on_one_key_holds_nothing_of_the_other() {
    let text = r#"
[conversation.tools.s]
concurrency = [{ key = "x", limit = 1 }, { key = "y", limit = 1 }]
[conversation.tools.px]
concurrency = { key = "x", limit = 1 }
[conversation.tools.py]
concurrency = { key = "y", limit = 1 }
"#;
    let mut t = T::new(text);
    let (_, hold) = t.submit(&[("hold", "px", None)]);
    assert_eq!(t.approve(&hold), hold);
    // y is free, x is not: the set waits on x.
    let (sb, s) = t.submit(&[("s", "s", None)]);
    assert!(t.approve(&s).is_empty());
    assert!(
        matches!(t.wait(sb, 0), Some(Wait::KeyFull { ref key, .. }) if key == "x"),
        "{:?}",
        t.wait(sb, 0)
    );
    // A later call on y waits behind it in line.
    let (yb, y) = t.submit(&[("y1", "py", None)]);
    assert!(t.approve(&y).is_empty());
    assert!(
        matches!(t.wait(yb, 0), Some(Wait::Behind { ref label, ref key }) if label == "s" && key == "y"),
        "{:?}",
        t.wait(yb, 0)
    );
    // The set goes away without running: y was never held, y1 starts at once, x still held.
    t.s.on_event(Input::Cancel(sb)).expect("cancel");
    assert_eq!(t.round(), y);
    assert!(
        t.out
            .settled
            .iter()
            .any(|st| st.entry == s[0] && st.reason == Reason::Cancelled)
    );
    // And a later set on x and y waits for both, then takes both at once.
    let (_, s2) = t.submit(&[("s2", "s", None)]);
    assert!(t.approve(&s2).is_empty());
    assert!(t.ok(hold[0]).is_empty(), "x is free, y is not");
    assert_eq!(t.ok(y[0]), s2);
    let (_, y2) = t.submit(&[("y2", "py", None)]);
    assert!(t.approve(&y2).is_empty(), "s2 holds y");
    assert_eq!(t.ok(s2[0]), y2);
}

/// Two members that make one key (`fs:{src}`, `fs:{dst}` with src == dst) count once: with
/// limit 1 the call starts (counted twice it never could), and holds that one key.
#[test]
fn two_members_making_one_key_count_once() {
    let text = r#"
[conversation.tools.mv]
concurrency = [{ key = "fs:{src}", limit = 1 }, { key = "fs:{dst}", limit = 1 }]
[conversation.tools.w]
concurrency = { key = "fs:{path}", limit = 1 }
"#;
    let mut t = T::new(text);
    let same = Some(r#"{"src":"a","dst":"a"}"#);
    let (b, e) = t.submit(&[
        ("m1", "mv", same),
        ("m2", "mv", Some(r#"{"src":"b","dst":"c"}"#)),
        ("w1", "w", Some(r#"{"path":"a"}"#)),
        ("m3", "mv", same),
        ("w2", "w", Some(r#"{"path":"c"}"#)),
    ]);
    assert_eq!(t.s.inspect(b).unwrap()[0].keys, ["fs:a"]);
    assert_eq!(t.s.inspect(b).unwrap()[1].keys, ["fs:b", "fs:c"]);
    assert_eq!(t.approve(&e), [e[0], e[1]]);
    assert_eq!(t.ok(e[0]), [e[2]], "w1 next on fs:a; m3 behind it");
    assert_eq!(t.ok(e[1]), [e[4]]);
    assert_eq!(t.ok(e[2]), [e[3]]);
    assert!(t.ok(e[3]).is_empty());
    assert!(t.ok(e[4]).is_empty());
    assert_eq!(t.s.live_entries(), 0);
}
