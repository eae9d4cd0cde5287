//! The engine and the model side by side: per-seed weights, the rounds (submit, step, query,
//! restart), the exact comparison of every output, and the final drain (liveness).

use std::collections::{HashMap, HashSet};

use turnstile_engine::config::Policy;
use turnstile_engine::schedule::{
    BatchId, Call, EntryId, HostSettle, ResumeErrorCode, SAVED_VERSION, SavedState, Scheduler,
    Started, UnrestoredCode, fingerprint,
};

use crate::common::step::{InputKind, Inputs, Outputs, Step};

use crate::check::Timing;
use crate::common::Rng;
use crate::generate::{ARGUMENTS, Gen, TEMPLATE};
use crate::model::{Ins, Model, Out, St};
use crate::runner::Stats;

/// Where the docs leave the engine room (today: `wake_at` may be early after a cancellation or
/// a stop removed what waited), the model accepts it, each place marked `strict()`;
/// `TURNSTILE_STRICT=1` makes the model demand the exact value there instead.
fn strict() -> bool {
    std::env::var("TURNSTILE_STRICT").is_ok_and(|v| v == "1")
}

/// Per-seed weights over the operation mix (swarm testing), in percent.
#[derive(Debug)]
pub(super) struct Weights {
    submit: usize,
    restart: usize,
    query: usize,
    pub(super) mistake: u64,
    pub(super) settle: u64,
    pub(super) fail: u64,
    pub(super) ask: u64,
    pub(super) cancel: u64,
    change: u64,
    interrupt: u64,
    pub(super) whole_batch: u64,
    /// A step carries `now`.
    pub(super) clock: u64,
    /// Of those, one goes back.
    pub(super) backwards: u64,
    /// Of those, one jumps to the last `wake_at`.
    pub(super) jump: u64,
    /// A running entry hits a rate limit.
    pub(super) retry: u64,
    /// The host pauses a key.
    pub(super) pause: u64,
    /// A batch has an execution limit; and, on its own, an abort grace.
    pub(super) deadline: u64,
}

impl Weights {
    fn random(rng: &mut Rng) -> Self {
        Self {
            submit: 15 + rng.below(25),
            restart: rng.below(10),
            query: rng.below(10),
            mistake: [0, 5, 15, 40][rng.below(4)],
            settle: [0, 5, 20][rng.below(3)],
            fail: [0, 15, 50][rng.below(3)],
            ask: [0, 10, 30][rng.below(3)],
            cancel: [0, 3, 10][rng.below(3)],
            change: [0, 50, 100][rng.below(3)],
            interrupt: [0, 50, 100][rng.below(3)],
            whole_batch: [20, 60][rng.below(2)],
            clock: [20, 50, 90][rng.below(3)],
            backwards: [0, 5, 15][rng.below(3)],
            jump: [0, 30, 70][rng.below(3)],
            deadline: [0, 30, 70][rng.below(3)],
            retry: [0, 10, 30, 60][rng.below(4)],
            pause: [0, 5, 20][rng.below(3)],
        }
    }
}

/// The engine and the model side by side, with what the invariants need to remember.
pub(super) struct Sim {
    pub(super) rng: Rng,
    pub(super) w: Weights,
    pub(super) engine: Scheduler,
    policy: Policy,
    pub(super) model: Model,
    pub(super) out: Outputs,
    /// Entries started (by the engine's outputs) that may not start again.
    pub(super) started: HashSet<u64>,
    /// Per key, the last entry started in this scheduler for the first time since it was
    /// made or resumed (a retried entry starting again is not a first start).
    pub(super) last_start: HashMap<String, u64>,
    /// The host's clock, monotonic across restarts; `now` inputs come from it.
    pub(super) host_now: u64,
    /// What the time properties remember, read from inputs and outputs only.
    pub(super) timing: Timing,
    log: Vec<String>,
    /// What the seed exercised, summed over seeds and printed (coverage at a glance).
    pub(super) stats: Stats,
    /// Keep a log to print on failure (a failing seed is replayed with it).
    verbose: bool,
}

impl Sim {
    pub(super) fn new(seed: u64, verbose: bool) -> Self {
        let mut rng = Rng(seed);
        let w = Weights::random(&mut rng);
        let cfg = Gen::random(&mut rng);
        let policy = cfg.policy();
        let log = vec![format!("weights {w:?}"), cfg.text()];
        Self {
            rng,
            w,
            engine: Scheduler::new(policy.clone()),
            policy,
            model: Model::new(cfg),
            out: Outputs::default(),
            started: HashSet::new(),
            last_start: HashMap::new(),
            host_now: 0,
            timing: Timing::default(),
            log,
            stats: Stats::new(),
            verbose,
        }
    }

