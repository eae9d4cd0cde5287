//! The policy: TOML (or JSON) layers resolved by the engine into what the scheduler enforces,
//! or the engine's diagnostics, rendered like rustc.

use std::fmt;

pub use turnstile_engine::config::Layer;
pub use turnstile_engine::diagnostic::Diagnostic;

/// A validated policy: which tools share which concurrency keys, their limits, delays, rate
/// windows, fan-out and retries. Made once, shared by every driver of a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub(crate) inner: turnstile_engine::config::Policy,
}

impl Policy {
    /// Resolves layers in order (later layers override earlier ones per tool); a layer whose
    /// text starts with `{` is read as JSON. Every problem is reported, not the first one.
    pub fn resolve(layers: &[Layer]) -> Result<Self, ConfigError> {
        turnstile_engine::config::resolve(layers)
            .map(|inner| Self { inner })
            .map_err(|diagnostics| ConfigError { diagnostics })
    }

    /// One TOML layer named `name` (the name diagnostics cite).
    pub fn from_toml(name: &str, text: &str) -> Result<Self, ConfigError> {
        Self::resolve(&[Layer::new(name, text)])
    }

    /// Warnings about the policy (a near miss of a name Turnstile reads, ...).
    pub fn warnings(&self) -> &[Diagnostic] {
        self.inner.warnings()
    }

    /// The fingerprint a snapshot carries (a snapshot resumes under the same policy).
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

    /// The engine's policy.
    pub fn engine(&self) -> &turnstile_engine::config::Policy {
        &self.inner
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
            f.write_str(d.rendered.trim_end())?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}
