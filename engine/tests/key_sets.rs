//! Key sets (`concurrency = [{ key = "fs:{src}" }, { key = "fs:{dst}" }]`) against an oracle
//! that shares nothing with the engine but the public API: a seeded property test whose model
//! names each entry's keys itself (from the tool's members and the call's arguments, in written
//! order, each name once) and recomputes from scratch after every round which entries must have
//! started (the lowest-numbered approved entry of an open batch whose every key has room, is
//! not paused, and has no earlier waiting entry, again and again). The engine's starts must
//! equal the model's, and from the outputs alone: per key, running <= limit; nothing starts
//! twice (between two runs of one entry) or before its batch's barrier; no entry starts while an
//! earlier entry with one of its keys still waits (no overtaking on any key of a set). Every run
//! ends drained (liveness: no deadlock, every batch retires).
//!
//! Beside approvals, rejections and ends, the host's inputs include, with the model's rule for
//! each (from the module docs and the README):
//!
//! - `cancel(batch)`: its pending and approved entries are settled `cancelled` (the round's
//!   `settled`), its running ones aborted (the round's `abort`); those keep their slots until
//!   they end. A second cancel is `batch-cancelled`, a retired batch's `unknown-batch`.
//! - `rate-limited(until)` on the virtual clock (it moves by small random steps, sometimes
//!   straight to the last `wake_at`): every key of the entry's set is paused until `until` (no
//!   entry with one of those keys starts before it; what runs runs on), and the entry goes back
//!   to its written-order place on every key, up to the smallest retry cap of its keys (default
//!   3), past which it is settled `rate-limited`. An unkeyed entry waits for `until` alone. An
//!   aborted entry is not run again (settled `cancelled`); its pause still holds. Each round's
//!   `wake_at` must be no later than the earliest time at which an entry waiting only on time
//!   could start.
//! - a restart (`unfinished`, then `resume` with `run-again`) at random points, between rounds
//!   or between inputs: what started and has no response is pending again (interrupted in a
//!   cancelled batch), approved entries are pending again, responses stay, pauses and retry
//!   counts are forgotten; nothing is unrestored and every call keeps its keys (`inspect`).
//!
//! Every round also compares the settled entries (with their reasons), the aborts, the retired
//! batches and every entry's state. Then a few hand-written cases: crossing sets, a waiting set
//! that holds nothing, two members that make one key.
//!
//! A failure prints its seed, config and log; `TURNSTILE_SEED=N` replays one seed,
//! `TURNSTILE_SEEDS=N` sets how many run (default 5000).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use turnstile_engine::config::{self, Layer, Policy};
use turnstile_engine::schedule::{
    AbortCause, BatchId, Call, End, EntryId, HostSettle, Input, InputErrorCode, Outcome, Reason,
    Releases, Scheduler, Started, State, Wait,
};

/// The retry cap of a key whose config sets none (README: `retries`, default 3), and of an
/// unkeyed tool.
const RETRIES_DEFAULT: u32 = 3;

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

/// `TURNSTILE_SEED=N` alone, else `0..TURNSTILE_SEEDS` (default 5000; fewer in wasm, which has
/// no environment and runs slower).
fn seeds() -> Vec<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    if let Some(seed) = var("TURNSTILE_SEED") {
        return vec![seed];
    }
    let default = if cfg!(target_arch = "wasm32") {
        100
    } else {
        5000
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
    /// The fixed keys' retry caps; `None` leaves `retries` unset (the default).
    retries: Vec<Option<u32>>,
    /// The limit of every key the templates make.
    template_limit: u32,
    /// Their retry cap (one for both templates: they can make one name, so must agree).
    template_retries: Option<u32>,
    /// The fixed key that is `shared` (permits from a store), if any: a set holds it at most
    /// once, so the config allows it in sets.
    shared: Option<usize>,
    tools: Vec<Tool>,
}

impl World {
    fn random(rng: &mut Rng) -> Self {
        let keys = rng.range(2, 4);
        let limits: Vec<u32> = (0..keys).map(|_| rng.range(1, 3) as u32).collect();
        let retries_of = |rng: &mut Rng| rng.chance(50).then(|| rng.range(0, 2) as u32);
        let retries: Vec<Option<u32>> = (0..keys).map(|_| retries_of(rng)).collect();
        let template_limit = rng.range(1, 3) as u32;
        let template_retries = retries_of(rng);
        let shared = rng.chance(40).then(|| rng.below(keys));
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
            retries,
            template_limit,
            template_retries,
            shared,
            tools,
        }
    }

    /// The shared key's name, if any.
    fn shared_key(&self) -> Option<String> {
        self.shared.map(|i| format!("k{i}"))
    }

    fn member_toml(&self, m: Member) -> String {
        let (key, limit, retries) = match m {
            Member::Fixed(i) => (format!("k{i}"), self.limits[i], self.retries[i]),
            Member::Template(f) => (
                format!("t:{{{f}}}"),
                self.template_limit,
                self.template_retries,
            ),
        };
        let retries = retries.map_or(String::new(), |r| format!(", retries = {r}"));
        let shared = if matches!(m, Member::Fixed(i) if self.shared == Some(i)) {
            ", shared = true"
        } else {
            ""
        };
        format!("{{ key = \"{key}\", limit = {limit}{retries}{shared} }}")
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

    /// The model's own naming of a call's keys: each member's name, in written order, each
    /// name once, the shared key first (README: a call's keys list it first).
    fn keys(&self, tool: usize, a: &str, b: &str) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for m in &self.tools[tool].members {
            let name = match m {
                Member::Fixed(i) => format!("k{i}"),
                Member::Template("a") => format!("t:{a}"),
                Member::Template(_) => format!("t:{b}"),
            };
            if !names.contains(&name) {
                names.push(name);
            }
        }
        if let Some(at) = names
            .iter()
            .position(|n| Some(n) == self.shared_key().as_ref())
        {
            let shared = names.remove(at);
            names.insert(0, shared);
        }
        names
    }

    fn limit(&self, key: &str) -> usize {
        if key.starts_with("t:") {
            self.template_limit as usize
        } else {
            self.limits[key[1..].parse::<usize>().unwrap()] as usize
        }
    }

    /// The retry cap of an entry with these keys: the smallest of its keys' (README, key
    /// sets), the default for an unkeyed one.
    fn retry_cap(&self, keys: &[String]) -> u32 {
        keys.iter()
            .map(|key| {
                let r = if key.starts_with("t:") {
                    self.template_retries
                } else {
                    self.retries[key[1..].parse::<usize>().unwrap()]
                };
                r.unwrap_or(RETRIES_DEFAULT)
            })
            .min()
            .unwrap_or(RETRIES_DEFAULT)
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
    /// A call with the shared key: its permit was asked for (every slot of its keys taken).
    Acquiring,
    /// Its permit came: it starts once every earlier entry of the shared key has, and no key
    /// of its is paused.
    Granted,
    Running,
    /// Running in a cancelled batch: told to abort, it holds its slots until it ends.
    Aborted,
    /// Its execution ended (`true`: ok).
    Ended(bool),
    /// Answered without running (again).
    Settled(Reason),
}

