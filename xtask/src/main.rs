//! `cargo xtask`: the project's build and test automation, in Rust rather than shell.
//!
//! - `build-guest`: builds the guest for `wasm32-unknown-unknown` and wraps the core module into
//!   a component that imports nothing, at `target/turnstile.wasm`.
//! - `wit [PATH]`: prints the component's full WIT (imports and exports).
//! - `pin [--update]`: compares that WIT with `tests/snapshots/component.wit`.
//! - `simulate [ARGS]`: builds, then runs `host-harness simulate ARGS` (the embedded default
//!   without arguments).
//! - `js`: builds the JS/TS package (`npm ci` when needed, jco transpile, tsc) in `hosts/js`.
//! - `py`: makes `target/py-venv` and installs the Python package (with the component) into it.
//! - `playground [PORT]`: builds the JS package and serves the playground on 127.0.0.1.
//! - `fuzz [SECONDS]`: runs each cargo-fuzz target (config, config_shaped, scheduler, admission) for SECONDS
//!   (default 60); needs `cargo install cargo-fuzz`; runs on stable through RUSTC_BOOTSTRAP.
//! - `wasm-test`: the engine's tests (unit tests, the corpus, the simulators at
//!   `DEFAULT_SEEDS`) compiled to `wasm32-unknown-unknown` and run by wasm-bindgen-test in Node,
//!   then in headless Chromium (installs wasm-bindgen-cli at the lock file's wasm-bindgen
//!   version, and Debian's chromium and chromium-driver, when missing).
//! - `test`: every check CI runs: fmt, clippy, docs, the engine's tests (natively, then in wasm
//!   as `wasm-test` does), the component build,
//!   the harness running the corpus through the component, the import pin, the Node corpus and
//!   driver tests, the playground in Chromium, and the Python corpus and driver tests (installs
//!   Debian's redis-server and postgresql when missing: the shared-key tests start their own
//!   servers, and would report skipped without them).

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
        Some("js") => js_deps()
            .and_then(|()| build_guest())
            .and_then(|wasm| js(&wasm)),
        Some("py") => build_guest().and_then(|wasm| py(&wasm).map(|_| ())),
        Some("playground") => playground(args.get(1).map_or("8080", String::as_str)),
        Some("fuzz") => fuzz(args.get(1).map_or("60", String::as_str)),
        Some("wasm-test") => wasm_test(),
        Some("test") => test(),
        _ => Err(
            "usage: cargo xtask build-guest | wit [PATH] | pin [--update] | simulate [ARGS] | js | py \
             | playground [PORT] | fuzz [SECONDS] | wasm-test | test"
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
    run(cargo()
        .args([
            "build",
            "--package",
            "turnstile-guest",
            "--profile",
            "wasm",
            "--target",
            "wasm32-unknown-unknown",
        ])
        .env(
            "CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS",
            guest_rustflags(),
        ))?;
    let mut core = target_dir().join("wasm32-unknown-unknown/wasm/turnstile_guest.wasm");
    // binaryen's wasm-opt (it comes with jco's npm install) shrinks the core module by a sixth;
    // without it the component is larger but behaves the same. Flattening and re-looping the
    // control flow between two `-Oz` passes takes about 3 KB more for the same instruction
    // count (callgrind, bench `--drive`, batches of ~1,000 and of 4).
    let wasm_opt = root().join("hosts/js/node_modules/.bin/wasm-opt");
    if wasm_opt.exists() {
        let optimized = target_dir().join("turnstile.opt.core.wasm");
        run(Command::new(&wasm_opt)
            .args(["-Oz", "--flatten", "--rereloop", "-Oz"])
            .args(["--enable-bulk-memory", "--enable-sign-ext"])
            .args([
                "--enable-nontrapping-float-to-int",
                "--enable-mutable-globals",
            ])
            .args(["--enable-multivalue", "--enable-reference-types"])
            .arg(&core)
            .arg("-o")
            .arg(&optimized))?;
        core = optimized;
    } else {
        eprintln!(
            "xtask: {} is missing (run `npm ci` in hosts/js); the component is not size-optimized",
            wasm_opt.display()
        );
    }
    let bytes = std::fs::read(&core).map_err(|e| format!("{}: {e}", core.display()))?;
    let component = wit_component::ComponentEncoder::default()
        .module(&bytes)
        .and_then(|enc| enc.validate(true).encode())
        .map_err(|e| format!("wrapping {} into a component: {e:#}", core.display()))?;
    let component = without_names(&component)?;
    let out = component_path();
    // host-harness embeds this file and is rebuilt when it changes (host-harness/build.rs):
    // an unchanged component is not rewritten, so it keeps its mtime.
    if std::fs::read(&out).ok().as_deref() != Some(component.as_slice()) {
        std::fs::write(&out, &component).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    eprintln!(
        "xtask: wrote {} ({} bytes; core module {} bytes)",
        out.display(),
        component.len(),
        bytes.len()
    );
    Ok(out)
}

/// Flags for the guest's wasm build. The profile builds at `opt-level = "z"` (size), where LLVM
/// inlines almost nothing: one-line accessors on the hot path (`Vec` indexing, the Fx hasher,
/// slot lookups) stay calls. A moderate inline threshold makes the component about 1.4x faster
/// for about 5 KB (bench `boundary`, measured when it was chosen: 5.4x native at the default,
/// 3.5x at 50; 75 gives 3.5x for 11 KB more). Source paths in panic locations are shortened,
/// so the binary does not carry this machine's cargo home.
fn guest_rustflags() -> String {
    let mut flags = "-C llvm-args=-inline-threshold=50".to_owned();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let mut remap = |from: &Path, to: &str| {
        if let Some(from) = from.to_str().filter(|f| !f.contains(char::is_whitespace)) {
            flags.push_str(&format!(" --remap-path-prefix={from}={to}"));
        }
    };
    if let Some(home) = cargo_home {
        remap(&home.join("registry/src"), "crates");
    }
    remap(&root(), ".");
    flags
}

/// `component` without its top-level `component-name` custom section: debug names only
/// (about 4 KB), which no host reads (jco and wasmtime take names from the exports).
fn without_names(component: &[u8]) -> Result<Vec<u8>> {
    fn leb(bytes: &[u8], at: &mut usize) -> Result<usize> {
        let (mut value, mut shift) = (0usize, 0);
        loop {
            let byte = *bytes.get(*at).ok_or("truncated section size")?;
            *at += 1;
            value |= usize::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
            shift += 7;
            if shift > 28 {
                return Err("section size over 32 bits".into());
            }
        }
    }
    let mut out = component.get(..8).ok_or("not a component")?.to_vec();
    let mut at = 8;
    while at < component.len() {
        let start = at;
        let id = component[at];
        at += 1;
        let size = leb(component, &mut at)?;
        let body = component.get(at..at + size).ok_or("section past the end")?;
        at += size;
        let named = |name: &str| {
            let mut i = 0;
            leb(body, &mut i).ok() == Some(name.len())
                && body.get(i..i + name.len()) == Some(name.as_bytes())
        };
        if id == 0 && named("component-name") {
            continue;
        }
        out.extend_from_slice(&component[start..at]);
    }
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

/// `host-harness` on the given component, ready for its subcommand.
fn harness(wasm: &Path) -> Command {
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--quiet",
        "--release",
        "--package",
        "host-harness",
        "--",
    ])
    .arg("--component")
    .arg(wasm);
    cmd
}

