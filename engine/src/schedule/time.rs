//! Time, which stays the host's: the engine never reads a clock. Inputs carry the host's `now`
//! (monotonic milliseconds); a key's gate (spacing after its last start, and its pause) holds
//! back its front entry until the gate's time, and the step's output says when to wake the
//! scheduler next (`wake_at`). A host pauses a key until a time (`pause`; a pause only ever
//! extends), and an execution that hit a rate limit ends as `retry`: its slot is freed, its key
//! pauses, and the entry goes back to its place at the front of its key's queue to run again,
//! up to the key's retry cap; past it the scheduler gives up (settled `rate-limited`).
//!
//! Wake-ups are a min-heap of `(time, timer)`. A key has at most one live wake-up (`armed`); a
//! heap item that no longer matches is stale and skipped, so nothing is ever searched. A host
//! that keeps moving a gate into the future (a pause extended every step) would pile stale items
//! up, so once they outnumber the live ones the heap keeps only its live items: each item is
//! pushed once and dropped once, O(1) amortized, and memory stays proportional to live work.

use std::cmp::Reverse;

use super::lifecycle::Event;
use super::{EntryId, InputErrorCode, InputKind, Reason, Scheduler, State};

/// What a wake-up is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// A key whose front entry waits on its gate.
    Key(u32),
    /// An unkeyed entry that hit a rate limit and waits to run again.
    Entry(u64),
}

impl Scheduler {
    /// Applies the host's `now` (first of a step's inputs) and wakes what became due.
    pub(super) fn advance(&mut self, now: Option<u64>) {
        if let Some(now) = now {
            if now < self.now {
                self.errors.push(super::InputError {
                    input: InputKind::Now,
                    index: 0,
                    code: InputErrorCode::TimeBackwards,
                    message: format!(
                        "now = {now} is earlier than {}, given before; the clock must be monotonic",
                        self.now
                    ),
                });
            } else {
                self.now = now;
            }
        }
        self.keys.forget_idle(self.now);
        while let Some(&Reverse((at, timer))) = self.timers.peek() {
            if at > self.now {
                break;
            }
            self.timers.pop();
            match timer {
                Timer::Key(k) => {
                    let key = self.keys.key_mut(k);
                    if key.armed == Some(at) {
                        key.armed = None;
                        self.keys.mark_dirty(k);
                    }
                }
                Timer::Entry(e) => {
                    if self.not_before.get(&e) == Some(&at) {
                        self.not_before.remove(&e);
                        self.release_retried(e);
                    }
                }
            }
        }
    }

    /// Whether a granted entry at the front of shared key `k` may start by the clock. A pause
    /// holds every entry of its key, granted ones too, as on a local key: the entry keeps its
    /// permit and its local slot, and the key's wake-up is armed for the pause's end. (A shared
    /// key's spacing is the store's, so only a pause closes its gate.)
    pub(super) fn granted_may_start(&mut self, k: u32) -> bool {
        let gate = self.keys.key(k).gate();
        if gate <= self.now {
            return true;
        }
        self.arm_key(k, gate);
        false
    }

    /// Queues a wake-up for key `k` at `at`, unless one is queued for that time already.
    pub(super) fn arm_key(&mut self, k: u32, at: u64) {
        let key = self.keys.key_mut(k);
        if key.armed != Some(at) {
            key.armed = Some(at);
            self.push_timer(at, Timer::Key(k));
        }
    }

    /// Queues a wake-up, dropping stale ones when they outnumber the live ones.
    fn push_timer(&mut self, at: u64, timer: Timer) {
        self.timers.push(Reverse((at, timer)));
        // At most one live item per key and per waiting unkeyed entry.
        let live_bound = self.keys.count() + self.not_before.len();
        if self.timers.len() > 2 * live_bound + 64 {
            let (keys, not_before) = (&self.keys, &self.not_before);
            self.timers.retain(|&Reverse((at, timer))| match timer {
                Timer::Key(k) => keys.key(k).armed == Some(at),
                Timer::Entry(e) => not_before.get(&e) == Some(&at),
            });
        }
    }

    /// An unkeyed entry that ran again when its wait ended, if it still may.
    fn release_retried(&mut self, e: u64) {
        if let Some((slot, index)) = self.batches.locate(e) {
            let batch = self.batches.slot(slot);
            if batch.open && batch.entries[index as usize].life.get() == State::Approved {
                self.release(slot, index);
            }
        }
    }

    /// Pauses a configured key until `until` (a pause only ever extends).
    pub(super) fn pause(&mut self, name: &str, until: u64) -> Result<(), (InputErrorCode, String)> {
        let Some(k) = self.keys.key_named(&self.policy, name) else {
            return Err((
                InputErrorCode::UnknownKey,
                format!(
                    "no configured tool declares concurrency key {name:?}, and no live call's \
                     key was made with that name"
                ),
            ));
        };
        let key = self.keys.key_mut(k);
        key.paused_until = key.paused_until.max(until);
        self.keys.mark_dirty(k);
        Ok(())
    }

