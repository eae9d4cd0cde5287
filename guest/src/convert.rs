//! WIT types to engine types and back, by hand. Engine types know nothing of the boundary.

use turnstile_engine::admission::{
    self as engine_admission, AbandonErrorCode, AdmissionConfig, BeginErrorCode, EndErrorCode,
};
use turnstile_engine::config::{OnError, RateWindow, ToolPolicy};
use turnstile_engine::diagnostic::{self, Code, Diagnostic, Severity};
use turnstile_engine::retry_after::{RetryAfterError, RetryAfterErrorCode};
use turnstile_engine::schedule::{
    AbortCause, About, BatchId, EntryId, EntryStatus, HostSettle, Input, InputErrorCode, Limits,
    Outcome, Reason, Refusal, Releases, ResumeError, ResumeErrorCode, Saved, SavedBatch, SavedCall,
    SavedState, Started, State, SubmitError, SubmitErrorCode, Unrestored, UnrestoredCode, Wait,
};

use crate::wit_admission as wa;
use crate::wit_config as wc;
use crate::wit_scheduler as ws;

pub(crate) fn diagnostic(d: Diagnostic) -> wc::Diagnostic {
    wc::Diagnostic {
        code: diagnostic_code(d.code),
        severity: match d.severity {
            Severity::Error => wc::Severity::Error,
            Severity::Warning => wc::Severity::Warning,
        },
        message: d.message,
        path: d.path,
        tools: d.tools,
        labels: d.labels.into_iter().map(label).collect(),
        help: d.help,
        rendered: d.rendered,
    }
}

fn label(l: diagnostic::Label) -> wc::Label {
    wc::Label {
        span: wc::Span {
            layer: l.span.layer,
            layer_name: l.span.layer_name,
            start: l.span.start,
            end: l.span.end,
            line: l.span.line,
            column: l.span.column,
        },
        message: l.message,
    }
}

fn diagnostic_code(code: Code) -> wc::DiagnosticCode {
    use wc::DiagnosticCode as W;
    match code {
        Code::TomlSyntax => W::TomlSyntax,
        Code::JsonSyntax => W::JsonSyntax,
        Code::TooManyLayers => W::TooManyLayers,
        Code::TooLarge => W::TooLarge,
        Code::TooManyTools => W::TooManyTools,
        Code::TableType => W::TableType,
        Code::ConcurrencyType => W::ConcurrencyType,
        Code::ConcurrencyNegative => W::ConcurrencyNegative,
        Code::ConcurrencyKeyMissing => W::ConcurrencyKeyMissing,
        Code::ConcurrencyKeyEmpty => W::ConcurrencyKeyEmpty,
        Code::ConcurrencyUnknownField => W::ConcurrencyUnknownField,
        Code::ConcurrencyOnDefaults => W::ConcurrencyOnDefaults,
        Code::FanOutType => W::FanOutType,
        Code::FanOutOnDefaults => W::FanOutOnDefaults,
        Code::FanOutConcurrencyRemoved => W::FanOutConcurrencyRemoved,
        Code::FanOutOnErrorValue => W::FanOutOnErrorValue,
        Code::FanOutUnknownField => W::FanOutUnknownField,
        Code::ConcurrencyLimitConflict => W::ConcurrencyLimitConflict,
        Code::StopWithoutLimit => W::StopWithoutLimit,
        Code::EnableValue => W::EnableValue,
        Code::ConcurrencyDelayConflict => W::ConcurrencyDelayConflict,
        Code::ConcurrencyRetriesConflict => W::ConcurrencyRetriesConflict,
        Code::ConcurrencyKeyTemplate => W::ConcurrencyKeyTemplate,
        Code::ConcurrencySharedConflict => W::ConcurrencySharedConflict,
        Code::UnknownFieldTypo => W::UnknownFieldTypo,
        Code::ConcurrencyMaxWaitConflict => W::ConcurrencyMaxWaitConflict,
        Code::ConcurrencyRateConflict => W::ConcurrencyRateConflict,
        Code::ConcurrencyBurstConflict => W::ConcurrencyBurstConflict,
        Code::BurstWithoutRate => W::BurstWithoutRate,
        Code::SharedRateOutOfRange => W::SharedRateOutOfRange,
        Code::ConcurrencyAdaptConflict => W::ConcurrencyAdaptConflict,
        Code::WeightWithoutRate => W::WeightWithoutRate,
        Code::WeightAboveBurst => W::WeightAboveBurst,
        Code::ConcurrencyKeyRepeated => W::ConcurrencyKeyRepeated,
        Code::SharedKeyInSet => W::SharedKeyInSet,
        Code::AdaptiveKeysInSet => W::AdaptiveKeysInSet,
        Code::PathKeyTerms => W::PathKeyTerms,
        Code::ConcurrencyPathConflict => W::ConcurrencyPathConflict,
    }
}

