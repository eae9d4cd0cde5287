//! Shared keys: `concurrency = { key, limit, shared = true }`. The scheduler still decides the
//! order; the store (the host's) grants permits across processes. Failure paths first: a
//! grant or refusal of an entry that asked for nothing, a refused permit, cancellation and
//! `stop` while waiting for a permit, a rate limit on a shared key. Then: requests in written
//! order up to the local limit, grants out of order start in written order, every permit comes
//! back exactly once, restart asks again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

use turnstile_engine::config::{self, Layer, Policy, RateWindow};
#[path = "common/step.rs"]
mod step;

use step::{InputKind, Inputs, Outputs, Step};
use turnstile_engine::schedule::{
    BatchId, Call, EntryId, InputErrorCode, Reason, Scheduler, Started, State, Wait,
};

const SHARED: &str = r#"
[conversation.tools.gh]
concurrency = { key = "github", limit = 2, shared = true, delay = 250 }
[conversation.tools.del]
concurrency = { key = "fs", limit = 2, shared = true }
fan_out = { on_error = "stop" }
"#;

fn policy(text: &str) -> Policy {
    config::resolve(&[Layer::new("t.toml", text)]).expect("valid config")
}

struct T {
    s: Scheduler,
    out: Outputs,
}

impl T {
    fn new() -> Self {
        Self::with(SHARED)
    }

    fn with(text: &str) -> Self {
        Self {
            s: Scheduler::new(policy(text)),
            out: Outputs::default(),
        }
    }

    /// Submits `(id, tool, operations)` and approves it all.
    fn batch(&mut self, calls: &[(&str, &str, Option<u32>)]) -> Vec<EntryId> {
        let calls: Vec<Call<'_>> = calls
            .iter()
            .map(|&(id, tool, operations)| Call {
                id,
                tool,
                operations,
                arguments: None,
            })
            .collect();
        let b = self.s.submit_batch(&calls).unwrap();
        let e: Vec<EntryId> = (0..u64::from(b.count))
            .map(|i| EntryId(b.first.0 + i))
            .collect();
        self.step(Inputs {
            approve: &e,
            ..Inputs::default()
        });
        e
    }

    fn step(&mut self, inputs: Inputs<'_>) -> &Outputs {
        self.s.step(&inputs, &mut self.out);
        &self.out
    }
}

#[test]
fn shared_must_agree_and_be_a_boolean() {
    let diags = config::resolve(&[Layer::new(
        "t.toml",
        "[conversation.tools.a]\nconcurrency = { key = \"k\", shared = true }\n\
         [conversation.tools.b]\nconcurrency = { key = \"k\" }\n\
         [conversation.tools.c]\nconcurrency = { key = \"j\", shared = \"yes\" }\n",
    )])
    .unwrap_err();
    let codes: Vec<&str> = diags.iter().map(|d| d.code.as_str()).collect();
    assert_eq!(codes, ["concurrency-type", "concurrency-shared-conflict"]);
    assert!(
        diags[1]
            .message
            .contains("a = true, b = false (not set: the default)")
    );
}

#[test]
fn grants_and_refusals_of_entries_that_asked_for_nothing_are_refused() {
    let mut t = T::new();
    let e = t.batch(&[("g1", "gh", None), ("g2", "gh", None), ("g3", "gh", None)]);
    // Two permits requested (the local limit), none started.
    assert_eq!(t.out.acquire, vec![e[0], e[1]]);
    assert!(t.out.start.is_empty());
    let out = t.step(Inputs {
        granted: &[e[2], EntryId(99)],
        denied: &[e[2]],
        ..Inputs::default()
    });
    let errors: Vec<(InputKind, u32, InputErrorCode)> = out
        .errors
        .iter()
        .map(|e| (e.input, e.index, e.code))
        .collect();
    assert_eq!(
        errors,
        [
            (InputKind::Granted, 0, InputErrorCode::NotAcquiring),
            (InputKind::Granted, 1, InputErrorCode::UnknownEntry),
            (InputKind::Denied, 0, InputErrorCode::NotAcquiring),
        ]
    );
    assert!(out.start.is_empty() && out.acquire.is_empty());
    // A refused permit fails the entry before it ran; its local slot goes to the next one.
    let out = t.step(Inputs {
        denied: &[e[0]],
        ..Inputs::default()
    });
    assert!(out.errors.is_empty());
    assert_eq!(out.acquire, vec![e[2]]);
    assert!(
        out.release.is_empty(),
        "a refused permit has nothing to give back"
    );
    assert_eq!(t.s.state(e[0]), Some(State::Settled(Reason::Failed)));
    // Ending an entry that never started is refused.
    let out = t.step(Inputs {
        ok: &[e[1]],
        ..Inputs::default()
    });
    assert_eq!(out.errors[0].code, InputErrorCode::NotRunning);
}

