//! The seeded simulator for admission: a reference model that shares nothing with the engine but
//! its public API (its own list of requests, its own predicates, re-derived from scratch after
//! every event) against the engine, with random budgets, classes, re-entrant chains whose
//! ancestors end, stale and repeated tickets, another controller's tickets (random tags), reused
//! ids, abandons before and after the drain, mistakes and shutdowns. After every step: the same errors, the same admissions in the same
//! order, the same shutdown reports; the budget holds; without `allow_parallel` the tool calls in
//! flight all descend from one call; one control at a time; nothing reported by a shutdown is
//! ever admitted; no ticket is handed out or admitted twice. `TURNSTILE_SEED` / `TURNSTILE_SEEDS`
//! as for the scheduler.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

use std::collections::{HashMap, HashSet};

use turnstile_engine::admission::{Admission, AdmissionConfig, Class, Ticket};

mod common;

use common::Rng;

const CLASSES: [Class; 4] = [
    Class::Call,
    Class::Request,
    Class::Control,
    Class::Reentrant,
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    Queued,
    /// Admitted, not drained yet.
    Admitted,
    Drained,
    Gone,
}

#[derive(Clone, Debug)]
struct Req {
    id: String,
    class: Class,
    /// Index of the parent request (re-entrant calls).
    parent: Option<usize>,
    st: St,
    admitted_at: usize,
    ticket: Ticket,
}

/// The rules, stated as directly as possible over a list of every request ever begun.
struct Model {
    budget: u32,
    parallel: bool,
    reqs: Vec<Req>,
    by_ticket: HashMap<Ticket, usize>,
    /// Tickets another controller handed out: never this one's.
    foreign: HashSet<Ticket>,
    shut: bool,
    admissions: usize,
    /// Admitted and not yet drained, in admission order.
    out: Vec<usize>,
}

fn is_tool(class: Class) -> bool {
    matches!(class, Class::Call | Class::Reentrant)
}

impl Model {
    fn in_flight(&self, i: usize) -> bool {
        matches!(self.reqs[i].st, St::Admitted | St::Drained)
    }

    fn count(&self, f: impl Fn(&Req) -> bool) -> u32 {
        (0..self.reqs.len())
            .filter(|&i| self.in_flight(i) && f(&self.reqs[i]))
            .count() as u32
    }

    fn live(&self, ticket: Ticket) -> Option<usize> {
        if self.foreign.contains(&ticket) {
            return None;
        }
        self.by_ticket
            .get(&ticket)
            .copied()
            .filter(|&i| self.reqs[i].st != St::Gone)
    }

    fn live_id(&self, id: &str) -> bool {
        self.reqs.iter().any(|r| r.id == id && r.st != St::Gone)
    }

    /// `a` is an ancestor of `i`: found by walking `i`'s parents, ended ones included.
    fn descends(&self, i: usize, a: usize) -> bool {
        let mut at = self.reqs[i].parent;
        while let Some(p) = at {
            if p == a {
                return true;
            }
            at = self.reqs[p].parent;
        }
        false
    }

    /// Some ancestor of `i` (ended links skipped) is in flight.
    fn ancestor_in_flight(&self, i: usize) -> bool {
        (0..self.reqs.len()).any(|a| self.in_flight(a) && self.descends(i, a))
    }

    /// The class rules: without `allow_parallel`, a call (or a re-entrant call whose ancestors
    /// all ended) only when no tool call is in flight; a re-entrant call with an ancestor in
    /// flight always (the budget is checked by the caller).
    fn allowed(&self, i: usize) -> bool {
        let no_tools = self.count(|r| is_tool(r.class)) == 0;
        match self.reqs[i].class {
            Class::Request => true,
            Class::Control => self.count(|r| r.class == Class::Control) == 0,
            Class::Call => self.parallel || no_tools,
            Class::Reentrant => self.parallel || no_tools || self.ancestor_in_flight(i),
        }
    }

    /// Admits, while the budget has room, the earliest-arrived waiter its class allows.
    fn admit(&mut self) {
        if self.shut {
            return;
        }
        while self.count(|_| true) < self.budget {
            let Some(i) =
                (0..self.reqs.len()).find(|&i| self.reqs[i].st == St::Queued && self.allowed(i))
            else {
                break;
            };
            self.admissions += 1;
            self.reqs[i].admitted_at = self.admissions;
            self.reqs[i].st = St::Admitted;
            self.out.push(i);
        }
    }

