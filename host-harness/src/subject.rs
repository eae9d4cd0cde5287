//! The corpus's `Subject` over the component: every method is one or a few WIT calls. A trap is
//! reported as an error string starting with `trap:`, which no case expects, so it fails.

use turnstile_corpus::{
    self as corpus, ActionView, CallSpec, Diag, EndSpec, EventSpec, LimitsSpec, RefusalView,
    ReleasesView, Subject, WaitView,
};
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

    fn adm_call<T>(
        &mut self,
        f: impl FnOnce(
            &wa::GuestAdmission<'_>,
            &mut wasmtime::Store<crate::HostState>,
            ResourceAny,
        ) -> wasmtime::Result<Result<T, wa::Error>>,
    ) -> Result<T, String> {
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
            Ok(Err(diags)) => Err(diags.into_iter().map(diag).collect()),
            Err(e) => Err(vec![trapped_diag(trap(e))]),
        }
    }

    fn warnings(&mut self) -> Vec<Diag> {
        let p = match self.policy() {
            Ok(p) => p,
            Err(e) => return vec![trapped_diag(e)],
        };
        let iface = self.instance.exports.turnstile_scheduler_config().policy();
        match iface.call_warnings(&mut self.instance.store, p) {
            Ok(diags) => diags.into_iter().map(diag).collect(),
            Err(e) => vec![trapped_diag(trap(e))],
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

    fn submit_batch(
        &mut self,
        calls: &[CallSpec],
        limits: LimitsSpec,
    ) -> Result<(u64, u64, u32), String> {
        let calls = wit_calls(calls)?;
        let limits = wit_limits(limits);
        let s = self.scheduler()?;
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        iface
            .call_submit_batch(&mut self.instance.store, s, &calls, limits)
            .map_err(trap)?
            .map(|b| (b.batch, b.first, b.count))
            .map_err(|e| submit_code(e.code).to_owned())
    }

    fn on_events(&mut self, events: &[EventSpec], now: Option<u64>) -> Vec<RefusalView> {
        let s = match self.scheduler() {
            Ok(s) => s,
            Err(e) => return trapped(e),
        };
        let mut wit: Vec<ws::Event> = Vec::with_capacity(events.len());
        for e in events {
            // Consecutive approvals travel as one `approve` list, applied in order.
            if let (EventSpec::Approve(n), Some(ws::Event::Approve(run))) = (e, wit.last_mut()) {
                run.push(*n);
                continue;
            }
            wit.push(match e {
                EventSpec::Approve(n) => ws::Event::Approve(vec![*n]),
                EventSpec::NotRun(n, how) => ws::Event::NotRun((
                    *n,
                    match *how {
                        "rejected" => ws::NotRun::Rejected,
                        "skipped" => ws::NotRun::Skipped,
                        _ => ws::NotRun::Failed,
                    },
                )),
                EventSpec::Ask(n) => ws::Event::Ask(*n),
                EventSpec::Answer(n) => ws::Event::Answer(*n),
                EventSpec::Cancel(b) => ws::Event::Cancel(*b),
                EventSpec::Pause(key, until) => ws::Event::Pause(ws::KeyPause {
                    key: key.clone(),
                    until: *until,
                }),
                EventSpec::Granted(n) => ws::Event::Granted(*n),
                EventSpec::Denied(n) => ws::Event::Denied(*n),
            });
        }
        let events = wit;
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        match iface.call_on_events(&mut self.instance.store, s, &events, now) {
            Ok(refused) => refused.iter().map(refusal).collect(),
            Err(e) => trapped(trap(e)),
        }
    }

    fn on_ended(&mut self, ends: &[(u64, EndSpec)], now: Option<u64>) -> Vec<RefusalView> {
        let s = match self.scheduler() {
            Ok(s) => s,
            Err(e) => return trapped(e),
        };
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        let mut refused = Vec::new();
        for (i, chunk) in wit_ends(ends).iter().enumerate() {
            let now = if i == 0 { now } else { None };
            match iface.call_on_ended(&mut self.instance.store, s, chunk, now) {
                Ok(r) => refused.extend(r.iter().map(refusal)),
                Err(e) => return trapped(trap(e)),
            }
        }
        refused
    }

    fn next_releases(&mut self, now: Option<u64>) -> ReleasesView {
        let trapped_view = |why: String| ReleasesView {
            actions: vec![ActionView::Refused(RefusalView {
                about: "trap".to_owned(),
                code: why,
            })],
            wake_at: None,
        };
        let s = match self.scheduler() {
            Ok(s) => s,
            Err(e) => return trapped_view(e),
        };
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        match crate::next_releases(&iface, &mut self.instance.store, s, now) {
            Ok(out) => releases_view(out),
            Err(e) => trapped_view(trap(e)),
        }
    }

    fn label(&mut self, entry: u64) -> Option<String> {
        let s = self.scheduler().ok()?;
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        match iface.call_label(&mut self.instance.store, s, entry) {
            Ok(label) => label,
            Err(e) => Some(trap(e)),
        }
    }

    fn inspect(&mut self, batch: u64) -> Option<Vec<String>> {
        let s = match self.scheduler() {
            Ok(s) => s,
            Err(e) => return Some(vec![e]),
        };
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        match crate::inspect(&iface, &mut self.instance.store, s, batch) {
            Ok(statuses) => statuses.map(|st| st.iter().map(inspect_line).collect()),
            Err(e) => Some(vec![trap(e)]),
        }
    }

    fn restart(
        &mut self,
        interrupt: bool,
        layers: Option<&[(String, String)]>,
    ) -> Result<Vec<String>, String> {
        // Export with `unfinished`, import with `resume`: what a host does after a crash.
        let s = self.scheduler()?;
        if let Some(layers) = layers {
            self.resolve(layers)
                .map_err(|_| "the restart's layers do not resolve".to_owned())?;
        }
        let p = self.policy()?;
        let iface = self
            .instance
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        let state = crate::unfinished(&iface, &mut self.instance.store, s)
            .map_err(trap)?
            .map_err(|e| format!("unfinished: {}", e.message))?;
        let started = if interrupt {
            ws::Started::Interrupt
        } else {
            ws::Started::RunAgain
        };
        let (resumed, unrestored) = iface
            .call_resume(&mut self.instance.store, p, &state, started)
            .map_err(trap)?
            .map_err(|e| resume_code(e.code).to_owned())?;
        let _ = s.resource_drop(&mut self.instance.store);
        self.scheduler = Some(resumed);
        Ok(unrestored
            .iter()
            .map(|u| format!("{} {}", u.call, unrestored_code(u.code)))
            .collect())
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
            tag: 0,
        };
        self.admission = iface
            .call_constructor(&mut self.instance.store, config)
            .ok();
    }

    fn begin(&mut self, id: &str, class: &str, parent: Option<u64>) -> Result<u64, String> {
        let class = match class {
            "call" => wa::Class::Call,
            "request" => wa::Class::Request,
            "control" => wa::Class::Control,
            "reentrant" => wa::Class::Reentrant,
            other => return Err(format!("unknown class {other}")),
        };
        self.adm_call(|i, st, a| i.call_begin(st, a, id, class, parent))
    }

    fn end_request(&mut self, ticket: u64) -> Result<(), String> {
        self.adm_call(|i, st, a| i.call_end(st, a, ticket))
    }

    fn abandon(&mut self, ticket: u64) -> Result<(), String> {
        self.adm_call(|i, st, a| i.call_abandon(st, a, ticket))
    }

    fn shutdown(&mut self) -> (Vec<u64>, Vec<u64>) {
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
            Err(_) => (vec![corpus::UNKNOWN], Vec::new()),
        }
    }

    fn admissions(&mut self) -> Vec<u64> {
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
            .unwrap_or_else(|_| vec![corpus::UNKNOWN])
    }
}

