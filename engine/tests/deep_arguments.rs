//! Arguments nested deeper than a recursive reader would take still name their key: two
//! writes to one file never run at once under limit 1 because one of them carries a deeply
//! nested field. Any depth up to `ARGUMENTS_BYTES_MAX` is read, without recursion.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

use turnstile_engine::config::{self, Layer};
use turnstile_engine::limits::ARGUMENTS_BYTES_MAX;
#[path = "common/step.rs"]
mod step;

use step::{Inputs, Outputs, Step};
use turnstile_engine::schedule::{Call, EntryId, Scheduler};

#[test]
fn deeply_nested_arguments_name_their_key() {
    let policy = config::resolve(&[Layer::new(
        "t.toml",
        "[conversation.tools.fs_write]\nconcurrency = { key = \"fs:{path}\", limit = 1 }\n",
    )])
    .unwrap();
    let mut s = Scheduler::new(policy);
    // As deep as the size limit allows: `{"x":` + n `[` + n `]` + `,"path":"/a"}`.
    let depth = (ARGUMENTS_BYTES_MAX - 20) / 2;
    let deep = format!(
        "{{\"x\":{}{},\"path\":\"/a\"}}",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    assert!(deep.len() <= ARGUMENTS_BYTES_MAX && depth > 30_000);
    let args = [deep.as_str(), "{\"path\":\"/a\"}", "{\"path\":\"/b\"}"];
    let calls: Vec<Call<'_>> = ["w1", "w2", "w3"]
        .iter()
        .zip(args)
        .map(|(id, a)| Call {
            id,
            tool: "fs_write",
            operations: None,
            arguments: Some(a),
        })
        .collect();
    let submitted = s.submit_batch(&calls).unwrap();
    let keys: Vec<Option<String>> = s
        .inspect(submitted.batch)
        .unwrap()
        .iter()
        .map(|e| e.keys.first().cloned())
        .collect();
    let key = |k: &str| Some(k.to_owned());
    assert_eq!(keys, [key("fs:/a"), key("fs:/a"), key("fs:/b")]);
    // w1 and w3 start; w2 writes the file w1 writes, so it waits.
    let first = submitted.first.0;
    let approve: Vec<EntryId> = (first..first + 3).map(EntryId).collect();
    let mut out = Outputs::default();
    s.step(
        &Inputs {
            approve: &approve,
            ..Inputs::default()
        },
        &mut out,
    );
    let started: Vec<u64> = out.start.iter().map(|e| e.0).collect();
    assert_eq!(started, [first, first + 2]);
}
