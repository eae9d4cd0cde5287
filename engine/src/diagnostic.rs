//! Config diagnostics: a stable code, a severity (error or warning), a message, the key path, the
//! tools involved, spans into the layers, and a rustc-style rendering (`error[code]: ...` or
//! `warning[code]: ...`).

mod render;
#[cfg(test)]
mod tests;
mod width;

/// The stable code of a diagnostic. Hosts match on these; the kebab-case spelling from
/// [`Code::as_str`] is what crosses the component boundary and appears in case files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// A layer is not valid TOML.
    TomlSyntax,
    /// A layer that starts with `{` is not valid JSON (or holds what TOML cannot: `null`, a
    /// key given twice).
    JsonSyntax,
    /// More layers than [`crate::limits::LAYERS_MAX`].
    TooManyLayers,
    /// A layer longer than [`crate::limits::LAYER_BYTES_MAX`], a name longer than
    /// [`crate::limits::NAME_BYTES_MAX`], or a concurrency key (written, or the integer form's
    /// tool name) longer than [`crate::limits::KEY_BYTES_MAX`].
    TooLarge,
    /// More tools than [`crate::limits::TOOLS_MAX`].
    TooManyTools,
    /// `conversation`, `conversation.tools` or a tool is not a table.
    TableType,
    /// `concurrency` (or its `key` or `limit`) has the wrong type or is out of range.
    ConcurrencyType,
    /// A negative number in `concurrency`: the integer form, `limit`, `delay` or `max_wait` (an
    /// integer or a string such as `"-5ms"`) or `retries`.
    ConcurrencyNegative,
    /// The merged `concurrency` table has no `key`.
    ConcurrencyKeyMissing,
    /// `concurrency.key` is the empty string.
    ConcurrencyKeyEmpty,
    /// `concurrency` has a field other than `key` and `limit`.
    ConcurrencyUnknownField,
    /// `concurrency` on `conversation.tools.'*'`.
    ConcurrencyOnDefaults,
    /// `fan_out` (or its `enabled`) has the wrong type.
    FanOutType,
    /// `fan_out` on `conversation.tools.'*'`.
    FanOutOnDefaults,
    /// `fan_out.concurrency`, which RFD 129 removed.
    FanOutConcurrencyRemoved,
    /// `fan_out.on_error` is not `"continue"` or `"stop"`.
    FanOutOnErrorValue,
    /// `fan_out` has a field other than `enabled` and `on_error`.
    FanOutUnknownField,
    /// Tools naming one concurrency key give it different limits.
    ConcurrencyLimitConflict,
    /// `fan_out.on_error = "stop"` on a tool without a limit of at least 1.
    StopWithoutLimit,
    /// `enable` is not a JP enable value.
    EnableValue,
    /// Tools naming one concurrency key give it different delays.
    ConcurrencyDelayConflict,
    /// Tools naming one concurrency key give it different retry caps.
    ConcurrencyRetriesConflict,
    /// `concurrency.key` has a placeholder that is not closed, empty, or a stray `}`.
    ConcurrencyKeyTemplate,
    /// Tools naming one concurrency key disagree on whether it is `shared`.
    ConcurrencySharedConflict,
    /// A warning: a field or table Turnstile does not read, whose name is a small edit away
    /// from one it does (`concurency`, `conversation.tool`, `fanout`, `fan-out`). It is
    /// ignored like any unknown field, so whatever it meant to set is not set.
    UnknownFieldTypo,
    /// Tools naming one concurrency key (or a template and a key it can make) give it
    /// different `max_wait`s.
    ConcurrencyMaxWaitConflict,
    /// Tools naming one concurrency key (or a template and a key it can make) give it
    /// different `rate` windows.
    ConcurrencyRateConflict,
    /// Tools naming one concurrency key (or a template and a key it can make) give it
    /// different `burst`s.
    ConcurrencyBurstConflict,
    /// A `burst` on a key with no `rate`: it would let nothing through.
    BurstWithoutRate,
    /// A rate window on a `shared` key counting more than 1,000,000 starts, or with a burst
    /// above 1,000,000: the stores keep its arrival times exactly in 53 bits.
    SharedRateOutOfRange,
    /// Tools naming one concurrency key (or a template and a key it can make) disagree on
    /// whether its limit adapts, or on its floor.
    ConcurrencyAdaptConflict,
    /// A `weight` above 1 on a key with no `rate`: it would count against nothing.
    WeightWithoutRate,
    /// A `weight` above the key's `burst`: such a call could never start.
    WeightAboveBurst,
    /// One key named twice in one tool's key set.
    ConcurrencyKeyRepeated,
    /// A key set with two `shared` keys (two stores' permits cannot yet be taken all or
    /// none), or a delay or a rate on a key beside its shared key.
    SharedKeyInSet,
    /// Two adaptive limits in one key set: a rate limit on its call could not say which one
    /// to halve.
    AdaptiveKeysInSet,
    /// A path key (`path = ...`) whose key has placeholders, or with a limit, delay, rate,
    /// burst, weight, adaptive limit or sharing: a path key only keeps overlapping paths
    /// apart, and the rest belongs to another key of a set.
    PathKeyTerms,
    /// Tools naming one concurrency key disagree on whether it is a path key.
    ConcurrencyPathConflict,
}

