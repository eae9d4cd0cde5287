//! `simulate`'s input rules: what a case file may hold, where its errors point, and how the
//! flags add to it. The timelines themselves are checked by every CLI against
//! tests/simulate/runs.toml.

use super::{Error, Input, run};
use crate::config::Layer;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

fn file(text: &str) -> Input {
    Input {
        file: Some(("case.toml".to_owned(), text.to_owned())),
        ..Input::default()
    }
}

fn refused(input: &Input) -> Error {
    run(input).expect_err("simulated")
}

fn timeline(input: &Input) -> String {
    run(input).unwrap().timeline
}

const ONE_TOOL: &str = "[[layer]]\ntext = '''\n[conversation.tools.a]\nconcurrency = 1\n'''\n";

#[test]
fn a_case_file_runs_and_the_flags_add_to_it() {
    let text = format!("{ONE_TOOL}\n[[batch]]\ncalls = [\"a1 a\", \"a2 a\"]\n");
    let shown = timeline(&file(&text));
    assert!(
        shown.contains("    10  start   a2         a key a\n"),
        "{shown}"
    );
    let mut input = file(&text);
    input.durations = vec!["a2=1".to_owned(), "4".to_owned()];
    input.fail.push("a1".to_owned());
    input.calls.push("b1 b".to_owned());
    let shown = timeline(&input);
    assert!(
        shown.contains("     4  end     a1         failed\n"),
        "{shown}"
    );
    assert!(shown.contains("     5  end     a2         ok\n"), "{shown}");
    assert!(shown.contains("submit  batch 2    1 call\n"), "{shown}");
}

#[test]
fn warnings_come_with_the_timeline() {
    let input = Input {
        layers: vec![Layer::new(
            "warn.toml",
            "[conversation.tools.x]\nconcurency = 2\n",
        )],
        calls: vec!["a x".to_owned()],
        ..Input::default()
    };
    let simulated = run(&input).unwrap();
    assert_eq!(simulated.warnings.len(), 1);
    assert!(simulated.warnings[0].rendered.contains("concurency"));
    assert!(simulated.timeline.contains("x unkeyed"));
}

#[test]
fn flags_with_wrong_values_are_usage_mistakes_that_name_the_flag() {
    let durations = |d: &str| Input {
        durations: vec![d.to_owned()],
        ..Input::default()
    };
    let case_as_layer = Input {
        layers: vec![Layer::new("case.toml", "[[batch]]\ncalls = [\"a1 a\"]\n")],
        calls: vec!["a1 a".to_owned()],
        ..Input::default()
    };
    let cases = [
        (durations("soon"), "--duration: expected MS or LABEL=MS"),
        (
            durations("18446744073709551616"),
            "at most 9007199254740991",
        ),
        (
            Input {
                calls: vec!["w1 write {path: a}".to_owned()],
                ..Input::default()
            },
            "--calls: `w1 write {path: a}`: the arguments",
        ),
        (case_as_layer, "--layer case.toml: this is a case file"),
    ];
    for (input, says) in cases {
        let e = refused(&input);
        assert!(matches!(e, Error::Usage(_)), "{e:?}");
        assert_eq!(e.exit_status(), 2);
        assert!(e.to_string().contains(says), "no {says:?} in {e}");
    }
}

#[test]
fn the_longest_durations_do_not_overflow_the_clock() {
    let input = Input {
        calls: vec!["a1 a, a2 a, a3 a".to_owned()],
        layers: vec![Layer::new(
            "l.toml",
            "[conversation.tools.a]\nconcurrency = 1\n",
        )],
        durations: vec!["9007199254740991".to_owned()],
        ..Input::default()
    };
    let shown = timeline(&input);
    assert!(shown.contains("27021597764222973  done"), "{shown}");
}

#[test]
fn a_case_file_with_a_mistake_says_where() {
    let cases = [
        (
            "[[batches]]\ncalls = []\n",
            "line 1, column 3: unknown field `batches`",
        ),
        ("layer = 3\n", "`layer` must be an array of tables"),
        ("[[layer]]\nname = \"x\"\n", "a [[layer]] needs `text`"),
        (
            "[[layer]]\ntext = 3\n",
            "line 2, column 8: `text` must be a string",
        ),
        (
            "[[batch]]\ncall = [\"a1 a\"]\n",
            "unknown field `call` in a [[batch]]",
        ),
        (
            "[[batch]]\ncalls = [\"a1 a\"]\nexecution_ms = -1\n",
            "`execution_ms` must be a whole number",
        ),
        (
            "[[batch]]\ncalls = [\"a1 a\"]\nexecution_ms = 5000000000\n",
            "`execution_ms` is above",
        ),
        (
            "[simulate]\nduration = 3\n",
            "unknown field `duration` in [simulate]",
        ),
        (
            "[simulate]\ndurations = { a1 = \"x\" }\n",
            "`a1` must be a whole number",
        ),
        (
            "[simulate]\nduration_ms = 9007199254740992\n",
            "`duration_ms` is at most 9007199254740991 ms",
        ),
        (
            "[simulate]\nfail = \"a1\"\n",
            "`fail` must be an array of strings",
        ),
        ("simulate = 1\n", "`simulate` must be a table"),
        ("[[batch]\n", "line 1, column"),
    ];
    for (text, says) in cases {
        let e = refused(&file(text));
        assert!(matches!(e, Error::NotACase(_)), "{text}: {e:?}");
        assert_eq!(e.exit_status(), 1);
        let shown = e.to_string();
        assert!(shown.starts_with("case.toml: not a case file: "), "{shown}");
        assert!(shown.contains(says), "{text}: no {says:?} in {shown}");
    }
}

