//! Time, which stays the host's: the engine never reads a clock. `next_releases` carries the host's `now`
//! (monotonic milliseconds); a key's gate (its spacing, `rate.rs`, and its pause) holds
//! back its front entry until the gate's time, and the round's output says when to wake the
//! scheduler next (`wake_at`). A host pauses a key until a time (`pause`; a pause only ever
//! extends), and an execution that hit a rate limit ends as `retry`: its slot is freed, its key
//! pauses, and the entry goes back to its place at the front of its key's queue to run again,
//! up to the key's retry cap; past it the scheduler gives up (settled `rate-limited`).
//!
//! A rate limit's wait is bounded: each key has a maximum wait
//! ([`crate::retry_after::max_wait_ms`], 5 minutes unless configured). A `retry` whose `until`
//! lies further ahead than that is settled `rate-limited` at once, with the wait it asked for
//! in its reason (`asked_s`), and its key is not paused by it: a Retry-After of year 9999
//! costs one call, not the key. A host lifts a pause it set with [`Scheduler::lift_pause`];
//! what rate limits asked for stays (their wait is bounded, and the endpoint said so).
//!
//! A shared key's pause also holds at its store, for every process, and the engine says when:
//! each round in which a shared key's pause moved later (a rate limit that paused it, or the
//! host's `pause`, configured and template-made keys alike) lists it once as a store pause
//! ([`Action::PauseStore`](super::Action::PauseStore)) with the pause's end, if that still lies
//! ahead of the round's clock. Lifting stays local: the store's pause is the host's to lift.
//!
//! Wake-ups are a min-heap of `(time, timer)`. A key has at most one live wake-up (`armed`); a
//! heap item that no longer matches is stale and skipped, so nothing is ever searched. A host
//! that keeps moving a gate into the future (a pause extended every round) would pile stale items
//! up, so once they outnumber the live ones the heap keeps only its live items: each item is
//! pushed once and dropped once, O(1) amortized, and memory stays proportional to live work.

use std::num::NonZeroU32;

use super::keys::Keys;
use super::lifecycle::SchedulerEvent;
use super::names::FxHashMap;
use super::{EntryId, InputErrorCode, Reason, Scheduler, State};

/// A wait in milliseconds as whole seconds, rounded up and saturating; at least 1 for a wait
/// of at least 1 ms (a wait past a maximum always is).
fn asked_seconds(wait_ms: u64) -> Option<NonZeroU32> {
    NonZeroU32::new(u32::try_from(wait_ms.div_ceil(1_000)).unwrap_or(u32::MAX))
}

/// A key's clock: until when it is paused (by the host, or by rate limits), and the wake-up
/// queued for it (its spacing is `rate.rs`'s). Only the methods below write it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TimeGate {
    /// Nothing with this key starts before this time (a pause only ever extends): the later
    /// of the host's pause and `limited_until`.
    paused_until: u64,
    /// The part of the pause that rate limits asked for (`retry`): lifting the host's pause
    /// (`lift_pause`) leaves this one.
    limited_until: u64,
    /// The time a wake-up is queued for this key, if one is.
    armed: Option<u64>,
    /// A shared key's pause moved later since the last round: the round hands it to the store
    /// (a `PauseStore` action) while it lies ahead of the round's clock.
    store_due: bool,
}

impl TimeGate {
    /// Until when the key is paused (0 when it never was).
    pub(crate) fn paused_until(&self) -> u64 {
        self.paused_until
    }

    /// The host pauses the key until `until`; a pause only ever extends. Whether it moved
    /// later.
    fn pause(&mut self, until: u64) -> bool {
        let later = until > self.paused_until;
        self.paused_until = self.paused_until.max(until);
        later
    }

    /// A rate limit pauses the key until `until`, beyond the host's reach. Whether the pause
    /// moved later.
    fn rate_limited(&mut self, until: u64) -> bool {
        self.limited_until = self.limited_until.max(until);
        self.pause(until)
    }

    /// Marks the pause as due at the store; whether it was not already (the key is then
    /// listed once for the round).
    fn store_due(&mut self) -> bool {
        !std::mem::replace(&mut self.store_due, true)
    }

