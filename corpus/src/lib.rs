//! The shared case corpus (`tests/cases/*.toml`): the file format, the canonical one-line
//! renderings every host must produce, and a runner that drives any [`Subject`].
//!
//! The format is documented for people in `tests/cases/README.md`; this crate is its Rust
//! reader. The native engine and the wasmtime harness both implement [`Subject`], so one file
//! checks both, step by step, with identical expected output.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// One case file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// What the case shows, for people.
    #[serde(default)]
    pub description: String,
    /// Other descriptive fields a case may carry; never interpreted.
    #[serde(
        default,
        alias = "title",
        alias = "notes",
        alias = "comment",
        alias = "reference"
    )]
    pub name: Option<toml::Value>,
    /// Config layers, lowest precedence first.
    #[serde(default)]
    pub layer: Vec<LayerSpec>,
    /// When present, resolving must fail with exactly these diagnostics, in order.
    pub diagnostics: Option<Vec<String>>,
    /// With `diagnostics`: every diagnostic's `rendered` text, joined by newlines, exactly
    /// (optional: without it, the codes, lines and tools alone are compared).
    pub rendered: Option<String>,
    /// When present, resolving must succeed and each tool must render like this.
    pub tools: Option<Vec<String>>,
    /// When resolving succeeds: its warnings, in the form of `diagnostics` (default: none, so
    /// an unexpected warning fails the case); `rendered`, when given, is then their full text.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Batches, numbered from 1 in the order written here.
    #[serde(default)]
    pub batch: Vec<BatchSpec>,
    /// An admission controller, for admission cases.
    pub admission: Option<AdmissionSpec>,
    /// The steps, in order.
    #[serde(default)]
    pub step: Vec<Step>,
    /// Only read by `host-harness simulate`: how long executions take and which fail.
    pub simulate: Option<SimulateSpec>,
}

/// Virtual durations and outcomes for `host-harness simulate`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimulateSpec {
    /// Every execution's duration unless `durations` names it (default 10).
    pub duration_ms: Option<u64>,
    /// Durations by entry label.
    #[serde(default)]
    pub durations: HashMap<String, u64>,
    /// Entries whose execution fails.
    #[serde(default)]
    pub fail: Vec<String>,
}

/// One config layer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerSpec {
    /// Defaults to `L1`, `L2`, ... by position.
    pub name: Option<String>,
    /// The TOML text.
    pub text: String,
}

/// One batch: calls written `ID TOOL` or `ID TOOL*N` (a fan-out call of N operations).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSpec {
    /// The calls, in written order.
    pub calls: Vec<String>,
    /// `submit-batch`'s `limits.execution-ms`: executions are aborted after this long.
    pub execution_ms: Option<u32>,
    /// `submit-batch`'s `limits.abort-grace-ms`: aborted executions are given up after this long.
    pub abort_grace_ms: Option<u32>,
}

impl BatchSpec {
    /// The batch's time limits, as `submit-batch` takes them.
    pub fn limits(&self) -> LimitsSpec {
        LimitsSpec {
            execution_ms: self.execution_ms,
            abort_grace_ms: self.abort_grace_ms,
        }
    }
}

/// A batch's time limits (`limits` of `submit-batch`), in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitsSpec {
    /// Executions are aborted after running this long.
    pub execution_ms: Option<u32>,
    /// Aborted executions that have not ended this long after are given up.
    pub abort_grace_ms: Option<u32>,
}

/// An admission controller's config.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionSpec {
    /// The budget; values below 1 are clamped to 1 by the engine.
    pub max_concurrent: i64,
    /// Tool calls in parallel.
    #[serde(default)]
    pub allow_parallel: bool,
}

/// One step: an event and what must come out of it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// The event, e.g. `approve r1 r2` or `end r1 failed`.
    #[serde(rename = "do")]
    pub event: String,
    /// Entries `next-releases` must say to start, in order.
    #[serde(default)]
    pub start: Vec<String>,
    /// Entries `next-releases` must say were settled, `LABEL REASON` (`LABEL stopped AFTER`).
    #[serde(default)]
    pub settle: Vec<String>,
    /// Entries of shared keys the step must say to acquire a permit for, in order.
    #[serde(default)]
    pub acquire: Vec<String>,
    /// Entries of shared keys whose permit (or request) the step must say to give back.
    #[serde(default)]
    pub release: Vec<String>,
    /// Executions the step must say to abort, `LABEL CAUSE` (`deadline` or `cancel`), in order.
    #[serde(default)]
    pub abort: Vec<String>,
    /// Shared keys the step must say to pause at their store, `KEY UNTIL`, in order.
    #[serde(default)]
    pub pause_store: Vec<String>,
    /// The error code the event must fail with; for a single-input event nothing may change.
    pub error: Option<String>,
    /// For `approve-many` and `end-many`: every refused input, `INDEX CODE`.
    #[serde(default)]
    pub errors: Vec<String>,
    /// File batch numbers that retired in this step, in order (checked only when given).
    pub retired: Option<Vec<u32>>,
    /// For `restart`: layers to resume under instead of the file's.
    pub layers: Option<Vec<LayerSpec>>,
    /// For `restart`: calls `resume` left out, `CALL CODE`.
    #[serde(default)]
    pub unrestored: Vec<String>,
    /// Admission: `false` leaves this step's admissions for the next step's drain.
    pub drain: Option<bool>,
    /// For `inspect N`: every entry of the batch, rendered.
    pub inspect: Option<Vec<String>>,
    /// Admission: requests `next-admissions` must report, in order.
    #[serde(default)]
    pub admit: Vec<String>,
    /// Admission `shutdown`: in-flight requests to cancel.
    #[serde(default)]
    pub cancel: Vec<String>,
    /// Admission `shutdown`: queued requests refused.
    #[serde(default)]
    pub refused: Vec<String>,
    /// The host's clock for this step's inputs (`now`), in milliseconds.
    pub at: Option<u64>,
    /// When the step's output must say to wake the scheduler next: milliseconds, or `"none"`
    /// (checked only when given).
    pub wake_at: Option<toml::Value>,
    /// For people; never interpreted.
    #[serde(default, alias = "note", alias = "why")]
    pub comment: Option<toml::Value>,
}

/// A call as the runner hands it to a subject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSpec {
    /// The call id.
    pub id: String,
    /// The tool name.
    pub tool: String,
    /// `Some(n)` for a fan-out call of `n` operations.
    pub operations: Option<u32>,
    /// The call's arguments (JSON text), written after the tool: `ID TOOL {"path": "a"}`.
    /// Hosts pass them only when the tool's key is a template.
    pub arguments: Option<String>,
}

