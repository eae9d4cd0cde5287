//! The tool-call scheduler of RFD 129, sans-IO.
//!
//! # Rules
//!
//! A **batch** is the calls of one model response, in written order; each operation of a
//! fanned-out call is its own **entry**, at its call's position (`[a, f(3 ops), c]` gives
//! `a, f#0, f#1, f#2, c`).
//!
//! 1. Nothing of a batch is released while any of its entries is pending (the approval
//!    barrier). Then its unkeyed entries are released together.
//! 2. A keyed entry is released when fewer than `limit` executions with its key are running and
//!    every earlier entry with that key, earlier batches first, has been released or settled.
//! 3. A slot is held from release until the execution ends, through any question it asks.
//! 4. Under `on_error = "stop"`, once an operation fails (ended failed, or settled failed before
//!    running) the approved operations behind it in the same call are settled as stopped.
//!    Other calls are never stopped.
//!
//! # Semantics, answered
//!
//! - *Is each key FIFO?* Yes: entries with one key start in (batch, written) order, whatever
//!   order approvals or ends arrive in. An earlier approved entry blocks every later one.
//! - *Can one saturated key block another?* No. Keys are independent of each other and of
//!   unkeyed entries.
//! - *What does cancelling do?* [`Scheduler::cancel_batch`] settles every pending or approved
//!   entry of the batch as cancelled. Running ones keep their slot until the host reports their
//!   end; nothing of that batch is released again.
//! - *Restart?* The host makes a fresh scheduler and submits [`Scheduler::unfinished`] again:
//!   entries whose execution ended or that were settled are carried as finished operations (or
//!   left out), the rest start over as pending and are released in written order again. No mark
//!   of an earlier release survives, which is what makes the restart-reorder bug (JP ticket
//!   0ya5qnf) impossible.
//! - *Maximums?* See [`crate::limits`]: `CALLS_PER_BATCH_MAX`, `OPERATIONS_PER_CALL_MAX`,
//!   `ENTRIES_MAX`, `NAME_BYTES_MAX`.
//!
//! # Call order
//!
//! Methods come in three kinds:
//!
//! - **inputs**: [`submit_batch`](Scheduler::submit_batch), [`approve`](Scheduler::approve),
//!   [`settle`](Scheduler::settle), [`begin_question`](Scheduler::begin_question),
//!   [`end_question`](Scheduler::end_question), [`on_ended`](Scheduler::on_ended),
//!   [`cancel_batch`](Scheduler::cancel_batch). Each either changes state and returns `Ok`, or
//!   returns an [`Error`] and changes nothing.
//! - **output**: [`next_releases`](Scheduler::next_releases) drains what to start and what was
//!   settled, each exactly once. Call it after every input (or after a group of inputs); within
//!   one input's output, entries are in (batch, written) order.
//! - **queries**: [`inspect`](Scheduler::inspect), [`unfinished`](Scheduler::unfinished),
//!   [`label`](Scheduler::label); they change nothing.

mod error;
mod inspect;
mod lifecycle;
mod names;

use std::collections::VecDeque;

pub use error::{Error, ErrorCode};
pub use inspect::{EntryStatus, Wait};
pub use lifecycle::{HostSettle, Outcome, Reason, State};

use crate::config::{OnError, Policy, ToolPolicy};
use crate::limits::{CALLS_PER_BATCH_MAX, ENTRIES_MAX, NAME_BYTES_MAX, OPERATIONS_PER_CALL_MAX};
use lifecycle::Event;
use names::{CallIds, FxHashMap};

/// One call of a batch, as the model wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// Unique within the scheduler; non-empty, at most `NAME_BYTES_MAX` bytes, no `#`.
    pub id: String,
    /// The configured tool name. A tool no layer configures is unbounded.
    pub tool: String,
    /// `None`: a plain call, one entry labelled `id`. `Some(n)`: a fan-out envelope of `n`
    /// operations, entries `id#0` .. `id#(n-1)`; the tool must fan out.
    pub operations: Option<u32>,
    /// Operations that already have a response from an earlier run (a restart). They are never
    /// released; a failed one still stops the operations behind it under `on_error = "stop"`.
    pub finished: Vec<Finished>,
}

