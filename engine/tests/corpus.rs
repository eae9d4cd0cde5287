//! Runs every case in `tests/cases` natively against the engine: the same files, steps and
//! expected output the wasmtime harness (and every other host) checks through the component.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::path::PathBuf;

use turnstile_corpus::{self as corpus, CallSpec, Diag, Subject, WaitView};
use turnstile_engine::admission::{Admission, AdmissionConfig, Class};
use turnstile_engine::config::{self, Layer, Policy};
use turnstile_engine::schedule::{
    BatchId, Call, HostSettle, Outcome, Reason, Scheduler, State, Wait,
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
        _ => None,
    }
}

fn state_parts(state: State) -> (&'static str, Option<u32>) {
    match state {
        State::Settled(reason) => (reason.name(), after(reason)),
        other => (other.name(), None),
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
            Err(diags) => Err(diags
                .into_iter()
                .map(|d| Diag {
                    code: d.code.as_str().to_owned(),
                    labels: d
                        .labels
                        .iter()
                        .map(|l| (l.span.layer_name.clone(), l.span.line))
                        .collect(),
                    tools: d.tools,
                    rendered: d.rendered,
                })
                .collect()),
        }
    }

    fn tool_line(&mut self, name: &str) -> String {
        match self.policy.tool(name) {
            Some(t) => corpus::tool_line(
                name,
                t.concurrency
                    .as_ref()
                    .map(|c| (c.key.as_str(), c.limit.get())),
                t.fan_out,
                t.on_error == config::OnError::Stop,
            ),
            None => corpus::tool_line(name, None, false, false),
        }
    }

    fn new_scheduler(&mut self) {
        self.scheduler = Some(Scheduler::new(self.policy.clone()));
    }

    fn submit(&mut self, calls: &[CallSpec]) -> Result<u32, String> {
        let calls: Vec<Call> = calls
            .iter()
            .map(|c| Call {
                id: c.id.clone(),
                tool: c.tool.clone(),
                operations: c.operations,
                finished: Vec::new(),
            })
            .collect();
        self.sched()
            .submit_batch(&calls)
            .map(|b| b.0)
            .map_err(|e| e.code.as_str().to_owned())
    }

    fn entry_event(&mut self, verb: &str, label: &str) -> Result<(), String> {
        let s = self.sched();
        let result = match verb {
            "approve" => s.approve(label),
            "reject" => s.settle(label, HostSettle::Rejected),
            "skip" => s.settle(label, HostSettle::Skipped),
            "fail" => s.settle(label, HostSettle::Failed),
            "ask" => s.begin_question(label),
            _ => s.end_question(label),
        };
        result.map_err(|e| e.code.as_str().to_owned())
    }

    fn end(&mut self, label: &str, ok: bool) -> Result<(), String> {
        let outcome = if ok { Outcome::Ok } else { Outcome::Failed };
        self.sched()
            .on_ended(label, outcome)
            .map_err(|e| e.code.as_str().to_owned())
    }

    fn approve_many(&mut self, labels: &[&str]) -> Result<(), String> {
        self.sched()
            .approve_many(labels)
            .map_err(|e| e.code.as_str().to_owned())
    }

    fn end_many(&mut self, ends: &[(&str, bool)]) -> Result<(), String> {
        let ends: Vec<(&str, Outcome)> = ends
            .iter()
            .map(|&(l, ok)| (l, if ok { Outcome::Ok } else { Outcome::Failed }))
            .collect();
        self.sched()
            .on_ended_many(&ends)
            .map_err(|e| e.code.as_str().to_owned())
    }

    fn cancel(&mut self, batch: u32) -> Result<(), String> {
        self.sched()
            .cancel_batch(BatchId(batch))
            .map_err(|e| e.code.as_str().to_owned())
    }

    fn releases(&mut self) -> (Vec<String>, Vec<String>) {
        let s = self.sched();
        let r = s.next_releases();
        let start = r.start.iter().map(|&e| s.label(e)).collect();
        let settle = r
            .settle
            .iter()
            .map(|&(e, reason)| corpus::settle_line(&s.label(e), reason.name(), after(reason)))
            .collect();
        (start, settle)
    }

    fn inspect(&mut self, batch: u32) -> Result<Vec<String>, String> {
        let statuses = self
            .sched()
            .inspect(BatchId(batch))
            .map_err(|e| e.code.as_str().to_owned())?;
        Ok(statuses
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
                    Wait::Behind(label) => WaitView::Behind(label),
                });
                corpus::inspect_line(&st.label, state, after, wait)
            })
            .collect())
    }

    fn restart(&mut self) -> Vec<(u32, u32)> {
        let state = self.sched().unfinished();
        self.scheduler = Scheduler::resume(self.policy.clone(), &state).ok();
        state
            .iter()
            .enumerate()
            .map(|(i, (old, _))| (old.0, i as u32 + 1))
            .collect()
    }

    fn admission(&mut self, max_concurrent: u32, allow_parallel: bool) {
        self.admission = Some(Admission::new(AdmissionConfig {
            max_concurrent,
            allow_parallel,
        }));
    }

    fn begin(&mut self, id: &str, class: &str, parent: Option<&str>) -> Result<(), String> {
        let class = match class {
            "call" => Class::Call,
            "request" => Class::Request,
            "control" => Class::Control,
            "reentrant" => Class::Reentrant,
            other => return Err(format!("unknown class {other}")),
        };
        self.adm()
            .begin(id, class, parent)
            .map_err(|e| e.code.as_str().to_owned())
    }

    fn end_request(&mut self, id: &str) -> Result<(), String> {
        self.adm().end(id).map_err(|e| e.code.as_str().to_owned())
    }

    fn abandon(&mut self, id: &str) -> Result<(), String> {
        self.adm()
            .abandon(id)
            .map_err(|e| e.code.as_str().to_owned())
    }

    fn shutdown(&mut self) -> (Vec<String>, Vec<String>) {
        let report = self.adm().shutdown();
        (report.cancel, report.refused)
    }

    fn admissions(&mut self) -> Vec<String> {
        self.adm().next_admissions()
    }
}

fn cases_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/cases")
}

#[test]
fn corpus_runs_natively() {
    let files = corpus::case_files(&cases_dir()).unwrap_or_default();
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
