//! `host-harness`: the reference wasmtime host's command line.
//!
//! ```text
//! host-harness [--component PATH] cases PATH...        run case files or folders
//! host-harness [--component PATH] check LAYER.toml...  print a config's tools or diagnostics
//! host-harness [--component PATH] simulate [FILE]      timeline of batches on a virtual clock
//! ```
//!
//! `host-harness --help` and each command's `--help` are the documentation (on stdout, exit
//! status 0); a usage mistake is reported on stderr with exit status 2. The arguments are
//! parsed here by hand, in one pass, before the component is compiled.

use std::path::PathBuf;
use std::process::ExitCode;

use host_harness::simulate::{self, Error as SimError};
use host_harness::{
    ComponentSource, ComponentSubject, Harness, Instance, wit_config, wit_simulate,
};
use turnstile_corpus::{self as corpus, Case};

const HELP: &str = "\
usage: host-harness [--component PATH] COMMAND [ARGS]...

The reference host of the Turnstile scheduler: runs its WebAssembly component in wasmtime.

commands:
  cases PATH...        run case files, or folders of them, through the component
  check LAYER.toml...  resolve config layers, lowest precedence first: print every tool's
                       policy, or every diagnostic
  simulate [FILE]      print the timeline of batches on a virtual clock (the embedded default
                       without FILE; `host-harness simulate --help` has the file format)
  help [COMMAND]       print this help, or a command's

options:
  --component PATH     run the component at PATH
  -h, --help           print help (after a command: that command's)

The component: --component PATH, else the file $TURNSTILE_WASM names, else the copy embedded
in this binary when it was built (from target/turnstile.wasm, which `cargo xtask build-guest`
writes), else that file itself.

exit status: 0 success; 1 a case failed, a config has errors, a simulation could not run;
2 a usage error, an unreadable file, or no component
";

const CASES_HELP: &str = "\
usage: host-harness cases PATH...

Runs case files (TOML), or every *.toml in a folder, through the component, each in a fresh
instance, and compares every step with the expectations written in the file. Prints FAIL and
the reason for each case that fails, then `N passed, M failed`. The format is documented in
tests/cases/README.md; the corpus is tests/cases. A case whose layers fail to resolve, and
that expects no diagnostics, has them cited by the case file's own path and lines.

exit status: 0 every case passed; 1 a case failed; 2 a usage error, an unreadable folder, or
no component
";

const CHECK_HELP: &str = "\
usage: host-harness check [--deny-warnings] LAYER.toml...

Resolves config layers through the component, lowest precedence first, as a host does: prints
each configured tool's policy (`NAME KEY/LIMIT` with ` delay=MS`, ` retries=N`, ` fan-out`,
` stop` when they apply, or `NAME unbounded`) and `ok: N tools configured`, or every
diagnostic rendered like rustc, citing each file by its path and lines, and `N error(s)`.
Warnings (a name a small edit away from one Turnstile reads, such as `concurency`) are
printed first either way, with `N warning(s)`.

  --deny-warnings      a warning fails the check too

exit status: 0 the config is valid; 1 it has errors (or warnings, with --deny-warnings); 2 a
usage error, an unreadable file, or no component
";

fn main() -> ExitCode {
    let args: Result<Vec<String>, _> = std::env::args_os()
        .skip(1)
        .map(std::ffi::OsString::into_string)
        .collect();
    let parsed = match args {
        Ok(args) => parse(args),
        Err(arg) => Err(Usage::new(
            None,
            format!("an argument is not UTF-8: {}", arg.to_string_lossy()),
        )),
    };
    let (component, command) = match parsed {
        Ok(Parsed::Help(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Run { component, command }) => (component, command),
        Err(usage) => {
            eprintln!("host-harness: {}", usage.message);
            eprintln!("{}", usage.usage_line());
            eprintln!(
                "(`host-harness {}--help` says more)",
                usage.command_prefix()
            );
            return ExitCode::from(2);
        }
    };
    match run(component, command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("host-harness: {e}");
            ExitCode::from(2)
        }
    }
}

/// What the command line asks for.
enum Parsed {
    /// Print this help and exit 0.
    Help(&'static str),
    /// Run a command with the component from `--component`, else the default.
    Run {
        component: Option<PathBuf>,
        command: Command,
    },
}

enum Command {
    Cases(Vec<PathBuf>),
    /// Layer paths, and whether a warning fails the check.
    Check(Vec<String>, bool),
    Simulate(SimulateArgs),
    /// `simulate --help`: the component's text.
    SimulateHelp,
}

/// `simulate`'s arguments, checked but not yet read.
#[derive(Default)]
struct SimulateArgs {
    file: Option<String>,
    layers: Vec<String>,
    /// `--calls` texts, checked by the component.
    calls: Vec<String>,
    /// `--duration MS` and `--duration LABEL=MS` values, in order, read by the component.
    durations: Vec<String>,
    fail: Vec<String>,
}

/// A usage mistake: stderr, exit status 2.
struct Usage {
    command: Option<&'static str>,
    message: String,
}

impl Usage {
    fn new(command: Option<&'static str>, message: String) -> Self {
        Self { command, message }
    }

