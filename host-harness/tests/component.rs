//! The corpus through the built component, and host mistakes that must come back as typed
//! errors on an instance that keeps working. Needs `cargo xtask build-guest` first.
//!
//! The other `component_*.rs` files replay the rest of the issue's failure paths: one mistake
//! among good inputs and the lifetime of numbers (`steps`), restart and hostile saved states
//! (`restart`), admission tickets and hostile admission calls (`admission`).
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod common;

use std::path::PathBuf;

use common::{
    HostSettle, HostSettlement, Inputs, RetryAfter, STOP_POLICY, Sched, assert_out, harness,
    hostile_strings, none,
};
use host_harness::{ComponentSubject, Harness, default_component_path};
use host_harness::{wit_config as wc, wit_scheduler as ws};
use turnstile_corpus as corpus;

fn cases_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/cases")
}

#[test]
fn corpus_runs_through_the_component() {
    let files = corpus::case_files(&cases_dir()).unwrap_or_default();
    assert!(
        files.len() >= 60,
        "expected the whole corpus, found {}",
        files.len()
    );
    let summary = corpus::run_all(&files, || {
        ComponentSubject::new(harness().instance().expect("no trap"))
    });
    for (path, why) in &summary.failed {
        eprintln!("FAIL {}: {why}", path.display());
    }
    assert!(summary.failed.is_empty(), "{}", summary.line());
}

use common::InputErrorCode as C;
use common::InputKind as K;
use ws::SubmitErrorCode as S;

/// Every config input a host can construct that is hostile: each resolves to exactly the
/// diagnostics expected, never a trap.
#[test]
fn config_survives_hostile_layers() {
    let mut inst = harness().instance().expect("no trap");
    let config = inst.exports.turnstile_scheduler_config().policy();
    let long = "x".repeat(100_000);
    let layer = |text: String| wc::Layer {
        name: "hostile".to_owned(),
        text,
    };
    use wc::DiagnosticCode as D;
    let cases: Vec<(Vec<wc::Layer>, Vec<D>)> = vec![
        (
            (0..65).map(|_| layer(String::new())).collect(),
            vec![D::TooManyLayers],
        ),
        (vec![layer("x".repeat(2 << 20))], vec![D::TooLarge]),
        (
            vec![wc::Layer {
                name: long.clone(),
                text: String::new(),
            }],
            vec![D::TooLarge],
        ),
        (
            vec![layer(format!(
                "[conversation.tools.{long}]\nconcurrency = 1\n"
            ))],
            vec![D::TooLarge],
        ),
        (
            vec![layer(format!(
                "[conversation.tools.t]\nconcurrency = {{ key = \"{long}\" }}\n"
            ))],
            vec![D::TooLarge],
        ),
        (
            vec![layer("a = ".to_owned() + &"[".repeat(1_000_000))],
            vec![D::TomlSyntax],
        ),
        (
            vec![layer("a = ".to_owned() + &"{a=".repeat(300_000))],
            vec![D::TomlSyntax],
        ),
        (vec![layer("[".repeat(1_000_000))], vec![D::TomlSyntax]),
        (
            vec![layer("a = \"\\uD800\"\n".to_owned())],
            vec![D::TomlSyntax],
        ),
        (
            vec![layer("\u{0}\u{1}\u{2}".to_owned())],
            vec![D::TomlSyntax],
        ),
        (
            vec![wc::Layer {
                name: "\u{feff}\n#\u{0}".to_owned(),
                text: "\u{feff}[conversation.tools.t]\nconcurrency = -1\n".to_owned(),
            }],
            vec![D::ConcurrencyNegative],
        ),
    ];
    for (layers, expected) in &cases {
        let got = config
            .call_resolve(&mut inst.store, layers)
            .unwrap_or_else(|e| panic!("resolve trapped: {e:#}"));
        let codes: Vec<D> = match got {
            Ok(_) => Vec::new(),
            Err(diags) => {
                for d in &diags {
                    assert!(!d.rendered.is_empty() && !d.message.is_empty(), "{d:?}");
                }
                diags.iter().map(|d| d.code).collect()
            }
        };
        let name = layers
            .first()
            .map_or("", |l| &l.name[..l.name.len().min(20)]);
        assert_eq!(&codes, expected, "layers {name:?} x{}", layers.len());
    }
    // 5 layers of 2,000 tools sharing key `k` with different limits: conflicts, reported.
    let conflicting: Vec<wc::Layer> = (0..5)
        .map(|l| {
            layer(
                (0..2000)
                    .map(|t| {
                        format!(
                            "[conversation.tools.t{t}]\nconcurrency = {{ key = \"k\", limit = {} }}\n",
                            1 + l + t % 7
                        )
                    })
                    .collect(),
            )
        })
        .collect();
    let diags = config
        .call_resolve(&mut inst.store, &conflicting)
        .expect("no trap")
        .expect_err("conflicting limits resolved");
    assert!(
        diags.iter().all(|d| d.code == D::ConcurrencyLimitConflict),
        "{:?}",
        diags.iter().map(|d| d.code).collect::<Vec<_>>()
    );
    // Tool lookups with hostile names: a tool nobody configures is unbounded, no fan-out.
    let policy = config
        .call_resolve(&mut inst.store, &[layer(STOP_POLICY.to_owned())])
        .expect("no trap")
        .unwrap_or_else(|_| panic!("config"));
    for name in hostile_strings() {
        let tool = config
            .call_tool(&mut inst.store, policy, &name)
            .unwrap_or_else(|e| panic!("tool trapped: {e:#}"));
        let unbounded = wc::ToolPolicy {
            name: name.clone(),
            concurrency: Vec::new(),
            fan_out: false,
            on_error: wc::OnError::Continue,
        };
        assert_eq!(tool, unbounded, "tool {:.20?}", name);
    }
    let tools = config.call_tools(&mut inst.store, policy).expect("no trap");
    assert_eq!(tools.len(), 1);
    assert_eq!(
        tools[0].concurrency,
        vec![wc::Concurrency {
            key: "f".to_owned(),
            limit: Some(2),
            delay_ms: 0,
            rates: vec![],
            burst: 1,
            weight: 1,
            retries: 3,
            max_wait_ms: 300_000,
            arguments: vec![],
            shared: false,
            adapt_min: None,
            path: None,
        }]
    );
    // The same instance still schedules.
    let mut s = Sched::in_instance(inst, STOP_POLICY);
    assert_eq!(s.submit("a\nb\nc", "f\nf\nf", &[0, 0, 0]), Ok((1, 1, 3)));
    assert_out(&s.approve(&[1, 2, 3]), &[1, 2], &[], &[], &[]);
    assert_out(&s.ok(&[1]), &[3], &[], &[], &[]);
}

