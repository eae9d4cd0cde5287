//! Keys from arguments: `concurrency = { key = "fs:{path}", limit = 1 }`. Failure paths first:
//! bad templates are diagnostics; arguments that are missing, invalid, not an object, or lack
//! the field take the template's own key (limited, never unbounded); oversized arguments are
//! refused. Then: per-resource exclusion, sharing across tools, spacing that survives an idle
//! key, pauses by expanded name, forgetting idle keys, and restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

use turnstile_engine::config::{self, Layer, Policy};
use turnstile_engine::limits::ARGUMENTS_BYTES_MAX;
#[path = "common/step.rs"]
mod step;

use step::{Inputs, Outputs, Step};
use turnstile_engine::schedule::{
    BatchId, Call, EntryId, InputErrorCode, Scheduler, Started, SubmitErrorCode,
};

fn policy(text: &str) -> Policy {
    config::resolve(&[Layer::new("t.toml", text)]).expect("valid config")
}

const FS: &str = r#"
[conversation.tools.fs_write]
concurrency = { key = "fs:{path}", limit = 1 }
[conversation.tools.fs_read]
concurrency = { key = "fs:{path}", limit = 1 }
[conversation.tools.fs_move]
concurrency = { key = "mv:{from}->{to}", limit = 1, delay = 100 }
"#;

/// A scheduler and its last output; entries are named by (batch first + index).
struct T {
    s: Scheduler,
    out: Outputs,
}

impl T {
    fn new(text: &str) -> Self {
        Self {
            s: Scheduler::new(policy(text)),
            out: Outputs::default(),
        }
    }

    /// Submits `(id, tool, arguments)` and approves all of it at `now`; returns the entries.
    fn batch(&mut self, calls: &[(&str, &str, Option<&str>)], now: u64) -> Vec<EntryId> {
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
        let entries: Vec<EntryId> = (0..u64::from(b.count))
            .map(|i| EntryId(b.first.0 + i))
            .collect();
        self.s.step(
            &Inputs {
                now: Some(now),
                approve: &entries,
                ..Inputs::default()
            },
            &mut self.out,
        );
        entries
    }

    fn ok(&mut self, e: &[EntryId], now: u64) -> Vec<EntryId> {
        self.s.step(
            &Inputs {
                now: Some(now),
                ok: e,
                ..Inputs::default()
            },
            &mut self.out,
        );
        self.out.start.clone()
    }

    fn key_of(&self, batch: BatchId, i: usize) -> Option<String> {
        self.s.inspect(batch).expect("live")[i]
            .keys
            .first()
            .cloned()
    }
}

#[test]
fn bad_templates_are_diagnostics_naming_the_tool() {
    for (key, needle) in [
        ("fs:{path", "not closed"),
        ("fs:path}", "without an opening"),
        ("fs:{}", "names no argument"),
        ("{a}{b}{c}{d}{e}{f}{g}{h}{i}", "more than 8"),
    ] {
        let text = format!("[conversation.tools.w]\nconcurrency = {{ key = {key:?} }}\n");
        let diags = config::resolve(&[Layer::new("t.toml", &text)]).unwrap_err();
        assert_eq!(diags.len(), 1, "{key}");
        let d = &diags[0];
        assert_eq!(d.code.as_str(), "concurrency-key-template", "{key}");
        assert!(d.message.contains(needle), "{key}: {}", d.message);
        assert!(d.rendered.contains("t.toml:2"), "{}", d.rendered);
    }
    // Literal braces, and a template agreed on like any key.
    let p = policy("[conversation.tools.w]\nconcurrency = { key = \"{{x}}\" }\n");
    assert!(
        p.tools()[0]
            .concurrency
            .first()
            .unwrap()
            .key
            .template()
            .is_none()
    );
    let diags = config::resolve(&[Layer::new(
        "t.toml",
        "[conversation.tools.a]\nconcurrency = { key = \"fs:{p}\", limit = 1 }\n\
         [conversation.tools.b]\nconcurrency = { key = \"fs:{p}\", limit = 2 }\n",
    )])
    .unwrap_err();
    assert_eq!(diags[0].code.as_str(), "concurrency-limit-conflict");
    // The integer form's key is the tool's name, never a template.
    let p = policy("[conversation.tools.'w{x}']\nconcurrency = 1\n");
    assert!(
        p.tools()[0]
            .concurrency
            .first()
            .unwrap()
            .key
            .template()
            .is_none()
    );
}

