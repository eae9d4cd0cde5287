//! The reference host: loads the built Turnstile component in wasmtime exactly as a TypeScript
//! (jco) or Python (wasmtime-py) host would, and drives it through its WIT exports only.
//!
//! [`Harness`] compiles the component once; [`Instance`] is one store and instance (cheap, one
//! per case). [`component_source`] picks the component: a path the user names, else the copy
//! `build.rs` embedded in the binary, else the workspace's `target/turnstile.wasm`. [`ComponentSubject`] implements the corpus's `Subject`, so the shared case files
//! run through the component with the same expectations as natively. [`simulate`] is the
//! one-line-per-step timeline of the `simulate` command.

mod parts;
pub mod simulate;
mod subject;

use std::path::{Path, PathBuf};

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, Store};

pub use parts::{inspect, next_releases, unfinished};
pub use subject::{ComponentSubject, pack};

/// The bindings `bindgen!` generates from `wit/`.
pub mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "turnstile",
        additional_derives: [PartialEq, Clone],
    });
}

pub use bindings::exports::turnstile::scheduler::admission as wit_admission;
pub use bindings::exports::turnstile::scheduler::config as wit_config;
pub use bindings::exports::turnstile::scheduler::scheduler as wit_scheduler;
pub use bindings::exports::turnstile::scheduler::simulate as wit_simulate;

/// What a host should cap: the guest's linear memory, and optionally the work one call may do
/// (wasmtime fuel, roughly one unit per instruction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of linear memory the instance may grow to.
    pub memory_bytes: usize,
    /// Fuel each store starts with; `None` turns fuel metering off (it costs some speed).
    pub fuel: Option<u64>,
}

impl Default for Limits {
    /// 256 MiB of memory (enough for `ENTRIES_MAX` entries), no fuel.
    fn default() -> Self {
        Self {
            memory_bytes: 256 << 20,
            fuel: None,
        }
    }
}

/// The store's data: the resource limiter, which also records the peak memory size.
#[derive(Debug)]
pub struct HostState {
    memory_max: usize,
    memory_peak: usize,
}

impl HostState {
    /// The largest linear memory size the instance reached, in bytes.
    pub fn memory_peak(&self) -> usize {
        self.memory_peak
    }
}

impl wasmtime::ResourceLimiter for HostState {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_max {
            return Ok(false);
        }
        self.memory_peak = self.memory_peak.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// A compiled component, ready to instantiate many times.
pub struct Harness {
    engine: Engine,
    pre: bindings::TurnstilePre<HostState>,
    limits: Limits,
}

/// One store with one instance of the component.
pub struct Instance {
    /// The store; every call takes it.
    pub store: Store<HostState>,
    /// The instance's exports.
    pub exports: bindings::Turnstile,
}

impl Harness {
    /// Compiles the component at `path` with the default [`Limits`]. It imports nothing, so
    /// the linker stays empty.
    pub fn load(path: &Path) -> wasmtime::Result<Self> {
        Self::load_with(path, Limits::default())
    }

    /// Compiles the component at `path` with the given limits.
    pub fn load_with(path: &Path, limits: Limits) -> wasmtime::Result<Self> {
        Self::compile(limits, |engine| Component::from_file(engine, path))
    }

    /// Compiles the component from `source` with the default [`Limits`].
    pub fn load_source(source: &ComponentSource) -> wasmtime::Result<Self> {
        match source {
            ComponentSource::File(path) | ComponentSource::Workspace(path) => Self::load(path),
            ComponentSource::Embedded(bytes) => {
                Self::compile(Limits::default(), |engine| Component::new(engine, bytes))
            }
        }
    }

    fn compile(
        limits: Limits,
        component: impl FnOnce(&Engine) -> wasmtime::Result<Component>,
    ) -> wasmtime::Result<Self> {
        let mut config = Config::new();
        config.consume_fuel(limits.fuel.is_some());
        // `perf record` can name the component's functions (profiling the benchmarks).
        if std::env::var_os("TURNSTILE_PERFMAP").is_some() {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&config)?;
        let component = component(&engine)?;
        let linker: Linker<HostState> = Linker::new(&engine);
        let pre = bindings::TurnstilePre::new(linker.instantiate_pre(&component)?)?;
        Ok(Self {
            engine,
            pre,
            limits,
        })
    }

