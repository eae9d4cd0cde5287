//! The reference model: its own states, its own transition table, eligibility from scratch,
//! its own view of time (delays, pauses, retries), and its prediction of a restart; plus the
//! owned, comparable forms of a step's inputs and outputs.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;

use turnstile_engine::limits::{NAME_BYTES_MAX, OPERATIONS_PER_CALL_MAX};
use turnstile_engine::schedule::{
    AbortCause, BatchId, EntryId, EntryStatus, HostSettle, InputErrorCode, Limits, Outcome, Reason,
    Saved, SavedBatch, SavedCall, Started, State, SubmitErrorCode, UnrestoredCode, Wait, explain,
};

use crate::common::step::{InputKind, Outputs};

use crate::generate::{ARGUMENTS, Gen, KeyRule, MAX_WAIT_MS, RETRIES_DEFAULT, TEMPLATE};

/// An entry's state, as the model sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum St {
    Pending,
    Approved,
    /// A shared key's entry waiting for its permit; holds a local slot.
    Acquiring,
    /// Its permit granted; starts once every earlier entry of its key has.
    Granted,
    Running,
    Asking,
    Ok,
    Failed,
    Rejected,
    Skipped,
    SettledFailed,
    Cancelled,
    Stopped(u32),
    Interrupted,
    /// Hit a rate limit once more than its key's cap allows, after this many retries, or asked
    /// to wait longer than its key's maximum (these many seconds, rounded up).
    RateLimited(u32, Option<u32>),
    /// Told to stop (its deadline passed, or its batch was cancelled); holds its slot.
    Aborted(AbortCause),
    /// Aborted, and not ended within its batch's abort grace: given up.
    TimedOut(AbortCause),
}

impl St {
    fn unanswered(self) -> bool {
        matches!(
            self,
            Self::Pending
                | Self::Approved
                | Self::Acquiring
                | Self::Granted
                | Self::Running
                | Self::Asking
                | Self::Aborted(_)
        )
    }

    /// Holds a local slot of its key: started, or holding a permit (or its request).
    pub(super) fn holds_slot(self) -> bool {
        self.started() || self.permit()
    }

    /// Started and not ended.
    pub(super) fn started(self) -> bool {
        matches!(self, Self::Running | Self::Asking | Self::Aborted(_))
    }

    /// Waiting for, or holding, a permit of a shared key without running.
    pub(super) fn permit(self) -> bool {
        matches!(self, Self::Acquiring | Self::Granted)
    }

    fn undecided_or_parked(self) -> bool {
        matches!(self, Self::Pending | Self::Approved)
    }

    fn failure(self) -> bool {
        matches!(
            self,
            Self::Failed
                | Self::SettledFailed
                | Self::RateLimited(..)
                | Self::TimedOut(AbortCause::Deadline)
        )
    }

    fn ended(self) -> bool {
        matches!(self, Self::Ok | Self::Failed)
    }

    /// The engine's spelling, to compare.
    pub(super) fn engine(self) -> State {
        match self {
            Self::Pending => State::Pending,
            Self::Approved => State::Approved,
            Self::Acquiring => State::Acquiring,
            Self::Granted => State::Granted,
            Self::Running => State::Running,
            Self::Asking => State::Asking,
            Self::Ok => State::Ended(Outcome::Ok),
            Self::Failed => State::Ended(Outcome::Failed),
            Self::Rejected => State::Settled(Reason::Rejected),
            Self::Skipped => State::Settled(Reason::Skipped),
            Self::SettledFailed => State::Settled(Reason::Failed),
            Self::Cancelled => State::Settled(Reason::Cancelled),
            Self::Stopped(after) => State::Settled(Reason::Stopped { after }),
            Self::Interrupted => State::Settled(Reason::Interrupted),
            Self::RateLimited(retries, asked) => State::Settled(Reason::RateLimited {
                retries,
                asked_s: asked.and_then(NonZeroU32::new),
            }),
            Self::Aborted(cause) => State::Aborted(cause),
            Self::TimedOut(cause) => State::Settled(Reason::TimedOut { cause }),
        }
    }

    /// How an export must carry it.
    fn saved(self) -> Option<Saved> {
        match self {
            Self::Pending | Self::Approved | Self::Acquiring | Self::Granted => None,
            Self::Running | Self::Asking | Self::Aborted(_) => Some(Saved::Started),
            Self::Ok => Some(Saved::Ended(Outcome::Ok)),
            Self::Failed => Some(Saved::Ended(Outcome::Failed)),
            other => match other.engine() {
                State::Settled(reason) => Some(Saved::Settled(reason)),
                _ => unreachable!(),
            },
        }
    }
}

/// The model's transition table for host inputs.
fn transition(kind: InputKind, st: St, how: Option<HostSettle>) -> Result<St, InputErrorCode> {
    use InputErrorCode as E;
    match kind {
        InputKind::Approve | InputKind::Settle if st != St::Pending => Err(E::AlreadyDecided),
        InputKind::Approve => Ok(St::Approved),
        InputKind::Settle => Ok(match how {
            Some(HostSettle::Rejected) => St::Rejected,
            Some(HostSettle::Skipped) => St::Skipped,
            _ => St::SettledFailed,
        }),
        InputKind::Granted if st == St::Acquiring => Ok(St::Granted),
        InputKind::Denied if st.permit() => Ok(St::SettledFailed),
        InputKind::Granted | InputKind::Denied => Err(E::NotAcquiring),
        _ if matches!(st, St::TimedOut(_)) => Err(E::GivenUp),
        _ if st.ended() => Err(E::AlreadyEnded),
        InputKind::Ask if st == St::Running => Ok(St::Asking),
        InputKind::Ask => Err(E::NotRunning),
        InputKind::Answer if st == St::Asking => Ok(St::Running),
        InputKind::Answer => Err(E::NotAsking),
        InputKind::Ok | InputKind::Failed if st.started() => Ok(if kind == InputKind::Ok {
            St::Ok
        } else {
            St::Failed
        }),
        _ => Err(E::NotRunning),
    }
}

#[derive(Clone, Debug)]
struct MCall {
    id: String,
    tool: String,
    ops: Option<u32>,
    first: u64,
    /// From the generator's rules when the call was submitted or restored; none for a call a
    /// restart left out.
    key: Option<KeyRule>,
    /// The key its arguments made from its tool's template (exported, and given back by a
    /// restart); `None` when its key is not made from one.
    made: Option<String>,
    stop: bool,
}