fn simulate(args: &[String]) -> Result<()> {
    let wasm = build_guest()?;
    run(harness(&wasm).arg("simulate").args(args))
}

fn test() -> Result<()> {
    // What the tests run against, first: a machine that lacks one and cannot install it stops
    // here, saying so, rather than after the builds (or with tests skipped).
    ensure_chromium()?;
    ensure_chromedriver()?;
    ensure_stores()?;
    js_deps()?;
    let wasm = build_guest()?;
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--release",
        "--features",
        "turnstile/sqlite",
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
            "--package",
            "turnstile",
        ])
        .env("RUSTDOCFLAGS", "-D warnings"))?;
    run(cargo()
        .args([
            "test",
            "--release",
            "--workspace",
            "--features",
            "turnstile/sqlite",
        ])
        .env("TURNSTILE_WASM", &wasm))?;
    // Once more in the dev profile: overflow checks on in every dependency (the fuzz-found
    // renderer overflow only shows there).
    run(cargo().args([
        "test",
        "--package",
        "turnstile-engine",
        "--package",
        "turnstile-corpus",
    ]))?;
    wasm_test()?;
    pin(false)?;
    run(harness(&wasm).args(["cases", "tests/cases"]))?;
    js(&wasm)?;
    let js_dir = root().join("hosts/js");
    run(Command::new("npm").args(["test"]).current_dir(&js_dir))?;
    run(Command::new("node")
        .args(["corpus/run-cases.mjs", "../../tests/cases"])
        .current_dir(&js_dir))?;
    run(Command::new("node")
        .args(["e2e/playground.mjs"])
        .current_dir(&js_dir))?;
    // The package as users get it: packed, installed in a fresh project, run in Node, a heap-capped
    // worker thread, and an esbuild bundle in Chromium (page and Web Worker).
    run(Command::new("node")
        .args(["e2e/package.mjs"])
        .env("TURNSTILE_WASM", &wasm)
        .current_dir(&js_dir))?;
    // The Node versions the README states: the core on the oldest `engines` allows, the
    // adapters on Node 22 (binaries from the npm registry, cached in target/node-versions).
    run(Command::new("node")
        .args(["e2e/node-versions.mjs"])
        .current_dir(&js_dir))?;
    let python = py(&wasm)?;
    // The Rust SQLite store and a Python process of the installed package on one file.
    run(cargo()
        .args([
            "test",
            "--release",
            "--package",
            "turnstile",
            "--features",
            "sqlite",
            "--test",
            "shared_sqlite",
            "--",
            "--ignored",
        ])
        .env("TURNSTILE_PYTHON", &python))?;
    run(Command::new(&python)
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "hosts/python/tests",
        ])
        .current_dir(root()))?;
    eprintln!("xtask: all checks passed");
    Ok(())
}

