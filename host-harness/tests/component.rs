//! The corpus through the built component, and host mistakes that must come back as typed
//! errors on an instance that keeps working. Needs `cargo xtask build-guest` first.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::path::PathBuf;
use std::sync::OnceLock;

use host_harness::{
    ComponentSubject, Harness, Instance, default_component_path, wit_admission as wa,
    wit_config as wc, wit_scheduler as ws,
};
use turnstile_corpus as corpus;
use wasmtime::component::ResourceAny;

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let path = default_component_path();
        Harness::load(&path).unwrap_or_else(|e| {
            panic!(
                "cannot load {}: {e:#}; run `cargo xtask build-guest`",
                path.display()
            )
        })
    })
}

/// Resolves `toml` as one layer and builds a scheduler on it; returns (policy, scheduler).
fn scheduler_on(inst: &mut Instance, toml: &str) -> (ResourceAny, ResourceAny) {
    let layers = [wc::Layer {
        name: "test".to_owned(),
        text: toml.to_owned(),
    }];
    let policy = inst
        .exports
        .turnstile_scheduler_config()
        .policy()
        .call_resolve(&mut inst.store, &layers)
        .expect("no trap")
        .unwrap_or_else(|d| panic!("the test config does not resolve: {}", d[0].rendered));
    let scheduler = inst
        .exports
        .turnstile_scheduler_scheduler()
        .scheduler()
        .call_constructor(&mut inst.store, policy)
        .expect("no trap");
    (policy, scheduler)
}

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

#[test]
fn host_mistakes_are_errors_and_the_instance_survives() {
    let mut inst = harness().instance().expect("no trap");
    let config = inst.exports.turnstile_scheduler_config().policy();
    let hostile = [
        wc::Layer {
            name: String::new(),
            text: "\u{0}\u{ffff}[[[".to_owned(),
        },
        wc::Layer {
            name: "deep".to_owned(),
            text: "a = ".to_owned() + &"[".repeat(10_000),
        },
        wc::Layer {
            name: "huge".to_owned(),
            text: "x".repeat(2 << 20),
        },
    ];
    for layer in &hostile {
        let result = config.call_resolve(&mut inst.store, std::slice::from_ref(layer));
        let diags = result.unwrap_or_else(|e| panic!("trap on {:?}: {e:#}", layer.name));
        assert!(diags.is_err(), "{:?} resolved", layer.name);
    }
    let (_, s) = scheduler_on(&mut inst, "");
    let iface = inst.exports.turnstile_scheduler_scheduler().scheduler();
    let call = |id: &str| ws::Call {
        id: id.to_owned(),
        tool: "t".to_owned(),
        operations: None,
        finished: Vec::new(),
    };
    let mut codes = Vec::new();
    let mut check = |r: wasmtime::Result<Result<(), ws::Error>>| {
        let r = r.unwrap_or_else(|e| panic!("trap: {e:#}"));
        codes.push(r.err().map(|e| e.code));
    };
    check(
        iface
            .call_submit_batch(&mut inst.store, s, &[])
            .map(|r| r.map(|_| ())),
    );
    check(
        iface
            .call_submit_batch(&mut inst.store, s, &[call(""), call("b")])
            .map(|r| r.map(|_| ())),
    );
    check(
        iface
            .call_submit_batch(&mut inst.store, s, &[call(&"x".repeat(100_000))])
            .map(|r| r.map(|_| ())),
    );
    check(iface.call_approve(&mut inst.store, s, "nobody"));
    check(iface.call_approve(&mut inst.store, s, "#"));
    check(iface.call_approve(&mut inst.store, s, "a#99999999999999999999"));
    check(iface.call_on_ended(&mut inst.store, s, "", ws::Outcome::Ok));
    check(iface.call_cancel_batch(&mut inst.store, s, u32::MAX));
    check(iface.call_cancel_batch(&mut inst.store, s, 0));
    let many: Vec<ws::Call> = vec![ws::Call {
        id: "f".to_owned(),
        tool: "t".to_owned(),
        operations: Some(u32::MAX),
        finished: vec![ws::Finished {
            operation: u32::MAX,
            failed: true,
        }],
    }];
    check(
        iface
            .call_submit_batch(&mut inst.store, s, &many)
            .map(|r| r.map(|_| ())),
    );
    use ws::ErrorCode as E;
    assert_eq!(
        codes,
        [
            E::EmptyBatch,
            E::InvalidId,
            E::InvalidId,
            E::UnknownEntry,
            E::UnknownEntry,
            E::UnknownEntry,
            E::UnknownEntry,
            E::UnknownBatch,
            E::UnknownBatch,
            E::NotFanOut
        ]
        .map(Some)
    );
    // The same instance still schedules.
    let id = iface
        .call_submit_batch(&mut inst.store, s, &[call("a")])
        .expect("no trap")
        .expect("no error");
    assert_eq!(id, 1);
    iface
        .call_approve(&mut inst.store, s, "a")
        .expect("no trap")
        .expect("no error");
    let r = iface
        .call_next_releases(&mut inst.store, s)
        .expect("no trap");
    assert_eq!(r.start, ["a"]);
}