impl MCall {
    fn count(&self) -> u64 {
        u64::from(self.ops.unwrap_or(1))
    }
}

#[derive(Clone, Debug)]
pub(super) struct MBatch {
    pub(super) id: u64,
    pub(super) first: u64,
    pub(super) end: u64,
    calls: Vec<MCall>,
    cancelled: bool,
    pub(super) limits: Limits,
    live: bool,
}

#[derive(Clone, Debug)]
pub(super) struct MEntry {
    pub(super) batch: usize,
    call: usize,
    op: u32,
    st: St,
}

/// A call to submit.
#[derive(Clone, Debug)]
pub(super) struct SubCall {
    pub(super) id: String,
    pub(super) tool: String,
    pub(super) ops: Option<u32>,
    /// An index into `generate::ARGUMENTS`.
    pub(super) args: usize,
}

/// The inputs of one step, owned.
#[derive(Clone, Debug, Default)]
pub(super) struct Ins {
    pub(super) approve: Vec<u64>,
    pub(super) settle: Vec<(u64, HostSettle)>,
    pub(super) granted: Vec<u64>,
    pub(super) denied: Vec<u64>,
    pub(super) ask: Vec<u64>,
    pub(super) answer: Vec<u64>,
    pub(super) ok: Vec<u64>,
    pub(super) failed: Vec<u64>,
    pub(super) cancel: Vec<u64>,
    pub(super) now: Option<u64>,
    pub(super) retry: Vec<(u64, u64)>,
    pub(super) pause: Vec<(String, u64)>,
}

impl Ins {
    pub(super) fn is_empty(&self) -> bool {
        self.now.is_none()
            && self.retry.is_empty()
            && self.pause.is_empty()
            && self.approve.is_empty()
            && self.settle.is_empty()
            && self.granted.is_empty()
            && self.denied.is_empty()
            && self.ask.is_empty()
            && self.answer.is_empty()
            && self.ok.is_empty()
            && self.failed.is_empty()
            && self.cancel.is_empty()
    }
}

/// One step's output, in comparable form.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Out {
    pub(super) abort: Vec<(u64, AbortCause)>,
    /// Shared keys to pause at their store, `(key, until)`, in the order their pauses first
    /// moved in the step.
    pub(super) pause_store: Vec<(String, u64)>,
    pub(super) start: Vec<u64>,
    pub(super) acquire: Vec<u64>,
    pub(super) release: Vec<u64>,
    pub(super) settle: Vec<(u64, Reason)>,
    pub(super) errors: Vec<(InputKind, u32, InputErrorCode)>,
    pub(super) retired: Vec<u64>,
    pub(super) wake_at: Option<u64>,
}

impl Out {
    pub(super) fn of(out: &Outputs) -> Self {
        Self {
            abort: out.abort.iter().map(|&(e, c)| (e.0, c)).collect(),
            pause_store: out.pause_store.clone(),
            start: out.start.iter().map(|e| e.0).collect(),
            acquire: out.acquire.iter().map(|e| e.0).collect(),
            release: out.release.iter().map(|e| e.0).collect(),
            settle: out.settle.iter().map(|&(e, r)| (e.0, r)).collect(),
            errors: out
                .errors
                .iter()
                .map(|e| (e.input, e.index, e.code))
                .collect(),
            retired: out.retired.iter().map(|b| b.0).collect(),
            wake_at: out.wake_at,
        }
    }
}

/// The reference model. Batch `b` is `batches[b - 1]`, entry `n` is `entries[n - 1]`: numbers
/// start at 1, are handed out in order and never twice, so they index the history.
#[derive(Clone, Debug)]
pub(super) struct Model {
    pub(super) cfg: Gen,
    pub(super) batches: Vec<MBatch>,
    pub(super) entries: Vec<MEntry>,
    /// Settlements a restart made, reported by the next step.
    reports: Vec<(u64, Reason)>,
    /// Time: the clock as last given (a scheduler starts at 0 and a restart forgets time).
    pub(super) time: Time,
}

/// What the model knows of time since the scheduler was made or resumed.
#[derive(Clone, Debug, Default)]
pub(super) struct Time {
    pub(super) now: u64,
    /// Per key name, the end of its pause (a pause only extends).
    paused: HashMap<String, u64>,
    /// Per key name, the host's `now` at its last start.
    last_start: HashMap<String, u64>,
    /// Per key name, one bucket per rate window (in the rule's order), once it started.
    buckets: HashMap<String, Vec<Bucket>>,
    /// Per adaptive key name, its limit now, the clean ends since it last moved, whether it
    /// last halved (true) or grew, and its generation, the times it halved (absent: at its
    /// ceiling, never moved, generation 0).
    adapted: HashMap<String, (u32, u32, bool, u32)>,
    /// Executions on adaptive keys, and the generation of their key when they started.
    adapt_started: HashMap<u64, u32>,
    /// Per entry, how many times it ran again after a rate limit.
    retried: HashMap<u64, u32>,
    /// Unkeyed retried entries that wait alone, until when.
    not_before: HashMap<u64, u64>,
    /// Per entry, the clock at its latest start, and at its abort.
    started_at: HashMap<u64, u64>,
    aborted_at: HashMap<u64, u64>,
    /// Retried entries the engine does not stop although a failure before them in their call
    /// came first (a deviation, see `retry`).
    unstoppable: HashSet<u64>,
}

/// A rate window as the docs' token bucket: `count` starts per `per_ms` at an even pace and
/// `burst` at once. Tokens are kept times `per_ms`, so a start costs `per_ms`, `count` flow in
/// per millisecond, and the bucket holds `burst * per_ms`; as of `at`, it held `level`. What
/// flowed in past full is dropped, except within the millisecond the bucket filled: a start
/// then counts from the moment it filled (the docs' "a pace of 3 per second starts at 0, 334,
/// 667, 1000").
#[derive(Clone, Copy, Debug)]
struct Bucket {
    level: u128,
    at: u64,
}