impl St {
    fn waits(self) -> bool {
        matches!(self, Self::Pending | Self::Approved)
    }

    /// Asking for a permit, holding one, or started and not ended: holds a slot of each of its
    /// keys.
    fn holds(self) -> bool {
        matches!(
            self,
            Self::Running | Self::Aborted | Self::Acquiring | Self::Granted
        )
    }

    /// Started and not ended: its execution runs.
    fn runs(self) -> bool {
        matches!(self, Self::Running | Self::Aborted)
    }

    /// Holds a permit (or its request) without having started.
    fn holds_permit_unstarted(self) -> bool {
        matches!(self, Self::Acquiring | Self::Granted)
    }

    fn answered(self) -> bool {
        matches!(self, Self::Ended(_) | Self::Settled(_))
    }
}

struct Entry {
    id: u64,
    batch: usize,
    keys: Vec<String>,
    st: St,
    /// How many times it hit a rate limit and went back in line since the last restart.
    retries: u32,
    /// An unkeyed entry back in line after a rate limit starts at this time, not before.
    not_before: u64,
}

#[derive(Default)]
struct Model {
    /// In entry order (numbers only grow).
    entries: Vec<Entry>,
    cancelled: BTreeSet<usize>,
    retired: BTreeSet<usize>,
    /// Keys paused by rate limits, until when (the host's clock).
    paused: BTreeMap<String, u64>,
    /// Keys the host paused (`pause`), until when: `lift-pause` lifts these, not what rate
    /// limits asked for.
    host_paused: BTreeMap<String, u64>,
    /// What the next round reports: entries the scheduler settled since the last round, and
    /// executions it aborted (that have not ended since).
    to_settle: Vec<(u64, Reason)>,
    to_abort: BTreeSet<u64>,
    /// The shared key's name, if the world has one.
    shared: Option<String>,
    /// Permits (or requests) the next round gives back to the store (README: an entry that
    /// held one ended, hit a rate limit, was cancelled while waiting for it, or yielded).
    to_release: BTreeSet<u64>,
}