/// The top-level argument names a key's calls read: its template's, then its path's, each once.
fn arguments(c: &turnstile_engine::config::Concurrency) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let templates = [c.key.template(), c.path.as_ref().and_then(|p| p.template())];
    for field in templates.into_iter().flatten().flat_map(|t| t.fields()) {
        if !names.contains(field) {
            names.push(field.clone());
        }
    }
    names
}

/// A rate window, out to the WIT's record ...
pub(crate) fn rate_out(w: &RateWindow) -> wc::RateWindow {
    wc::RateWindow {
        count: w.count,
        per_ms: w.per_ms,
        burst: w.burst,
    }
}

/// ... and in from it (the grant rule checks its ranges).
pub(crate) fn rate_in(w: wc::RateWindow) -> RateWindow {
    RateWindow {
        count: w.count,
        per_ms: w.per_ms,
        burst: w.burst,
    }
}

pub(crate) fn tool_policy(t: &ToolPolicy) -> wc::ToolPolicy {
    wc::ToolPolicy {
        name: t.name.clone(),
        concurrency: t
            .concurrency
            .iter()
            .map(|c| wc::Concurrency {
                key: c.key.as_str().to_owned(),
                limit: Some(c.limit.get()).filter(|&l| l != u32::MAX),
                delay_ms: c.delay_ms,
                rates: c.rates.iter().map(rate_out).collect(),
                burst: c.burst,
                weight: c.weight,
                retries: c.retries,
                max_wait_ms: c.max_wait_ms,
                arguments: arguments(c),
                shared: c.shared,
                adapt_min: c.adapt_min.map(std::num::NonZeroU32::get),
                path: c.path.as_ref().map(|p| p.as_str().to_owned()),
            })
            .collect(),
        fan_out: t.fan_out,
        on_error: match t.on_error {
            OnError::Continue => wc::OnError::Continue,
            OnError::Stop => wc::OnError::Stop,
        },
    }
}

fn not_run(how: ws::NotRun) -> HostSettle {
    match how {
        ws::NotRun::Rejected => HostSettle::Rejected,
        ws::NotRun::Skipped => HostSettle::Skipped,
        ws::NotRun::Failed => HostSettle::Failed,
    }
}

/// The engine's inputs an event stands for, in order: one, or one per entry of an `approve`.
pub(crate) fn for_each_input<'e>(e: &'e ws::Event, mut apply: impl FnMut(Input<'e>)) {
    let input = match e {
        ws::Event::Approve(entries) => {
            entries
                .iter()
                .for_each(|&n| apply(Input::Approve(EntryId(n))));
            return;
        }
        ws::Event::NotRun((n, how)) => Input::NotRun(EntryId(*n), not_run(*how)),
        ws::Event::Ask(n) => Input::Ask(EntryId(*n)),
        ws::Event::Answer(n) => Input::Answer(EntryId(*n)),
        ws::Event::Cancel(b) => Input::Cancel(BatchId(*b)),
        ws::Event::Pause(p) => Input::Pause(&p.key, p.until),
        ws::Event::LiftPause(key) => Input::LiftPause(key),
        ws::Event::Granted(n) => Input::Granted(EntryId(*n)),
        ws::Event::Denied(n) => Input::Denied(EntryId(*n)),
    };
    apply(input);
}

