//! `simulate` through the component: the timeline is the component's (its `simulate`
//! interface, the engine's `simulate` module), so this CLI, the npm package's and the Python
//! package's print the same lines for the same input; this file only carries the input across.
//! [`file_layers`] and [`resolve`] also serve `cases`, which cites a case file's layers by
//! the file's own lines.

use std::fmt;

use turnstile_corpus::{self as corpus, Case};

use wasmtime::component::ResourceAny;

use crate::{Instance, wit_config as wc, wit_simulate as wsim};

/// Why a simulation did not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The layers do not resolve: every diagnostic, rendered, joined by newlines.
    Config(String),
    /// The component said why (its `simulate.error`), with the exit status a CLI gives it.
    Refused(String, u8),
    /// The component trapped: a bug, here or there.
    Host(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(why) | Self::Refused(why, _) | Self::Host(why) => f.write_str(why),
        }
    }
}

/// A case file's layers, cited by the file's own lines: each is named `file` and padded with
/// as many empty lines (and spaces, to its column) as precede its text in the file, which TOML
/// ignores, so a diagnostic prints `FILE:LINE:COLUMN` with the file's line as its excerpt. A
/// layer not written verbatim in the file keeps its own lines and is named `FILE[NAME]`.
pub fn file_layers(file: &str, text: &str, case: &Case) -> Vec<(String, String)> {
    let starts = corpus::layer_starts(text);
    case.layer
        .iter()
        .enumerate()
        .map(|(i, layer)| match starts.get(i).copied().flatten() {
            Some((line, column)) => {
                let mut padded = "\n".repeat(line.saturating_sub(1) as usize);
                padded.push_str(&" ".repeat(column.saturating_sub(1) as usize));
                padded.push_str(&layer.text);
                (file.to_owned(), padded)
            }
            None => {
                let name = layer.name.clone().unwrap_or_else(|| format!("L{}", i + 1));
                (format!("{file}[{name}]"), layer.text.clone())
            }
        })
        .collect()
}

/// Resolves `layers` (`(name, text)`, lowest precedence first) into a policy resource, or
/// [`Error::Config`] with every diagnostic's rendering.
pub fn resolve(instance: &mut Instance, layers: &[(String, String)]) -> Result<ResourceAny, Error> {
    let layers: Vec<wc::Layer> = layers
        .iter()
        .map(|(name, text)| wc::Layer {
            name: name.clone(),
            text: text.clone(),
        })
        .collect();
    let config = instance.exports.turnstile_scheduler_config().policy();
    config
        .call_resolve(&mut instance.store, &layers)
        .map_err(trap)?
        .map_err(|diags| {
            let text: Vec<String> = diags.into_iter().map(|d| d.rendered).collect();
            Error::Config(text.join("\n"))
        })
}

/// `simulate.run`: the config's warnings, rendered, and the timeline; or why not.
pub fn run(instance: &mut Instance, input: &wsim::Input) -> Result<(Vec<String>, String), Error> {
    let iface = instance.exports.turnstile_scheduler_simulate();
    match iface.call_run(&mut instance.store, input).map_err(trap)? {
        Ok(s) => Ok((
            s.warnings.into_iter().map(|d| d.rendered).collect(),
            s.timeline,
        )),
        Err(wsim::Error::Config(diags)) => {
            let text: Vec<String> = diags.into_iter().map(|d| d.rendered).collect();
            Err(Error::Config(text.join("\n")))
        }
        Err(wsim::Error::Usage(why) | wsim::Error::Nothing(why)) => Err(Error::Refused(why, 2)),
        Err(wsim::Error::NotACase(why) | wsim::Error::Input(why)) => Err(Error::Refused(why, 1)),
    }
}

/// `simulate.help`: `PROGRAM simulate --help`.
pub fn help(instance: &mut Instance, program: &str) -> Result<String, Error> {
    let iface = instance.exports.turnstile_scheduler_simulate();
    iface.call_help(&mut instance.store, program).map_err(trap)
}

fn trap(e: wasmtime::Error) -> Error {
    Error::Host(format!("trap: {e:#}"))
}