impl Model {
    /// Whether entry `i` takes the shared key.
    fn has_shared(&self, i: usize) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|s| self.entries[i].keys.contains(s))
    }

    /// Whether granted entry `i` may start: no earlier entry of the shared key is waiting,
    /// asking or granted (written order on the shared key), and no key of its is paused.
    fn granted_may_start(&self, i: usize, now: u64) -> bool {
        let Some(s) = self
            .shared
            .as_ref()
            .filter(|_| self.entries[i].st == St::Granted)
        else {
            return false;
        };
        !self.entries[..i]
            .iter()
            .any(|f| f.keys.contains(s) && (f.st.waits() || f.st.holds_permit_unstarted()))
            && self.time_of(i) <= now
    }
    fn open(&self, batch: usize) -> bool {
        !self
            .entries
            .iter()
            .any(|e| e.batch == batch && e.st == St::Pending)
    }

    fn running(&self, key: &str) -> usize {
        self.entries
            .iter()
            .filter(|e| e.st.holds() && e.keys.iter().any(|k| k == key))
            .count()
    }

    /// Whether an entry before `i` with `key` still waits (pending or approved).
    fn earlier_waits(&self, i: usize, key: &str) -> bool {
        self.entries[..i]
            .iter()
            .any(|f| f.st.waits() && f.keys.iter().any(|k| k == key))
    }

    fn paused_until(&self, key: &str) -> u64 {
        let by_host = self.host_paused.get(key).copied().unwrap_or(0);
        self.paused.get(key).copied().unwrap_or(0).max(by_host)
    }

    /// Whether entry `i` is approved in an open batch and, on every key, has room and no
    /// earlier waiting entry: it waits for nothing but time, if for anything.
    fn ready_but_for_time(&self, i: usize, world: &World) -> bool {
        let e = &self.entries[i];
        e.st == St::Approved
            && self.open(e.batch)
            && e.keys
                .iter()
                .all(|k| self.running(k) < world.limit(k) && !self.earlier_waits(i, k))
    }

    /// When entry `i` may start as far as time goes: after its own wait (unkeyed) and every
    /// key's pause.
    fn time_of(&self, i: usize) -> u64 {
        let e = &self.entries[i];
        e.keys
            .iter()
            .map(|k| self.paused_until(k))
            .fold(e.not_before, u64::max)
    }

    /// What must start now, and which permits must be asked for: repeatedly the
    /// lowest-numbered approved entry of an open batch whose every key has room, no pause past
    /// `now` and no earlier waiting entry (it starts, or with the shared key asks for its
    /// permit, taking every slot); and every granted entry that may start.
    fn releases(&mut self, world: &World, now: u64) -> (Vec<u64>, Vec<u64>) {
        let (mut started, mut requested) = (Vec::new(), Vec::new());
        loop {
            let found = (0..self.entries.len())
                .find(|&i| self.ready_but_for_time(i, world) && self.time_of(i) <= now);
            if let Some(i) = found {
                if self.has_shared(i) {
                    self.entries[i].st = St::Acquiring;
                    requested.push(self.entries[i].id);
                } else {
                    self.entries[i].st = St::Running;
                    started.push(self.entries[i].id);
                }
                continue;
            }
            let granted = (0..self.entries.len()).find(|&i| self.granted_may_start(i, now));
            let Some(i) = granted else { break };
            self.entries[i].st = St::Running;
            started.push(self.entries[i].id);
        }
        started.sort_unstable();
        requested.sort_unstable();
        (started, requested)
    }

    /// The earliest time at which an entry that waits on time alone could start.
    fn waits_on_time(&self, world: &World, now: u64) -> Option<u64> {
        (0..self.entries.len())
            .filter(|&i| self.ready_but_for_time(i, world) || self.granted_may_start(i, u64::MAX))
            .map(|i| self.time_of(i))
            .filter(|&t| t > now)
            .min()
    }

    fn entry(&mut self, id: u64) -> &mut Entry {
        self.entries.iter_mut().find(|e| e.id == id).unwrap()
    }

    fn set(&mut self, id: u64, st: St) {
        self.entry(id).st = st;
    }

    fn with(&self, f: impl Fn(St) -> bool) -> Vec<u64> {
        self.entries
            .iter()
            .filter(|e| f(e.st))
            .map(|e| e.id)
            .collect()
    }

    /// An execution ended (ok or failed): it needs no abort any more, and gives its permit
    /// back.
    fn end(&mut self, id: u64, ok: bool) {
        self.give_back(id);
        self.set(id, St::Ended(ok));
        self.to_abort.remove(&id);
    }

    /// Entry `id` gives its permit (or its request) back, if its keys hold the shared one.
    fn give_back(&mut self, id: u64) {
        let i = self.entries.iter().position(|e| e.id == id).unwrap();
        if self.has_shared(i) {
            self.to_release.insert(id);
        }
    }

    /// The store granted entry `id`'s permit.
    fn grant(&mut self, id: u64) {
        self.set(id, St::Granted);
    }

    /// The store refused entry `id`'s permit: it fails without running, and frees its slots
    /// (nothing goes back: it holds nothing at the store; the host knows, so no round reports
    /// it).
    fn deny(&mut self, id: u64) {
        self.set(id, St::Settled(Reason::Failed));
    }

    /// A cancellation: pending and approved entries settled, running ones aborted.
    fn cancel(&mut self, batch: usize) {
        self.cancelled.insert(batch);
        for e in self.entries.iter_mut().filter(|e| e.batch == batch) {
            match e.st {
                St::Pending | St::Approved => {
                    e.st = St::Settled(Reason::Cancelled);
                    self.to_settle.push((e.id, Reason::Cancelled));
                }
                St::Running => {
                    e.st = St::Aborted;
                    self.to_abort.insert(e.id);
                }
                St::Acquiring | St::Granted => {
                    e.st = St::Settled(Reason::Cancelled);
                    self.to_settle.push((e.id, Reason::Cancelled));
                    self.to_release.insert(e.id);
                }
                _ => {}
            }
        }
    }

    /// An execution hit a rate limit that asks to wait until `until` (within the maximum
    /// wait): every key of its set pauses until then; it goes back in line (an unkeyed one
    /// waits for `until` alone), or is settled: `cancelled` when aborted, `rate-limited` past
    /// its cap. Says what became of it.
    fn rate_limited(&mut self, id: u64, until: u64, cap: u32) -> &'static str {
        self.to_abort.remove(&id);
        self.give_back(id);
        let keys = self.entry(id).keys.clone();
        for k in keys {
            let p = self.paused.entry(k).or_default();
            *p = (*p).max(until);
        }
        let e = self.entry(id);
        let settled = if e.st == St::Aborted {
            Reason::Cancelled
        } else if e.retries >= cap {
            Reason::RateLimited {
                retries: e.retries,
                asked_s: None,
            }
        } else {
            e.st = St::Approved;
            e.retries += 1;
            if e.keys.is_empty() {
                e.not_before = until;
            }
            // Back in line on the shared key: every later entry of it that asked for or holds
            // a permit without having started gives it back and asks again after it (so no
            // process holds permits for entries waiting behind one with no request).
            if let Some(s) = self
                .shared
                .clone()
                .filter(|s| self.entry(id).keys.contains(s))
            {
                for f in self.entries.iter_mut() {
                    if f.id > id && f.keys.contains(&s) && f.st.holds_permit_unstarted() {
                        f.st = St::Approved;
                        self.to_release.insert(f.id);
                    }
                }
            }
            return "back in line";
        };
        e.st = St::Settled(settled);
        self.to_settle.push((id, settled));
        "given up"
    }

    /// A restart with `run-again`: what started and has no response is pending again
    /// (interrupted in a cancelled batch), approved entries too; responses stay; pauses, retry
    /// counts and pending aborts are forgotten (the executions went with the process). What
    /// was settled and not yet reported is answered again: undone, then restarted like the
    /// rest (a cancelled batch's is reported cancelled or interrupted). Returns the entries that had
    /// started and will run again once approved.
    fn restart(&mut self) -> Vec<u64> {
        self.paused.clear();
        self.host_paused.clear();
        self.to_abort.clear();
        // The permits went with the process: a new one asks for its own.
        self.to_release.clear();
        // A settlement no round reported yet is undone: the entry is what it was before it
        // (an execution given up on, started; one settled before it ran, approved), so the
        // restart answers it again rather than never.
        for (id, reason) in std::mem::take(&mut self.to_settle) {
            let before = match reason {
                Reason::Interrupted | Reason::RateLimited { .. } | Reason::TimedOut { .. } => {
                    St::Running
                }
                _ => St::Approved,
            };
            if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
                e.st = before;
            }
        }
        let mut rerun = Vec::new();
        for e in &mut self.entries {
            e.retries = 0;
            e.not_before = 0;
            let cancelled = self.cancelled.contains(&e.batch);
            match e.st {
                St::Running | St::Aborted if cancelled => {
                    e.st = St::Settled(Reason::Interrupted);
                    self.to_settle.push((e.id, Reason::Interrupted));
                }
                St::Running | St::Aborted => {
                    e.st = St::Pending;
                    rerun.push(e.id);
                }
                St::Approved | St::Acquiring | St::Granted if cancelled => {
                    e.st = St::Settled(Reason::Cancelled);
                    self.to_settle.push((e.id, Reason::Cancelled));
                }
                St::Approved | St::Acquiring | St::Granted => e.st = St::Pending,
                _ => {}
            }
        }
        rerun
    }

    /// The batches that retire in this round: every entry answered.
    fn retire(&mut self) -> Vec<usize> {
        let batches: BTreeSet<usize> = self.entries.iter().map(|e| e.batch).collect();
        let retiring: Vec<usize> = batches
            .into_iter()
            .filter(|&b| {
                !self.retired.contains(&b)
                    && self
                        .entries
                        .iter()
                        .filter(|e| e.batch == b)
                        .all(|e| e.st.answered())
            })
            .collect();
        self.retired.extend(&retiring);
        retiring
    }
}