fn outcome_in(o: ws::Outcome) -> Outcome {
    match o {
        ws::Outcome::Ok => Outcome::Ok,
        ws::Outcome::Failed => Outcome::Failed,
    }
}

fn outcome_out(o: Outcome) -> ws::Outcome {
    match o {
        Outcome::Ok => ws::Outcome::Ok,
        Outcome::Failed => ws::Outcome::Failed,
    }
}

fn reason_out(r: Reason) -> ws::Reason {
    match r {
        Reason::Rejected => ws::Reason::Rejected,
        Reason::Skipped => ws::Reason::Skipped,
        Reason::Failed => ws::Reason::Failed,
        Reason::Cancelled => ws::Reason::Cancelled,
        Reason::Stopped { after } => ws::Reason::Stopped(after),
        Reason::Interrupted => ws::Reason::Interrupted,
        // The wait an endpoint asked for, when it was too long, is in the settlement's sentence.
        Reason::RateLimited { retries, .. } => ws::Reason::RateLimited(retries),
        Reason::TimedOut { cause } => ws::Reason::TimedOut(cause_out(cause)),
    }
}

fn cause_out(c: AbortCause) -> ws::AbortCause {
    match c {
        AbortCause::Deadline => ws::AbortCause::Deadline,
        AbortCause::Cancel => ws::AbortCause::Cancel,
    }
}

/// A batch's time limits.
pub(crate) fn limits_in(l: ws::Limits) -> Limits {
    Limits {
        execution_ms: l.execution_ms,
        abort_grace_ms: l.abort_grace_ms,
    }
}

fn limits_out(l: Limits) -> ws::Limits {
    ws::Limits {
        execution_ms: l.execution_ms,
        abort_grace_ms: l.abort_grace_ms,
    }
}

pub(crate) fn reason_in(r: ws::Reason) -> Reason {
    match r {
        ws::Reason::Rejected => Reason::Rejected,
        ws::Reason::Skipped => Reason::Skipped,
        ws::Reason::Failed => Reason::Failed,
        ws::Reason::Cancelled => Reason::Cancelled,
        ws::Reason::Stopped(after) => Reason::Stopped { after },
        ws::Reason::Interrupted => Reason::Interrupted,
        ws::Reason::RateLimited(retries) => Reason::RateLimited {
            retries,
            asked_s: None,
        },
        ws::Reason::TimedOut(cause) => Reason::TimedOut {
            cause: match cause {
                ws::AbortCause::Deadline => AbortCause::Deadline,
                ws::AbortCause::Cancel => AbortCause::Cancel,
            },
        },
    }
}

pub(crate) fn submit_error(e: SubmitError) -> ws::SubmitError {
    use SubmitErrorCode as E;
    use ws::SubmitErrorCode as W;
    ws::SubmitError {
        code: match e.code {
            E::EmptyBatch => W::EmptyBatch,
            E::InvalidId => W::InvalidId,
            E::DuplicateId => W::DuplicateId,
            E::NotFanOut => W::NotFanOut,
            E::InvalidOperations => W::InvalidOperations,
            E::TooLarge => W::TooLarge,
            E::MalformedBatch => W::MalformedBatch,
        },
        message: e.message,
    }
}

pub(crate) fn refusal(r: Refusal) -> ws::Refusal {
    use InputErrorCode as E;
    use ws::RefusalCode as W;
    ws::Refusal {
        about: match r.about {
            About::Entry(n) => ws::About::Entry(n),
            About::Batch(b) => ws::About::Batch(b),
            About::Key(k) => ws::About::Key(k),
            About::Clock(t) => ws::About::Clock(t),
        },
        code: match r.code {
            E::UnknownEntry => W::UnknownEntry,
            E::UnknownBatch => W::UnknownBatch,
            E::AlreadyDecided => W::AlreadyDecided,
            E::NotRunning => W::NotRunning,
            E::NotAsking => W::NotAsking,
            E::AlreadyEnded => W::AlreadyEnded,
            E::BatchCancelled => W::BatchCancelled,
            E::TimeBackwards => W::TimeBackwards,
            E::UnknownKey => W::UnknownKey,
            E::NotAcquiring => W::NotAcquiring,
            E::GivenUp => W::GivenUp,
        },
        message: r.message,
    }
}

