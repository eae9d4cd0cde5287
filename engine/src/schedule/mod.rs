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
//!    An entry of a key set needs that on every key of its set, and takes them all at once
//!    (`key_set.rs`).
//! 3. A slot is held from release until the execution ends, through any question it asks.
//! 4. Under `on_error = "stop"`, once an operation fails (ended failed, or settled failed before
//!    running) the approved operations behind it in the same call are settled as stopped.
//!    Other calls are never stopped (`stop.rs`).
//! 5. A key with a `delay` starts its entries at least that many milliseconds apart, and a
//!    paused key starts nothing before its pause ends. Time is the host's `now`; the output
//!    says when to wake the scheduler next. An execution that hit a rate limit (`retry`) goes
//!    back to its place at the front of its key's queue and runs again after the pause, up to
//!    its key's retry cap (`time.rs`).
//!
//! # Semantics, answered
//!
//! - *Is each key FIFO?* Yes: entries with one key start in (batch, written) order, whatever
//!   order approvals or ends arrive in. An earlier approved entry blocks every later one.
//! - *Can one saturated key block another?* Not by itself: keys are independent of each other
//!   and of unkeyed entries. An entry of a key set waiting on one of its keys does hold back
//!   the later entries of its other keys, which may not overtake it (written order per key).
//! - *When do unkeyed entries start?* In the round after their batch's barrier falls (or their
//!   wait after a rate limit ends), not inside the input that let them: an input later in the
//!   same round (a cancellation, a failure that stops them) reaches them first.
//! - *What does cancelling do?* A cancellation settles every pending or approved entry of the
//!   batch as cancelled and aborts the running ones ([`Action::Abort`]). They keep their slot
//!   until the host reports their end, or until the batch's abort grace gives up on them
//!   (`deadline.rs`); nothing of that batch is released again.
//! - *Deadlines?* The host says how long ([`Limits`], per batch), the scheduler says when: an
//!   execution that ran its batch's limit is aborted, and with an abort grace an aborted one
//!   that has not ended in time is settled `timed-out` with its slot freed (`deadline.rs`).
//! - *When is a batch forgotten?* In the [`next_releases`](Scheduler::next_releases) whose
//!   output gives its last entry a response: it is listed in [`Releases::retired`], its entry
//!   and batch numbers are unknown from then on (numbers are never handed out twice), its call
//!   ids may be used again, and its memory is reused by later batches.
//! - *Restart?* [`Scheduler::unfinished`] exports every live batch; [`Scheduler::resume`]
//!   rebuilds them with the same numbers in a fresh scheduler (`restart.rs`). No mark of an
//!   earlier release survives, which is what makes the restart-reorder bug (JP ticket 0ya5qnf)
//!   impossible.
//! - *Maximums?* See [`crate::limits`]: `CALLS_PER_BATCH_MAX`, `OPERATIONS_PER_CALL_MAX`,
//!   `ENTRIES_MAX` (live entries), `NAME_BYTES_MAX`.
//!
//! # Call order
//!
//! The methods come in three kinds, called in any order (quinn-proto's `handle_*` / `poll_*`):
//!
//! - Inputs, each applied the moment it arrives and judged on its own (a refused one is
//!   returned as a [`Refusal`] naming its entry, batch or key, and changed nothing):
//!   [`submit_batch`](Scheduler::submit_batch) adds a batch and numbers it (nothing of it can
//!   start yet); [`on_ended`](Scheduler::on_ended) reports an execution's end;
//!   [`on_event`](Scheduler::on_event) every other [`Input`].
//! - The round: [`next_releases`](Scheduler::next_releases) moves the clock, runs the walks
//!   the inputs made necessary and fills [`Releases`]: what to abort, give back, settle, ask for
//!   and start, which batches retired, and when to call it again. [`Releases::actions`] is the
//!   order to perform them.
//! - Queries change nothing: [`label`](Scheduler::label), [`inspect`](Scheduler::inspect),
//!   [`unfinished`](Scheduler::unfinished).

mod adapt;
mod batch;
mod deadline;
mod effects;
mod error;
pub mod explain;
mod inspect;
mod key_set;
mod keys;
mod layout;
mod lifecycle;
mod names;
mod packed;
mod parts;
mod path_key;
pub(crate) mod rate;
mod restart;
mod shared;
mod stale_heap;
mod stop;
mod time;