/// The corpus rendering of a tool policy.
pub(crate) fn tool_line(t: &wc::ToolPolicy) -> String {
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
            key: &c.key,
            limit: c.limit.unwrap_or(u32::MAX),
            delay_ms: c.delay_ms,
            rates,
            burst: c.burst,
            weight: c.weight,
            adapt_min: c.adapt_min,
            retries: c.retries,
            max_wait_ms: c.max_wait_ms,
            shared: c.shared,
            path: c.path.as_deref(),
        })
        .collect();
    corpus::tool_line(&t.name, &keys, t.fan_out, t.on_error == wc::OnError::Stop)
}

fn reason(r: &ws::Reason) -> (&'static str, Option<u32>) {
    match r {
        ws::Reason::Rejected => ("rejected", None),
        ws::Reason::Skipped => ("skipped", None),
        ws::Reason::Failed => ("failed", None),
        ws::Reason::Cancelled => ("cancelled", None),
        ws::Reason::Stopped(after) => ("stopped", Some(*after)),
        ws::Reason::Interrupted => ("interrupted", None),
        ws::Reason::RateLimited(retries) => ("rate-limited", Some(*retries)),
        ws::Reason::TimedOut(ws::AbortCause::Deadline) => ("timed-out deadline", None),
        ws::Reason::TimedOut(ws::AbortCause::Cancel) => ("timed-out cancel", None),
    }
}

