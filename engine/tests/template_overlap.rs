//! No limit slips between templates and keys: a key template and a configured key, or two
//! templates, that can make the same key name must agree on its limit, delay, retries and
//! shared, exactly as tools naming one key do. Failure paths first, then the names that
//! cannot meet.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

use turnstile_engine::config::{self, Layer};

/// Each diagnostic as `CODE tools=A,B lines=L,L`, or `ok` when the config resolves.
fn check(tools: &[(&str, &str)]) -> Vec<String> {
    let text: String = tools
        .iter()
        .map(|(name, c)| format!("[conversation.tools.{name}]\nconcurrency = {c}\n"))
        .collect();
    match config::resolve(&[Layer::new("t.toml", text)]) {
        Ok(_) => vec!["ok".to_owned()],
        Err(diags) => diags
            .iter()
            .map(|d| {
                let lines: Vec<String> = d.labels.iter().map(|l| l.span.line.to_string()).collect();
                format!(
                    "{} tools={} lines={}",
                    d.code.as_str(),
                    d.tools.join(","),
                    lines.join(",")
                )
            })
            .collect(),
    }
}

fn message(tools: &[(&str, &str)]) -> String {
    let text: String = tools
        .iter()
        .map(|(name, c)| format!("[conversation.tools.{name}]\nconcurrency = {c}\n"))
        .collect();
    let diags = config::resolve(&[Layer::new("t.toml", text)]).unwrap_err();
    assert_eq!(diags.len(), 1, "{diags:#?}");
    diags[0].rendered.clone()
}