#[test]
fn entry_ids_cross_without_labels() {
    let mut inst = harness().instance().expect("no trap");
    let (_, s) = scheduler_on(
        &mut inst,
        "[conversation.tools.w]\nconcurrency = 1\nfan_out = { on_error = \"stop\" }\n",
    );
    let iface = inst.exports.turnstile_scheduler_scheduler().scheduler();
    let calls = [
        ws::Call {
            id: "a".to_owned(),
            tool: "w".to_owned(),
            operations: Some(3),
            finished: Vec::new(),
        },
        ws::Call {
            id: "b".to_owned(),
            tool: "w".to_owned(),
            operations: None,
            finished: Vec::new(),
        },
    ];
    let batch = iface
        .call_submit_batch(&mut inst.store, s, &calls)
        .expect("no trap")
        .expect("no error");
    let range = iface
        .call_batch_entries(&mut inst.store, s, batch)
        .expect("no trap")
        .expect("no error");
    assert_eq!((range.first, range.count), (0, 4));
    let labels: Vec<String> = (0..4)
        .map(|i| {
            iface
                .call_label(&mut inst.store, s, range.first + i)
                .expect("no trap")
                .expect("no error")
        })
        .collect();
    assert_eq!(labels, ["a#0", "a#1", "a#2", "b"]);
    // All or nothing: an unknown id (or a duplicate) changes nothing.
    let bad = iface
        .call_approve_ids(&mut inst.store, s, &[0, 1, 99])
        .expect("no trap");
    assert_eq!(bad.map_err(|e| e.code), Err(ws::ErrorCode::UnknownEntry));
    let dup = iface
        .call_approve_ids(&mut inst.store, s, &[0, 0])
        .expect("no trap");
    assert_eq!(dup.map_err(|e| e.code), Err(ws::ErrorCode::AlreadyDecided));
    let r = iface
        .call_next_release_ids(&mut inst.store, s)
        .expect("no trap");
    assert!(r.start.is_empty() && r.settle.is_empty());
    iface
        .call_approve_ids(&mut inst.store, s, &[0, 1, 2, 3])
        .expect("no trap")
        .expect("no error");
    let r = iface
        .call_next_release_ids(&mut inst.store, s)
        .expect("no trap");
    assert_eq!(r.start, [0]);
    // a#0 fails: a#1 and a#2 are stopped, b starts.
    iface
        .call_on_ended_ids(&mut inst.store, s, &[], &[0])
        .expect("no trap")
        .expect("no error");
    let r = iface
        .call_next_release_ids(&mut inst.store, s)
        .expect("no trap");
    assert_eq!(r.start, [3]);
    let stopped: Vec<(u32, ws::Reason)> = r.settle.iter().map(|x| (x.entry, x.reason)).collect();
    assert_eq!(
        stopped,
        [(1, ws::Reason::Stopped(1)), (2, ws::Reason::Stopped(1))]
    );
    // The one-crossing forms: ends, then what to start.
    let none = iface
        .call_on_ended_next(&mut inst.store, s, &[3], &[])
        .expect("no trap")
        .expect("no error");
    assert!(none.start.is_empty() && none.settle.is_empty());
    let twice = iface
        .call_on_ended_ids(&mut inst.store, s, &[3, 3], &[])
        .expect("no trap");
    assert_eq!(twice.map_err(|e| e.code), Err(ws::ErrorCode::AlreadyEnded));
    let unknown = iface
        .call_label(&mut inst.store, s, u32::MAX)
        .expect("no trap");
    assert_eq!(
        unknown.map_err(|e| e.code),
        Err(ws::ErrorCode::UnknownEntry)
    );
}