    /// The round hands the pause to the store: until when, if it lies ahead of `now`. Clears
    /// the mark.
    pub(crate) fn take_store_pause(&mut self, now: u64) -> Option<u64> {
        debug_assert!(self.store_due, "store pause taken without being due");
        self.store_due = false;
        (self.paused_until > now).then_some(self.paused_until)
    }

    /// Lifts the host's pause (down to what rate limits asked for); whether it changed.
    fn lift_pause(&mut self) -> bool {
        if self.paused_until <= self.limited_until {
            return false;
        }
        self.paused_until = self.limited_until;
        // The wake-up queued for the old gate is stale now; the walk arms one if needed.
        self.armed = None;
        true
    }

    /// Whether the wake-up queued for `at` is this key's live one.
    fn armed(&self, at: u64) -> bool {
        self.armed == Some(at)
    }

    /// Arms the key's wake-up for `at`; whether a new heap item is needed.
    fn arm(&mut self, at: u64) -> bool {
        let new = self.armed != Some(at);
        self.armed = Some(at);
        new
    }

    /// The wake-up for `at` came due: whether it was the live one (then it is spent).
    fn fire(&mut self, at: u64) -> bool {
        let live = self.armed(at);
        if live {
            self.armed = None;
        }
        live
    }

    /// Drops the wake-up (its key is forgotten).
    pub(crate) fn disarm(&mut self) {
        self.armed = None;
    }
}

/// What a wake-up is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// A key whose front entry waits on its gate.
    Key(u32),
    /// An unkeyed entry that hit a rate limit and waits to run again.
    Entry(u64),
}

impl Scheduler {
    /// The host's clock when its inputs happened (`on_ended`, `on_event`'s `now`): the
    /// clock moves there and nothing wakes until the round. A rate limit's wait and an
    /// abort's grace count from it, not from the last round, however long ago that was.
    /// An earlier `now` is refused and the clock stays.
    pub fn observe_clock(&mut self, now: u64) -> Result<(), super::Refusal> {
        if now < self.now {
            return Err(self.backwards(now));
        }
        self.now = now;
        Ok(())
    }

    fn backwards(&self, now: u64) -> super::Refusal {
        super::Refusal {
            about: super::About::Clock(now),
            code: InputErrorCode::TimeBackwards,
            message: format!(
                "now = {now} is earlier than {}, given before; the clock must be monotonic",
                self.now
            ),
        }
    }

    /// Applies the host's `now` (first thing a round does) and wakes what became due.
    pub(super) fn advance(&mut self, now: Option<u64>) {
        if let Some(now) = now {
            if now < self.now {
                self.clock_refused = Some(self.backwards(now));
            } else {
                self.now = now;
            }
        }
        while let Some((at, timer)) = self.timers.pop_due(self.now) {
            match timer {
                Timer::Key(k) => {
                    if self.keys.key_mut(k).time.fire(at) {
                        self.keys.mark_dirty(k);
                    }
                }
                Timer::Entry(e) => {
                    if self.not_before.get(&e) == Some(&at) {
                        self.not_before.remove(&e);
                        self.release_unkeyed(e);
                    }
                }
            }
        }
        self.expire_deadlines();
    }

    /// Queues a wake-up for key `k` at `at`, unless one is queued for that time already.
    pub(super) fn arm_key(&mut self, k: u32, at: u64) {
        if self.keys.key_mut(k).time.arm(at) {
            self.push_timer(at, Timer::Key(k));
        }
    }

    /// Queues a wake-up, dropping stale ones when they outnumber the live ones.
    fn push_timer(&mut self, at: u64, timer: Timer) {
        // At most one live item per key and per waiting unkeyed entry.
        let live = self.keys.count() + self.not_before.len();
        let (keys, not_before) = (&self.keys, &self.not_before);
        self.timers.push(at, timer, live, |at, timer| {
            timer_live(keys, not_before, at, timer)
        });
    }

    /// An unkeyed entry that may start (its batch opened, or its wait after a rate limit
    /// ended), if it still may.
    pub(super) fn release_unkeyed(&mut self, e: u64) {
        if let Some((slot, index)) = self.batches.locate(e) {
            let batch = self.batches.slot(slot);
            if batch.is_open() && batch.entries[index as usize].life.get() == State::Approved {
                self.release(slot, index);
            }
        }
    }