    pub(super) fn count(&mut self, what: &'static str, detail: &'static str) {
        *self.stats.entry((what, detail)).or_insert(0) += 1;
    }

    pub(super) fn fail(&self, what: &str) -> ! {
        if self.verbose {
            panic!("{what}\n--- log ---\n{}", self.log.join("\n"))
        }
        panic!("{what}")
    }

    pub(super) fn round(&mut self) {
        let roll = self.rng.below(100);
        let w = (self.w.submit, self.w.restart, self.w.query);
        let idle = self.model.live().next().is_none();
        if roll < w.0 || (idle && self.rng.chance(70)) {
            self.submit();
        } else if roll < w.0 + w.1 {
            self.restart();
        } else if roll < w.0 + w.1 + w.2 {
            self.query();
        } else {
            let ins = self.random_inputs();
            self.step(ins);
        }
    }

    fn submit(&mut self) {
        let calls = self.random_calls();
        if self.verbose {
            self.log.push(format!("submit {calls:?}"));
        }
        let engine_calls: Vec<Call<'_>> = calls
            .iter()
            .map(|c| Call {
                id: &c.id,
                tool: &c.tool,
                operations: c.ops,
                arguments: ARGUMENTS[c.args].0,
            })
            .collect();
        let limits = self.random_limits();
        let got = self
            .engine
            .submit_batch_with(&engine_calls, limits)
            .map(|s| (s.batch.0, s.first.0, s.count));
        let want = self.model.submit(&calls, limits);
        match (&got, &want) {
            (Ok(g), Ok(w)) if g == w => {}
            (Err(e), Err(code)) if e.code == *code && !e.message.is_empty() => {}
            _ => self.fail(&format!("submit: model {want:?}, engine {got:?}")),
        }
        if self.verbose {
            self.log.push(format!("  -> {want:?}"));
        }
        match want {
            Ok(_) => {
                self.count("submit", "ok");
                for c in &calls {
                    let templated = self
                        .model
                        .cfg
                        .rules(&c.tool)
                        .key
                        .is_some_and(|k| k.name == TEMPLATE);
                    if templated {
                        match ARGUMENTS[c.args].1 {
                            Some(_) => self.count("key from arguments", "made"),
                            None => self.count("key from arguments", "the template's own"),
                        }
                    }
                }
            }
            Err(code) => self.count("submit", code.as_str()),
        }
    }

