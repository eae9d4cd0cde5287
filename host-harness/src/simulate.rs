//! `simulate`: submits batches, approves every entry, and runs the executions on a virtual
//! clock (no sleeps), printing one line per event: what started, what ended, what the
//! scheduler settled and why, and why each waiting entry waits. The input is a case file (its
//! steps ignored) or layers and calls from the command line; [`HELP`] documents both.
//!
//! Nothing here prints a WIT value's `Debug`: settlements and waits are the component's own
//! sentences (settlements' `message` and `inspect`'s `why`), the same text every host shows.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::ops::Range;

use turnstile_corpus::{self as corpus, BatchSpec, CallSpec, Case, SimulateSpec};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use crate::{HostState, Instance, wit_config as wc, wit_scheduler as ws};

/// The embedded default: the RFD's renumber chain and three draft calls, all on key `rfd`.
pub const DEFAULT_CASE: &str = include_str!("../../tests/cases/sched-default-embedded.toml");

/// `host-harness simulate --help`: the options and the file format.
pub const HELP: &str = r#"usage: host-harness simulate [FILE] [--layer LAYER.toml]... [--calls CALLS]...
                             [--duration MS] [--duration LABEL=MS]... [--fail LABEL]...

Submits every batch at time 0, approves every entry, and runs each execution on a virtual
clock (nothing sleeps): one line per event, at its time in milliseconds. `start` shows the
tool and its key, `end` ok or failed, `settle` why the scheduler settled an entry without
running it (a fan-out call with on_error = "stop" stops the operations behind a failure), and
`wait` why an approved entry waits, whenever that changes.

Without FILE, --layer or --calls it runs the embedded default: the renumber chain and three
drafts, all on key `rfd`. The options add to FILE: --layer after its layers (so with higher
precedence), --calls after its batches, --duration and --fail to its [simulate] table.

options:
  --layer LAYER.toml   a config layer; repeat for more, lowest precedence first
  --calls CALLS        one batch: calls separated by commas, each `ID TOOL`, `ID TOOL*N` or
                       `ID TOOL {JSON}` as in a case file; repeat for more batches
                         --calls "r1 rfd_renumber, r2 rfd_renumber, d1 rfd_draft"
  --duration MS        how long every execution takes (default 10)
  --duration LABEL=MS  how long one entry's execution takes
  --fail LABEL         this entry's execution fails; repeat for more
  -h, --help           print this help

Labels: a plain call's entry is labelled by its ID (`r1`); a fan-out call `ID TOOL*N` (N at
least 1; the tool must fan out) has N entries, `ID#0` to `ID#N-1`. A call written
`ID TOOL {JSON}` passes its arguments (a JSON object) to `submit-batch`; a tool whose
concurrency key is a template (`key = "fs:{path}"`) makes the call's key from them. IDs are 1 to 256 bytes,
without `#`. A label that no entry has is an error.

FILE is TOML, in the format of the case files in tests/cases (tests/cases/README.md):

  [[layer]]                    # a config layer; repeat, lowest precedence first
  name = "plugin"              # optional
  text = '''
  [conversation.tools.fs_delete_file]
  concurrency = 1
  fan_out = { on_error = "stop" }
  '''

  [[batch]]                    # batches are submitted in file order
  calls = ["r1 rfd_renumber", "del fs_delete_file*3"]

  [simulate]                   # optional
  duration_ms = 10             # how long every execution takes (default 10)
  durations = { r1 = 25 }      # how long an entry's execution takes, by label
  fail = ["del#1"]             # entries whose execution fails, by label

A layer's text is the config: `[conversation.tools.NAME]` tables with `concurrency` (N, or
{ key, limit, delay, retries }) and `fan_out` (true, or { enabled, on_error }), as in the
root README's Config section; other tables and fields are ignored. Diagnostics cite FILE by
the path given and by its own line numbers (a layer whose text has escapes, so that it is
not written verbatim in the file, is cited as FILE[NAME] by its own lines). A case file's
other fields (description, diagnostics, rendered, tools, admission, [[step]]) are allowed and
ignored; any field outside the case format is an error.