/// `step` with unknown numbers in every list, and 200,000 of them at once: each is refused on
/// its own with its list and index; nothing else happens.
#[test]
fn step_refuses_unknown_numbers_one_by_one() {
    let mut s = Sched::new(STOP_POLICY);
    let out = s.step(&Inputs {
        approve: vec![0, u64::MAX, 1],
        settle: vec![
            HostSettlement {
                entry: 0,
                how: HostSettle::Rejected,
            },
            HostSettlement {
                entry: u64::MAX,
                how: HostSettle::Failed,
            },
        ],
        ask: vec![0],
        answer: vec![u64::MAX],
        ok: vec![0],
        failed: vec![u64::MAX - 1],
        cancel: vec![0, 1, u64::MAX],
        now: None,
        retry: vec![
            RetryAfter { entry: 0, until: 5 },
            RetryAfter {
                entry: u64::MAX,
                until: u64::MAX,
            },
        ],
        pause: vec![ws::KeyPause {
            key: "no such key".to_owned(),
            until: 1,
        }],
        granted: vec![0, u64::MAX],
        denied: vec![7],
    });
    let expected = [
        (K::Approve, 0, C::UnknownEntry),
        (K::Approve, 1, C::UnknownEntry),
        (K::Approve, 2, C::UnknownEntry),
        (K::Settle, 0, C::UnknownEntry),
        (K::Settle, 1, C::UnknownEntry),
        (K::Granted, 0, C::UnknownEntry),
        (K::Granted, 1, C::UnknownEntry),
        (K::Denied, 0, C::UnknownEntry),
        (K::Ask, 0, C::UnknownEntry),
        (K::Answer, 0, C::UnknownEntry),
        (K::Ok, 0, C::UnknownEntry),
        (K::Failed, 0, C::UnknownEntry),
        (K::Retry, 0, C::UnknownEntry),
        (K::Retry, 1, C::UnknownEntry),
        (K::Cancel, 0, C::UnknownBatch),
        (K::Cancel, 1, C::UnknownBatch),
        (K::Cancel, 2, C::UnknownBatch),
        (K::Pause, 0, C::UnknownKey),
    ];
    assert_out(&out, &[], &[], &expected, &[]);

    let many: Vec<u64> = (0..200_000u64)
        .map(|i| 1_000_000_000_000 + i * 7919)
        .collect();
    let out = s.step(&Inputs {
        approve: many.clone(),
        failed: many,
        ..none()
    });
    assert_eq!(out.errors.len(), 400_000);
    for (i, e) in out.errors.iter().enumerate() {
        let (kind, index) = if i < 200_000 {
            (K::Approve, i)
        } else {
            (K::Failed, i - 200_000)
        };
        assert_eq!(
            (e.input, e.index, e.code),
            (kind, index as u32, C::UnknownEntry)
        );
    }
    assert!(out.start.is_empty() && out.settle.is_empty() && out.retired.is_empty());

    // Nothing was numbered by any of it: the first batch is batch 1 from entry 1.
    assert_eq!(s.submit("a", "f", &[0]), Ok((1, 1, 1)));
    assert_out(&s.approve(&[1]), &[1], &[], &[], &[]);
    assert_out(&s.ok(&[1]), &[], &[], &[], &[1]);
}