impl Call {
    /// A plain call.
    pub fn plain(id: impl Into<String>, tool: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            tool: tool.into(),
            operations: None,
            finished: Vec::new(),
        }
    }

    /// A fan-out call of `n` operations.
    pub fn fan_out(id: impl Into<String>, tool: impl Into<String>, n: u32) -> Self {
        Self {
            operations: Some(n),
            ..Self::plain(id, tool)
        }
    }
}

/// An operation that already has a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finished {
    /// Zero-based operation index.
    pub operation: u32,
    /// Its response was an error (it counts as a failure for `on_error = "stop"`).
    pub failed: bool,
}

/// A batch, numbered from 1 in submission order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BatchId(pub u32);

/// An entry, numbered from 0 in (batch, written) order over the scheduler's lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntryId(pub u32);

/// What [`Scheduler::next_releases`] hands the host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Releases {
    /// Entries to start now.
    pub start: Vec<EntryId>,
    /// Entries the scheduler settled (cancelled, stopped), with why.
    pub settle: Vec<(EntryId, Reason)>,
}

impl Releases {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.start.is_empty() && self.settle.is_empty()
    }
}

/// 16 bytes: an entry is most of what a queued execution costs.
#[derive(Debug)]
struct Entry {
    call: u32,
    key: OptU32,
    state: State,
}

/// An `Option<u32>` in four bytes (`u32::MAX` is none; no count or index reaches it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OptU32(u32);

impl OptU32 {
    const NONE: Self = Self(u32::MAX);

    fn new(value: Option<u32>) -> Self {
        value.map_or(Self::NONE, |v| {
            debug_assert!(v != u32::MAX);
            Self(v)
        })
    }

    fn get(self) -> Option<u32> {
        (self != Self::NONE).then_some(self.0)
    }
}

/// A call; its id is in [`CallIds`] under the same number.
#[derive(Debug)]
struct CallRec {
    batch: u32,
    first: u32,
    count: u32,
    tool: u32,
    first_failed: OptU32,
    fan_out: bool,
    stop: bool,
}

/// A tool as submitted calls name it, with its policy resolved once.
#[derive(Debug)]
struct ToolRec {
    name: String,
    key: Option<u32>,
    fan_out: bool,
    stop: bool,
}

#[derive(Debug)]
struct BatchRec {
    first_call: u32,
    calls: u32,
    first_entry: u32,
    entries: u32,
    pending: u32,
    open: bool,
    cancelled: bool,
    keys: Vec<u32>,
}

#[derive(Debug)]
struct KeyRec {
    name: String,
    limit: u32,
    running: u32,
    /// Entries with this key that were not yet released or settled when last looked at, in
    /// (batch, written) order. Settled entries are dropped lazily when they reach the front.
    queue: VecDeque<u32>,
    dirty: bool,
}

/// The scheduler. See the [module docs](self) for the rules and the call order.
#[derive(Debug)]
pub struct Scheduler {
    policy: Policy,
    entries: Vec<Entry>,
    calls: Vec<CallRec>,
    ids: CallIds,
    tools: Vec<ToolRec>,
    tool_index: FxHashMap<String, u32>,
    batches: Vec<BatchRec>,
    keys: Vec<KeyRec>,
    key_index: FxHashMap<String, u32>,
    dirty: Vec<u32>,
    started: Vec<u32>,
    settled: Vec<u32>,
}