/// Every WIT function, given hostile values a host can construct, returns a result or a typed
/// error, never a trap; afterwards the same instance still schedules.
#[test]
fn every_wit_function_survives_hostile_input() {
    let mut inst = harness().instance().expect("no trap");
    let mut tried = 0usize;
    let long = "x".repeat(100_000);
    let strings: Vec<String> = [
        "",
        "#",
        "a#",
        "#0",
        "a#-1",
        "a#4294967296",
        "a#0#0",
        "\u{0}",
        "é#1",
        "a b",
        "\n",
        "*",
        "'*'",
        "\u{feff}",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([long.clone()])
    .collect();
    let numbers = [0u32, 1, 2, 7, u32::MAX - 1, u32::MAX];

    // config
    let config = inst.exports.turnstile_scheduler_config().policy();
    let layer = |text: String| wc::Layer {
        name: "hostile".to_owned(),
        text,
    };
    let mut hostile_layers: Vec<Vec<wc::Layer>> = vec![
        (0..65).map(|_| layer(String::new())).collect(),
        vec![layer("a = ".to_owned() + &"[".repeat(1_000_000))],
        vec![layer("a = ".to_owned() + &"{a=".repeat(300_000))],
        vec![layer("[".repeat(1_000_000))],
        vec![layer("x".repeat(2 << 20))],
        vec![layer(format!(
            "[conversation.tools.{long}]\nconcurrency = 1\n"
        ))],
        vec![layer(
            "[conversation.tools.t]\nconcurrency = { key = \"".to_owned() + &long + "\" }\n",
        )],
        vec![layer("a = \"\\uD800\"\n".to_owned())],
        vec![layer("\u{0}\u{1}\u{2}".to_owned())],
        vec![wc::Layer {
            name: long.clone(),
            text: String::new(),
        }],
    ];
    hostile_layers.push(
        (0..5)
            .map(|l| {
                layer(
                    (0..2000)
                        .map(|t| format!("[conversation.tools.t{t}]\nconcurrency = {{ key = \"k\", limit = {} }}\n", l + t % 7))
                        .collect(),
                )
            })
            .collect(),
    );
    for layers in &hostile_layers {
        let result = config
            .call_resolve(&mut inst.store, layers)
            .unwrap_or_else(|e| panic!("resolve trapped: {e:#}"));
        tried += 1;
        if let Err(diags) = result {
            assert!(!diags.is_empty());
        }
    }
    let policy = config
        .call_resolve(
            &mut inst.store,
            &[layer(
                "[conversation.tools.f]\nconcurrency = 2\nfan_out = { on_error = \"stop\" }\n"
                    .to_owned(),
            )],
        )
        .expect("no trap")
        .unwrap_or_else(|_| panic!("config"));
    for s in &strings {
        let _ = config
            .call_tool(&mut inst.store, policy, s)
            .unwrap_or_else(|e| panic!("tool trapped: {e:#}"));
        tried += 1;
    }
    let _ = config.call_tools(&mut inst.store, policy).expect("no trap");

    // scheduler
    let iface = inst.exports.turnstile_scheduler_scheduler().scheduler();
    let s = iface
        .call_constructor(&mut inst.store, policy)
        .expect("no trap");
    let call =
        |id: &str, tool: &str, operations: Option<u32>, finished: Vec<ws::Finished>| ws::Call {
            id: id.to_owned(),
            tool: tool.to_owned(),
            operations,
            finished,
        };
    let mut batches: Vec<Vec<ws::Call>> = vec![
        vec![],
        (0..100_001)
            .map(|i| call(&format!("c{i}"), "t", None, Vec::new()))
            .collect(),
        vec![call("f", "f", Some(u32::MAX), Vec::new())],
        vec![call(
            "f",
            "f",
            Some(3),
            vec![ws::Finished {
                operation: 3,
                failed: true,
            }],
        )],
        vec![call(
            "f",
            "f",
            Some(3),
            vec![
                ws::Finished {
                    operation: 1,
                    failed: true
                };
                2
            ],
        )],
        vec![call(
            "p",
            "t",
            None,
            vec![ws::Finished {
                operation: 0,
                failed: false,
            }],
        )],
        vec![
            call("d", "t", None, Vec::new()),
            call("d", "t", None, Vec::new()),
        ],
        vec![call("z", "t", Some(0), Vec::new())],
    ];
    for s_ in &strings {
        batches.push(vec![call(s_, "t", None, Vec::new())]);
        batches.push(vec![call("ok", s_, None, Vec::new())]);
    }
    for b in &batches {
        let _ = iface
            .call_submit_batch(&mut inst.store, s, b)
            .unwrap_or_else(|e| panic!("submit trapped: {e:#}"));
        tried += 1;
    }
    let each = [
        ws::HostSettle::Rejected,
        ws::HostSettle::Skipped,
        ws::HostSettle::Failed,
    ];
    for label in &strings {
        let st = &mut inst.store;
        let results = [
            iface.call_approve(&mut *st, s, label),
            iface.call_settle(&mut *st, s, label, each[label.len() % 3]),
            iface.call_begin_question(&mut *st, s, label),
            iface.call_end_question(&mut *st, s, label),
            iface.call_on_ended(&mut *st, s, label, ws::Outcome::Failed),
            iface.call_approve_many(&mut *st, s, &[label.clone(), label.clone()]),
            iface.call_on_ended_many(
                &mut *st,
                s,
                &[ws::Ended {
                    entry: label.clone(),
                    outcome: ws::Outcome::Ok,
                }],
            ),
        ];
        for r in results {
            let _ = r.unwrap_or_else(|e| panic!("trap on {label:.20}: {e:#}"));
            tried += 1;
        }
    }
    for &n in &numbers {
        let st = &mut inst.store;
        let _ = iface.call_cancel_batch(&mut *st, s, n).expect("no trap");
        let _ = iface.call_inspect(&mut *st, s, n).expect("no trap");
        let _ = iface.call_batch_entries(&mut *st, s, n).expect("no trap");
        let _ = iface.call_label(&mut *st, s, n).expect("no trap");
        let _ = iface
            .call_approve_ids(&mut *st, s, &[n, n])
            .expect("no trap");
        let _ = iface
            .call_on_ended_ids(&mut *st, s, &[n], &[n])
            .expect("no trap");
        let _ = iface
            .call_approve_next(&mut *st, s, &[n, n])
            .expect("no trap");
        let _ = iface
            .call_on_ended_next(&mut *st, s, &[n], &[n])
            .expect("no trap");
        tried += 8;
    }
    let many: Vec<String> = (0..200_000).map(|i| format!("nobody{i}")).collect();
    let _ = iface
        .call_approve_many(&mut inst.store, s, &many)
        .expect("no trap");
    let ids: Vec<u32> = (0..1_000_000).collect();
    let _ = iface
        .call_approve_ids(&mut inst.store, s, &ids)
        .expect("no trap");
    let _ = iface
        .call_next_releases(&mut inst.store, s)
        .expect("no trap");
    let _ = iface
        .call_next_release_ids(&mut inst.store, s)
        .expect("no trap");
    let _ = iface.call_unfinished(&mut inst.store, s).expect("no trap");
    tried += 5;

    // admission
    let adm = inst.exports.turnstile_scheduler_admission().admission();
    for max in [0, u32::MAX] {
        let a = adm
            .call_constructor(
                &mut inst.store,
                wa::AdmissionConfig {
                    max_concurrent: max,
                    allow_parallel: max == 0,
                },
            )
            .expect("no trap");
        for id in &strings {
            for class in [
                wa::Class::Call,
                wa::Class::Request,
                wa::Class::Control,
                wa::Class::Reentrant,
            ] {
                let st = &mut inst.store;
                let _ = adm
                    .call_begin(&mut *st, a, id, class, Some(id.as_str()))
                    .expect("no trap");
                let _ = adm
                    .call_begin(&mut *st, a, id, class, None)
                    .expect("no trap");
                tried += 2;
            }
            let _ = adm.call_end(&mut inst.store, a, id).expect("no trap");
            let _ = adm.call_abandon(&mut inst.store, a, id).expect("no trap");
            tried += 2;
        }
        let _ = adm
            .call_next_admissions(&mut inst.store, a)
            .expect("no trap");
        let _ = adm.call_shutdown(&mut inst.store, a).expect("no trap");
        let _ = adm.call_shutdown(&mut inst.store, a).expect("no trap");
        let _ = adm
            .call_begin(&mut inst.store, a, "late", wa::Class::Call, None)
            .expect("no trap");
        let _ = adm.call_in_flight(&mut inst.store, a).expect("no trap");
        tried += 5;
    }

    // The same instance still works.
    let fresh = iface
        .call_constructor(&mut inst.store, policy)
        .expect("no trap");
    iface
        .call_submit_batch(&mut inst.store, fresh, &[call("a", "f", None, Vec::new())])
        .expect("no trap")
        .expect("no error");
    iface
        .call_approve(&mut inst.store, fresh, "a")
        .expect("no trap")
        .expect("no error");
    let r = iface
        .call_next_releases(&mut inst.store, fresh)
        .expect("no trap");
    assert_eq!(r.start, ["a"]);
    eprintln!("hostile calls tried: {tried}");
    assert!(tried > 300, "only {tried} hostile calls");
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
    let mut inst = small.instance().expect("no trap");
    let (_, s) = scheduler_on(&mut inst, "");
    let iface = inst.exports.turnstile_scheduler_scheduler().scheduler();
    let calls: Vec<ws::Call> = (0..100_000)
        .map(|i| ws::Call {
            id: format!("a-rather-long-call-id-{i:08}"),
            tool: format!("tool-{i}"),
            operations: None,
            finished: Vec::new(),
        })
        .collect();
    let mut hit = false;
    for _ in 0..8 {
        if iface.call_submit_batch(&mut inst.store, s, &calls).is_err() {
            hit = true;
            break;
        }
    }
    assert!(hit, "8 MiB of linear memory held 800k calls");
    assert!(inst.store.data().memory_peak() <= 8 << 20);
    let mut again = small.instance().expect("no trap");
    let config = again.exports.turnstile_scheduler_config().policy();
    assert!(
        config.call_resolve(&mut again.store, &[]).is_ok(),
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
}

#[test]
fn submit_packed_matches_submit_batch() {
    let mut inst = harness().instance().expect("no trap");
    let (_, s) = scheduler_on(
        &mut inst,
        "[conversation.tools.w]\nconcurrency = 1\nfan_out = true\n",
    );
    let iface = inst.exports.turnstile_scheduler_scheduler().scheduler();
    let mut packed = |ids: &str, tools: &str, ops: &[u32]| {
        iface
            .call_submit_packed(&mut inst.store, s, ids, tools, ops)
            .expect("no trap")
            .map_err(|e| e.code)
    };
    assert_eq!(
        packed("a\nb", "w", &[0, 0]),
        Err(ws::ErrorCode::InvalidOperations)
    );
    assert_eq!(packed("", "", &[]), Err(ws::ErrorCode::EmptyBatch));
    assert_eq!(
        packed("a\na", "w\nw", &[0, 0]),
        Err(ws::ErrorCode::DuplicateId)
    );
    assert_eq!(packed("a", "nobody", &[2]), Err(ws::ErrorCode::NotFanOut));
    assert_eq!(packed("a\nf\nb", "w\nw\nghost", &[0, 2, 0]), Ok(1));
    let labels: Vec<String> = iface
        .call_inspect(&mut inst.store, s, 1)
        .expect("no trap")
        .expect("no error")
        .into_iter()
        .map(|st| format!("{}:{}", st.entry, st.tool))
        .collect();
    assert_eq!(labels, ["a:w", "f#0:w", "f#1:w", "b:ghost"]);
}
