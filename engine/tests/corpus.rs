//! Runs every case in `tests/cases` natively against the engine: the same files, steps and
//! expected output the wasmtime harness (and every other host) checks through the component.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

#[cfg(not(target_arch = "wasm32"))]
use std::path::PathBuf;

use turnstile_corpus::{
    self as corpus, ActionView, CallSpec, Diag, EndSpec, EventSpec, LimitsSpec, RefusalView,
    ReleasesView, Subject, WaitView,
};
use turnstile_engine::admission::{Admission, AdmissionConfig, Class, Ticket};
use turnstile_engine::config::{self, Layer, Policy};
use turnstile_engine::schedule::{
    About, Action, BatchId, Call, End, EntryId, HostSettle, Input, Limits, Reason, Refusal,
    Releases, Scheduler, Started, State, Wait,
};

#[derive(Default)]
struct Native {
    policy: Policy,
    scheduler: Option<Scheduler>,
    admission: Option<Admission>,
}

impl Native {
    fn sched(&mut self) -> &mut Scheduler {
        self.scheduler
            .get_or_insert_with(|| Scheduler::new(Policy::default()))
    }

    fn adm(&mut self) -> &mut Admission {
        self.admission.get_or_insert_with(|| {
            Admission::new(AdmissionConfig {
                max_concurrent: 1,
                allow_parallel: false,
            })
        })
    }
}

fn after(reason: Reason) -> Option<u32> {
    match reason {
        Reason::Stopped { after } => Some(after),
        Reason::RateLimited { retries, .. } => Some(retries),
        _ => None,
    }
}

/// A reason's name, with the cause of an abort (`timed-out deadline`).
fn reason_text(reason: Reason) -> String {
    match reason {
        Reason::TimedOut { cause } => format!("timed-out {}", cause.name()),
        other => other.name().to_owned(),
    }
}

fn state_parts(state: State) -> (String, Option<u32>) {
    match state {
        State::Settled(reason) => (reason_text(reason), after(reason)),
        State::Aborted(cause) => (format!("aborted {}", cause.name()), None),
        other => (other.name().to_owned(), None),
    }
}

impl Subject for Native {
    fn resolve(&mut self, layers: &[(String, String)]) -> Result<(), Vec<Diag>> {
        let layers: Vec<Layer> = layers.iter().map(|(n, t)| Layer::new(n, t)).collect();
        match config::resolve(&layers) {
            Ok(policy) => {
                self.policy = policy;
                Ok(())
            }
            Err(diags) => Err(diags.into_iter().map(diag).collect()),
        }
    }

    fn warnings(&mut self) -> Vec<Diag> {
        self.policy.warnings().iter().cloned().map(diag).collect()
    }

    fn tool_line(&mut self, name: &str) -> String {
        match self.policy.tool(name) {
            Some(t) => {
                let rates: Vec<Vec<(u32, u32, u32)>> = t
                    .concurrency
                    .iter()
                    .map(|c| {
                        c.rates
                            .iter()
                            .map(|w| (w.count, w.per_ms, w.burst))
                            .collect()
                    })
                    .collect();
                let keys: Vec<corpus::KeyView<'_>> = t
                    .concurrency
                    .iter()
                    .zip(&rates)
                    .map(|(c, rates)| corpus::KeyView {
                        key: c.key.as_str(),
                        limit: c.limit.get(),
                        delay_ms: c.delay_ms,
                        rates,
                        burst: c.burst,
                        weight: c.weight,
                        adapt_min: c.adapt_min.map(std::num::NonZeroU32::get),
                        retries: c.retries,
                        max_wait_ms: c.max_wait_ms,
                        shared: c.shared,
                        path: c.path.as_ref().map(|p| p.as_str()),
                    })
                    .collect();
                corpus::tool_line(name, &keys, t.fan_out, t.on_error == config::OnError::Stop)
            }
            None => corpus::tool_line(name, &[], false, false),
        }
    }

    fn new_scheduler(&mut self) {
        self.scheduler = Some(Scheduler::new(self.policy.clone()));
    }

    fn submit_batch(
        &mut self,
        calls: &[CallSpec],
        limits: LimitsSpec,
    ) -> Result<(u64, u64, u32), String> {
        let calls: Vec<Call<'_>> = calls
            .iter()
            .map(|c| Call {
                id: &c.id,
                tool: &c.tool,
                operations: c.operations,
                arguments: c.arguments.as_deref(),
            })
            .collect();
        let limits = Limits {
            execution_ms: limits.execution_ms,
            abort_grace_ms: limits.abort_grace_ms,
        };
        self.sched()
            .submit_batch_with(&calls, limits)
            .map(|s| (s.batch.0, s.first.0, s.count))
            .map_err(|e| e.code.as_str().to_owned())
    }