#[test]
fn arguments_that_do_not_expand_take_the_templates_own_key() {
    let mut t = T::new(FS);
    let bad: [(&str, &str, Option<&str>); 7] = [
        ("e", "fs_write", Some("{\"path\": \"\"}")),
        ("n", "fs_write", None),
        ("i", "fs_write", Some("{\"path\": ")),
        ("o", "fs_write", Some("[\"/a\"]")),
        ("m", "fs_write", Some("{\"other\": 1}")),
        ("z", "fs_write", Some("{\"path\": null}")),
        ("l", "fs_write", Some("{\"path\": [\"/a\"]}")),
    ];
    let entries = t.batch(&bad[1..], 0);
    // Limited among themselves (limit 1, written order), never unbounded.
    assert_eq!(t.out.start, vec![entries[0]]);
    for i in 0..entries.len() {
        assert_eq!(t.key_of(BatchId(1), i).as_deref(), Some("fs:{path}"));
    }
    for w in entries.windows(2) {
        assert_eq!(t.ok(&[w[0]], 0), vec![w[1]]);
    }
    // An empty string is a value like any other; only a key made of nothing is refused.
    t.batch(&bad[..1], 0);
    assert_eq!(t.key_of(BatchId(2), 0).as_deref(), Some("fs:"));
    let mut t = T::new("[conversation.tools.w]\nconcurrency = { key = \"{path}\" }\n");
    t.batch(&[("e", "w", Some("{\"path\": \"\"}"))], 0);
    assert_eq!(t.key_of(BatchId(1), 0).as_deref(), Some("{path}"));
    // A call of a plain tool ignores arguments it was given.
    let mut t = T::new("[conversation.tools.x]\nconcurrency = { key = \"k\" }\n");
    let e = t.batch(&[("a", "x", Some("not json")), ("b", "x", None)], 0);
    assert_eq!(t.out.start, vec![e[0]]);
}

#[test]
fn oversized_or_misplaced_arguments_are_refused_whole() {
    let mut s = Scheduler::new(policy(FS));
    let big = format!("{{\"path\":\"{}\"}}", "x".repeat(ARGUMENTS_BYTES_MAX));
    let err = s
        .submit_batch(&[Call {
            id: "a",
            tool: "fs_write",
            operations: None,
            arguments: Some(&big),
        }])
        .unwrap_err();
    assert_eq!(err.code, SubmitErrorCode::TooLarge);
    assert!(err.message.contains("arguments"), "{}", err.message);
    assert_eq!(s.live_entries(), 0);
    // A path longer than a key may be takes the template's key.
    let long = format!("{{\"path\":\"{}\"}}", "x".repeat(300));
    let mut t = T::new(FS);
    t.batch(&[("a", "fs_write", Some(&long))], 0);
    assert_eq!(t.key_of(BatchId(1), 0).as_deref(), Some("fs:{path}"));
}

