//! The properties checked after every step, from inputs and outputs rather than the model's
//! reasoning: start order, time (delay, pauses, retries, `wake_at`), states and invariants.

use std::collections::{BTreeSet, HashMap, VecDeque};

use turnstile_engine::schedule::{AbortCause, BatchId, EntryId, Reason};

use crate::common::step::InputKind;

use crate::drive::Sim;
use crate::generate::{KeyRule, MAX_WAIT_MS, RETRIES_DEFAULT};
use crate::model::{Ins, Out, St, ix};

/// What the time properties need, since the scheduler was made or resumed (a resumed
/// scheduler starts a fresh clock and knows no pause, start or retry). Kept from the inputs
/// that were not refused and the outputs, never from the model's reasoning.
#[derive(Default)]
pub(super) struct Timing {
    /// The scheduler's clock: the last `now` that was not refused.
    clock: u64,
    /// Per key, the time of its last start.
    started_at: HashMap<String, u64>,
    /// Per key, its recent starts with their weights (the longest rate window's worth).
    recent: HashMap<String, VecDeque<(u64, u32)>>,
    /// Per key, the end of its longest pause.
    paused: HashMap<String, u64>,
    /// Per key, retried entries that have not started again.
    waiting: HashMap<String, BTreeSet<u64>>,
    /// Unkeyed retried entries, and when they may run again.
    alone: HashMap<u64, u64>,
    /// Per entry, how many times it ran again.
    retries: HashMap<u64, u32>,
    /// Per entry, the earliest and latest clock its latest start can have been judged by
    /// (an input's start is judged by the clock as last given, a round's by its `now`).
    started: HashMap<u64, (u64, u64)>,
    /// Per aborted entry, the clock of its abort (likewise bounded).
    aborted: HashMap<u64, (u64, u64)>,
}

impl Sim {
    /// Nothing starts twice unless it was retried in between; per key, starts follow
    /// (batch, written) order, a retried entry starting again before every entry behind it
    /// and after every retried entry before it.
    pub(super) fn check_starts(&mut self, start: &[u64]) {
        for &n in start {
            if !self.started.insert(n) {
                self.fail(&format!("{} started twice", self.model.label(n)));
            }
            if let Some((k, _)) = self.model.key(n) {
                let k = k.to_owned();
                let waiting = self.timing.waiting.entry(k.clone()).or_default();
                if waiting.contains(&n) {
                    if waiting.first() != Some(&n) {
                        let first = waiting.first().copied();
                        self.fail(&format!(
                            "key {k}: retried {n} started again before retried {first:?}"
                        ));
                    }
                    waiting.remove(&n);
                    continue;
                }
                if let Some(&r) = waiting.first()
                    && r < n
                {
                    self.fail(&format!("key {k}: {n} started before retried {r}"));
                }
                if let Some(&last) = self.last_start.get(&k)
                    && last > n
                {
                    self.fail(&format!("key {k}: {n} started after {last}"));
                }
                self.last_start.insert(k, n);
            }
        }
    }