    /// A fresh store and instance.
    pub fn instance(&self) -> wasmtime::Result<Instance> {
        let state = HostState {
            memory_max: self.limits.memory_bytes,
            memory_peak: 0,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| s);
        if let Some(fuel) = self.limits.fuel {
            store.set_fuel(fuel)?;
        }
        let exports = self.pre.instantiate(&mut store)?;
        Ok(Instance { store, exports })
    }
}

/// Where a component comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComponentSource {
    /// A file the user named: `--component PATH`, or `$TURNSTILE_WASM`.
    File(PathBuf),
    /// The copy `build.rs` embedded when host-harness was built.
    Embedded(&'static [u8]),
    /// Nothing embedded and nothing named: the file `cargo xtask build-guest` writes in the
    /// workspace this binary was built in, [`default_component_path`].
    Workspace(PathBuf),
}

/// The component a command runs: `flag` (`--component PATH`), else `$TURNSTILE_WASM`, else
/// the embedded copy, else [`ComponentSource::Workspace`].
pub fn component_source(flag: Option<PathBuf>) -> ComponentSource {
    if let Some(path) = flag.or_else(|| std::env::var_os("TURNSTILE_WASM").map(PathBuf::from)) {
        return ComponentSource::File(path);
    }
    match embedded_component() {
        Some(bytes) => ComponentSource::Embedded(bytes),
        None => ComponentSource::Workspace(default_component_path()),
    }
}

/// The component embedded at build time: the target directory's `turnstile.wasm` as it was
/// when host-harness was last built (cargo rebuilds host-harness when that file changes), or
/// `None` when there was none (see `build.rs`).
pub fn embedded_component() -> Option<&'static [u8]> {
    const BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/turnstile.wasm"));
    (!BYTES.is_empty()).then_some(BYTES)
}

/// The file [`embedded_component`] was copied from, when there was one.
pub fn embedded_from() -> Option<&'static Path> {
    let from = env!("TURNSTILE_EMBEDDED_FROM");
    (!from.is_empty()).then(|| Path::new(from))
}

/// Where the component is: `$TURNSTILE_WASM`, else `target/turnstile.wasm` in the workspace.
pub fn default_component_path() -> PathBuf {
    if let Some(path) = std::env::var_os("TURNSTILE_WASM") {
        return PathBuf::from(path);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    target.join("turnstile.wasm")
}

/// The component for tests and benchmarks: [`default_component_path`], built first with
/// `cargo xtask build-guest` when it is missing (a fresh clone, so that `cargo test` at the root
/// works without a separate build step). The nested build uses a target directory of its own,
/// so that it never waits on the lock of the `cargo test` that runs it.
pub fn built_component_path() -> Result<PathBuf, String> {
    let path = default_component_path();
    if path.exists() {
        return Ok(path);
    }
    let Some(target) = path.parent() else {
        return Err(format!("{} has no parent directory", path.display()));
    };
    let nested = target.join("component-build");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args(["run", "--quiet", "--package", "xtask", "--", "build-guest"])
        .env("CARGO_TARGET_DIR", &nested)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .status()
        .map_err(|e| format!("cannot run cargo to build the component: {e}"))?;
    if !status.success() {
        return Err(format!("`cargo xtask build-guest` failed with {status}"));
    }
    std::fs::copy(nested.join("turnstile.wasm"), &path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Resolves layers through the component and prints each diagnostic's rendering; returns
/// whether the config is valid.
pub fn check(
    instance: &mut Instance,
    layers: &[(String, String)],
    deny_warnings: bool,
) -> wasmtime::Result<bool> {
    let layers: Vec<wit_config::Layer> = layers
        .iter()
        .map(|(name, text)| wit_config::Layer {
            name: name.clone(),
            text: text.clone(),
        })
        .collect();
    let policy = instance.exports.turnstile_scheduler_config().policy();
    match policy.call_resolve(&mut instance.store, &layers)? {
        Ok(resource) => {
            let warnings = policy.call_warnings(&mut instance.store, resource)?;
            for d in &warnings {
                println!("{}\n", d.rendered);
            }
            if !warnings.is_empty() {
                println!("{} warning(s)", warnings.len());
            }
            let tools = policy.call_tools(&mut instance.store, resource)?;
            for t in &tools {
                println!("{}", subject::tool_line(t));
            }
            println!("ok: {} tools configured", tools.len());
            resource.resource_drop(&mut instance.store)?;
            Ok(warnings.is_empty() || !deny_warnings)
        }
        Err(diags) => {
            let errors = diags
                .iter()
                .filter(|d| d.severity == wit_config::Severity::Error)
                .count();
            for d in &diags {
                println!("{}\n", d.rendered);
            }
            match diags.len() - errors {
                0 => println!("{errors} error(s)"),
                warnings => println!("{errors} error(s), {warnings} warning(s)"),
            }
            Ok(false)
        }
    }
}
