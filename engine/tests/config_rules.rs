//! Config rules of issue 18: one code per mistake (every negative number in `concurrency` is
//! `concurrency-negative`) and one key length (`KEY_BYTES_MAX`, for configured keys, the
//! integer form's tool-name key, template text and made keys alike). Failure paths first.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

use turnstile_engine::config::{self, Layer};
use turnstile_engine::limits::{KEY_BYTES_MAX, NAME_BYTES_MAX};
use turnstile_engine::schedule::{Call, Scheduler};

/// The codes `text` resolves to, in order (empty when it resolves).
fn codes(text: &str) -> Vec<&'static str> {
    match config::resolve(&[Layer::new("t.toml", text)]) {
        Ok(_) => Vec::new(),
        Err(diags) => diags.iter().map(|d| d.code.as_str()).collect(),
    }
}

#[test]
fn every_negative_number_in_concurrency_is_concurrency_negative() {
    for text in [
        "concurrency = -1",
        "concurrency = { key = \"k\", limit = -1 }",
        "concurrency = { key = \"k\", retries = -1 }",
        "concurrency = { key = \"k\", delay = -5 }",
        "concurrency = { key = \"k\", delay = \"-5ms\" }",
        "concurrency = { key = \"k\", limit = -0x1 }",
    ] {
        let text = format!("[conversation.tools.t]\n{text}\n");
        // -0x1 is not TOML at all; the others are one diagnostic each.
        let got = codes(&text);
        if text.contains("0x") {
            assert_eq!(got, ["toml-syntax"], "{text}");
        } else {
            assert_eq!(got, ["concurrency-negative"], "{text}");
        }
    }
    // Wrong types stay wrong types, and zero is not negative.
    assert_eq!(
        codes("[conversation.tools.t]\nconcurrency = { key = \"k\", limit = -1.5 }\n"),
        ["concurrency-type"]
    );
    assert_eq!(
        codes("[conversation.tools.t]\nconcurrency = { key = \"k\", limit = -0, delay = -0 }\n"),
        Vec::<&str>::new()
    );
}
#[test]
fn keys_have_one_length_limit() {
    const { assert!(KEY_BYTES_MAX <= NAME_BYTES_MAX) };
    let key = |n: usize| "k".repeat(n);
    // A configured key, a template's text (its own key) and the integer form's key (the
    // tool's name) are all keys.
    let table = |k: &str| format!("[conversation.tools.t]\nconcurrency = {{ key = \"{k}\" }}\n");
    assert_eq!(codes(&table(&key(KEY_BYTES_MAX))), Vec::<&str>::new());
    assert_eq!(codes(&table(&key(KEY_BYTES_MAX + 1))), ["too-large"]);
    let template = format!("{}{{path}}", key(KEY_BYTES_MAX - 5));
    assert_eq!(template.len(), KEY_BYTES_MAX + 1);
    assert_eq!(codes(&table(&template)), ["too-large"]);
    let integer = |name: &str, n: u32| format!("[conversation.tools.{name}]\nconcurrency = {n}\n");
    assert_eq!(codes(&integer(&key(KEY_BYTES_MAX), 1)), Vec::<&str>::new());
    let diags =
        config::resolve(&[Layer::new("t.toml", integer(&key(KEY_BYTES_MAX + 1), 2))]).unwrap_err();
    assert_eq!(diags.len(), 1);
    assert_eq!(diags[0].code.as_str(), "too-large");
    assert!(
        diags[0].message.contains("the tool's name"),
        "{}",
        diags[0].message
    );
    // A tool name that long is fine when it declares no key.
    assert_eq!(codes(&integer(&key(NAME_BYTES_MAX), 0)), Vec::<&str>::new());
    assert_eq!(
        codes(&format!(
            "[conversation.tools.{}]\nfan_out = true\n",
            key(NAME_BYTES_MAX)
        )),
        Vec::<&str>::new()
    );
}

#[test]
fn a_made_key_longer_than_a_key_may_be_takes_the_templates_own_key() {
    let p = config::resolve(&[Layer::new(
        "t.toml",
        "[conversation.tools.w]\nconcurrency = { key = \"fs:{path}\", limit = 1 }\n",
    )])
    .unwrap();
    let mut s = Scheduler::new(p);
    let fits = "x".repeat(KEY_BYTES_MAX - 3);
    let args = [
        format!("{{\"path\":\"{fits}\"}}"),
        format!("{{\"path\":\"{fits}y\"}}"),
    ];
    let calls: Vec<Call<'_>> = ["a", "b"]
        .iter()
        .zip(&args)
        .map(|(id, a)| Call {
            id,
            tool: "w",
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
    assert_eq!(
        keys,
        [Some(format!("fs:{fits}")), Some("fs:{path}".to_owned())]
    );
}