/// The engine's tests inside WebAssembly: `cargo test` for `wasm32-unknown-unknown` (release,
/// engine assertions on, as natively) with `wasm-bindgen-test-runner` as the cargo runner, once
/// in Node and once in headless Chromium through chromedriver. Every `#[test]` is a
/// `#[wasm_bindgen_test]` there (each test file aliases it); the corpus is embedded from the list
/// written here, the simulators run `DEFAULT_SEEDS` (engine/tests/common).
fn wasm_test() -> Result<()> {
    let _ = Command::new("rustup")
        .args(["target", "add", "wasm32-unknown-unknown"])
        .current_dir(root())
        .status();
    let runner = wasm_bindgen_test_runner()?;
    let dir = target_dir().join("wasm-test");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let cases = dir.join("cases.rs");
    write_if_changed(&cases, &wasm_case_list()?)?;
    let test = || {
        let mut cmd = cargo();
        cmd.args([
            "test",
            "--release",
            "--package",
            "turnstile-engine",
            "--target",
            "wasm32-unknown-unknown",
            // every test binary reports, not only the first that fails
            "--no-fail-fast",
        ])
        .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER", &runner)
        .env("TURNSTILE_WASM_CASES", &cases)
        // The seeds of the slowest test take a few seconds; the runner's default is 20 s.
        .env("WASM_BINDGEN_TEST_TIMEOUT", "300");
        cmd
    };
    run(&mut test())?;
    ensure_chromium()?;
    let chromedriver = ensure_chromedriver()?;
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    // The runner adds headless, no-sandbox (run as root) and disable-dev-shm-usage; the rest keep
    // Chromium off the network, which this machine's closed network refuses.
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ];
    let webdriver = dir.join("webdriver.json");
    write_if_changed(
        &webdriver,
        &format!("{{\"goog:chromeOptions\": {{\"binary\": {chromium:?}, \"args\": {args:?}}}}}\n"),
    )?;
    run(test()
        .env("WASM_BINDGEN_USE_BROWSER", "1")
        .env("CHROMEDRIVER", &chromedriver)
        .env("WASM_BINDGEN_TEST_WEBDRIVER_JSON", &webdriver))
}

