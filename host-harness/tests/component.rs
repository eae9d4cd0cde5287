//! The corpus through the built component, and host mistakes that must come back as typed
//! errors on an instance that keeps working. Needs `cargo xtask build-guest` first.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::path::PathBuf;
use std::sync::OnceLock;

use host_harness::{
    ComponentSubject, Harness, default_component_path, wit_config as wc, wit_scheduler as ws,
};
use turnstile_corpus as corpus;

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
        ComponentSubject::new(harness().instance().unwrap_or_else(|e| panic!("{e:#}")))
    });
    for (path, why) in &summary.failed {
        eprintln!("FAIL {}: {why}", path.display());
    }
    assert!(summary.failed.is_empty(), "{}", summary.line());
}

#[test]
fn host_mistakes_are_errors_and_the_instance_survives() {
    let mut inst = harness().instance().unwrap_or_else(|e| panic!("{e:#}"));
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
    let policy = config
        .call_resolve(&mut inst.store, &[])
        .unwrap_or_else(|e| panic!("{e:#}"))
        .unwrap_or_else(|_| panic!("empty config"));
    let iface = inst.exports.turnstile_scheduler_scheduler().scheduler();
    let s = iface
        .call_constructor(&mut inst.store, policy)
        .unwrap_or_else(|e| panic!("{e:#}"));
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
        .unwrap_or_else(|e| panic!("{e:#}"))
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(id, 1);
    iface
        .call_approve(&mut inst.store, s, "a")
        .unwrap_or_else(|e| panic!("{e:#}"))
        .unwrap_or_else(|e| panic!("{e:?}"));
    let r = iface
        .call_next_releases(&mut inst.store, s)
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(r.start, ["a"]);
}