// ---------------------------------------------------------------------------------------------
// Engine and model side by side

/// What the engine's outputs (and the host's own inputs) say, kept apart from the model:
/// which entries were approved, answered without running, ended, are started and hold slots.
#[derive(Default)]
struct Seen {
    approved: BTreeSet<u64>,
    /// Rejected by the host, or settled by the scheduler (its output).
    settled: BTreeSet<u64>,
    ended: BTreeSet<u64>,
    /// Started and not gone back in line since.
    started: BTreeSet<u64>,
    /// A permit asked for (listed in `acquire`) and not given back since (`release`).
    requested: BTreeSet<u64>,
    /// A permit the host reported granted, not given back since.
    granted: BTreeSet<u64>,
    /// Holding slots: started, or asking for a permit or holding one.
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
    cancels: u64,
    aborts: u64,
    cancelled: u64,
    rate_limits: u64,
    set_rate_limits: u64,
    back_in_line: u64,
    given_up: u64,
    time_waits: u64,
    restarts: u64,
    reruns: u64,
    /// Permits asked for by set entries with the shared key, granted, denied, and given back
    /// by entries that had no response (yields behind a rate limit).
    set_permits: u64,
    grants: u64,
    denials: u64,
    yields: u64,
    host_pauses: u64,
}

impl Stats {
    fn add(&mut self, o: &Self) {
        self.rounds += o.rounds;
        self.starts += o.starts;
        self.set_entries += o.set_entries;
        self.one_key_from_two_members += o.one_key_from_two_members;
        self.set_waits += o.set_waits;
        self.full_keys += o.full_keys;
        self.cancels += o.cancels;
        self.aborts += o.aborts;
        self.cancelled += o.cancelled;
        self.rate_limits += o.rate_limits;
        self.set_rate_limits += o.set_rate_limits;
        self.back_in_line += o.back_in_line;
        self.given_up += o.given_up;
        self.time_waits += o.time_waits;
        self.restarts += o.restarts;
        self.reruns += o.reruns;
        self.set_permits += o.set_permits;
        self.grants += o.grants;
        self.denials += o.denials;
        self.yields += o.yields;
        self.host_pauses += o.host_pauses;
    }
}

struct Sim {
    seed: u64,
    rng: Rng,
    world: World,
    text: String,
    policy: Policy,
    s: Scheduler,
    model: Model,
    seen: Seen,
    out: Releases,
    /// The virtual clock: the `now` of the last round.
    now: u64,
    log: String,
    stats: Stats,
    next_call: usize,
    /// Each submitted batch's number, by the model's batch index.
    batch_ids: Vec<BatchId>,
}