/// Tokens (times `per_ms`) of window `(count, per_ms)` with `burst` at `now`.
fn tokens(b: Option<&Bucket>, (count, per_ms): (u32, u32), burst: u32, now: u64) -> u128 {
    let full = u128::from(burst) * u128::from(per_ms);
    let Some(b) = b else {
        return full; // never started: full
    };
    let flowed = b.level + u128::from(now - b.at) * u128::from(count);
    if flowed < full + u128::from(count) {
        flowed
    } else {
        full
    }
}

/// The earliest time from `now` at which a bucket holds `want` (times `per_ms`).
fn holds_at(have: u128, want: u128, count: u32, now: u64) -> u64 {
    if have >= want {
        return now;
    }
    now + u64::try_from((want - have).div_ceil(u128::from(count))).unwrap()
}

/// The index of entry `n` (numbers start at 1) in the model's history.
pub(super) fn ix(n: u64) -> usize {
    (n - 1) as usize
}

/// A call's key: its tool's rule, named by the key its arguments made when the rule is the
/// template (`made`; else the template's own key). Returns the key and what it made.
fn made_key(rule: Option<KeyRule>, made: Option<String>) -> (Option<KeyRule>, Option<String>) {
    match rule {
        Some(mut k) if k.name == TEMPLATE => match made {
            Some(name) => {
                k.name.clone_from(&name);
                (Some(k), Some(name))
            }
            None => (Some(k), None),
        },
        other => (other, None),
    }
}

fn valid_name(name: &str, call_id: bool) -> bool {
    !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && !(call_id && (name.contains('#') || name.contains('\n')))
}

impl Model {
    pub(super) fn new(cfg: Gen) -> Self {
        Self {
            cfg,
            batches: Vec::new(),
            entries: Vec::new(),
            reports: Vec::new(),
            time: Time::default(),
        }
    }

    pub(super) fn next_batch(&self) -> u64 {
        self.batches.len() as u64 + 1
    }

    pub(super) fn next_entry(&self) -> u64 {
        self.entries.len() as u64 + 1
    }