#[test]
fn grants_out_of_order_start_in_written_order_and_every_permit_comes_back() {
    let mut t = T::new();
    let e = t.batch(&[("g1", "gh", None), ("g2", "gh", None), ("g3", "gh", None)]);
    assert_eq!(t.out.acquire, vec![e[0], e[1]]);
    // g2's permit first: it waits for g1's.
    let out = t.step(Inputs {
        granted: &[e[1]],
        ..Inputs::default()
    });
    assert!(out.start.is_empty());
    let st = t.s.inspect(BatchId(1)).unwrap();
    assert_eq!(
        st[0].wait,
        Some(Wait::PermitRequested {
            key: "github".into()
        })
    );
    assert_eq!(
        st[1].wait,
        Some(Wait::PermitGranted {
            key: "github".into()
        })
    );
    assert_eq!(
        st[2].why.as_deref(),
        Some("waiting: github is full (2 of 2 running: g1, g2)")
    );
    let out = t.step(Inputs {
        granted: &[e[0]],
        ..Inputs::default()
    });
    assert_eq!(out.start, vec![e[0], e[1]]);
    // The store keeps the delay across processes; locally nothing spaces them.
    assert_eq!(out.wake_at, None);
    let out = t.step(Inputs {
        ok: &[e[0]],
        ..Inputs::default()
    });
    assert_eq!(out.release, vec![e[0]]);
    assert_eq!(out.acquire, vec![e[2]]);
    let out = t.step(Inputs {
        granted: &[e[2]],
        failed: &[e[1]],
        ..Inputs::default()
    });
    assert_eq!(out.start, vec![e[2]]);
    assert_eq!(out.release, vec![e[1]]);
    let out = t.step(Inputs {
        ok: &[e[2]],
        ..Inputs::default()
    });
    assert_eq!(out.release, vec![e[2]]);
    assert_eq!(out.retired, vec![BatchId(1)]);
}

#[test]
fn cancel_stop_and_rate_limits_give_permits_back() {
    let mut t = T::new();
    let e = t.batch(&[("d", "del", Some(4))]);
    assert_eq!(t.out.acquire, vec![e[0], e[1]]);
    t.step(Inputs {
        granted: &[e[0], e[1]],
        ..Inputs::default()
    });
    assert_eq!(t.out.start, vec![e[0], e[1]]);
    // d#1 hits a rate limit: its permit goes back, it waits to ask again after the pause.
    let out = t.step(Inputs {
        now: Some(10),
        retry: &[(e[1], 100)],
        ..Inputs::default()
    });
    assert_eq!(out.release, vec![e[1]]);
    assert!(out.acquire.is_empty(), "paused: nothing asks before 100");
    assert_eq!(out.wake_at, Some(100));
    let out = t.step(Inputs {
        now: Some(100),
        ..Inputs::default()
    });
    assert_eq!(out.acquire, vec![e[1]]);
    // d#0 fails under `stop`: d#1 waiting for its permit is stopped and gives it back.
    let out = t.step(Inputs {
        failed: &[e[0]],
        ..Inputs::default()
    });
    assert_eq!(
        out.settle,
        vec![
            (e[1], Reason::Stopped { after: 1 }),
            (e[2], Reason::Stopped { after: 1 }),
            (e[3], Reason::Stopped { after: 1 })
        ]
    );
    assert_eq!(out.release, vec![e[0], e[1]]);
    // Cancelling a batch whose entries wait for permits gives every one back.
    let g = t.batch(&[("g1", "gh", None), ("g2", "gh", None)]);
    assert_eq!(t.out.acquire, g);
    t.step(Inputs {
        granted: &[g[1]],
        ..Inputs::default()
    });
    let out = t.step(Inputs {
        cancel: &[BatchId(2)],
        ..Inputs::default()
    });
    assert_eq!(out.release, g);
    assert_eq!(out.settle.len(), 2);
    assert_eq!(out.retired, vec![BatchId(2)]);
}