    fn step(&mut self, ins: Ins) {
        if self.verbose {
            self.log.push(format!("step {ins:?}"));
        }
        let ids = |v: &[u64]| -> Vec<EntryId> { v.iter().map(|&n| EntryId(n)).collect() };
        let (approve, ask, answer, ok, failed) = (
            ids(&ins.approve),
            ids(&ins.ask),
            ids(&ins.answer),
            ids(&ins.ok),
            ids(&ins.failed),
        );
        let settle: Vec<(EntryId, HostSettle)> =
            ins.settle.iter().map(|&(n, h)| (EntryId(n), h)).collect();
        let cancel: Vec<BatchId> = ins.cancel.iter().map(|&b| BatchId(b)).collect();
        let retry: Vec<(EntryId, u64)> = ins.retry.iter().map(|&(n, t)| (EntryId(n), t)).collect();
        let pause: Vec<(&str, u64)> = ins.pause.iter().map(|(k, t)| (k.as_str(), *t)).collect();
        let (granted, denied) = (ids(&ins.granted), ids(&ins.denied));
        let inputs = Inputs {
            now: ins.now,
            approve: &approve,
            settle: &settle,
            granted: &granted,
            denied: &denied,
            ask: &ask,
            answer: &answer,
            ok: &ok,
            failed: &failed,
            retry: &retry,
            cancel: &cancel,
            pause: &pause,
        };
        self.engine.step(&inputs, &mut self.out);
        let mut got = Out::of(&self.out);
        let want = self.model.step(&ins);
        // Deviation: the engine's `wake_at` may be earlier than anything waits (a wake-up whose
        // waiter was cancelled or stopped stays until it passes). Never later: that would be a
        // missed wake-up.
        let early = match (got.wake_at, want.wake_at) {
            (Some(g), Some(w)) => g < w,
            (Some(_), None) => true,
            _ => false,
        };
        if early && !strict() {
            self.count("wake_at", "earlier than anything waits (stale)");
            got.wake_at = want.wake_at;
        }
        if got != want {
            self.fail(&format!(
                "step outputs differ\n model: {}\nengine: {}",
                self.render(&want),
                self.render(&got)
            ));
        }
        if self.verbose {
            let line = format!("  -> {}", self.render(&want));
            self.log.push(line);
        }
        for e in &self.out.errors {
            if e.message.is_empty() || e.message.ends_with('.') {
                self.fail(&format!("badly worded error: {e}"));
            }
        }
        // A shared key's permit request carries its store's terms (delay, rate windows, the
        // call's weight, and an adaptive limit where it is now); this process keeps no spacing
        // of its own on it.
        for p in self.out.releases.acquire.clone() {
            let rule = self.model.rule(p.entry.0);
            let mut store = rule.and_then(|k| k.store.clone());
            if let (Some(s), Some(k)) = (store.as_mut(), rule.filter(|k| k.adapt_min.is_some())) {
                s.limit = Some(self.model.limit_now(k));
                if s.limit < Some(k.limit) {
                    self.count("permit", "carries an adapted limit");
                }
            }
            let got = (
                p.limit,
                p.delay_ms,
                p.rates
                    .iter()
                    .map(|w| (w.count, w.per_ms, w.burst))
                    .collect::<Vec<_>>(),
                p.weight,
            );
            match store {
                Some(s) if got == (s.limit, s.delay, s.rates.clone(), s.weight) => {
                    self.count("permit", "carries the store's terms");
                }
                other => self.fail(&format!(
                    "{}: permit request {got:?}, the store's terms are {other:?}",
                    p.entry.0
                )),
            }
        }
        let start = self.check_time(&ins, &want);
        self.check_starts(&start);
        self.check_states(&want.retired);
        let inputs = ins.approve.len()
            + usize::from(ins.now.is_some())
            + ins.retry.len()
            + ins.pause.len()
            + ins.settle.len()
            + ins.ask.len()
            + ins.answer.len()
            + ins.ok.len()
            + ins.failed.len()
            + ins.cancel.len();
        if inputs > want.errors.len() && !want.errors.is_empty() {
            self.count("step", "with refused and applied inputs");
        } else if inputs > 0 && inputs == want.errors.len() {
            self.count("step", "with every input refused");
        }
        for (kind, _, code) in &want.errors {
            self.count(kind_name(*kind), code.as_str());
        }
        for (_, reason) in &want.settle {
            self.count("settled", reason.name());
        }
        self.count(
            "step starts",
            ["none", "one", "two", "more"][want.start.len().min(3)],
        );
        if want.wake_at.is_some() {
            self.count("step", "with a wake_at");
        }
        for _ in &want.retired {
            self.count("batch", "retired");
        }
    }

    fn render(&self, out: &Out) -> String {
        let name = |n: u64| {
            if (1..self.model.next_entry()).contains(&n) {
                format!("{n}:{}", self.model.label(n))
            } else {
                n.to_string()
            }
        };
        let start: Vec<String> = out.start.iter().map(|&n| name(n)).collect();
        let settle: Vec<String> = out
            .settle
            .iter()
            .map(|&(n, r)| format!("{} {r:?}", name(n)))
            .collect();
        format!(
            "start {start:?} settle {settle:?} pause_store {:?} errors {:?} retired {:?} wake_at \
             {:?} (now {})",
            out.pause_store, out.errors, out.retired, out.wake_at, self.model.time.now
        )
    }

    /// Queries change nothing and agree with the model.
    fn query(&mut self) {
        let next = self.model.next_batch();
        let b = match self.rng.below(5) {
            0 => next + self.rng.below(2) as u64,
            _ => 1 + self.rng.below(next as usize) as u64,
        };
        if self.verbose {
            self.log.push(format!("inspect {b}"));
        }
        let got = self.engine.inspect(BatchId(b));
        let want = self.model.inspect(b);
        if got != want {
            self.fail(&format!("inspect {b}\n model: {want:#?}\nengine: {got:#?}"));
        }
        // Read in parts of a random size, joined, it is the same list (what a host does).
        let size = 1 + self.rng.below(4);
        let mut parts: Option<Vec<_>> = None;
        for offset in (0..).step_by(size) {
            let Some(part) = self.engine.inspect_part(BatchId(b), offset, size) else {
                break;
            };
            let full = part.len() == size;
            parts.get_or_insert_with(Vec::new).extend(part);
            if !full {
                break;
            }
        }
        if parts != got {
            self.fail(&format!(
                "inspect {b} in parts of {size}\n parts: {parts:#?}\nwhole: {got:#?}"
            ));
        }
        for _ in 0..3 {
            let n = self.mistaken_entry();
            let want = self.model.is_live(n).then(|| self.model.label(n));
            let got = self.engine.label(EntryId(n));
            if got != want {
                self.fail(&format!("label of {n}: model {want:?}, engine {got:?}"));
            }
        }
        self.check_states(&[]);
    }

