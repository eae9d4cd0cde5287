//! Config resolution on TOML-shaped input: bytes choose tools, fields and values from the shapes
//! RFD 129 knows (and near misses), over up to three layers, so the fuzzer spends its time in
//! merging and validation rather than in the TOML parser. Resolution must never panic, spans
//! must lie inside their layer, and a resolved keyed tool always has a limit of at least 1.
#![no_main]

use libfuzzer_sys::fuzz_target;
use turnstile_engine::config::{self, Layer};

const TOOLS: &[&str] = &["a", "b", "c", "'*'", "\"*\"", "a.b", "fs_delete_file"];
const CONCURRENCY: &[&str] = &[
    "0",
    "1",
    "2",
    "5",
    "-1",
    "4294967296",
    "1.5",
    "true",
    "\"2\"",
    "[1]",
    "{}",
    "{ key = \"k\" }",
    "{ key = \"k\", limit = 0 }",
    "{ key = \"k\", limit = 2 }",
    "{ key = \"j\", limit = 3 }",
    "{ limit = 4 }",
    "{ key = \"\" }",
    "{ key = 5 }",
    "{ key = \"k\", delay = 1 }",
    "{ key = \"a\" }",
    "[{ key = \"k\" }, { key = \"a\", limit = 2 }]",
    "[]",
    "[{ key = \"x:{p}\" }, { key = \"x:{q}\" }]",
    "[{ key = \"k\", shared = true }, 2]",
    "{ key = \"k\", shared = true, rate = [\"900/min\", \"5000/h\"], burst = 10 }",
    "{ key = \"k\", shared = true, rate = \"2000000/h\" }",
    "{ key = \"fs\", path = \"{p}\" }",
    "{ key = \"fs\", path = \"/\", limit = 2 }",
    "[{ key = \"fs\", path = \"{p}\" }, { key = \"fs\", path = \"{q}\" }]",
    "{ key = \"k\", path = 3 }",
    "{ key = \"x:{p}\", path = \"{q}\" }",
];
const FAN_OUT: &[&str] = &[
    "true",
    "false",
    "{}",
    "{ on_error = \"stop\" }",
    "{ on_error = \"continue\" }",
    "{ enabled = false, on_error = \"stop\" }",
    "{ concurrency = 1 }",
    "{ on_error = \"halt\" }",
    "{ retries = 2 }",
    "3",
];
const ENABLE: &[&str] = &[
    "true",
    "\"explicit\"",
    "\"bogus\"",
    "{ state = false }",
    "{ allow_toggle = \"always\" }",
    "1",
];

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.iter().copied();
    let mut next = |n: usize| usize::from(bytes.next().unwrap_or(0)) % n;
    let mut layers = Vec::new();
    for l in 0..1 + next(3) {
        let mut text = String::new();
        for _ in 0..next(6) {
            text.push_str(&format!(
                "[conversation.tools.{}]\n",
                TOOLS[next(TOOLS.len())]
            ));
            for _ in 0..next(4) {
                match next(4) {
                    0 => text.push_str(&format!(
                        "concurrency = {}\n",
                        CONCURRENCY[next(CONCURRENCY.len())]
                    )),
                    1 => text.push_str(&format!("fan_out = {}\n", FAN_OUT[next(FAN_OUT.len())])),
                    2 => text.push_str(&format!("enable = {}\n", ENABLE[next(ENABLE.len())])),
                    _ => text.push_str("source = \"local\"\nrun = \"ask\"\n"),
                }
            }
        }
        layers.push(Layer::new(format!("L{l}"), text));
    }
    match config::resolve(&layers) {
        Ok(policy) => {
            for tool in policy.tools() {
                assert!(tool.concurrency.len() <= 8);
                for c in &tool.concurrency {
                    assert!(c.limit.get() >= 1 && !c.key.as_str().is_empty());
                }
            }
        }
        Err(diags) => {
            for d in &diags {
                assert!(d.rendered.contains(d.code.as_str()));
                for label in &d.labels {
                    let text = &layers[label.span.layer as usize].text;
                    assert!(label.span.end as usize <= text.len());
                }
            }
        }
    }
});