/// The most actions one `releases` result carries (WIT `releases.more`).
pub(crate) const RELEASES_PART_MAX: usize = 1 << 16;

/// The most statuses one `inspect` result carries.
pub(crate) const INSPECT_PART_MAX: usize = 1 << 16;

/// How much of a round's output earlier parts carried: an offset into each list, in the
/// order of the fields; and whether an input changed the scheduler since the round was decided.
#[derive(Clone, Copy, Default)]
pub(crate) struct Sent {
    lists: [usize; 7],
    pub(crate) changed: bool,
}

/// The next part of the round's output from `sent` on: at most [`RELEASES_PART_MAX`]
/// actions, lists in order, `refused` in the first part and `wake-at` in the last. When an
/// input changed the scheduler between parts, the last part's `wake-at` is `now` (the clock as
/// last given), so the host's next call runs a round that sees it.
pub(crate) fn releases_part(out: &Releases, sent: &mut Sent, now: u64) -> ws::Releases {
    let first = sent.lists == [0; 7];
    let mut room = RELEASES_PART_MAX;
    let mut part = Part {
        sent,
        room: &mut room,
    };
    let abort = part.take(0, &out.abort, |a| ws::Abort {
        entry: a.entry.0,
        cause: cause_out(a.cause),
    });
    let pause_store = part.take(1, &out.pause_store, |p| ws::KeyPause {
        key: p.key.clone(),
        until: p.until,
    });
    let release = part.take(2, &out.release, |p| ws::Permit {
        entry: p.entry.0,
        key: p.key.clone(),
    });
    let settled = part.take(3, &out.settled, |s| ws::Settlement {
        entry: s.entry.0,
        reason: reason_out(s.reason),
        message: s.message.clone(),
    });
    let acquire = part.take(4, &out.acquire, |p| ws::PermitRequest {
        entry: p.entry.0,
        key: p.key.clone(),
        limit: p.limit,
        delay_ms: p.delay_ms,
        rates: p.rates.iter().map(rate_out).collect(),
        weight: p.weight,
    });
    let start = part.take(5, &out.start, |e| e.0);
    let retired = part.take(6, &out.retired, |b| b.0);
    let lens = [
        out.abort.len(),
        out.pause_store.len(),
        out.release.len(),
        out.settled.len(),
        out.acquire.len(),
        out.start.len(),
        out.retired.len(),
    ];
    let more = sent.lists != lens;
    debug_assert!(!more || room == 0, "a part ends early only when it is full");
    ws::Releases {
        refused: if first {
            out.refused.clone().map(refusal)
        } else {
            None
        },
        abort,
        pause_store,
        release,
        settled,
        acquire,
        start,
        retired,
        wake_at: match (more, sent.changed) {
            (true, _) => None,
            (false, true) => Some(out.wake_at.map_or(now, |w| w.min(now))),
            (false, false) => out.wake_at,
        },
        more,
    }
}

struct Part<'a> {
    sent: &'a mut Sent,
    room: &'a mut usize,
}

impl Part<'_> {
    /// The next items of list `i`, as many as the part has room for.
    fn take<T, U>(&mut self, i: usize, list: &[T], f: impl Fn(&T) -> U) -> Vec<U> {
        let at = self.sent.lists[i];
        let n = (list.len() - at).min(*self.room);
        self.sent.lists[i] += n;
        *self.room -= n;
        list[at..at + n].iter().map(f).collect()
    }
}