exit status: 0 the timeline was printed; 1 FILE is not a case file, the layers have errors
(printed on stderr), a batch was refused, or a label names no entry; 2 a usage error, an
unreadable file, nothing to simulate, or no component
"#;

/// Why a simulation did not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The layers do not resolve: every diagnostic, rendered, joined by newlines.
    Config(String),
    /// The input is wrong otherwise: a refused batch, a label that names no entry.
    Input(String),
    /// The component trapped, or refused an input the harness made: a bug, here or there.
    Host(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(why) | Self::Input(why) | Self::Host(why) => f.write_str(why),
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

/// A case's layers under their own names (`L1`, `L2`, ... when unnamed), cited by their own
/// lines: for the embedded default, which has no file.
pub fn named_layers(case: &Case) -> Vec<(String, String)> {
    case.layer
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let name = l.name.clone().unwrap_or_else(|| format!("L{}", i + 1));
            (name, l.text.clone())
        })
        .collect()
}

/// `--calls CALLS`: one batch of calls separated by commas, each as a case file writes it. A
/// comma inside a call's JSON arguments (in brackets, braces or a string) does not separate.
pub fn split_calls(text: &str) -> Result<BatchSpec, String> {
    let mut calls = Vec::new();
    let (mut depth, mut in_string, mut escaped, mut start) = (0usize, false, false, 0);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '{' | '[' if !in_string => depth += 1,
            '}' | ']' if !in_string => depth = depth.saturating_sub(1),
            ',' if !in_string && depth == 0 => {
                calls.push(text[start..i].trim().to_owned());
                start = i + 1;
            }
            _ => {}
        }
    }
    calls.push(text[start..].trim().to_owned());
    if calls.iter().any(String::is_empty) {
        return Err(format!(
            "empty call in {text:?}: separate calls with one comma each"
        ));
    }
    let batch = BatchSpec {
        calls,
        execution_ms: None,
        abort_grace_ms: None,
    };
    calls_of(&batch)?;
    Ok(batch)
}

/// A batch's calls, parsed as the corpus parses them, with a fan-out of no operations refused
/// (`submit-batch` refuses it).
fn calls_of(batch: &BatchSpec) -> Result<Vec<CallSpec>, String> {
    let calls = corpus::parse_calls(batch)?;
    if let Some(i) = calls.iter().position(|c| c.operations == Some(0)) {
        let written = batch.calls.get(i).map_or("", String::as_str);
        return Err(format!(
            "`{written}`: a fan-out call has at least one operation (`ID TOOL*N`, N >= 1)"
        ));
    }
    Ok(calls)
}

/// Runs the simulation of `case`'s batches under `layers` (`(name, text)`, lowest precedence
/// first) and returns the timeline.
pub fn simulate(
    instance: &mut Instance,
    layers: &[(String, String)],
    case: &Case,
) -> Result<String, Error> {
    let policy = resolve(instance, layers)?;
    let store = &mut instance.store;
    let iface = instance.exports.turnstile_scheduler_scheduler().scheduler();
    let sched = iface.call_constructor(&mut *store, policy).map_err(trap)?;
    let mut sim = Sim {
        store,
        iface,
        sched,
        out: format!("{:>6}  {:<7} {:<10} detail\n", "t(ms)", "event", "entry"),
        now_ms: 0,
        entries: HashMap::new(),
        labels: Vec::new(),
    };
    let mut batches = Vec::new();
    let mut approve = Vec::new();
    for (n, batch) in case.batch.iter().enumerate() {
        let (number, entries) = sim.submit(n + 1, batch)?;
        batches.push(number);
        approve.extend(entries);
    }
    let default = SimulateSpec::default();
    let spec = case.simulate.as_ref().unwrap_or(&default);
    sim.check_labels(spec)?;
    sim.run(batches, approve, spec)?;
    sim.sched.resource_drop(&mut *sim.store).map_err(trap)?;
    policy.resource_drop(&mut *sim.store).map_err(trap)?;
    Ok(sim.out)
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

fn trap(e: wasmtime::Error) -> Error {
    Error::Host(format!("trap: {e:#}"))
}

struct Running {
    entry: u64,
    ends_at_ms: u64,
    seq: u64,
}

/// One scheduler on a virtual clock, and the timeline so far.
struct Sim<'a> {
    store: &'a mut Store<HostState>,
    iface: ws::GuestScheduler<'a>,
    sched: ResourceAny,
    out: String,
    now_ms: u64,
    /// Entry number to (label, `TOOL key K` or `TOOL unkeyed`), read once after submit.
    entries: HashMap<u64, (String, String)>,
    /// Every label, in entry order.
    labels: Vec<String>,
}