impl Scheduler {
    /// A scheduler for one validated policy. Tools the policy does not name are unbounded.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            entries: Vec::new(),
            calls: Vec::new(),
            ids: CallIds::default(),
            tools: Vec::new(),
            tool_index: FxHashMap::default(),
            batches: Vec::new(),
            keys: Vec::new(),
            key_index: FxHashMap::default(),
            dirty: Vec::new(),
            started: Vec::new(),
            settled: Vec::new(),
        }
    }

    /// Imports what [`Scheduler::unfinished`] exported (after a crash or a restart): a fresh
    /// scheduler with each batch submitted again, in order. What ended is kept as finished and
    /// never runs again; the rest starts pending.
    pub fn resume(policy: Policy, state: &[(BatchId, Vec<Call>)]) -> Result<Self, Error> {
        let mut scheduler = Self::new(policy);
        for (_, calls) in state {
            scheduler.submit_batch(calls)?;
        }
        Ok(scheduler)
    }

    /// The policy this scheduler was built from.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Adds a batch. Its entries start pending (finished operations excepted). Nothing of it is
    /// released until every entry is approved or settled.
    pub fn submit_batch(&mut self, calls: &[Call]) -> Result<BatchId, Error> {
        let total = self.check_batch(calls)?;
        let batch = u32::try_from(self.batches.len()).unwrap_or(u32::MAX);
        let mut rec = BatchRec {
            first_call: self.calls.len() as u32,
            calls: calls.len() as u32,
            first_entry: self.entries.len() as u32,
            entries: total,
            pending: 0,
            open: false,
            cancelled: false,
            keys: Vec::new(),
        };
        names::grow(&mut self.entries, total as usize);
        names::grow(&mut self.calls, calls.len());
        self.ids.reserve(calls.len());
        for call in calls {
            let tool = self.intern_tool(&call.tool);
            let (key, stop) = match self.tools.get(tool as usize) {
                Some(t) => (t.key, t.stop),
                None => (None, false),
            };
            if let Some(k) = key
                && !rec.keys.contains(&k)
            {
                rec.keys.push(k);
            }
            let call_no = self.calls.len() as u32;
            let count = call.operations.unwrap_or(1);
            let first = self.entries.len() as u32;
            let mut first_failed = None;
            for op in 0..count {
                let finished = call.finished.iter().find(|f| f.operation == op);
                let state = match finished {
                    Some(f) if f.failed => {
                        first_failed = first_failed.or(Some(op));
                        State::Ended(Outcome::Failed)
                    }
                    Some(_) => State::Ended(Outcome::Ok),
                    None => {
                        rec.pending += 1;
                        if let Some(k) = key
                            && let Some(key) = self.keys.get_mut(k as usize)
                        {
                            key.queue.push_back(first + op);
                        }
                        State::Pending
                    }
                };
                self.entries.push(Entry {
                    call: call_no,
                    key: OptU32::new(key),
                    state,
                });
            }
            let pushed = self.ids.push(&call.id);
            debug_assert_eq!(pushed, call_no);
            self.calls.push(CallRec {
                batch,
                first,
                count,
                tool,
                first_failed: OptU32::new(if stop { first_failed } else { None }),
                fan_out: call.operations.is_some(),
                stop,
            });
        }
        let open_now = rec.pending == 0;
        self.batches.push(rec);
        let mark = self.mark();
        if open_now {
            self.open_batch(batch);
        }
        self.finish_event(mark);
        Ok(BatchId(batch + 1))
    }

    /// [`Scheduler::submit_batch`] in a packed form that crosses a component boundary cheaply:
    /// call ids and tool names one per line (`\n`-separated, so neither may contain one), and
    /// one operation count per call, `0` for a plain call. No finished operations (a restart
    /// uses `submit_batch`).
    pub fn submit_packed(
        &mut self,
        ids: &str,
        tools: &str,
        operations: &[u32],
    ) -> Result<BatchId, Error> {
        if operations.len() > CALLS_PER_BATCH_MAX {
            return Err(Error::new(
                ErrorCode::TooLarge,
                format!(
                    "{} calls in one batch; at most {CALLS_PER_BATCH_MAX} are accepted",
                    operations.len()
                ),
            ));
        }
        let split = |text: &str| -> Vec<String> {
            if text.is_empty() {
                Vec::new()
            } else {
                text.split('\n').map(str::to_owned).collect()
            }
        };
        let (ids, tools) = (split(ids), split(tools));
        if ids.len() != operations.len() || tools.len() != operations.len() {
            return Err(Error::new(
                ErrorCode::InvalidOperations,
                format!(
                    "packed batch: {} ids, {} tools and {} operation counts; they must match",
                    ids.len(),
                    tools.len(),
                    operations.len()
                ),
            ));
        }
        let calls: Vec<Call> = ids
            .into_iter()
            .zip(tools)
            .zip(operations)
            .map(|((id, tool), &n)| Call {
                id,
                tool,
                operations: (n > 0).then_some(n),
                finished: Vec::new(),
            })
            .collect();
        self.submit_batch(&calls)
    }

    /// Approves a pending entry.
    pub fn approve(&mut self, entry: &str) -> Result<(), Error> {
        let e = self.find(entry)?;
        self.transition(e, Event::Approve)?;
        let mark = self.mark();
        self.decided(e);
        self.finish_event(mark);
        Ok(())
    }

    /// Settles a pending entry without running it: rejected, skipped, or failed before running.
    pub fn settle(&mut self, entry: &str, how: HostSettle) -> Result<(), Error> {
        let e = self.find(entry)?;
        self.transition(e, Event::Settle(how))?;
        let mark = self.mark();
        if how == HostSettle::Failed {
            self.record_failure(e);
        }
        self.touch_key(e);
        self.decided(e);
        self.finish_event(mark);
        Ok(())
    }

    /// A running execution asks a question; it keeps its slot.
    pub fn begin_question(&mut self, entry: &str) -> Result<(), Error> {
        let e = self.find(entry)?;
        self.transition(e, Event::Ask)
    }

    /// The question is answered and the tool runs on; it still holds its slot. A declined
    /// question ends the execution instead: report that with [`Scheduler::on_ended`].
    pub fn end_question(&mut self, entry: &str) -> Result<(), Error> {
        let e = self.find(entry)?;
        self.transition(e, Event::Answer)
    }

    /// Approves several pending entries in order, all or nothing: when one is unknown, not
    /// pending, or listed twice, nothing changes and the error names its position.
    pub fn approve_many<S: AsRef<str>>(&mut self, entries: &[S]) -> Result<(), Error> {
        let ids = self.check_many(
            entries
                .iter()
                .map(|s| (Target::Label(s.as_ref()), Event::Approve)),
        )?;
        self.apply_approvals(&ids);
        Ok(())
    }

    /// [`Scheduler::approve_many`] by entry id (see [`Scheduler::batch_entries`]).
    pub fn approve_ids(&mut self, entries: &[EntryId]) -> Result<(), Error> {
        let ids = self.check_many(entries.iter().map(|&e| (Target::Id(e), Event::Approve)))?;
        self.apply_approvals(&ids);
        Ok(())
    }

    /// Reports several ends in order, all or nothing, like [`Scheduler::approve_many`].
    pub fn on_ended_many<S: AsRef<str>>(&mut self, ends: &[(S, Outcome)]) -> Result<(), Error> {
        let ids = self.check_many(
            ends.iter()
                .map(|(s, outcome)| (Target::Label(s.as_ref()), Event::End(*outcome))),
        )?;
        self.apply_ends(ids.into_iter().zip(ends.iter().map(|(_, o)| *o)));
        Ok(())
    }

    /// [`Scheduler::on_ended_many`] by entry id.
    pub fn on_ended_ids(&mut self, ends: &[(EntryId, Outcome)]) -> Result<(), Error> {
        let ids = self.check_many(
            ends.iter()
                .map(|&(e, outcome)| (Target::Id(e), Event::End(outcome))),
        )?;
        self.apply_ends(ids.into_iter().zip(ends.iter().map(|&(_, o)| o)));
        Ok(())
    }

    /// The entries of a batch: ids `first .. first + count`, in written order. Hosts that keep
    /// the labels of a batch in written order can use the `*_ids` methods and skip labels.
    pub fn batch_entries(&self, batch: BatchId) -> Result<(EntryId, u32), Error> {
        let b = self.batch_index(batch)?;
        let rec = &self.batches[b as usize];
        Ok((EntryId(rec.first_entry), rec.entries))
    }

    fn apply_approvals(&mut self, ids: &[u32]) {
        let mark = self.mark();
        for &e in ids {
            self.set_state(e, Event::Approve);
            self.decided(e);
        }
        self.finish_event(mark);
    }

    fn apply_ends(&mut self, ends: impl Iterator<Item = (u32, Outcome)>) {
        let mark = self.mark();
        for (e, outcome) in ends {
            self.set_state(e, Event::End(outcome));
            self.ended(e, outcome);
        }
        self.finish_event(mark);
    }

    /// A running (or asking) execution ended; its slot is freed.
    pub fn on_ended(&mut self, entry: &str, outcome: Outcome) -> Result<(), Error> {
        let e = self.find(entry)?;
        self.transition(e, Event::End(outcome))?;
        let mark = self.mark();
        self.ended(e, outcome);
        self.finish_event(mark);
        Ok(())
    }

    /// The effects of an end: the slot is freed and a failure is recorded.
    fn ended(&mut self, e: u32, outcome: Outcome) {
        if let Some(k) = self.entry(e).key.get() {
            if let Some(key) = self.keys.get_mut(k as usize) {
                debug_assert!(key.running > 0);
                key.running = key.running.saturating_sub(1);
            }
            self.mark_dirty(k);
        }
        if outcome == Outcome::Failed {
            self.record_failure(e);
        }
    }

    /// Resolves every target and checks that its event is legal, applying them in order on a
    /// scratch copy of the states, so that an entry listed twice fails like its second
    /// application would. Changes nothing.
    fn check_many<'a>(
        &self,
        events: impl Iterator<Item = (Target<'a>, Event)>,
    ) -> Result<Vec<u32>, Error> {
        let mut scratch: FxHashMap<u32, State> = FxHashMap::default();
        let mut ids = Vec::with_capacity(events.size_hint().0);
        for (i, (target, event)) in events.enumerate() {
            let at = |e: Error| Error::new(e.code, format!("item {i}: {}", e.message));
            let e = match target {
                Target::Label(label) => self.find(label).map_err(at)?,
                Target::Id(id) if (id.0 as usize) < self.entries.len() => id.0,
                Target::Id(id) => return Err(at(Error::unknown_entry_id(id.0))),
            };
            let state = scratch.get(&e).copied().unwrap_or(self.entry(e).state);
            let next = lifecycle::next(state, event)
                .map_err(|ill| at(ill.error(&self.label(EntryId(e)))))?;
            scratch.insert(e, next);
            ids.push(e);
        }
        Ok(ids)
    }

    /// Cancels a batch: its pending and approved entries are settled as cancelled. Running
    /// entries still report their end, which frees their slots for other batches.
    pub fn cancel_batch(&mut self, batch: BatchId) -> Result<(), Error> {
        let b = self.batch_index(batch)?;
        let (first, count, cancelled) = match self.batches.get(b as usize) {
            Some(rec) => (rec.first_entry, rec.entries, rec.cancelled),
            None => return Err(unknown_batch(batch)),
        };
        if cancelled {
            return Err(Error::new(
                ErrorCode::BatchCancelled,
                format!("batch {} is already cancelled", batch.0),
            ));
        }
        let mark = self.mark();
        for e in first..first + count {
            if matches!(self.entry(e).state, State::Pending | State::Approved) {
                self.set_state(e, Event::Cancel);
                self.settled.push(e);
            }
        }
        let keys = match self.batches.get_mut(b as usize) {
            Some(rec) => {
                rec.cancelled = true;
                rec.pending = 0;
                rec.keys.clone()
            }
            None => Vec::new(),
        };
        for k in keys {
            self.mark_dirty(k);
        }
        self.finish_event(mark);
        Ok(())
    }

    /// Drains what to start and what was settled since the last call. Each entry appears at most
    /// once over the scheduler's lifetime.
    pub fn next_releases(&mut self) -> Releases {
        let start = std::mem::take(&mut self.started)
            .into_iter()
            .map(EntryId)
            .collect();
        let settle = std::mem::take(&mut self.settled)
            .into_iter()
            .map(|e| {
                let reason = match self.entry(e).state {
                    State::Settled(reason) => reason,
                    _ => Reason::Cancelled,
                };
                (EntryId(e), reason)
            })
            .collect();
        Releases { start, settle }
    }

    /// The label of an entry: `call` for a plain call, `call#i` for an operation.
    pub fn label(&self, entry: EntryId) -> String {
        let Some(e) = self.entries.get(entry.0 as usize) else {
            return String::new();
        };
        let Some(call) = self.calls.get(e.call as usize) else {
            return String::new();
        };
        let id = self.ids.id(e.call);
        if call.fan_out {
            format!("{id}#{}", entry.0 - call.first)
        } else {
            id.to_owned()
        }
    }

    /// The current state of an entry.
    pub fn state(&self, entry: EntryId) -> Option<State> {
        self.entries.get(entry.0 as usize).map(|e| e.state)
    }

    /// Every batch that still has calls without a response, with those calls as they should be
    /// submitted to a fresh scheduler after a restart (cancelled batches are left out: every
    /// call of theirs gets the cancellation response).
    pub fn unfinished(&self) -> Vec<(BatchId, Vec<Call>)> {
        let mut out = Vec::new();
        for (b, batch) in self.batches.iter().enumerate() {
            if batch.cancelled {
                continue;
            }
            let mut calls = Vec::new();
            for c in batch.first_call..batch.first_call + batch.calls {
                let Some(call) = self.calls.get(c as usize) else {
                    continue;
                };
                let states = (call.first..call.first + call.count).map(|e| self.entry(e).state);
                if !states.clone().any(State::lacks_response) {
                    continue;
                }
                let finished = states
                    .enumerate()
                    .filter(|(_, s)| !s.lacks_response())
                    .map(|(op, s)| Finished {
                        operation: op as u32,
                        failed: s.is_failure(),
                    })
                    .collect();
                calls.push(Call {
                    id: self.ids.id(c).to_owned(),
                    tool: self.tool_name(call.tool).to_owned(),
                    operations: call.fan_out.then_some(call.count),
                    finished,
                });
            }
            if !calls.is_empty() {
                out.push((BatchId(b as u32 + 1), calls));
            }
        }
        out
    }

    // ---- internals -------------------------------------------------------------------------

    /// The tool's number, resolving its policy the first time a call names it.
    fn intern_tool(&mut self, name: &str) -> u32 {
        if let Some(&t) = self.tool_index.get(name) {
            return t;
        }
        let policy = self
            .policy
            .tool(name)
            .cloned()
            .unwrap_or_else(|| ToolPolicy::unconfigured(name));
        let key = policy
            .concurrency
            .as_ref()
            .map(|c| self.intern_key(c.key.as_str().to_owned(), c.limit.get()));
        let t = self.tools.len() as u32;
        self.tools.push(ToolRec {
            name: name.to_owned(),
            key,
            fan_out: policy.fan_out,
            stop: policy.on_error == OnError::Stop,
        });
        self.tool_index.insert(name.to_owned(), t);
        t
    }

    fn tool_name(&self, tool: u32) -> &str {
        self.tools
            .get(tool as usize)
            .map_or("", |t| t.name.as_str())
    }

    /// Validates a batch completely before anything changes. Returns its entry count.
    fn check_batch(&self, calls: &[Call]) -> Result<u32, Error> {
        if calls.is_empty() {
            return Err(Error::new(
                ErrorCode::EmptyBatch,
                "a batch needs at least one call".to_owned(),
            ));
        }
        if calls.len() > CALLS_PER_BATCH_MAX {
            return Err(Error::new(
                ErrorCode::TooLarge,
                format!(
                    "{} calls in one batch; at most {CALLS_PER_BATCH_MAX} are accepted",
                    calls.len()
                ),
            ));
        }
        let mut ids: FxHashMap<&str, ()> = FxHashMap::default();
        ids.reserve(calls.len());
        let mut total: u64 = 0;
        for call in calls {
            check_name("call id", &call.id, true)?;
            check_name("tool name", &call.tool, false)?;
            if self.ids.get(&call.id).is_some() || ids.insert(&call.id, ()).is_some() {
                return Err(Error::new(
                    ErrorCode::DuplicateId,
                    format!("call id {:?} is already used", call.id),
                ));
            }
            let fan_out = match self.tool_index.get(call.tool.as_str()) {
                Some(&t) => self.tools.get(t as usize).is_some_and(|t| t.fan_out),
                None => self.policy.tool(&call.tool).is_some_and(|t| t.fan_out),
            };
            let count = match call.operations {
                None => {
                    if !call.finished.is_empty() {
                        return Err(Error::new(
                            ErrorCode::InvalidOperations,
                            format!(
                                "call {:?} is a plain call; only operations can be finished",
                                call.id
                            ),
                        ));
                    }
                    1
                }
                Some(_) if !fan_out => {
                    return Err(Error::new(
                        ErrorCode::NotFanOut,
                        format!(
                            "call {:?} has operations, but tool {:?} does not fan out",
                            call.id, call.tool
                        ),
                    ));
                }
                Some(0) => {
                    return Err(Error::new(
                        ErrorCode::InvalidOperations,
                        format!(
                            "call {:?} has zero operations; submit an envelope the tool cannot \
                             split as a plain call and settle it as failed",
                            call.id
                        ),
                    ));
                }
                Some(n) if n > OPERATIONS_PER_CALL_MAX => {
                    return Err(Error::new(
                        ErrorCode::TooLarge,
                        format!(
                            "call {:?} has {n} operations; at most {OPERATIONS_PER_CALL_MAX} are \
                             accepted",
                            call.id
                        ),
                    ));
                }
                Some(n) => {
                    let mut seen = Vec::with_capacity(call.finished.len());
                    for f in &call.finished {
                        if f.operation >= n || seen.contains(&f.operation) {
                            return Err(Error::new(
                                ErrorCode::InvalidOperations,
                                format!(
                                    "call {:?}: finished operation {} is outside 0..{n} or \
                                     listed twice",
                                    call.id, f.operation
                                ),
                            ));
                        }
                        seen.push(f.operation);
                    }
                    n
                }
            };
            total += u64::from(count);
        }
        if self.entries.len() as u64 + total > ENTRIES_MAX as u64 {
            return Err(Error::new(
                ErrorCode::TooLarge,
                format!("this scheduler would hold more than {ENTRIES_MAX} entries"),
            ));
        }
        Ok(total as u32)
    }

    fn intern_key(&mut self, name: String, limit: u32) -> u32 {
        if let Some(&k) = self.key_index.get(&name) {
            return k;
        }
        let k = self.keys.len() as u32;
        self.key_index.insert(name.clone(), k);
        self.keys.push(KeyRec {
            name,
            limit,
            running: 0,
            queue: VecDeque::new(),
            dirty: false,
        });
        k
    }

    /// Finds an entry by label. Labels are `call` or `call#i`.
    fn find(&self, label: &str) -> Result<u32, Error> {
        let unknown = || {
            Error::new(
                ErrorCode::UnknownEntry,
                format!("no entry is labelled {label:?}"),
            )
        };
        let (id, op) = match label.rsplit_once('#') {
            Some((id, op)) => (id, Some(op.parse::<u32>().map_err(|_| unknown())?)),
            None => (label, None),
        };
        let c = self.ids.get(id).ok_or_else(unknown)?;
        let call = self.calls.get(c as usize).ok_or_else(unknown)?;
        match (call.fan_out, op) {
            (false, None) => Ok(call.first),
            (true, Some(op)) if op < call.count => Ok(call.first + op),
            (true, None) => Err(Error::new(
                ErrorCode::UnknownEntry,
                format!(
                    "{label:?} is a fan-out call; name an operation, {label}#0 to {label}#{}",
                    call.count - 1
                ),
            )),
            _ => Err(unknown()),
        }
    }

    fn batch_index(&self, batch: BatchId) -> Result<u32, Error> {
        match batch.0.checked_sub(1) {
            Some(b) if (b as usize) < self.batches.len() => Ok(b),
            _ => Err(unknown_batch(batch)),
        }
    }

    fn entry(&self, e: u32) -> &Entry {
        // `e` always comes from `find` or from our own records.
        &self.entries[e as usize]
    }

    /// Applies a host event, or returns the error and changes nothing.
    fn transition(&mut self, e: u32, event: Event) -> Result<(), Error> {
        let state = self.entry(e).state;
        match lifecycle::next(state, event) {
            Ok(next) => {
                self.entries[e as usize].state = next;
                Ok(())
            }
            Err(illegal) => Err(illegal.error(&self.label(EntryId(e)))),
        }
    }

    /// Applies an event the scheduler decided; its legality is our invariant.
    fn set_state(&mut self, e: u32, event: Event) {
        let entry = &mut self.entries[e as usize];
        let next = lifecycle::next(entry.state, event);
        debug_assert!(next.is_ok(), "illegal internal transition {event:?}");
        if let Ok(state) = next {
            entry.state = state;
        }
    }

    fn mark(&self) -> (usize, usize) {
        (self.started.len(), self.settled.len())
    }

    /// Runs the key walks an event made necessary and orders this event's output.
    fn finish_event(&mut self, mark: (usize, usize)) {
        while let Some(k) = self.dirty.pop() {
            if let Some(key) = self.keys.get_mut(k as usize) {
                key.dirty = false;
            }
            self.walk(k);
        }
        // Within one input, output is in (batch, written) order; it usually already is.
        if let Some(tail) = self.started.get_mut(mark.0..)
            && !tail.is_sorted()
        {
            tail.sort_unstable();
        }
        if let Some(tail) = self.settled.get_mut(mark.1..)
            && !tail.is_sorted()
        {
            tail.sort_unstable();
        }
    }

    fn mark_dirty(&mut self, k: u32) {
        if let Some(key) = self.keys.get_mut(k as usize)
            && !key.dirty
        {
            key.dirty = true;
            self.dirty.push(k);
        }
    }

    fn touch_key(&mut self, e: u32) {
        if let Some(k) = self.entry(e).key.get() {
            self.mark_dirty(k);
        }
    }

    /// An entry left `pending`: count it against the barrier and open the batch at zero.
    fn decided(&mut self, e: u32) {
        let b = self.calls[self.entry(e).call as usize].batch;
        let rec = &mut self.batches[b as usize];
        debug_assert!(rec.pending > 0);
        rec.pending = rec.pending.saturating_sub(1);
        if rec.pending == 0 && !rec.cancelled {
            self.open_batch(b);
        }
    }

    /// The barrier fell: stop what is behind a failure, release every unkeyed approved entry,
    /// and let each key walk.
    fn open_batch(&mut self, b: u32) {
        let (first, count, keys) = {
            let rec = &mut self.batches[b as usize];
            debug_assert!(!rec.open && rec.pending == 0);
            rec.open = true;
            (rec.first_entry, rec.entries, rec.keys.clone())
        };
        for e in first..first + count {
            if self.entry(e).state != State::Approved {
                continue;
            }
            if let Some(after) = self.stopped_by(e) {
                self.set_state(e, Event::Stop { after });
                self.settled.push(e);
            } else if self.entry(e).key.get().is_none() {
                self.release(e);
            }
        }
        for k in keys {
            self.mark_dirty(k);
        }
    }

    /// The one-based position of the failure that stops this entry, if one does.
    fn stopped_by(&self, e: u32) -> Option<u32> {
        let call = &self.calls[self.entry(e).call as usize];
        let failed = call.first_failed.get()?;
        (call.stop && e - call.first > failed).then_some(failed + 1)
    }

    /// Records a failure for `on_error = "stop"` and, once the batch is open, settles the
    /// approved operations behind it.
    fn record_failure(&mut self, e: u32) {
        let c = self.entry(e).call as usize;
        let (pos, prev, first, count, batch) = {
            let call = &self.calls[c];
            if !call.stop {
                return;
            }
            (
                e - call.first,
                call.first_failed.get(),
                call.first,
                call.count,
                call.batch,
            )
        };
        if prev.is_some_and(|p| p <= pos) {
            return;
        }
        self.calls[c].first_failed = OptU32::new(Some(pos));
        let rec = &self.batches[batch as usize];
        if !rec.open || rec.cancelled {
            return;
        }
        // Behind the previous failure everything approved was already stopped.
        let end = prev.map_or(count, |p| p + 1).min(count);
        for op in pos + 1..end {
            let e = first + op;
            if self.entry(e).state == State::Approved {
                self.set_state(e, Event::Stop { after: pos + 1 });
                self.settled.push(e);
            }
        }
        self.touch_key(e);
    }

    fn release(&mut self, e: u32) {
        self.set_state(e, Event::Release);
        if let Some(k) = self.entry(e).key.get()
            && let Some(key) = self.keys.get_mut(k as usize)
        {
            key.running += 1;
            debug_assert!(key.running <= key.limit, "limit exceeded on {}", key.name);
        }
        self.started.push(e);
    }

    /// Releases from the front of a key's queue while there is room (rule 2).
    fn walk(&mut self, k: u32) {
        loop {
            let Some(key) = self.keys.get(k as usize) else {
                return;
            };
            let Some(&e) = key.queue.front() else {
                return;
            };
            let room = key.running < key.limit;
            let entry = self.entry(e);
            match entry.state {
                State::Pending => return,
                State::Approved => {
                    let batch = self.calls[entry.call as usize].batch;
                    if !self.batches[batch as usize].open || !room {
                        return;
                    }
                    self.release(e);
                }
                _ => {}
            }
            if let Some(key) = self.keys.get_mut(k as usize) {
                key.queue.pop_front();
            }
        }
    }
}

/// An entry named by label or by id.
#[derive(Clone, Copy)]
enum Target<'a> {
    Label(&'a str),
    Id(EntryId),
}

fn unknown_batch(batch: BatchId) -> Error {
    Error::new(
        ErrorCode::UnknownBatch,
        format!("no batch has id {}", batch.0),
    )
}

fn check_name(what: &str, name: &str, call_id: bool) -> Result<(), Error> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX || (call_id && name.contains('#')) {
        return Err(Error::new(
            ErrorCode::InvalidId,
            format!(
                "{what} {:?} must be 1 to {NAME_BYTES_MAX} bytes{}",
                truncate(name),
                if call_id { " without '#'" } else { "" }
            ),
        ));
    }
    Ok(())
}

fn truncate(s: &str) -> &str {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
