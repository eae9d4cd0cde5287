//! Time: `delay` (spacing), `now` and `wake_at`, pauses, and retries after a rate limit. Failure
//! paths first: bad values in the config, a clock that goes backwards, pauses of unknown keys,
//! retries of entries that are not running, a retry cap that runs out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

use turnstile_engine::config::{self, Layer, Policy};
#[path = "common/step.rs"]
mod step;

use step::{InputKind, Inputs, Outputs, Step};
use turnstile_engine::schedule::{
    AbortCause, BatchId, Call, EntryId, Input, InputErrorCode, Limits, Reason, Scheduler, State,
    Wait,
};

fn policy(text: &str) -> Policy {
    config::resolve(&[Layer::new("t.toml", text)]).expect("valid config")
}

fn codes(text: &str) -> Vec<(String, String)> {
    match config::resolve(&[Layer::new("t.toml", text)]) {
        Ok(_) => Vec::new(),
        Err(diags) => diags
            .iter()
            .map(|d| (d.code.as_str().to_owned(), d.message.clone()))
            .collect(),
    }
}

/// A scheduler over `text`, with one batch of `calls` (`id tool`) submitted and approved.
struct T {
    s: Scheduler,
    out: Outputs,
    first: u64,
}

impl T {
    fn new(text: &str, calls: &[(&str, &str)]) -> Self {
        let mut s = Scheduler::new(policy(text));
        let calls: Vec<Call<'_>> = calls
            .iter()
            .map(|&(id, tool)| Call {
                id,
                tool,
                operations: None,
                arguments: None,
            })
            .collect();
        let b = s.submit_batch(&calls).expect("submit");
        Self {
            s,
            out: Outputs::default(),
            first: b.first.0,
        }
    }

    fn e(&self, i: u64) -> EntryId {
        EntryId(self.first + i)
    }

    fn step(&mut self, inputs: Inputs<'_>) -> &Outputs {
        self.s.step(&inputs, &mut self.out);
        &self.out
    }

    fn started(&self) -> Vec<u64> {
        self.out.start.iter().map(|e| e.0 - self.first).collect()
    }

    fn approve_all(&mut self, n: u64, now: u64) {
        let all: Vec<EntryId> = (0..n).map(|i| self.e(i)).collect();
        self.step(Inputs {
            now: Some(now),
            approve: &all,
            ..Inputs::default()
        });
    }

    fn at(&mut self, now: u64) -> Vec<u64> {
        self.step(Inputs {
            now: Some(now),
            ..Inputs::default()
        });
        self.started()
    }

    fn ok(&mut self, i: u64, now: u64) -> Vec<u64> {
        let e = [self.e(i)];
        self.step(Inputs {
            now: Some(now),
            ok: &e,
            ..Inputs::default()
        });
        self.started()
    }

    fn retry(&mut self, i: u64, now: u64, until: u64) -> &Outputs {
        let r = [(self.e(i), until)];
        self.step(Inputs {
            now: Some(now),
            retry: &r,
            ..Inputs::default()
        })
    }
}

const SPACED: &str = r#"
[conversation.tools.get.concurrency]
key = "api"
limit = 2
delay = "100ms"
"#;

#[test]
fn bad_delays_and_retries_are_diagnostics() {
    for (value, needle) in [
        ("-5", "negative"),
        ("\"5\"", "no unit"),
        ("\"5x\"", "not ms, s, m, h or d"),
        ("\"1.5ms\"", "finer than a millisecond"),
        ("\"0.0001s\"", "finer than a millisecond"),
        ("\"1..5s\"", "digits"),
        ("\".5s\"", "digits"),
        ("\"5.s\"", "digits"),
        ("\"50d\"", "longer than about 49 days"),
        ("\"5w\"", "not ms, s, m, h or d"),
        ("\"1200h\"", "49 days"),
        ("\"99999999999999ms\"", "49 days"),
        ("4294967296", "above the largest"),
        ("true", "expected milliseconds or a duration string"),
        ("1.5", "expected milliseconds or a duration string"),
        ("\"-5ms\"", "negative"),
        ("\"\"", "empty"),
        ("\"1.00001s\"", "finer than a millisecond"),
    ] {
        let text = format!(
            "[conversation.tools.t.concurrency]\nkey = \"k\"\nlimit = 1\ndelay = {value}\n"
        );
        let got = codes(&text);
        assert_eq!(got.len(), 1, "delay = {value}: {got:?}");
        assert!(
            got[0].1.contains(needle),
            "delay = {value}: want {needle:?} in {:?}",
            got[0].1
        );
    }
    // Zeros that add nothing are fine; a negative delay's help speaks of delays.
    for (value, ms) in [
        ("\"1.0001h\"", 3_600_360),
        ("\"1.5000s\"", 1_500),
        ("\"0000000000001ms\"", 1),
        ("\"0.25m\"", 15_000),
        ("7", 7),
    ] {
        let p = policy(&format!(
            "[conversation.tools.t.concurrency]\nkey = \"k\"\ndelay = {value}\n"
        ));
        let c = p.tool("t").unwrap().concurrency.first().unwrap();
        assert_eq!(c.delay_ms, ms, "delay = {value}");
    }
    let diags = config::resolve(&[Layer::new(
        "t.toml",
        "[conversation.tools.t.concurrency]\nkey = \"k\"\ndelay = -5\n",
    )])
    .unwrap_err();
    assert_eq!(
        diags[0].help.as_deref(),
        Some("a delay is 0 (none) or more milliseconds")
    );
    let got = codes("[conversation.tools.t.concurrency]\nkey = \"k\"\nretries = 101\n");
    assert_eq!(got.len(), 1);
    assert!(got[0].1.contains("above the largest, 100"), "{got:?}");
    let got = codes("[conversation.tools.t.concurrency]\nkey = \"k\"\nwait = 1\n");
    assert_eq!(got[0].0, "concurrency-unknown-field");
    assert!(
        got[0].1.contains(
            "`delay`, `rate`, `burst`, `weight`, `retries`, `max_wait`, `shared` and `path`"
        ),
        "{got:?}"
    );
}