    fn usage_line(&self) -> &'static str {
        help_of(self.command).lines().next().unwrap_or_default()
    }

    fn command_prefix(&self) -> String {
        self.command
            .filter(|c| *c != "help")
            .map(|c| format!("{c} "))
            .unwrap_or_default()
    }
}

const COMMANDS: [&str; 4] = ["cases", "check", "simulate", "help"];

fn help_of(command: Option<&str>) -> &'static str {
    match command {
        Some("cases") => CASES_HELP,
        Some("check") => CHECK_HELP,
        // The component has the full text (`simulate --help` asks it); this is its usage.
        Some("simulate") => SIMULATE_USAGE,
        _ => HELP,
    }
}

/// One pass over the arguments: `--component` anywhere, `-h`/`--help` anywhere (help wins
/// over everything but a mistake written before it), `--` ends the options, `--flag=value`
/// and `--flag value` alike.
fn parse(args: Vec<String>) -> Result<Parsed, Usage> {
    let mut command: Option<&'static str> = None;
    let mut component = None;
    let mut help = false;
    let mut words: Vec<String> = Vec::new();
    let mut sim = SimulateArgs::default();
    let mut deny_warnings = false;
    let mut options_done = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if options_done || !arg.starts_with('-') || arg == "-" {
            match command {
                None => command = Some(command_named(&arg)?),
                Some(_) => words.push(arg),
            }
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value)),
            _ => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .map(str::to_owned)
                .or_else(|| args.next())
                .ok_or_else(|| Usage::new(command, format!("{flag} needs a value")))
        };
        match (flag.as_str(), command) {
            ("-h" | "--help", _) => help = true,
            ("--", _) => options_done = true,
            ("--component", _) => component = Some(PathBuf::from(value()?)),
            ("--layer", Some("simulate")) => sim.layers.push(value()?),
            ("--calls", Some("simulate")) => sim.calls.push(value()?),
            ("--duration", Some("simulate")) => sim.durations.push(value()?),
            ("--fail", Some("simulate")) => sim.fail.push(value()?),
            ("--deny-warnings", Some("check")) if inline.is_none() => deny_warnings = true,
            _ => return Err(Usage::new(command, format!("unknown option `{flag}`"))),
        }
    }
    if help {
        return match command {
            Some("help") => help_topic(&words, component),
            Some("simulate") => Ok(simulate_help(component)),
            other => Ok(Parsed::Help(help_of(other))),
        };
    }
    match command {
        None => Err(Usage::new(None, "no command given".to_owned())),
        Some("help") => help_topic(&words, component),
        Some(name) => Ok(Parsed::Run {
            component,
            command: command_with(name, words, sim, deny_warnings)?,
        }),
    }
}

/// The command `name` with its positional `words`, once each is known to be enough.
fn command_with(
    name: &'static str,
    mut words: Vec<String>,
    mut sim: SimulateArgs,
    deny_warnings: bool,
) -> Result<Command, Usage> {
    let usage = |message: &str| Err(Usage::new(Some(name), message.to_owned()));
    match name {
        "cases" if words.is_empty() => {
            usage("cases needs at least one PATH (a case file or a folder)")
        }
        "cases" => Ok(Command::Cases(
            words.into_iter().map(PathBuf::from).collect(),
        )),
        "check" if words.is_empty() => usage("check needs at least one LAYER.toml"),
        "check" => Ok(Command::Check(words, deny_warnings)),
        _ if words.len() > 1 => usage("simulate takes one FILE at most; add layers with --layer"),
        _ => {
            sim.file = words.pop();
            Ok(Command::Simulate(sim))
        }
    }
}

fn command_named(word: &str) -> Result<&'static str, Usage> {
    COMMANDS
        .into_iter()
        .find(|c| *c == word)
        .ok_or_else(|| Usage::new(None, format!("unknown command `{word}`")))
}

/// `help` and `help COMMAND`.
fn help_topic(words: &[String], component: Option<PathBuf>) -> Result<Parsed, Usage> {
    match words {
        [] => Ok(Parsed::Help(HELP)),
        [topic] => command_named(topic).map(|c| match c {
            "simulate" => simulate_help(component),
            c => Parsed::Help(help_of(Some(c))),
        }),
        _ => Err(Usage::new(None, "help takes one COMMAND".to_owned())),
    }
}

/// `simulate --help` is the component's text (the same in every CLI but for the name).
fn simulate_help(component: Option<PathBuf>) -> Parsed {
    Parsed::Run {
        component,
        command: Command::SimulateHelp,
    }
}

