//! Config resolution: layers of TOML text, lowest precedence first, into a [`Policy`].
//!
//! The pipeline is parse, merge, validate:
//!
//! 1. `raw` parses each layer into mirrors of `concurrency`, `fan_out` and `enable`, with a
//!    location on every value. Shape errors (a string limit, `fan_out.concurrency`, `'*'`
//!    settings) are reported per layer.
//! 2. `validate` merges the layers per tool (an integer replaces, a table over a table merges
//!    per field, a boolean `fan_out` fully specifies it) and checks the merged config once: a
//!    table needs a `key`, every tool naming a key gives the same limit (enabled or not), and
//!    `on_error = "stop"` needs a limit of at least 1.
//! 3. The result is a [`Policy`], or every diagnostic found, in a stable order (layer problems
//!    in layer order, then cross-tool problems in configuration order; warnings after every
//!    error). Warnings alone do not fail resolution: the policy carries them.
//!
//! Everything outside `conversation.tools` is ignored, as is every tool field RFD 129 does not
//! own (`source`, `run`, `command`, `parameters`, `style`, ...), except that a name a small
//! edit away from one Turnstile reads (`concurency`, `conversation.tool`, `fanout`) is a
//! warning, `unknown-field-typo` (`typo.rs`).

mod duration;
mod json_layer;
mod overlap;
mod policy;
mod rate;
mod raw;
mod typo;
mod validate;

pub use policy::{Concurrency, ConcurrencyKey, OnError, Policy, RateWindow, ToolPolicy};

use crate::diagnostic::{self, Code, Diagnostic, Label, Severity, Span};
use crate::limits::{LAYER_BYTES_MAX, LAYERS_MAX, NAME_BYTES_MAX};

/// One config layer: a name shown in diagnostics (a path, `user`, `--cfg`) and its TOML text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    /// Shown in diagnostics as the origin of a span.
    pub name: String,
    /// The TOML document.
    pub text: String,
}

impl Layer {
    /// A layer from a name and its text.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            text: text.into(),
        }
    }
}

/// Resolves layers, lowest precedence first, into a policy, or returns every problem found:
/// the errors, then the warnings. A policy that resolves carries its warnings
/// ([`Policy::warnings`]).
pub fn resolve(layers: &[Layer]) -> Result<Policy, Vec<Diagnostic>> {
    let mut sink = Sink::default();
    if layers.len() > LAYERS_MAX {
        sink.push(
            Code::TooManyLayers,
            &[],
            format!(
                "{} layers given; at most {LAYERS_MAX} are accepted",
                layers.len()
            ),
        );
        return Err(sink.finish(&[]));
    }
    let mut parsed = Vec::with_capacity(layers.len());
    let mut complete = true;
    for (i, layer) in layers.iter().enumerate() {
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        if layer.text.len() > LAYER_BYTES_MAX || layer.name.len() > NAME_BYTES_MAX {
            sink.push(
                Code::TooLarge,
                &[],
                format!(
                    "layer {i} is too large: at most {LAYER_BYTES_MAX} bytes of text and a \
                     {NAME_BYTES_MAX}-byte name are accepted"
                ),
            );
            complete = false;
            continue;
        }
        match raw::parse_layer(index, &layer.text, &mut sink) {
            Some(raw) => parsed.push(raw),
            None => complete = false,
        }
    }
    let policy = validate::merge_and_validate(parsed, complete, &mut sink);
    if sink.has_errors() {
        Err(sink.finish(layers))
    } else {
        Ok(policy.with_warnings(sink.finish(layers)))
    }
}

/// A byte range in one layer, before it is turned into a [`Span`] with line and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    layer: u32,
    start: u32,
    end: u32,
}

impl Loc {
    fn new(layer: u32, start: usize, end: usize) -> Self {
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Self {
            layer,
            start: clamp(start),
            end: clamp(end.max(start)),
        }
    }

    fn from_span(layer: u32, span: std::ops::Range<usize>) -> Self {
        Self::new(layer, span.start, span.end)
    }

    /// This location extended to the end of `span`.
    fn to(self, span: std::ops::Range<usize>) -> Self {
        let end = u32::try_from(span.end).unwrap_or(u32::MAX).max(self.end);
        Self { end, ..self }
    }
}

/// A diagnostic being collected.
#[derive(Debug)]
struct PendingDiagnostic {
    code: Code,
    message: String,
    path: Vec<String>,
    tools: Vec<String>,
    labels: Vec<(Loc, String)>,
    help: Option<String>,
}

impl PendingDiagnostic {
    fn label(&mut self, loc: Loc, message: impl Into<String>) -> &mut Self {
        self.labels.push((loc, message.into()));
        self
    }