/// `submit` with every malformed batch a host can pack: each refused with its code, none
/// numbered; valid but odd ids (NUL, BOM, 256 bytes) are accepted and come back intact; then
/// the same scheduler schedules a batch correctly.
#[test]
fn submit_refuses_malformed_batches() {
    let mut s = Sched::new(STOP_POLICY);
    let long = "x".repeat(100_000);
    let call = |id: &str, tool: &str, operations: Option<u32>| common::Call {
        id: id.to_owned(),
        tool: tool.to_owned(),
        operations,
        arguments: None,
    };
    let plain = |id: &str, tool: &str| call(id, tool, None);
    let many: Vec<common::Call> = (0..100_001).map(|i| plain(&format!("c{i}"), "t")).collect();
    let huge: Vec<common::Call> = (0..41)
        .map(|i| call(&format!("h{i}"), "f", Some(100_000)))
        .collect();
    let refused: Vec<(Vec<common::Call>, S)> = vec![
        (vec![], S::EmptyBatch),
        (vec![plain("", "t")], S::InvalidId),
        (vec![plain("a", "")], S::InvalidId),
        // A newline ends a name: this batch reads as two ids and one tool.
        (vec![plain("a\n", "t")], S::MalformedBatch),
        (vec![plain("a", "t\nu")], S::MalformedBatch),
        (vec![plain("b", "t"), plain("", "t")], S::InvalidId),
        (vec![plain("#", "t")], S::InvalidId),
        (vec![plain("a#", "t")], S::InvalidId),
        (vec![plain("a#0", "t")], S::InvalidId),
        (vec![plain(&long, "t")], S::InvalidId),
        (vec![plain("a", &long)], S::InvalidId),
        (vec![plain("d", "t"), plain("d", "t")], S::DuplicateId),
        (vec![call("z", "t", Some(3))], S::NotFanOut),
        (vec![call("z", "t", Some(u32::MAX))], S::NotFanOut),
        (vec![call("f", "f", Some(0))], S::InvalidOperations),
        (vec![call("f", "f", Some(u32::MAX))], S::TooLarge),
        (vec![call("f", "f", Some(100_001))], S::TooLarge),
        (many, S::TooLarge),
        // 41 calls of 100,000 operations: above 4,000,000 live entries.
        (huge, S::TooLarge),
        (
            vec![common::Call {
                arguments: Some("x".repeat(65_537)),
                ..plain("g", "t")
            }],
            S::TooLarge,
        ),
    ];
    for (calls, code) in &refused {
        assert_eq!(
            s.submit_calls(calls),
            Err(*code),
            "calls {:.60?}",
            &calls[..calls.len().min(2)]
        );
    }
    // Packed batches that do not add up, as a host could send them.
    let packed = |ids: &str, tools: &str, fan: &[(u32, u32)], args: &[u32]| ws::Batch {
        ids: ids.to_owned(),
        tools: tools.to_owned(),
        fan_outs: (fan.iter())
            .map(|&(call, operations)| ws::FanOut { call, operations })
            .collect(),
        arguments: (args.iter())
            .map(|&call| ws::CallArguments {
                call,
                json: "{}".to_owned(),
            })
            .collect(),
    };
    for bad in [
        packed("a", "t\n", &[], &[]),
        packed("a\n", "t", &[], &[]),
        packed("", "t\n", &[], &[]),
        packed("a\nb\n", "t\n", &[], &[]),
        packed("a\n", "f\n", &[(1, 2)], &[]),
        packed("a\n", "f\n", &[(0, 2), (0, 2)], &[]),
        packed("a\n", "t\n", &[], &[1]),
        packed("a\n", "t\n", &[], &[0, 0]),
        packed("a\n", "t\n", &[(u32::MAX, 1)], &[]),
    ] {
        assert_eq!(s.submit_packed(&bad), Err(S::MalformedBatch), "{bad:?}");
    }
    assert_eq!(
        s.submit_packed(&packed(
            &"x\n".repeat(100_001),
            &"t\n".repeat(100_001),
            &[],
            &[]
        )),
        Err(S::TooLarge)
    );
    let id256 = "y".repeat(256);
    assert_eq!(s.submit(&"y".repeat(257), "t", &[0]), Err(S::InvalidId));
    // Odd but valid ids, numbered from batch 1, entry 1: the refused ones took no number.
    let odd = ["\u{0}", "\u{feff}", "é", "a b", "*", "'*'", "a\r", &id256];
    for (i, id) in odd.iter().enumerate() {
        let n = i as u64 + 1;
        assert_eq!(s.submit(id, "t", &[0]), Ok((n, n, 1)), "id {id:.20?}");
        assert_eq!(s.label(n).as_deref(), Some(*id));
    }
    assert_eq!(s.submit("\u{0}", "t", &[0]), Err(S::DuplicateId));
    assert_eq!(
        s.submit("q\n\u{feff}", "t\nt", &[0, 0]),
        Err(S::DuplicateId)
    );
    // Labels and inspect of numbers nobody has.
    for n in [0, 9, 10, u64::MAX - 1, u64::MAX] {
        assert_eq!(s.label(n), None, "label {n}");
    }
    for b in [0, 9, u64::MAX] {
        assert_eq!(s.inspect(b), None, "inspect {b}");
    }
    // Operations out of range of their batch, and duplicates within one list.
    assert_eq!(s.submit("g", "f", &[3]), Ok((9, 9, 3)));
    let out = s.step(&Inputs {
        approve: vec![9, 12, 9, 10, 11, 10],
        ..none()
    });
    assert_out(
        &out,
        &[9, 10],
        &[],
        &[
            (K::Approve, 1, C::UnknownEntry),
            (K::Approve, 2, C::AlreadyDecided),
            (K::Approve, 5, C::AlreadyDecided),
        ],
        &[],
    );
    // Illegal lifecycle moves, each refused with its code, nothing changed.
    let out = s.step(&Inputs {
        settle: vec![HostSettlement {
            entry: 9,
            how: HostSettle::Skipped,
        }],
        ask: vec![11],
        answer: vec![9],
        ok: vec![1],
        cancel: vec![9, 9],
        ..none()
    });
    assert_out(
        &out,
        &[],
        &[(11, ws::Reason::Cancelled)],
        &[
            (K::Settle, 0, C::AlreadyDecided),
            (K::Ask, 0, C::NotRunning),
            (K::Answer, 0, C::NotAsking),
            (K::Ok, 0, C::NotRunning),
            (K::Cancel, 1, C::BatchCancelled),
        ],
        &[],
    );
    // g#0 fails: under stop, nothing is left to stop (g#2 was cancelled); g#1 ends.
    let out = s.step(&Inputs {
        failed: vec![9],
        ok: vec![10, 10],
        ..none()
    });
    assert_out(&out, &[], &[], &[(K::Ok, 1, C::AlreadyEnded)], &[9]);
    assert_eq!(s.inspect(9), None);
    assert_out(
        &s.step(&Inputs {
            ok: vec![9],
            cancel: vec![9],
            ..none()
        }),
        &[],
        &[],
        &[(K::Ok, 0, C::UnknownEntry), (K::Cancel, 0, C::UnknownBatch)],
        &[],
    );
    // The same scheduler still schedules: two calls on a key of limit 2.
    assert_eq!(
        s.submit("k1\nk2\nk3", "f\nf\nf", &[0, 0, 0]),
        Ok((10, 12, 3))
    );
    assert_out(&s.approve(&[12, 13, 14]), &[12, 13], &[], &[], &[]);
    assert_out(&s.ok(&[13]), &[14], &[], &[], &[]);
}

