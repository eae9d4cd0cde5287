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
    /// When present, resolving must succeed and each tool must render like this.
    pub tools: Option<Vec<String>>,
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
    /// The error code the event must fail with; nothing may change.
    pub error: Option<String>,
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

/// A host of the component (or the engine itself) as the runner drives it. Errors are the
/// stable error codes. Every method maps onto one WIT function or a short sequence of them.
pub trait Subject {
    /// Resolves layers `(name, text)` and keeps the policy for the schedulers that follow.
    fn resolve(&mut self, layers: &[(String, String)]) -> Result<(), Vec<Diag>>;
    /// The kept policy's view of one tool, rendered with [`tool_line`].
    fn tool_line(&mut self, name: &str) -> String;
    /// Makes a fresh scheduler from the kept policy.
    fn new_scheduler(&mut self);
    /// Submits a batch; returns its id.
    fn submit(&mut self, calls: &[CallSpec]) -> Result<u32, String>;
    /// `approve`, `reject`, `skip`, `fail`, `ask`, `answer`: one entry.
    fn entry_event(&mut self, verb: &str, label: &str) -> Result<(), String>;
    /// `on-ended`.
    fn end(&mut self, label: &str, ok: bool) -> Result<(), String>;
    /// `approve-many`.
    fn approve_many(&mut self, labels: &[&str]) -> Result<(), String>;
    /// `on-ended-many`, `(label, ok)` in order.
    fn end_many(&mut self, ends: &[(&str, bool)]) -> Result<(), String>;
    /// `cancel-batch`.
    fn cancel(&mut self, batch: u32) -> Result<(), String>;
    /// `next-releases`, rendered: labels to start, and [`settle_line`]s.
    fn releases(&mut self) -> (Vec<String>, Vec<String>);
    /// `inspect`, rendered with [`inspect_line`].
    fn inspect(&mut self, batch: u32) -> Result<Vec<String>, String>;
    /// Restart: a fresh scheduler, `unfinished` of the old one submitted again. Returns
    /// `(old batch id, new batch id)` for each batch submitted again.
    fn restart(&mut self) -> Vec<(u32, u32)>;
    /// A fresh admission controller.
    fn admission(&mut self, max_concurrent: u32, allow_parallel: bool);
    /// `begin` with a class name (`call`, `request`, `control`, `reentrant`).
    fn begin(&mut self, id: &str, class: &str, parent: Option<&str>) -> Result<(), String>;
    /// `end` of a request.
    fn end_request(&mut self, id: &str) -> Result<(), String>;
    /// `abandon`.
    fn abandon(&mut self, id: &str) -> Result<(), String>;
    /// `shutdown`: (cancel, refused).
    fn shutdown(&mut self) -> (Vec<String>, Vec<String>);
    /// `next-admissions`.
    fn admissions(&mut self) -> Vec<String>;
}

/// `NAME unbounded` or `NAME KEY/LIMIT`, then ` fan-out` and ` stop` when they apply.
pub fn tool_line(name: &str, key: Option<(&str, u32)>, fan_out: bool, stop: bool) -> String {
    let mut out = match key {
        Some((key, limit)) => format!("{name} {key}/{limit}"),
        None => format!("{name} unbounded"),
    };
    if fan_out {
        out.push_str(" fan-out");
    }
    if stop {
        out.push_str(" stop");
    }
    out
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
    /// Behind an earlier entry.
    Behind(&'a str),
}

/// `LABEL STATE`, then ` waits batch-not-approved`, ` waits key-full KEY LIMIT R1,R2` or
/// ` waits behind LABEL`. A stopped entry's state is `stopped AFTER`.
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
        Some(WaitView::Behind(label)) => {
            let _ = write!(out, " waits behind {label}");
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
            let mut words = c.split_whitespace();
            let (Some(id), Some(tool), None) = (words.next(), words.next(), words.next()) else {
                return Err(format!("bad call {c:?}: write `ID TOOL` or `ID TOOL*N`"));
            };
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
                id: id.to_owned(),
                tool: tool.to_owned(),
                operations,
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
        for (i, step) in case.step.iter().enumerate() {
            admission_step(subject, step)
                .map_err(|e| format!("step {} `{}`: {e}", i + 1, step.event))?;
        }
        return Ok(());
    }
    match (subject.resolve(&layers), &case.diagnostics) {
        (Err(got), Some(want)) => {
            let got_lines: Vec<String> = got.iter().map(Diag::line).collect();
            let matches = got.len() == want.len()
                && got.iter().zip(want).all(|(g, w)| {
                    if w.contains(' ') {
                        g.line() == *w
                    } else {
                        g.code == *w
                    }
                });
            let rendered_ok = got.iter().all(|d| d.rendered.contains(&d.code));
            if !matches || !rendered_ok {
                return Err(format!(
                    "diagnostics: want {want:?}, got {got_lines:?}\n{}",
                    rendered(&got)
                ));
            }
            return Ok(());
        }
        (Ok(()), Some(want)) => {
            return Err(format!(
                "diagnostics: want {want:?}, but the config resolved"
            ));
        }
        (Err(got), None) => {
            return Err(format!("the config failed to resolve:\n{}", rendered(&got)));
        }
        (Ok(()), None) => {}
    }
    for want in case.tools.iter().flatten() {
        let name = want.split_whitespace().next().unwrap_or_default();
        let got = subject.tool_line(name);
        if got != *want {
            return Err(format!("tool {name}: want {want:?}, got {got:?}"));
        }
    }
    subject.new_scheduler();
    let mut runner = Runner {
        batches: HashMap::new(),
    };
    for (i, step) in case.step.iter().enumerate() {
        runner
            .step(case, subject, step)
            .map_err(|e| format!("step {} `{}`: {e}", i + 1, step.event))?;
    }
    Ok(())
}