    fn help(&mut self, help: impl Into<String>) -> &mut Self {
        self.help = Some(help.into());
        self
    }

    fn tools(&mut self, tools: Vec<String>) -> &mut Self {
        self.tools = tools;
        self
    }
}

/// Collects diagnostics; [`Sink::finish`] turns locations into spans and renders them.
#[derive(Debug, Default)]
pub(crate) struct Sink {
    items: Vec<PendingDiagnostic>,
}

impl Sink {
    /// Starts a diagnostic; `message` follows the dotted path and `: `.
    fn push(&mut self, code: Code, path: &[String], message: String) -> &mut PendingDiagnostic {
        let message = if path.is_empty() {
            message
        } else {
            format!("{}: {message}", diagnostic::dotted(path))
        };
        let tools = match path {
            [a, b, tool, ..] if a == "conversation" && b == "tools" && tool != "*" => {
                vec![tool.clone()]
            }
            _ => Vec::new(),
        };
        let index = self.items.len();
        self.items.push(PendingDiagnostic {
            code,
            message,
            path: path.to_vec(),
            tools,
            labels: Vec::new(),
            help: None,
        });
        &mut self.items[index]
    }

    fn has_errors(&self) -> bool {
        self.items
            .iter()
            .any(|d| d.code.severity() == Severity::Error)
    }

    /// Every diagnostic with its spans and rendering: errors first, in the order found, then
    /// warnings, in layer and text order.
    fn finish(self, layers: &[Layer]) -> Vec<Diagnostic> {
        let lines: Vec<LineIndex> = layers.iter().map(|l| LineIndex::new(&l.text)).collect();
        let sources: Vec<&str> = layers.iter().map(|l| l.text.as_str()).collect();
        // Errors keep the order found; warnings follow in layer and text order. Each item's
        // place is packed into one number with its index, so the order is total and one
        // unstable sort of `u64`s (the instantiation the scheduler uses) does the work: a
        // stable sort of these items would carry its own copy of the merge sort.
        let mut order: Vec<u64> = self
            .items
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let (warning, layer, start) = match d.code.severity() {
                    Severity::Error => (0, 0, 0),
                    Severity::Warning => d.labels.first().map_or((1, 0, 0), |(loc, _)| {
                        (1, u64::from(loc.layer), u64::from(loc.start))
                    }),
                };
                // 1 + 7 + 21 + 32 bits: layers are at most 64 and 1 MiB each, items far fewer
                // than 2^32 (asserted below, for the layer and text bounds too).
                debug_assert!(layer < 1 << 7 && start < 1 << 21 && u32::try_from(i).is_ok());
                (warning << 60) | (layer << 53) | (start << 32) | i as u64
            })
            .collect();
        order.sort_unstable();
        let mut slots: Vec<Option<PendingDiagnostic>> = self.items.into_iter().map(Some).collect();
        let items = order
            .into_iter()
            .filter_map(|o| slots.get_mut((o & u64::from(u32::MAX)) as usize)?.take());
        items
            .map(|d| {
                let labels: Vec<Label> = d
                    .labels
                    .into_iter()
                    .filter_map(|(loc, message)| {
                        let layer = layers.get(loc.layer as usize)?;
                        let index = lines.get(loc.layer as usize)?;
                        let (line, column) = index.line_column(&layer.text, loc.start);
                        Some(Label {
                            span: Span {
                                layer: loc.layer,
                                layer_name: layer.name.clone(),
                                start: loc.start,
                                end: loc.end,
                                line,
                                column,
                            },
                            message,
                        })
                    })
                    .collect();
                let rendered =
                    diagnostic::render(d.code, &d.message, &labels, d.help.as_deref(), &sources);
                Diagnostic {
                    code: d.code,
                    severity: d.code.severity(),
                    message: d.message,
                    path: d.path,
                    tools: d.tools,
                    labels,
                    help: d.help,
                    rendered,
                }
            })
            .collect()
    }
}

/// Byte offsets of line starts, for one-based line and column numbers.
struct LineIndex {
    starts: Vec<u32>,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        let mut starts = vec![0];
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                starts.push(u32::try_from(i + 1).unwrap_or(u32::MAX));
            }
        }
        Self { starts }
    }

    fn line_column(&self, text: &str, offset: u32) -> (u32, u32) {
        let line = self.starts.partition_point(|&s| s <= offset).max(1);
        let start = self.starts.get(line - 1).copied().unwrap_or(0) as usize;
        let end = (offset as usize).min(text.len());
        let column = text
            .get(start..end)
            .map_or(end.saturating_sub(start), |s| s.chars().count());
        let to_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        (to_u32(line), to_u32(column + 1))
    }
}