/// A diagnostic as a subject reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diag {
    /// The stable code.
    pub code: String,
    /// `(layer name, one-based line)` of each label, primary first.
    pub labels: Vec<(String, u32)>,
    /// The tools involved.
    pub tools: Vec<String>,
    /// The rendered text.
    pub rendered: String,
}

impl Diag {
    /// `CODE LAYER:LINE... [tools=a,b]`, the form case files compare against.
    pub fn line(&self) -> String {
        let mut out = self.code.clone();
        for (layer, line) in &self.labels {
            let _ = write!(out, " {layer}:{line}");
        }
        if !self.tools.is_empty() {
            let _ = write!(out, " tools={}", self.tools.join(","));
        }
        out
    }
}

/// The inputs of one round, by number, as the runner gathers them from a step of a case.
/// `settle` carries `rejected`, `skipped` or `failed`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct StepInputs {
    approve: Vec<u64>,
    settle: Vec<(u64, &'static str)>,
    ask: Vec<u64>,
    answer: Vec<u64>,
    ok: Vec<u64>,
    failed: Vec<u64>,
    cancel: Vec<u64>,
    now: Option<u64>,
    retry: Vec<(u64, u64)>,
    pause: Vec<(String, u64)>,
    granted: Vec<u64>,
    denied: Vec<u64>,
}

/// What one round returned, by number.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct StepOutput {
    /// `(entry, cause)` of each execution to abort.
    abort: Vec<(u64, String)>,
    /// `KEY UNTIL` of each shared key to pause at its store.
    pause_store: Vec<String>,
    start: Vec<u64>,
    /// `(entry, limit)` of each permit to ask for.
    acquire: Vec<(u64, Option<u32>)>,
    release: Vec<u64>,
    /// `(entry, reason, stopped-after)` of each entry the scheduler settled.
    settle: Vec<(u64, String, Option<u32>)>,
    retired: Vec<u64>,
    wake_at: Option<u64>,
}

/// One input of `on-events`, by number. `NotRun` carries `rejected`, `skipped` or `failed`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventSpec {
    /// `approve`.
    Approve(u64),
    /// `not-run`.
    NotRun(u64, &'static str),
    /// `ask`.
    Ask(u64),
    /// `answer`.
    Answer(u64),
    /// `cancel` of a batch.
    Cancel(u64),
    /// `pause` of a key until a time.
    Pause(String, u64),
    /// `granted`.
    Granted(u64),
    /// `denied`.
    Denied(u64),
}

/// How an execution ended, as `on-ended` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndSpec {
    /// `ok`.
    Ok,
    /// `failed`.
    Failed,
    /// `rate-limited(until)`.
    RateLimited(u64),
}

/// A refused input: what it was about (`entry N`, `batch N`, `key NAME`, `clock T`) and its
/// code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusalView {
    /// What it was about.
    pub about: String,
    /// The stable code.
    pub code: String,
}

/// One action of `next-releases`, by number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActionView {
    /// The clock was refused.
    Refused(RefusalView),
    /// An execution to stop.
    Abort {
        /// Its entry.
        entry: u64,
        /// `deadline` or `cancel`.
        cause: String,
    },
    /// A shared key to pause at its store.
    PauseStore {
        /// The key, by name.
        key: String,
        /// Until when.
        until: u64,
    },
    /// A permit to give back.
    Release {
        /// Its entry.
        entry: u64,
        /// Its key.
        key: String,
    },
    /// An entry the scheduler settled.
    Settled {
        /// Its entry.
        entry: u64,
        /// The reason's name (`cancelled`, `stopped`, ...).
        reason: String,
        /// For `stopped`, the position it was stopped after.
        after: Option<u32>,
        /// The sentence for its response.
        message: String,
    },
    /// A permit to ask for.
    Acquire {
        /// Its entry.
        entry: u64,
        /// Its key.
        key: String,
        /// The key's limit; none is unbounded.
        limit: Option<u32>,
        /// The key's delay.
        delay_ms: u32,
    },
    /// An entry to start.
    Start(u64),
    /// A retired batch.
    Retired(u64),
}

impl ActionView {
    /// Where this kind of action stands in the order the WIT states.
    fn rank(&self) -> u8 {
        match self {
            Self::Refused(_) => 0,
            Self::Abort { .. } => 1,
            Self::PauseStore { .. } => 2,
            Self::Release { .. } => 3,
            Self::Settled { .. } => 4,
            Self::Acquire { .. } => 5,
            Self::Start(_) => 6,
            Self::Retired(_) => 7,
        }
    }

    /// The entry or batch number it is about, for the order within its kind.
    fn number(&self) -> u64 {
        match self {
            Self::Refused(_) | Self::PauseStore { .. } => 0,
            Self::Release { entry, .. }
            | Self::Abort { entry, .. }
            | Self::Settled { entry, .. }
            | Self::Acquire { entry, .. } => *entry,
            Self::Start(e) | Self::Retired(e) => *e,
        }
    }
}

/// What `next-releases` returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReleasesView {
    /// The actions, in the order the subject returned them.
    pub actions: Vec<ActionView>,
    /// When to call `next-releases` again.
    pub wake_at: Option<u64>,
}

/// A host of the component (or the engine itself) as the runner drives it. Errors are the
/// stable error codes. Every method maps onto one WIT function (`restart` onto two).
pub trait Subject {
    /// Resolves layers `(name, text)` and keeps the policy for the schedulers that follow.
    fn resolve(&mut self, layers: &[(String, String)]) -> Result<(), Vec<Diag>>;
    /// The kept policy's warnings.
    fn warnings(&mut self) -> Vec<Diag>;
    /// The kept policy's view of one tool, rendered with [`tool_line`].
    fn tool_line(&mut self, name: &str) -> String;
    /// Makes a fresh scheduler from the kept policy.
    fn new_scheduler(&mut self);
    /// `submit-batch` with the batch's time limits: `(batch, first entry, entry count)`.
    fn submit_batch(
        &mut self,
        calls: &[CallSpec],
        limits: LimitsSpec,
    ) -> Result<(u64, u64, u32), String>;
    /// `on-events` with the clock the events came at: the refused inputs, in order (a clock
    /// that went back first).
    fn on_events(&mut self, events: &[EventSpec], now: Option<u64>) -> Vec<RefusalView>;
    /// `on-ended` with the clock the ends came at: the refused ends, in order (a clock that
    /// went back first).
    fn on_ended(&mut self, ends: &[(u64, EndSpec)], now: Option<u64>) -> Vec<RefusalView>;
    /// `next-releases`.
    fn next_releases(&mut self, now: Option<u64>) -> ReleasesView;
    /// `label`.
    fn label(&mut self, entry: u64) -> Option<String>;
    /// `inspect`, rendered with [`inspect_line`]; `None` for a batch that is not live.
    fn inspect(&mut self, batch: u64) -> Option<Vec<String>>;
    /// `unfinished`, then `resume` into a fresh scheduler that replaces the old one, under the
    /// kept policy or, when `layers` are given, one resolved from them (which is then kept).
    /// Returns the unrestored calls as `CALL CODE`, or `resume`'s error code.
    fn restart(
        &mut self,
        interrupt: bool,
        layers: Option<&[(String, String)]>,
    ) -> Result<Vec<String>, String>;
    /// A fresh admission controller.
    fn admission(&mut self, max_concurrent: u32, allow_parallel: bool);
    /// `begin` with a class name (`call`, `request`, `control`, `reentrant`); the ticket.
    fn begin(&mut self, id: &str, class: &str, parent: Option<u64>) -> Result<u64, String>;
    /// `end` of a request.
    fn end_request(&mut self, ticket: u64) -> Result<(), String>;
    /// `abandon`.
    fn abandon(&mut self, ticket: u64) -> Result<(), String>;
    /// `shutdown`: (cancel, refused).
    fn shutdown(&mut self) -> (Vec<u64>, Vec<u64>);
    /// `next-admissions`.
    fn admissions(&mut self) -> Vec<u64>;
}