impl Sim<'_> {
    fn event(&mut self, event: &str, entry: &str, detail: &str) {
        let _ = writeln!(
            self.out,
            "{:>6}  {event:<7} {entry:<10} {detail}",
            self.now_ms
        );
    }

    fn label(&self, entry: u64) -> String {
        self.entries
            .get(&entry)
            .map_or_else(|| format!("#{entry}"), |(l, _)| l.clone())
    }

    /// Submits the file's `n`-th batch; its number and entries.
    fn submit(&mut self, n: usize, batch: &BatchSpec) -> Result<(u64, Range<u64>), Error> {
        let calls = calls_of(batch).map_err(|e| Error::Input(format!("batch {n}: {e}")))?;
        let wit_calls = crate::subject::wit_calls(&calls)
            .map_err(|_| Error::Input(format!("batch {n}: a call id or tool has a newline")))?;
        let submitted = self
            .iface
            .call_submit_batch(
                &mut *self.store,
                self.sched,
                &wit_calls,
                crate::subject::wit_limits(batch.limits()),
            )
            .map_err(trap)?
            .map_err(|e| Error::Input(format!("batch {n}: {}", e.message)))?;
        let detail = format!("{} calls", calls.len());
        self.event("submit", &format!("batch {}", submitted.batch), &detail);
        let statuses = crate::inspect(&self.iface, &mut *self.store, self.sched, submitted.batch)
            .map_err(trap)?
            .unwrap_or_default();
        for st in statuses {
            let key = match st.keys.as_slice() {
                [] => format!("{} unkeyed", st.tool),
                [k] => format!("{} key {k}", st.tool),
                keys => format!("{} keys {}", st.tool, keys.join(" + ")),
            };
            self.labels.push(st.label.clone());
            self.entries.insert(st.entry, (st.label, key));
        }
        let first = submitted.first;
        Ok((submitted.batch, first..first + u64::from(submitted.count)))
    }

    /// Every label `fail` and `durations` name is an entry's.
    fn check_labels(&self, spec: &SimulateSpec) -> Result<(), Error> {
        let mut durations: Vec<&String> = spec.durations.keys().collect();
        durations.sort();
        let named = spec.fail.iter().map(|l| ("fail", l));
        let named = named.chain(durations.into_iter().map(|l| ("durations", l)));
        for (field, label) in named {
            if !self.labels.contains(label) {
                let shown: Vec<&str> = self.labels.iter().take(20).map(String::as_str).collect();
                let more = if self.labels.len() > 20 { ", ..." } else { "" };
                return Err(Error::Input(format!(
                    "{field}: no entry is labelled {label}; the labels are {}{more}",
                    shown.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Approves `approve` at time 0, then ends executions as their durations pass and wakes
    /// the scheduler when it asked to be, until nothing runs.
    fn run(
        &mut self,
        mut batches: Vec<u64>,
        approve: Vec<u64>,
        spec: &SimulateSpec,
    ) -> Result<(), Error> {
        let duration_ms = |label: &str| {
            spec.durations
                .get(label)
                .copied()
                .or(spec.duration_ms)
                .unwrap_or(10)
        };
        let mut running: Vec<Running> = Vec::new();
        let mut seq = 0u64;
        let mut shown: HashMap<String, String> = HashMap::new();
        // The host loop: inputs in, then one `match` over the round's actions.
        let mut events: Vec<ws::Event> = vec![ws::Event::Approve(approve)];
        let mut ends = ws::Ends {
            ok: Vec::new(),
            failed: Vec::new(),
            rate_limited: Vec::new(),
        };
        loop {
            let mut refused = self
                .iface
                .call_on_events(&mut *self.store, self.sched, &events, Some(self.now_ms))
                .map_err(trap)?;
            refused.extend(
                self.iface
                    .call_on_ended(&mut *self.store, self.sched, &ends, Some(self.now_ms))
                    .map_err(trap)?,
            );
            events.clear();
            ends.ok.clear();
            ends.failed.clear();
            let round =
                crate::next_releases(&self.iface, &mut *self.store, self.sched, Some(self.now_ms))
                    .map_err(trap)?;
            // The round's lists, in the order the fields say to perform them.
            refused.extend(round.refused);
            for a in round.abort {
                // A simulated execution stops at once when told to: it ends failed now.
                running.retain(|r| r.entry != a.entry);
                ends.failed.push(a.entry);
                let label = self.label(a.entry);
                let cause = match a.cause {
                    ws::AbortCause::Deadline => "its execution limit passed; it ended failed",
                    ws::AbortCause::Cancel => "its batch was cancelled; it ended failed",
                };
                self.event("abort", &label, cause);
            }
            // One process here: a store pause or a permit back (`pause-store`, `release`) is
            // nothing to do.
            for st in round.settled {
                let label = self.label(st.entry);
                self.event("settle", &label, &st.message);
            }
            // One process here, so the store grants each permit at once.
            for p in round.acquire {
                let label = self.label(p.entry);
                self.event("permit", &label, "asked the shared store; granted at once");
                events.push(ws::Event::Granted(p.entry));
            }
            for e in round.start {
                let label = self.label(e);
                let key = self.entries.get(&e).map_or("", |(_, k)| k.as_str());
                let key = key.to_owned();
                self.event("start", &label, &key);
                running.push(Running {
                    entry: e,
                    ends_at_ms: self.now_ms + duration_ms(&label),
                    seq,
                });
                seq += 1;
            }
            batches.retain(|x| !round.retired.contains(x));
            if let Some(r) = refused.first() {
                let why = format!("the scheduler refused an input: {}", r.message);
                return Err(Error::Host(why));
            }
            self.show_waits(&batches, &mut shown)?;
            if !events.is_empty() || !ends.ok.is_empty() || !ends.failed.is_empty() {
                continue;
            }
            let next = running
                .iter()
                .enumerate()
                .min_by_key(|(_, r)| (r.ends_at_ms, r.seq))
                .map(|(i, r)| (i, r.ends_at_ms));
            // Something waits on time (a key's delay) and nothing ends before it: wake then.
            if let Some(wake) = round
                .wake_at
                .filter(|&w| next.is_none_or(|(_, end)| w < end))
            {
                self.now_ms = wake.max(self.now_ms);
                continue;
            }
            let Some((next, _)) = next else {
                break;
            };
            let done = running.swap_remove(next);
            self.now_ms = done.ends_at_ms;
            let label = self.label(done.entry);
            let failed = spec.fail.contains(&label);
            if failed {
                ends.failed.push(done.entry);
            } else {
                ends.ok.push(done.entry);
            }
            self.event("end", &label, if failed { "failed" } else { "ok" });
        }
        self.event("done", "", "every entry ended or settled");
        Ok(())
    }

    /// A `wait` line for each waiting entry of the live batches whose reason changed.
    fn show_waits(
        &mut self,
        batches: &[u64],
        shown: &mut HashMap<String, String>,
    ) -> Result<(), Error> {
        for &b in batches {
            let statuses = crate::inspect(&self.iface, &mut *self.store, self.sched, b)
                .map_err(trap)?
                .unwrap_or_default();
            for st in &statuses {
                let Some(why) = st.why.as_deref() else {
                    continue;
                };
                let why = why.strip_prefix("waiting: ").unwrap_or(why);
                if shown.get(&st.label).is_some_and(|w| w == why) {
                    continue;
                }
                shown.insert(st.label.clone(), why.to_owned());
                self.event("wait", &st.label, why);
            }
        }
        Ok(())
    }
}