    fn on_events(&mut self, events: &[EventSpec], now: Option<u64>) -> Vec<RefusalView> {
        let sched = self.sched();
        let clock = now.and_then(|now| sched.observe_clock(now).err().map(refusal));
        let refused: Vec<RefusalView> = events
            .iter()
            .filter_map(|event| {
                let input = match event {
                    EventSpec::Approve(e) => Input::Approve(EntryId(*e)),
                    EventSpec::NotRun(e, how) => Input::NotRun(
                        EntryId(*e),
                        match *how {
                            "rejected" => HostSettle::Rejected,
                            "skipped" => HostSettle::Skipped,
                            _ => HostSettle::Failed,
                        },
                    ),
                    EventSpec::Ask(e) => Input::Ask(EntryId(*e)),
                    EventSpec::Answer(e) => Input::Answer(EntryId(*e)),
                    EventSpec::Cancel(b) => Input::Cancel(BatchId(*b)),
                    EventSpec::Pause(k, until) => Input::Pause(k, *until),
                    EventSpec::Granted(e) => Input::Granted(EntryId(*e)),
                    EventSpec::Denied(e) => Input::Denied(EntryId(*e)),
                };
                sched.on_event(input).err().map(refusal)
            })
            .collect();
        clock.into_iter().chain(refused).collect()
    }

    fn on_ended(&mut self, ends: &[(u64, EndSpec)], now: Option<u64>) -> Vec<RefusalView> {
        let sched = self.sched();
        let clock = now.and_then(|now| sched.observe_clock(now).err().map(refusal));
        let refused: Vec<RefusalView> = ends
            .iter()
            .filter_map(|&(e, how)| {
                let end = match how {
                    EndSpec::Ok => End::Ok,
                    EndSpec::Failed => End::Failed,
                    EndSpec::RateLimited(until) => End::RateLimited(until),
                };
                sched.on_ended(EntryId(e), end).err().map(refusal)
            })
            .collect();
        clock.into_iter().chain(refused).collect()
    }

    fn next_releases(&mut self, now: Option<u64>) -> ReleasesView {
        let mut out = Releases::default();
        self.sched().next_releases(now, &mut out);
        let actions = out
            .actions()
            .map(|a| match a {
                Action::Refused(r) => ActionView::Refused(refusal(r.clone())),
                Action::Abort(a) => ActionView::Abort {
                    entry: a.entry.0,
                    cause: a.cause.name().to_owned(),
                },
                Action::PauseStore(p) => ActionView::PauseStore {
                    key: p.key.clone(),
                    until: p.until,
                },
                Action::Release(p) => ActionView::Release {
                    entry: p.entry.0,
                    key: p.key.clone(),
                },
                Action::Settled(s) => ActionView::Settled {
                    entry: s.entry.0,
                    reason: reason_text(s.reason),
                    after: after(s.reason),
                    message: s.message.clone(),
                },
                Action::Acquire(p) => ActionView::Acquire {
                    entry: p.entry.0,
                    key: p.key.clone(),
                    limit: p.limit,
                    delay_ms: p.delay_ms,
                },
                Action::Start(e) => ActionView::Start(e.0),
                Action::Retired(b) => ActionView::Retired(b.0),
            })
            .collect();
        ReleasesView {
            actions,
            wake_at: out.wake_at,
        }
    }

    fn label(&mut self, entry: u64) -> Option<String> {
        self.sched().label(EntryId(entry))
    }

    fn inspect(&mut self, batch: u64) -> Option<Vec<String>> {
        let statuses = self.sched().inspect(BatchId(batch))?;
        Some(
            statuses
                .iter()
                .map(|st| {
                    let (state, after) = state_parts(st.state);
                    let wait = st.wait.as_ref().map(|w| match w {
                        Wait::BatchNotApproved { .. } => WaitView::BatchNotApproved,
                        Wait::KeyFull {
                            key,
                            limit,
                            running,
                        } => WaitView::KeyFull {
                            key,
                            limit: *limit,
                            running,
                        },
                        Wait::Behind { label, key } => WaitView::Behind { label, key },
                        Wait::KeyPaused { key, until } => {
                            WaitView::KeyPaused { key, until: *until }
                        }
                        Wait::KeySpacing { key, until } => {
                            WaitView::KeySpacing { key, until: *until }
                        }
                        Wait::RetryAt { until } => WaitView::RetryAt { until: *until },
                        Wait::PermitRequested { key } => WaitView::PermitRequested(key),
                        Wait::PermitGranted { key } => WaitView::PermitGranted(key),
                    });
                    corpus::inspect_line(&st.label, &state, after, wait)
                })
                .collect(),
        )
    }