/// A number no scheduler or controller hands out: what unknown labels, batches and request ids
/// become, so that the subject itself reports them.
pub const UNKNOWN: u64 = u64::MAX;

/// The retry cap a key has when the config does not set one (`RETRIES_DEFAULT`).
pub const RETRIES_DEFAULT: u32 = 3;

/// The maximum wait a key has when the config does not set one (`MAX_WAIT_DEFAULT_MS`, 5
/// minutes).
pub const MAX_WAIT_DEFAULT_MS: u32 = 300_000;

/// A tool's key as [`tool_line`] renders it: name, limit, delay in milliseconds, retry cap,
/// maximum wait in milliseconds, scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyView<'a> {
    /// The key.
    pub key: &'a str,
    /// Its limit.
    pub limit: u32,
    /// Milliseconds between starts.
    pub delay_ms: u32,
    /// Rate windows as `(count, per_ms, burst)`, ascending.
    pub rates: &'a [(u32, u32, u32)],
    /// Starts the rate windows let through at once.
    pub burst: u32,
    /// Units of the rate one call of the tool costs.
    pub weight: u32,
    /// The floor of an adaptive limit (`limit` is then its ceiling).
    pub adapt_min: Option<u32>,
    /// Rate-limit retries per entry.
    pub retries: u32,
    /// The longest rate-limit wait, in milliseconds.
    pub max_wait_ms: u32,
    /// Permits from a store shared across processes.
    pub shared: bool,
    /// A path key's path, as written.
    pub path: Option<&'a str>,
}

