//! The corpus's `Subject` over the component: every method is one or a few WIT calls. A trap is
//! reported as an error string starting with `trap:`, which no case expects, so it fails.

use turnstile_corpus::{self as corpus, CallSpec, Diag, Subject, WaitView};
use wasmtime::component::ResourceAny;

use crate::{Instance, wit_admission as wa, wit_config as wc, wit_scheduler as ws};

/// One instance of the component, driven as a case host.
pub struct ComponentSubject {
    instance: Instance,
    policy: Option<ResourceAny>,
    scheduler: Option<ResourceAny>,
    admission: Option<ResourceAny>,
}

fn trap(e: wasmtime::Error) -> String {
    format!("trap: {e:#}")
}

impl ComponentSubject {
    /// Wraps a fresh instance.
    pub fn new(instance: Instance) -> Self {
        Self {
            instance,
            policy: None,
            scheduler: None,
            admission: None,
        }
    }

    fn policy(&mut self) -> Result<ResourceAny, String> {
        if let Some(p) = self.policy {
            return Ok(p);
        }
        let iface = self.instance.exports.turnstile_scheduler_config().policy();
        let p = iface
            .call_resolve(&mut self.instance.store, &[])
            .map_err(trap)?
            .map_err(|_| "the empty config did not resolve".to_owned())?;
        self.policy = Some(p);
        Ok(p)
    }

    fn scheduler(&mut self) -> Result<ResourceAny, String> {
        if let Some(s) = self.scheduler {
            return Ok(s);
        }
        self.new_scheduler();
        self.scheduler.ok_or_else(|| "no scheduler".to_owned())
    }

    fn admission_resource(&mut self) -> Result<ResourceAny, String> {
        if self.admission.is_none() {
            self.admission(1, false);
        }
        self.admission.ok_or_else(|| "no admission".to_owned())
    }

    /// Calls a scheduler method that returns `result<_, error>`.
    fn sched_call(
        &mut self,
        f: impl FnOnce(
            &ws::GuestScheduler<'_>,
            &mut wasmtime::Store<crate::HostState>,
            ResourceAny,
        ) -> wasmtime::Result<Result<(), ws::Error>>,
    ) -> Result<(), String> {
        let s = self.scheduler()?;
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        f(&iface, &mut self.instance.store, s)
            .map_err(trap)?
            .map_err(|e| error_code(e.code).to_owned())
    }

    fn adm_call(
        &mut self,
        f: impl FnOnce(
            &wa::GuestAdmission<'_>,
            &mut wasmtime::Store<crate::HostState>,
            ResourceAny,
        ) -> wasmtime::Result<Result<(), wa::Error>>,
    ) -> Result<(), String> {
        let a = self.admission_resource()?;
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_admission()
            .admission();
        f(&iface, &mut self.instance.store, a)
            .map_err(trap)?
            .map_err(|e| admission_code(e.code).to_owned())
    }
}

impl Subject for ComponentSubject {
    fn resolve(&mut self, layers: &[(String, String)]) -> Result<(), Vec<Diag>> {
        let layers: Vec<wc::Layer> = layers
            .iter()
            .map(|(name, text)| wc::Layer {
                name: name.clone(),
                text: text.clone(),
            })
            .collect();
        let iface = self.instance.exports.turnstile_scheduler_config().policy();
        match iface.call_resolve(&mut self.instance.store, &layers) {
            Ok(Ok(p)) => {
                self.policy = Some(p);
                Ok(())
            }
            Ok(Err(diags)) => Err(diags
                .into_iter()
                .map(|d| Diag {
                    code: diagnostic_code(d.code).to_owned(),
                    labels: d
                        .labels
                        .iter()
                        .map(|l| (l.span.layer_name.clone(), l.span.line))
                        .collect(),
                    tools: d.tools,
                    rendered: d.rendered,
                })
                .collect()),
            Err(e) => Err(vec![Diag {
                code: trap(e),
                labels: Vec::new(),
                tools: Vec::new(),
                rendered: String::new(),
            }]),
        }
    }

    fn tool_line(&mut self, name: &str) -> String {
        let p = match self.policy() {
            Ok(p) => p,
            Err(e) => return e,
        };
        let iface = self.instance.exports.turnstile_scheduler_config().policy();
        match iface.call_tool(&mut self.instance.store, p, name) {
            Ok(t) => tool_line(&t),
            Err(e) => trap(e),
        }
    }

    fn new_scheduler(&mut self) {
        let Ok(p) = self.policy() else {
            return;
        };
        if let Some(old) = self.scheduler.take() {
            let _ = old.resource_drop(&mut self.instance.store);
        }
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        self.scheduler = iface.call_constructor(&mut self.instance.store, p).ok();
    }