impl Code {
    /// Every code, in declaration order.
    pub const ALL: &[Self] = &[
        Self::TomlSyntax,
        Self::JsonSyntax,
        Self::TooManyLayers,
        Self::TooLarge,
        Self::TooManyTools,
        Self::TableType,
        Self::ConcurrencyType,
        Self::ConcurrencyNegative,
        Self::ConcurrencyKeyMissing,
        Self::ConcurrencyKeyEmpty,
        Self::ConcurrencyUnknownField,
        Self::ConcurrencyOnDefaults,
        Self::FanOutType,
        Self::FanOutOnDefaults,
        Self::FanOutConcurrencyRemoved,
        Self::FanOutOnErrorValue,
        Self::FanOutUnknownField,
        Self::ConcurrencyLimitConflict,
        Self::StopWithoutLimit,
        Self::EnableValue,
        Self::ConcurrencyDelayConflict,
        Self::ConcurrencyRetriesConflict,
        Self::ConcurrencyKeyTemplate,
        Self::ConcurrencySharedConflict,
        Self::UnknownFieldTypo,
        Self::ConcurrencyMaxWaitConflict,
        Self::ConcurrencyRateConflict,
        Self::ConcurrencyBurstConflict,
        Self::BurstWithoutRate,
        Self::SharedRateOutOfRange,
        Self::ConcurrencyAdaptConflict,
        Self::WeightWithoutRate,
        Self::WeightAboveBurst,
        Self::ConcurrencyKeyRepeated,
        Self::SharedKeyInSet,
        Self::AdaptiveKeysInSet,
        Self::PathKeyTerms,
        Self::ConcurrencyPathConflict,
    ];

    /// The stable kebab-case spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TomlSyntax => "toml-syntax",
            Self::JsonSyntax => "json-syntax",
            Self::TooManyLayers => "too-many-layers",
            Self::TooLarge => "too-large",
            Self::TooManyTools => "too-many-tools",
            Self::TableType => "table-type",
            Self::ConcurrencyType => "concurrency-type",
            Self::ConcurrencyNegative => "concurrency-negative",
            Self::ConcurrencyKeyMissing => "concurrency-key-missing",
            Self::ConcurrencyKeyEmpty => "concurrency-key-empty",
            Self::ConcurrencyUnknownField => "concurrency-unknown-field",
            Self::ConcurrencyOnDefaults => "concurrency-on-defaults",
            Self::FanOutType => "fan-out-type",
            Self::FanOutOnDefaults => "fan-out-on-defaults",
            Self::FanOutConcurrencyRemoved => "fan-out-concurrency-removed",
            Self::FanOutOnErrorValue => "fan-out-on-error-value",
            Self::FanOutUnknownField => "fan-out-unknown-field",
            Self::ConcurrencyLimitConflict => "concurrency-limit-conflict",
            Self::StopWithoutLimit => "stop-without-limit",
            Self::EnableValue => "enable-value",
            Self::ConcurrencyDelayConflict => "concurrency-delay-conflict",
            Self::ConcurrencyRetriesConflict => "concurrency-retries-conflict",
            Self::ConcurrencyKeyTemplate => "concurrency-key-template",
            Self::ConcurrencySharedConflict => "concurrency-shared-conflict",
            Self::UnknownFieldTypo => "unknown-field-typo",
            Self::ConcurrencyMaxWaitConflict => "concurrency-max-wait-conflict",
            Self::ConcurrencyRateConflict => "concurrency-rate-conflict",
            Self::ConcurrencyBurstConflict => "concurrency-burst-conflict",
            Self::BurstWithoutRate => "burst-without-rate",
            Self::SharedRateOutOfRange => "shared-rate-out-of-range",
            Self::ConcurrencyAdaptConflict => "concurrency-adapt-conflict",
            Self::WeightWithoutRate => "weight-without-rate",
            Self::WeightAboveBurst => "weight-above-burst",
            Self::ConcurrencyKeyRepeated => "concurrency-key-repeated",
            Self::SharedKeyInSet => "shared-key-in-set",
            Self::AdaptiveKeysInSet => "adaptive-keys-in-set",
            Self::PathKeyTerms => "path-key-terms",
            Self::ConcurrencyPathConflict => "concurrency-path-conflict",
        }
    }

    /// How serious a diagnostic with this code is: every code is an error except
    /// [`Code::UnknownFieldTypo`].
    pub fn severity(self) -> Severity {
        match self {
            Self::UnknownFieldTypo => Severity::Warning,
            _ => Severity::Error,
        }
    }
}