/// `NAME unbounded`, or `NAME` and each key of its set joined by ` + `: `KEY/LIMIT` (then ` delay=MS`, ` rate=N/MSms,...` with `:B` after
/// a window whose burst is its own, ` burst=B`,
/// ` weight=W`, ` adapt=MIN` for an adaptive limit whose ceiling is LIMIT,
/// ` retries=N` and ` max_wait=MS` when they are not the defaults, 0, none, 1, 3 and 300000,
/// and ` shared` for a shared key; a path key is `KEY path=PATH` with no limit); then
/// ` fan-out` and ` stop` when they apply.
pub fn tool_line(name: &str, keys: &[KeyView<'_>], fan_out: bool, stop: bool) -> String {
    let mut out = if keys.is_empty() {
        format!("{name} unbounded")
    } else {
        let mut s = name.to_owned();
        for (i, k) in keys.iter().enumerate() {
            s.push_str(if i == 0 { " " } else { " + " });
            key_text(&mut s, k);
        }
        s
    };
    if fan_out {
        out.push_str(" fan-out");
    }
    if stop {
        out.push_str(" stop");
    }
    out
}

/// One key of a tool line: `KEY/LIMIT` and its terms.
fn key_text(s: &mut String, k: &KeyView<'_>) {
    // A path key has no limit: `KEY path=PATH`.
    let _ = match k.path {
        Some(path) => write!(s, "{} path={path}", k.key),
        None => write!(s, "{}/{}", k.key, k.limit),
    };
    if k.delay_ms > 0 {
        let _ = write!(s, " delay={}", k.delay_ms);
    }
    for (i, (count, per_ms, burst)) in k.rates.iter().enumerate() {
        let _ = write!(
            s,
            "{}{count}/{per_ms}ms",
            if i == 0 { " rate=" } else { "," }
        );
        if *burst != k.burst {
            let _ = write!(s, ":{burst}");
        }
    }
    if k.burst != 1 {
        let _ = write!(s, " burst={}", k.burst);
    }
    if k.weight != 1 {
        let _ = write!(s, " weight={}", k.weight);
    }
    if let Some(min) = k.adapt_min {
        let _ = write!(s, " adapt={min}");
    }
    if k.retries != RETRIES_DEFAULT {
        let _ = write!(s, " retries={}", k.retries);
    }
    if k.max_wait_ms != MAX_WAIT_DEFAULT_MS {
        let _ = write!(s, " max_wait={}", k.max_wait_ms);
    }
    if k.shared {
        s.push_str(" shared");
    }
}

/// `LABEL REASON`, or `LABEL stopped AFTER`.
pub fn settle_line(label: &str, reason: &str, after: Option<u32>) -> String {
    match after {
        Some(after) => format!("{label} {reason} {after}"),
        None => format!("{label} {reason}"),
    }
}

/// Why an entry waits, as [`inspect_line`] takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitView<'a> {
    /// The batch barrier.
    BatchNotApproved,
    /// First in line, key full.
    KeyFull {
        /// The key.
        key: &'a str,
        /// Its limit.
        limit: u32,
        /// Labels running with it.
        running: &'a [String],
    },
    /// Behind an earlier entry, on a key they share.
    Behind {
        /// The earlier entry.
        label: &'a str,
        /// The key.
        key: &'a str,
    },
    /// First in line with room, the key paused until a time.
    KeyPaused {
        /// The key.
        key: &'a str,
        /// When the pause ends.
        until: u64,
    },
    /// First in line with room, the key's delay not yet passed.
    KeySpacing {
        /// The key.
        key: &'a str,
        /// When it may start.
        until: u64,
    },
    /// An unkeyed entry waiting to run again after a rate limit.
    RetryAt {
        /// When it runs again.
        until: u64,
    },
    /// Waiting for a permit of a shared key.
    PermitRequested(&'a str),
    /// Granted a permit of a shared key, waiting for earlier entries to start.
    PermitGranted(&'a str),
}

/// `LABEL STATE`, then ` waits batch-not-approved`, ` waits key-full KEY LIMIT R1,R2`,
/// ` waits behind LABEL on KEY`, ` waits key-paused KEY UNTIL`, ` waits key-spacing KEY UNTIL`,
/// ` waits retry-at UNTIL`, ` waits permit-requested KEY` or ` waits permit-granted KEY`. A
/// stopped entry's state is `stopped AFTER`.
pub fn inspect_line(
    label: &str,
    state: &str,
    after: Option<u32>,
    wait: Option<WaitView<'_>>,
) -> String {
    let mut out = settle_line(label, state, after);
    match wait {
        None => {}
        Some(WaitView::BatchNotApproved) => out.push_str(" waits batch-not-approved"),
        Some(WaitView::KeyFull {
            key,
            limit,
            running,
        }) => {
            let _ = write!(out, " waits key-full {key} {limit} {}", running.join(","));
        }
        Some(WaitView::Behind { label, key }) => {
            let _ = write!(out, " waits behind {label} on {key}");
        }
        Some(WaitView::KeyPaused { key, until }) => {
            let _ = write!(out, " waits key-paused {key} {until}");
        }
        Some(WaitView::KeySpacing { key, until }) => {
            let _ = write!(out, " waits key-spacing {key} {until}");
        }
        Some(WaitView::RetryAt { until }) => {
            let _ = write!(out, " waits retry-at {until}");
        }
        Some(WaitView::PermitRequested(key)) => {
            let _ = write!(out, " waits permit-requested {key}");
        }
        Some(WaitView::PermitGranted(key)) => {
            let _ = write!(out, " waits permit-granted {key}");
        }
    }
    out
}

/// Every `*.toml` case under `dir`, sorted by name.
pub fn case_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let read = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut out: Vec<PathBuf> = read
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    out.sort();
    Ok(out)
}

/// Expands files and directories into case files.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            out.extend(case_files(p)?);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Where each `[[layer]]`'s text starts in a case file's own text, as a one-based `(line,
/// column)` (the column counts characters), so that a host can cite the file's lines: layer
/// line `l` is file line `line + l - 1`. `None` for a layer whose text is not written verbatim
/// in the file (a basic string with escapes); no layers when `file` is not a case file.
pub fn layer_starts(file: &str) -> Vec<Option<(u32, u32)>> {
    #[derive(Deserialize)]
    struct Layers {
        #[serde(default)]
        layer: Vec<LayerText>,
    }
    #[derive(Deserialize)]
    struct LayerText {
        text: toml::Spanned<String>,
    }
    let Ok(parsed) = toml::from_str::<Layers>(file) else {
        return Vec::new();
    };
    let start = |text: &toml::Spanned<String>| {
        // The span covers the quotes; a newline right after `'''` or `"""` is not text.
        let quoted = text.span().start;
        let rest = file.get(quoted..)?;
        let multi_line = rest.starts_with("'''") || rest.starts_with("\"\"\"");
        let mut at = quoted + if multi_line { 3 } else { 1 };
        if multi_line {
            let after = file.get(at..)?;
            at += [("\r\n", 2), ("\n", 1)]
                .iter()
                .find(|(newline, _)| after.starts_with(newline))
                .map_or(0, |(_, len)| *len);
        }
        if !file.get(at..)?.starts_with(text.get_ref().as_str()) {
            return None;
        }
        let line_start = file[..at].rfind('\n').map_or(0, |i| i + 1);
        let line = u32::try_from(file[..at].matches('\n').count() + 1).ok()?;
        let column = u32::try_from(file[line_start..at].chars().count() + 1).ok()?;
        Some((line, column))
    };
    parsed.layer.iter().map(|l| start(&l.text)).collect()
}

/// The result of running many cases.
#[derive(Debug, Default)]
pub struct Summary {
    /// Cases that passed.
    pub passed: usize,
    /// `(file, why)` for each case that failed.
    pub failed: Vec<(PathBuf, String)>,
}

impl Summary {
    /// `N passed, M failed`.
    pub fn line(&self) -> String {
        format!("{} passed, {} failed", self.passed, self.failed.len())
    }
}

/// Runs every case with a fresh subject each.
pub fn run_all<S: Subject>(paths: &[PathBuf], mut make: impl FnMut() -> S) -> Summary {
    let mut summary = Summary::default();
    for path in paths {
        let mut subject = make();
        match run_file(path, &mut subject) {
            Ok(()) => summary.passed += 1,
            Err(why) => summary.failed.push((path.clone(), why)),
        }
    }
    summary
}

/// Reads and runs one case file.
pub fn run_file(path: &Path, subject: &mut impl Subject) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let case: Case = toml::from_str(&text).map_err(|e| format!("not a case file: {e}"))?;
    run_case(&case, subject)
}

