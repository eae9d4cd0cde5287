//! The `host-harness` command line as people use it: the built binary run as a process. Help
//! on stdout with status 0, usage errors on stderr with status 2, the component embedded so a
//! moved binary runs anywhere, diagnostics citing a case file's own lines, reasons in words,
//! and `simulate --layer --calls` without a case file.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{OnceLock, RwLock};

/// Held shared while a child is spawned, exclusively while a binary is copied: a child forked
/// during the copy would inherit the copy's open file, and running it would fail with "text
/// file busy" until that child exits.
static SPAWN: RwLock<()> = RwLock::new(());

/// What one run printed, and its exit status.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// The binary, with the component available: when this build embeds none, the binary falls
/// back to the file `built_component_path` makes.
fn harness() -> Command {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        host_harness::built_component_path().unwrap_or_else(|e| panic!("{e}"));
    });
    Command::new(env!("CARGO_BIN_EXE_host-harness"))
}

fn run_in(dir: Option<&Path>, args: &[&str]) -> Run {
    let mut cmd = harness();
    cmd.args(args);
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    output(&mut cmd)
}

fn run(args: &[&str]) -> Run {
    run_in(None, args)
}

fn output(cmd: &mut Command) -> Run {
    let child = {
        let _spawning = SPAWN.read().unwrap_or_else(|e| e.into_inner());
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()
    };
    let out = child
        .and_then(|c| c.wait_with_output())
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A fresh, empty folder of this test's own (removed first if a previous run left it).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("host-harness-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[track_caller]
fn assert_help(args: &[&str], must_contain: &[&str]) {
    let r = run(args);
    assert_eq!(r.code, Some(0), "{args:?}: {r:?}");
    assert!(r.stderr.is_empty(), "{args:?} wrote to stderr: {r:?}");
    assert!(
        r.stdout.starts_with("usage: host-harness"),
        "{args:?}: {r:?}"
    );
    for text in must_contain {
        assert!(
            r.stdout.contains(text),
            "{args:?}: no {text:?} in\n{}",
            r.stdout
        );
    }
}

#[track_caller]
fn assert_usage_error(args: &[&str], must_contain: &str) {
    let r = run(args);
    assert_eq!(r.code, Some(2), "{args:?}: {r:?}");
    assert!(r.stdout.is_empty(), "{args:?} wrote to stdout: {r:?}");
    assert!(
        r.stderr.contains(must_contain),
        "{args:?}: no {must_contain:?} in\n{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("--help"),
        "{args:?}: no pointer to --help: {r:?}"
    );
}

#[test]
fn help_is_on_stdout_with_status_0_for_every_command() {
    let top = [
        "cases PATH",
        "check LAYER",
        "simulate [FILE]",
        "--component PATH",
    ];
    for args in [&["--help"][..], &["-h"], &["help"]] {
        assert_help(args, &top);
    }
    let cases = ["usage: host-harness cases PATH", "tests/cases/README.md"];
    for args in [
        &["cases", "--help"][..],
        &["cases", "-h"],
        &["help", "cases"],
    ] {
        assert_help(args, &cases);
    }
    for args in [
        &["check", "--help"][..],
        &["check", "-h"],
        &["help", "check"],
    ] {
        assert_help(args, &["usage: host-harness check [--deny-warnings] LAYER"]);
    }
    // The simulate help is the file format's documentation.
    let simulate = [
        "usage: host-harness simulate",
        "--layer",
        "--calls",
        "--duration",
        "--fail",
        "[[layer]]",
        "text = '''",
        "[[batch]]",
        "ID TOOL*N",
        "[simulate]",
        "duration_ms",
        "durations",
        "fail = [",
        "ID#0",
    ];
    for args in [
        &["simulate", "--help"][..],
        &["simulate", "-h"],
        &["help", "simulate"],
    ] {
        assert_help(args, &simulate);
    }
    // Help comes first, even after other arguments.
    assert_help(
        &["simulate", "x.toml", "--help"],
        &["usage: host-harness simulate"],
    );
}

#[test]
fn unknown_commands_and_flags_are_usage_errors() {
    assert_usage_error(&[], "no command");
    assert_usage_error(&["frobnicate"], "unknown command `frobnicate`");
    assert_usage_error(&["--frobnicate"], "unknown option `--frobnicate`");
    assert_usage_error(&["help", "frobnicate"], "unknown command `frobnicate`");
    assert_usage_error(&["cases", "--frobnicate"], "unknown option `--frobnicate`");
    assert_usage_error(&["check", "-x"], "unknown option `-x`");
    assert_usage_error(
        &["simulate", "--frobnicate"],
        "unknown option `--frobnicate`",
    );
    assert_usage_error(&["simulate", "--calls"], "--calls needs a value");
    assert_usage_error(&["--component"], "--component needs a value");
    assert_usage_error(&["simulate", "a.toml", "b.toml"], "one FILE");
    assert_usage_error(&["simulate", "--duration", "soon"], "--duration");
}

#[test]
fn commands_without_their_files_are_usage_errors() {
    assert_usage_error(&["check"], "check needs at least one LAYER");
    assert_usage_error(&["cases"], "cases needs at least one PATH");
    // Layers without calls: the component says so, after the files were read.
    let dir = scratch("layers-only");
    std::fs::write(
        dir.join("l.toml"),
        "[conversation.tools.a]\nconcurrency = 1\n",
    )
    .unwrap();
    let r = run_in(Some(&dir), &["simulate", "--layer", "l.toml"]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains("give the batches with --calls"), "{r:?}");
    assert!(r.stderr.contains("simulate --help"), "{r:?}");
}

/// The binary copied elsewhere and run from another folder, with no hint of the workspace: the
/// embedded component runs; a build that embeds none says how to get one. `--component` still
/// wins over the embedded copy.
#[test]
fn a_moved_binary_runs_from_another_folder() {
    let dir = scratch("moved");
    let moved = dir.join("host-harness");
    {
        let _copying = SPAWN.write().unwrap_or_else(|e| e.into_inner());
        std::fs::copy(env!("CARGO_BIN_EXE_host-harness"), &moved).unwrap();
    }
    let elsewhere = |args: &[&str]| {
        output(
            Command::new(&moved)
                .args(args)
                .current_dir(&dir)
                .env_remove("TURNSTILE_WASM")
                .env_remove("CARGO_TARGET_DIR"),
        )
    };
    let r = elsewhere(&["simulate"]);
    // Without an embedded copy the binary falls back to the workspace it was built in.
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/turnstile.wasm");
    if host_harness::embedded_component().is_some() || workspace.exists() {
        assert_eq!(r.code, Some(0), "{r:?}");
        assert!(r.stdout.contains("every entry ended or settled"), "{r:?}");
    } else {
        assert_eq!(r.code, Some(2), "{r:?}");
        assert!(r.stderr.contains("cargo xtask build-guest"), "{r:?}");
    }
    let r = elsewhere(&["--component", "no-such.wasm", "simulate"]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains("no-such.wasm"), "{r:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The embedded copy is the file it was embedded from, as long as that file exists: cargo
/// rebuilds host-harness when `cargo xtask build-guest` rewrites it.
#[test]
fn the_embedded_component_is_current() {
    let (Some(embedded), Some(from)) = (
        host_harness::embedded_component(),
        host_harness::embedded_from(),
    ) else {
        return;
    };
    if let Ok(now) = std::fs::read(from) {
        assert!(
            now == embedded,
            "{} changed since host-harness embedded it",
            from.display()
        );
    }
}

/// A case file whose layer starts at file line 10: the mistake on the layer's second line is
/// reported at line 11 of the case file, by its path as given, with that line as the excerpt.
const BAD_LAYER_CASE: &str = r#"description = "a layer with a mistake on its second line"

# Some lines before the layer, so that layer lines and file lines differ
# (and the file's line numbers need a wider gutter).


[[layer]]
name = "plugin"
text = '''
[conversation.tools.t]
concurrency = -1
'''

[[batch]]
calls = ["a t"]
"#;

#[test]
fn diagnostics_in_a_case_file_cite_the_case_files_lines() {
    let dir = scratch("lines");
    std::fs::write(dir.join("bad.toml"), BAD_LAYER_CASE).unwrap();
    let excerpt =
        " --> bad.toml:11:15\n   |\n11 | concurrency = -1\n   |               ^^ negative";
    let r = run_in(Some(&dir), &["simulate", "bad.toml"]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        r.stderr.contains(excerpt),
        "want\n{excerpt}\nin\n{}",
        r.stderr
    );
    let r = run_in(Some(&dir), &["cases", "bad.toml"]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        r.stdout.contains(excerpt),
        "want\n{excerpt}\nin\n{}",
        r.stdout
    );
    // A standalone layer file is cited by its own path and lines.
    std::fs::write(
        dir.join("layer.toml"),
        "\n[conversation.tools.t]\nconcurrency = -1\n",
    )
    .unwrap();
    let r = run_in(Some(&dir), &["check", "layer.toml"]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stdout.contains(" --> layer.toml:3:15"), "{r:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

const STOP_LAYER: &str =
    "[conversation.tools.del]\nconcurrency = 1\nfan_out = { on_error = \"stop\" }\n";

/// `simulate --layer --calls`: no case file. Every reason is words, never Rust `Debug`.
#[test]
fn simulate_runs_from_layers_and_calls() {
    let dir = scratch("calls");
    std::fs::write(dir.join("stop.toml"), STOP_LAYER).unwrap();
    let r = run_in(
        Some(&dir),
        &[
            "simulate",
            "--layer",
            "stop.toml",
            "--calls",
            "d del*3, x other",
            "--duration",
            "d#0=25",
            "--fail",
            "d#0",
        ],
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    let want = concat!(
        " t(ms)  event   entry      detail\n",
        "     0  submit  batch 1    2 calls
     0  start   d#0        del key del
     0  start   x          other unkeyed
     0  wait    d#1        del is full (1 of 1 running: d#0)
     0  wait    d#2        behind d#1, which comes first on del
    10  end     x          ok
    25  end     d#0        failed
    25  settle  d#1        not run: stopped after d#0 failed (this tool stops a call's operations at the first failure)
    25  settle  d#2        not run: stopped after d#0 failed (this tool stops a call's operations at the first failure)
    25  done               every entry ended or settled
"
    );
    assert_eq!(r.stdout, want);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The embedded default and every reason's wording: no Rust `Debug` text reaches people.
#[test]
fn no_debug_text_reaches_the_output() {
    let dir = scratch("debug");
    std::fs::write(dir.join("stop.toml"), STOP_LAYER).unwrap();
    let stop = [
        "simulate",
        "--layer",
        "stop.toml",
        "--calls",
        "d del*3",
        "--fail",
        "d#1",
    ];
    for args in [&["simulate"][..], &stop] {
        let r = run_in(Some(&dir), args);
        assert_eq!(r.code, Some(0), "{r:?}");
        for debug in ["::", "Some(", "None", "{", "\"", "Stopped"] {
            assert!(!r.stdout.contains(debug), "{debug:?} in\n{}", r.stdout);
        }
    }
    // The words are the component's own sentence for each settlement.
    let stopped = run_in(Some(&dir), &stop);
    assert!(
        stopped.stdout.contains("not run: stopped after d#1 failed"),
        "{}",
        stopped.stdout
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn simulate_refuses_what_it_cannot_run() {
    let dir = scratch("refuse");
    std::fs::write(dir.join("stop.toml"), STOP_LAYER).unwrap();
    let sim = |extra: &[&str]| {
        let mut args = vec!["simulate", "--layer", "stop.toml"];
        args.extend_from_slice(extra);
        run_in(Some(&dir), &args)
    };
    // The calls syntax is the case files' own: `ID TOOL` or `ID TOOL*N`, N at least 1; a
    // mistake in --calls is a usage error, the same mistake in a file a failure.
    let r = sim(&["--calls", "d"]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(
        r.stderr.contains("bad call \"d\": write `ID TOOL`"),
        "{r:?}"
    );
    let r = sim(&["--calls", "d del*0"]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(
        r.stderr
            .contains("`d del*0`: a fan-out call has at least one"),
        "{r:?}"
    );
    std::fs::write(dir.join("zero.toml"), "[[batch]]\ncalls = [\"d del*0\"]\n").unwrap();
    let r = run_in(Some(&dir), &["simulate", "zero.toml"]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("batch 1: `d del*0`"), "{r:?}");
    let r = sim(&["--calls", "a del,,b del"]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains("empty call"), "{r:?}");
    // A label no entry has is a mistake, not silently nothing.
    let r = sim(&["--calls", "d del*2", "--fail", "d#5"]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("d#5"), "{r:?}");
    let r = sim(&["--calls", "d del", "--layer", "missing.toml"]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains("missing.toml"), "{r:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Where a layer's text starts in a case file: after the newline that follows `'''`, on the
/// same line when the text starts there, and nowhere for a string with escapes.
#[test]
fn layer_starts_are_file_positions() {
    let check = |file: &str, want: &[Option<(u32, u32)>]| {
        assert_eq!(turnstile_corpus::layer_starts(file), want, "{file:?}");
    };
    check("[[layer]]\ntext = '''\n[a]\n'''\n", &[Some((3, 1))]);
    check("\n[[layer]]\ntext = '''\r\n[a]\r\n'''\n", &[Some((4, 1))]);
    check("[[layer]]\ntext = '''[a]\nb = 1'''\n", &[Some((2, 11))]);
    check("[[layer]]\ntext = \"[a]\"\n", &[Some((2, 9))]);
    check("[[layer]]\ntext = \"[a]\\nb = 1\"\n", &[None]);
    check(
        "[[layer]]\nname = \"x\"\ntext = 'é'\n[[layer]]\ntext = \"\"\"\nz\"\"\"\n",
        &[Some((3, 9)), Some((6, 1))],
    );
    check("not toml [", &[]);
}

/// The file format example in `simulate --help` is a case file that runs.
#[test]
fn the_help_example_runs() {
    let help = run(&["simulate", "--help"]).stdout;
    let example: String = help
        .lines()
        .skip_while(|l| !l.starts_with("  [[layer]]"))
        .take_while(|l| l.is_empty() || l.starts_with("  "))
        .map(|l| format!("{}\n", l.strip_prefix("  ").unwrap_or(l)))
        .collect();
    assert!(example.contains("[simulate]"), "no example in\n{help}");
    let dir = scratch("example");
    std::fs::write(dir.join("example.toml"), &example).unwrap();
    let r = run_in(Some(&dir), &["simulate", "example.toml"]);
    assert_eq!(r.code, Some(0), "{example}\n{r:?}");
    assert!(
        r.stdout
            .contains("settle  del#2      not run: stopped after del#1 failed"),
        "{r:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A misspelled field that would silently lift a limit is a warning: `check` prints it with a
/// "did you mean" help and exits 0, or 1 with `--deny-warnings`.
#[test]
fn check_warns_of_typos_and_deny_warnings_fails() {
    let dir = scratch("typo");
    let file = dir.join("user.toml");
    std::fs::write(
        &file,
        "[conversation.tools.rfd_draft]\nconcurency = { key = \"rfd\" }\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let warned = run(&["check", path]);
    assert_eq!(warned.code, Some(0), "{warned:?}");
    assert!(
        warned.stdout.contains("warning[unknown-field-typo]")
            && warned.stdout.contains("did you mean `concurrency`")
            && warned.stdout.contains("1 warning(s)"),
        "{warned:?}"
    );
    let denied = run(&["check", "--deny-warnings", path]);
    assert_eq!(denied.code, Some(1), "{denied:?}");
    let clean = dir.join("clean.toml");
    std::fs::write(&clean, "[conversation.tools.t]\nconcurrency = 1\n").unwrap();
    let ok = run(&["check", "--deny-warnings", clean.to_str().unwrap()]);
    assert_eq!(ok.code, Some(0), "{ok:?}");
    assert!(!ok.stdout.contains("warning"), "{ok:?}");
}

/// `tests/simulate/runs.toml`: the runs every Turnstile CLI must print alike (the npm and
/// Python packages' CLIs run the same file).
#[test]
fn simulate_prints_what_every_cli_prints() {
    #[derive(serde::Deserialize)]
    struct Runs {
        run: Vec<SimRun>,
    }
    #[derive(serde::Deserialize)]
    struct SimRun {
        about: String,
        args: Vec<String>,
        status: i32,
        stdout: String,
        stderr: String,
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/simulate");
    let text = std::fs::read_to_string(root.join("runs.toml")).unwrap();
    let runs: Runs = toml::from_str(&text).unwrap();
    assert!(
        runs.run.len() >= 10,
        "runs.toml holds {} runs",
        runs.run.len()
    );
    for r in &runs.run {
        let args: Vec<&str> = r.args.iter().map(String::as_str).collect();
        let got = run_in(Some(&root.join("files")), &args);
        let stderr = got.stderr.replace("host-harness", "PROGRAM");
        assert_eq!(
            (got.code, got.stdout.as_str(), stderr.as_str()),
            (Some(r.status), r.stdout.as_str(), r.stderr.as_str()),
            "{}: {:?}",
            r.about,
            r.args
        );
    }
}