pub use batch::Call;
pub use deadline::Limits;
pub use error::{
    About, InputErrorCode, Refusal, ResumeError, ResumeErrorCode, SubmitError, SubmitErrorCode,
    Unrestored, UnrestoredCode,
};
pub use inspect::{EntryStatus, Wait};
pub use lifecycle::{AbortCause, HostSettle, Outcome, Reason, Saved, State};
pub use packed::unpack;
pub use parts::{CALL_WEIGHT, PART_WEIGHT_MAX};
pub use restart::{SAVED_VERSION, SavedBatch, SavedCall, SavedState, Started, fingerprint};

use crate::config::{Policy, RateWindow};
use crate::limits::{ARGUMENTS_BYTES_MAX, ENTRIES_MAX};
use batch::Batches;
use keys::Keys;
use lifecycle::{HostEvent, SchedulerEvent};
use names::{FxHashMap, id_hash};
use stale_heap::StaleHeap;
use time::Timer;

/// Sorts numbers, unless they already are (the usual case). One instantiation of the sort
/// serves every output, which keeps the component small.
fn sort(v: &mut [u64]) {
    if !v.is_sorted() {
        v.sort_unstable();
    }
}

/// What a key's walk does with one queued entry ([`Scheduler::turn`]).
enum Turn {
    /// It must wait, and so does everything behind it.
    Wait,
    /// It may go: released (a local key) or handed out for a permit (a shared key).
    Go(u32, u32),
    /// It needs nothing from the walk (answered, running, or waiting for a permit).
    Pass,
}

/// A batch's number: never handed out twice by one scheduler (nor by one resumed from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BatchId(pub u64);

/// An entry's number, in (batch, written) order; never handed out twice. Transparent over its
/// `u64`, so a host's list of numbers can be viewed as entries without a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct EntryId(pub u64);

/// A batch as [`Scheduler::submit_batch`] numbered it: entries `first .. first + count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submitted {
    /// The batch.
    pub batch: BatchId,
    /// Its first entry.
    pub first: EntryId,
    /// How many entries it has.
    pub count: u32,
}

/// One input of the host's other than an execution's end ([`Scheduler::on_event`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input<'a> {
    /// A pending entry the user approved.
    Approve(EntryId),
    /// A pending entry the host answers without running it.
    NotRun(EntryId, HostSettle),
    /// A running execution asked a question; it keeps its slot.
    Ask(EntryId),
    /// Its question was answered; the tool runs on. A declined question is an end.
    Answer(EntryId),
    /// A batch to cancel: its pending, approved and permit-waiting entries are settled as
    /// cancelled; running ones still report their end.
    Cancel(BatchId),
    /// Pause a key, by name, until a time (a pause only ever extends).
    Pause(&'a str, u64),
    /// Lift the pauses the host set on a key, by name; a pause from a rate limit stays.
    LiftPause(&'a str),
    /// The store granted the permit of an entry that was in an [`Action::Acquire`]; it starts
    /// in written order.
    Granted(EntryId),
    /// The store could not grant it, or the granted permit was lost before the entry started:
    /// settled `failed` without running, and given no [`Action::Release`].
    Denied(EntryId),
}

/// How an execution ended ([`Scheduler::on_ended`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// With a result.
    Ok,
    /// With an error.
    Failed,
    /// It hit a rate limit and may run again at this time (the host's clock, from
    /// `Retry-After`): its slot is freed, its key pauses until then, and it goes back to the
    /// front of its key's queue; past the key's retry cap it is settled `rate-limited`. An
    /// execution of a key set does this on every key of its set, with the smallest cap and
    /// maximum wait of its keys.
    RateLimited(u64),
}

/// A permit (or a request for one) to give back to a shared key's store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permit {
    /// The entry it was for.
    pub entry: EntryId,
    /// The shared key.
    pub key: String,
}

/// A permit to ask a shared key's store for, with the terms the store keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PermitRequest {
    /// The entry it is for.
    pub entry: EntryId,
    /// The shared key.
    pub key: String,
    /// At most this many permits at once across processes; `None` is unbounded.
    pub limit: Option<u32>,
    /// Milliseconds between consecutive starts across processes.
    pub delay_ms: u32,
    /// Rate windows the store keeps across processes (each window once).
    pub rates: Vec<RateWindow>,
    /// Units the entry's start costs in each rate window: its tool's weight (1 without rate
    /// windows).
    pub weight: u32,
}