#[test]
fn restart_asks_for_permits_again() {
    let mut t = T::new();
    let e = t.batch(&[("g1", "gh", None), ("g2", "gh", None)]);
    t.step(Inputs {
        granted: &[e[0]],
        ..Inputs::default()
    });
    assert_eq!(t.out.start, vec![e[0]]);
    let saved = t.s.unfinished();
    let (mut s, _) = Scheduler::resume(policy(SHARED), &saved, Started::RunAgain).unwrap();
    let mut out = Outputs::default();
    s.step(
        &Inputs {
            approve: &e,
            ..Inputs::default()
        },
        &mut out,
    );
    // g1 had started: pending again and asks again, in order; g2 had only asked.
    assert_eq!(out.acquire, e);
    assert!(out.start.is_empty());
}

/// Two processes share `github` (limit 2) through a FIFO store. Each one's `a` hits a rate
/// limit while its `b` holds a permit: `b` gives it back and asks again behind `a`, so the
/// store is never full of permits held by entries that wait for one with no request.
#[test]
fn a_rate_limit_gives_back_the_permits_behind_it_so_processes_never_deadlock() {
    use std::collections::VecDeque;
    const LIMIT: usize = 2;
    let mut ps = [
        Scheduler::new(policy(SHARED)),
        Scheduler::new(policy(SHARED)),
    ];
    let mut out = Outputs::default();
    let mut queue: VecDeque<(usize, EntryId)> = VecDeque::new();
    let mut held: Vec<(usize, EntryId)> = Vec::new();
    let mut entries = Vec::new();
    let mut acquired: Vec<Vec<EntryId>> = vec![Vec::new(), Vec::new()];
    for (p, s) in ps.iter_mut().enumerate() {
        let calls: Vec<Call<'_>> = ["a", "b", "c"]
            .iter()
            .map(|id| Call {
                id,
                tool: "gh",
                operations: None,
                arguments: None,
            })
            .collect();
        let b = s.submit_batch(&calls).unwrap();
        let e: Vec<EntryId> = (0..3).map(|i| EntryId(b.first.0 + i)).collect();
        s.step(
            &Inputs {
                now: Some(0),
                approve: &e,
                ..Inputs::default()
            },
            &mut out,
        );
        acquired[p].clone_from(&out.acquire);
        entries.push(e);
    }
    // Requests reach the store interleaved: P0a, P1a, P0b, P1b.
    for i in 0..2 {
        for (p, a) in acquired.iter().enumerate() {
            queue.push_back((p, a[i]));
        }
    }
    let mut now = 0;
    let mut running: Vec<(usize, EntryId)> = Vec::new();
    let mut rate_limited = [false, false];
    let mut done = 0;
    for _ in 0..100 {
        // The store grants in arrival order while it has room.
        let mut granted: [Vec<EntryId>; 2] = [Vec::new(), Vec::new()];
        while held.len() < LIMIT {
            let Some(x) = queue.pop_front() else { break };
            held.push(x);
            granted[x.0].push(x.1);
        }
        for p in 0..2 {
            // Each process's `a` hits a 429 the first time it runs; everything else ends ok.
            let a = entries[p][0];
            let (retry, ok): (Vec<_>, Vec<_>) = running
                .iter()
                .filter(|r| r.0 == p)
                .map(|r| r.1)
                .partition(|&e| e == a && !rate_limited[p]);
            if !retry.is_empty() {
                rate_limited[p] = true;
            }
            let retry: Vec<(EntryId, u64)> = retry.iter().map(|&e| (e, now + 100)).collect();
            running.retain(|r| r.0 != p);
            ps[p].step(
                &Inputs {
                    now: Some(now),
                    granted: &granted[p],
                    ok: &ok,
                    retry: &retry,
                    ..Inputs::default()
                },
                &mut out,
            );
            assert!(out.errors.is_empty(), "{:?}", out.errors);
            done += ok.len();
            for &r in &out.release {
                held.retain(|&x| x != (p, r));
                queue.retain(|&x| x != (p, r));
            }
            queue.extend(out.acquire.iter().map(|&e| (p, e)));
            running.extend(out.start.iter().map(|&e| (p, e)));
        }
        if done == 6 {
            break;
        }
        now += 50;
    }
    assert_eq!(done, 6, "held {held:?} waiting {queue:?}");
    assert!(held.is_empty() && queue.is_empty());
}