fn write_if_changed(path: &Path, text: &str) -> Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(text) {
        return Ok(());
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// `tests/cases/*.toml` as a Rust expression, `&[(name, include_str!(path)), ...]`, for the
/// corpus test in wasm (no filesystem there).
fn wasm_case_list() -> Result<String> {
    let dir = root().join("tests/cases");
    let read = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = read
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut out = String::from("&[\n");
    for file in &files {
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        let path = file
            .to_str()
            .ok_or_else(|| format!("{}: not UTF-8", file.display()))?;
        out.push_str(&format!("    ({name:?}, include_str!({path:?})),\n"));
    }
    out.push_str("]\n");
    Ok(out)
}

/// `wasm-bindgen-test-runner` at the version of the `wasm-bindgen` crate in Cargo.lock (they
/// must match), installed with cargo when missing or different (about 150 s).
fn wasm_bindgen_test_runner() -> Result<PathBuf> {
    let lock = std::fs::read_to_string(root().join("Cargo.lock"))
        .map_err(|e| format!("Cargo.lock: {e}"))?;
    let version = lock
        .split("[[package]]")
        .find_map(|package| {
            let mut lines = package.lines().map(str::trim);
            lines.find(|l| *l == "name = \"wasm-bindgen\"")?;
            lines.find_map(|l| l.strip_prefix("version = \"")?.strip_suffix('"'))
        })
        .ok_or("Cargo.lock has no wasm-bindgen")?
        .to_owned();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    let runner = cargo_home.join("bin/wasm-bindgen-test-runner");
    let installed = Command::new(&runner)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if installed.as_deref() == Some(format!("wasm-bindgen-test-runner {version}").as_str()) {
        return Ok(runner);
    }
    eprintln!(
        "xtask: {} is {}; installing wasm-bindgen-cli {version}",
        runner.display(),
        installed.as_deref().unwrap_or("missing")
    );
    // Not `--locked`: its lock file pins a webpki-roots the registry no longer offers.
    run(cargo().args(["install", "wasm-bindgen-cli", "--version", &version]))?;
    Ok(runner)
}

/// chromedriver for the wasm tests in Chromium: Debian's chromium-driver (the same version as
/// its chromium), installed like `ensure_chromium` when missing.
fn ensure_chromedriver() -> Result<PathBuf> {
    let path = PathBuf::from(
        std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".to_owned()),
    );
    ensure_debian(
        path.exists(),
        &path.display().to_string(),
        "chromium-driver",
    )?;
    Ok(path)
}

/// Installs the npm packages of `hosts/js` when they are missing or older than the lock file.
fn js_deps() -> Result<()> {
    let dir = root().join("hosts/js");
    let modified = |path: PathBuf| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let installed = modified(dir.join("node_modules/.package-lock.json"));
    let locked = modified(dir.join("package-lock.json"));
    if dir.join("node_modules/.bin/jco").exists() && installed.is_some() && installed >= locked {
        return Ok(());
    }
    let mut npm = Command::new("npm");
    npm.args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&dir);
    // better-sqlite3 (a dev dependency, for the shared-key tests) compiles from source where
    // no prebuilt binary can be fetched; node-gyp then needs Node's headers, which Debian's
    // nodejs ships in /usr/include/node. Point it there unless the user chose otherwise, so a
    // machine that reaches only the package registries needs no ~/.npmrc.
    if std::env::var_os("npm_config_nodedir").is_none()
        && Path::new("/usr/include/node/node.h").exists()
    {
        npm.env("npm_config_nodedir", "/usr");
    }
    run(&mut npm)
}

/// Builds `hosts/js/dist` (installing the npm packages first when they are missing).
fn js(wasm: &Path) -> Result<()> {
    js_deps()?;
    let dir = root().join("hosts/js");
    run(Command::new("node")
        .arg("build.mjs")
        .env("TURNSTILE_WASM", wasm)
        .current_dir(&dir))
}