    fn submit(&mut self, calls: &[CallSpec]) -> Result<u32, String> {
        let calls: Vec<ws::Call> = calls
            .iter()
            .map(|c| ws::Call {
                id: c.id.clone(),
                tool: c.tool.clone(),
                operations: c.operations,
                finished: Vec::new(),
            })
            .collect();
        let s = self.scheduler()?;
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        iface
            .call_submit_batch(&mut self.instance.store, s, &calls)
            .map_err(trap)?
            .map_err(|e| error_code(e.code).to_owned())
    }

    fn entry_event(&mut self, verb: &str, label: &str) -> Result<(), String> {
        let verb = verb.to_owned();
        self.sched_call(|i, st, s| match verb.as_str() {
            "approve" => i.call_approve(st, s, label),
            "reject" => i.call_settle(st, s, label, ws::HostSettle::Rejected),
            "skip" => i.call_settle(st, s, label, ws::HostSettle::Skipped),
            "fail" => i.call_settle(st, s, label, ws::HostSettle::Failed),
            "ask" => i.call_begin_question(st, s, label),
            _ => i.call_end_question(st, s, label),
        })
    }

    fn end(&mut self, label: &str, ok: bool) -> Result<(), String> {
        let outcome = if ok {
            ws::Outcome::Ok
        } else {
            ws::Outcome::Failed
        };
        self.sched_call(|i, st, s| i.call_on_ended(st, s, label, outcome))
    }

    fn approve_many(&mut self, labels: &[&str]) -> Result<(), String> {
        let labels: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
        self.sched_call(|i, st, s| i.call_approve_many(st, s, &labels))
    }

    fn end_many(&mut self, ends: &[(&str, bool)]) -> Result<(), String> {
        let ends: Vec<ws::Ended> = ends
            .iter()
            .map(|&(entry, ok)| ws::Ended {
                entry: entry.to_owned(),
                outcome: if ok {
                    ws::Outcome::Ok
                } else {
                    ws::Outcome::Failed
                },
            })
            .collect();
        self.sched_call(|i, st, s| i.call_on_ended_many(st, s, &ends))
    }

    fn cancel(&mut self, batch: u32) -> Result<(), String> {
        self.sched_call(|i, st, s| i.call_cancel_batch(st, s, batch))
    }

    fn releases(&mut self) -> (Vec<String>, Vec<String>) {
        let s = match self.scheduler() {
            Ok(s) => s,
            Err(e) => return (vec![e], Vec::new()),
        };
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        match iface.call_next_releases(&mut self.instance.store, s) {
            Ok(r) => (
                r.start,
                r.settle
                    .iter()
                    .map(|st| {
                        let (name, after) = reason(&st.reason);
                        corpus::settle_line(&st.entry, name, after)
                    })
                    .collect(),
            ),
            Err(e) => (vec![trap(e)], Vec::new()),
        }
    }

    fn inspect(&mut self, batch: u32) -> Result<Vec<String>, String> {
        let s = self.scheduler()?;
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        let statuses = iface
            .call_inspect(&mut self.instance.store, s, batch)
            .map_err(trap)?
            .map_err(|e| error_code(e.code).to_owned())?;
        Ok(statuses.iter().map(inspect_line).collect())
    }

    fn restart(&mut self) -> Vec<(u32, u32)> {
        // Export with `unfinished`, import with `resume`: what a host does after a crash.
        let (Ok(s), Ok(p)) = (self.scheduler(), self.policy()) else {
            return Vec::new();
        };
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        let Ok(state) = iface.call_unfinished(&mut self.instance.store, s) else {
            return Vec::new();
        };
        let Ok(Ok(resumed)) = iface.call_resume(&mut self.instance.store, p, &state) else {
            return Vec::new();
        };
        let _ = s.resource_drop(&mut self.instance.store);
        self.scheduler = Some(resumed);
        state
            .iter()
            .enumerate()
            .map(|(i, b)| (b.batch, i as u32 + 1))
            .collect()
    }

    fn admission(&mut self, max_concurrent: u32, allow_parallel: bool) {
        if let Some(old) = self.admission.take() {
            let _ = old.resource_drop(&mut self.instance.store);
        }
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_admission()
            .admission();
        let config = wa::AdmissionConfig {
            max_concurrent,
            allow_parallel,
        };
        self.admission = iface
            .call_constructor(&mut self.instance.store, config)
            .ok();
    }

    fn begin(&mut self, id: &str, class: &str, parent: Option<&str>) -> Result<(), String> {
        let class = match class {
            "call" => wa::Class::Call,
            "request" => wa::Class::Request,
            "control" => wa::Class::Control,
            "reentrant" => wa::Class::Reentrant,
            other => return Err(format!("unknown class {other}")),
        };
        self.adm_call(|i, st, a| i.call_begin(st, a, id, class, parent))
    }

    fn end_request(&mut self, id: &str) -> Result<(), String> {
        self.adm_call(|i, st, a| i.call_end(st, a, id))
    }

    fn abandon(&mut self, id: &str) -> Result<(), String> {
        self.adm_call(|i, st, a| i.call_abandon(st, a, id))
    }