    /// `p` and its ancestors while each is in flight: the calls a child of `p` would wait on.
    fn line(&self, p: usize) -> u32 {
        let mut n = 0;
        let mut at = Some(p);
        while let Some(i) = at.filter(|&i| self.in_flight(i)) {
            n += 1;
            at = self.reqs[i].parent;
        }
        n
    }

    fn expect_begin(&self, id: &str, class: Class, parent: Option<Ticket>) -> Option<&'static str> {
        if self.shut {
            return Some("shutdown");
        }
        if id.is_empty() || id.len() > 256 {
            return Some("invalid-id");
        }
        if self.live_id(id) {
            return Some("duplicate-request");
        }
        let p = match (class, parent) {
            (Class::Reentrant, None) => return Some("invalid-parent"),
            (Class::Reentrant, Some(p)) => self.live(p),
            (_, Some(_)) => return Some("invalid-parent"),
            (_, None) => return None,
        };
        match p {
            Some(p) if self.in_flight(p) && is_tool(self.reqs[p].class) => {
                (self.line(p) >= self.budget).then_some("would-deadlock")
            }
            _ => Some("invalid-parent"),
        }
    }

    fn drain(&mut self) -> Vec<usize> {
        let out: Vec<usize> = std::mem::take(&mut self.out)
            .into_iter()
            .filter(|&i| self.reqs[i].st == St::Admitted)
            .collect();
        for &i in &out {
            self.reqs[i].st = St::Drained;
        }
        out
    }

    fn shutdown(&mut self) -> (Vec<usize>, Vec<usize>) {
        if self.shut {
            return (Vec::new(), Vec::new());
        }
        self.shut = true;
        self.out.clear();
        let refused: Vec<usize> = (0..self.reqs.len())
            .filter(|&i| matches!(self.reqs[i].st, St::Queued | St::Admitted))
            .collect();
        for &i in &refused {
            self.reqs[i].st = St::Gone;
        }
        let mut cancel: Vec<usize> = (0..self.reqs.len())
            .filter(|&i| self.reqs[i].st == St::Drained)
            .collect();
        cancel.sort_by_key(|&i| self.reqs[i].admitted_at);
        (cancel, refused)
    }
}

/// Per-seed operation weights (swarm testing): some seeds never shut down, some never drain
/// late, some are all re-entrant chains.
struct Weights {
    begin: usize,
    end: usize,
    abandon: usize,
    shutdown: usize,
    drain_percent: u64,
    classes: [usize; 4],
}

impl Weights {
    fn new(rng: &mut Rng) -> Self {
        let shutdown = [0, 0, 1, 2][rng.below(4)];
        let drain_percent = match shutdown {
            0 => [100, 90, 70, 40][rng.below(4)],
            _ => [90, 60, 40, 20][rng.below(4)],
        };
        Self {
            begin: 90 + rng.below(120),
            end: 45 + rng.below(90),
            abandon: rng.below(60),
            shutdown,
            drain_percent,
            classes: [
                1 + rng.below(4),
                rng.below(4),
                rng.below(3),
                1 + rng.below(6),
            ],
        }
    }

    fn class(&self, rng: &mut Rng) -> Class {
        let total: usize = self.classes.iter().sum();
        let mut roll = rng.below(total);
        for (i, &w) in self.classes.iter().enumerate() {
            if roll < w {
                return CLASSES[i];
            }
            roll -= w;
        }
        Class::Call
    }
}

/// A ticket to name: mostly a live request's, sometimes a stale one (ended, abandoned,
/// refused), sometimes one never handed out.
fn pick_ticket(rng: &mut Rng, model: &Model, prefer: impl Fn(&Req) -> bool) -> Ticket {
    let preferred: Vec<usize> = (0..model.reqs.len())
        .filter(|&i| model.reqs[i].st != St::Gone && prefer(&model.reqs[i]))
        .collect();
    match rng.below(100) {
        0..=69 if !preferred.is_empty() => model.reqs[preferred[rng.below(preferred.len())]].ticket,
        0..=94 if !model.reqs.is_empty() => model.reqs[rng.below(model.reqs.len())].ticket,
        95..=97 => Ticket(u64::MAX),
        _ => Ticket(rng.next() >> 1),
    }
}