/// A shared key with no retries: a 429 settles its entry at once and pauses the key.
const ONE_TRY: &str = r#"
[conversation.tools.api]
concurrency = { key = "api", limit = 2, shared = true, retries = 0 }
"#;

fn one_try() -> (Scheduler, Vec<EntryId>) {
    let mut s = Scheduler::new(policy(ONE_TRY));
    let calls: Vec<Call<'_>> = ["a", "b"]
        .iter()
        .map(|id| Call {
            id,
            tool: "api",
            operations: None,
            arguments: None,
        })
        .collect();
    let b = s.submit_batch(&calls).unwrap();
    let e = vec![b.first, EntryId(b.first.0 + 1)];
    let mut out = Outputs::default();
    s.step(
        &Inputs {
            now: Some(0),
            approve: &e,
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.acquire, e);
    (s, e)
}

/// A pause holds every entry of its key, granted ones included: a grant that arrives while
/// the key is paused (its request was out before the pause) starts nothing until it ends.
#[test]
fn a_granted_entry_waits_for_a_host_pause() {
    let (mut s, e) = one_try();
    let mut out = Outputs::default();
    s.step(
        &Inputs {
            now: Some(10),
            pause: &[("api", 100)],
            ..Inputs::default()
        },
        &mut out,
    );
    assert!(out.start.is_empty() && out.release.is_empty());
    // b's grant arrives first, then a's: nothing starts before 100. Only once a is granted
    // does anything wait on the clock (before, a waits on the store).
    for (now, grant, wake) in [(20, e[1], None), (30, e[0], Some(100))] {
        s.step(
            &Inputs {
                now: Some(now),
                granted: &[grant],
                ..Inputs::default()
            },
            &mut out,
        );
        assert!(out.start.is_empty(), "started {:?} at {now}", out.start);
        assert!(
            out.release.is_empty(),
            "a held permit is kept, not given back"
        );
        assert_eq!(out.wake_at, wake, "at {now}");
    }
    assert_eq!(s.state(e[0]), Some(State::Granted));
    s.step(
        &Inputs {
            now: Some(99),
            ..Inputs::default()
        },
        &mut out,
    );
    assert!(out.start.is_empty());
    // The pause ends: both start, in written order.
    s.step(
        &Inputs {
            now: Some(100),
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.start, e);
    assert_eq!(out.wake_at, None);
    s.step(
        &Inputs {
            ok: &e,
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.release, e, "every permit back exactly once");
}

/// A 429 past the retry cap settles its entry and pauses the key: the entry behind it whose
/// permit was already requested waits for the pause when its grant arrives, as a local key's
/// entry would.
#[test]
fn a_granted_entry_waits_for_the_pause_of_a_rate_limit_given_up_on() {
    let (mut s, e) = one_try();
    let mut out = Outputs::default();
    s.step(
        &Inputs {
            now: Some(5),
            granted: &[e[0]],
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.start, vec![e[0]]);
    s.step(
        &Inputs {
            now: Some(10),
            retry: &[(e[0], 500)],
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(
        out.settle,
        vec![(
            e[0],
            Reason::RateLimited {
                retries: 0,
                asked_s: None
            }
        )]
    );
    assert_eq!(out.release, vec![e[0]]);
    s.step(
        &Inputs {
            now: Some(20),
            granted: &[e[1]],
            ..Inputs::default()
        },
        &mut out,
    );
    assert!(out.start.is_empty(), "b started during the 429's pause");
    assert_eq!(out.wake_at, Some(500));
    s.step(
        &Inputs {
            now: Some(500),
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.start, vec![e[1]]);
    s.step(
        &Inputs {
            ok: &[e[1]],
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.release, vec![e[1]]);
    assert_eq!(out.retired, vec![BatchId(1)]);
}

/// Entries held by a pause with their permits still give each back exactly once when their
/// batch is cancelled, and nothing of them starts when the pause ends.
#[test]
fn a_cancel_during_the_pause_gives_the_held_permits_back_once() {
    let (mut s, e) = one_try();
    let mut out = Outputs::default();
    s.step(
        &Inputs {
            now: Some(10),
            pause: &[("api", 100)],
            granted: &e,
            ..Inputs::default()
        },
        &mut out,
    );
    assert!(out.start.is_empty());
    s.step(
        &Inputs {
            now: Some(50),
            cancel: &[BatchId(1)],
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.release, e);
    assert_eq!(out.retired, vec![BatchId(1)]);
    s.step(
        &Inputs {
            now: Some(100),
            ..Inputs::default()
        },
        &mut out,
    );
    assert!(out.start.is_empty() && out.release.is_empty());
}

/// A permit request carries the store's terms: the key's name, its limit and its delay (which
/// the store keeps across processes; this process does not space the starts itself).
#[test]
fn permit_requests_carry_the_keys_terms() {
    let mut t = T::new();
    let e = t.batch(&[("g1", "gh", None), ("g2", "gh", None)]);
    let requests: Vec<(EntryId, String, Option<u32>, u32)> = t
        .out
        .releases
        .acquire
        .iter()
        .map(|p| (p.entry, p.key.clone(), p.limit, p.delay_ms))
        .collect();
    assert_eq!(
        requests,
        [
            (e[0], "github".to_owned(), Some(2), 250),
            (e[1], "github".to_owned(), Some(2), 250),
        ]
    );
    // Both granted at once: both start at once (no local spacing on a shared key).
    let out = t.step(Inputs {
        granted: &e,
        ..Inputs::default()
    });
    assert_eq!(out.start, e);
    assert_eq!(out.wake_at, None);
}

/// A shared key's rate windows are the store's terms too, with each call's weight: the
/// request carries them (each window once, the key's burst on each), and this process keeps no
/// spacing of its own, so granted permits start at once.
#[test]
fn permit_requests_carry_the_keys_rate_windows_and_weights() {
    let mut t = T::with(
        r#"
[conversation.tools.post]
concurrency = { key = "api", limit = 10, shared = true, rate = ["900/min", "5000/h", "900/min"], burst = 10, weight = 5 }
[conversation.tools.get]
concurrency = { key = "api", limit = 10, shared = true, rate = ["5000/h", "900/min"], burst = 10 }
"#,
    );
    let e = t.batch(&[("p", "post", None), ("g", "get", None), ("q", "post", None)]);
    let window = |count, per_ms| RateWindow {
        count,
        per_ms,
        burst: 10,
    };
    let requests: Vec<_> = t
        .out
        .releases
        .acquire
        .iter()
        .map(|p| (p.entry, p.limit, p.delay_ms, p.rates.clone(), p.weight))
        .collect();
    let rates = vec![window(900, 60_000), window(5000, 3_600_000)];
    assert_eq!(
        requests,
        [
            (e[0], Some(10), 0, rates.clone(), 5),
            (e[1], Some(10), 0, rates.clone(), 1),
            (e[2], Some(10), 0, rates, 5),
        ]
    );
    let out = t.step(Inputs {
        granted: &e,
        ..Inputs::default()
    });
    assert_eq!(out.start, e);
    assert_eq!(out.wake_at, None);
}

/// A shared key's pause reaches its store once per round, with its latest end, and only while
/// it moved later and lies ahead: a local key's never does, a pause that does not extend or
/// has already ended is not sent, and lifting stays local (the store's pause is the host's).
#[test]
fn store_pauses_follow_the_shared_keys_pause() {
    let text = format!(
        "{SHARED}[conversation.tools.local]\nconcurrency = {{ key = \"solo\", limit = 1 }}\n"
    );
    let mut s = Scheduler::new(policy(&text));
    let mut out = Outputs::default();
    let mut step = |s: &mut Scheduler, pause: &[(&str, u64)], now: u64| {
        s.step(
            &Inputs {
                pause,
                now: Some(now),
                ..Inputs::default()
            },
            &mut out,
        );
        out.pause_store.clone()
    };
    let github = |until: u64| vec![("github".to_owned(), until)];
    // Two pauses in one round: one action, the later end; a local key: none.
    assert_eq!(
        step(
            &mut s,
            &[("github", 500), ("solo", 900), ("github", 800)],
            10
        ),
        github(800)
    );
    // Not later than the pause already sent, or already over by the round's clock: nothing.
    assert_eq!(step(&mut s, &[("github", 700)], 20), []);
    assert_eq!(step(&mut s, &[("fs", 25)], 30), []);
    // Lifting is local; a later pause is sent again.
    s.on_event(turnstile_engine::schedule::Input::LiftPause("github"))
        .unwrap();
    assert_eq!(step(&mut s, &[("github", 1000)], 40), github(1000));
}

/// An adaptive limit on a shared key adapts in this process, by the ends it reports, as on a
/// local key, and its permit requests carry the limit as it is now: the store counts every
/// process's grants against it, so a process that saw a 429 waits while the key holds as many
/// permits as its lowered limit, whoever holds them. The 429 also pauses the key at the store.
#[test]
fn an_adaptive_shared_key_asks_its_store_for_the_limit_it_adapted_to() {
    let mut t = T::with(
        r#"
[conversation.tools.api]
concurrency = { key = "api", limit = { max = 4, min = 1, adapt = "aimd" }, shared = true }
"#,
    );
    let ids: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    let calls: Vec<(&str, &str, Option<u32>)> =
        ids.iter().map(|id| (id.as_str(), "api", None)).collect();
    let e = t.batch(&calls);
    let limits = |t: &T| -> Vec<(EntryId, Option<u32>)> {
        let acquire = &t.out.releases.acquire;
        acquire.iter().map(|p| (p.entry, p.limit)).collect()
    };
    assert_eq!(
        limits(&t),
        e[..4].iter().map(|&x| (x, Some(4))).collect::<Vec<_>>()
    );
    let out = t.step(Inputs {
        now: Some(0),
        granted: &e[..4],
        ..Inputs::default()
    });
    assert_eq!(out.start, e[..4]);
    // c0 hits a 429 (retry at 1000): the limit halves to 2, the key pauses here and at the
    // store, and c0 asks again, behind nothing, with the new limit.
    let out = t.step(Inputs {
        now: Some(10),
        retry: &[(e[0], 1000)],
        ..Inputs::default()
    });
    assert_eq!(out.release, vec![e[0]]);
    let pauses: Vec<(String, u64)> = out
        .releases
        .pause_store
        .iter()
        .map(|p| (p.key.clone(), p.until))
        .collect();
    assert_eq!(pauses, [("api".to_owned(), 1000)]);
    let st = t.s.inspect(BatchId(1)).unwrap();
    let why = st[0].why.clone().unwrap_or_default();
    assert!(why.contains("adapts between 1 and 4 and is 2 now"), "{why}");
    // Three still run, above the new limit of 2: nothing asks until two of them end.
    let out = t.step(Inputs {
        now: Some(1000),
        ok: &[e[1]],
        ..Inputs::default()
    });
    assert!(out.acquire.is_empty(), "{:?}", out.acquire);
    let out = t.step(Inputs {
        now: Some(1001),
        ok: &[e[2]],
        ..Inputs::default()
    });
    assert_eq!(out.release, vec![e[2]]);
    assert_eq!(limits(&t), [(e[0], Some(2))]);
    // Clean ends of executions started before the halving do not grow it; two clean ends
    // started after it grow it to 3, and the next request says so.
    let out = t.step(Inputs {
        now: Some(1002),
        granted: &[e[0]],
        ok: &[e[3]],
        ..Inputs::default()
    });
    assert_eq!(out.start, vec![e[0]]);
    assert_eq!(limits(&t), [(e[4], Some(2))]);
    t.step(Inputs {
        now: Some(1003),
        granted: &[e[4]],
        ..Inputs::default()
    });
    t.step(Inputs {
        now: Some(1004),
        ok: &[e[0], e[4]],
        ..Inputs::default()
    });
    assert_eq!(
        limits(&t),
        [(e[5], Some(3)), (e[6], Some(3)), (e[7], Some(3))]
    );
    let st = t.s.inspect(BatchId(1)).unwrap();
    let why = st[8].why.clone().unwrap_or_default();
    assert!(
        why.contains("is 3 now, growing back by clean ends"),
        "{why}"
    );
}