#[test]
fn tools_naming_a_key_agree_on_delay_and_retries() {
    let text = r#"
[conversation.tools.a.concurrency]
key = "api"
limit = 2
delay = 100
[conversation.tools.b.concurrency]
key = "api"
limit = 2
delay = "1s"
retries = 5
"#;
    let got = codes(text);
    let got: Vec<&str> = got.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(
        got,
        ["concurrency-delay-conflict", "concurrency-retries-conflict"]
    );
    let diags = config::resolve(&[Layer::new("t.toml", text)]).unwrap_err();
    assert_eq!(diags[0].tools, ["a", "b"]);
    assert!(
        diags[0].message.contains("a = 100 ms, b = 1000 ms"),
        "{}",
        diags[0].message
    );
    assert!(
        diags[1]
            .message
            .contains("a = 3 (not set: the default), b = 5"),
        "{}",
        diags[1].message
    );
    // Each label points at the line that gives the value (or the table, for a default).
    let lines: Vec<u32> = diags[0].labels.iter().map(|l| l.span.line).collect();
    assert_eq!(lines, [5, 9]);
    // The same values in every tool: no diagnostic; written the same in different forms.
    assert!(
        codes(
            &text
                .replace("\"1s\"", "\"100ms\"")
                .replace("retries = 5\n", "")
        )
        .is_empty()
    );
}

#[test]
fn a_delay_keeps_a_key_with_limit_zero_and_is_exposed() {
    let p =
        policy("[conversation.tools.t.concurrency]\nkey = \"k\"\nlimit = 0\ndelay = \"1.5s\"\n");
    let c = p.tool("t").unwrap().concurrency.first().unwrap();
    assert_eq!((c.limit.get(), c.delay_ms, c.retries), (u32::MAX, 1500, 3));
    let p = policy("[conversation.tools.t.concurrency]\nkey = \"k\"\nlimit = 0\n");
    assert!(p.tool("t").unwrap().concurrency.is_empty());
    let p = policy("[conversation.tools.t]\nconcurrency = 2\n");
    let c = p.tool("t").unwrap().concurrency.first().unwrap();
    assert_eq!((c.delay_ms, c.retries), (0, 3));
}

#[test]
fn a_clock_that_goes_backwards_is_refused_and_changes_nothing() {
    let mut t = T::new(SPACED, &[("a", "get"), ("b", "get"), ("c", "get")]);
    t.approve_all(3, 1000);
    assert_eq!(t.started(), [0]);
    assert_eq!(t.out.wake_at, Some(1100));
    let e = [t.e(0)];
    t.step(Inputs {
        now: Some(999),
        ok: &e,
        ..Inputs::default()
    });
    assert_eq!(t.out.errors.len(), 1);
    assert_eq!(
        (t.out.errors[0].input, t.out.errors[0].code),
        (InputKind::Now, InputErrorCode::TimeBackwards)
    );
    // The end still applied; the clock stayed at 1000, so b still waits for 1100.
    assert_eq!(
        t.s.state(t.e(0)),
        Some(State::Ended(turnstile_engine::schedule::Outcome::Ok))
    );
    assert!(t.started().is_empty());
    assert_eq!(t.out.wake_at, Some(1100));
    assert_eq!(t.at(1100), [1]);
}