/// Parses a batch's call strings.
pub fn parse_calls(batch: &BatchSpec) -> Result<Vec<CallSpec>, String> {
    batch
        .calls
        .iter()
        .map(|c| {
            // Everything after the tool is the arguments' JSON text, given as written.
            let word = |s: &str| -> (String, String) {
                let s = s.trim();
                let (w, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
                (w.to_owned(), rest.trim().to_owned())
            };
            let (id, rest) = word(c);
            let (tool, arguments) = word(&rest);
            if id.is_empty() || tool.is_empty() {
                return Err(format!(
                    "bad call {c:?}: write `ID TOOL`, `ID TOOL*N` or `ID TOOL {{JSON}}`"
                ));
            }
            let arguments = (!arguments.is_empty()).then_some(arguments);
            let tool = tool.as_str();
            let (tool, operations) = match tool.split_once('*') {
                Some((tool, n)) => {
                    let n = n
                        .parse()
                        .map_err(|_| format!("bad operation count in {c:?}"))?;
                    (tool, Some(n))
                }
                None => (tool, None),
            };
            Ok(CallSpec {
                id,
                tool: tool.to_owned(),
                operations,
                arguments,
            })
        })
        .collect()
}

/// Runs a parsed case.
pub fn run_case(case: &Case, subject: &mut impl Subject) -> Result<(), String> {
    let layers: Vec<(String, String)> = case
        .layer
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let name = l.name.clone().unwrap_or_else(|| format!("L{}", i + 1));
            (name, l.text.clone())
        })
        .collect();
    if let Some(spec) = &case.admission {
        let max = u32::try_from(spec.max_concurrent.max(0)).unwrap_or(u32::MAX);
        subject.admission(max, spec.allow_parallel);
        let mut tickets = Tickets::default();
        for (i, step) in case.step.iter().enumerate() {
            admission_step(subject, &mut tickets, step)
                .map_err(|e| format!("step {} `{}`: {e}", i + 1, step.event))?;
        }
        return Ok(());
    }
    match (subject.resolve(&layers), &case.diagnostics) {
        (Err(got), Some(want)) => {
            let got_lines: Vec<String> = got.iter().map(Diag::line).collect();
            if !lines_match(&got, want) {
                return Err(format!(
                    "diagnostics: want {want:?}, got {got_lines:?}\n{}",
                    rendered(&got)
                ));
            }
            let text = rendered(&got);
            // `rendered` is optional: compared in full when given (the project's own corpus
            // gives it everywhere, which a tidy check keeps).
            return match &case.rendered {
                None => Ok(()),
                Some(want) if want.trim_end_matches('\n') != text.trim_end_matches('\n') => {
                    Err(format!("rendered: want\n{want}\ngot\n{text}"))
                }
                Some(_) => Ok(()),
            };
        }
        (Ok(()), Some(want)) => {
            return Err(format!(
                "diagnostics: want {want:?}, but the config resolved"
            ));
        }
        (Err(got), None) => {
            return Err(format!("the config failed to resolve:\n{}", rendered(&got)));
        }
        (Ok(()), None) => {
            let got = subject.warnings();
            if !lines_match(&got, &case.warnings) {
                let lines: Vec<String> = got.iter().map(Diag::line).collect();
                return Err(format!(
                    "warnings: want {:?}, got {lines:?}\n{}",
                    case.warnings,
                    rendered(&got)
                ));
            }
            if let Some(want) = case.rendered.as_ref().filter(|_| !got.is_empty()) {
                let text = rendered(&got);
                if want.trim_end_matches('\n') != text.trim_end_matches('\n') {
                    return Err(format!("rendered: want\n{want}\ngot\n{text}"));
                }
            }
        }
    }
    for want in case.tools.iter().flatten() {
        let name = want.split_whitespace().next().unwrap_or_default();
        let got = subject.tool_line(name);
        if got != *want {
            return Err(format!("tool {name}: want {want:?}, got {got:?}"));
        }
    }
    subject.new_scheduler();
    let mut runner = Runner::default();
    for (i, step) in case.step.iter().enumerate() {
        runner
            .step(case, subject, step)
            .map_err(|e| format!("step {} `{}`: {e}", i + 1, step.event))?;
    }
    Ok(())
}

/// Diagnostics against a case's lines: `CODE` alone compares the code, a line with a space
/// the whole [`Diag::line`].
fn lines_match(got: &[Diag], want: &[String]) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(g, w)| {
            if w.contains(' ') {
                g.line() == *w
            } else {
                g.code == *w
            }
        })
}

/// Every diagnostic's rendering, joined by newlines: what `rendered` in a case compares.
pub fn rendered(diags: &[Diag]) -> String {
    diags
        .iter()
        .map(|d| d.rendered.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[derive(Default)]
struct Runner {
    /// File batch number to the scheduler's batch number.
    batches: HashMap<u32, u64>,
    /// Label to the entry number of its call's most recent submission.
    entries: HashMap<String, u64>,
    /// Entry number to label, for every submitted entry.
    labels: HashMap<u64, String>,
    /// Call id to the labels of its most recent submission.
    calls: HashMap<String, Vec<String>>,
}

fn layer_pairs(layers: &[LayerSpec]) -> Vec<(String, String)> {
    layers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let name = l.name.clone().unwrap_or_else(|| format!("L{}", i + 1));
            (name, l.text.clone())
        })
        .collect()
}

impl Runner {
    fn batch(&self, word: Option<&str>) -> Result<u64, String> {
        let n: u32 = word
            .and_then(|w| w.parse().ok())
            .ok_or("expected a batch number")?;
        Ok(self.batches.get(&n).copied().unwrap_or(UNKNOWN))
    }

    fn entry(&self, label: &str) -> u64 {
        self.entries.get(label).copied().unwrap_or(UNKNOWN)
    }

    fn label_of(&self, entry: u64) -> String {
        self.labels
            .get(&entry)
            .cloned()
            .unwrap_or_else(|| format!("#{entry}"))
    }