impl Sim {
    fn new(seed: u64) -> Self {
        let mut rng = Rng(seed);
        let world = World::random(&mut rng);
        let text = world.toml();
        let policy = config::resolve(&[Layer::new("t.toml", &text)])
            .unwrap_or_else(|d| panic!("seed {seed}: config refused:\n{text}\n{d:#?}"));
        let model = Model {
            shared: world.shared_key(),
            ..Model::default()
        };
        Self {
            seed,
            rng,
            world,
            text,
            s: Scheduler::new(policy.clone()),
            policy,
            model,
            seen: Seen::default(),
            out: Releases::default(),
            now: 0,
            log: String::new(),
            stats: Stats::default(),
            next_call: 0,
            batch_ids: Vec::new(),
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

    fn submit(&mut self, specs: &[CallSpec]) {
        let batch = self.batch_ids.len();
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
        self.batch_ids.push(b.batch);
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
                    retries: 0,
                    not_before: 0,
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
        self.check_keys(batch);
    }

    /// The engine names the same keys as the model for every entry of a live batch, in
    /// written order, each once.
    fn check_keys(&self, batch: usize) {
        let Some(status) = self.s.inspect(self.batch_ids[batch]) else {
            self.fail(&format!("batch {batch} is not live in the engine"));
        };
        let model: Vec<u64> = self
            .model
            .entries
            .iter()
            .filter(|e| e.batch == batch)
            .map(|e| e.id)
            .collect();
        let engine: Vec<u64> = status.iter().map(|st| st.entry.0).collect();
        if engine != model {
            self.fail(&format!(
                "batch {batch} has entries {engine:?}, the model {model:?}"
            ));
        }
        for st in status {
            let (_, model) = &self.seen.entries[&st.entry.0];
            if &st.keys != model {
                self.fail(&format!(
                    "e{} has keys {:?}, the model names {model:?}",
                    st.entry.0, st.keys
                ));
            }
        }
    }

    /// Gives the engine one input about entry `e`, which it must accept, and logs it.
    fn send(&mut self, what: &str, e: u64, input: Input) {
        writeln!(self.log, "{what} e{e}").unwrap();
        if let Err(r) = self.s.on_event(input) {
            self.fail(&format!("{what} e{e} refused: {r:?}"));
        }
    }

    fn approve(&mut self, e: u64) {
        self.send("approve", e, Input::Approve(EntryId(e)));
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
        self.model.set(e, St::Settled(Reason::Rejected));
        self.seen.settled.insert(e);
    }

    fn end(&mut self, e: u64, ok: bool) {
        writeln!(self.log, "end e{e} {}", if ok { "ok" } else { "failed" }).unwrap();
        let end = if ok { End::Ok } else { End::Failed };
        if let Err(r) = self.s.on_ended(EntryId(e), end) {
            self.fail(&format!("end e{e} refused: {r:?}"));
        }
        self.model.end(e, ok);
        self.seen.running.remove(&e);
        self.seen.ended.insert(e);
    }

    /// The host pauses fixed key `key` until `until` (a pause only extends), or lifts its
    /// pause (`None`): what rate limits asked for still holds.
    fn host_pause(&mut self, key: &str, until: Option<u64>) {
        let input = match until {
            Some(t) => Input::Pause(key, t),
            None => Input::LiftPause(key),
        };
        if let Err(r) = self.s.on_event(input) {
            self.fail(&format!("pause {key} {until:?} refused: {r:?}"));
        }
        writeln!(self.log, "pause {key} until {until:?} (now {})", self.now).unwrap();
        match until {
            Some(t) => {
                let p = self.model.host_paused.entry(key.to_owned()).or_default();
                *p = (*p).max(t);
            }
            None => {
                self.model.host_paused.remove(key);
            }
        }
        self.stats.host_pauses += 1;
    }

    /// The store grants `e`'s permit.
    fn grant(&mut self, e: u64) {
        self.send("grant", e, Input::Granted(EntryId(e)));
        self.seen.granted.insert(e);
        self.model.grant(e);
        self.stats.grants += 1;
    }

    /// The store refuses `e`'s permit (an unreachable store, say).
    fn deny(&mut self, e: u64) {
        self.send("deny", e, Input::Denied(EntryId(e)));
        self.model.deny(e);
        self.stats.denials += 1;
        self.seen.settled.insert(e);
        self.seen.running.remove(&e);
        self.seen.requested.remove(&e);
    }

    /// Ends `e` rate-limited, asking to wait until `until` (under 5 minutes from the clock).
    fn rate_limited(&mut self, e: u64, until: u64) {
        if let Err(r) = self.s.on_ended(EntryId(e), End::RateLimited(until)) {
            self.fail(&format!("rate-limited e{e} refused: {r:?}"));
        }
        let keys = self.seen.entries[&e].1.clone();
        let cap = self.world.retry_cap(&keys);
        let what = self.model.rate_limited(e, until, cap);
        writeln!(
            self.log,
            "end e{e} rate-limited until {until} (now {}): pauses {keys:?}; {what}",
            self.now
        )
        .unwrap();
        self.stats.rate_limits += 1;
        if keys.len() > 1 {
            self.stats.set_rate_limits += 1;
        }
        if what == "back in line" {
            self.stats.back_in_line += 1;
        } else {
            self.stats.given_up += 1;
        }
        // It may start again; if the scheduler gave up, the round's `settled` says so.
        self.seen.running.remove(&e);
        self.seen.started.remove(&e);
        self.seen.requested.remove(&e);
        self.seen.granted.remove(&e);
    }

    fn cancel(&mut self, batch: usize) {
        let id = self.batch_ids[batch];
        let expected = if self.model.retired.contains(&batch) {
            Some(InputErrorCode::UnknownBatch)
        } else if self.model.cancelled.contains(&batch) {
            Some(InputErrorCode::BatchCancelled)
        } else {
            None
        };
        writeln!(self.log, "cancel batch {batch} ({id:?})").unwrap();
        match (self.s.on_event(Input::Cancel(id)), expected) {
            (Ok(()), None) => {
                self.model.cancel(batch);
                self.stats.cancels += 1;
            }
            (Err(r), Some(code)) if r.code == code => {}
            (got, want) => self.fail(&format!(
                "cancel batch {batch}: the engine says {got:?}, the model expects {want:?}"
            )),
        }
    }

    /// The host restarts: `unfinished`, then `resume` with `run-again` under the same policy.
    fn restart(&mut self) {
        let saved = self.s.unfinished();
        let (s, unrestored) =
            match Scheduler::resume(self.policy.clone(), &saved, Started::RunAgain) {
                Ok(resumed) => resumed,
                Err(err) => self.fail(&format!("resume refused: {err:?}")),
            };
        if !unrestored.is_empty() {
            self.fail(&format!("resume left calls out: {unrestored:?}"));
        }
        self.s = s;
        let rerun = self.model.restart();
        writeln!(self.log, "restart (run again: {rerun:?})").unwrap();
        self.stats.restarts += 1;
        self.stats.reruns += rerun.len() as u64;
        // No execution survives; what has no response is decided again (or settled, which
        // the next round reports).
        self.seen.running.clear();
        self.seen.requested.clear();
        self.seen.granted.clear();
        let answered: BTreeSet<u64> = self.seen.ended.union(&self.seen.settled).copied().collect();
        self.seen.approved.retain(|e| answered.contains(e));
        self.seen.started.retain(|e| answered.contains(e));
        // Every live batch is back with its numbers, every call with its keys.
        for batch in 0..self.batch_ids.len() {
            if self.model.retired.contains(&batch) {
                if self.s.inspect(self.batch_ids[batch]).is_some() {
                    self.fail(&format!("retired batch {batch} is live after the restart"));
                }
            } else {
                self.check_keys(batch);
            }
        }
    }

    /// A round: the clock moves a small step (sometimes straight to the wake-up the last round
    /// asked for); the engine's starts, settlements, aborts and retirements against the
    /// model's, then the invariants from the outputs.
    fn round(&mut self) {
        self.now += match self.out.wake_at {
            Some(w) if w > self.now && self.rng.chance(30) => w - self.now,
            _ => self.rng.range(0, 40) as u64,
        };
        let now = self.now;
        self.s.next_releases(Some(now), &mut self.out);
        if let Some(r) = &self.out.refused {
            self.fail(&format!("round {now}: clock refused: {r:?}"));
        }
        let mut got: Vec<u64> = self.out.start.iter().map(|e| e.0).collect();
        got.sort_unstable();
        let (want, want_requested) = self.model.releases(&self.world, now);
        let mut requested: Vec<u64> = self.out.acquire.iter().map(|p| p.entry.0).collect();
        requested.sort_unstable();
        let mut released: Vec<u64> = self.out.release.iter().map(|p| p.entry.0).collect();
        released.sort_unstable();
        let want_released: Vec<u64> = std::mem::take(&mut self.model.to_release)
            .into_iter()
            .collect();
        self.agree(now, "asked for permits for", &requested, &want_requested);
        self.agree(now, "gave back the permits of", &released, &want_released);
        if self
            .out
            .acquire
            .iter()
            .any(|p| Some(&p.key) != self.model.shared.as_ref())
        {
            self.fail(&format!(
                "round {now}: a permit asked for on a key not shared: {:?}",
                self.out.acquire
            ));
        }
        // A permit given back by an entry with no response: it goes back in line (a yield).
        self.stats.set_permits += requested
            .iter()
            .filter(|&&e| self.seen.entries[&e].1.len() > 1)
            .count() as u64;
        for &e in &released {
            if !self.seen.ended.contains(&e) && !self.seen.settled.contains(&e) {
                if self.seen.started.contains(&e) || self.seen.requested.contains(&e) {
                    self.stats.yields += u64::from(!self.seen.started.contains(&e));
                }
                self.seen.requested.remove(&e);
                self.seen.granted.remove(&e);
                self.seen.running.remove(&e);
                self.seen.started.remove(&e);
            }
        }
        let mut settled: Vec<(u64, Reason)> = self
            .out
            .settled
            .iter()
            .map(|s| (s.entry.0, s.reason))
            .collect();
        settled.sort_unstable_by_key(|&(e, _)| e);
        let mut want_settled = std::mem::take(&mut self.model.to_settle);
        want_settled.sort_unstable_by_key(|&(e, _)| e);
        let aborts: Vec<u64> = self.out.abort.iter().map(|a| a.entry.0).collect();
        let want_aborts: Vec<u64> = std::mem::take(&mut self.model.to_abort)
            .into_iter()
            .collect();
        let retired: Vec<BatchId> = self.out.retired.clone();
        let want_retired: Vec<BatchId> = self
            .model
            .retire()
            .into_iter()
            .map(|b| self.batch_ids[b])
            .collect();
        writeln!(
            self.log,
            "round {now}: start {got:?} acquire {requested:?} release {released:?} settled \
             {settled:?} abort {aborts:?} retired {retired:?} wake {:?}",
            self.out.wake_at
        )
        .unwrap();
        self.stats.rounds += 1;
        self.stats.starts += got.len() as u64;
        self.stats.aborts += aborts.len() as u64;
        self.stats.cancelled += settled
            .iter()
            .filter(|(_, r)| *r == Reason::Cancelled)
            .count() as u64;
        self.agree(now, "started", &got, &want);
        self.agree(now, "settled", &settled, &want_settled);
        if aborts != want_aborts || self.out.abort.iter().any(|a| a.cause != AbortCause::Cancel) {
            self.fail(&format!(
                "round {now}: the engine aborted {:?}, the model {want_aborts:?}",
                self.out.abort
            ));
        }
        if retired != want_retired {
            self.fail(&format!(
                "round {now}: the engine retired {retired:?}, the model {want_retired:?}"
            ));
        }
        for &(e, _) in &settled {
            self.seen.settled.insert(e);
            self.seen.running.remove(&e);
        }
        self.check(&got, &requested);
        self.check_states();
        // Something that waits on time alone is woken in time.
        if let Some(t) = self.model.waits_on_time(&self.world, now) {
            self.stats.time_waits += 1;
            if self.out.wake_at.is_none_or(|w| w > t) {
                self.fail(&format!(
                    "round {now}: wake_at {:?}, yet an entry may start at {t}",
                    self.out.wake_at
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

    /// One of the round's outputs as the engine and the model have it: they must be equal.
    fn agree<T: PartialEq + std::fmt::Debug>(&self, now: u64, what: &str, got: &T, want: &T) {
        if got != want {
            self.fail(&format!(
                "round {now}: the engine {what} {got:?}, the model {want:?}"
            ));
        }
    }

    /// Every entry's state agrees with the model's; a retired batch's entries are unknown.
    fn check_states(&self) {
        for e in &self.model.entries {
            let state = self.s.state(EntryId(e.id));
            let agrees = if self.model.retired.contains(&e.batch) {
                state.is_none()
            } else {
                match (e.st, state) {
                    (St::Pending, Some(State::Pending))
                    | (St::Approved, Some(State::Approved))
                    | (St::Running, Some(State::Running))
                    | (St::Acquiring, Some(State::Acquiring))
                    | (St::Granted, Some(State::Granted))
                    | (St::Aborted, Some(State::Aborted(AbortCause::Cancel))) => true,
                    (St::Ended(true), Some(State::Ended(Outcome::Ok)))
                    | (St::Ended(false), Some(State::Ended(Outcome::Failed))) => true,
                    (St::Settled(r), Some(State::Settled(s))) => r == s,
                    _ => false,
                }
            };
            if !agrees {
                self.fail(&format!(
                    "e{} is {state:?} in the engine, {:?} in the model",
                    e.id, e.st
                ));
            }
        }
    }

    /// The invariants, from the outputs and inputs alone. A call with the shared key takes its
    /// other keys when it asks for its permit, and the shared key when it starts.
    fn check(&mut self, started: &[u64], requested: &[u64]) {
        let shared = self.model.shared.clone();
        for &e in requested {
            if !self.seen.requested.insert(e) {
                self.fail(&format!("e{e} asked for a permit twice"));
            }
            if !self.seen.approved.contains(&e) {
                self.fail(&format!("e{e} asked for a permit without approval"));
            }
            self.seen.running.insert(e);
        }
        for &e in started {
            if !self.seen.started.insert(e) {
                self.fail(&format!("e{e} started twice"));
            }
            if !self.seen.approved.contains(&e) {
                self.fail(&format!("e{e} started without approval"));
            }
            if self.seen.settled.contains(&e) || self.seen.ended.contains(&e) {
                self.fail(&format!("e{e} started after its response"));
            }
            let with_shared = shared
                .as_ref()
                .is_some_and(|s| self.seen.entries[&e].1.contains(s));
            if with_shared && !self.seen.granted.contains(&e) {
                self.fail(&format!(
                    "e{e} started on the shared key without a granted permit"
                ));
            }
            self.seen.running.insert(e);
        }
        // Waiting: submitted, neither started (since it last went back in line) nor answered;
        // on a key other than the shared one, nor holding it while asking for a permit.
        let waiting: Vec<u64> = self
            .seen
            .entries
            .keys()
            .copied()
            .filter(|e| !self.seen.started.contains(e) && !self.seen.settled.contains(e))
            .collect();
        for &e in started.iter().chain(requested) {
            let (batch, keys) = &self.seen.entries[&e];
            if let Some(p) = waiting
                .iter()
                .find(|&&f| self.seen.entries[&f].0 == *batch && !self.seen.approved.contains(&f))
            {
                self.fail(&format!("e{e} started while e{p} of its batch is pending"));
            }
            let with_shared = shared.as_ref().is_some_and(|s| keys.contains(s));
            for k in keys {
                let on_shared = shared.as_ref() == Some(k);
                // The keys this output took: at a request, every key but the shared one; at
                // a start, the shared one for a call that has it, else every key.
                let takes = if requested.contains(&e) && !started.contains(&e) {
                    !on_shared
                } else {
                    !with_shared || on_shared
                };
                if !takes {
                    continue;
                }
                // Earlier entries still waiting on `k`: on the shared key until they start,
                // on another key until they start or ask for their permit (holding it).
                let earlier = waiting.iter().find(|&&f| {
                    f < e
                        && self.seen.entries[&f].1.contains(k)
                        && (on_shared || !self.seen.requested.contains(&f))
                });
                if let Some(f) = earlier {
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

    /// One step: one input (sometimes none, two or three), sometimes a restart, then a round.
    fn step(&mut self, batches: &mut Vec<Vec<CallSpec>>) {
        let inputs = if self.rng.chance(75) {
            1
        } else {
            self.rng.range(0, 3)
        };
        for _ in 0..inputs {
            let pending = self.model.with(|s| s == St::Pending);
            let running = self.model.with(St::runs);
            // A host pause or lift on a key some tool names (the engine knows no other).
            let mut named: Vec<String> = (0..self.world.limits.len())
                .filter(|&i| {
                    (self.world.tools.iter()).any(|t| t.members.contains(&Member::Fixed(i)))
                })
                .map(|i| format!("k{i}"))
                .collect();
            // Often a key beside the shared one of a call asking for its permit, so that the
            // pause (and its lift) holds a granted call.
            let beside: Vec<String> = (self.model.entries.iter())
                .filter(|e| e.st == St::Acquiring)
                .flat_map(|e| {
                    e.keys
                        .iter()
                        .skip(1)
                        .filter(|k| k.starts_with('k'))
                        .cloned()
                })
                .collect();
            if !beside.is_empty() && self.rng.chance(60) {
                named = beside;
            }
            if !named.is_empty() && self.rng.chance(6) {
                let key = named[self.rng.below(named.len())].clone();
                let until =
                    (!self.rng.chance(40)).then(|| self.now + self.rng.range(1, 200) as u64);
                self.host_pause(&key, until);
                continue;
            }
            let acquiring = self.model.with(|s| s == St::Acquiring);
            if !acquiring.is_empty() && self.rng.chance(30) {
                let e = acquiring[self.rng.below(acquiring.len())];
                if self.rng.chance(5) {
                    self.deny(e);
                } else {
                    self.grant(e);
                }
                continue;
            }
            if !batches.is_empty() && (self.rng.chance(15) || pending.len() + running.len() == 0) {
                let specs = batches.remove(0);
                self.submit(&specs);
                continue;
            }
            if !self.batch_ids.is_empty() && self.rng.chance(5) {
                // Mostly a live batch; now and then any, to see the refusals.
                let live: Vec<usize> = (0..self.batch_ids.len())
                    .filter(|b| {
                        !self.model.retired.contains(b) && !self.model.cancelled.contains(b)
                    })
                    .collect();
                let batch = if live.is_empty() || self.rng.chance(15) {
                    self.rng.below(self.batch_ids.len())
                } else {
                    live[self.rng.below(live.len())]
                };
                self.cancel(batch);
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
                match self.rng.below(100) {
                    0..=59 => self.end(e, true),
                    60..=74 => self.end(e, false),
                    _ => {
                        // Retry-After from now: mostly ahead (under 5 minutes), sometimes 0
                        // or already past.
                        let until = if self.rng.chance(12) {
                            self.now.saturating_sub(self.rng.below(3) as u64)
                        } else {
                            self.now + self.rng.range(1, 250) as u64
                        };
                        self.rate_limited(e, until);
                    }
                }
            }
        }
        if self.rng.chance(5) {
            self.restart();
            if self.rng.chance(10) {
                self.restart();
            }
        }
        self.round();
    }

    /// Approves and ends everything, one round at a time, until every batch retired.
    fn drain(&mut self, batches: &mut Vec<Vec<CallSpec>>) {
        for specs in std::mem::take(batches) {
            self.submit(&specs);
        }
        for _ in 0..400 {
            for e in self.model.with(|s| s == St::Pending) {
                self.approve(e);
            }
            self.round();
            for e in self.model.with(|s| s == St::Acquiring) {
                self.grant(e);
            }
            self.round();
            let running = self.model.with(St::runs);
            if running.is_empty()
                && self.model.entries.iter().all(|e| e.st.answered())
                && self.model.retired.len() == self.batch_ids.len()
            {
                break;
            }
            if let Some(&e) = running.first() {
                self.end(e, true);
            }
            self.round();
        }
        if let Some(e) = self.model.entries.iter().find(|e| !e.st.answered()) {
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
    let steps = sim.rng.range(10, 80);
    for _ in 0..steps {
        sim.step(&mut batches);
    }
    sim.drain(&mut batches);
    sim.stats
}

#[test]
fn key_sets_agree_with_the_reference_model() {
    let seeds = seeds();
    let mut total = Stats::default();
    for &seed in &seeds {
        total.add(&run(seed));
    }
    let t = &total;
    eprintln!(
        "key sets: {} seeds, {} rounds, {} starts, {} entries with a set, {} of them with two \
         members making one key, {} waiting set entries seen, {} full keys seen; {} cancels \
         ({} aborts, {} settled cancelled); {} rate limits ({} on a set; {} back in line, {} \
         given up); {} rounds with an entry waiting on time alone; {} restarts ({} entries to \
         run again); {} permits asked for by sets with the shared key, {} grants, {} denials, \
         {} yields; {} host pauses and lifts",
        seeds.len(),
        t.rounds,
        t.starts,
        t.set_entries,
        t.one_key_from_two_members,
        t.set_waits,
        t.full_keys,
        t.cancels,
        t.aborts,
        t.cancelled,
        t.rate_limits,
        t.set_rate_limits,
        t.back_in_line,
        t.given_up,
        t.time_waits,
        t.restarts,
        t.reruns,
        t.set_permits,
        t.grants,
        t.denials,
        t.yields,
        t.host_pauses
    );
    if seeds.len() >= 50 {
        for (what, n) in [
            ("two members making one key", t.one_key_from_two_members),
            ("waiting set entries", t.set_waits),
            ("aborts", t.aborts),
            ("cancelled settlements", t.cancelled),
            ("rate limits on a set", t.set_rate_limits),
            ("entries back in line", t.back_in_line),
            ("give-ups", t.given_up),
            ("waits on time", t.time_waits),
            ("restarts", t.restarts),
            ("re-runs", t.reruns),
            (
                "permits asked for by a set with the shared key",
                t.set_permits,
            ),
            ("denials", t.denials),
            ("yields", t.yields),
        ] {
            assert!(n > 0, "no {what} in {} seeds", seeds.len());
        }
    }
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

// ---------------------------------------------------------------------------------------------
// Where the engine once disagreed with the documented rules, found by the model above.

/// A scheduler settlement made by an input (here a rate limit past the cap of a set's
/// strictest key) and not yet reported by a round when the host saves `unfinished()` is saved as
/// the state before it (an execution given up on, as started), so the resumed scheduler answers
/// it again rather than never: the engine once kept `Settled(RateLimited)` without reporting
/// it and retired the batch, so the host never got the entry's answer. (`stopped` under
/// `on_error = "stop"` likewise, saved as pending.)
#[test]
fn a_settlement_not_yet_reported_survives_a_restart() {
    let text = r#"
[conversation.tools.s]
concurrency = [{ key = "x", limit = 1, retries = 0 }, { key = "y", limit = 1 }]
"#;
    let mut t = T::new(text);
    let (_, e) = t.submit(&[("s1", "s", None)]);
    assert_eq!(t.approve(&e), e);
    // Cap 0 (the smaller of 0 and 3): settled rate-limited at once; no round yet.
    t.s.on_ended(e[0], End::RateLimited(t.now + 10))
        .expect("end");
    let saved = t.s.unfinished();
    let (s, unrestored) =
        Scheduler::resume(policy(text), &saved, Started::RunAgain).expect("resume");
    assert!(unrestored.is_empty());
    t.s = s;
    // Run again: it is pending, for the host to decide again; its batch stays live.
    assert!(t.round().is_empty());
    assert!(t.out.settled.is_empty() && t.out.retired.is_empty());
    assert_eq!(t.s.state(e[0]), Some(State::Pending));
    // And with `interrupt`, it is answered (interrupted) in the first round.
    let (s, _) = Scheduler::resume(policy(text), &saved, Started::Interrupt).expect("resume");
    t.s = s;
    t.round();
    let settled: Vec<(EntryId, Reason)> =
        t.out.settled.iter().map(|s| (s.entry, s.reason)).collect();
    assert_eq!(settled, [(e[0], Reason::Interrupted)]);
}

/// A cancellation settles the batch's approved entries as cancelled; only what runs is
/// aborted. An unkeyed entry whose barrier fell in an input (the last approval) is released by
/// the round, not inside that input, so a cancel before the round settles it (the engine once
/// told the host to abort it and then, in `actions()` order, to start it).
#[test]
fn a_cancel_before_the_round_starts_nothing() {
    let mut t = T::new("");
    let (b, e) = t.submit(&[("u1", "u", None)]);
    t.s.on_event(Input::Approve(e[0])).expect("approve");
    t.s.on_event(Input::Cancel(b)).expect("cancel");
    let started = t.round();
    let settled: Vec<(EntryId, Reason)> =
        t.out.settled.iter().map(|s| (s.entry, s.reason)).collect();
    assert_eq!(
        (started, settled),
        (vec![], vec![(e[0], Reason::Cancelled)]),
        "abort {:?}",
        t.out.abort
    );
}

/// The same for an unkeyed entry rate-limited with a Retry-After already past: it goes back in
/// line and is released by the round (once inside `on_ended`); the batch is cancelled before
/// the round.
#[test]
fn a_cancel_after_a_rate_limit_with_no_wait_starts_nothing() {
    let mut t = T::new("");
    let (b, e) = t.submit(&[("u1", "u", None), ("u2", "u", None)]);
    assert_eq!(t.approve(&e), e);
    t.s.on_ended(e[0], End::RateLimited(t.now)).expect("end");
    t.s.on_event(Input::Cancel(b)).expect("cancel");
    let started = t.round();
    let settled: Vec<(EntryId, Reason)> =
        t.out.settled.iter().map(|s| (s.entry, s.reason)).collect();
    let aborted: Vec<EntryId> = t.out.abort.iter().map(|a| a.entry).collect();
    assert_eq!(
        (started, settled, aborted),
        (vec![], vec![(e[0], Reason::Cancelled)], vec![e[1]])
    );
}

/// A saved key name is given back only to a member whose template could make it: under a
/// changed policy where the name is a shared key (or a key with other terms), the member takes
/// its template's own key instead, so resume can never put a shared key (or a second adaptive
/// limit) into a set, which the config refuses.
#[test]
fn a_saved_name_goes_only_to_a_template_that_can_make_it() {
    let before = r#"
[conversation.tools.mv]
concurrency = [{ key = "{src}" }, { key = "fs:{dst}" }]
"#;
    let after = r#"
[conversation.tools.api]
concurrency = { key = "db", limit = 2, shared = true }
[conversation.tools.mv]
concurrency = [{ key = "fs:{src}" }, { key = "fs:{dst}" }]
"#;
    let mut t = T::new(before);
    let (b, _) = t.submit(&[("z", "mv", Some(r#"{"src":"db","dst":"c"}"#))]);
    let saved = t.s.unfinished();
    assert_eq!(saved.batches[0].calls[0].keys, ["db", "fs:c"]);
    let (s, unrestored) =
        Scheduler::resume(policy(after), &saved, Started::RunAgain).expect("resume");
    assert!(unrestored.is_empty());
    let keys = s.inspect(b).expect("live")[0].keys.clone();
    assert_eq!(keys, ["fs:{src}", "fs:c"]);
}