fn cause(c: ws::AbortCause) -> &'static str {
    match c {
        ws::AbortCause::Deadline => "deadline",
        ws::AbortCause::Cancel => "cancel",
    }
}

/// A batch's time limits as `submit-batch` takes them.
pub(crate) fn wit_limits(l: LimitsSpec) -> ws::Limits {
    ws::Limits {
        execution_ms: l.execution_ms,
        abort_grace_ms: l.abort_grace_ms,
    }
}

/// The corpus's calls as `submit-batch` takes them, packed. A name with a newline cannot be
/// packed (the newline ends it): it is refused here as the component refuses a bad name.
pub(crate) fn wit_calls(calls: &[CallSpec]) -> Result<ws::Batch, String> {
    if calls
        .iter()
        .any(|c| c.id.contains('\n') || c.tool.contains('\n'))
    {
        return Err("invalid-id".to_owned());
    }
    Ok(pack(calls.iter().map(|c| {
        (
            c.id.as_str(),
            c.tool.as_str(),
            c.operations,
            c.arguments.as_deref(),
        )
    })))
}

/// Calls `(id, tool, operations, arguments)` in written order as `submit-batch` takes them:
/// every name followed by a newline (so a name with a newline in it reads as two), fan-outs
/// and arguments listed by call index.
pub fn pack<'a>(
    calls: impl IntoIterator<Item = (&'a str, &'a str, Option<u32>, Option<&'a str>)>,
) -> ws::Batch {
    let mut batch = ws::Batch {
        ids: String::new(),
        tools: String::new(),
        fan_outs: Vec::new(),
        arguments: Vec::new(),
    };
    for (i, (id, tool, operations, arguments)) in calls.into_iter().enumerate() {
        batch.ids.push_str(id);
        batch.ids.push('\n');
        batch.tools.push_str(tool);
        batch.tools.push('\n');
        let call = i as u32;
        if let Some(operations) = operations {
            batch.fan_outs.push(ws::FanOut { call, operations });
        }
        if let Some(json) = arguments {
            batch.arguments.push(ws::CallArguments {
                call,
                json: json.to_owned(),
            });
        }
    }
    batch
}