    fn step(&mut self, case: &Case, subject: &mut impl Subject, step: &Step) -> Result<(), String> {
        let mut words = step.event.split_whitespace();
        let verb = words.next().ok_or("empty step")?;
        let args: Vec<&str> = words.collect();
        let many = matches!(verb, "approve-many" | "end-many");
        let stray = [
            ("error", step.error.is_some() && many),
            ("errors", !step.errors.is_empty() && !many),
            ("layers", step.layers.is_some() && verb != "restart"),
            (
                "unrestored",
                !step.unrestored.is_empty() && verb != "restart",
            ),
            ("inspect", step.inspect.is_some() && verb != "inspect"),
            (
                "admit, cancel, refused or drain",
                !step.admit.is_empty()
                    || !step.cancel.is_empty()
                    || !step.refused.is_empty()
                    || step.drain.is_some(),
            ),
        ];
        if let Some((field, _)) = stray.iter().find(|(_, bad)| *bad) {
            return Err(format!("`{field}` does not apply to `{verb}`"));
        }
        let mut out = StepOutput::default();
        let mut refused: Vec<String> = Vec::new();
        let mut unrestored: Vec<String> = Vec::new();
        let mut single = true;
        match verb {
            "submit" => {
                let n: u32 = match args.first() {
                    None => 1,
                    Some(w) => w.parse().map_err(|_| "expected a batch number")?,
                };
                let spec = n
                    .checked_sub(1)
                    .and_then(|i| case.batch.get(i as usize))
                    .ok_or_else(|| format!("the case has no batch {n}"))?;
                let calls = parse_calls(spec)?;
                match subject.submit_batch(&calls, spec.limits()) {
                    Ok((batch, first, count)) => {
                        self.batches.insert(n, batch);
                        let mut e = first;
                        for c in &calls {
                            let labels: Vec<String> = match c.operations {
                                None => vec![c.id.clone()],
                                Some(k) => (0..k).map(|i| format!("{}#{i}", c.id)).collect(),
                            };
                            // A reused call id names only its newest entries.
                            for old in self.calls.remove(&c.id).unwrap_or_default() {
                                self.entries.remove(&old);
                            }
                            for label in &labels {
                                self.entries.insert(label.clone(), e);
                                self.labels.insert(e, label.clone());
                                e += 1;
                            }
                            self.calls.insert(c.id.clone(), labels);
                        }
                        if e != first + u64::from(count) {
                            return Err(format!(
                                "submit numbered {count} entries from {first}; the calls have {}",
                                e - first
                            ));
                        }
                    }
                    Err(code) => refused.push(code),
                }
                step_once(
                    step.at,
                    subject,
                    StepInputs::default(),
                    &mut out,
                    &mut refused,
                    false,
                )?;
            }
            "approve" | "reject" | "skip" | "fail" | "ask" | "answer" => {
                if args.is_empty() {
                    return Err("expected at least one entry".to_owned());
                }
                for label in &args {
                    let e = self.entry(label);
                    let mut inputs = StepInputs::default();
                    match verb {
                        "approve" => inputs.approve.push(e),
                        "reject" => inputs.settle.push((e, "rejected")),
                        "skip" => inputs.settle.push((e, "skipped")),
                        "fail" => inputs.settle.push((e, "failed")),
                        "ask" => inputs.ask.push(e),
                        _ => inputs.answer.push(e),
                    }
                    step_once(step.at, subject, inputs, &mut out, &mut refused, false)?;
                    if !refused.is_empty() {
                        break;
                    }
                }
            }
            "approve-many" => {
                single = false;
                let inputs = StepInputs {
                    approve: args.iter().map(|l| self.entry(l)).collect(),
                    ..StepInputs::default()
                };
                step_once(step.at, subject, inputs, &mut out, &mut refused, true)?;
            }
            "end-many" => {
                single = false;
                let mut inputs = StepInputs::default();
                let mut order = Vec::new();
                for arg in &args {
                    let Some((label, outcome)) = arg.split_once('=') else {
                        return Err(format!("expected LABEL=ok|failed, got {arg:?}"));
                    };
                    let ok = outcome_ok(outcome)?;
                    order.push(ok);
                    if ok {
                        inputs.ok.push(self.entry(label));
                    } else {
                        inputs.failed.push(self.entry(label));
                    }
                }
                // Positions in the step are ok-first; map them back to the written order.
                let ok_positions: Vec<usize> = (0..order.len()).filter(|&i| order[i]).collect();
                let failed_positions: Vec<usize> =
                    (0..order.len()).filter(|&i| !order[i]).collect();
                let n_ok = inputs.ok.len();
                let mut raw = Vec::new();
                step_once(step.at, subject, inputs, &mut out, &mut raw, true)?;
                for r in raw {
                    let (pos, code) = r.split_once(' ').unwrap_or(("0", &r));
                    let pos: usize = pos.parse().unwrap_or(0);
                    let written = if pos < n_ok {
                        ok_positions.get(pos)
                    } else {
                        failed_positions.get(pos - n_ok)
                    };
                    refused.push(format!("{} {code}", written.copied().unwrap_or(pos)));
                }
                refused.sort_by_key(|r| {
                    r.split_once(' ')
                        .and_then(|(p, _)| p.parse::<usize>().ok())
                        .unwrap_or(0)
                });
            }
            "end" | "decline" => {
                let (label, ok) = match (verb, args.as_slice()) {
                    ("end", [label]) | ("decline", [label]) => (*label, true),
                    ("end", [label, outcome]) => (*label, outcome_ok(outcome)?),
                    _ => return Err("expected `end LABEL ok|failed` or `decline LABEL`".to_owned()),
                };
                let e = self.entry(label);
                let inputs = StepInputs {
                    ok: if ok { vec![e] } else { Vec::new() },
                    failed: if ok { Vec::new() } else { vec![e] },
                    ..StepInputs::default()
                };
                step_once(step.at, subject, inputs, &mut out, &mut refused, false)?;
            }
            "now" => {
                let [t] = args.as_slice() else {
                    return Err("expected `now MILLISECONDS`".to_owned());
                };
                let inputs = StepInputs {
                    now: Some(t.parse().map_err(|_| format!("bad time {t:?}"))?),
                    ..StepInputs::default()
                };
                step_once(step.at, subject, inputs, &mut out, &mut refused, false)?;
            }
            "retry" => {
                let [label, until] = args.as_slice() else {
                    return Err("expected `retry LABEL UNTIL`".to_owned());
                };
                let until: u64 = until.parse().map_err(|_| format!("bad time {until:?}"))?;
                let inputs = StepInputs {
                    retry: vec![(self.entry(label), until)],
                    ..StepInputs::default()
                };
                step_once(step.at, subject, inputs, &mut out, &mut refused, false)?;
            }
            "pause" => {
                let [key, until] = args.as_slice() else {
                    return Err("expected `pause KEY UNTIL`".to_owned());
                };
                let until: u64 = until.parse().map_err(|_| format!("bad time {until:?}"))?;
                let inputs = StepInputs {
                    pause: vec![((*key).to_owned(), until)],
                    ..StepInputs::default()
                };
                step_once(step.at, subject, inputs, &mut out, &mut refused, false)?;
            }
            "grant" | "deny" => {
                if args.is_empty() {
                    return Err(format!("expected `{verb} LABEL...`"));
                }
                let entries: Vec<u64> = args.iter().map(|l| self.entry(l)).collect();
                let inputs = if verb == "grant" {
                    StepInputs {
                        granted: entries,
                        ..StepInputs::default()
                    }
                } else {
                    StepInputs {
                        denied: entries,
                        ..StepInputs::default()
                    }
                };
                step_once(step.at, subject, inputs, &mut out, &mut refused, false)?;
            }
            "cancel" => {
                let batch = self.batch(args.first().copied())?;
                let inputs = StepInputs {
                    cancel: vec![batch],
                    ..StepInputs::default()
                };
                step_once(step.at, subject, inputs, &mut out, &mut refused, false)?;
            }
            "restart" => {
                let interrupt = match args.as_slice() {
                    [] => false,
                    ["interrupt"] => true,
                    _ => return Err("expected `restart` or `restart interrupt`".to_owned()),
                };
                let layers = step.layers.as_deref().map(layer_pairs);
                match subject.restart(interrupt, layers.as_deref()) {
                    Ok(lines) => unrestored = lines,
                    Err(code) => refused.push(code),
                }
                step_once(
                    step.at,
                    subject,
                    StepInputs::default(),
                    &mut out,
                    &mut refused,
                    false,
                )?;
            }
            "inspect" => {
                let batch = self.batch(args.first().copied())?;
                // A batch that is not live needs only `error = "unknown-batch"`.
                match (subject.inspect(batch), step.inspect.as_ref()) {
                    (Some(got), None) => {
                        return Err(format!(
                            "inspect: the batch is live; list its entries in `inspect = [...]`: \
                             {got:?}"
                        ));
                    }
                    (Some(got), Some(want)) if got != *want => {
                        return Err(format!("inspect: want {want:?}, got {got:?}"));
                    }
                    (Some(_), Some(_)) => {}
                    (None, _) => refused.push("unknown-batch".to_owned()),
                }
                step_once(
                    step.at,
                    subject,
                    StepInputs::default(),
                    &mut out,
                    &mut refused,
                    false,
                )?;
            }
            other => return Err(format!("unknown event {other:?}")),
        }
        if single {
            check_error(&step.error, &refused)?;
        } else if refused != step.errors {
            return Err(format!("want errors {:?}, got {refused:?}", step.errors));
        }
        if unrestored != step.unrestored {
            return Err(format!(
                "want unrestored {:?}, got {unrestored:?}",
                step.unrestored
            ));
        }
        let start: Vec<String> = out.start.iter().map(|&e| self.label_of(e)).collect();
        let settle: Vec<String> = out
            .settle
            .iter()
            .map(|(e, reason, after)| settle_line(&self.label_of(*e), reason, *after))
            .collect();
        if start != step.start || settle != step.settle {
            return Err(format!(
                "want start {:?} settle {:?}, got start {start:?} settle {settle:?}",
                step.start, step.settle
            ));
        }
        let abort: Vec<String> = out
            .abort
            .iter()
            .map(|(e, cause)| format!("{} {cause}", self.label_of(*e)))
            .collect();
        if abort != step.abort {
            return Err(format!("want abort {:?}, got {abort:?}", step.abort));
        }
        if out.pause_store != step.pause_store {
            return Err(format!(
                "want pause_store {:?}, got {:?}",
                step.pause_store, out.pause_store
            ));
        }
        // A wanted `LABEL limit=N` also checks the limit the request carries.
        let acquire: Vec<String> = out
            .acquire
            .iter()
            .zip(step.acquire.iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(&(e, limit), want)| match want {
                Some(w) if w.contains(" limit=") => {
                    let limit = limit.map_or("none".to_owned(), |l| l.to_string());
                    format!("{} limit={limit}", self.label_of(e))
                }
                _ => self.label_of(e),
            })
            .collect();
        let release: Vec<String> = out.release.iter().map(|&e| self.label_of(e)).collect();
        if acquire != step.acquire || release != step.release {
            return Err(format!(
                "want acquire {:?} release {:?}, got acquire {acquire:?} release {release:?}",
                step.acquire, step.release
            ));
        }
        // The subject's own labels must agree with the runner's.
        for &e in &out.start {
            let got = subject.label(e);
            if got.as_deref() != Some(self.label_of(e).as_str()) {
                return Err(format!(
                    "label({e}): want {:?}, got {got:?}",
                    self.label_of(e)
                ));
            }
        }
        if let Some(want) = &step.wake_at {
            let want = match want {
                toml::Value::Integer(t) => u64::try_from(*t).ok(),
                toml::Value::String(s) if s == "none" => None,
                other => {
                    return Err(format!(
                        "wake_at: expected milliseconds or \"none\", got {other:?}"
                    ));
                }
            };
            if out.wake_at != want {
                return Err(format!("want wake_at {want:?}, got {:?}", out.wake_at));
            }
        }
        if let Some(want) = &step.retired {
            let got: Vec<u32> = out
                .retired
                .iter()
                .map(|b| {
                    self.batches
                        .iter()
                        .find(|(_, id)| *id == b)
                        .map_or(0, |(n, _)| *n)
                })
                .collect();
            if got != *want {
                return Err(format!("want retired {want:?}, got {got:?}"));
            }
        }
        Ok(())
    }
}

