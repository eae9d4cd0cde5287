//! The crate as a Rust agent host meets it: a fresh cargo project (outside this workspace) that
//! depends on `turnstile` by path, whose `main.rs` is the README's quick start, builds and runs;
//! and nothing in its dependency tree is wasmtime (the engine runs natively).
//!
//! It runs cargo itself, in its own target folder (a second cargo on this workspace's would
//! wait for the lock the running `cargo test` holds), so it takes a minute the first time.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails by panicking

use std::path::{Path, PathBuf};
use std::process::Command;

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The README's first ```rust block (the quick start).
fn quick_start(readme: &str) -> String {
    let start = readme
        .find("```rust")
        .expect("the README has a ```rust block");
    let body = &readme[start..];
    let body = &body[body.find('\n').expect("a line after ```rust") + 1..];
    body[..body.find("```").expect("the block ends")].to_owned()
}

#[test]
fn the_readme_quick_start_runs_in_a_fresh_project_without_wasmtime() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace_target = crate_dir.join("../../target");
    let project: PathBuf = workspace_target.join("fresh-project");
    let _ = std::fs::remove_dir_all(&project);
    std::fs::create_dir_all(project.join("src")).unwrap();
    let manifest = format!(
        r#"[package]
name = "agent-host"
version = "0.1.0"
edition = "2024"

[dependencies]
turnstile = {{ path = "{}" }}
tokio = {{ version = "1", features = ["macros", "rt-multi-thread"] }}
serde_json = "1"

[workspace]
"#,
        crate_dir.display()
    );
    std::fs::write(project.join("Cargo.toml"), manifest).unwrap();
    let readme = std::fs::read_to_string(crate_dir.join("README.md")).unwrap();
    std::fs::write(project.join("src/main.rs"), quick_start(&readme)).unwrap();
    let target = workspace_target.join("fresh-project-target");

    let tree = run(cargo()
        .args(["tree", "--edges", "normal,build", "--prefix", "none"])
        .current_dir(&project));
    assert!(tree.contains("turnstile-engine"), "{tree}");
    assert!(!tree.contains("wasmtime"), "wasmtime in the tree:\n{tree}");

    let out = run(cargo()
        .args(["run", "--quiet"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&project));
    for id in ["w1", "w2", "w3"] {
        assert!(
            out.contains(&format!("{id}: Ok(String(\"done\"))")),
            "{out}"
        );
    }
}