    pub(super) fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.batches.len()).filter(|&b| self.batches[b].live)
    }

    pub(super) fn live_entries(&self) -> impl Iterator<Item = u64> + '_ {
        self.live()
            .flat_map(|b| self.batches[b].first..self.batches[b].end)
    }

    pub(super) fn is_live(&self, n: u64) -> bool {
        n.checked_sub(1)
            .and_then(|i| self.entries.get(i as usize))
            .is_some_and(|e| self.batches[e.batch].live)
    }

    pub(super) fn st(&self, n: u64) -> St {
        self.entries[ix(n)].st
    }

    fn set(&mut self, n: u64, st: St) {
        self.entries[ix(n)].st = st;
    }

    fn call(&self, n: u64) -> &MCall {
        let e = &self.entries[ix(n)];
        &self.batches[e.batch].calls[e.call]
    }

    pub(super) fn key(&self, n: u64) -> Option<(&str, u32)> {
        self.call(n)
            .key
            .as_ref()
            .map(|k| (k.name.as_str(), self.limit_now(k)))
    }

    /// Key `k`'s limit now: its ceiling, or where its adaptation moved it.
    pub(super) fn limit_now(&self, k: &KeyRule) -> u32 {
        self.time
            .adapted
            .get(&k.name)
            .map_or(k.limit, |&(limit, ..)| limit)
    }

    /// The docs' AIMD: a rate-limited end halves an adaptive limit (not below its floor) and
    /// starts the count of clean ends over; a clean end counts, and as many as the limit is
    /// grow it by one (not past its ceiling), counting from zero again.
    ///
    /// Only an execution `n` started in the key's current generation (since its last halving)
    /// moves it: a storm from executions that started together halves it once.
    fn adapt(&mut self, k: &KeyRule, n: u64, clean: bool) {
        let Some(min) = k.adapt_min else {
            return;
        };
        let Some(started) = self.time.adapt_started.remove(&n) else {
            return;
        };
        let (limit, ends, halved, generation) = self
            .time
            .adapted
            .get(&k.name)
            .copied()
            .unwrap_or((k.limit, 0, false, 0));
        if started != generation {
            return;
        }
        let next = if !clean {
            ((limit / 2).max(min), 0, true, generation + 1)
        } else if limit == k.limit {
            (limit, 0, halved, generation)
        } else if ends + 1 == limit {
            (limit + 1, 0, false, generation)
        } else {
            (limit, ends + 1, halved, generation)
        };
        self.time.adapted.insert(k.name.clone(), next);
    }

    /// Execution `n` of an adaptive key starts: it joins the key's current generation.
    fn join_generation(&mut self, k: &KeyRule, n: u64) {
        if k.adapt_min.is_some() {
            let generation = self.time.adapted.get(&k.name).map_or(0, |a| a.3);
            self.time.adapt_started.insert(n, generation);
        }
    }

    /// What the docs say a sentence adds about a full key whose limit adapts.
    fn adaptive_note(&self, k: &KeyRule) -> Option<String> {
        let min = k.adapt_min?;
        let (limit, why) = match self.time.adapted.get(&k.name) {
            Some(&(limit, ..)) if limit == k.limit => (limit, "at its ceiling"),
            None => (k.limit, "at its ceiling"),
            Some(&(limit, _, true, _)) => (limit, "halved after a rate limit"),
            Some(&(limit, _, false, _)) => (limit, "growing back by clean ends"),
        };
        Some(format!(
            "; its limit adapts between {min} and {} and is {limit} now, {why}",
            k.limit
        ))
    }

    pub(super) fn rule(&self, n: u64) -> Option<&KeyRule> {
        self.call(n).key.as_ref()
    }

    /// The earliest time key `k` may start its next entry: its delay after its last start,
    /// and its pause.
    fn gate(&self, k: &KeyRule) -> u64 {
        let spaced = self
            .time
            .last_start
            .get(&k.name)
            .map_or(0, |&t| t + u64::from(k.delay));
        let cost = |per_ms: u32| u128::from(k.weight) * u128::from(per_ms);
        let rated = self.windows(k).map(|((w, burst), b)| {
            let have = tokens(b, w, burst, self.time.now);
            holds_at(have, cost(w.1), w.0, self.time.now)
        });
        rated
            .fold(spaced, u64::max)
            .max(self.time.paused.get(&k.name).copied().unwrap_or(0))
    }

    /// Key `k`'s rate windows `((count, per_ms), burst)` with their buckets (none before its
    /// first start).
    fn windows<'a>(
        &'a self,
        k: &'a KeyRule,
    ) -> impl Iterator<Item = (((u32, u32), u32), Option<&'a Bucket>)> + 'a {
        let buckets = self.time.buckets.get(&k.name);
        (0..k.rates.windows.len()).map(move |i| {
            let (count, per_ms, burst) = k.rates.window(i);
            (((count, per_ms), burst), buckets.and_then(|b| b.get(i)))
        })
    }

    /// When key `k` has rested: its delay past, every bucket as a fresh one (full, and
    /// nothing kept from the millisecond it filled), its pause over. A key made from the
    /// template is forgotten only then.
    fn rested(&self, k: &KeyRule) -> u64 {
        let spaced = self
            .time
            .last_start
            .get(&k.name)
            .map_or(0, |&t| t + u64::from(k.delay));
        let now = self.time.now;
        let full = self.windows(k).map(|(((count, per_ms), burst), b)| {
            let Some(b) = b else {
                return now;
            };
            let (count, full) = (u128::from(count), u128::from(burst) * u128::from(per_ms));
            let flowed = b.level + u128::from(now - b.at) * count;
            if flowed == full || flowed >= full + count {
                return now;
            }
            // Exactly full at some millisecond, or else past full by a millisecond's flow.
            let short = if flowed < full && (full - flowed).is_multiple_of(count) {
                full - flowed
            } else {
                full + count - flowed
            };
            now + u64::try_from(short.div_ceil(count)).unwrap()
        });
        full.fold(spaced, u64::max)
            .max(self.time.paused.get(&k.name).copied().unwrap_or(0))
    }

    /// Key `k` started an entry at the clock: its delay counts from now, each bucket pays one
    /// start.
    fn spend(&mut self, k: &KeyRule) {
        let now = self.time.now;
        let paid: Vec<Bucket> = self
            .windows(k)
            .map(|((w, burst), b)| {
                let have = tokens(b, w, burst, now);
                let cost = u128::from(k.weight) * u128::from(w.1);
                assert!(have >= cost, "model: a start without its tokens");
                Bucket {
                    level: have - cost,
                    at: now,
                }
            })
            .collect();
        self.time.last_start.insert(k.name.clone(), now);
        self.time.buckets.insert(k.name.clone(), paid);
    }

    /// Whether a key made from the template still exists: a live call has it, or its gate
    /// (spacing or pause) lies ahead, so it is not forgotten yet.
    fn made_key_live(&self, name: &str) -> bool {
        let live = self.live().any(|b| {
            self.batches[b]
                .calls
                .iter()
                .any(|c| c.made.as_deref() == Some(name))
        });
        live || self.cfg.template_rule().is_some_and(|mut k| {
            k.name = name.to_owned();
            self.rested(&k) > self.time.now || self.limit_now(&k) < k.limit
        })
    }

    /// Entries that hold a slot of key `k`.
    fn running(&self, k: &str) -> usize {
        self.live_entries()
            .filter(|&m| self.key(m).is_some_and(|(mk, _)| mk == k))
            .filter(|&m| self.st(m).holds_slot())
            .count()
    }

    /// The first entry of key `k` not started yet (pending or approved), in entry order.
    fn front(&self, k: &str) -> Option<u64> {
        self.live_entries().find(|&m| {
            self.key(m).is_some_and(|(mk, _)| mk == k) && self.st(m).undecided_or_parked()
        })
    }

    /// When something waits on time: a key whose front entry could start but for its gate, a
    /// granted entry first in line on a paused key, or an unkeyed retried entry waiting alone.
    pub(super) fn wake_at(&self) -> Option<u64> {
        let mut names: Vec<&KeyRule> = Vec::new();
        for n in self.live_entries() {
            if let Some(k) = self.rule(n)
                && !names.iter().any(|m| m.name == k.name)
            {
                names.push(k);
            }
        }
        let keys = names.into_iter().filter_map(|k| {
            let front = self.front(&k.name)?;
            // The front entry's own rule: its tool's weight decides when its rate lets it go.
            let gate = self.gate(self.rule(front).unwrap_or(k));
            (self.st(front) == St::Approved
                && self.open(self.entries[ix(front)].batch)
                && self.running(&k.name) < self.limit_now(k) as usize
                && gate > self.time.now)
                .then_some(gate)
        });
        // A granted entry that nothing earlier of its key holds back waits for the pause.
        let granted = self.live_entries().filter_map(|n| {
            let k = self.rule(n)?;
            let (gate, earlier) = (self.gate(k), |m: u64| {
                m < n
                    && self.key(m).is_some_and(|(mk, _)| mk == k.name)
                    && (self.st(m).undecided_or_parked() || self.st(m).permit())
            });
            (self.st(n) == St::Granted && gate > self.time.now && !self.live_entries().any(earlier))
                .then_some(gate)
        });
        let alone = self
            .time
            .not_before
            .iter()
            .filter(|&(&n, _)| self.is_live(n) && self.st(n) == St::Approved)
            .map(|(_, &t)| t);
        keys.chain(granted).chain(alone).min()
    }

    pub(super) fn label(&self, n: u64) -> String {
        let c = self.call(n);
        match c.ops {
            Some(_) => format!("{}#{}", c.id, self.entries[ix(n)].op),
            None => c.id.clone(),
        }
    }

    /// Rule 1: nothing pending, not cancelled.
    fn open(&self, b: usize) -> bool {
        let batch = &self.batches[b];
        batch.live
            && !batch.cancelled
            && (batch.first..batch.end).all(|n| self.st(n) != St::Pending)
    }

    /// The lowest failed operation of an entry's call.
    fn lowest_failure(&self, n: u64) -> Option<u32> {
        let c = self.call(n);
        (c.first..c.first + c.count())
            .filter(|&m| self.st(m).failure())
            .map(|m| self.entries[ix(m)].op)
            .min()
    }

    /// A call id is taken while its batch lives, even by a call a restart left out (its
    /// batch still holds its entries; an id free before the batch retires would make the next
    /// export hold two calls with one id).
    pub(super) fn live_call(&self, id: &str) -> bool {
        self.live()
            .any(|b| self.batches[b].calls.iter().any(|c| c.id == id))
    }

    pub(super) fn submit(
        &mut self,
        calls: &[SubCall],
        limits: Limits,
    ) -> Result<(u64, u64, u32), SubmitErrorCode> {
        if calls.is_empty() {
            return Err(SubmitErrorCode::EmptyBatch);
        }
        for (i, c) in calls.iter().enumerate() {
            if !valid_name(&c.id, true) || !valid_name(&c.tool, false) {
                return Err(SubmitErrorCode::InvalidId);
            }
            if self.live_call(&c.id) || calls[..i].iter().any(|d| d.id == c.id) {
                return Err(SubmitErrorCode::DuplicateId);
            }
            match c.ops {
                Some(_) if !self.cfg.rules(&c.tool).fan_out => {
                    return Err(SubmitErrorCode::NotFanOut);
                }
                Some(0) => return Err(SubmitErrorCode::InvalidOperations),
                Some(n) if n > OPERATIONS_PER_CALL_MAX => return Err(SubmitErrorCode::TooLarge),
                _ => {}
            }
        }
        let (id, first) = (self.next_batch(), self.next_entry());
        let b = self.batches.len();
        let mut batch = MBatch {
            id,
            first,
            end: first,
            calls: Vec::new(),
            cancelled: false,
            limits,
            live: true,
        };
        for (ci, c) in calls.iter().enumerate() {
            let rules = self.cfg.rules(&c.tool);
            let (key, made) = made_key(rules.key, ARGUMENTS[c.args].1.map(str::to_owned));
            let call = MCall {
                id: c.id.clone(),
                tool: c.tool.clone(),
                ops: c.ops,
                first: batch.end,
                key,
                made,
                stop: rules.stop,
            };
            for op in 0..call.count() as u32 {
                self.entries.push(MEntry {
                    batch: b,
                    call: ci,
                    op,
                    st: St::Pending,
                });
            }
            batch.end += call.count();
            batch.calls.push(call);
        }
        let count = (batch.end - first) as u32;
        self.batches.push(batch);
        Ok((id, first, count))
    }

    /// One step: every input judged on its own, in field order; then the key walks and
    /// retirement.
    pub(super) fn step(&mut self, ins: &Ins) -> Out {
        let mut out = Out {
            settle: std::mem::take(&mut self.reports),
            ..Out::default()
        };
        for (i, &n) in ins.approve.iter().enumerate() {
            self.judge(InputKind::Approve, i, n, None, &mut out);
        }
        for (i, &(n, how)) in ins.settle.iter().enumerate() {
            self.judge(InputKind::Settle, i, n, Some(how), &mut out);
        }
        for (i, &n) in ins.granted.iter().enumerate() {
            self.judge(InputKind::Granted, i, n, None, &mut out);
        }
        for (i, &n) in ins.denied.iter().enumerate() {
            self.judge(InputKind::Denied, i, n, None, &mut out);
        }
        let lists = [
            (InputKind::Ask, &ins.ask),
            (InputKind::Answer, &ins.answer),
            (InputKind::Ok, &ins.ok),
            (InputKind::Failed, &ins.failed),
        ];
        for (kind, list) in lists {
            for (i, &n) in list.iter().enumerate() {
                self.judge(kind, i, n, None, &mut out);
            }
        }
        for (i, &(n, until)) in ins.retry.iter().enumerate() {
            if let Err(code) = self.retry(n, until, &mut out) {
                out.errors.push((InputKind::Retry, i as u32, code));
            }
        }
        for (i, &b) in ins.cancel.iter().enumerate() {
            if let Err(code) = self.cancel(b, &mut out) {
                out.errors.push((InputKind::Cancel, i as u32, code));
            }
        }
        for (i, (key, until)) in ins.pause.iter().enumerate() {
            // A configured key of that name first, else a key made from the template.
            let shared = if self.cfg.knows_key(key) {
                Some(self.cfg.tools.iter().any(|t| {
                    self.cfg
                        .rules(&t.name)
                        .key
                        .is_some_and(|k| k.name == *key && k.shared)
                }))
            } else if self.made_key_live(key) {
                Some(self.cfg.template_rule().is_some_and(|k| k.shared))
            } else {
                None
            };
            if let Some(shared) = shared {
                self.pause_key(key, *until, shared, &mut out);
            } else {
                out.errors
                    .push((InputKind::Pause, i as u32, InputErrorCode::UnknownKey));
            }
        }
        // The clock moves after the round's inputs, as `next_releases` moves it.
        if let Some(now) = ins.now {
            if now < self.time.now {
                out.errors
                    .insert(0, (InputKind::Now, 0, InputErrorCode::TimeBackwards));
            } else {
                self.time.now = now;
            }
        }
        // Unkeyed retried entries whose wait is over run again as the clock reaches them.
        let due: Vec<u64> = self
            .time
            .not_before
            .iter()
            .filter(|&(_, &t)| t <= self.time.now)
            .map(|(&n, _)| n)
            .collect();
        for n in due {
            self.time.not_before.remove(&n);
            if self.is_live(n) && self.st(n) == St::Approved {
                self.start(n, &mut out);
            }
        }
        // A shared key whose pause moved later goes to its store at the pause's end, when that
        // still lies ahead of the step's clock.
        let mut store = std::mem::take(&mut out.pause_store);
        store.retain_mut(|(key, until)| {
            *until = self.time.paused.get(key).copied().unwrap_or(0);
            *until > self.time.now
        });
        out.pause_store = store;
        self.expire(&mut out);
        self.immediate(&mut out, true);
        self.walk(&mut out);
        self.retire(&mut out);
        // An abort is reported only while its execution still runs.
        out.abort
            .retain(|&(n, _)| matches!(self.st(n), St::Aborted(_)));
        out.abort.sort_unstable();
        out.start.sort_unstable();
        out.acquire.sort_unstable();
        out.release.sort_unstable();
        out.settle.sort_by_key(|s| s.0);
        out.wake_at = self.wake_at();
        out
    }

    /// Pauses key `key` until `until` (a pause only extends); a shared key whose pause moved
    /// later is listed for its store, once per step (its `until` is read as the step ends).
    fn pause_key(&mut self, key: &str, until: u64, shared: bool, out: &mut Out) {
        let p = self.time.paused.entry(key.to_owned()).or_insert(0);
        let later = until > *p;
        *p = (*p).max(until);
        if shared && later && !out.pause_store.iter().any(|(k, _)| k == key) {
            out.pause_store.push((key.to_owned(), 0));
        }
    }

    /// An execution hit a rate limit: its slot is free and its key paused until `until`; it
    /// runs again (keyed: from its place in its key's order; unkeyed: alone, at `until`),
    /// unless its batch was cancelled or it already ran again as often as its key allows.
    fn retry(&mut self, n: u64, until: u64, out: &mut Out) -> Result<(), InputErrorCode> {
        if !self.is_live(n) {
            return Err(InputErrorCode::UnknownEntry);
        }
        let rule = self.rule(n).cloned();
        let cap = rule.as_ref().map_or(RETRIES_DEFAULT, |k| k.retries);
        let cancelled = self.batches[self.entries[ix(n)].batch].cancelled;
        let aborted = match self.st(n) {
            St::Aborted(cause) => Some(cause),
            _ => None,
        };
        match self.st(n) {
            St::Running | St::Asking | St::Aborted(_) => {}
            St::TimedOut(_) => return Err(InputErrorCode::GivenUp),
            st if st.ended() => return Err(InputErrorCode::AlreadyEnded),
            _ => return Err(InputErrorCode::NotRunning),
        }
        // A wait longer than the key's maximum is not waited for: the entry is settled and the
        // key is not paused.
        let wait = until.saturating_sub(self.time.now);
        let max_wait = rule.as_ref().map_or(MAX_WAIT_MS, |k| k.max_wait);
        let too_long =
            (wait > max_wait).then(|| u32::try_from(wait.div_ceil(1_000)).unwrap_or(u32::MAX));
        if let Some(k) = &rule {
            self.adapt(k, n, false);
            if too_long.is_none() {
                self.pause_key(&k.name, until, k.shared, out);
            }
            if k.shared {
                out.release.push(n);
            }
        }
        let done = self.time.retried.get(&n).copied().unwrap_or(0);
        // It may not run again when its batch was cancelled, when an earlier operation of its
        // call failed under `stop` (the earlier cause wins over the cap), or past its key's cap.
        let op = self.entries[ix(n)].op;
        let c = self.call(n);
        let behind = if c.stop && c.ops.is_some() {
            self.lowest_failure(n).filter(|&f| f < op)
        } else {
            None
        };
        let give_up = if cancelled {
            Some(St::Cancelled)
        } else if let Some(cause) = aborted {
            // An aborted execution is not run again.
            Some(St::TimedOut(cause))
        } else if let Some(f) = behind {
            Some(St::Stopped(f + 1))
        } else if done >= cap || too_long.is_some() {
            Some(St::RateLimited(done, too_long))
        } else {
            None
        };
        match give_up {
            Some(st) => {
                self.set(n, st);
                out.settle.push((
                    n,
                    match st.engine() {
                        State::Settled(r) => r,
                        _ => unreachable!(),
                    },
                ));
                self.immediate(out, false);
            }
            None => {
                self.time.retried.insert(n, done + 1);
                self.set(n, St::Approved);
                // On a shared key, what stands behind it asking for or holding a permit gives
                // it back and asks again after it.
                if let Some(k) = rule.as_ref().filter(|k| k.shared) {
                    let behind: Vec<u64> = self
                        .live_entries()
                        .filter(|&m| m > n && self.st(m).permit())
                        .filter(|&m| self.key(m).is_some_and(|(mk, _)| mk == k.name))
                        .collect();
                    for m in behind {
                        self.set(m, St::Approved);
                        out.release.push(m);
                    }
                }
                if rule.is_none() && until > self.time.now {
                    self.time.not_before.insert(n, until);
                }
                self.immediate(out, false);
            }
        }
        Ok(())
    }

    fn judge(&mut self, kind: InputKind, i: usize, n: u64, how: Option<HostSettle>, out: &mut Out) {
        let next = if self.is_live(n) {
            transition(kind, self.st(n), how)
        } else {
            Err(InputErrorCode::UnknownEntry)
        };
        match next {
            Ok(st) => {
                // An end gives a shared key's permit back.
                if matches!(kind, InputKind::Ok | InputKind::Failed) && self.shared(n) {
                    out.release.push(n);
                }
                if matches!(kind, InputKind::Ok | InputKind::Failed)
                    && let Some(k) = self.rule(n).cloned()
                {
                    self.adapt(&k, n, true);
                }
                self.set(n, st);
                self.immediate(out, false);
            }
            Err(code) => out.errors.push((kind, i as u32, code)),
        }
    }

    /// Whether entry `n`'s key is shared (its permits come from a store).
    fn shared(&self, n: u64) -> bool {
        self.rule(n).is_some_and(|k| k.shared)
    }

    fn cancel(&mut self, b: u64, out: &mut Out) -> Result<(), InputErrorCode> {
        let Some(bi) = (b as usize)
            .checked_sub(1)
            .filter(|&i| self.batches.get(i).is_some_and(|x| x.live))
        else {
            return Err(InputErrorCode::UnknownBatch);
        };
        if self.batches[bi].cancelled {
            return Err(InputErrorCode::BatchCancelled);
        }
        self.batches[bi].cancelled = true;
        for n in self.batches[bi].first..self.batches[bi].end {
            let st = self.st(n);
            if st.undecided_or_parked() || st.permit() {
                self.set(n, St::Cancelled);
                out.settle.push((n, Reason::Cancelled));
                if st.permit() {
                    out.release.push(n);
                }
            } else if matches!(st, St::Running | St::Asking) {
                self.abort(n, AbortCause::Cancel, out);
            }
        }
        Ok(())
    }

    /// What happens in an open batch: rule 4 (approved operations behind the lowest failure
    /// of a stop call are stopped), at once; and, with `start` (once per step, after every
    /// input, so that a cancellation or a failure later in the step still reaches them), rule
    /// 1 (unkeyed approved entries start).
    fn immediate(&mut self, out: &mut Out, start: bool) {
        for b in 0..self.batches.len() {
            if !self.open(b) {
                continue;
            }
            for n in self.batches[b].first..self.batches[b].end {
                let st = self.st(n);
                if st != St::Approved && !st.permit() {
                    continue;
                }
                let op = self.entries[ix(n)].op;
                let c = self.call(n);
                let unkeyed = c.key.is_none();
                let behind = if c.stop && c.ops.is_some() && !self.time.unstoppable.contains(&n) {
                    self.lowest_failure(n).filter(|&f| f < op)
                } else {
                    None
                };
                if let Some(f) = behind {
                    self.set(n, St::Stopped(f + 1));
                    out.settle.push((n, Reason::Stopped { after: f + 1 }));
                    if st.permit() {
                        out.release.push(n);
                    }
                } else if st.permit() {
                    // Waits for its permit, or for earlier entries to start.
                } else if start && unkeyed && !self.time.not_before.contains_key(&n) {
                    self.start(n, out);
                }
            }
        }
    }

    /// Rule 2, from scratch: the first entry that may start starts (or, on a shared key, asks
    /// for its permit), until none may.
    fn walk(&mut self, out: &mut Out) {
        loop {
            let next = self.live_entries().find(|&n| self.eligible(n));
            let Some(n) = next else {
                return;
            };
            if self.shared(n) && self.st(n) == St::Approved {
                self.set(n, St::Acquiring);
                out.acquire.push(n);
                continue;
            }
            self.start(n, out);
            if let Some(k) = self.rule(n) {
                let k = k.clone();
                self.spend(&k);
                self.join_generation(&k, n);
            }
        }
    }

    fn eligible(&self, n: u64) -> bool {
        let Some((key, limit)) = self.key(n) else {
            return false;
        };
        let same = |m: &u64| self.key(*m).is_some_and(|(k, _)| k == key);
        if self.st(n) == St::Granted {
            // Starts once nothing earlier of its key waits to start, and the key is not paused:
            // a pause holds every entry of its key, a granted one too.
            return self.rule(n).is_some_and(|k| self.gate(k) <= self.time.now)
                && !self
                    .live_entries()
                    .filter(same)
                    .any(|m| m < n && (self.st(m).undecided_or_parked() || self.st(m).permit()));
        }
        if self.st(n) != St::Approved {
            return false;
        }
        self.open(self.entries[ix(n)].batch)
            && self.rule(n).is_some_and(|k| self.gate(k) <= self.time.now)
            && self
                .live_entries()
                .filter(same)
                .filter(|&m| self.st(m).holds_slot())
                .count()
                < limit as usize
            && !self
                .live_entries()
                .filter(same)
                .any(|m| m < n && self.st(m).undecided_or_parked())
    }

    /// An entry starts: its execution deadline counts from the clock now.
    fn start(&mut self, n: u64, out: &mut Out) {
        self.set(n, St::Running);
        out.start.push(n);
        self.time.started_at.insert(n, self.time.now);
    }

    /// Deadlines, restated: a running or asking entry whose batch has an execution limit is
    /// aborted once the clock reaches its start plus the limit; an aborted entry whose batch
    /// has an abort grace is given up once the clock reaches its abort plus the grace (in the
    /// same round when the grace is 0), freeing its slot and permit.
    fn expire(&mut self, out: &mut Out) {
        let now = self.time.now;
        let live: Vec<u64> = self.live_entries().collect();
        for &n in &live {
            let limit = self.batches[self.entries[ix(n)].batch].limits.execution_ms;
            let due = limit
                .zip(self.time.started_at.get(&n))
                .map(|(ms, &t)| t + u64::from(ms));
            if matches!(self.st(n), St::Running | St::Asking) && due.is_some_and(|d| d <= now) {
                self.abort(n, AbortCause::Deadline, out);
            }
        }
        for &n in &live {
            let grace = self.batches[self.entries[ix(n)].batch]
                .limits
                .abort_grace_ms;
            let St::Aborted(cause) = self.st(n) else {
                continue;
            };
            let due = grace
                .zip(self.time.aborted_at.get(&n))
                .map(|(ms, &t)| t + u64::from(ms));
            if due.is_some_and(|d| d <= now) {
                self.set(n, St::TimedOut(cause));
                out.settle.push((n, Reason::TimedOut { cause }));
                if self.shared(n) {
                    out.release.push(n);
                }
            }
        }
        self.immediate(out, false);
    }

    fn abort(&mut self, n: u64, cause: AbortCause, out: &mut Out) {
        self.set(n, St::Aborted(cause));
        self.time.aborted_at.insert(n, self.time.now);
        out.abort.push((n, cause));
    }

    fn retire(&mut self, out: &mut Out) {
        let done: Vec<usize> = self
            .live()
            .filter(|&b| {
                let batch = &self.batches[b];
                (batch.first..batch.end).all(|n| !self.st(n).unanswered())
            })
            .collect();
        for b in done {
            self.batches[b].live = false;
            out.retired.push(self.batches[b].id);
        }
    }

    /// How an export carries entry `n`. What a restart settled and no step has reported yet is
    /// carried as it was before that restart, so that the next restart reports it again.
    fn saved(&self, n: u64) -> Option<Saved> {
        match self.reports.iter().find(|&&(m, _)| m == n) {
            Some((_, Reason::Interrupted)) => Some(Saved::Started),
            Some(_) => None,
            None => self.st(n).saved(),
        }
    }

    /// What `unfinished` must export.
    pub(super) fn export(&self) -> Vec<SavedBatch> {
        self.live()
            .map(|b| {
                let batch = &self.batches[b];
                SavedBatch {
                    batch: BatchId(batch.id),
                    first: EntryId(batch.first),
                    cancelled: batch.cancelled,
                    limits: batch.limits,
                    calls: batch
                        .calls
                        .iter()
                        .map(|c| SavedCall {
                            id: c.id.clone(),
                            tool: c.tool.clone(),
                            operations: c.ops,
                            // Arguments that made no key: the template's own text.
                            keys: c
                                .made
                                .clone()
                                .or_else(|| {
                                    let k = c.key.as_ref().filter(|k| k.name == TEMPLATE);
                                    k.map(|k| k.name.clone())
                                })
                                .into_iter()
                                .collect(),
                            entries: (0..c.count())
                                .filter_map(|op| self.saved(c.first + op).map(|s| (op as u32, s)))
                                .collect(),
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// A restart under `cfg`: predicts the resumed state and the calls left out. Returns those
    /// and the entries that may start again.
    pub(super) fn resume(
        &mut self,
        cfg: Gen,
        started: Started,
    ) -> (Vec<(u64, String, UnrestoredCode)>, Vec<u64>) {
        self.cfg = cfg;
        // A resumed scheduler is fresh: its clock is 0 and it knows no pause, start or retry.
        self.time = Time::default();
        // Unreported settlements of an earlier restart count as what they were before it.
        for (n, reason) in std::mem::take(&mut self.reports) {
            let before = if reason == Reason::Interrupted {
                St::Running
            } else {
                St::Pending
            };
            self.set(n, before);
        }
        let mut taken: HashSet<String> = HashSet::new();
        let mut unrestored = Vec::new();
        let mut again = Vec::new();
        let live: Vec<usize> = self.live().collect();
        for b in live {
            let cancelled = self.batches[b].cancelled;
            let rerun = started == Started::RunAgain && !cancelled;
            for c in 0..self.batches[b].calls.len() {
                let call = &self.batches[b].calls[c];
                let rules = self.cfg.rules(&call.tool);
                let code = if taken.contains(&call.id) {
                    Some(UnrestoredCode::DuplicateId)
                } else if call.ops.is_some() && !rules.fan_out {
                    Some(UnrestoredCode::InvalidOperations)
                } else {
                    None
                };
                let (first, count) = (call.first, call.count());
                if let Some(code) = code {
                    unrestored.push((self.batches[b].id, call.id.clone(), code));
                }
                taken.insert(call.id.clone());
                let call = &mut self.batches[b].calls[c];
                (call.key, call.made) = if code.is_some() {
                    (None, None)
                } else {
                    made_key(rules.key, call.made.take())
                };
                call.stop = code.is_none() && rules.stop;
                for n in first..first + count {
                    let st = self.st(n);
                    let next = match st {
                        // Left out: keeps a response; without one it is interrupted, and
                        // the unrestored list is its report.
                        other if code.is_some() && !other.unanswered() => other,
                        _ if code.is_some() => St::Interrupted,
                        st if cancelled && (st.undecided_or_parked() || st.permit()) => {
                            St::Cancelled
                        }
                        St::Pending | St::Approved | St::Acquiring | St::Granted => St::Pending,
                        St::Running | St::Asking | St::Aborted(_) if rerun => St::Pending,
                        St::Running | St::Asking | St::Aborted(_) => St::Interrupted,
                        other => other,
                    };
                    if code.is_none() && st.unanswered() && !next.unanswered() {
                        self.reports.push((
                            n,
                            match next.engine() {
                                State::Settled(r) => r,
                                _ => unreachable!(),
                            },
                        ));
                    }
                    if st.started() && next == St::Pending {
                        again.push(n);
                    }
                    self.set(n, next);
                }
            }
        }
        (unrestored, again)
    }

    /// What `inspect` must say of batch `b`.
    pub(super) fn inspect(&self, b: u64) -> Option<Vec<EntryStatus>> {
        let bi = (b as usize)
            .checked_sub(1)
            .filter(|&i| self.batches.get(i).is_some_and(|x| x.live))?;
        let batch = &self.batches[bi];
        let open = self.open(bi);
        let pending = (batch.first..batch.end)
            .filter(|&n| self.st(n) == St::Pending)
            .count() as u32;
        let statuses = (batch.first..batch.end)
            .map(|n| {
                let key = self.key(n);
                let wait = match (self.st(n), key) {
                    (St::Approved, _) if !open => Some(Wait::BatchNotApproved { pending }),
                    (St::Approved, Some((k, limit))) => {
                        let same: Vec<u64> = self
                            .live_entries()
                            .filter(|&m| self.key(m).is_some_and(|(mk, _)| mk == k))
                            .collect();
                        let ahead = same
                            .iter()
                            .copied()
                            .rev()
                            .find(|&m| m < n && self.st(m).undecided_or_parked());
                        let rule = self.rule(n).unwrap();
                        let gate = self.gate(rule);
                        let paused = self.time.paused.get(k).copied().unwrap_or(0);
                        let room = self.running(k) < limit as usize;
                        Some(match ahead {
                            Some(m) => Wait::Behind {
                                label: self.label(m),
                                key: k.to_owned(),
                            },
                            None if room && gate > self.time.now && paused >= gate => {
                                Wait::KeyPaused {
                                    key: k.to_owned(),
                                    until: paused,
                                }
                            }
                            None if room && gate > self.time.now => Wait::KeySpacing {
                                key: k.to_owned(),
                                until: gate,
                            },
                            None => Wait::KeyFull {
                                key: k.to_owned(),
                                limit,
                                running: same
                                    .iter()
                                    .filter(|&&m| self.st(m).holds_slot())
                                    .map(|&m| self.label(m))
                                    .collect(),
                            },
                        })
                    }
                    (St::Approved, None) => self
                        .time
                        .not_before
                        .get(&n)
                        .map(|&until| Wait::RetryAt { until }),
                    (St::Acquiring, Some((k, _))) => {
                        Some(Wait::PermitRequested { key: k.to_owned() })
                    }
                    // A pause holds a granted entry too; it then says so.
                    (St::Granted, Some((k, _))) => {
                        match self
                            .time
                            .paused
                            .get(k)
                            .copied()
                            .filter(|&p| p > self.time.now)
                        {
                            Some(until) => Some(Wait::KeyPaused {
                                key: k.to_owned(),
                                until,
                            }),
                            None => Some(Wait::PermitGranted { key: k.to_owned() }),
                        }
                    }
                    _ => None,
                };
                let keys = key.map(|(k, _)| k.to_owned()).into_iter().collect();
                // The sentence is the engine's own text for the wait (tested on its own); the
                // model checks that it is given for exactly the waits it expects.
                let note = match &wait {
                    Some(Wait::KeyFull { .. }) => self.rule(n).and_then(|k| self.adaptive_note(k)),
                    _ => None,
                };
                let why = wait.as_ref().map(|w| {
                    explain::wait_sentence(w, self.time.now) + note.as_deref().unwrap_or_default()
                });
                EntryStatus {
                    entry: EntryId(n),
                    label: self.label(n),
                    tool: self.call(n).tool.clone(),
                    keys,
                    state: self.st(n).engine(),
                    wait,
                    why,
                }
            })
            .collect();
        Some(statuses)
    }
}