#[test]
fn a_corpus_case_s_other_fields_are_not_read() {
    let text = format!(
        "description = \"d\"\ntools = [\"a a/1\"]\n{ONE_TOOL}\n[[batch]]\ncalls = [\"a1 a\"]\n\n[[step]]\ndo = \"submit 1\"\nwhatever = true\n"
    );
    assert!(run(&file(&text)).is_ok());
}

#[test]
fn diagnostics_cite_the_file_s_lines_or_an_escaped_layer_s_own() {
    let text = "[[layer]]\ntext = '''\n[conversation.tools.a]\nconcurrency = -1\n'''\n\n[[batch]]\ncalls = [\"a1 a\"]\n";
    let Error::Config(d) = refused(&file(text)) else {
        panic!("not a config error");
    };
    assert!(
        d[0].rendered.contains("--> case.toml:4:15"),
        "{}",
        d[0].rendered
    );
    let escaped = "[[layer]]\nname = \"esc\"\ntext = \"[conversation.tools.a]\\nconcurrency = -1\\n\"\n\n[[batch]]\ncalls = [\"a1 a\"]\n";
    let Error::Config(d) = refused(&file(escaped)) else {
        panic!("not a config error");
    };
    assert!(
        d[0].rendered.contains("--> case.toml[esc]:2:15"),
        "{}",
        d[0].rendered
    );
}

#[test]
fn nothing_to_simulate_and_calls_that_are_not_calls_are_usage_mistakes() {
    let e = refused(&file(ONE_TOOL));
    assert_eq!(
        (e.exit_status(), e.to_string().as_str()),
        (
            2,
            "case.toml has no [[batch]]: nothing to simulate (add --calls)"
        )
    );
    let layers_only = Input {
        layers: vec![Layer::new("l.toml", "")],
        ..Input::default()
    };
    assert!(matches!(refused(&layers_only), Error::Nothing(_)));
    for calls in ["a1", "a1 a,", "a1 a*0", "a1 a*x"] {
        let input = Input {
            calls: vec![calls.to_owned()],
            ..Input::default()
        };
        let e = refused(&input);
        assert!(matches!(e, Error::Usage(_)), "{calls}: {e:?}");
        assert_eq!(e.exit_status(), 2);
    }
}

#[test]
fn labels_and_batches_the_scheduler_refuses_are_input_errors() {
    let text = format!(
        "{ONE_TOOL}\n[[batch]]\ncalls = [\"a1 a\"]\n\n[simulate]\ndurations = {{ a9 = 1 }}\n"
    );
    let e = refused(&file(&text));
    assert_eq!(
        e.to_string(),
        "no entry is labelled a9 (named by --duration or the file's durations); the labels are a1"
    );
    let dup = Input {
        calls: vec!["a1 a, a1 a".to_owned()],
        ..Input::default()
    };
    assert!(refused(&dup).to_string().starts_with("batch 1: "));
    assert_eq!(refused(&dup).exit_status(), 1);
}

#[test]
fn the_embedded_default_runs_and_help_names_the_program() {
    let shown = timeline(&Input::default());
    assert!(
        shown.ends_with("    70  done               every entry ended or settled\n"),
        "{shown}"
    );
    let help = super::help("turnstile");
    assert!(help.starts_with("usage: turnstile simulate [FILE]"));
    assert!(
        help.contains("\n                          [--duration MS]"),
        "{help}"
    );
}

#[test]
fn a_shared_key_is_simulated_as_its_store_would_grant_one_process() {
    let layer = |shared: &str| Input {
        layers: vec![Layer::new(
            "l.toml",
            format!(
                "[conversation.tools.api]\nconcurrency = {{ key = \"api\", limit = 2, delay = 1000{shared} }}\n"
            ),
        )],
        calls: vec!["a api, b api, c api".to_owned()],
        ..Input::default()
    };
    let shared = timeline(&layer(", shared = true"));
    assert_eq!(shared, timeline(&layer("")));
    assert!(shared.contains("  1000  start   b "), "{shared}");
    assert!(shared.contains("  2000  start   c "), "{shared}");
}

#[test]
fn more_entries_than_a_timeline_is_for_are_refused() {
    let input = |n: u32| Input {
        layers: vec![Layer::new(
            "l.toml",
            "[conversation.tools.f]\nconcurrency = 1\nfan_out = true\n",
        )],
        calls: vec![format!("x f*{n}")],
        ..Input::default()
    };
    // 2000 pass the cap (and fail after submission, at the label check: nothing runs).
    let mut at_the_cap = input(2000);
    at_the_cap.fail.push("nope".to_owned());
    assert!(
        refused(&at_the_cap)
            .to_string()
            .starts_with("no entry is labelled nope")
    );
    let e = refused(&input(2001));
    assert_eq!(e.exit_status(), 1);
    assert!(
        e.to_string()
            .starts_with("the batches have 2001 entries; simulate runs at most 2000"),
        "{e}"
    );
}