    /// Lifts the pause the host set on key `key` (`pause`): its entries may start as soon as
    /// nothing else holds them. What rate limits asked for on the key (`retry`) still holds,
    /// because the endpoint, not the host, asked for it and the key's maximum wait already
    /// bounds it; [`inspect`](Scheduler::inspect) says until when. Lifting a key that is not
    /// paused changes nothing. It takes effect in the next
    /// [`next_releases`](Scheduler::next_releases), whose output lists what it released. A
    /// shared key's pause at the store is the host's to lift there: this lifts the local one.
    pub(super) fn lift_pause(&mut self, key: &str) -> Result<(), (InputErrorCode, String)> {
        let k = self.named_key(key)?;
        if self.keys.key_mut(k).time.lift_pause() {
            self.keys.mark_dirty(k);
            // Granted entries of a key set's shared key that waited for this pause.
            for s in std::mem::take(&mut self.keys.key_mut(k).pause_wakes) {
                // (A made key forgotten since has no name: nothing of it waits.)
                if self.keys.key(s).shared && !self.keys.key(s).name.is_empty() {
                    self.keys.mark_dirty(s);
                }
            }
        }
        Ok(())
    }

    /// The live key named `name` (configured, or made by a live call), or why there is none.
    fn named_key(&mut self, name: &str) -> Result<u32, (InputErrorCode, String)> {
        self.keys.key_named(&self.policy, name).ok_or_else(|| {
            (
                InputErrorCode::UnknownKey,
                format!(
                    "no configured tool declares concurrency key {name:?}, and no live call's \
                     key was made with that name"
                ),
            )
        })
    }

    /// Pauses a key, configured or made from a template, until `until` (a pause only ever
    /// extends); a shared key's pause that moved later goes to its store too.
    pub(super) fn pause(&mut self, name: &str, until: u64) -> Result<(), (InputErrorCode, String)> {
        let k = self.named_key(name)?;
        if self.keys.key_mut(k).time.pause(until) {
            self.pause_store(k);
        }
        self.keys.mark_dirty(k);
        Ok(())
    }

    /// Key `k`'s pause moved later: a shared key's goes to its store in this round
    /// ([`hand_over_store_pauses`](Scheduler::hand_over_store_pauses)), once per key. One rule
    /// for a host's pause and a rate limit's, for configured keys and keys made from a
    /// template alike: the store pauses every process as this one pauses.
    fn pause_store(&mut self, k: u32) {
        let key = self.keys.key_mut(k);
        if key.shared && key.time.store_due() {
            self.store_pauses.push(k);
        }
    }

