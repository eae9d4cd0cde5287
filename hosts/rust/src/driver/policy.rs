//! The policy: TOML (or JSON) layers resolved by the engine into what the scheduler enforces,
//! or the engine's diagnostics, rendered like rustc.

use std::fmt;

/// (The engine's: see [Types from the engine](crate#types-from-the-engine).)
#[doc(inline)]
pub use turnstile_engine::config::{
    Concurrency, ConcurrencyKey, Layer, OnError, RateWindow, ToolPolicy,
};
/// (The engine's: see [Types from the engine](crate#types-from-the-engine).)
#[doc(inline)]
pub use turnstile_engine::diagnostic::{
    Code as DiagnosticCode, Label as DiagnosticLabel, Severity, Span as DiagnosticSpan,
};
/// (The engine's: see [Types from the engine](crate#types-from-the-engine).)
#[doc(inline)]
pub use turnstile_engine::template::KeyTemplate;

/// A validated policy: which tools share which concurrency keys, their limits, delays, rate
/// windows, fan-out and retries. Made once, shared by every driver of a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub(crate) inner: turnstile_engine::config::Policy,
    warnings: Vec<Diagnostic>,
}

impl Policy {
    /// Resolves layers in order, lowest precedence first (later layers override earlier ones
    /// per tool); a layer whose text starts with `{` is read as JSON. Every problem is
    /// reported, not the first one.
    pub fn resolve(layers: &[Layer]) -> Result<Self, ConfigError> {
        match turnstile_engine::config::resolve(layers) {
            Ok(inner) => {
                let warnings = inner.warnings().iter().map(Diagnostic::of).collect();
                Ok(Self { inner, warnings })
            }
            Err(diagnostics) => Err(ConfigError {
                diagnostics: diagnostics.iter().map(Diagnostic::of).collect(),
            }),
        }
    }

    /// One TOML layer named `name` (the name diagnostics cite).
    pub fn from_toml(name: &str, text: &str) -> Result<Self, ConfigError> {
        Self::resolve(&[Layer::new(name, text)])
    }

    /// Warnings about the policy (a near miss of a name Turnstile reads, `unknown-field-typo`):
    /// it resolved, but may not mean what was written. Each prints like rustc (`Display`).
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// Every configured tool, in configuration order. A tool the policy does not name runs
    /// unbounded.
    pub fn tools(&self) -> &[ToolPolicy] {
        self.inner.tools()
    }

    /// A configured tool by name.
    pub fn tool(&self, name: &str) -> Option<&ToolPolicy> {
        self.inner.tool(name)
    }

    /// A fingerprint of what the policy means to the scheduler (every tool's keys, limits,
    /// delays, rates, retries, maximum waits, sharing and fan-out). A snapshot carries the one
    /// it was made under ([`Snapshot::state`](super::Snapshot::state)`.policy`), so a host can
    /// tell the policy changed before resuming. [`Driver::resume`](super::Driver::resume)
    /// accepts a changed policy: it restores every call it can under the new one and lists
    /// the others in [`Resumed::unrestored`](super::Resumed::unrestored).
    pub fn fingerprint(&self) -> u64 {
        self.inner.fingerprint()
    }

    /// The shared keys the policy declares (`shared = true`), each once.
    pub fn shared_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        for c in self.inner.tools().iter().flat_map(|t| &t.concurrency) {
            let key = c.key.as_str();
            if c.shared && !keys.iter().any(|k| k == key) {
                keys.push(key.to_owned());
            }
        }
        keys
    }
}

/// One problem with a policy: a stable code, error or warning, the key path, the tools
/// involved, spans into the layers, and its rustc-style rendering, which `Display` prints.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Diagnostic {
    /// The stable code (`concurrency-limit-conflict`: [`DiagnosticCode::as_str`]).
    pub code: DiagnosticCode,
    /// Error or warning.
    pub severity: Severity,
    /// Lowercase, no trailing period; starts with the dotted key path.
    pub message: String,
    /// The key path, one segment per element (`["conversation", "tools", "t", "concurrency"]`).
    pub path: Vec<String>,
    /// The tools involved, in configuration order.
    pub tools: Vec<String>,
    /// Spans, primary first. Empty only for problems with no place (too many layers).
    pub labels: Vec<DiagnosticLabel>,
    /// A hint on how to fix it, if there is one.
    pub help: Option<String>,
    /// The rustc-style plain-text rendering of all of the above (what `Display` prints,
    /// without its final newline).
    pub rendered: String,
}

impl Diagnostic {
    fn of(d: &turnstile_engine::diagnostic::Diagnostic) -> Self {
        Self {
            code: d.code,
            severity: d.severity,
            message: d.message.clone(),
            path: d.path.clone(),
            tools: d.tools.clone(),
            labels: d.labels.clone(),
            help: d.help.clone(),
            rendered: d.rendered.clone(),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rendered.trim_end())
    }
}

/// A policy the engine refused: its diagnostics, each rendered like rustc (`Display` prints
/// them all).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// Every problem found (errors, and the warnings that came with them).
    pub diagnostics: Vec<Diagnostic>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            d.fmt(f)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}