#[test]
fn a_template_and_a_key_it_can_make_agree_on_every_field() {
    let w = ("w", r#"{ key = "fs:{path}", limit = 1 }"#);
    assert_eq!(
        check(&[w, ("pin", r#"{ key = "fs:/a", limit = 5 }"#)]),
        ["concurrency-limit-conflict tools=w,pin lines=2,4"]
    );
    assert_eq!(
        check(&[w, ("pin", r#"{ key = "fs:/a", delay = 10 }"#)]),
        ["concurrency-delay-conflict tools=w,pin lines=2,4"]
    );
    assert_eq!(
        check(&[w, ("pin", r#"{ key = "fs:/a", retries = 0 }"#)]),
        ["concurrency-retries-conflict tools=w,pin lines=2,4"]
    );
    assert_eq!(
        check(&[("pin", r#"{ key = "fs:/a", shared = true }"#), w]),
        ["concurrency-shared-conflict tools=w,pin lines=4,2"]
    );
    // Every field at once: one diagnostic per field, as for one key.
    assert_eq!(
        check(&[
            w,
            (
                "pin",
                r#"{ key = "fs:/a", limit = 2, delay = 1, retries = 1, shared = true }"#
            )
        ]),
        [
            "concurrency-limit-conflict tools=w,pin lines=2,4",
            "concurrency-delay-conflict tools=w,pin lines=2,4",
            "concurrency-retries-conflict tools=w,pin lines=2,4",
            "concurrency-shared-conflict tools=w,pin lines=2,4",
        ]
    );
    // The integer form's key is the tool's name, and a template can make it.
    assert_eq!(
        check(&[("fs_x", "3"), ("t", r#"{ key = "fs_{a}" }"#)]),
        ["concurrency-limit-conflict tools=t,fs_x lines=4,2"]
    );
    // Placeholders may be empty, so segments may meet: a{x}b{y}c makes "abc".
    assert_eq!(
        check(&[
            ("t", r#"{ key = "a{x}b{y}c" }"#),
            ("k", r#"{ key = "abc", limit = 2 }"#)
        ]),
        ["concurrency-limit-conflict tools=t,k lines=2,4"]
    );
    let rendered = message(&[w, ("pin", r#"{ key = "fs:/a", limit = 5 }"#)]);
    assert!(
        rendered.starts_with(
            "error[concurrency-limit-conflict]: conversation.tools: key template \"fs:{path}\" \
             can make the key \"fs:/a\""
        ),
        "{rendered}"
    );
    assert!(rendered.contains("w = 1"), "{rendered}");
    assert!(rendered.contains("pin = 5"), "{rendered}");
}

#[test]
fn two_templates_that_can_make_one_name_agree() {
    let w = ("w", r#"{ key = "fs:{path}", limit = 1 }"#);
    assert_eq!(
        check(&[w, ("mv", r#"{ key = "fs:{src}", limit = 2 }"#)]),
        ["concurrency-limit-conflict tools=w,mv lines=2,4"]
    );
    // The earlier template's leading text may be the longer one.
    assert_eq!(
        check(&[
            ("a", r#"{ key = "fs:/a/{x}", limit = 1 }"#),
            ("b", r#"{ key = "fs:{y}", limit = 2 }"#)
        ]),
        ["concurrency-limit-conflict tools=a,b lines=2,4"]
    );
    // Compatible prefixes and suffixes meet: "lock:x.lock".
    assert_eq!(
        check(&[
            ("a", r#"{ key = "{a}.lock", limit = 1 }"#),
            ("b", r#"{ key = "lock:{b}", limit = 2 }"#)
        ]),
        ["concurrency-limit-conflict tools=a,b lines=2,4"]
    );
    // A template's own text is a key too (calls whose arguments do not expand take it), and
    // another template can make it though their made keys never meet: "{{{{{b}" makes
    // "{{x{a}" (b = "x{a}"), the text of "{{x{a}", whose made keys all start "{x".
    assert_eq!(
        check(&[
            ("a", r#"{ key = "{{{{{b}", limit = 1 }"#),
            ("b", r#"{ key = "{{x{a}", limit = 2 }"#)
        ]),
        ["concurrency-limit-conflict tools=a,b lines=2,4"]
    );
    let rendered = message(&[w, ("mv", r#"{ key = "fs:{src}", delay = 5 }"#)]);
    assert!(
        rendered.starts_with(
            "error[concurrency-delay-conflict]: conversation.tools: key templates \"fs:{path}\" \
             and \"fs:{src}\" can make the same key (for example \"fs:\")"
        ),
        "{rendered}"
    );
}

#[test]
fn each_template_reports_once_per_field() {
    // Many keys a template can make, all with another limit: one diagnostic, counting the rest.
    let many = [
        ("w", r#"{ key = "fs:{path}", limit = 1 }"#),
        ("r", r#"{ key = "fs:{path}", limit = 1 }"#),
        ("a", r#"{ key = "fs:/a", limit = 2 }"#),
        ("b", r#"{ key = "fs:/b", limit = 2 }"#),
        ("c", r#"{ key = "fs:/c", limit = 3 }"#),
    ];
    assert_eq!(
        check(&many),
        ["concurrency-limit-conflict tools=w,a lines=2,6"]
    );
    let text: String = many
        .iter()
        .map(|(name, c)| format!("[conversation.tools.{name}]\nconcurrency = {c}\n"))
        .collect();
    let diags = config::resolve(&[Layer::new("t.toml", text)]).unwrap_err();
    assert!(
        diags[0].message.contains("and 2 more keys it can make"),
        "{}",
        diags[0].message
    );
    // A key that already disagrees with itself is reported once, as before, not again here.
    assert_eq!(
        check(&[
            ("w", r#"{ key = "fs:{path}", limit = 1 }"#),
            ("a", r#"{ key = "fs:/a", limit = 2 }"#),
            ("b", r#"{ key = "fs:/a", limit = 3 }"#),
        ]),
        ["concurrency-limit-conflict tools=a,b lines=4,6"]
    );
}

#[test]
fn names_that_cannot_meet_or_agree_resolve() {
    for tools in [
        // Incompatible prefixes or suffixes.
        &[
            ("w", r#"{ key = "fs:{path}", limit = 1 }"#),
            ("g", r#"{ key = "github", limit = 4 }"#),
            ("h", r#"{ key = "http:{url}", limit = 8 }"#),
        ][..],
        &[
            ("a", r#"{ key = "{a}.lock", limit = 1 }"#),
            ("b", r#"{ key = "{b}.txt", limit = 2 }"#),
            ("c", r#"{ key = "x.json", limit = 3 }"#),
        ],
        // Middle segments missing or out of order.
        &[
            ("t", r#"{ key = "a{x}b{y}c" }"#),
            ("k", r#"{ key = "acb", limit = 2 }"#),
            ("m", r#"{ key = "axxc", limit = 2 }"#),
        ],
        // A key shorter than the template's text around its placeholders.
        &[
            ("t", r#"{ key = "fs:{path}" }"#),
            ("k", r#"{ key = "fs", limit = 2 }"#),
        ],
        // They meet, and agree (an unset field is its default, as for one key).
        &[
            ("w", r#"{ key = "fs:{path}", limit = 2, delay = 0 }"#),
            ("m", r#"{ key = "fs:{src}", limit = 2, retries = 3 }"#),
            ("p", r#"{ key = "fs:/a", limit = 2, shared = false }"#),
        ],
        // Literal braces: "{{a}}" is the key "{{a}}" (no placeholder), and "x{{{a}" makes only
        // names starting "x{".
        &[
            ("t", r#"{ key = "x{{{a}", limit = 1 }"#),
            ("k", r#"{ key = "x", limit = 2 }"#),
        ],
    ] {
        assert_eq!(check(tools), ["ok"], "{tools:?}");
    }
}

#[test]
fn the_check_stays_cheap_at_the_tool_limit() {
    // (A quadratic walk took about 30 s here in a debug build; the index, well under one.)
    use turnstile_engine::limits::TOOLS_MAX;
    // Every template against every key, none meeting, every value different: the worst case
    // for the pairs compared, with no diagnostic to show for it.
    let half = TOOLS_MAX / 2;
    let mut text = String::new();
    for i in 0..half {
        text.push_str(&format!(
            "[conversation.tools.t{i}]\nconcurrency = {{ key = \"t{i}:{{a}}.{{b}}\", limit = {} }}\n\
             [conversation.tools.k{i}]\nconcurrency = {{ key = \"k{i}\", limit = {} }}\n",
            i + 1,
            i + half + 1
        ));
    }
    assert!(config::resolve(&[Layer::new("t.toml", text)]).is_ok());
}