/// A shared key's pause to set at its store ([`Action::PauseStore`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPause {
    /// The shared key, by name (configured, or made from a template).
    pub key: String,
    /// Its pause ends at this time (the host's clock); the store keeps the longest pause.
    pub until: u64,
}

/// An entry the scheduler settled, with the sentence for its response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settlement {
    /// The entry.
    pub entry: EntryId,
    /// Why.
    pub reason: Reason,
    /// What to show a user or hand back to the model ("not run: the batch was cancelled").
    pub message: String,
}

/// An execution the host must stop ([`Action::Abort`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Abort {
    /// The entry whose execution to stop; report its end with [`Scheduler::on_ended`].
    pub entry: EntryId,
    /// Its deadline passed, or its batch was cancelled.
    pub cause: AbortCause,
}

/// One thing the host must do, in the order [`Releases::actions`] gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action<'a> {
    /// The `now` given was earlier than the clock: the clock stayed, the round ran at it.
    Refused(&'a Refusal),
    /// Stop this execution (its deadline passed, or its batch was cancelled) and report its
    /// end as usual; with an abort grace, the scheduler gives up on it if it has not ended in
    /// time (a later settlement, `timed-out`).
    Abort(&'a Abort),
    /// Pause this shared key at its store until this time (the store keeps the longest
    /// pause): its pause moved later, by a rate limit or the host's [`Input::Pause`]. Before
    /// the permits given back, so the store does not grant a freed permit elsewhere first.
    PauseStore(&'a KeyPause),
    /// Give back a permit or a request.
    Release(&'a Permit),
    /// Answer this entry with this response; it will not run.
    Settled(&'a Settlement),
    /// Ask the store for a permit; report [`Input::Granted`] or [`Input::Denied`].
    Acquire(&'a PermitRequest),
    /// Start this entry's execution; report its end with [`Scheduler::on_ended`].
    Start(EntryId),
    /// Every entry of this batch has its response: its numbers are retired.
    Retired(BatchId),
}

/// What one [`Scheduler::next_releases`] decided. Each list is in (batch, written) order;
/// [`actions`](Self::actions) gives them in the order to perform them. Reuse one value across
/// rounds to keep its capacity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Releases {
    /// The refused clock, if the `now` given went back.
    pub refused: Option<Refusal>,
    /// Executions to stop: their deadline passed, or their batch was cancelled.
    pub abort: Vec<Abort>,
    /// Shared keys to pause at their store: their pause moved later since the last round and
    /// still lies ahead.
    pub pause_store: Vec<KeyPause>,
    /// Permits (or requests) to give back: their entries ended, hit a rate limit, were
    /// cancelled or stopped while waiting for a permit, or stood behind an entry of their key
    /// that hit a rate limit.
    pub release: Vec<Permit>,
    /// Entries the scheduler settled (cancelled, stopped, interrupted, rate-limited).
    pub settled: Vec<Settlement>,
    /// Permits to ask the store for.
    pub acquire: Vec<PermitRequest>,
    /// Entries to start now.
    pub start: Vec<EntryId>,
    /// Batches whose every entry now has a response.
    pub retired: Vec<BatchId>,
    /// When to call `next_releases` again with a later `now`, because something waits on
    /// time: never later than the earliest such time; it may be earlier after a cancellation
    /// or a stop removed what waited (that round then changes nothing).
    pub wake_at: Option<u64>,
}

impl Releases {
    /// Every action in the order to perform it: a refused clock, executions to abort (so they
    /// stop as soon as possible), shared keys to pause at their store (before any permit goes
    /// back, so the store grants nothing the pause holds), permits to give back (so the
    /// store can grant them elsewhere first), settlements, permits to ask for, starts, and
    /// last the retired batches (after every action about their entries).
    pub fn actions(&self) -> impl Iterator<Item = Action<'_>> {
        let refused = self.refused.iter().map(Action::Refused);
        let abort = self.abort.iter().map(Action::Abort);
        let pause_store = self.pause_store.iter().map(Action::PauseStore);
        let release = self.release.iter().map(Action::Release);
        let settled = self.settled.iter().map(Action::Settled);
        let acquire = self.acquire.iter().map(Action::Acquire);
        let start = self.start.iter().copied().map(Action::Start);
        let retired = self.retired.iter().copied().map(Action::Retired);
        refused
            .chain(abort)
            .chain(pause_store)
            .chain(release)
            .chain(settled)
            .chain(acquire)
            .chain(start)
            .chain(retired)
    }

    /// How many actions there are.
    pub fn len(&self) -> usize {
        usize::from(self.refused.is_some())
            + self.abort.len()
            + self.pause_store.len()
            + self.release.len()
            + self.settled.len()
            + self.acquire.len()
            + self.start.len()
            + self.retired.len()
    }

    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn clear(&mut self) {
        self.refused = None;
        self.abort.clear();
        self.pause_store.clear();
        self.release.clear();
        self.settled.clear();
        self.acquire.clear();
        self.start.clear();
        self.retired.clear();
        self.wake_at = None;
    }
}

/// The scheduler. See the [module docs](self) for the rules and the call order.
#[derive(Debug)]
pub struct Scheduler {
    policy: Policy,
    keys: Keys,
    batches: Batches,
    next_batch: u64,
    next_entry: u64,
    /// Batches that reached zero unanswered entries since the last round.
    retiring: Vec<u32>,
    /// What the inputs since the last round decided, as plain numbers (one sort serves them
    /// all), handed to the caller's [`Releases`] by `next_releases`. Settled entries' reasons
    /// are read from their states then.
    started: Vec<u64>,
    settled: Vec<u64>,
    /// Shared keys' entries to acquire a permit for, and those whose permit goes back.
    acquiring: Vec<u64>,
    released: Vec<u64>,
    /// Shared keys whose pause moved later since the last round, each once (`time.rs`).
    store_pauses: Vec<u32>,
    retired: Vec<u64>,
    /// A refused clock, for the round's [`Releases`].
    clock_refused: Option<Refusal>,
    /// Scratch for `submit_batch`: each call's id hash and entry count.
    scratch: Vec<(u64, u32)>,
    scratch_ids: FxHashMap<u64, u64>,
    /// Scratch for laying a call out: the rest of its key set (`layout.rs`).
    scratch_set: Vec<(u32, u32)>,
    /// Scratch for a call's paths on path keys (`layout.rs`).
    scratch_paths: Vec<(u32, u32, String)>,
    /// Unkeyed entries that may start (their batch opened, or their wait after a rate limit
    /// is over): released by the round, not by the input, so that an input after it in the
    /// same round (a cancellation, a failure that stops them) still reaches them first.
    unkeyed_due: Vec<u64>,
    /// The host's clock as last given (`time.rs`).
    now: u64,
    /// Wake-ups, earliest first; stale items are skipped.
    timers: StaleHeap<Timer>,
    /// How many times each retried entry ran again (`u64` values: the map shares its code with
    /// the other `u64 -> u64` maps, which keeps the component small).
    retries: FxHashMap<u64, u64>,
    /// Unkeyed retried entries and the time they may run again.
    not_before: FxHashMap<u64, u64>,
    /// Executions on keys with adaptive limits, and the generation they started in
    /// (`adapt.rs`); an entry leaves at its end, or with its batch.
    generations: FxHashMap<u64, u64>,
    /// Execution deadlines and abort graces (`deadline.rs`).
    deadlines: deadline::Deadlines,
    /// Entries aborted since the last round.
    aborts: Vec<u64>,
}

impl Scheduler {
    /// A scheduler for one validated policy. Tools the policy does not name are unbounded.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            keys: Keys::default(),
            batches: Batches::default(),
            next_batch: 1,
            next_entry: 1,
            retiring: Vec::new(),
            started: Vec::new(),
            settled: Vec::new(),
            acquiring: Vec::new(),
            released: Vec::new(),
            store_pauses: Vec::new(),
            retired: Vec::new(),
            clock_refused: None,
            scratch: Vec::new(),
            scratch_ids: FxHashMap::default(),
            scratch_set: Vec::new(),
            scratch_paths: Vec::new(),
            unkeyed_due: Vec::new(),
            now: 0,
            timers: StaleHeap::default(),
            retries: FxHashMap::default(),
            not_before: FxHashMap::default(),
            generations: FxHashMap::default(),
            deadlines: deadline::Deadlines::default(),
            aborts: Vec::new(),
        }
    }

    /// The policy this scheduler was built from.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Entries of live batches.
    pub fn live_entries(&self) -> usize {
        self.batches.live_entries()
    }

    /// How many concurrency keys are live: configured ones a call or pause named, and those
    /// expanded from templates that a live batch uses or whose gate lies ahead.
    pub fn live_keys(&self) -> usize {
        self.keys.live()
    }

    /// Items in the heap of idle made keys waiting to be forgotten (live and stale). For tests
    /// that check it follows live keys, not history.
    #[doc(hidden)]
    pub fn idle_items_for_tests(&self) -> usize {
        self.keys.idle_items()
    }

    /// How many entries carry retry bookkeeping: `(retried entries, unkeyed entries waiting on
    /// time)`. For tests that check nothing outlives its batch.
    #[doc(hidden)]
    pub fn pending_wakeups_for_tests(&self) -> (usize, usize, usize) {
        (self.retries.len(), self.not_before.len(), self.timers.len())
    }

    /// `(entries with a live deadline, deadline heap items)`: an execution limit or an abort
    /// grace. For tests that check nothing outlives its entry and stale items stay bounded.
    #[doc(hidden)]
    pub fn deadlines_for_tests(&self) -> (usize, usize) {
        self.deadlines.sizes()
    }

    /// Adds a batch in written order, all or nothing, without time limits
    /// ([`submit_batch_with`](Self::submit_batch_with)).
    pub fn submit_batch(&mut self, calls: &[Call<'_>]) -> Result<Submitted, SubmitError> {
        self.submit_batch_with(calls, Limits::default())
    }

    /// Adds a batch in written order, all or nothing, with its executions' time limits
    /// (`deadline.rs`). Its entries start pending; nothing of it is released until every entry
    /// is approved or settled.
    pub fn submit_batch_with(
        &mut self,
        calls: &[Call<'_>],
        limits: Limits,
    ) -> Result<Submitted, SubmitError> {
        self.check_submit(calls)?;
        let (id, first) = (self.next_batch, self.next_entry);
        let total: u64 = self.scratch.iter().map(|&(_, n)| u64::from(n)).sum();
        // Numbers are never handed out twice, and `u64::MAX` never at all (hosts use it as
        // "no such number"). Only a resumed state can come near the end.
        if id >= u64::MAX - 1 || first.checked_add(total).is_none_or(|end| end == u64::MAX) {
            return Err(SubmitError::new(
                SubmitErrorCode::TooLarge,
                "this scheduler has handed out every batch or entry number".to_owned(),
            ));
        }
        let slot = self.batches.open_slot(id, first);
        self.batches.slot_mut(slot).limits = limits;
        self.fill(slot, calls);
        let count = self.batches.slot(slot).entries.len() as u32;
        self.next_batch += 1;
        self.next_entry += u64::from(count);
        Ok(Submitted {
            batch: BatchId(id),
            first: EntryId(first),
            count,
        })
    }

    /// Checks a batch completely before anything changes; leaves each call's id hash and entry
    /// count in `scratch`.
    fn check_submit(&mut self, calls: &[Call<'_>]) -> Result<(), SubmitError> {
        batch::check_batch_size(calls.len())?;
        self.scratch.clear();
        self.scratch_ids.clear();
        let mut total: u64 = 0;
        for (i, call) in calls.iter().enumerate() {
            batch::check_name("call id", call.id, true)
                .and_then(|()| batch::check_name("tool name", call.tool, false))
                .map_err(|m| SubmitError::new(SubmitErrorCode::InvalidId, m))?;
            let hash = id_hash(call.id);
            let batches = &self.batches;
            let live = batches
                .ids
                .find(hash, call.id, |c| batches.slot(c.slot).call_id(c.call));
            // A hash seen earlier in the batch is a duplicate, or (astronomically rarely) a
            // collision that a scan tells apart.
            let earlier =
                self.scratch_ids.contains_key(&hash) && calls[..i].iter().any(|c| c.id == call.id);
            if live.is_some() || earlier {
                return Err(SubmitError::new(
                    SubmitErrorCode::DuplicateId,
                    format!("call id {:?} is already used by a live call", call.id),
                ));
            }
            self.scratch_ids.entry(hash).or_insert(i as u64);
            if call
                .arguments
                .is_some_and(|a| a.len() > ARGUMENTS_BYTES_MAX)
            {
                return Err(SubmitError::new(
                    SubmitErrorCode::TooLarge,
                    format!(
                        "the arguments of call {:?} are longer than {ARGUMENTS_BYTES_MAX} bytes; \
                         pass only the fields its key template names",
                        call.id
                    ),
                ));
            }
            let fan_out = self.keys.fans_out(&self.policy, call.tool);
            let count = batch::entry_count(call, fan_out)?;
            total += u64::from(count);
            self.scratch.push((hash, count));
        }
        if self.batches.live_entries() as u64 + total > ENTRIES_MAX as u64 {
            return Err(SubmitError::new(
                SubmitErrorCode::TooLarge,
                format!("this scheduler would hold more than {ENTRIES_MAX} live entries"),
            ));
        }
        Ok(())
    }

    /// Applies one input of the host's (anything but an execution's end).
    pub fn on_event(&mut self, input: Input<'_>) -> Result<(), Refusal> {
        let (about, result) = match input {
            Input::Approve(e) => (e, self.apply(e, HostEvent::Approve)),
            Input::NotRun(e, how) => (e, self.apply(e, HostEvent::Settle(how))),
            Input::Ask(e) => (e, self.apply(e, HostEvent::Ask)),
            Input::Answer(e) => (e, self.apply(e, HostEvent::Answer)),
            Input::Granted(e) => (e, self.apply(e, HostEvent::Grant)),
            Input::Denied(e) => (e, self.apply(e, HostEvent::Deny)),
            Input::Cancel(b) => {
                return self.cancel(b).map_err(|(code, message)| Refusal {
                    about: About::Batch(b.0),
                    code,
                    message,
                });
            }
            Input::Pause(key, until) => {
                return self.pause(key, until).map_err(|(code, message)| Refusal {
                    about: About::Key(key.to_owned()),
                    code,
                    message,
                });
            }
            Input::LiftPause(key) => {
                return self.lift_pause(key).map_err(|(code, message)| Refusal {
                    about: About::Key(key.to_owned()),
                    code,
                    message,
                });
            }
        };
        result.map_err(|(code, message)| Refusal {
            about: About::Entry(about.0),
            code,
            message,
        })
    }

    /// Applies one execution's end.
    pub fn on_ended(&mut self, e: EntryId, end: End) -> Result<(), Refusal> {
        let result = match end {
            End::Ok => self.end_clean(e, Outcome::Ok),
            End::Failed => self.end_clean(e, Outcome::Failed),
            End::RateLimited(until) => self.retry(e, until),
        };
        result.map_err(|(code, message)| Refusal {
            about: About::Entry(e.0),
            code,
            message,
        })
    }

    /// The host's clock as last given (0 before any): the time every input is judged at.
    pub const fn now(&self) -> u64 {
        self.now
    }

    /// One round's output: moves the clock to `now` (`None` leaves it; an earlier one is
    /// refused and the clock stays), wakes what became due, runs the walks the inputs since the
    /// last round made necessary, retires batches, and fills `out` (cleared first).
    pub fn next_releases(&mut self, now: Option<u64>, out: &mut Releases) {
        // The number vectors are empty here, or hold what the inputs (or `resume`) decided.
        self.advance(now);
        self.finish_round(out);
    }

    /// An execution ended `ok` or `failed` (not rate-limited): a clean end for its key's
    /// adaptive limit, once the transition table accepts it.
    fn end_clean(&mut self, e: EntryId, outcome: Outcome) -> Result<(), (InputErrorCode, String)> {
        self.apply(e, HostEvent::End(outcome))?;
        // Only executions on adaptive keys have a generation, so other ends look nothing up.
        if let Some(started) = self.generations.remove(&e.0) {
            let key = self
                .batches
                .locate(e.0)
                .and_then(|(slot, index)| self.adaptive_key(slot, index));
            if let Some(k) = key {
                self.keys.ended_clean(k, started as u32);
            }
        }
        Ok(())
    }

    /// Applies a host's report about entry `e`, or refuses it and changes nothing.
    fn apply(&mut self, e: EntryId, event: HostEvent) -> Result<(), (InputErrorCode, String)> {
        let Some((slot, index)) = self.batches.locate(e.0) else {
            return Err(unknown_entry(e));
        };
        self.transition(slot, index, event).map_err(|illegal| {
            let label = self.batches.slot(slot).label(index);
            (illegal.code, illegal.message(&label))
        })
    }

    /// Cancels a live batch: its pending and approved entries are settled as cancelled, its
    /// running and asking ones aborted (`deadline.rs`).
    fn cancel(&mut self, b: BatchId) -> Result<(), (InputErrorCode, String)> {
        let Some(slot) = self.batches.find(b.0) else {
            return Err((
                InputErrorCode::UnknownBatch,
                format!("no live batch has number {}", b.0),
            ));
        };
        let batch = self.batches.slot_mut(slot);
        if batch.is_cancelled() {
            return Err((
                InputErrorCode::BatchCancelled,
                format!("batch {} is already cancelled", b.0),
            ));
        }
        batch.cancel();
        for i in 0..batch.entries.len() as u32 {
            let state = self.batches.slot(slot).entries[i as usize].life.get();
            if matches!(state, State::Pending | State::Approved) || state.holds_permit_unstarted() {
                self.make(slot, i, SchedulerEvent::Cancel);
            }
        }
        // Each settled entry's key walks (its effects); running ones keep their slots.
        let pending = self.batches.slot(slot).pending();
        debug_assert_eq!(pending, 0, "cancelled batch {} still pending", b.0);
        // Its running and asking entries are aborted (`deadline.rs`).
        for i in 0..self.batches.slot(slot).entries.len() as u32 {
            let state = self.batches.slot(slot).entries[i as usize].life.get();
            if matches!(state, State::Running | State::Asking) {
                self.abort(slot, i, AbortCause::Cancel);
            }
        }
        Ok(())
    }

    /// The barrier fell: stop what is behind a failure, release every unkeyed approved entry,
    /// and let each key walk.
    #[inline(never)]
    fn open_batch(&mut self, slot: u32) {
        let batch = self.batches.slot_mut(slot);
        batch.open();
        for i in 0..batch.entries.len() as u32 {
            let batch = self.batches.slot(slot);
            let entry = &batch.entries[i as usize];
            if entry.life.get() != State::Approved {
                continue;
            }
            if let Some(after) = self.stopped_by(slot, i) {
                self.settle_stopped(slot, i, after);
            } else if entry.key.get().is_none() {
                self.unkeyed_due.push(batch.first + u64::from(i));
            }
        }
        let batch = self.batches.slot(slot);
        for &k in &batch.keys {
            self.keys.mark_dirty(k);
        }
    }

    /// Starts an approved (or granted) entry.
    fn release(&mut self, slot: u32, index: u32) {
        // The hot path: `transition` with a known event, not `make`.
        let released = self.transition(slot, index, SchedulerEvent::Release);
        debug_assert!(released.is_ok(), "released an entry that was not approved");
    }

    /// Runs the key walks the inputs since the last round made necessary, orders the output,
    /// retires batches, and hands the output over.
    fn finish_round(&mut self, out: &mut Releases) {
        // Unkeyed entries first, in entry order, if they still may go.
        let mut due = std::mem::take(&mut self.unkeyed_due);
        for e in due.drain(..) {
            self.release_unkeyed(e);
        }
        self.unkeyed_due = due;
        while let Some(k) = self.keys.pop_dirty() {
            self.walk(k);
        }
        // Output is in (batch, written) order; it usually already is.
        sort(&mut self.started);
        sort(&mut self.settled);
        sort(&mut self.acquiring);
        sort(&mut self.released);
        sort(&mut self.aborts);
        out.clear();
        out.refused = self.clock_refused.take();
        // An entry that ended (or was given up) since its abort needs no abort any more.
        for &e in &self.aborts {
            if let Some(State::Aborted(cause)) = self.state(EntryId(e)) {
                out.abort.push(Abort {
                    entry: EntryId(e),
                    cause,
                });
            }
        }
        self.aborts.clear();
        out.start.extend(self.started.drain(..).map(EntryId));
        // Every entry here is still live (batches retire below).
        self.hand_over_permits(out);
        self.hand_over_store_pauses(out);
        for e in self.settled.drain(..) {
            let (reason, message) = match self.batches.locate(e) {
                Some((slot, index)) => {
                    let batch = self.batches.slot(slot);
                    match batch.entries[index as usize].life.get() {
                        State::Settled(reason) => {
                            let label = batch.label(index);
                            (reason, explain::settled_sentence(reason, &label))
                        }
                        other => {
                            debug_assert!(false, "settled entry {e} is {other:?}");
                            (Reason::Cancelled, String::new())
                        }
                    }
                }
                None => {
                    debug_assert!(false, "settled entry {e} is not live");
                    (Reason::Cancelled, String::new())
                }
            };
            out.settled.push(Settlement {
                entry: EntryId(e),
                reason,
                message,
            });
        }
        // Batch numbers follow submission order, like entry numbers.
        let mut retiring = std::mem::take(&mut self.retiring);
        for slot in retiring.drain(..) {
            let batch = self.batches.slot(slot);
            self.retired.push(batch.id);
            let (first, end) = (batch.first, batch.first + batch.entries.len() as u64);
            for &k in &batch.keys {
                self.keys.batch_retired(k, self.now);
            }
            self.forget_times(first, end);
            self.batches.retire(slot);
        }
        self.retiring = retiring;
        sort(&mut self.retired);
        out.retired.extend(self.retired.drain(..).map(BatchId));
        // Last, once no input of this round can still name them: idle made keys whose gate
        // has passed are forgotten.
        self.keys.forget_idle(self.now);
        out.wake_at = self.wake_at();
    }

    /// Releases from the front of a key's queue while there is room (rule 2). Each entry is
    /// pushed once and popped once.
    fn walk(&mut self, k: u32) {
        if self.keys.key(k).shared {
            self.walk_shared(k);
            return;
        }
        if self.keys.key(k).tree {
            self.walk_tree(k);
            return;
        }
        while let Some(&e) = self.keys.key(k).queue().front() {
            match self.turn(k, e) {
                Turn::Wait => return,
                Turn::Go(slot, index) => {
                    self.keys.released_in_order(k, e);
                    self.release(slot, index);
                    if self.in_set(slot, index) {
                        self.set_released(k, e, slot, index);
                    }
                }
                Turn::Pass => {}
            }
            self.keys.pop_front(k);
        }
    }

    /// What a key's walk does with its queued entry `e`, the one rule both walks share: an
    /// approved entry goes when its batch is open, its key has room and its gate is open;
    /// pending or held back, it waits (arming a wake-up when only the clock holds it), and
    /// everything behind it waits too; anything else is passed.
    #[inline(always)]
    fn turn(&mut self, k: u32, e: u64) -> Turn {
        let Some((slot, index)) = self.batches.locate(e) else {
            return Turn::Pass;
        };
        let key = self.keys.key(k);
        let (room, gate) = (key.has_room(), key.gate(self.weight(k, slot, index)));
        let batch = self.batches.slot(slot);
        match batch.entries[index as usize].life.get() {
            State::Pending => Turn::Wait,
            State::Approved if !batch.is_open() || !room => Turn::Wait,
            State::Approved if gate > self.now => {
                self.arm_key(k, gate);
                Turn::Wait
            }
            // A key set's entry needs every key of its set (`key_set.rs`).
            State::Approved if !batch.set_keys.is_empty() && self.in_set(slot, index) => {
                self.set_turn(k, e, slot, index)
            }
            State::Approved => Turn::Go(slot, index),
            _ => Turn::Pass,
        }
    }

    /// Units of key `k`'s rate entry `index` of batch `slot` costs: its tool's weight, looked
    /// up only where weight matters (1 does elsewhere).
    #[inline]
    pub(super) fn weight(&self, k: u32, slot: u32, index: u32) -> u32 {
        if !self.keys.key(k).weighs() {
            return 1;
        }
        let batch = self.batches.slot(slot);
        let entry = &batch.entries[index as usize];
        if entry.key.get() != Some(k) {
            // Another key of its set: the member's own weight.
            let mut others = batch.other_keys(index);
            return others.find(|&(j, _)| j == k).map_or(1, |(_, w)| w);
        }
        self.keys.tool(batch.calls[entry.call as usize].tool).weight
    }

    /// The label of a live entry: `call` for a plain call, `call#i` for an operation.
    pub fn label(&self, entry: EntryId) -> Option<String> {
        let (slot, index) = self.batches.locate(entry.0)?;
        Some(self.batches.slot(slot).label(index))
    }

    /// The current state of a live entry.
    pub fn state(&self, entry: EntryId) -> Option<State> {
        let (slot, index) = self.batches.locate(entry.0)?;
        Some(self.batches.slot(slot).entries[index as usize].life.get())
    }
}

/// The refusal of a number that names no live entry.
fn unknown_entry(e: EntryId) -> (InputErrorCode, String) {
    (
        InputErrorCode::UnknownEntry,
        format!("no live entry has number {}", e.0),
    )
}