fn pick_id(rng: &mut Rng) -> String {
    match rng.below(60) {
        0 => String::new(),
        1 => "x".repeat(257),
        2 => "y".repeat(256),
        _ => format!("q{}", rng.below(16)),
    }
}

/// One seed's run: the engine, the model, and what the checks remember.
struct Sim {
    seed: u64,
    step: usize,
    rng: Rng,
    weights: Weights,
    engine: Admission,
    /// Another controller (another tag): its tickets are unknown to `engine`.
    other: Admission,
    model: Model,
    log: Vec<String>,
    /// Tickets a shutdown reported, and tickets drained: neither may be drained again.
    reported: HashSet<Ticket>,
    drained: HashSet<Ticket>,
    /// How often each outcome happened, over every seed (printed, to see what was covered).
    seen: HashMap<String, usize>,
}

/// An input's expected refusal (`None`: it applies) and the engine's answer.
type Outcome = (Option<&'static str>, Result<(), String>);

impl Sim {
    fn new(seed: u64, seen: HashMap<String, usize>) -> Self {
        let mut rng = Rng(seed);
        let budget = [0, 1, 2, 3, 4, 6, 8][rng.below(7)];
        let parallel = rng.below(3) == 0;
        let weights = Weights::new(&mut rng);
        let config = AdmissionConfig {
            max_concurrent: budget,
            allow_parallel: parallel,
        };
        let tag = [0, 1, rng.next()][rng.below(3)];
        let engine = Admission::with_tag(config, tag);
        let other = Admission::with_tag(config, [2, tag ^ 1, rng.next() | 2][rng.below(3)]);
        let model = Model {
            budget: budget.max(1),
            parallel,
            reqs: Vec::new(),
            by_ticket: HashMap::new(),
            foreign: HashSet::new(),
            shut: false,
            admissions: 0,
            out: Vec::new(),
        };
        assert_eq!(engine.budget(), model.budget);
        Self {
            seed,
            step: 0,
            rng,
            weights,
            engine,
            other,
            model,
            log: vec![format!("budget {budget} parallel {parallel} tag {tag}")],
            reported: HashSet::new(),
            drained: HashSet::new(),
            seen,
        }
    }

    fn run(mut self) -> HashMap<String, usize> {
        let w = &self.weights;
        let (begin, end, abandon) = (w.begin, w.begin + w.end, w.begin + w.end + w.abandon);
        let total = abandon + w.shutdown;
        for step in 0..60 + self.rng.below(140) {
            self.step = step;
            let roll = self.rng.below(total);
            let (expect, got) = match roll {
                r if r < begin => self.begin(),
                r if r < end => self.end(),
                r if r < abandon => self.abandon(),
                _ => self.shutdown(),
            };
            let what = self
                .log
                .last()
                .map_or("", |l| l.split(' ').next().unwrap_or(""));
            let key = format!("{what} {}", expect.unwrap_or("ok"));
            self.count(&key, 1);
            match (&expect, &got) {
                (None, Ok(())) => {}
                (Some(w), Err(g)) if w == g => {}
                _ => self.fail(&format!("expected {expect:?}, engine said {got:?}")),
            }
            if self.rng.chance(self.weights.drain_percent) {
                self.drain();
            }
            self.check_invariants();
        }
        self.seen
    }

    fn begin(&mut self) -> Outcome {
        let id = pick_id(&mut self.rng);
        let class = self.weights.class(&mut self.rng);
        let mut parent = None;
        if class == Class::Reentrant || self.rng.below(20) == 0 {
            let tool_in_flight = |r: &Req| is_tool(r.class) && r.st != St::Queued;
            parent = Some(self.pick(tool_in_flight));
        }
        if self.rng.below(30) == 0 {
            parent = None;
        }
        let shown = parent.map(|p| self.show(p));
        let n = self.model.reqs.len();
        self.log
            .push(format!("begin #{n} {id:.8} {class:?} parent {shown:?}"));
        let expect = self.model.expect_begin(&id, class, parent);
        let got = match self.engine.begin(&id, class, parent) {
            Ok(ticket) => {
                if self.model.by_ticket.contains_key(&ticket) {
                    self.fail("ticket handed out twice");
                }
                if self.model.foreign.contains(&ticket) {
                    self.fail("two controllers handed out one ticket");
                }
                if expect.is_none() {
                    self.model.by_ticket.insert(ticket, n);
                    let parent = parent.and_then(|p| self.model.live(p));
                    self.model.reqs.push(Req {
                        id,
                        class,
                        parent,
                        st: St::Queued,
                        admitted_at: 0,
                        ticket,
                    });
                    self.model.admit();
                }
                Ok(())
            }
            Err(e) => Err(message_checked(e.code.as_str(), &e.message)),
        };
        (expect, got)
    }

    /// A ticket to name (see [`pick_ticket`]); one in twenty is another controller's, which
    /// under 0.2's numbering was often a live ticket of this one.
    fn pick(&mut self, prefer: impl Fn(&Req) -> bool) -> Ticket {
        if self.rng.below(20) == 0 {
            let n = self.model.reqs.len();
            if let Ok(foreign) = self.other.begin(&format!("q{n}"), Class::Call, None) {
                self.count("foreign ticket", 1);
                if self.model.by_ticket.contains_key(&foreign) {
                    self.fail("two controllers handed out one ticket");
                }
                self.model.foreign.insert(foreign);
                return foreign;
            }
        }
        pick_ticket(&mut self.rng, &self.model, prefer)
    }

    fn end(&mut self) -> Outcome {
        let ticket = self.pick(|r| r.st != St::Queued);
        self.log.push(format!("end {}", self.show(ticket)));
        let at = self.model.live(ticket);
        let expect = match at.map(|i| self.model.reqs[i].st) {
            None => Some("unknown-request"),
            Some(St::Queued) => Some("not-admitted"),
            _ => None,
        };
        let got = self.engine.end(ticket);
        if let (None, Some(i)) = (expect, at) {
            self.model.reqs[i].st = St::Gone;
            self.model.admit();
        }
        (
            expect,
            got.map_err(|e| message_checked(e.code.as_str(), &e.message)),
        )
    }

    fn abandon(&mut self) -> Outcome {
        let ticket = self.pick(|r| r.st != St::Drained);
        self.log.push(format!("abandon {}", self.show(ticket)));
        let at = self.model.live(ticket);
        let expect = match at.map(|i| self.model.reqs[i].st) {
            None => Some("unknown-request"),
            Some(St::Drained) => Some("not-queued"),
            _ => None,
        };
        let got = self.engine.abandon(ticket);
        if let (None, Some(i)) = (expect, at) {
            if self.model.reqs[i].st == St::Admitted {
                self.count("abandon undrained admission", 1);
            }
            self.model.reqs[i].st = St::Gone;
            self.model.admit();
        }
        (
            expect,
            got.map_err(|e| message_checked(e.code.as_str(), &e.message)),
        )
    }

    fn shutdown(&mut self) -> Outcome {
        self.log.push("shutdown".to_owned());
        let report = self.engine.shutdown();
        let model = &self.model;
        let undrained = model
            .out
            .iter()
            .filter(|&&i| model.reqs[i].st == St::Admitted);
        let undrained = undrained.count();
        self.count("shutdown refused undrained", undrained);
        let (cancel, refused) = self.model.shutdown();
        let tickets = |v: Vec<usize>| -> Vec<Ticket> {
            v.into_iter().map(|i| self.model.reqs[i].ticket).collect()
        };
        if (&report.cancel, &report.refused) != (&tickets(cancel), &tickets(refused)) {
            self.fail(&format!("shutdown report {report:?}"));
        }
        self.reported
            .extend(report.cancel.iter().chain(&report.refused));
        (None, Ok(()))
    }

    fn drain(&mut self) {
        let admitted = self.engine.next_admissions();
        let want: Vec<Ticket> = self
            .model
            .drain()
            .into_iter()
            .map(|i| self.model.reqs[i].ticket)
            .collect();
        let shown: Vec<String> = admitted.iter().map(|&t| self.show(t)).collect();
        self.log.push(format!("  drained {}", shown.join(" ")));
        if admitted != want {
            let want: Vec<String> = want.iter().map(|&t| self.show(t)).collect();
            self.fail(&format!("admissions: want {}", want.join(" ")));
        }
        for &t in &admitted {
            let i = self.model.by_ticket[&t];
            if self.model.reqs[i].class == Class::Reentrant {
                let parent = self.model.reqs[i].parent.map(|p| self.model.reqs[p].st);
                let key = match parent {
                    _ if !self.model.ancestor_in_flight(i) => "admitted reentrant, orphaned",
                    Some(St::Gone) => "admitted reentrant, parent ended, ancestor in flight",
                    _ => "admitted reentrant, parent in flight",
                };
                self.count(key, 1);
            }
            if self.reported.contains(&t) {
                self.fail("admitted after a shutdown reported it");
            }
            if !self.drained.insert(t) {
                self.fail("admitted twice");
            }
        }
    }

    /// The invariants, on the model (which must agree with the engine on every output) and on
    /// the engine's own queries.
    fn check_invariants(&mut self) {
        let model = &self.model;
        let in_flight = model.count(|_| true);
        if self.engine.in_flight() != in_flight {
            self.fail(&format!("in flight: engine {}", self.engine.in_flight()));
        }
        if in_flight > model.budget {
            self.fail("over budget");
        }
        if model.count(|r| r.class == Class::Control) > 1 {
            self.fail("two controls in flight");
        }
        let mut side_by_side = false;
        if !model.parallel {
            let tools: Vec<usize> = (0..model.reqs.len())
                .filter(|&i| model.in_flight(i) && is_tool(model.reqs[i].class))
                .collect();
            // One call (in flight or ended) that all of them are or descend from: it is one of
            // the first's line.
            let mut line = tools.first().copied().map(|t| vec![t]).unwrap_or_default();
            while let Some(p) = line.last().and_then(|&i| model.reqs[i].parent) {
                line.push(p);
            }
            let under = |c: usize| tools.iter().all(|&i| i == c || model.descends(i, c));
            let one_tree = tools.is_empty() || line.into_iter().any(under);
            side_by_side = tools.iter().any(|&a| {
                tools
                    .iter()
                    .any(|&b| a < b && !model.descends(a, b) && !model.descends(b, a))
            });
            if !one_tree {
                self.fail("tool calls in flight that do not all descend from one call");
            }
        }
        if !model.reqs.is_empty() {
            let r = &model.reqs[self.rng.below(model.reqs.len())];
            let want = (r.st != St::Gone).then_some(r.id.as_str());
            if self.engine.id(r.ticket) != want {
                self.fail("id of a ticket");
            }
        }
        if side_by_side {
            self.count("serialized tool calls in flight side by side", 1);
        }
    }

    fn count(&mut self, key: &str, n: usize) {
        *self.seen.entry(key.to_owned()).or_default() += n;
    }

    fn show(&self, ticket: Ticket) -> String {
        match self.model.by_ticket.get(&ticket) {
            Some(i) => format!("#{i}"),
            None => format!("ticket {}", ticket.0),
        }
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "seed {} step {}: {what}\n{}\n(replay: TURNSTILE_SEED={})",
            self.seed,
            self.step,
            self.log.join("\n"),
            self.seed
        )
    }
}