/// Makes `target/py-venv` when missing and installs the package, with the component inside.
/// Returns the venv's python.
fn py(wasm: &Path) -> Result<PathBuf> {
    let venv = target_dir().join("py-venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    }
    let package = root().join("hosts/python");
    let shipped = package.join("src/turnstile_scheduler/turnstile.wasm");
    std::fs::copy(wasm, &shipped).map_err(|e| format!("{}: {e}", shipped.display()))?;
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .arg(format!("{}[test]", package.display()))
        .env("TURNSTILE_WASM", wasm))?;
    // Reinstall the package itself every time: the component inside may have changed.
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--force-reinstall",
            "--no-deps",
        ])
        .arg(&package)
        .env("TURNSTILE_WASM", wasm))?;
    Ok(python)
}

/// The browser test needs Debian's Chromium; `.ci/run` installs it, and so does this when it
/// can (as root with apt-get).
fn ensure_chromium() -> Result<()> {
    let path = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    ensure_debian(Path::new(&path).exists(), &path, "chromium")
}

/// The shared-key tests start their own redis-server and Postgres server from Debian's
/// binaries, and report skipped without them; so the test command installs them when missing,
/// as `.ci/run` does (Postgres: its binaries, and the `postgres` user the package makes, which
/// the server runs as when the tests run as root).
fn ensure_stores() -> Result<()> {
    let redis =
        std::env::var("REDIS_SERVER").unwrap_or_else(|_| "/usr/bin/redis-server".to_owned());
    ensure_debian(
        Path::new(&redis).exists() || std::env::var_os("REDIS_SERVER").is_some(),
        &redis,
        "redis-server",
    )?;
    let postgres = std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|versions| {
        versions
            .filter_map(std::result::Result::ok)
            .any(|v| v.path().join("bin/postgres").exists())
    });
    let user = Command::new("id")
        .args(["-u", "postgres"])
        .output()
        .is_ok_and(|o| o.status.success());
    ensure_debian(
        (postgres && user) || std::env::var_os("PG_BIN").is_some(),
        "Postgres (/usr/lib/postgresql/*/bin/postgres)",
        "postgresql",
    )
}

/// Installs Debian's `package` with apt-get unless it is `present` (`what` names what was
/// looked for).
fn ensure_debian(present: bool, what: &str, package: &str) -> Result<()> {
    if present {
        return Ok(());
    }
    eprintln!("xtask: {what} is missing; installing Debian's {package}");
    let installed = run(Command::new("apt-get").arg("update")).and_then(|()| {
        run(Command::new("apt-get")
            .args(["install", "-y", package])
            .env("DEBIAN_FRONTEND", "noninteractive"))
    });
    installed.map_err(|e| {
        format!(
            "\n\n*** xtask: cannot install Debian's {package} ({e}), and the tests need it \
             ({what} is missing). Install it (as root: apt-get install {package}), or point \
             the variable this command reads at one (CHROMIUM, CHROMEDRIVER, REDIS_SERVER, \
             PG_BIN), then run again. Nothing was skipped: no test ran. ***\n"
        )
    })
}

fn fuzz(seconds: &str) -> Result<()> {
    for target in ["config", "config_shaped", "scheduler", "admission"] {
        run(cargo()
            .current_dir(root().join("fuzz"))
            .env("RUSTC_BOOTSTRAP", "1")
            .args(["fuzz", "run", "-s", "none", "-O", "-a", target, "--"])
            .arg(format!("-max_total_time={seconds}"))
            .arg("-print_final_stats=1"))?;
    }
    Ok(())
}

fn playground(port: &str) -> Result<()> {
    js_deps()?;
    let wasm = build_guest()?;
    js(&wasm)?;
    run(Command::new("node")
        .args(["playground/serve.mjs", port])
        .current_dir(root()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() && name != "target" && name != "node_modules" && name != ".git" {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }

    /// Tidy: every Rust file says what it is for in a `//!` header, and no test expects a panic.
    #[test]
    fn tidy() {
        let mut files = Vec::new();
        for dir in ["engine", "corpus", "guest", "host-harness", "xtask"] {
            rust_files(&root().join(dir), &mut files);
        }
        assert!(files.len() > 10, "found only {} Rust files", files.len());
        let mut problems = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            if !text.starts_with("//!") {
                problems.push(format!(
                    "{}: does not start with a //! header",
                    file.display()
                ));
            }
            if text.contains(concat!("#[should", "_panic")) {
                problems.push(format!("{}: uses should_panic", file.display()));
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

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