/// A host caps the guest: past the memory limit or out of fuel, a call fails with an error (a
/// trap the host sees as `Err`), it does not hang or take the host down, and a fresh instance
/// works again.
#[test]
fn limits_turn_pathological_input_into_errors() {
    let path = default_component_path();
    let small = Harness::load_with(
        &path,
        host_harness::Limits {
            memory_bytes: 8 << 20,
            fuel: None,
        },
    )
    .expect("no trap");
    let mut s = Sched::in_instance(small.instance().expect("no trap"), "");
    let iface = s.inst.exports.turnstile_scheduler_scheduler().scheduler();
    let mut hit = None;
    for round in 0..8 {
        // Each round's ids are new, so no batch is a duplicate.
        let calls: Vec<common::Call> = (0..100_000)
            .map(|i| common::Call {
                id: format!("r{round}-rather-long-call-id-{i:08}"),
                tool: format!("tool-{i}"),
                operations: None,
                arguments: None,
            })
            .collect();
        let calls = common::pack(&calls);
        match iface.call_submit_batch(&mut s.inst.store, s.s, &calls, common::NO_LIMITS) {
            Err(trap) => {
                hit = Some(trap);
                break;
            }
            Ok(Err(e)) => panic!("round {round}: refused instead of exhausting memory: {e:?}"),
            Ok(Ok(_)) => {}
        }
    }
    assert!(hit.is_some(), "8 MiB of linear memory held 800k calls");
    assert!(s.inst.store.data().memory_peak() <= 8 << 20);
    let mut again = Sched::in_instance(small.instance().expect("no trap"), "");
    assert_eq!(
        again.submit("a", "t", &[0]),
        Ok((1, 1, 1)),
        "a fresh instance works"
    );

    let fueled = Harness::load_with(
        &path,
        host_harness::Limits {
            memory_bytes: 256 << 20,
            fuel: Some(5_000_000),
        },
    )
    .expect("no trap");
    let mut inst = fueled.instance().expect("no trap");
    let big: String = (0..5000)
        .map(|t| {
            format!(
                "[conversation.tools.t{t}]\nconcurrency = {{ key = \"k{}\", limit = 2 }}\n",
                t % 9
            )
        })
        .collect();
    let config = inst.exports.turnstile_scheduler_config().policy();
    let result = config.call_resolve(
        &mut inst.store,
        &[wc::Layer {
            name: "big".to_owned(),
            text: big,
        }],
    );
    let err = result
        .err()
        .unwrap_or_else(|| panic!("5M fuel resolved 5,000 tools"));
    assert_eq!(
        err.downcast_ref::<wasmtime::Trap>(),
        Some(&wasmtime::Trap::OutOfFuel)
    );
    let mut fresh = fueled.instance().expect("no trap");
    let config = fresh.exports.turnstile_scheduler_config().policy();
    assert!(
        matches!(config.call_resolve(&mut fresh.store, &[]), Ok(Ok(_))),
        "a fresh fueled instance resolves the empty config"
    );
}
