//! `host-harness`: the reference wasmtime host's command line.
//!
//! ```text
//! host-harness [--component PATH] cases PATH...        run case files or folders
//! host-harness [--component PATH] check LAYER.toml...  print diagnostics as rendered
//! host-harness [--component PATH] simulate [FILE]      timeline of a batch (default embedded)
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use host_harness::{ComponentSubject, Harness, default_component_path, simulate};
use turnstile_corpus as corpus;

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("host-harness: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<ExitCode, String> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut component = default_component_path();
    if args.first().is_some_and(|a| a == "--component") {
        if args.len() < 2 {
            return Err("--component needs a path".to_owned());
        }
        component = PathBuf::from(args.remove(1));
        args.remove(0);
    }
    let harness = Harness::load(&component).map_err(|e| {
        format!(
            "cannot load {}: {e:#} (build it with `cargo xtask build-guest`)",
            component.display()
        )
    })?;
    let instance = || {
        harness
            .instance()
            .map_err(|e| format!("instantiate: {e:#}"))
    };
    match args.first().map(String::as_str) {
        Some("cases") => {
            let paths: Vec<PathBuf> = args[1..].iter().map(PathBuf::from).collect();
            if paths.is_empty() {
                return Err("cases needs at least one file or folder".to_owned());
            }
            let files = corpus::expand(&paths)?;
            let mut summary = corpus::Summary::default();
            for file in &files {
                let mut subject = ComponentSubject::new(instance()?);
                match corpus::run_file(file, &mut subject) {
                    Ok(()) => summary.passed += 1,
                    Err(why) => {
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
        Some("check") => {
            let mut layers = Vec::new();
            for path in &args[1..] {
                let text =
                    std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
                layers.push((path.clone(), text));
            }
            let mut inst = instance()?;
            let ok = host_harness::check(&mut inst, &layers).map_err(|e| format!("trap: {e:#}"))?;
            Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Some("simulate") => {
            let text = match args.get(1) {
                Some(path) => std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?,
                None => simulate::DEFAULT_CASE.to_owned(),
            };
            let case: corpus::Case =
                toml::from_str(&text).map_err(|e| format!("not a case file: {e}"))?;
            let mut inst = instance()?;
            let timeline = simulate::simulate(&mut inst, &case)?;
            print!("{timeline}");
            Ok(ExitCode::SUCCESS)
        }
        _ => Err(
            "usage: host-harness [--component PATH] cases PATH... | check LAYER.toml... | simulate [FILE]"
                .to_owned(),
        ),
    }
}