/// Ends in list order as `on-ended` takes them: the component applies a call's ok ends, then
/// its failed ones, then its rate limits, so a list in another order crosses as several calls,
/// each in that order, and every end still applies in the list's order.
pub(crate) fn wit_ends(ends: &[(u64, EndSpec)]) -> Vec<ws::Ends> {
    let empty = || ws::Ends {
        ok: Vec::new(),
        failed: Vec::new(),
        rate_limited: Vec::new(),
    };
    let mut out = Vec::new();
    let mut chunk = empty();
    let mut rank = 0;
    for &(entry, how) in ends {
        let r = match how {
            EndSpec::Ok => 0,
            EndSpec::Failed => 1,
            EndSpec::RateLimited(_) => 2,
        };
        if r < rank {
            out.push(std::mem::replace(&mut chunk, empty()));
        }
        rank = r;
        match how {
            EndSpec::Ok => chunk.ok.push(entry),
            EndSpec::Failed => chunk.failed.push(entry),
            EndSpec::RateLimited(until) => {
                chunk.rate_limited.push(ws::RateLimited { entry, until })
            }
        }
    }
    out.push(chunk);
    out
}

/// The round's lists as the corpus's actions, in the order the fields say to perform them.
pub(crate) fn releases_view(out: ws::Releases) -> ReleasesView {
    let mut actions = Vec::new();
    actions.extend(out.refused.iter().map(|r| ActionView::Refused(refusal(r))));
    actions.extend(out.abort.iter().map(|a| ActionView::Abort {
        entry: a.entry,
        cause: cause(a.cause).to_owned(),
    }));
    actions.extend(out.pause_store.iter().map(|p| ActionView::PauseStore {
        key: p.key.clone(),
        until: p.until,
    }));
    actions.extend(out.release.iter().map(|p| ActionView::Release {
        entry: p.entry,
        key: p.key.clone(),
    }));
    actions.extend(out.settled.iter().map(|st| {
        let (name, after) = reason(&st.reason);
        ActionView::Settled {
            entry: st.entry,
            reason: name.to_owned(),
            after,
            message: st.message.clone(),
        }
    }));
    actions.extend(out.acquire.iter().map(|p| ActionView::Acquire {
        entry: p.entry,
        key: p.key.clone(),
        limit: p.limit,
        delay_ms: p.delay_ms,
    }));
    actions.extend(out.start.iter().map(|&e| ActionView::Start(e)));
    actions.extend(out.retired.iter().map(|&b| ActionView::Retired(b)));
    ReleasesView {
        actions,
        wake_at: out.wake_at,
    }
}

/// A call that could not run: an error no case expects, so the case fails.
fn trapped(why: String) -> Vec<RefusalView> {
    vec![RefusalView {
        about: "trap".to_owned(),
        code: why,
    }]
}

fn diag(d: wc::Diagnostic) -> Diag {
    Diag {
        code: diagnostic_code(d.code).to_owned(),
        labels: d
            .labels
            .iter()
            .map(|l| (l.span.layer_name.clone(), l.span.line))
            .collect(),
        tools: d.tools,
        rendered: d.rendered,
    }
}

/// A trap where diagnostics were expected: a code no case expects.
fn trapped_diag(why: String) -> Diag {
    Diag {
        code: why,
        labels: Vec::new(),
        tools: Vec::new(),
        rendered: String::new(),
    }
}

fn refusal(r: &ws::Refusal) -> RefusalView {
    RefusalView {
        about: match &r.about {
            ws::About::Entry(n) => format!("entry {n}"),
            ws::About::Batch(b) => format!("batch {b}"),
            ws::About::Key(k) => format!("key {k}"),
            ws::About::Clock(t) => format!("clock {t}"),
        },
        code: input_code(r.code).to_owned(),
    }
}