    /// The time properties, from this step's inputs and outputs: no two starts on a key closer
    /// than its delay, nothing on a paused key before its pause ends, an unkeyed retried entry
    /// not before its time, the retry cap honoured; and `wake_at` is later than the clock.
    /// Returns the starts that follow the step's retries: an unkeyed entry may start (when its
    /// batch opens, or its wait ends) and then hit a rate limit in the same step (a host
    /// mistake, accepted: inputs apply in order); that first start is left out.
    pub(super) fn check_time(&mut self, ins: &Ins, out: &Out) -> Vec<u64> {
        let mut start = out.start.clone();
        let refused = |kind: InputKind, i: usize| {
            out.errors
                .iter()
                .any(|&(k, j, _)| k == kind && j as usize == i)
        };
        // The round's inputs are judged by the clock as last given; its `now` moves it after.
        let judged_at = self.timing.clock;
        if let Some(now) = ins.now {
            if refused(InputKind::Now, 0) != (now < self.timing.clock) {
                self.fail(&format!(
                    "now = {now} after {}: refused {}",
                    self.timing.clock,
                    refused(InputKind::Now, 0)
                ));
            }
            self.timing.clock = self.timing.clock.max(now);
        }
        let clock = self.timing.clock;
        let settled: HashMap<u64, Reason> = out.settle.iter().copied().collect();
        // An entry may hit a rate limit more than once in a step (it ran again at once); only
        // its last accepted retry can be the one that gave up.
        let mut last: HashMap<u64, usize> = HashMap::new();
        for (i, &(n, _)) in ins.retry.iter().enumerate() {
            if !refused(InputKind::Retry, i) {
                last.insert(n, i);
            }
        }
        for (i, &(n, until)) in ins.retry.iter().enumerate() {
            if refused(InputKind::Retry, i) {
                continue;
            }
            // A retry gives up (settled at once), or the entry runs again and may still be
            // settled later in the step: stopped by a sibling's failure, or cancelled by a
            // cancel of its batch in this step (cancels apply after retries).
            let batch = self.model.batches[self.model.entries[ix(n)].batch].id;
            let cancelled_now = ins
                .cancel
                .iter()
                .enumerate()
                .any(|(j, &b)| b == batch && !refused(InputKind::Cancel, j));
            let settled = |n: &u64| {
                settled.get(n).filter(|_| last[n] == i).filter(|r| match r {
                    // An aborted execution's rate limit gives up (a deadline's abort: the
                    // batch of a cancel's is cancelled, which settles it cancelled); a
                    // `timed-out` for a cancel is the cancel of this step with no grace.
                    Reason::RateLimited { .. }
                    | Reason::Stopped { .. }
                    | Reason::TimedOut {
                        cause: AbortCause::Deadline,
                    } => true,
                    Reason::Cancelled => !cancelled_now,
                    _ => false,
                })
            };
            let rule = self.model.rule(n).cloned();
            // A wait past the maximum pauses nothing and settles the entry.
            let wait = until.saturating_sub(judged_at);
            let too_long = wait > rule.as_ref().map_or(MAX_WAIT_MS, |k| k.max_wait);
            if let Some(k) = rule.as_ref().filter(|_| !too_long) {
                let p = self.timing.paused.entry(k.name.clone()).or_insert(0);
                *p = (*p).max(until);
            }
            let done = self.timing.retries.get(&n).copied().unwrap_or(0);
            let cap = rule.as_ref().map_or(RETRIES_DEFAULT, |k| k.retries);
            match settled(&n) {
                Some(Reason::RateLimited { retries, asked_s }) => {
                    if *retries != done {
                        self.fail(&format!("{n} gave up after {retries} retries, ran {done}"));
                    }
                    match asked_s {
                        Some(s)
                            if !too_long
                                || u64::from(s.get())
                                    != wait.div_ceil(1_000).min(u32::MAX.into()) =>
                        {
                            self.fail(&format!("{n} gave up asking {s} s, waiting {wait} ms"));
                        }
                        Some(_) => self.count("retry", "asked to wait too long"),
                        None if too_long || done != cap => self.fail(&format!(
                            "{n} gave up after {retries} retries, cap {cap}, wait {wait} ms"
                        )),
                        None => self.count("retry", "past the cap"),
                    }
                }
                Some(Reason::Cancelled) => self.count("retry", "in a cancelled batch"),
                Some(Reason::Stopped { .. }) => self.count("retry", "behind a failure under stop"),
                Some(Reason::TimedOut { .. }) => self.count("retry", "of an aborted execution"),
                Some(other) => self.fail(&format!("retried {n} settled {other:?}")),
                None => {
                    if done + 1 > cap {
                        self.fail(&format!("{n} ran again {} times, cap {cap}", done + 1));
                    }
                    if too_long {
                        self.fail(&format!("{n} waits {wait} ms, past the maximum"));
                    }
                    if !self.started.contains(&n) {
                        // Started earlier in this step (only unkeyed entries can be).
                        let Some(at) = start.iter().position(|&m| m == n) else {
                            self.fail(&format!("{n} was retried but never started"));
                        };
                        if rule.is_some() {
                            self.fail(&format!("keyed {n} started before this step's retries"));
                        }
                        start.remove(at);
                        if let Some(until) = self.timing.alone.remove(&n)
                            && clock < until
                        {
                            self.fail(&format!("unkeyed {n} ran again at {clock}, before {until}"));
                        }
                        self.count("retry", "of an entry started in the same step");
                    }
                    self.timing.retries.insert(n, done + 1);
                    self.started.remove(&n);
                    match &rule {
                        Some(k) => {
                            self.timing
                                .waiting
                                .entry(k.name.clone())
                                .or_default()
                                .insert(n);
                        }
                        None => {
                            self.timing.alone.insert(n, until);
                        }
                    }
                    self.count("retry", "runs again");
                }
            }
        }
        for (i, (key, until)) in ins.pause.iter().enumerate() {
            if refused(InputKind::Pause, i) {
                self.count("pause", "refused");
            } else {
                let p = self.timing.paused.entry(key.clone()).or_insert(0);
                *p = (*p).max(*until);
                self.count("pause", "applied");
            }
        }
        // A shared key's pause holds back its permit requests, and its granted entries: a
        // pause holds every entry of its key (SHARED.md: pauses apply locally too).
        for &n in &out.acquire {
            if let Some(k) = self.model.rule(n) {
                let paused = self.timing.paused.get(&k.name).copied().unwrap_or(0);
                if clock < paused {
                    self.fail(&format!(
                        "key {}: {n} asked for a permit at {clock}, paused until {paused}",
                        k.name
                    ));
                }
                self.count("permit", "requested");
            }
        }
        for &n in &start {
            match self.model.rule(n).cloned() {
                Some(k) if k.shared => {
                    let paused = self.timing.paused.get(&k.name).copied().unwrap_or(0);
                    if clock < paused {
                        self.fail(&format!(
                            "key {}: granted {n} started at {clock}, paused until {paused}",
                            k.name
                        ));
                    }
                    self.count("permit", "granted and started");
                }
                Some(k) => {
                    let paused = self.timing.paused.get(&k.name).copied().unwrap_or(0);
                    if clock < paused {
                        self.fail(&format!(
                            "key {}: {n} started at {clock}, paused until {paused}",
                            k.name
                        ));
                    }
                    if let Some(&last) = self.timing.started_at.get(&k.name) {
                        if clock < last + u64::from(k.delay) {
                            self.fail(&format!(
                                "key {}: {n} started at {clock}, {} after a start at {last}",
                                k.name,
                                clock - last.min(clock)
                            ));
                        }
                        if k.delay > 0 && clock > last && clock == last + u64::from(k.delay) {
                            self.count("start", "exactly one delay after the last");
                        }
                    }
                    self.timing.started_at.insert(k.name.clone(), clock);
                    self.check_rates(&k, clock);
                }
                None => {
                    if let Some(until) = self.timing.alone.remove(&n) {
                        if clock < until {
                            self.fail(&format!("unkeyed {n} ran again at {clock}, before {until}"));
                        }
                        self.count("start", "unkeyed, again");
                    }
                }
            }
        }
        // Settled by the scheduler, or by the store's refusal of a permit (the host's input).
        let denied = ins
            .denied
            .iter()
            .enumerate()
            .filter(|&(i, _)| !refused(InputKind::Denied, i))
            .map(|(_, n)| n);
        for n in settled.keys().chain(denied) {
            self.timing.alone.remove(n);
            for waiting in self.timing.waiting.values_mut() {
                waiting.remove(n);
            }
        }
        self.check_deadlines(judged_at, clock, ins, out);
        if let Some(t) = out.wake_at
            && t <= clock
        {
            self.fail(&format!("wake_at {t} is not later than the clock {clock}"));
        }
        start
    }