    /// An execution hit a rate limit: it runs again after `until` (its key pauses until then),
    /// or, past its retry cap or when `until` is further ahead than its key's maximum wait, the
    /// scheduler gives up on it (and, for the wait, does not pause the key).
    pub(super) fn retry(&mut self, e: EntryId, until: u64) -> Result<(), (InputErrorCode, String)> {
        let Some((slot, index)) = self.batches.locate(e.0) else {
            return Err(super::unknown_entry(e));
        };
        // Its keys (its first, then the rest of its set), held to the strictest (`key_set.rs`);
        // an unkeyed entry to the defaults.
        let set = self.keys_of(slot, index);
        let key = set.first().copied();
        let (cap, max_wait) = if set.is_empty() {
            (self.keys.retry_cap(None), self.keys.max_wait_ms(None))
        } else {
            set.iter().fold((u32::MAX, u64::MAX), |(cap, wait), &k| {
                let k = Some(k);
                (
                    cap.min(self.keys.retry_cap(k)),
                    wait.min(self.keys.max_wait_ms(k)),
                )
            })
        };
        let batch = self.batches.slot(slot);
        let entry = &batch.entries[index as usize];
        let done = u32::try_from(self.retries.get(&e.0).copied().unwrap_or(0)).unwrap_or(u32::MAX);
        let wait = until.saturating_sub(self.now);
        let too_long = (wait > max_wait).then(|| asked_seconds(wait)).flatten();
        // Only an execution can hit a rate limit: anything else is refused by the transition
        // table (as a retry) before the scheduler decides whether it may run again. It may not
        // when its batch was cancelled, when an earlier operation of its call failed under
        // `stop` (while it ran), past its key's cap, or when it asked to wait too long.
        let give_up = if !entry.life.get().is_started_unended() {
            None
        } else if let State::Aborted(cause) = entry.life.get() {
            // An aborted execution is not run again; its rate limit still pauses its key.
            Some(if batch.is_cancelled() {
                Reason::Cancelled
            } else {
                Reason::TimedOut { cause }
            })
        } else if batch.is_cancelled() {
            Some(Reason::Cancelled)
        } else if let Some(after) = self.stopped_by(slot, index) {
            Some(Reason::Stopped { after })
        } else if done >= cap || too_long.is_some() {
            Some(Reason::RateLimited {
                retries: done,
                asked_s: too_long,
            })
        } else {
            None
        };
        let event = give_up.map_or(SchedulerEvent::Retry, SchedulerEvent::GiveUp);
        if let Err(illegal) = self.transition(slot, index, event) {
            let label = self.batches.slot(slot).label(index);
            return Err((illegal.code, illegal.message(&label)));
        }
        if let Some(started) = self.generations.remove(&e.0)
            && let Some(k) = self.adaptive_key(slot, index)
        {
            self.keys.rate_limited(k, started as u32);
        }
        match key {
            // Its slot and permit went back with the transition; a wait the key's maximum
            // allows pauses the key, every key of its set.
            Some(_) if too_long.is_none() => {
                for k in set {
                    if self.keys.key_mut(k).time.rate_limited(until) {
                        self.pause_store(k);
                    }
                }
            }
            Some(_) => {}
            // An unkeyed execution that goes back in line waits for `until` on its own.
            None if give_up.is_some() => {}
            None if until <= self.now => self.unkeyed_due.push(e.0),
            None => {
                self.not_before.insert(e.0, until);
                self.push_timer(until, Timer::Entry(e.0));
            }
        }
        if give_up.is_none() {
            self.retries.insert(e.0, u64::from(done) + 1);
        }
        Ok(())
    }

    /// When the scheduler next needs a round with a later `now`: the earliest live wake-up.
    pub(super) fn wake_at(&mut self) -> Option<u64> {
        let deadline = self.next_deadline();
        let (keys, not_before) = (&self.keys, &self.not_before);
        let timer = self
            .timers
            .first_live(|at, timer| timer_live(keys, not_before, at, timer));
        match (timer, deadline) {
            (Some(t), Some(d)) => Some(t.min(d)),
            (t, d) => t.or(d),
        }
    }

    /// Forgets the retry bookkeeping of a retiring batch's entries `first..end`: by entry when
    /// the batch is the smaller (each entry is looked at once over its life), else by a pass
    /// over the maps (each is then no larger than the batch).
    pub(super) fn forget_times(&mut self, first: u64, end: u64) {
        let len = end - first;
        for map in [
            &mut self.retries,
            &mut self.not_before,
            &mut self.generations,
        ] {
            if map.is_empty() {
                continue;
            }
            if len <= map.len() as u64 {
                for e in first..end {
                    map.remove(&e);
                }
            } else {
                map.retain(|e, _| !(first..end).contains(e));
            }
        }
    }
}

/// Whether a queued wake-up is still the live one: a key's armed gate, or an unkeyed entry's
/// wait after a rate limit.
fn timer_live(keys: &Keys, not_before: &FxHashMap<u64, u64>, at: u64, timer: Timer) -> bool {
    match timer {
        Timer::Key(k) => keys.key(k).time.armed(at),
        Timer::Entry(e) => not_before.get(&e) == Some(&at),
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch::Entry;
    use super::*;

    /// A reason's asked wait costs an entry 4 bytes, not 8: whole seconds in a `NonZeroU32`
    /// (the `None` niche) beside the retry count. Entries are most of what queued work costs.
    #[test]
    fn an_entry_stays_small() {
        assert_eq!(size_of::<Reason>(), 12);
        assert_eq!(size_of::<State>(), 12);
        assert_eq!(size_of::<Entry>(), 20);
    }

    #[test]
    fn asked_seconds_round_up_and_saturate() {
        assert_eq!(asked_seconds(0), None);
        assert_eq!(asked_seconds(1).map(NonZeroU32::get), Some(1));
        assert_eq!(asked_seconds(300_001).map(NonZeroU32::get), Some(301));
        assert_eq!(asked_seconds(u64::MAX).map(NonZeroU32::get), Some(u32::MAX));
    }
}