fn state_out(s: State) -> ws::State {
    match s {
        State::Pending => ws::State::Pending,
        State::Approved => ws::State::Approved,
        State::Acquiring => ws::State::Acquiring,
        State::Granted => ws::State::Granted,
        State::Running => ws::State::Running,
        State::Asking => ws::State::Asking,
        State::Aborted(c) => ws::State::Aborted(cause_out(c)),
        State::Ended(o) => ws::State::Ended(outcome_out(o)),
        State::Settled(r) => ws::State::Settled(reason_out(r)),
    }
}

pub(crate) fn entry_status(st: EntryStatus) -> ws::EntryStatus {
    ws::EntryStatus {
        entry: st.entry.0,
        label: st.label,
        tool: st.tool,
        keys: st.keys,
        why: st.why,
        state: state_out(st.state),
        wait: st.wait.map(|w| match w {
            Wait::BatchNotApproved { pending } => ws::Wait::BatchNotApproved(pending),
            Wait::KeyFull {
                key,
                limit,
                running,
            } => ws::Wait::KeyFull(ws::KeyFull {
                key,
                limit,
                running,
            }),
            Wait::Behind { label, key } => ws::Wait::Behind(ws::KeyBehind { label, key }),
            Wait::KeyPaused { key, until } => ws::Wait::KeyPaused(ws::KeyUntil { key, until }),
            Wait::KeySpacing { key, until } => ws::Wait::KeySpacing(ws::KeyUntil { key, until }),
            Wait::RetryAt { until } => ws::Wait::RetryAt(until),
            Wait::PermitRequested { key } => ws::Wait::PermitRequested(key),
            Wait::PermitGranted { key } => ws::Wait::PermitGranted(key),
        }),
    }
}

fn saved_out(s: Saved) -> ws::Saved {
    match s {
        Saved::Started => ws::Saved::Started,
        Saved::Ended(o) => ws::Saved::Ended(outcome_out(o)),
        Saved::Settled(r) => ws::Saved::Settled(reason_out(r)),
    }
}

fn saved_in(s: ws::Saved) -> Saved {
    match s {
        ws::Saved::Started => Saved::Started,
        ws::Saved::Ended(o) => Saved::Ended(outcome_in(o)),
        ws::Saved::Settled(r) => Saved::Settled(reason_in(r)),
    }
}