    fn restart(
        &mut self,
        interrupt: bool,
        layers: Option<&[(String, String)]>,
    ) -> Result<Vec<String>, String> {
        let state = self.sched().unfinished();
        if let Some(layers) = layers {
            let layers: Vec<Layer> = layers.iter().map(|(n, t)| Layer::new(n, t)).collect();
            self.policy =
                config::resolve(&layers).map_err(|_| "layers do not resolve".to_owned())?;
        }
        let started = if interrupt {
            Started::Interrupt
        } else {
            Started::RunAgain
        };
        let (scheduler, unrestored) = Scheduler::resume(self.policy.clone(), &state, started)
            .map_err(|e| e.code.as_str().to_owned())?;
        self.scheduler = Some(scheduler);
        Ok(unrestored
            .iter()
            .map(|u| format!("{} {}", u.call, u.code.as_str()))
            .collect())
    }

    fn admission(&mut self, max_concurrent: u32, allow_parallel: bool) {
        self.admission = Some(Admission::new(AdmissionConfig {
            max_concurrent,
            allow_parallel,
        }));
    }

    fn begin(&mut self, id: &str, class: &str, parent: Option<u64>) -> Result<u64, String> {
        let class = match class {
            "call" => Class::Call,
            "request" => Class::Request,
            "control" => Class::Control,
            "reentrant" => Class::Reentrant,
            other => return Err(format!("unknown class {other}")),
        };
        self.adm()
            .begin(id, class, parent.map(Ticket))
            .map(|t| t.0)
            .map_err(|e| e.code.as_str().to_owned())
    }

    fn end_request(&mut self, ticket: u64) -> Result<(), String> {
        self.adm()
            .end(Ticket(ticket))
            .map_err(|e| e.code.as_str().to_owned())
    }

    fn abandon(&mut self, ticket: u64) -> Result<(), String> {
        self.adm()
            .abandon(Ticket(ticket))
            .map_err(|e| e.code.as_str().to_owned())
    }

    fn shutdown(&mut self) -> (Vec<u64>, Vec<u64>) {
        let report = self.adm().shutdown();
        (
            report.cancel.iter().map(|t| t.0).collect(),
            report.refused.iter().map(|t| t.0).collect(),
        )
    }

    fn admissions(&mut self) -> Vec<u64> {
        self.adm().next_admissions().iter().map(|t| t.0).collect()
    }
}

fn diag(d: turnstile_engine::diagnostic::Diagnostic) -> Diag {
    Diag {
        code: d.code.as_str().to_owned(),
        labels: d
            .labels
            .iter()
            .map(|l| (l.span.layer_name.clone(), l.span.line))
            .collect(),
        tools: d.tools,
        rendered: d.rendered,
    }
}

fn refusal(r: Refusal) -> RefusalView {
    RefusalView {
        about: match r.about {
            About::Entry(e) => format!("entry {e}"),
            About::Batch(b) => format!("batch {b}"),
            About::Key(k) => format!("key {k}"),
            About::Clock(t) => format!("clock {t}"),
        },
        code: r.code.as_str().to_owned(),
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn cases_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/cases")
}

/// `TURNSTILE_CASE=sched-03 cargo test -p turnstile-engine --test corpus` runs the cases whose
/// file name contains `sched-03`.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn corpus_runs_natively() {
    let only = std::env::var("TURNSTILE_CASE").ok();
    let files: Vec<PathBuf> = corpus::case_files(&cases_dir())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| {
            only.as_deref().is_none_or(|name| {
                p.file_name()
                    .is_some_and(|f| f.to_string_lossy().contains(name))
            })
        })
        .collect();
    if let Some(name) = &only {
        assert!(!files.is_empty(), "no case file name contains {name:?}");
        let summary = corpus::run_all(&files, Native::default);
        assert!(summary.failed.is_empty(), "{:?}", summary.failed);
        return;
    }
    assert!(
        files.len() >= 60,
        "expected the whole corpus, found {} cases",
        files.len()
    );
    let summary = corpus::run_all(&files, Native::default);
    for (path, why) in &summary.failed {
        eprintln!("FAIL {}: {why}", path.display());
    }
    assert!(summary.failed.is_empty(), "{}", summary.line());
}