/// One round: the inputs through `on-events` and `on-ended` (a fixed order: approvals, answers
/// without running, grants, denials, questions asked and answered, ends ok, failed and
/// rate-limited, cancellations, pauses), then `next-releases`; its output gathered into `out`.
/// Refusals are rendered `CODE`, or `INDEX CODE` (the index within the input's own list; ends
/// ok and failed count as one list) when `indexed`, where each input crosses on its own so that
/// a refusal is known to be its. Checks that the actions come in the order the WIT states and
/// that every settlement has its sentence.
fn step_once(
    at: Option<u64>,
    subject: &mut impl Subject,
    mut inputs: StepInputs,
    out: &mut StepOutput,
    refused: &mut Vec<String>,
    indexed: bool,
) -> Result<(), String> {
    if inputs.now.is_none() {
        inputs.now = at;
    }
    enum One {
        Event(EventSpec),
        End(u64, EndSpec),
    }
    let mut all: Vec<(usize, One)> = Vec::new();
    let ev = |v: &[u64], f: fn(u64) -> EventSpec| -> Vec<(usize, One)> {
        v.iter()
            .enumerate()
            .map(|(i, &e)| (i, One::Event(f(e))))
            .collect()
    };
    all.extend(ev(&inputs.approve, EventSpec::Approve));
    all.extend(
        inputs
            .settle
            .iter()
            .enumerate()
            .map(|(i, &(e, how))| (i, One::Event(EventSpec::NotRun(e, how)))),
    );
    all.extend(ev(&inputs.granted, EventSpec::Granted));
    all.extend(ev(&inputs.denied, EventSpec::Denied));
    all.extend(ev(&inputs.ask, EventSpec::Ask));
    all.extend(ev(&inputs.answer, EventSpec::Answer));
    let n_ok = inputs.ok.len();
    all.extend(
        inputs
            .ok
            .iter()
            .enumerate()
            .map(|(i, &e)| (i, One::End(e, EndSpec::Ok))),
    );
    all.extend(
        inputs
            .failed
            .iter()
            .enumerate()
            .map(|(i, &e)| (i + n_ok, One::End(e, EndSpec::Failed))),
    );
    all.extend(
        inputs
            .retry
            .iter()
            .enumerate()
            .map(|(i, &(e, until))| (i, One::End(e, EndSpec::RateLimited(until)))),
    );
    all.extend(ev(&inputs.cancel, EventSpec::Cancel));
    all.extend(
        inputs
            .pause
            .iter()
            .enumerate()
            .map(|(i, (k, until))| (i, One::Event(EventSpec::Pause(k.clone(), *until)))),
    );
    // Consecutive inputs of one kind cross together, unless each must be told apart. The
    // step's clock crosses with the first of them (the inputs happened at `at`); a clock that
    // went back is refused there and again by `next-releases`, which reports it.
    let mut clock = inputs.now;
    let mut i = 0;
    while i < all.len() {
        let is_end = matches!(all[i].1, One::End(..));
        let mut j = i + 1;
        while !indexed && j < all.len() && matches!(all[j].1, One::End(..)) == is_end {
            j += 1;
        }
        let got = if is_end {
            let ends: Vec<(u64, EndSpec)> = all[i..j]
                .iter()
                .filter_map(|(_, o)| match o {
                    One::End(e, how) => Some((*e, *how)),
                    One::Event(_) => None,
                })
                .collect();
            subject.on_ended(&ends, clock.take())
        } else {
            let events: Vec<EventSpec> = all[i..j]
                .iter()
                .filter_map(|(_, o)| match o {
                    One::Event(e) => Some(e.clone()),
                    One::End(..) => None,
                })
                .collect();
            subject.on_events(&events, clock.take())
        };
        let got: Vec<RefusalView> = got
            .into_iter()
            .filter(|r| !r.about.starts_with("clock"))
            .collect();
        if got.len() > j - i {
            return Err(format!("{} refusals for {} inputs", got.len(), j - i));
        }
        for r in got {
            refused.push(if indexed {
                format!("{} {}", all[i].0, r.code)
            } else {
                r.code
            });
        }
        i = j;
    }
    let got = subject.next_releases(inputs.now);
    let mut last: Option<(u8, u64)> = None;
    for action in &got.actions {
        let at = (action.rank(), action.number());
        // Refusals and store pauses carry no number: only their kind's place is checked.
        if last.is_some_and(|l| l > at || (l == at && at.0 != 0 && at.0 != 2)) {
            return Err(format!(
                "next-releases: actions out of the WIT's order: {:?}",
                got.actions
            ));
        }
        last = Some(at);
        match action {
            ActionView::Refused(r) => refused.push(r.code.clone()),
            ActionView::Abort { entry, cause } => out.abort.push((*entry, cause.clone())),
            ActionView::PauseStore { key, until } => out.pause_store.push(format!("{key} {until}")),
            ActionView::Release { entry, .. } => out.release.push(*entry),
            ActionView::Settled {
                entry,
                reason,
                after,
                message,
            } => {
                if message.is_empty() {
                    return Err(format!("settled entry {entry} has no sentence"));
                }
                out.settle.push((*entry, reason.clone(), *after));
            }
            ActionView::Acquire { entry, limit, .. } => out.acquire.push((*entry, *limit)),
            ActionView::Start(e) => out.start.push(*e),
            ActionView::Retired(b) => out.retired.push(*b),
        }
    }
    out.wake_at = got.wake_at;
    Ok(())
}