    fn shutdown(&mut self) -> (Vec<String>, Vec<String>) {
        let Ok(a) = self.admission_resource() else {
            return (Vec::new(), Vec::new());
        };
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_admission()
            .admission();
        match iface.call_shutdown(&mut self.instance.store, a) {
            Ok(r) => (r.cancel, r.refused),
            Err(e) => (vec![trap(e)], Vec::new()),
        }
    }

    fn admissions(&mut self) -> Vec<String> {
        let Ok(a) = self.admission_resource() else {
            return Vec::new();
        };
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_admission()
            .admission();
        iface
            .call_next_admissions(&mut self.instance.store, a)
            .unwrap_or_else(|e| vec![trap(e)])
    }
}

/// The corpus rendering of a tool policy.
pub(crate) fn tool_line(t: &wc::ToolPolicy) -> String {
    corpus::tool_line(
        &t.name,
        t.concurrency.as_ref().map(|c| (c.key.as_str(), c.limit)),
        t.fan_out,
        t.on_error == wc::OnError::Stop,
    )
}

fn reason(r: &ws::Reason) -> (&'static str, Option<u32>) {
    match r {
        ws::Reason::Rejected => ("rejected", None),
        ws::Reason::Skipped => ("skipped", None),
        ws::Reason::Failed => ("failed", None),
        ws::Reason::Cancelled => ("cancelled", None),
        ws::Reason::Stopped(after) => ("stopped", Some(*after)),
    }
}

pub(crate) fn inspect_line(st: &ws::EntryStatus) -> String {
    let (state, after) = match &st.state {
        ws::State::Pending => ("pending", None),
        ws::State::Approved => ("approved", None),
        ws::State::Running => ("running", None),
        ws::State::Asking => ("asking", None),
        ws::State::Ended(ws::Outcome::Ok) => ("ended-ok", None),
        ws::State::Ended(ws::Outcome::Failed) => ("ended-failed", None),
        ws::State::Settled(r) => reason(r),
    };
    let wait = st.wait.as_ref().map(|w| match w {
        ws::Wait::BatchNotApproved(_) => WaitView::BatchNotApproved,
        ws::Wait::KeyFull(full) => WaitView::KeyFull {
            key: &full.key,
            limit: full.limit,
            running: &full.running,
        },
        ws::Wait::Behind(label) => WaitView::Behind(label),
    });
    corpus::inspect_line(&st.entry, state, after, wait)
}

pub(crate) fn error_code(code: ws::ErrorCode) -> &'static str {
    use ws::ErrorCode as E;
    match code {
        E::UnknownEntry => "unknown-entry",
        E::UnknownBatch => "unknown-batch",
        E::DuplicateId => "duplicate-id",
        E::InvalidId => "invalid-id",
        E::EmptyBatch => "empty-batch",
        E::TooLarge => "too-large",
        E::NotFanOut => "not-fan-out",
        E::InvalidOperations => "invalid-operations",
        E::AlreadyDecided => "already-decided",
        E::NotRunning => "not-running",
        E::NotAsking => "not-asking",
        E::AlreadyEnded => "already-ended",
        E::BatchCancelled => "batch-cancelled",
    }
}

fn admission_code(code: wa::ErrorCode) -> &'static str {
    use wa::ErrorCode as E;
    match code {
        E::Shutdown => "shutdown",
        E::DuplicateRequest => "duplicate-request",
        E::UnknownRequest => "unknown-request",
        E::InvalidId => "invalid-id",
        E::InvalidParent => "invalid-parent",
        E::WouldDeadlock => "would-deadlock",
        E::NotAdmitted => "not-admitted",
        E::NotQueued => "not-queued",
        E::TooMany => "too-many",
    }
}

pub(crate) fn diagnostic_code(code: wc::DiagnosticCode) -> &'static str {
    use wc::DiagnosticCode as D;
    match code {
        D::TomlSyntax => "toml-syntax",
        D::TooManyLayers => "too-many-layers",
        D::TooLarge => "too-large",
        D::TooManyTools => "too-many-tools",
        D::TableType => "table-type",
        D::ConcurrencyType => "concurrency-type",
        D::ConcurrencyNegative => "concurrency-negative",
        D::ConcurrencyKeyMissing => "concurrency-key-missing",
        D::ConcurrencyKeyEmpty => "concurrency-key-empty",
        D::ConcurrencyUnknownField => "concurrency-unknown-field",
        D::ConcurrencyOnDefaults => "concurrency-on-defaults",
        D::FanOutType => "fan-out-type",
        D::FanOutOnDefaults => "fan-out-on-defaults",
        D::FanOutConcurrencyRemoved => "fan-out-concurrency-removed",
        D::FanOutOnErrorValue => "fan-out-on-error-value",
        D::FanOutUnknownField => "fan-out-unknown-field",
        D::ConcurrencyLimitConflict => "concurrency-limit-conflict",
        D::StopWithoutLimit => "stop-without-limit",
        D::EnableValue => "enable-value",
    }
}