/// Tidy: `rendered` is optional in the case format, but every diagnostics case of the project's
/// own corpus gives it, so a change to a rendering is always seen in review.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn every_diagnostics_case_of_the_corpus_pins_its_rendering() {
    let files = corpus::case_files(&cases_dir()).unwrap_or_default();
    let mut missing = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let value: toml::Value = toml::from_str(&text).unwrap_or(toml::Value::Boolean(false));
        if value.get("diagnostics").is_some() && value.get("rendered").is_none() {
            missing.push(path.display().to_string());
        }
    }
    assert!(files.len() >= 60, "found {} cases", files.len());
    assert!(
        missing.is_empty(),
        "diagnostics cases without `rendered`: {missing:?}"
    );
}

/// `UPDATE_EXPECT=1 cargo test -p turnstile-engine --test corpus`: writes each diagnostics
/// case's `rendered` text from the engine (then review the diff).
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn update_rendered_expectations() {
    if std::env::var_os("UPDATE_EXPECT").is_none() {
        return;
    }
    for path in corpus::case_files(&cases_dir()).unwrap_or_default() {
        let text = std::fs::read_to_string(&path).unwrap();
        let case: corpus::Case = toml::from_str(&text).unwrap();
        if case.diagnostics.is_none() {
            continue;
        }
        let layers: Vec<(String, String)> = case
            .layer
            .iter()
            .enumerate()
            .map(|(i, l)| {
                (
                    l.name.clone().unwrap_or_else(|| format!("L{}", i + 1)),
                    l.text.clone(),
                )
            })
            .collect();
        let Err(diags) = Native::default().resolve(&layers) else {
            continue;
        };
        let rendered = corpus::rendered(&diags);
        // A literal block where TOML allows one; escapes where the text has control characters.
        let literal = !rendered.contains("'''")
            && !rendered
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t');
        let mut out = String::new();
        let mut skipping = false;
        for line in text.lines() {
            if skipping {
                if line.ends_with("'''") {
                    skipping = false;
                }
                continue;
            }
            if line.starts_with("rendered = '''") {
                skipping = !line.ends_with("'''") || line == "rendered = '''";
                continue;
            }
            if line.starts_with("rendered = \"") {
                continue;
            }
            out.push_str(line);
            out.push('\n');
            if line.starts_with("diagnostics = ") {
                if literal {
                    out.push_str("rendered = '''\n");
                    out.push_str(&rendered);
                    out.push_str("\n'''\n");
                } else {
                    let mut quoted = String::from("\"");
                    for c in rendered.chars() {
                        match c {
                            '"' => quoted.push_str("\\\""),
                            '\\' => quoted.push_str("\\\\"),
                            '\n' => quoted.push_str("\\n"),
                            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", c as u32)),
                            c => quoted.push(c),
                        }
                    }
                    quoted.push('"');
                    out.push_str(&format!("rendered = {quoted}\n"));
                }
            }
        }
        std::fs::write(&path, out).unwrap();
    }
}

/// The corpus in wasm, which has no filesystem: `cargo xtask test` writes the list of case files
/// (`include_str!` each) and names it in `TURNSTILE_WASM_CASES` at compile time.
#[cfg(target_arch = "wasm32")]
#[test]
fn corpus_runs_in_wasm() {
    let cases: &[(&str, &str)] = include!(env!(
        "TURNSTILE_WASM_CASES",
        "build the wasm tests with `cargo xtask test` (it embeds tests/cases)"
    ));
    assert!(
        cases.len() >= 60,
        "expected the whole corpus, found {} cases",
        cases.len()
    );
    let failed: Vec<String> = cases
        .iter()
        .filter_map(|(name, text)| {
            toml::from_str::<corpus::Case>(text)
                .map_err(|e| format!("not a case file: {e}"))
                .and_then(|case| corpus::run_case(&case, &mut Native::default()))
                .err()
                .map(|why| format!("FAIL {name}: {why}"))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} passed, {} failed\n{}",
        cases.len() - failed.len(),
        failed.len(),
        failed.join("\n")
    );
}

/// Paste one case here to iterate on it.
#[test]
fn smoke() {
    let case: corpus::Case = match toml::from_str(
        r#"
        [[layer]]
        text = '''
        [conversation.tools.rfd_renumber]
        concurrency = { key = "rfd" }
        '''
        [[batch]]
        calls = ["r1 rfd_renumber", "r2 rfd_renumber"]
        [[step]]
        do = "submit 1"
        [[step]]
        do = "approve r1 r2"
        start = ["r1"]
        [[step]]
        do = "end r1 ok"
        start = ["r2"]
        "#,
    ) {
        Ok(case) => case,
        Err(e) => panic!("smoke case does not parse: {e}"),
    };
    let result = corpus::run_case(&case, &mut Native::default());
    assert_eq!(result, Ok(()));
}
