//! WIT types to engine types and back, by hand. Engine types know nothing of the boundary.

use turnstile_engine::admission::{self as engine_admission, AdmissionConfig, AdmissionError};
use turnstile_engine::config::{OnError, ToolPolicy};
use turnstile_engine::diagnostic::{self, Code, Diagnostic};
use turnstile_engine::schedule::{
    self as engine, Call, EntryStatus, Finished, HostSettle, Outcome, Reason, Releases, Scheduler,
    State, Wait,
};

use crate::wit_admission as wa;
use crate::wit_config as wc;
use crate::wit_scheduler as ws;

pub(crate) fn diagnostic(d: Diagnostic) -> wc::Diagnostic {
    wc::Diagnostic {
        code: diagnostic_code(d.code),
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
        // `Code` is non-exhaustive for other crates; a new code must be added to the WIT.
        _ => W::TableType,
    }
}

pub(crate) fn tool_policy(t: &ToolPolicy) -> wc::ToolPolicy {
    wc::ToolPolicy {
        name: t.name.clone(),
        concurrency: t.concurrency.as_ref().map(|c| wc::Concurrency {
            key: c.key.as_str().to_owned(),
            limit: c.limit.get(),
        }),
        fan_out: t.fan_out,
        on_error: match t.on_error {
            OnError::Continue => wc::OnError::Continue,
            OnError::Stop => wc::OnError::Stop,
        },
    }
}

pub(crate) fn call_in(c: ws::Call) -> Call {
    Call {
        id: c.id,
        tool: c.tool,
        operations: c.operations,
        finished: c
            .finished
            .into_iter()
            .map(|f| Finished {
                operation: f.operation,
                failed: f.failed,
            })
            .collect(),
    }
}

pub(crate) fn call_out(c: Call) -> ws::Call {
    ws::Call {
        id: c.id,
        tool: c.tool,
        operations: c.operations,
        finished: c
            .finished
            .into_iter()
            .map(|f| ws::Finished {
                operation: f.operation,
                failed: f.failed,
            })
            .collect(),
    }
}

pub(crate) fn host_settle(how: ws::HostSettle) -> HostSettle {
    match how {
        ws::HostSettle::Rejected => HostSettle::Rejected,
        ws::HostSettle::Skipped => HostSettle::Skipped,
        ws::HostSettle::Failed => HostSettle::Failed,
    }
}

pub(crate) fn outcome(o: ws::Outcome) -> Outcome {
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

pub(crate) fn reason(r: Reason) -> ws::Reason {
    match r {
        Reason::Rejected => ws::Reason::Rejected,
        Reason::Skipped => ws::Reason::Skipped,
        Reason::Failed => ws::Reason::Failed,
        Reason::Cancelled => ws::Reason::Cancelled,
        Reason::Stopped { after } => ws::Reason::Stopped(after),
    }
}

pub(crate) fn releases(s: &Scheduler, r: Releases) -> ws::Releases {
    ws::Releases {
        start: r.start.into_iter().map(|e| s.label(e)).collect(),
        settle: r
            .settle
            .into_iter()
            .map(|(e, why)| ws::Settlement {
                entry: s.label(e),
                reason: reason(why),
            })
            .collect(),
    }
}

pub(crate) fn entry_status(st: EntryStatus) -> ws::EntryStatus {
    ws::EntryStatus {
        entry: st.label,
        tool: st.tool,
        key: st.key,
        state: match st.state {
            State::Pending => ws::State::Pending,
            State::Approved => ws::State::Approved,
            State::Running => ws::State::Running,
            State::Asking => ws::State::Asking,
            State::Ended(o) => ws::State::Ended(outcome_out(o)),
            State::Settled(r) => ws::State::Settled(reason(r)),
        },
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
            Wait::Behind(label) => ws::Wait::Behind(label),
        }),
    }
}

pub(crate) fn error(e: engine::Error) -> ws::Error {
    use engine::ErrorCode as E;
    use ws::ErrorCode as W;
    let code = match e.code {
        E::UnknownEntry => W::UnknownEntry,
        E::UnknownBatch => W::UnknownBatch,
        E::DuplicateId => W::DuplicateId,
        E::InvalidId => W::InvalidId,
        E::EmptyBatch => W::EmptyBatch,
        E::TooLarge => W::TooLarge,
        E::NotFanOut => W::NotFanOut,
        E::InvalidOperations => W::InvalidOperations,
        E::AlreadyDecided => W::AlreadyDecided,
        E::NotRunning => W::NotRunning,
        E::NotAsking => W::NotAsking,
        E::AlreadyEnded => W::AlreadyEnded,
        E::BatchCancelled => W::BatchCancelled,
        _ => W::InvalidId,
    };
    ws::Error {
        code,
        message: e.message,
    }
}

pub(crate) fn admission_config(c: wa::AdmissionConfig) -> AdmissionConfig {
    AdmissionConfig {
        max_concurrent: c.max_concurrent,
        allow_parallel: c.allow_parallel,
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

pub(crate) fn admission_error(e: AdmissionError) -> wa::Error {
    use engine_admission::AdmissionErrorCode as E;
    use wa::ErrorCode as W;
    let code = match e.code {
        E::Shutdown => W::Shutdown,
        E::DuplicateRequest => W::DuplicateRequest,
        E::UnknownRequest => W::UnknownRequest,
        E::InvalidId => W::InvalidId,
        E::InvalidParent => W::InvalidParent,
        E::WouldDeadlock => W::WouldDeadlock,
        E::NotAdmitted => W::NotAdmitted,
        E::NotQueued => W::NotQueued,
        E::TooMany => W::TooMany,
        _ => W::InvalidId,
    };
    wa::Error {
        code,
        message: e.message,
    }
}
