//! `simulate`: submits batches, approves every entry, and runs the executions on a virtual
//! clock (no sleeps), printing one line per event: what started, what ended, what the
//! scheduler settled and why, and why each waiting entry waits. Every CLI (the Rust harness's,
//! the npm package's, the Python package's) calls this through the component, so all three
//! print the same timeline and the same errors for the same input; each parses its own flags.
//!
//! Settlements and waits are the scheduler's own sentences (a settlement's `message`,
//! `inspect`'s `why`), the same text every host shows.

mod calls;
mod case;
mod timeline;

use crate::config::{self, Layer};
use crate::diagnostic::Diagnostic;
use crate::limits::SIMULATE_ENTRIES_MAX;
use calls::Written;
use case::{Batch, Case};

/// The embedded default: the RFD's renumber chain and three draft calls, all on key `rfd`.
const DEFAULT_CASE: &str = include_str!("../../../tests/cases/sched-default-embedded.toml");

/// What to simulate: a case file, more layers, more batches, and durations and failures, as a
/// CLI's file and flags give them (every CLI passes them through as they are, so the rules and
/// the messages about them are these, the same everywhere).
#[derive(Clone, Debug, Default)]
pub struct Input {
    /// A case file: its name as the user gave it (diagnostics cite it) and its text.
    pub file: Option<(String, String)>,
    /// More layers (`--layer`), after the file's (so with higher precedence), each named by its
    /// path.
    pub layers: Vec<Layer>,
    /// More batches (`--calls`), after the file's: each one text of calls separated by commas.
    pub calls: Vec<String>,
    /// `--duration` values, in order: `MS` (every execution, instead of the file's
    /// `duration_ms` or 10) or `LABEL=MS` (one entry's; the last given wins).
    pub durations: Vec<String>,
    /// Entries whose execution fails (`--fail`), by label, added to the file's.
    pub fail: Vec<String>,
}

/// A simulation: the timeline, one line per event, and the config's warnings (a name a small
/// edit away from one Turnstile reads), which a CLI prints first.
#[derive(Clone, Debug)]
pub struct Simulated {
    /// One line per event, each ending in a newline.
    pub timeline: String,
    /// The layers' warnings, as `resolve` gives them.
    pub warnings: Vec<Diagnostic>,
}

/// Why a simulation did not run. Each is a sentence for people (`Display`), and says which
/// exit status a CLI gives it ([`Error::exit_status`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The file is not a case file: where and why.
    NotACase(String),
    /// The layers do not resolve.
    Config(Vec<Diagnostic>),
    /// A flag's value is wrong (`--calls`, `--duration`, a case file given as `--layer`); the
    /// message names the flag.
    Usage(String),
    /// Nothing to simulate: no batch.
    Nothing(String),
    /// A batch was refused, a label names no entry, or the scheduler refused an input.
    Input(String),
}

impl Error {
    /// A CLI's exit status for it: 2 for a usage mistake (`Usage`, `Nothing`), 1 otherwise.
    pub fn exit_status(&self) -> u8 {
        match self {
            Self::Usage(_) | Self::Nothing(_) => 2,
            Self::NotACase(_) | Self::Config(_) | Self::Input(_) => 1,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(diagnostics) => {
                let rendered: Vec<&str> = diagnostics.iter().map(|d| d.rendered.as_str()).collect();
                f.write_str(&rendered.join("\n"))
            }
            Self::NotACase(why) | Self::Usage(why) | Self::Nothing(why) | Self::Input(why) => {
                f.write_str(why)
            }
        }
    }
}

