//! `cargo xtask`: the project's build and test automation, in Rust rather than shell.
//!
//! - `build-guest`: builds the guest for `wasm32-unknown-unknown` and wraps the core module into
//!   a component that imports nothing, at `target/turnstile.wasm`.
//! - `wit [PATH]`: prints the component's full WIT (imports and exports).
//! - `pin [--update]`: compares that WIT with `tests/snapshots/component.wit`.
//! - `simulate [ARGS]`: builds, then runs `host-harness simulate ARGS` (the embedded default
//!   without arguments).
//! - `test`: every check CI runs: fmt, clippy, docs, the engine's tests, the component build,
//!   the harness running the corpus through the component, and the import pin.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

type Result<T> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("build-guest") => build_guest().map(|_| ()),
        Some("wit") => {
            let path = args.get(1).map_or_else(component_path, PathBuf::from);
            component_wit(&path).map(|wit| print!("{wit}"))
        }
        Some("pin") => pin(args.iter().any(|a| a == "--update")),
        Some("simulate") => simulate(&args[1..]),
        Some("test") => test(),
        _ => Err(
            "usage: cargo xtask build-guest | wit [PATH] | pin [--update] | simulate [ARGS] | test"
                .to_owned(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// Where `build-guest` writes the component.
fn component_path() -> PathBuf {
    target_dir().join("turnstile.wasm")
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()));
    cmd.current_dir(root());
    cmd
}

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: running {cmd:?}");
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}

fn build_guest() -> Result<PathBuf> {
    // A fresh machine may lack the target; rust-toolchain.toml names it, this makes sure.
    let _ = Command::new("rustup")
        .args(["target", "add", "wasm32-unknown-unknown"])
        .current_dir(root())
        .status();
    run(cargo().args([
        "build",
        "--package",
        "turnstile-guest",
        "--profile",
        "wasm",
        "--target",
        "wasm32-unknown-unknown",
    ]))?;
    let core = target_dir().join("wasm32-unknown-unknown/wasm/turnstile_guest.wasm");
    let bytes = std::fs::read(&core).map_err(|e| format!("{}: {e}", core.display()))?;
    let component = wit_component::ComponentEncoder::default()
        .module(&bytes)
        .and_then(|enc| enc.validate(true).encode())
        .map_err(|e| format!("wrapping {} into a component: {e:#}", core.display()))?;
    let out = component_path();
    std::fs::write(&out, &component).map_err(|e| format!("{}: {e}", out.display()))?;
    eprintln!(
        "xtask: wrote {} ({} bytes; core module {} bytes)",
        out.display(),
        component.len(),
        bytes.len()
    );
    Ok(out)
}

/// The component's WIT: the world it targets (imports and exports) and the packages it uses.
fn component_wit(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| {
        format!(
            "{}: {e} (build it with `cargo xtask build-guest`)",
            path.display()
        )
    })?;
    let decoded = wit_component::decode(&bytes).map_err(|e| format!("decoding: {e:#}"))?;
    let resolve = decoded.resolve();
    let main = decoded.package();
    let nested: Vec<_> = resolve
        .packages
        .iter()
        .map(|(id, _)| id)
        .filter(|id| *id != main)
        .collect();
    let mut printer = wit_component::WitPrinter::default();
    printer
        .print(resolve, main, &nested)
        .map_err(|e| format!("printing: {e:#}"))?;
    Ok(printer.output.to_string())
}

fn snapshot_path() -> PathBuf {
    root().join("tests/snapshots/component.wit")
}

fn pin(update: bool) -> Result<()> {
    let wit = component_wit(&component_path())?;
    let path = snapshot_path();
    if update {
        std::fs::write(&path, &wit).map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("xtask: updated {}", path.display());
        return Ok(());
    }
    let pinned = std::fs::read_to_string(&path).unwrap_or_default();
    if pinned == wit {
        eprintln!("xtask: the component's WIT matches {}", path.display());
        Ok(())
    } else {
        Err(format!(
            "the component's WIT differs from {}; a new import is a shim every host must now \
             supply. If the change is intended, run `cargo xtask pin --update`.\n--- now ---\n{wit}",
            path.display()
        ))
    }
}

fn simulate(args: &[String]) -> Result<()> {
    let wasm = build_guest()?;
    run(cargo()
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "host-harness",
            "--",
        ])
        .arg("--component")
        .arg(&wasm)
        .arg("simulate")
        .args(args))
}

fn test() -> Result<()> {
    let wasm = build_guest()?;
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--release",
        "--",
        "-D",
        "warnings",
    ]))?;
    run(cargo().args([
        "clippy",
        "--package",
        "turnstile-guest",
        "--target",
        "wasm32-unknown-unknown",
        "--profile",
        "wasm",
        "--",
        "-D",
        "warnings",
    ]))?;
    run(cargo()
        .args([
            "doc",
            "--no-deps",
            "--package",
            "turnstile-engine",
            "--package",
            "turnstile-corpus",
        ])
        .env("RUSTDOCFLAGS", "-D warnings"))?;
    run(cargo()
        .args(["test", "--release", "--workspace"])
        .env("TURNSTILE_WASM", &wasm))?;
    pin(false)?;
    run(cargo()
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "host-harness",
            "--",
        ])
        .arg("--component")
        .arg(&wasm)
        .args(["cases", "tests/cases"]))?;
    eprintln!("xtask: all checks passed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The component imports nothing and exports exactly the pinned interfaces. Needs
    /// `cargo xtask build-guest` first (`cargo xtask test` does that).
    #[test]
    fn component_wit_is_pinned() {
        let wit = component_wit(&component_path()).unwrap_or_else(|e| panic!("{e}"));
        let pinned = std::fs::read_to_string(snapshot_path()).unwrap_or_default();
        assert_eq!(
            wit, pinned,
            "run `cargo xtask pin --update` if this change is intended"
        );
        assert!(
            !wit.contains("import "),
            "the component must import nothing:\n{wit}"
        );
    }
}