/// Whether a diagnostic fails resolution (an error) or only reports (a warning).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Severity {
    /// The config is not resolved.
    Error,
    /// The config resolves; the warning is on [`crate::config::Policy::warnings`].
    Warning,
}

impl Severity {
    /// `error` or `warning`, as the rendering starts.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warning => "warning",
        }
    }
}

/// A place in one layer: the layer's index in the list given to `resolve`, the byte range, and
/// the one-based line and column of its start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// Index of the layer, lowest precedence first.
    pub layer: u32,
    /// Name of the layer, as given to `resolve`.
    pub layer_name: String,
    /// Byte offset of the start.
    pub start: u32,
    /// Byte offset one past the end.
    pub end: u32,
    /// One-based line of `start`.
    pub line: u32,
    /// One-based column of `start`, in characters.
    pub column: u32,
}

/// A span with what it shows. The first label of a diagnostic is its primary one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// Where.
    pub span: Span,
    /// What is there, for example `github_pulls = 2`.
    pub message: String,
}

/// One problem with a config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The stable code.
    pub code: Code,
    /// Error or warning (always `code.severity()`).
    pub severity: Severity,
    /// Lowercase, no trailing period; starts with the dotted key path.
    pub message: String,
    /// The key path, one segment per element (`["conversation", "tools", "t", "concurrency"]`).
    pub path: Vec<String>,
    /// The tools involved, in configuration order.
    pub tools: Vec<String>,
    /// Spans, primary first. Empty only for problems with no place (too many layers).
    pub labels: Vec<Label>,
    /// A hint on how to fix it, if there is one.
    pub help: Option<String>,
    /// The rustc-style plain-text rendering of all of the above.
    pub rendered: String,
}

/// Renders a path like TOML would write it: `conversation.tools.'*'.concurrency`.
pub fn dotted(path: &[String]) -> String {
    let mut out = String::new();
    for (i, seg) in path.iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        let bare = !seg.is_empty()
            && seg
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if bare {
            out.push_str(seg);
        } else {
            out.push('\'');
            out.push_str(seg);
            out.push('\'');
        }
    }
    out
}

/// Renders a diagnostic like rustc does, without colour. `sources` are the layers' texts, in
/// the order their indices refer to. One snippet per layer, in the order the labels first name
/// them; the first label is the primary one (`^`, for warnings too, as rustc draws it).
pub(crate) fn render(
    code: Code,
    message: &str,
    labels: &[Label],
    help: Option<&str>,
    sources: &[&str],
) -> String {
    let mut snippets: Vec<render::Snippet<'_>> = Vec::new();
    for (i, label) in labels.iter().enumerate() {
        let layer = label.span.layer;
        let note = render::Note {
            range: label.span.start as usize..label.span.end as usize,
            text: &label.message,
            primary: i == 0,
        };
        if let Some(snippet) = snippets.iter_mut().find(|s| s.layer == layer) {
            snippet.labels.push(note);
        } else if let Some(source) = sources.get(layer as usize) {
            snippets.push(render::Snippet {
                layer,
                origin: &label.span.layer_name,
                source,
                labels: vec![note],
            });
        }
    }
    render::render(
        code.severity().as_str(),
        code.as_str(),
        message,
        &snippets,
        help,
    )
}