#[test]
fn one_key_per_resource_shared_across_tools() {
    let mut t = T::new(FS);
    let e = t.batch(
        &[
            ("w1", "fs_write", Some(r#"{"path":"/a","content":"x"}"#)),
            ("w2", "fs_write", Some(r#"{"path":"/b"}"#)),
            ("r1", "fs_read", Some(r#"{"path":"/a"}"#)),
            ("w3", "fs_write", Some(r#"{"path":"/a"}"#)),
            ("n1", "fs_write", Some(r#"{"path":7}"#)),
            ("n2", "fs_write", Some(r#"{"path":"7"}"#)),
        ],
        0,
    );
    // /a and /b run together; r1 and w3 wait behind w1 in written order; 7 and "7" are one key.
    assert_eq!(t.out.start, vec![e[0], e[1], e[4]]);
    assert_eq!(t.key_of(BatchId(1), 0).as_deref(), Some("fs:/a"));
    assert_eq!(t.key_of(BatchId(1), 4).as_deref(), Some("fs:7"));
    assert_eq!(t.ok(&[e[0]], 1), vec![e[2]]);
    assert_eq!(t.ok(&[e[2]], 2), vec![e[3]]);
    assert_eq!(t.ok(&[e[4]], 2), vec![e[5]]);
}

#[test]
fn expanded_keys_are_forgotten_when_idle_and_spacing_outlives_the_batch() {
    let mut t = T::new(FS);
    let base = t.s.live_keys();
    // 1,000 different files, each written once: memory follows live keys.
    for round in 0..10u64 {
        let args: Vec<String> = (0..100)
            .map(|i| format!("{{\"path\":\"/f{round}-{i}\"}}"))
            .collect();
        let ids: Vec<String> = (0..100).map(|i| format!("c{i}")).collect();
        let calls: Vec<(&str, &str, Option<&str>)> = ids
            .iter()
            .zip(&args)
            .map(|(id, a)| (id.as_str(), "fs_write", Some(a.as_str())))
            .collect();
        let e = t.batch(&calls, round);
        assert_eq!(t.out.start.len(), 100);
        assert!(t.s.live_keys() <= base + 101, "{}", t.s.live_keys());
        t.ok(&e, round);
        assert!(t.out.retired.len() == 1);
        assert!(
            t.s.live_keys() <= base + 1,
            "round {round}: {}",
            t.s.live_keys()
        );
    }
    // A key with a delay stays until its gate passes, so spacing holds for the next call.
    let mv = r#"{"from":"/a","to":"/b"}"#;
    let e = t.batch(&[("m1", "fs_move", Some(mv))], 1_000);
    assert_eq!(t.out.start, vec![e[0]]);
    t.ok(&e, 1_010);
    let kept = t.s.live_keys();
    let e = t.batch(&[("m2", "fs_move", Some(mv))], 1_050);
    assert!(t.out.start.is_empty(), "spacing forgotten with the key");
    assert_eq!(t.out.wake_at, Some(1_100));
    assert_eq!(t.s.live_keys(), kept);
    assert_eq!(t.ok(&[], 1_100), vec![e[0]]);
    t.ok(&e, 1_120);
    assert_eq!(t.s.live_keys(), kept, "gated until 1,200");
    t.ok(&[], 1_200);
    assert_eq!(t.s.live_keys(), kept - 1, "forgotten once the gate passed");
}

#[test]
fn pauses_reach_live_expanded_keys_by_name() {
    let mut t = T::new(FS);
    let e = t.batch(
        &[
            ("a1", "fs_write", Some(r#"{"path":"/a"}"#)),
            ("a2", "fs_write", Some(r#"{"path":"/a"}"#)),
        ],
        0,
    );
    let mut out = Outputs::default();
    t.s.step(
        &Inputs {
            now: Some(1),
            ok: &[e[0]],
            pause: &[("fs:/a", 50), ("fs:/nowhere", 50), ("fs:{path}", 10)],
            ..Inputs::default()
        },
        &mut out,
    );
    assert!(out.start.is_empty());
    assert_eq!(out.errors.len(), 1);
    assert_eq!(out.errors[0].code, InputErrorCode::UnknownKey);
    assert_eq!(out.errors[0].index, 1);
    assert_eq!(out.wake_at, Some(50));
    assert_eq!(t.ok(&[], 50), vec![e[1]]);
}

#[test]
fn restart_gives_each_call_its_key_again() {
    let mut t = T::new(FS);
    let e = t.batch(
        &[
            ("a1", "fs_write", Some(r#"{"path":"/a"}"#)),
            ("a2", "fs_write", Some(r#"{"path":"/a"}"#)),
            ("b1", "fs_write", Some(r#"{"path":"/b"}"#)),
            ("x", "fs_write", None),
        ],
        0,
    );
    assert_eq!(t.out.start, vec![e[0], e[2], e[3]]);
    let saved = t.s.unfinished();
    let keys: Vec<Option<&str>> = saved.batches[0]
        .calls
        .iter()
        .map(|c| c.keys.first().map(String::as_str))
        .collect();
    assert_eq!(
        keys,
        // Arguments that made no key: the template's own text, its fallback key.
        vec![
            Some("fs:/a"),
            Some("fs:/a"),
            Some("fs:/b"),
            Some("fs:{path}")
        ]
    );
    let (mut s, unrestored) = Scheduler::resume(policy(FS), &saved, Started::RunAgain).unwrap();
    assert!(unrestored.is_empty());
    let mut out = Outputs::default();
    s.step(
        &Inputs {
            approve: &e,
            ..Inputs::default()
        },
        &mut out,
    );
    // /a again one at a time in written order, /b and the template's own key free.
    assert_eq!(out.start, vec![e[0], e[2], e[3]]);
    s.step(
        &Inputs {
            ok: &[e[0]],
            ..Inputs::default()
        },
        &mut out,
    );
    assert_eq!(out.start, vec![e[1]]);
}

#[test]
fn a_name_is_one_key_whichever_template_or_table_makes_it() {
    let text = r#"
[conversation.tools.write]
concurrency = { key = "fs:{path}", limit = 1 }
[conversation.tools.move]
concurrency = { key = "fs:{src}", limit = 1 }
[conversation.tools.lock_a]
concurrency = { key = "fs:/a", limit = 1 }
"#;
    let mut t = T::new(text);
    let e = t.batch(
        &[
            ("w", "write", Some(r#"{"path":"/a"}"#)),
            ("m", "move", Some(r#"{"src":"/a"}"#)),
            ("l", "lock_a", None),
        ],
        0,
    );
    // Three tools, one resource: one at a time, in written order.
    assert_eq!(t.out.start, vec![e[0]]);
    let mut out = Outputs::default();
    t.s.step(
        &Inputs {
            ok: &[e[0]],
            pause: &[("fs:/a", 50)],
            ..Inputs::default()
        },
        &mut out,
    );
    assert!(out.start.is_empty(), "the pause reaches the one key");
    assert_eq!(t.ok(&[], 50), vec![e[1]]);
    assert_eq!(t.ok(&[e[1]], 51), vec![e[2]]);
}

#[test]
fn the_idle_heap_follows_live_keys_not_history() {
    let mut t = T::new(FS);
    let mut out = Outputs::default();
    // A made key paused far ahead stays while idle; batch after batch retires on it.
    let e = t.batch(&[("a", "fs_write", Some(r#"{"path":"/a"}"#))], 0);
    t.s.step(
        &Inputs {
            pause: &[("fs:/a", 1_000_000)],
            ok: &e,
            ..Inputs::default()
        },
        &mut out,
    );
    for i in 0..2_000 {
        let id = format!("c{i}");
        let b =
            t.s.submit_batch(&[Call {
                id: &id,
                tool: "fs_write",
                operations: None,
                arguments: Some(r#"{"path":"/a"}"#),
            }])
            .unwrap();
        t.s.step(
            &Inputs {
                settle: &[(b.first, turnstile_engine::schedule::HostSettle::Rejected)],
                ..Inputs::default()
            },
            &mut out,
        );
        assert_eq!(out.retired.len(), 1);
    }
    assert!(
        t.s.idle_items_for_tests() <= 2,
        "{}",
        t.s.idle_items_for_tests()
    );
}