fn outcome_ok(word: &str) -> Result<bool, String> {
    match word {
        "ok" => Ok(true),
        "failed" | "err" | "error" => Ok(false),
        other => Err(format!("bad outcome {other:?}")),
    }
}

/// A single-input event is refused with at most one code.
fn check_error(want: &Option<String>, got: &[String]) -> Result<(), String> {
    match (want, got) {
        (None, []) => Ok(()),
        (Some(w), [g]) if w == g => Ok(()),
        (Some(w), []) => Err(format!("want error {w}, but it succeeded")),
        (Some(w), g) => Err(format!("want error {w}, got {g:?}")),
        (None, g) => Err(format!("unexpected error {g:?}")),
    }
}

/// Request ids to their tickets, in `begin` order, and back.
#[derive(Default)]
struct Tickets {
    by_id: HashMap<String, Vec<u64>>,
    ids: HashMap<u64, String>,
}

impl Tickets {
    /// `ID` is the most recent ticket of `ID`, `ID@N` its N-th (from 1).
    fn ticket(&self, word: &str) -> u64 {
        let (id, nth) = match word.rsplit_once('@') {
            Some((id, n)) => (id, n.parse::<usize>().ok()),
            None => (word, None),
        };
        let Some(tickets) = self.by_id.get(id) else {
            return UNKNOWN;
        };
        let found = match nth {
            Some(n) => n.checked_sub(1).and_then(|i| tickets.get(i)),
            None => tickets.last(),
        };
        found.copied().unwrap_or(UNKNOWN)
    }

    fn began(&mut self, result: Result<u64, String>, id: &str) -> Result<(), String> {
        result.map(|t| {
            self.by_id.entry(id.to_owned()).or_default().push(t);
            self.ids.insert(t, id.to_owned());
        })
    }

    /// `ID` for an id's most recent ticket, `ID@N` for an earlier one.
    fn names(&self, tickets: &[u64]) -> Vec<String> {
        tickets
            .iter()
            .map(|t| {
                let Some(id) = self.ids.get(t) else {
                    return format!("ticket {t}");
                };
                let all = self.by_id.get(id).map(Vec::as_slice).unwrap_or_default();
                match all.iter().position(|x| x == t) {
                    Some(i) if i + 1 < all.len() => format!("{id}@{}", i + 1),
                    _ => id.clone(),
                }
            })
            .collect()
    }
}

fn admission_step(
    subject: &mut impl Subject,
    tickets: &mut Tickets,
    step: &Step,
) -> Result<(), String> {
    let words: Vec<&str> = step.event.split_whitespace().collect();
    let mut cancel = Vec::new();
    let mut refused = Vec::new();
    let result = match words.as_slice() {
        ["begin", id, class] => {
            let r = subject.begin(id, class_name(class), None);
            tickets.began(r, id)
        }
        ["begin", id, class, parent] => {
            let parent = tickets.ticket(parent);
            let r = subject.begin(id, class_name(class), Some(parent));
            tickets.began(r, id)
        }
        ["end", id] => subject.end_request(tickets.ticket(id)),
        ["abandon", id] => subject.abandon(tickets.ticket(id)),
        ["shutdown"] => {
            let (c, r) = subject.shutdown();
            (cancel, refused) = (tickets.names(&c), tickets.names(&r));
            Ok(())
        }
        _ => return Err("unknown admission event".to_owned()),
    };
    let refusal: Vec<String> = result.err().into_iter().collect();
    check_error(&step.error, &refusal)?;
    let admit = if step.drain == Some(false) {
        Vec::new()
    } else {
        tickets.names(&subject.admissions())
    };
    if admit != step.admit || cancel != step.cancel || refused != step.refused {
        return Err(format!(
            "want admit {:?} cancel {:?} refused {:?}, got admit {admit:?} cancel {cancel:?} \
             refused {refused:?}",
            step.admit, step.cancel, step.refused
        ));
    }
    Ok(())
}

/// The canonical class name for the spellings a case may use (`re-entrant`, `tool-call`, ...).
pub fn class_name(class: &str) -> &str {
    match class {
        "call" | "tool-call" | "tool_call" => "call",
        "request" | "read" => "request",
        "control" => "control",
        "reentrant" | "re-entrant" | "reentrant-call" | "re-entrant-call" | "reentrant_call" => {
            "reentrant"
        }
        other => other,
    }
}