/// Runs the simulation.
pub fn run(input: &Input) -> Result<Simulated, Error> {
    let mut durations = Vec::with_capacity(input.durations.len());
    for text in &input.durations {
        durations.push(calls::read_duration(text).map_err(Error::Usage)?);
    }
    for layer in &input.layers {
        if case::looks_like_a_case(&layer.text) {
            return Err(Error::Usage(format!(
                "--layer {}: this is a case file (it has [[layer]] or [[batch]]), not config: \
                 give it as FILE",
                layer.name
            )));
        }
    }
    let mut batches_given = Vec::with_capacity(input.calls.len());
    for text in &input.calls {
        let calls =
            calls::split_calls(text).map_err(|why| Error::Usage(format!("--calls: {why}")))?;
        batches_given.push(Batch {
            calls,
            ..Batch::default()
        });
    }
    let (mut case, source) = match &input.file {
        Some((name, text)) => {
            let case = case::read(name, text, true)
                .map_err(|why| Error::NotACase(format!("{name}: not a case file: {why}")))?;
            (case, name.as_str())
        }
        None if input.layers.is_empty() && input.calls.is_empty() => {
            let case = case::read("default", DEFAULT_CASE, false)
                .map_err(|why| Error::NotACase(format!("the embedded default: {why}")))?;
            (case, "the input")
        }
        None if input.calls.is_empty() => {
            let why = "nothing to simulate: give the batches with --calls".to_owned();
            return Err(Error::Nothing(why));
        }
        None => (Case::default(), "the input"),
    };
    case.layers.extend(input.layers.iter().cloned());
    case.batches.extend(batches_given);
    if case.batches.is_empty() {
        return Err(Error::Nothing(format!(
            "{source} has no [[batch]]: nothing to simulate (add --calls)"
        )));
    }
    for (label, ms) in durations {
        match label {
            Some(label) => {
                case.timing.durations.insert(label, ms);
            }
            None => case.timing.duration_ms = Some(ms),
        }
    }
    case.timing.fail.extend(input.fail.iter().cloned());

    let policy = config::resolve(&case.layers).map_err(Error::Config)?;
    let warnings = policy.warnings().to_vec();
    let policy = policy.into_one_process();
    let entries: usize = case
        .batches
        .iter()
        .flat_map(|b| &b.calls)
        .map(|c| calls::read_call(c).map_or(1, |w| w.operations.map_or(1, |n| n as usize)))
        .sum();
    if entries > SIMULATE_ENTRIES_MAX {
        return Err(Error::Input(format!(
            "the batches have {entries} entries; simulate runs at most {SIMULATE_ENTRIES_MAX} \
             (a timeline is for reading, and it looks at every waiting entry at every step)"
        )));
    }
    let mut timeline = timeline::Timeline::new(policy);
    let mut batches = Vec::new();
    let mut approve = Vec::new();
    for (i, batch) in case.batches.iter().enumerate() {
        let n = i + 1;
        let calls: Vec<Written> = batch
            .calls
            .iter()
            .map(|c| calls::read_call(c))
            .collect::<Result<_, _>>()
            .map_err(|why| Error::Input(format!("batch {n}: {why}")))?;
        let (number, entries) = timeline.submit(n, batch, &calls)?;
        batches.push(number);
        approve.extend(entries);
    }
    timeline.check_labels(&case.timing)?;
    let timeline = timeline.run(batches, approve, &case.timing)?;
    Ok(Simulated { timeline, warnings })
}

/// `PROGRAM simulate --help`: the options and the file format.
pub fn help(program: &str) -> String {
    let usage = format!("usage: {program} simulate ");
    let indent = " ".repeat(usage.chars().count());
    format!(
        "{usage}[FILE] [--layer LAYER.toml]... [--calls CALLS]...\n{indent}[--duration MS] \
         [--duration LABEL=MS]... [--fail LABEL]...\n{HELP}"
    )
}

const HELP: &str = r#"
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
  --duration MS        how long every execution takes (default 10; whole milliseconds, at
                       most 9007199254740991)
  --duration LABEL=MS  how long one entry's execution takes
  --fail LABEL         this entry's execution fails; repeat for more
  -h, --help           print this help

Labels: a plain call's entry is labelled by its ID (`r1`); a fan-out call `ID TOOL*N` (N at
least 1; the tool must fan out) has N entries, `ID#0` to `ID#N-1`. A call written
`ID TOOL {JSON}` passes its arguments (a JSON object) to the scheduler; a tool whose
concurrency key is a template (`key = "fs:{path}"`) makes the call's key from them. IDs are 1
to 256 bytes, without `#`. A label that no entry has is an error. The config's warnings (a
name a small edit away from one Turnstile reads) are printed before the timeline.

FILE is a TOML case file:

  [[layer]]                    # a config layer; repeat, lowest precedence first
  name = "plugin"              # optional
  text = '''
  [conversation.tools.fs_delete_file]
  concurrency = 1
  fan_out = { on_error = "stop" }
  '''

  [[batch]]                    # batches are submitted in file order
  calls = ["r1 rfd_renumber", "del fs_delete_file*3"]
  execution_ms = 100           # optional: executions are aborted after this long
  abort_grace_ms = 20          # optional: an aborted one is given up after this long

  [simulate]                   # optional
  duration_ms = 10             # how long every execution takes (default 10)
  durations = { r1 = 25 }      # how long an entry's execution takes, by label
  fail = ["del#1"]             # entries whose execution fails, by label

A layer's text is the config: `[conversation.tools.NAME]` tables with `concurrency` (N; or
{ key, limit, delay, retries, max_wait, rate, shared }; or an array of such tables, a key
set) and `fan_out` (true, or { enabled, on_error }), as the package's README describes; other
tables and fields are ignored. Every execution here ends ok or failed: a rate limit (429) is
not simulated. One process runs: a shared key behaves as its store would for it alone (the
same limit, delay and rates). At most 2000 entries (a call, or one operation of a fan-out). Diagnostics cite FILE by the path given and by its own line numbers (a layer
whose text has escapes, so that it is not written verbatim in the file, is cited as
FILE[NAME] by its own lines). A case file may also hold description, diagnostics, rendered,
tools, warnings, admission and [[step]] (fields Turnstile's own tests use): they are allowed
and not read; any other field is an error.

exit status: 0 the timeline was printed; 1 FILE is not a case file, the layers have errors
(printed on stderr), a batch was refused, or a label names no entry; 2 a usage error, an
unreadable file, or nothing to simulate
"#;

#[cfg(test)]
mod tests;