#[test]
fn spacing_holds_between_consecutive_starts_on_a_key() {
    let mut t = T::new(
        SPACED,
        &[("a", "get"), ("b", "get"), ("c", "get"), ("u", "free")],
    );
    t.approve_all(4, 0);
    // The unkeyed call starts at once; the key starts one entry, then waits 100 ms.
    assert_eq!(t.started(), [0, 3]);
    assert_eq!(t.out.wake_at, Some(100));
    assert!(t.at(99).is_empty());
    assert_eq!(t.out.wake_at, Some(100));
    assert_eq!(t.at(100), [1]);
    // The limit (2) holds as well as the spacing: c waits for a slot, not for time.
    assert!(t.at(500).is_empty());
    assert_eq!(t.out.wake_at, None);
    let inspected = t.s.inspect(BatchId(1)).unwrap();
    assert!(matches!(inspected[2].wait, Some(Wait::KeyFull { .. })));
    assert_eq!(t.ok(0, 501), [2]);
    assert_eq!(t.out.wake_at, None);
}

#[test]
fn inspect_says_when_an_entry_waits_on_time() {
    let mut t = T::new(SPACED, &[("a", "get"), ("b", "get"), ("c", "get")]);
    t.approve_all(3, 40);
    let st = t.s.inspect(BatchId(1)).unwrap();
    assert_eq!(
        st[1].wait,
        Some(Wait::KeySpacing {
            key: "api".to_owned(),
            until: 140
        })
    );
    assert!(matches!(st[2].wait, Some(Wait::Behind { ref label, .. }) if label == "b"));
    t.step(Inputs {
        pause: &[("api", 5000)],
        ..Inputs::default()
    });
    let st = t.s.inspect(BatchId(1)).unwrap();
    assert_eq!(
        st[1].wait,
        Some(Wait::KeyPaused {
            key: "api".to_owned(),
            until: 5000
        })
    );
}

#[test]
fn pauses_only_extend_and_unknown_keys_are_refused() {
    let mut t = T::new(SPACED, &[("a", "get"), ("b", "get")]);
    t.step(Inputs {
        now: Some(10),
        pause: &[("api", 1000), ("nope", 5), ("api", 500)],
        ..Inputs::default()
    });
    assert_eq!(t.out.errors.len(), 1);
    assert_eq!(
        (
            t.out.errors[0].input,
            t.out.errors[0].index,
            t.out.errors[0].code
        ),
        (InputKind::Pause, 1, InputErrorCode::UnknownKey)
    );
    t.approve_all(2, 20);
    assert!(t.started().is_empty());
    assert_eq!(t.out.wake_at, Some(1000));
    assert_eq!(t.at(1000), [0]);
    assert_eq!(t.out.wake_at, Some(1100));
}

#[test]
fn a_retried_entry_keeps_its_place_and_pauses_its_key() {
    let text = "[conversation.tools.get.concurrency]\nkey = \"api\"\nlimit = 2\n";
    let mut t = T::new(text, &[("a", "get"), ("b", "get"), ("c", "get")]);
    t.approve_all(3, 0);
    assert_eq!(t.started(), [0, 1]);
    // b hits a rate limit first, then a: both go back in front of c, in written order.
    t.retry(1, 5, 2000);
    assert!(t.out.start.is_empty() && t.out.errors.is_empty());
    assert_eq!(t.out.wake_at, Some(2000));
    assert_eq!(t.s.state(t.e(1)), Some(State::Approved));
    t.retry(0, 6, 1500);
    assert_eq!(t.out.wake_at, Some(2000), "a pause only extends");
    // Before the pause ends nothing starts, not even c, which never ran.
    assert!(t.at(1999).is_empty());
    assert_eq!(t.at(2000), [0, 1]);
    assert_eq!(t.ok(0, 2001), [2]);
}