    /// `unfinished` then `resume` into a fresh scheduler, maybe under a changed config, maybe
    /// interrupting what had started. The model predicts the result itself.
    fn restart(&mut self) {
        let saved = self.engine.unfinished();
        let want = SavedState {
            version: SAVED_VERSION,
            policy: fingerprint(&self.policy),
            next_batch: self.model.next_batch(),
            next_entry: self.model.next_entry(),
            batches: self.model.export(),
        };
        if saved != want {
            self.fail(&format!(
                "unfinished differs\n model: {want:#?}\nengine: {saved:#?}"
            ));
        }
        if self.rng.chance(10) {
            let mut bad = saved.clone();
            bad.version = SAVED_VERSION + 1;
            match Scheduler::resume(self.policy.clone(), &bad, Started::RunAgain) {
                Err(e) if e.code == ResumeErrorCode::UnsupportedVersion => {}
                other => self.fail(&format!(
                    "resume of version {}: {:?}",
                    bad.version,
                    other.err()
                )),
            }
        }
        let cfg = if self.rng.chance(self.w.change) {
            self.count("restart", "under a changed config");
            self.model.cfg.changed(&mut self.rng)
        } else if self.rng.chance(30) {
            self.model.cfg.rewritten(&mut self.rng)
        } else {
            self.model.cfg.clone()
        };
        let started = if self.rng.chance(self.w.interrupt) {
            Started::Interrupt
        } else {
            Started::RunAgain
        };
        if self.verbose {
            self.log
                .push(format!("restart {started:?} under\n{}", cfg.text()));
        }
        let policy = cfg.policy();
        let (engine, unrestored) = Scheduler::resume(policy.clone(), &saved, started)
            .unwrap_or_else(|e| self.fail(&format!("resume refused: {e}")));
        let (want_unrestored, again) = self.model.resume(cfg, started);
        let got_unrestored: Vec<(u64, String, UnrestoredCode)> = unrestored
            .iter()
            .map(|u| (u.batch, u.call.clone(), u.code))
            .collect();
        if got_unrestored != want_unrestored {
            self.fail(&format!(
                "unrestored: model {want_unrestored:?}, engine {got_unrestored:?}"
            ));
        }
        if self.verbose {
            self.log
                .push(format!("  -> unrestored {want_unrestored:?}"));
        }
        self.count(
            "restart",
            if started == Started::Interrupt {
                "interrupt"
            } else {
                "run again"
            },
        );
        for (_, _, code) in &want_unrestored {
            self.count("unrestored", code.as_str());
        }
        self.engine = engine;
        self.policy = policy;
        for n in again {
            self.started.remove(&n);
        }
        self.last_start.clear();
        self.timing = Timing::default();
        self.out.wake_at = None;
        self.check_states(&[]);
    }

    /// Liveness: approve everything pending and end everything running until every batch
    /// retired; a step that changes nothing before then is a stall.
    pub(super) fn drain(&mut self) {
        while self.model.live().next().is_some() {
            let live: Vec<u64> = self.model.live_entries().collect();
            let ins = Ins {
                approve: live
                    .iter()
                    .copied()
                    .filter(|&n| self.model.st(n) == St::Pending)
                    .collect(),
                granted: live
                    .iter()
                    .copied()
                    .filter(|&n| self.model.st(n) == St::Acquiring)
                    .collect(),
                ok: live
                    .iter()
                    .copied()
                    .filter(|&n| self.model.st(n).started())
                    .collect(),
                ..Ins::default()
            };
            let mut ins = ins;
            let idle = ins.is_empty();
            if idle {
                // Nothing to do but wait: wake up when the scheduler said (the model says when
                // something waits; the engine may say earlier, see `step`).
                if let Some(t) = self.model.wake_at().or(self.out.wake_at) {
                    self.host_now = self.host_now.max(t);
                    ins.now = Some(self.host_now);
                }
            }
            self.step(ins);
            if idle && self.out.is_empty() && self.out.wake_at.is_none() {
                self.fail("stalled: live batches, nothing to do");
            }
        }
        if self.engine.live_entries() != 0 || !self.engine.unfinished().batches.is_empty() {
            self.fail("the engine holds live work after the drain");
        }
    }
}

fn kind_name(kind: InputKind) -> &'static str {
    match kind {
        InputKind::Approve => "refused approve",
        InputKind::Settle => "refused settle",
        InputKind::Granted => "refused granted",
        InputKind::Denied => "refused denied",
        InputKind::Ask => "refused ask",
        InputKind::Answer => "refused answer",
        InputKind::Ok => "refused ok",
        InputKind::Failed => "refused failed",
        InputKind::Cancel => "refused cancel",
        InputKind::Now => "refused now",
        InputKind::Retry => "refused retry",
        InputKind::Pause => "refused pause",
    }
}