pub(crate) fn saved_state_out(s: SavedState) -> ws::SavedState {
    ws::SavedState {
        version: s.version,
        policy: s.policy,
        next_batch: s.next_batch,
        next_entry: s.next_entry,
        batches: s
            .batches
            .into_iter()
            .map(|b| ws::SavedBatch {
                batch: b.batch.0,
                first: b.first.0,
                cancelled: b.cancelled,
                limits: limits_out(b.limits),
                calls: b
                    .calls
                    .into_iter()
                    .map(|c| ws::SavedCall {
                        id: c.id,
                        tool: c.tool,
                        operations: c.operations,
                        keys: c.keys,
                        entries: c
                            .entries
                            .into_iter()
                            .map(|(operation, state)| ws::SavedEntry {
                                operation,
                                state: saved_out(state),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub(crate) fn saved_state_in(s: ws::SavedState) -> SavedState {
    SavedState {
        version: s.version,
        policy: s.policy,
        next_batch: s.next_batch,
        next_entry: s.next_entry,
        batches: s
            .batches
            .into_iter()
            .map(|b| SavedBatch {
                batch: BatchId(b.batch),
                first: EntryId(b.first),
                cancelled: b.cancelled,
                limits: limits_in(b.limits),
                calls: b
                    .calls
                    .into_iter()
                    .map(|c| SavedCall {
                        id: c.id,
                        tool: c.tool,
                        operations: c.operations,
                        keys: c.keys,
                        entries: c
                            .entries
                            .into_iter()
                            .map(|e| (e.operation, saved_in(e.state)))
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub(crate) fn started(s: ws::Started) -> Started {
    match s {
        ws::Started::RunAgain => Started::RunAgain,
        ws::Started::Interrupt => Started::Interrupt,
    }
}

pub(crate) fn unrestored(u: Unrestored) -> ws::Unrestored {
    use UnrestoredCode as E;
    use ws::UnrestoredCode as W;
    ws::Unrestored {
        batch: u.batch,
        call: u.call,
        code: match u.code {
            E::InvalidOperations => W::InvalidOperations,
            E::InvalidId => W::InvalidId,
            E::DuplicateId => W::DuplicateId,
            E::InvalidNumbers => W::InvalidNumbers,
        },
        message: u.message,
    }
}

pub(crate) fn resume_error(e: ResumeError) -> ws::ResumeError {
    ws::ResumeError {
        code: match e.code {
            ResumeErrorCode::UnsupportedVersion => ws::ResumeErrorCode::UnsupportedVersion,
            ResumeErrorCode::TooLarge => ws::ResumeErrorCode::TooLarge,
        },
        message: e.message,
    }
}

pub(crate) fn unfinished_stale(part: u32) -> ws::UnfinishedError {
    ws::UnfinishedError {
        code: ws::UnfinishedErrorCode::Stale,
        message: format!(
            "part {part} of an export: the scheduler changed since its part 0 was taken, or none was; take part 0 again"
        ),
    }
}

pub(crate) fn unfinished_out_of_range(part: u32, parts: usize) -> ws::UnfinishedError {
    ws::UnfinishedError {
        code: ws::UnfinishedErrorCode::OutOfRange,
        message: format!(
            "part {part} of an export of {parts} parts (they are 0 to {})",
            parts - 1
        ),
    }
}

pub(crate) fn admission_config(c: &wa::AdmissionConfig) -> AdmissionConfig {
    AdmissionConfig {
        max_concurrent: c.max_concurrent,
        allow_parallel: c.allow_parallel,
    }
}

pub(crate) fn class_out(c: engine_admission::Class) -> wa::Class {
    match c {
        engine_admission::Class::Call => wa::Class::Call,
        engine_admission::Class::Request => wa::Class::Request,
        engine_admission::Class::Control => wa::Class::Control,
        engine_admission::Class::Reentrant => wa::Class::Reentrant,
    }
}

pub(crate) fn retry_after_error(e: RetryAfterError) -> ws::RetryAfterError {
    ws::RetryAfterError {
        code: match e.code {
            RetryAfterErrorCode::Empty => ws::RetryAfterErrorCode::Empty,
            RetryAfterErrorCode::Malformed => ws::RetryAfterErrorCode::Malformed,
        },
        message: e.message,
    }
}

pub(crate) fn class(c: wa::Class) -> engine_admission::Class {
    use engine_admission::Class as C;
    match c {
        wa::Class::Call => C::Call,
        wa::Class::Request => C::Request,
        wa::Class::Control => C::Control,
        wa::Class::Reentrant => C::Reentrant,
    }
}

pub(crate) fn begin_code(c: BeginErrorCode) -> wa::ErrorCode {
    use BeginErrorCode as E;
    use wa::ErrorCode as W;
    match c {
        E::Shutdown => W::Shutdown,
        E::DuplicateRequest => W::DuplicateRequest,
        E::InvalidId => W::InvalidId,
        E::InvalidParent => W::InvalidParent,
        E::WouldDeadlock => W::WouldDeadlock,
        E::TooMany => W::TooMany,
    }
}

pub(crate) fn end_code(c: EndErrorCode) -> wa::ErrorCode {
    match c {
        EndErrorCode::UnknownRequest => wa::ErrorCode::UnknownRequest,
        EndErrorCode::NotAdmitted => wa::ErrorCode::NotAdmitted,
    }
}

pub(crate) fn abandon_code(c: AbandonErrorCode) -> wa::ErrorCode {
    match c {
        AbandonErrorCode::UnknownRequest => wa::ErrorCode::UnknownRequest,
        AbandonErrorCode::NotQueued => wa::ErrorCode::NotQueued,
    }
}

pub(crate) fn admission_error(code: wa::ErrorCode, message: String) -> wa::Error {
    wa::Error { code, message }
}