#[test]
fn retries_run_out_into_rate_limited_and_count_as_a_failure_under_stop() {
    let text = r#"
[conversation.tools.f]
concurrency = { key = "api", limit = 1, retries = 1 }
fan_out = { on_error = "stop" }
"#;
    let mut s = Scheduler::new(policy(text));
    let b = s
        .submit_batch(&[Call {
            id: "f",
            tool: "f",
            operations: Some(3),
            arguments: None,
        }])
        .unwrap();
    let e = |i: u64| EntryId(b.first.0 + i);
    let mut out = Outputs::default();
    let all = [e(0), e(1), e(2)];
    s.step(
        &Inputs {
            approve: &all,
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.start, [e(0)]);
    s.step(
        &Inputs {
            retry: &[(e(0), 10)],
            ..Inputs::default()
        },
        &mut out,
    );
    assert!(
        out.settle.is_empty(),
        "one retry is allowed: not a failure yet"
    );
    s.step(
        &Inputs {
            now: Some(10),
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.start, [e(0)]);
    s.step(
        &Inputs {
            retry: &[(e(0), 20)],
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(
        out.settle,
        [
            (
                e(0),
                Reason::RateLimited {
                    retries: 1,
                    asked_s: None
                }
            ),
            (e(1), Reason::Stopped { after: 1 }),
            (e(2), Reason::Stopped { after: 1 }),
        ]
    );
    assert_eq!(out.retired, [b.batch]);
}

#[test]
fn a_retry_must_name_a_running_entry_and_never_touches_another() {
    let text = "[conversation.tools.get.concurrency]\nkey = \"api\"\nlimit = 1\n";
    let mut t = T::new(text, &[("a", "get"), ("b", "get")]);
    t.approve_all(2, 0);
    let stale = EntryId(999);
    let r = [(t.e(1), 50), (stale, 50), (t.e(0), 50), (t.e(0), 60)];
    t.step(Inputs {
        retry: &r,
        ..Inputs::default()
    });
    let errs: Vec<(u32, InputErrorCode)> = t.out.errors.iter().map(|e| (e.index, e.code)).collect();
    assert_eq!(
        errs,
        [
            (0, InputErrorCode::NotRunning),
            (1, InputErrorCode::UnknownEntry),
            (3, InputErrorCode::NotRunning)
        ]
    );
    assert_eq!(t.s.state(t.e(0)), Some(State::Approved));
    assert_eq!(t.s.state(t.e(1)), Some(State::Approved));
    assert_eq!(t.at(50), [0]);
}

#[test]
fn an_unkeyed_entry_waits_alone_and_a_cancelled_batch_gives_up() {
    let mut t = T::new("", &[("a", "free"), ("b", "free")]);
    t.approve_all(2, 0);
    assert_eq!(t.started(), [0, 1]);
    t.retry(0, 1, 300);
    assert_eq!(t.out.wake_at, Some(300));
    let st = t.s.inspect(BatchId(1)).unwrap();
    assert_eq!(st[0].wait, Some(Wait::RetryAt { until: 300 }));
    assert_eq!(t.at(300), [0]);
    // A retry with a time already past runs again in the same step.
    t.retry(1, 301, 0);
    assert_eq!(t.started(), [1]);
    // Cancelled while running: a rate limit then settles it as cancelled, it never runs again.
    t.step(Inputs {
        cancel: &[BatchId(1)],
        ..Inputs::default()
    });
    t.retry(0, 302, 400);
    assert_eq!(t.out.settle, [(t.e(0), Reason::Cancelled)]);
    assert_eq!(t.out.wake_at, None);
}

#[test]
fn retry_bookkeeping_is_forgotten_when_batches_retire() {
    let text = "[conversation.tools.get.concurrency]\nkey = \"api\"\nlimit = 1\nretries = 100\n";
    let mut s = Scheduler::new(policy(text));
    let mut out = Outputs::default();
    let mut now = 0;
    for round in 0..2_000u64 {
        let b = s
            .submit_batch(&[Call {
                id: "x",
                tool: "get",
                operations: None,
                arguments: None,
            }])
            .unwrap();
        let e = b.first;
        s.step(
            &Inputs {
                approve: &[e],
                ..Inputs::default()
            },
            &mut out,
        );
        now += 1;
        s.step(
            &Inputs {
                now: Some(now),
                retry: &[(e, now)],
                ..Inputs::default()
            },
            &mut out,
        );
        assert_eq!(out.start, [e], "round {round}");
        s.step(
            &Inputs {
                ok: &[e],
                ..Inputs::default()
            },
            &mut out,
        );
        assert_eq!(out.retired, [b.batch]);
    }
    assert_eq!(s.live_entries(), 0);
    assert_eq!(s.pending_wakeups_for_tests(), (0, 0, 0));
}

#[test]
fn a_pause_extended_every_step_keeps_the_wakeups_bounded() {
    // Stale wake-ups of `late` pile up behind the earlier live one of `early` unless dropped.
    let text = "[conversation.tools.e.concurrency]\nkey = \"early\"\n\
                [conversation.tools.l.concurrency]\nkey = \"late\"\n";
    let mut t = T::new(text, &[("e1", "e"), ("l1", "l")]);
    t.step(Inputs {
        pause: &[("early", 500_000), ("late", 1_000_000)],
        ..Inputs::default()
    });
    t.approve_all(2, 0);
    for i in 1..=10_000u64 {
        t.step(Inputs {
            now: Some(i),
            pause: &[("late", 1_000_000 + i)],
            ..Inputs::default()
        });
        assert_eq!(t.out.wake_at, Some(500_000));
    }
    let (_, _, heap) = t.s.pending_wakeups_for_tests();
    assert!(
        heap <= 2 * 2 + 64 + 1,
        "{heap} wake-ups queued for two keys"
    );
    assert_eq!(t.at(500_000), [0]);
    assert_eq!(t.out.wake_at, Some(1_010_000));
    assert_eq!(t.at(1_010_000), [1]);
}

#[test]
fn retried_entries_requeue_in_written_order_whatever_order_they_hit_the_limit() {
    let mut t = T::new(SPACED, &[("a", "get"), ("b", "get"), ("c", "get")]);
    t.approve_all(3, 0);
    assert_eq!(t.started(), [0]);
    assert_eq!(t.at(100), [1]);
    // a hits the limit first, then b; spacing then releases one at a time: a, b, c.
    t.retry(0, 101, 1000);
    t.retry(1, 102, 1000);
    assert_eq!(t.at(1000), [0]);
    assert_eq!(t.at(1100), [1]);
    assert_eq!(t.ok(0, 1150), Vec::<u64>::new());
    assert_eq!(t.at(1200), [2]);
}

#[test]
fn waiting_retries_cancelled_with_their_batch_leave_nothing_behind() {
    // A key per round: each round's pause must not hold the next round's call.
    let text: String = (0..2_000)
        .map(|i| format!("[conversation.tools.get{i}.concurrency]\nkey = \"k{i}\"\n"))
        .collect();
    let mut s = Scheduler::new(policy(&text));
    let mut out = Outputs::default();
    for round in 0..2_000u64 {
        let tool = format!("get{round}");
        let b = s
            .submit_batch(&[
                Call {
                    id: "x",
                    tool: &tool,
                    operations: None,
                    arguments: None,
                },
                Call {
                    id: "y",
                    tool: "free",
                    operations: None,
                    arguments: None,
                },
            ])
            .unwrap();
        let (x, y) = (b.first, EntryId(b.first.0 + 1));
        s.step(
            &Inputs {
                now: Some(round),
                approve: &[x, y],
                ..Inputs::default()
            },
            &mut out,
        );
        // Both hit a rate limit and wait far ahead (within the maximum wait): x in its key's
        // queue, y alone.
        s.step(
            &Inputs {
                retry: &[(x, round + 200_000), (y, round + 200_000)],
                ..Inputs::default()
            },
            &mut out,
        );
        assert!(
            out.start.is_empty() && out.errors.is_empty(),
            "round {round}"
        );
        s.step(
            &Inputs {
                cancel: &[b.batch],
                ..Inputs::default()
            },
            &mut out,
        );
        assert_eq!(out.retired, [b.batch], "round {round}");
        let (retries, waits, _) = s.pending_wakeups_for_tests();
        assert_eq!((retries, waits), (0, 0), "round {round}");
    }
    // Every key's wake-up went stale with its batch; at most a few stay queued.
    let (_, _, heap) = s.pending_wakeups_for_tests();
    assert!(heap <= 2 * 2_000 + 64, "{heap} wake-ups queued");
}

/// One key of limit 1, retries 3, and an unkeyed tool.
const BOUNDED: &str = r#"
[conversation.tools.get]
concurrency = { key = "api", limit = 1 }
"#;

const MAX: u64 = turnstile_engine::retry_after::MAX_WAIT_DEFAULT_MS as u64;

fn asked(retries: u32, s: u32) -> Reason {
    Reason::RateLimited {
        retries,
        asked_s: std::num::NonZeroU32::new(s),
    }
}

#[test]
fn lifting_a_pause_of_an_unknown_key_is_refused_and_changes_nothing() {
    let mut t = T::new(BOUNDED, &[("a", "get")]);
    let err = t.s.on_event(Input::LiftPause("nope")).unwrap_err();
    assert_eq!(err.code.as_str(), "unknown-key");
    assert!(err.message.contains("\"nope\""), "{}", err.message);
    // Lifting a key that is not paused changes nothing either.
    t.s.on_event(Input::LiftPause("api")).unwrap();
    t.approve_all(1, 0);
    assert_eq!(t.started(), [0]);
}

/// A Retry-After far in the future (a date in year 9999) is not waited for: the entry is
/// settled `rate-limited` at once with the wait it asked for, the key is not paused, and the
/// calls behind it go on.
#[test]
fn a_wait_past_the_maximum_settles_the_entry_and_pauses_nothing() {
    let mut t = T::new(BOUNDED, &[("a", "get"), ("b", "get")]);
    t.approve_all(2, 0);
    assert_eq!(t.started(), [0]);
    let wall_now = 1_700_000_000_000;
    let wait =
        turnstile_engine::retry_after::retry_after("Fri, 31 Dec 9999 23:59:59 GMT", wall_now)
            .unwrap();
    assert_eq!(wait / 3_600_000, 69_917_305, "hours");
    let e = t.e(0);
    let out = t.retry(0, 10, 10 + wait);
    assert_eq!(out.settle, vec![(e, asked(0, u32::MAX))]);
    assert_eq!(t.started(), [1], "the key is not paused: b starts at once");
    assert_eq!(t.out.wake_at, None);
    // One millisecond past the maximum is past it; the asked wait is rounded up to seconds.
    let e = t.e(1);
    let out = t.retry(1, 20, 20 + MAX + 1);
    assert_eq!(out.settle, vec![(e, asked(0, 301))]);
    assert_eq!(out.retired, vec![BatchId(1)]);
    assert_eq!(
        turnstile_engine::schedule::explain::settled_sentence(asked(0, 301), "b"),
        "not run again: rate limited, and the endpoint asked to wait 5 min 1 s, longer than the \
         scheduler waits on this key"
    );
}

#[test]
fn a_wait_of_exactly_the_maximum_is_waited_for() {
    let mut t = T::new(BOUNDED, &[("a", "get")]);
    // The retry is judged by the clock as last given (10).
    t.approve_all(1, 10);
    let out = t.retry(0, 10, 10 + MAX);
    assert!(out.settle.is_empty());
    assert_eq!(out.wake_at, Some(10 + MAX));
    assert_eq!(t.at(10 + MAX), [0]);
}

/// `max_wait` sets a key's bound: "10m" waits for a 6-minute Retry-After that the default
/// settles, "1s" settles a 2-second one with the wait in its sentence, and 0 waits for nothing
/// (a rate limit whose time is already here still runs again, up to `retries`).
#[test]
fn max_wait_sets_the_bound_per_key() {
    const KEYS: &str = r#"
[conversation.tools.long]
concurrency = { key = "long", limit = 1, max_wait = "10m" }
[conversation.tools.brief]
concurrency = { key = "brief", limit = 1, max_wait = "1s" }
[conversation.tools.never]
concurrency = { key = "never", limit = 1, max_wait = 0 }
[conversation.tools.default]
concurrency = { key = "default", limit = 1 }
"#;
    let calls = [
        ("l", "long"),
        ("b", "brief"),
        ("n", "never"),
        ("d", "default"),
    ];
    let mut t = T::new(KEYS, &calls);
    t.approve_all(4, 0);
    assert_eq!(t.started(), [0, 1, 2, 3]);
    let six_min = 6 * 60 * 1_000;
    let out = t.retry(0, 0, six_min);
    assert!(out.settle.is_empty(), "10m waits for 6 minutes");
    assert_eq!(out.wake_at, Some(six_min));
    let d = t.e(3);
    let out = t.retry(3, 0, six_min);
    assert_eq!(out.settle, vec![(d, asked(0, 360))], "the default does not");
    let b = t.e(1);
    let out = t.retry(1, 0, 2_000);
    assert_eq!(out.settle, vec![(b, asked(0, 2))]);
    assert_eq!(
        turnstile_engine::schedule::explain::settled_sentence(asked(0, 2), "b"),
        "not run again: rate limited, and the endpoint asked to wait 2 s, longer than the \
         scheduler waits on this key"
    );
    // 0: a wait whose time is here runs again at once; any wait at all settles.
    let n = t.e(2);
    assert_eq!(t.retry(2, 0, 0).start, vec![n]);
    let out = t.retry(2, 0, 1);
    assert_eq!(out.settle, vec![(n, asked(1, 1))]);
}

/// `max_wait` is parsed like `delay`, bounded by 24 hours, merged per field, kept on a
/// `limit = 0` key, agreed on by every tool naming a key, and part of the fingerprint (only
/// when it is not the default, so fingerprints from before it stay the same).
#[test]
fn max_wait_is_configured_like_delay() {
    let max_wait = |text: &str| {
        let p = policy(text);
        let c = p
            .tool("t")
            .unwrap()
            .concurrency
            .first()
            .map(|c| c.max_wait_ms);
        (c, p.fingerprint())
    };
    let (unset, fp_unset) = max_wait("[conversation.tools.t]\nconcurrency = { key = \"k\" }\n");
    assert_eq!(unset, Some(300_000));
    let (five, fp_five) =
        max_wait("[conversation.tools.t]\nconcurrency = { key = \"k\", max_wait = \"5m\" }\n");
    assert_eq!((five, fp_five), (Some(300_000), fp_unset));
    let (ten, fp_ten) =
        max_wait("[conversation.tools.t]\nconcurrency = { key = \"k\", max_wait = \"10m\" }\n");
    assert_eq!(ten, Some(600_000));
    assert_ne!(fp_ten, fp_unset);
    assert_eq!(
        max_wait("[conversation.tools.t]\nconcurrency = { key = \"k\", max_wait = 1500 }\n").0,
        Some(1_500)
    );
    assert_eq!(
        max_wait("[conversation.tools.t]\nconcurrency = { key = \"k\", max_wait = \"24h\" }\n").0,
        Some(86_400_000)
    );
    let lifted = "[conversation.tools.t]\nconcurrency = { key = \"k\", limit = 0, max_wait = 0 }\n";
    let p = policy(lifted);
    let c = p.tool("t").unwrap().concurrency.first().unwrap();
    assert_eq!((c.limit.get(), c.max_wait_ms), (u32::MAX, 0));
    for (value, code) in [
        ("-1", "concurrency-negative"),
        ("\"-5s\"", "concurrency-negative"),
        ("true", "concurrency-type"),
        ("\"10 min\"", "concurrency-type"),
        ("\"24.5h\"", "concurrency-type"),
        ("86400001", "concurrency-type"),
    ] {
        let text = format!(
            "[conversation.tools.t]\nconcurrency = {{ key = \"k\", max_wait = {value} }}\n"
        );
        let found = codes(&text);
        assert_eq!(found.len(), 1, "{value}: {found:?}");
        assert_eq!(found[0].0, code, "{value}: {found:?}");
    }
    let found = codes(
        "[conversation.tools.a]\nconcurrency = { key = \"k\", max_wait = \"10m\" }\n\
         [conversation.tools.b]\nconcurrency = { key = \"k\" }\n",
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "concurrency-max-wait-conflict");
    assert!(
        found[0]
            .1
            .contains("a = 600000 ms, b = 300000 ms (not set: the default)"),
        "{}",
        found[0].1
    );
}

/// The bound holds for a retry that already ran again, and for unkeyed entries; the retry
/// count in the reason says how often it had run again.
#[test]
fn the_maximum_holds_after_retries_and_for_unkeyed_entries() {
    let mut t = T::new(BOUNDED, &[("a", "get"), ("u", "free")]);
    t.approve_all(2, 0);
    assert_eq!(t.started(), [0, 1]);
    t.retry(0, 0, 100);
    assert_eq!(t.at(100), [0]);
    let e = t.e(0);
    let out = t.retry(0, 100, u64::MAX);
    assert_eq!(out.settle, vec![(e, asked(1, u32::MAX))]);
    let e = t.e(1);
    let out = t.retry(1, 100, 100 + MAX + 1_000);
    assert_eq!(out.settle, vec![(e, asked(0, 301))]);
    assert_eq!(t.s.pending_wakeups_for_tests(), (0, 0, 0));
}

/// A host lifts the pause it set; a rate limit's pause on the same key stays (the endpoint
/// asked for it, and its wait is bounded).
#[test]
fn lift_pause_ends_the_hosts_pause_but_not_a_rate_limits() {
    let mut t = T::new(BOUNDED, &[("a", "get"), ("b", "get")]);
    t.step(Inputs {
        now: Some(0),
        pause: &[("api", 1_000_000)],
        ..Inputs::default()
    });
    t.approve_all(2, 0);
    assert!(t.started().is_empty());
    assert_eq!(t.out.wake_at, Some(1_000_000));
    t.s.on_event(Input::LiftPause("api")).unwrap();
    assert_eq!(t.at(5), [0], "takes effect at the next step");
    assert_eq!(t.out.wake_at, None, "the old wake-up is gone");
    // a hits a rate limit (until 500), then the host pauses the key longer.
    t.retry(0, 10, 500);
    t.step(Inputs {
        now: Some(20),
        pause: &[("api", 9_000)],
        ..Inputs::default()
    });
    assert_eq!(t.out.wake_at, Some(9_000));
    t.s.on_event(Input::LiftPause("api")).unwrap();
    assert!(t.at(30).is_empty());
    assert_eq!(
        t.out.wake_at,
        Some(500),
        "the rate limit's pause still holds"
    );
    let statuses = t.s.inspect(BatchId(1)).unwrap();
    assert_eq!(
        statuses[0].wait,
        Some(Wait::KeyPaused {
            key: "api".into(),
            until: 500
        })
    );
    // Lifting again changes nothing; the rate limit's pause ends on its own.
    t.s.on_event(Input::LiftPause("api")).unwrap();
    assert_eq!(t.at(499), Vec::<u64>::new());
    assert_eq!(t.at(500), [0]);
    assert_eq!(t.s.state(t.e(1)), Some(State::Approved));
}

/// A pause on a made key (from a template) is lifted by its name, like `pause` reaches it.
#[test]
fn lift_pause_reaches_a_made_key() {
    let text = r#"
[conversation.tools.read]
concurrency = { key = "fs:{path}", limit = 1 }
"#;
    let mut s = Scheduler::new(policy(text));
    let b = s
        .submit_batch(&[Call {
            id: "r",
            tool: "read",
            operations: None,
            arguments: Some(r#"{"path":"/a"}"#),
        }])
        .unwrap();
    let mut out = Outputs::default();
    s.step(
        &Inputs {
            now: Some(0),
            pause: &[("fs:/a", 100)],
            approve: &[b.first],
            ..Inputs::default()
        },
        &mut out,
    );
    assert!(out.start.is_empty());
    s.on_event(Input::LiftPause("fs:/a")).unwrap();
    s.step(&Inputs::default(), &mut out);
    assert_eq!(out.start, vec![b.first]);
}

#[test]
fn deadlines_of_ended_executions_are_stale_and_stay_bounded() {
    // One execution holds a far deadline at the top of the heap; thousands of others end long
    // before theirs, whose items lie behind it: they are dropped, not kept.
    let text = "[conversation.tools.get.concurrency]\nkey = \"api\"\nlimit = 2\n";
    let mut s = Scheduler::new(policy(text));
    let mut out = Outputs::default();
    let submit = |s: &mut Scheduler, id: &'static str, ms: u32| {
        let limits = Limits {
            execution_ms: Some(ms),
            abort_grace_ms: Some(ms),
        };
        let call = Call {
            id,
            tool: "get",
            operations: None,
            arguments: None,
        };
        s.submit_batch_with(&[call], limits).unwrap()
    };
    let long = submit(&mut s, "long", 1_000);
    s.step(
        &Inputs {
            approve: &[long.first],
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.wake_at, Some(1_000));
    for round in 1..=5_000u64 {
        let b = submit(&mut s, "short", 1_000_000);
        s.step(
            &Inputs {
                now: Some(round / 10),
                approve: &[b.first],
                ..Inputs::default()
            },
            &mut out,
        );
        assert_eq!(out.start, [b.first], "round {round}");
        s.step(
            &Inputs {
                ok: &[b.first],
                ..Inputs::default()
            },
            &mut out,
        );
        assert_eq!(out.retired, [b.batch]);
        assert_eq!(
            out.wake_at,
            Some(1_000),
            "the live deadline, not a stale one"
        );
        let (live, heap) = s.deadlines_for_tests();
        assert_eq!(live, 1);
        // Compacted when an arm finds stale items outnumbering the live ones (two then).
        assert!(
            heap <= 2 * (live + 1) + 65,
            "round {round}: {heap} heap items"
        );
    }
    // The long one is aborted at its deadline, then given up after its grace: nothing is left.
    s.step(
        &Inputs {
            now: Some(1_000),
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.abort, [(long.first, AbortCause::Deadline)]);
    assert_eq!(
        s.state(long.first),
        Some(State::Aborted(AbortCause::Deadline))
    );
    s.step(
        &Inputs {
            now: Some(2_000),
            ..Inputs::default()
        },
        &mut out,
    );
    let cause = AbortCause::Deadline;
    assert_eq!(out.settle, [(long.first, Reason::TimedOut { cause })]);
    assert_eq!(out.retired, [long.batch]);
    assert_eq!(s.deadlines_for_tests().0, 0);
    assert_eq!(s.live_entries(), 0);
}

/// The host's clock comes with its inputs (`observe_clock`, the WIT's `now` of `on-ended` and
/// `on-events`): a rate limit reported long after the last round is judged from when it
/// happened, not from that round's clock (which would make a 1 s wait look like 10 minutes and
/// give it up), and a cancellation's abort grace counts from the cancellation (from the last
/// round's clock it would already have passed). An earlier clock is refused and moves nothing.
#[test]
fn inputs_are_judged_at_the_clock_they_come_with() {
    // A rate limit at 600_000, ten minutes after the last round, asking for one second.
    let mut t = T::new(BOUNDED, &[("a", "get")]);
    t.approve_all(1, 0);
    assert_eq!(t.started(), [0]);
    t.s.observe_clock(600_000).unwrap();
    t.s.on_ended(
        t.e(0),
        turnstile_engine::schedule::End::RateLimited(601_000),
    )
    .unwrap();
    let out = t.step(Inputs::default());
    assert!(
        out.settle.is_empty(),
        "a 1 s wait is waited for: {:?}",
        out.settle
    );
    assert_eq!(out.wake_at, Some(601_000));
    assert_eq!(t.at(601_000), [0]);

    // Without the clock, the same report is judged from the last round (0): ten minutes.
    let mut t = T::new(BOUNDED, &[("a", "get")]);
    t.approve_all(1, 0);
    t.s.on_ended(
        t.e(0),
        turnstile_engine::schedule::End::RateLimited(601_000),
    )
    .unwrap();
    let out = t.step(Inputs::default());
    assert_eq!(out.settle.len(), 1, "judged from the last round: given up");

    // A cancellation at 500_000 with a grace of 100 ms: given up at 500_100, not at once.
    let text = "[conversation.tools.get.concurrency]\nkey = \"api\"\nlimit = 1\n";
    let mut s = Scheduler::new(policy(text));
    let mut out = Outputs::default();
    let call = Call {
        id: "a",
        tool: "get",
        operations: None,
        arguments: None,
    };
    let limits = Limits {
        execution_ms: None,
        abort_grace_ms: Some(100),
    };
    let b = s.submit_batch_with(&[call], limits).unwrap();
    s.step(
        &Inputs {
            now: Some(0),
            approve: &[b.first],
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.start, [b.first]);
    s.observe_clock(500_000).unwrap();
    s.on_event(Input::Cancel(b.batch)).unwrap();
    s.step(
        &Inputs {
            now: Some(500_000),
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(
        out.wake_at,
        Some(500_100),
        "the grace counts from the cancel"
    );
    assert!(out.settle.is_empty());
    s.step(
        &Inputs {
            now: Some(500_100),
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.settle.len(), 1, "given up once the grace passed");

    // A clock that goes back with an input is refused and the clock stays.
    let refused = s.observe_clock(10).unwrap_err();
    assert_eq!(refused.code, InputErrorCode::TimeBackwards);
    s.observe_clock(500_100).unwrap();
}