    /// An execution hit a rate limit: it runs again after `until` (its key pauses until then),
    /// or, past its retry cap, the scheduler gives up on it.
    pub(super) fn retry(&mut self, e: EntryId, until: u64) -> Result<(), (InputErrorCode, String)> {
        let Some((slot, index)) = self.batches.locate(e.0) else {
            return Err((
                InputErrorCode::UnknownEntry,
                format!("no live entry has number {}", e.0),
            ));
        };
        let batch = self.batches.slot(slot);
        let entry = &batch.entries[index as usize];
        let key = entry.key.get();
        let done = u32::try_from(self.retries.get(&e.0).copied().unwrap_or(0)).unwrap_or(u32::MAX);
        // Only an execution can hit a rate limit: anything else is refused by the transition
        // table (as a retry) before the scheduler decides whether it may run again. It may not
        // when its batch was cancelled, when an earlier operation of its call failed under
        // `stop` (while it ran), or past its key's cap.
        let give_up = if !entry.life.get().is_started_unended() {
            None
        } else if batch.cancelled {
            Some(Reason::Cancelled)
        } else if let Some(after) = self.stopped_by(slot, index) {
            Some(Reason::Stopped { after })
        } else if done >= self.keys.retry_cap(key) {
            Some(Reason::RateLimited { retries: done })
        } else {
            None
        };
        let event = give_up.map_or(Event::Retry, Event::GiveUp);
        let entry = &mut self.batches.slot_mut(slot).entries[index as usize];
        if let Err(illegal) = entry.life.apply(event) {
            let label = self.batches.slot(slot).label(index);
            return Err((illegal.code, illegal.message(&label)));
        }
        if let Some(k) = key {
            self.keys.free_slot(k);
            self.permit_back(k, e.0);
            let rec = self.keys.key_mut(k);
            rec.paused_until = rec.paused_until.max(until);
        }
        match give_up {
            Some(reason) => {
                self.retries.remove(&e.0);
                self.settled.push(e.0);
                self.answered(slot);
                if matches!(reason, Reason::RateLimited { .. }) {
                    self.record_failure(slot, index);
                }
            }
            None => {
                self.retries.insert(e.0, u64::from(done) + 1);
                match key {
                    Some(k) => {
                        self.keys.requeue(k, e.0);
                        if self.keys.key(k).shared {
                            self.yield_behind(k, e.0);
                        }
                    }
                    None if until <= self.now => self.release(slot, index),
                    None => {
                        self.not_before.insert(e.0, until);
                        self.push_timer(until, Timer::Entry(e.0));
                    }
                }
            }
        }
        Ok(())
    }

    /// A shared key's entry `e` went back in line: every entry behind it that asked for a
    /// permit, or holds one without having started, gives it back and asks again after `e`.
    /// Otherwise a process could hold granted permits for entries that wait behind one with
    /// no request at the store, while every other process does the same: none would start.
    fn yield_behind(&mut self, k: u32, e: u64) {
        let queue = &self.keys.key(k).queue;
        let from = queue.partition_point(|&q| q <= e);
        let behind: Vec<u64> = queue.iter().skip(from).copied().collect();
        for b in behind {
            let Some((slot, index)) = self.batches.locate(b) else {
                continue;
            };
            let entry = &mut self.batches.slot_mut(slot).entries[index as usize];
            if entry.life.get().holds_permit_unstarted() {
                let yielded = entry.life.apply(Event::Yield);
                debug_assert!(yielded.is_ok());
                self.keys.free_slot(k);
                self.released.push(b);
            }
        }
        self.keys.rescan(k, e);
    }

    /// When the scheduler next needs a step with a later `now`: the earliest live wake-up.
    pub(super) fn wake_at(&mut self) -> Option<u64> {
        while let Some(&Reverse((at, timer))) = self.timers.peek() {
            let live = match timer {
                Timer::Key(k) => self.keys.key(k).armed == Some(at),
                Timer::Entry(e) => self.not_before.get(&e) == Some(&at),
            };
            if live {
                return Some(at);
            }
            self.timers.pop();
        }
        None
    }

    /// Forgets the retry bookkeeping of a retiring batch's entries `first..end`: by entry when
    /// the batch is the smaller (each entry is looked at once over its life), else by a pass
    /// over the maps (each is then no larger than the batch).
    pub(super) fn forget_times(&mut self, first: u64, end: u64) {
        let len = end - first;
        for map in [&mut self.retries, &mut self.not_before] {
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