/// The code, after checking the message reads like ours: lowercase, no trailing period.
fn message_checked(code: &str, message: &str) -> String {
    assert!(
        message.chars().next().is_some_and(|c| !c.is_uppercase()) && !message.ends_with('.'),
        "message {message:?}"
    );
    code.to_owned()
}

#[test]
fn admission_agrees_with_the_reference_model() {
    let seeds: Vec<u64> = match std::env::var("TURNSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => vec![seed],
        None => (0..std::env::var("TURNSTILE_SEEDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(common::DEFAULT_SEEDS))
            .collect(),
    };
    let mut seen = HashMap::new();
    for &seed in &seeds {
        #[cfg(target_arch = "wasm32")]
        common::name_seed_on_panic("admission", seed);
        seen = Sim::new(seed, seen).run();
    }
    let mut seen: Vec<_> = seen.into_iter().collect();
    seen.sort();
    eprintln!("simulated {} admission seeds: {seen:?}", seeds.len());
}

/// Many waiters at once, drained to the end: first-come first-served, nothing lost. (0.1
/// rescanned the queue on every input; this is the shape that made it quadratic. Not timed.)
#[test]
fn forty_thousand_queued_calls_drain_in_order() {
    const CALLS: usize = 40_000;
    let mut a = Admission::new(AdmissionConfig {
        max_concurrent: 4,
        allow_parallel: false,
    });
    let tickets: Vec<Ticket> = (0..CALLS)
        .map(|i| a.begin(&format!("call-{i}"), Class::Call, None).unwrap())
        .collect();
    let mut order = a.next_admissions();
    for n in 0..CALLS {
        a.end(order[n]).unwrap();
        order.extend(a.next_admissions());
    }
    assert_eq!(order, tickets);
    assert_eq!(a.in_flight(), 0);
}