    /// Deadlines, from inputs and outputs alone: nothing is aborted for its deadline before
    /// its batch's limit has passed since its start, nor given up before its batch's grace has
    /// passed since its abort; and none of either is late (the round whose clock reaches it
    /// acts on it, unless the execution ended first). A cancel aborts at the clock as last
    /// given.
    fn check_deadlines(&mut self, judged_at: u64, clock: u64, ins: &Ins, out: &Out) {
        for &n in &out.start {
            self.timing.started.insert(n, (judged_at, clock));
        }
        for &(n, cause) in &out.abort {
            let limits = self.model.batches[self.model.entries[ix(n)].batch].limits;
            let at = match cause {
                AbortCause::Deadline => {
                    let ms = u64::from(limits.execution_ms.unwrap_or(u32::MAX));
                    let (from, _) = self.timing.started.get(&n).copied().unwrap_or((0, 0));
                    if clock < from + ms {
                        self.fail(&format!("{n} aborted at {clock}, started at {from} + {ms}"));
                    }
                    (clock, clock)
                }
                AbortCause::Cancel => (judged_at, clock),
            };
            self.timing.aborted.insert(n, at);
            self.count("abort", cause.name());
        }
        for &(n, reason) in &out.settle {
            // An aborted execution that hits a rate limit is given up at once (`check_time`).
            let retried = ins.retry.iter().any(|&(m, _)| m == n);
            if let (Reason::TimedOut { .. }, false) = (reason, retried) {
                let grace = self.model.batches[self.model.entries[ix(n)].batch]
                    .limits
                    .abort_grace_ms;
                let (from, _) = self.timing.aborted.get(&n).copied().unwrap_or((0, 0));
                if grace.is_none_or(|g| clock < from + u64::from(g)) {
                    self.fail(&format!(
                        "{n} given up at {clock}, aborted at {from}, {grace:?}"
                    ));
                }
            }
        }
        // Late: still running past the latest time its deadline (or grace) can have had.
        for n in self.model.live_entries() {
            let limits = self.model.batches[self.model.entries[ix(n)].batch].limits;
            let (late, what) = match self.model.st(n) {
                St::Running | St::Asking => (
                    limits
                        .execution_ms
                        .zip(self.timing.started.get(&n))
                        .map(|(ms, &(_, to))| to + u64::from(ms)),
                    "not aborted",
                ),
                St::Aborted(_) => (
                    limits
                        .abort_grace_ms
                        .zip(self.timing.aborted.get(&n))
                        .map(|(ms, &(_, to))| to + u64::from(ms)),
                    "not given up",
                ),
                _ => (None, ""),
            };
            if late.is_some_and(|t| t <= clock) {
                self.fail(&format!("{n} {what} by {clock}"));
            }
        }
    }

