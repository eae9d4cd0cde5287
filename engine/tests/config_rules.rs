//! Config rules of issue 18: one code per mistake (every negative number in `concurrency` is
//! `concurrency-negative`) and one key length (`KEY_BYTES_MAX`, for configured keys, the
//! integer form's tool-name key, template text and made keys alike). Failure paths first.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use turnstile_engine::config::{self, Layer};

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
