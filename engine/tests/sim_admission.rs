//! The seeded simulator for admission: a reference model that re-derives every admission from
//! the list of requests after each event, against the engine, with random budgets, classes,
//! re-entrant chains, abandons, ends, mistakes and shutdowns. Invariants after every step: the
//! budget holds, tool calls are serialized unless parallel, one control at a time, nothing is
//! admitted after shutdown. `TURNSTILE_SEED` / `TURNSTILE_SEEDS` as for the scheduler.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use turnstile_engine::admission::{Admission, AdmissionConfig, Class};

mod common;

use common::Rng;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    Queued,
    InFlight,
    Gone,
}

#[derive(Clone, Debug)]
struct Req {
    id: String,
    class: Class,
    parent: Option<usize>,
    st: St,
    admitted_at: usize,
}

struct Model {
    budget: u32,
    parallel: bool,
    reqs: Vec<Req>,
    shut: bool,
    admissions: usize,
}

impl Model {
    fn live(&self, id: &str) -> Option<usize> {
        self.reqs
            .iter()
            .rposition(|r| r.id == id && r.st != St::Gone)
    }

    fn count(&self, f: impl Fn(&Req) -> bool) -> u32 {
        self.reqs
            .iter()
            .filter(|r| r.st == St::InFlight && f(r))
            .count() as u32
    }

    /// Admits waiters in arrival order, each when the budget and its class allow.
    fn admit(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        if self.shut {
            return out;
        }
        for i in 0..self.reqs.len() {
            if self.reqs[i].st != St::Queued || self.count(|_| true) >= self.budget {
                continue;
            }
            let ok = match self.reqs[i].class {
                Class::Call => self.parallel || self.count(|r| r.class == Class::Call) == 0,
                Class::Control => self.count(|r| r.class == Class::Control) == 0,
                Class::Request | Class::Reentrant => true,
            };
            if ok {
                self.admissions += 1;
                self.reqs[i].admitted_at = self.admissions;
                self.reqs[i].st = St::InFlight;
                out.push(self.reqs[i].id.clone());
            }
        }
        out
    }

    fn ancestors(&self, mut at: Option<usize>) -> u32 {
        let mut n = 0;
        while let Some(i) = at {
            if self.reqs[i].st != St::InFlight {
                break;
            }
            n += 1;
            at = self.reqs[i].parent;
        }
        n
    }
}

fn run(seed: u64) {
    let mut rng = Rng(seed);
    let budget = rng.below(4) as u32;
    let parallel = rng.below(2) == 0;
    let mut engine = Admission::new(AdmissionConfig {
        max_concurrent: budget,
        allow_parallel: parallel,
    });
    let mut model = Model {
        budget: budget.max(1),
        parallel,
        reqs: Vec::new(),
        shut: false,
        admissions: 0,
    };
    let mut log = Vec::new();
    let classes = [
        Class::Call,
        Class::Request,
        Class::Control,
        Class::Reentrant,
    ];
    for step in 0..60 + rng.below(100) {
        let roll = rng.below(100);
        let name = |rng: &mut Rng| format!("q{}", rng.below(12));
        let (expect, got): (Option<&str>, Result<(), String>) = match roll {
            0..=49 => {
                let id = name(&mut rng);
                let class = classes[rng.below(4)];
                let parent_id =
                    (class == Class::Reentrant || rng.below(20) == 0).then(|| name(&mut rng));
                log.push(format!("begin {id} {class:?} {parent_id:?}"));
                let parent = parent_id.as_deref().and_then(|p| model.live(p));
                let expect = if model.shut {
                    Some("shutdown")
                } else if model.live(&id).is_some() {
                    Some("duplicate-request")
                } else if (class == Class::Reentrant
                    && parent.is_none_or(|p| {
                        model.reqs[p].st != St::InFlight
                            || !matches!(model.reqs[p].class, Class::Call | Class::Reentrant)
                    }))
                    || (class != Class::Reentrant && parent_id.is_some())
                {
                    Some("invalid-parent")
                } else if class == Class::Reentrant && model.ancestors(parent) >= model.budget {
                    Some("would-deadlock")
                } else {
                    None
                };
                let got = engine.begin(&id, class, parent_id.as_deref());
                if expect.is_none() {
                    model.reqs.push(Req {
                        id,
                        class,
                        parent,
                        st: St::Queued,
                        admitted_at: 0,
                    });
                }
                (expect, got.map_err(|e| e.code.as_str().to_owned()))
            }
            50..=84 => {
                let id = name(&mut rng);
                log.push(format!("end {id}"));
                let at = model.live(&id);
                let expect = match at.map(|i| model.reqs[i].st) {
                    None => Some("unknown-request"),
                    Some(St::Queued) => Some("not-admitted"),
                    _ => None,
                };
                let got = engine.end(&id);
                if let (None, Some(i)) = (expect, at) {
                    model.reqs[i].st = St::Gone;
                }
                (expect, got.map_err(|e| e.code.as_str().to_owned()))
            }
            85..=96 => {
                let id = name(&mut rng);
                log.push(format!("abandon {id}"));
                let at = model.live(&id);
                let expect = match at.map(|i| model.reqs[i].st) {
                    None => Some("unknown-request"),
                    Some(St::InFlight) => Some("not-queued"),
                    _ => None,
                };
                let got = engine.abandon(&id);
                if let (None, Some(i)) = (expect, at) {
                    model.reqs[i].st = St::Gone;
                }
                (expect, got.map_err(|e| e.code.as_str().to_owned()))
            }
            _ => {
                log.push("shutdown".to_owned());
                let report = engine.shutdown();
                let refused: Vec<String> = model
                    .reqs
                    .iter_mut()
                    .filter(|r| r.st == St::Queued)
                    .map(|r| {
                        r.st = St::Gone;
                        r.id.clone()
                    })
                    .collect();
                let cancel: Vec<String> = if model.shut {
                    Vec::new()
                } else {
                    let mut in_flight: Vec<&Req> =
                        model.reqs.iter().filter(|r| r.st == St::InFlight).collect();
                    in_flight.sort_by_key(|r| r.admitted_at);
                    in_flight.iter().map(|r| r.id.clone()).collect()
                };
                model.shut = true;
                assert_eq!(
                    (report.cancel, report.refused),
                    (cancel, refused),
                    "seed {seed} step {step}: shutdown\n{}",
                    log.join("\n")
                );
                (None, Ok(()))
            }
        };
        match (&expect, &got) {
            (None, Ok(())) => {}
            (Some(w), Err(g)) if w == g => {}
            _ => panic!(
                "seed {seed} step {step}: expected {expect:?}, engine said {got:?}\n{}",
                log.join("\n")
            ),
        }
        let want = if got.is_ok() {
            model.admit()
        } else {
            Vec::new()
        };
        let admitted = engine.next_admissions();
        assert_eq!(
            admitted,
            want,
            "seed {seed} step {step}: admissions\n{}",
            log.join("\n")
        );
        let in_flight = model.count(|_| true);
        assert_eq!(
            engine.in_flight(),
            in_flight,
            "seed {seed} step {step}: in flight"
        );
        assert!(in_flight <= model.budget, "seed {seed}: over budget");
        assert!(
            parallel || model.count(|r| r.class == Class::Call) <= 1,
            "seed {seed}: two calls"
        );
        assert!(
            model.count(|r| r.class == Class::Control) <= 1,
            "seed {seed}: two controls"
        );
    }
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
            .unwrap_or(2000))
            .collect(),
    };
    for &seed in &seeds {
        run(seed);
    }
    eprintln!("simulated {} admission seeds", seeds.len());
}
