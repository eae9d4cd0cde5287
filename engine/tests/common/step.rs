//! The engine's inputs and outputs as one record each, for tests written as rounds: a round
//! applies its inputs in one fixed order (approvals, answers without running, grants, denials,
//! questions asked, questions answered, ends ok, ends failed, rate limits, cancellations,
//! pauses) through [`Scheduler::on_event`] and [`Scheduler::on_ended`], then calls
//! [`Scheduler::next_releases`] with its `now`. A refused input is found again by its list and
//! position, which the tests compare. Test support only: hosts call the three verbs.

#![allow(dead_code)] // each test binary uses part of it

use turnstile_engine::schedule::{
    AbortCause, About, BatchId, End, EntryId, HostSettle, Input, InputErrorCode, Reason, Refusal,
    Releases, Scheduler,
};

/// Which list of [`Inputs`] a refused input was in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum InputKind {
    Approve,
    Settle,
    Granted,
    Denied,
    Ask,
    Answer,
    Ok,
    Failed,
    Cancel,
    Now,
    Retry,
    Pause,
}

/// A refused input: its list, its position there, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InputError {
    pub(crate) input: InputKind,
    pub(crate) index: u32,
    pub(crate) code: InputErrorCode,
    pub(crate) message: String,
    /// What the engine said it was about.
    pub(crate) about: About,
}

/// One round's inputs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Inputs<'a> {
    pub(crate) now: Option<u64>,
    pub(crate) approve: &'a [EntryId],
    pub(crate) settle: &'a [(EntryId, HostSettle)],
    pub(crate) granted: &'a [EntryId],
    pub(crate) denied: &'a [EntryId],
    pub(crate) ask: &'a [EntryId],
    pub(crate) answer: &'a [EntryId],
    pub(crate) ok: &'a [EntryId],
    pub(crate) failed: &'a [EntryId],
    pub(crate) retry: &'a [(EntryId, u64)],
    pub(crate) cancel: &'a [BatchId],
    pub(crate) pause: &'a [(&'a str, u64)],
}

/// One round's output, by number.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Outputs {
    pub(crate) abort: Vec<(EntryId, AbortCause)>,
    /// Shared keys to pause at their store: `(key, until)`.
    pub(crate) pause_store: Vec<(String, u64)>,
    pub(crate) start: Vec<EntryId>,
    pub(crate) acquire: Vec<EntryId>,
    pub(crate) release: Vec<EntryId>,
    pub(crate) settle: Vec<(EntryId, Reason)>,
    pub(crate) errors: Vec<InputError>,
    pub(crate) retired: Vec<BatchId>,
    pub(crate) wake_at: Option<u64>,
    /// The engine's own output, with settlements' sentences and permits' terms.
    pub(crate) releases: Releases,
}

impl Outputs {
    /// Nothing to do and nothing refused.
    pub(crate) fn is_empty(&self) -> bool {
        self.start.is_empty()
            && self.abort.is_empty()
            && self.pause_store.is_empty()
            && self.acquire.is_empty()
            && self.release.is_empty()
            && self.settle.is_empty()
            && self.errors.is_empty()
            && self.retired.is_empty()
    }
}

/// A round: `step` on a scheduler.
pub(crate) trait Step {
    fn step(&mut self, inputs: &Inputs<'_>, out: &mut Outputs);
}

impl Step for Scheduler {
    fn step(&mut self, inputs: &Inputs<'_>, out: &mut Outputs) {
        let mut errors = Vec::new();
        let mut judge = |input: InputKind, index: usize, result: Result<(), Refusal>| {
            if let Err(r) = result {
                errors.push(InputError {
                    input,
                    index: index as u32,
                    code: r.code,
                    message: r.message,
                    about: r.about,
                });
            }
        };
        for (i, &e) in inputs.approve.iter().enumerate() {
            judge(InputKind::Approve, i, self.on_event(Input::Approve(e)));
        }
        for (i, &(e, how)) in inputs.settle.iter().enumerate() {
            judge(InputKind::Settle, i, self.on_event(Input::NotRun(e, how)));
        }
        for (i, &e) in inputs.granted.iter().enumerate() {
            judge(InputKind::Granted, i, self.on_event(Input::Granted(e)));
        }
        for (i, &e) in inputs.denied.iter().enumerate() {
            judge(InputKind::Denied, i, self.on_event(Input::Denied(e)));
        }
        for (i, &e) in inputs.ask.iter().enumerate() {
            judge(InputKind::Ask, i, self.on_event(Input::Ask(e)));
        }
        for (i, &e) in inputs.answer.iter().enumerate() {
            judge(InputKind::Answer, i, self.on_event(Input::Answer(e)));
        }
        for (i, &e) in inputs.ok.iter().enumerate() {
            judge(InputKind::Ok, i, self.on_ended(e, End::Ok));
        }
        for (i, &e) in inputs.failed.iter().enumerate() {
            judge(InputKind::Failed, i, self.on_ended(e, End::Failed));
        }
        for (i, &(e, until)) in inputs.retry.iter().enumerate() {
            judge(
                InputKind::Retry,
                i,
                self.on_ended(e, End::RateLimited(until)),
            );
        }
        for (i, &b) in inputs.cancel.iter().enumerate() {
            judge(InputKind::Cancel, i, self.on_event(Input::Cancel(b)));
        }
        for (i, &(key, until)) in inputs.pause.iter().enumerate() {
            judge(InputKind::Pause, i, self.on_event(Input::Pause(key, until)));
        }
        self.next_releases(inputs.now, &mut out.releases);
        let r = &out.releases;
        if let Some(refused) = &r.refused {
            errors.insert(
                0,
                InputError {
                    input: InputKind::Now,
                    index: 0,
                    code: refused.code,
                    message: refused.message.clone(),
                    about: refused.about.clone(),
                },
            );
        }
        out.errors = errors;
        out.start.clone_from(&r.start);
        out.abort = r.abort.iter().map(|a| (a.entry, a.cause)).collect();
        out.pause_store = r
            .pause_store
            .iter()
            .map(|p| (p.key.clone(), p.until))
            .collect();
        out.acquire = r.acquire.iter().map(|p| p.entry).collect();
        out.release = r.release.iter().map(|p| p.entry).collect();
        out.settle = r.settled.iter().map(|s| (s.entry, s.reason)).collect();
        out.retired.clone_from(&r.retired);
        out.wake_at = r.wake_at;
    }
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} input {}: {}: {}",
            self.input,
            self.index,
            self.code.as_str(),
            self.message
        )
    }
}
