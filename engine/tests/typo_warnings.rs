//! Warnings for mistakes that silently lift a limit: a field or table name a small edit away
//! from one Turnstile reads (`concurency`, `conversation.tool`, `fanout`, `fan-out`) is a
//! warning, `unknown-field-typo`, with a "did you mean" help. Resolution still succeeds and the
//! policy carries the warnings; when it fails, warnings follow the errors. Other unknown
//! fields stay ignored. Failure paths (the typos) first.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

use turnstile_engine::config::{self, Layer};
use turnstile_engine::diagnostic::{Diagnostic, Severity};

/// `SEVERITY CODE LINE help` for every diagnostic, errors and warnings alike.
fn show(d: &Diagnostic) -> String {
    let line = d.labels.first().map_or(0, |l| l.span.line);
    format!(
        "{} {} {line} {}",
        d.severity.as_str(),
        d.code.as_str(),
        d.help.as_deref().unwrap_or("-")
    )
}

/// The warnings of a config that resolves.
fn warnings(text: &str) -> Vec<String> {
    let policy = config::resolve(&[Layer::new("t.toml", text)]).expect("resolves");
    policy.warnings().iter().map(show).collect()
}

#[test]
fn near_misses_of_what_turnstile_reads_warn() {
    for (text, help) in [
        (
            "[conversation.tools.rfd]\nconcurency = { key = \"rfd\" }\n",
            "did you mean `concurrency`?",
        ),
        (
            "[conversation.tools.rfd]\nConcurrency = 1\n",
            "did you mean `concurrency`?",
        ),
        (
            "[conversation.tools.rfd]\nconcurrencey = 1\n",
            "did you mean `concurrency`?",
        ),
        (
            "[conversation.tools.rfd]\nfanout = true\n",
            "did you mean `fan_out`?",
        ),
        (
            "[conversation.tools.rfd]\nfan-out = true\n",
            "did you mean `fan_out`?",
        ),
        (
            "[conversation.tools.rfd]\nFan_Out = true\n",
            "did you mean `fan_out`?",
        ),
        (
            "[conversation.tool.rfd_draft]\nconcurrency = { key = \"rfd\" }\n",
            "did you mean `tools`?",
        ),
        (
            "[conversations.tools.rfd_draft]\nconcurrency = 1\n",
            "did you mean `conversation`?",
        ),
        (
            "[converstaion.tools.rfd_draft]\nconcurrency = 1\n",
            "did you mean `conversation`?",
        ),
        (
            "[conversation.tools.rfd.concurency]\nkey = \"rfd\"\n",
            "did you mean `concurrency`?",
        ),
    ] {
        let got = warnings(text);
        assert_eq!(got.len(), 1, "{text}: {got:?}");
        // The name is on the second line after a tool's header, else in the header.
        let line = if text.starts_with("[conversation.tools.rfd]") {
            2
        } else {
            1
        };
        assert_eq!(
            got[0],
            format!("warning unknown-field-typo {line} {help}"),
            "{text}"
        );
    }
    // The policy says what was read: nothing, so the tool is unbounded, and the warning says
    // why.
    let text = "[conversation.tools.rfd]\nconcurency = { key = \"rfd\" }\n";
    let policy = config::resolve(&[Layer::new("rules.toml", text)]).unwrap();
    assert!(policy.tool("rfd").is_none_or(|t| t.concurrency.is_empty()));
    let w = &policy.warnings()[0];
    assert_eq!(w.severity, Severity::Warning);
    assert_eq!(w.tools, ["rfd"]);
    assert_eq!(w.path, ["conversation", "tools", "rfd", "concurency"]);
    assert!(
        w.rendered
            .starts_with("warning[unknown-field-typo]: conversation.tools.rfd.concurency: "),
        "{}",
        w.rendered
    );
    assert!(w.rendered.contains(" --> rules.toml:2:1"), "{}", w.rendered);
    assert!(
        w.rendered.contains("= help: did you mean `concurrency`?"),
        "{}",
        w.rendered
    );
}

#[test]
fn typos_inside_concurrency_and_fan_out_are_errors_with_the_same_help() {
    for (text, code, help) in [
        (
            "concurrency = { key = \"k\", limt = 2 }",
            "concurrency-unknown-field",
            "did you mean `limit`?",
        ),
        (
            "concurrency = { key = \"k\", Delay = 5 }",
            "concurrency-unknown-field",
            "did you mean `delay`?",
        ),
        (
            "concurrency = { kye = \"k\" }",
            "concurrency-unknown-field",
            "did you mean `key`?",
        ),
        (
            "concurrency = { key = \"k\", retires = 1 }",
            "concurrency-unknown-field",
            "did you mean `retries`?",
        ),
        (
            "concurrency = { key = \"k\", shard = true }",
            "concurrency-unknown-field",
            "did you mean `shared`?",
        ),
        (
            "fan_out = { enable = true }",
            "fan-out-unknown-field",
            "did you mean `enabled`?",
        ),
        (
            "fan_out = { on-error = \"stop\" }",
            "fan-out-unknown-field",
            "did you mean `on_error`?",
        ),
    ] {
        let text = format!("[conversation.tools.t]\n{text}\n");
        let diags = config::resolve(&[Layer::new("t.toml", &text)]).unwrap_err();
        let got: Vec<String> = diags.iter().map(show).collect();
        assert_eq!(got, [format!("error {code} 2 {help}")], "{text}");
    }
}

#[test]
fn warnings_follow_the_errors_when_resolution_fails() {
    let text = "[conversation.tools.a]\nfanout = true\n\
                [conversation.tools.b]\nconcurrency = -1\n\
                [conversation.tool.c]\nconcurrency = 1\n";
    let diags = config::resolve(&[Layer::new("t.toml", text)]).unwrap_err();
    let got: Vec<String> = diags.iter().map(show).collect();
    assert_eq!(
        got,
        [
            "error concurrency-negative 4 0 means unbounded; a limit is 1 or more",
            "warning unknown-field-typo 2 did you mean `fan_out`?",
            "warning unknown-field-typo 5 did you mean `tools`?",
        ]
    );
    assert!(diags[0].rendered.starts_with("error[concurrency-negative]"));
    assert!(diags[1].rendered.starts_with("warning[unknown-field-typo]"));
}

#[test]
fn other_unknown_fields_stay_silent() {
    let text = r#"
title = "x"
[assistant]
name = "y"
[conversation]
title = "z"
mode = "fast"
[conversation.tools.fs]
source = "builtin"
run = "always"
command = "fs"
parameters = { path = "string" }
style = "inline"
enable = true
description = "files"
timeout = 30
fan_in = 1
currency = "usd"
[conversation.tools.'*']
concurency = 1
"#;
    assert_eq!(warnings(text), Vec::<String>::new());
    assert_eq!(
        warnings("[conversation.tools.t]\nconcurrency = 1\nfan_out = true\n"),
        Vec::<String>::new()
    );
}