pub(crate) fn inspect_line(st: &ws::EntryStatus) -> String {
    let (state, after) = match &st.state {
        ws::State::Pending => ("pending", None),
        ws::State::Approved => ("approved", None),
        ws::State::Acquiring => ("acquiring", None),
        ws::State::Granted => ("granted", None),
        ws::State::Running => ("running", None),
        ws::State::Asking => ("asking", None),
        ws::State::Aborted(ws::AbortCause::Deadline) => ("aborted deadline", None),
        ws::State::Aborted(ws::AbortCause::Cancel) => ("aborted cancel", None),
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
        ws::Wait::Behind(b) => WaitView::Behind {
            label: &b.label,
            key: &b.key,
        },
        ws::Wait::KeyPaused(k) => WaitView::KeyPaused {
            key: &k.key,
            until: k.until,
        },
        ws::Wait::KeySpacing(k) => WaitView::KeySpacing {
            key: &k.key,
            until: k.until,
        },
        ws::Wait::RetryAt(until) => WaitView::RetryAt { until: *until },
        ws::Wait::PermitRequested(key) => WaitView::PermitRequested(key),
        ws::Wait::PermitGranted(key) => WaitView::PermitGranted(key),
    });
    corpus::inspect_line(&st.label, state, after, wait)
}

pub(crate) fn submit_code(code: ws::SubmitErrorCode) -> &'static str {
    use ws::SubmitErrorCode as E;
    match code {
        E::EmptyBatch => "empty-batch",
        E::InvalidId => "invalid-id",
        E::DuplicateId => "duplicate-id",
        E::NotFanOut => "not-fan-out",
        E::InvalidOperations => "invalid-operations",
        E::TooLarge => "too-large",
        E::MalformedBatch => "malformed-batch",
    }
}

pub(crate) fn input_code(code: ws::RefusalCode) -> &'static str {
    use ws::RefusalCode as E;
    match code {
        E::UnknownEntry => "unknown-entry",
        E::UnknownBatch => "unknown-batch",
        E::AlreadyDecided => "already-decided",
        E::NotRunning => "not-running",
        E::NotAsking => "not-asking",
        E::AlreadyEnded => "already-ended",
        E::BatchCancelled => "batch-cancelled",
        E::TimeBackwards => "time-backwards",
        E::UnknownKey => "unknown-key",
        E::NotAcquiring => "not-acquiring",
        E::GivenUp => "given-up",
    }
}

fn resume_code(code: ws::ResumeErrorCode) -> &'static str {
    match code {
        ws::ResumeErrorCode::UnsupportedVersion => "unsupported-version",
        ws::ResumeErrorCode::TooLarge => "too-large",
    }
}

fn unrestored_code(code: ws::UnrestoredCode) -> &'static str {
    use ws::UnrestoredCode as E;
    match code {
        E::InvalidOperations => "invalid-operations",
        E::InvalidId => "invalid-id",
        E::DuplicateId => "duplicate-id",
        E::InvalidNumbers => "invalid-numbers",
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
        D::JsonSyntax => "json-syntax",
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
        D::ConcurrencyDelayConflict => "concurrency-delay-conflict",
        D::ConcurrencyRetriesConflict => "concurrency-retries-conflict",
        D::ConcurrencyKeyTemplate => "concurrency-key-template",
        D::ConcurrencySharedConflict => "concurrency-shared-conflict",
        D::UnknownFieldTypo => "unknown-field-typo",
        D::ConcurrencyMaxWaitConflict => "concurrency-max-wait-conflict",
        D::ConcurrencyRateConflict => "concurrency-rate-conflict",
        D::ConcurrencyBurstConflict => "concurrency-burst-conflict",
        D::BurstWithoutRate => "burst-without-rate",
        D::SharedRateOutOfRange => "shared-rate-out-of-range",
        D::ConcurrencyAdaptConflict => "concurrency-adapt-conflict",
        D::WeightWithoutRate => "weight-without-rate",
        D::WeightAboveBurst => "weight-above-burst",
        D::ConcurrencyKeyRepeated => "concurrency-key-repeated",
        D::SharedKeyInSet => "shared-key-in-set",
        D::AdaptiveKeysInSet => "adaptive-keys-in-set",
        D::PathKeyTerms => "path-key-terms",
        D::ConcurrencyPathConflict => "concurrency-path-conflict",
    }
}