/// The first line of `simulate --help`, for a usage mistake's reminder.
const SIMULATE_USAGE: &str =
    "usage: host-harness simulate [FILE] [--layer LAYER.toml]... [--calls CALLS]...\n";

fn run(component: Option<PathBuf>, command: Command) -> Result<ExitCode, String> {
    match command {
        Command::Cases(paths) => cases(component, &paths),
        Command::Check(paths, deny_warnings) => check(component, &paths, deny_warnings),
        Command::Simulate(args) => simulate_command(component, args),
        Command::SimulateHelp => {
            let harness = load(component)?;
            let mut inst = instance(&harness)?;
            let help = simulate::help(&mut inst, "host-harness").map_err(|e| e.to_string())?;
            print!("{help}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Compiles the component (after the arguments and files were read: it takes a moment).
fn load(component: Option<PathBuf>) -> Result<Harness, String> {
    let named = component.is_some();
    let source = host_harness::component_source(component);
    Harness::load_source(&source).map_err(|e| match &source {
        ComponentSource::File(path) => {
            let from = if named { "" } else { " ($TURNSTILE_WASM)" };
            format!("cannot load the component {}{from}: {e:#}", path.display())
        }
        ComponentSource::Embedded(_) => format!("cannot load the embedded component: {e:#}"),
        ComponentSource::Workspace(path) => format!(
            "cannot load the component {}: {e:#}\nthis host-harness was built without one \
             embedded: run `cargo xtask build-guest` (the next build of host-harness embeds \
             it), or pass --component PATH",
            path.display()
        ),
    })
}

fn instance(harness: &Harness) -> Result<Instance, String> {
    harness
        .instance()
        .map_err(|e| format!("instantiate: {e:#}"))
}

fn cases(component: Option<PathBuf>, paths: &[PathBuf]) -> Result<ExitCode, String> {
    let files = corpus::expand(paths)?;
    let harness = load(component)?;
    let mut summary = corpus::Summary::default();
    for file in &files {
        let mut subject = ComponentSubject::new(instance(&harness)?);
        match corpus::run_file(file, &mut subject) {
            Ok(()) => summary.passed += 1,
            Err(why) => {
                let why = cited_by_file(&harness, file).unwrap_or(why);
                println!("FAIL {}: {why}", file.display());
                summary.failed.push((file.clone(), why));
            }
        }
    }
    println!("{}", summary.line());
    Ok(if summary.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// For a case that expects no diagnostics but whose layers fail to resolve: the diagnostics
/// again, cited by the case file's own path and lines (the corpus runner, shared by every host,
/// cites the layers' own).
fn cited_by_file(harness: &Harness, file: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    let case: Case = toml::from_str(&text).ok()?;
    if case.diagnostics.is_some() || case.admission.is_some() {
        return None;
    }
    let layers = simulate::file_layers(&file.display().to_string(), &text, &case);
    let mut inst = harness.instance().ok()?;
    match simulate::resolve(&mut inst, &layers) {
        Err(SimError::Config(rendered)) => {
            Some(format!("the config failed to resolve:\n{rendered}"))
        }
        _ => None,
    }
}

fn check(
    component: Option<PathBuf>,
    paths: &[String],
    deny_warnings: bool,
) -> Result<ExitCode, String> {
    let mut layers = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        layers.push((path.clone(), text));
    }
    let harness = load(component)?;
    let mut inst = instance(&harness)?;
    let ok = host_harness::check(&mut inst, &layers, deny_warnings)
        .map_err(|e| format!("trap: {e:#}"))?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn simulate_command(component: Option<PathBuf>, args: SimulateArgs) -> Result<ExitCode, String> {
    let file = match &args.file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            Some(wit_config::Layer {
                name: path.clone(),
                text,
            })
        }
        None => None,
    };
    let mut layers = Vec::new();
    for path in &args.layers {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        layers.push(wit_config::Layer {
            name: path.clone(),
            text,
        });
    }
    let input = wit_simulate::Input {
        file,
        layers,
        calls: args.calls,
        durations: args.durations,
        fail: args.fail,
    };
    let harness = load(component)?;
    let mut inst = instance(&harness)?;
    match simulate::run(&mut inst, &input) {
        Ok((warnings, timeline)) => {
            for warning in warnings {
                eprintln!("{warning}");
            }
            print!("{timeline}");
            Ok(ExitCode::SUCCESS)
        }
        Err(SimError::Config(rendered)) => {
            eprintln!("{rendered}");
            Ok(ExitCode::FAILURE)
        }
        Err(SimError::Refused(why, status)) => {
            eprintln!("host-harness: {why}");
            if status == 2 {
                eprintln!("(`host-harness simulate --help` says more)");
            }
            Ok(ExitCode::from(status))
        }
        Err(SimError::Host(why)) => Err(why),
    }
}