    /// Every live entry's state agrees; per key, running <= limit (an adaptive limit's ceiling:
    /// a limit that drops takes no slot back); retired numbers are unknown.
    pub(super) fn check_states(&self, retired: &[u64]) {
        let mut running: HashMap<&str, (u32, u32)> = HashMap::new();
        let mut live = 0;
        for n in self.model.live_entries() {
            live += 1;
            let want = self.model.st(n).engine();
            let got = self.engine.state(EntryId(n));
            if got != Some(want) {
                self.fail(&format!(
                    "state of {n}:{} is {got:?}, the model says {want:?}",
                    self.model.label(n)
                ));
            }
            if let (Some(rule), true) = (self.model.rule(n), want.is_started_unended()) {
                let (k, limit) = (rule.name.as_str(), rule.limit);
                let count = running.entry(k).or_insert((0, limit));
                count.0 += 1;
                if count.0 > count.1 {
                    self.fail(&format!("key {k} runs more than its limit {limit}"));
                }
            }
        }
        if self.engine.live_entries() != live {
            self.fail(&format!(
                "the engine holds {} live entries, the model {live}",
                self.engine.live_entries()
            ));
        }
        for &b in retired {
            let batch = &self.model.batches[b as usize - 1];
            for n in batch.first..batch.end {
                if self.engine.state(EntryId(n)).is_some()
                    || self.engine.label(EntryId(n)).is_some()
                {
                    self.fail(&format!("entry {n} of retired batch {b} is still known"));
                }
            }
            if self.engine.inspect(BatchId(b)).is_some() {
                self.fail(&format!("retired batch {b} is still inspectable"));
            }
        }
    }
}

impl Sim {
    /// The rate property, from the docs' bound alone: the units (weights) of a key's starts
    /// within any span of a window's `per_ms` add up to at most `burst + count - 1`, and
    /// `count` with a burst of 1.
    fn check_rates(&mut self, k: &KeyRule, clock: u64) {
        let Some(longest) = k.rates.windows.iter().map(|&(_, per_ms, _)| per_ms).max() else {
            return;
        };
        let recent = self.timing.recent.entry(k.name.clone()).or_default();
        recent.push_back((clock, k.weight));
        while recent
            .front()
            .is_some_and(|&(t, _)| t + u64::from(longest) <= clock)
        {
            recent.pop_front();
        }
        let mut failures = Vec::new();
        let mut full = false;
        for (count, per_ms, burst) in (0..k.rates.windows.len()).map(|i| k.rates.window(i)) {
            let within: usize = recent
                .iter()
                .filter(|&&(t, _)| t + u64::from(per_ms) > clock)
                .map(|&(_, w)| w as usize)
                .sum();
            let most = (burst + count - 1) as usize;
            if within > most {
                failures.push(format!(
                    "key {}: {within} starts within {per_ms} ms by {clock}, at most {most} \
                     ({count} per {per_ms} ms, burst {}): {recent:?}",
                    k.name, burst
                ));
            }
            full |= within == most && count > 1;
        }
        if let Some(f) = failures.first() {
            self.fail(f);
        }
        if full {
            self.count("start", "a rate window's last start");
        }
    }
}