fn rendered(diags: &[Diag]) -> String {
    diags
        .iter()
        .map(|d| d.rendered.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

struct Runner {
    /// File batch number to the current scheduler's batch id.
    batches: HashMap<u32, u32>,
}

impl Runner {
    fn batch(&self, word: Option<&str>) -> Result<u32, String> {
        let n: u32 = word
            .and_then(|w| w.parse().ok())
            .ok_or("expected a batch number")?;
        // A batch never submitted, or with nothing left after a restart, has no id: pass one
        // no scheduler hands out, so that cases can check the unknown-batch error.
        Ok(self.batches.get(&n).copied().unwrap_or(u32::MAX))
    }

    fn step(&mut self, case: &Case, subject: &mut impl Subject, step: &Step) -> Result<(), String> {
        let mut words = step.event.split_whitespace();
        let verb = words.next().ok_or("empty step")?;
        let args: Vec<&str> = words.collect();
        let result: Result<(), String> = match verb {
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
                subject.submit(&calls).map(|id| {
                    self.batches.insert(n, id);
                })
            }
            "approve" | "reject" | "skip" | "fail" | "ask" | "answer" => {
                if args.is_empty() {
                    return Err("expected at least one entry".to_owned());
                }
                args.iter()
                    .try_for_each(|label| subject.entry_event(verb, label))
            }
            "approve-many" => subject.approve_many(&args),
            "end-many" => {
                let mut ends = Vec::with_capacity(args.len());
                for arg in &args {
                    let Some((label, outcome)) = arg.split_once('=') else {
                        return Err(format!("expected LABEL=ok|failed, got {arg:?}"));
                    };
                    ends.push((label, outcome_ok(outcome)?));
                }
                subject.end_many(&ends)
            }
            "end" => match args.as_slice() {
                [label] => subject.end(label, true),
                [label, outcome] => subject.end(label, outcome_ok(outcome)?),
                _ => return Err("expected `end LABEL ok|failed`".to_owned()),
            },
            // A declined question ends the execution with an ok result (JP's wording).
            "decline" => match args.as_slice() {
                [label] => subject.end(label, true),
                _ => return Err("expected `decline LABEL`".to_owned()),
            },
            // Result review and the host's confirmation that cancelled executions ended have no
            // scheduling effect: the step only checks that nothing is released.
            "review" | "ended-all" => Ok(()),
            "cancel" => {
                let batch = self.batch(args.first().copied())?;
                subject.cancel(batch)
            }
            "restart" => {
                let map = subject.restart();
                let old = std::mem::take(&mut self.batches);
                for (n, id) in old {
                    if let Some((_, new)) = map.iter().find(|(o, _)| *o == id) {
                        self.batches.insert(n, *new);
                    }
                }
                Ok(())
            }
            "inspect" => {
                let batch = self.batch(args.first().copied())?;
                let want = step
                    .inspect
                    .as_ref()
                    .ok_or("inspect needs `inspect = [...]`")?;
                match subject.inspect(batch) {
                    Ok(got) if got != *want => {
                        return Err(format!("inspect: want {want:?}, got {got:?}"));
                    }
                    other => other.map(|_| ()),
                }
            }
            other => return Err(format!("unknown event {other:?}")),
        };
        check_error(&step.error, result)?;
        let (start, settle) = subject.releases();
        if start != step.start || settle != step.settle {
            return Err(format!(
                "want start {:?} settle {:?}, got start {start:?} settle {settle:?}",
                step.start, step.settle
            ));
        }
        Ok(())
    }
}

fn outcome_ok(word: &str) -> Result<bool, String> {
    match word {
        "ok" => Ok(true),
        "failed" | "err" | "error" => Ok(false),
        other => Err(format!("bad outcome {other:?}")),
    }
}

fn check_error(want: &Option<String>, got: Result<(), String>) -> Result<(), String> {
    match (want, got) {
        (None, Ok(())) => Ok(()),
        (Some(w), Err(g)) if *w == g => Ok(()),
        (Some(w), Err(g)) => Err(format!("want error {w}, got error {g}")),
        (Some(w), Ok(())) => Err(format!("want error {w}, but it succeeded")),
        (None, Err(g)) => Err(format!("unexpected error {g}")),
    }
}

fn admission_step(subject: &mut impl Subject, step: &Step) -> Result<(), String> {
    let words: Vec<&str> = step.event.split_whitespace().collect();
    let mut cancel = Vec::new();
    let mut refused = Vec::new();
    let result = match words.as_slice() {
        ["begin", id, class] => subject.begin(id, class_name(class), None),
        ["begin", id, class, parent] => subject.begin(id, class_name(class), Some(parent)),
        ["end", id] => subject.end_request(id),
        ["abandon", id] => subject.abandon(id),
        ["shutdown"] => {
            (cancel, refused) = subject.shutdown();
            Ok(())
        }
        _ => return Err("unknown admission event".to_owned()),
    };
    check_error(&step.error, result)?;
    let admit = subject.admissions();
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
