//! What a transition implies, and the one place that applies it. Every transition of an entry
//! goes through [`Scheduler::transition`]: the lifecycle applies the event and says what it
//! implies ([`Effects`], named by each rule of the table), and [`Scheduler::commit`] applies
//! that: the batch's barrier and retirement counts, the key's slots, queue and walk, the
//! round's output (starts, permit requests, permits given back, settlements), the retry count,
//! a started entry's deadline (armed at its start, dropped with its slot: `deadline.rs`) and
//! the stop rule. No other code writes a batch's counters or a key's running count.

use super::lifecycle::{Event, HostEvent, Illegal, SchedulerEvent};
use super::{Scheduler, State};

/// What a transition implies beyond the entry's own state, for
/// [`Scheduler::commit`] to apply in one place: the batch's counters, the key's slots
/// and queue, the round's output, the stop rule. A set of flags: the transition table names
/// each rule's effects, and a debug assertion checks them against what the states before and
/// after imply ([`Effects::implied`]), so no rule can forget one.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Effects(u16);

impl Effects {
    pub(crate) const NONE: Self = Self(0);
    /// It left `pending`: one fewer entry holds its batch's barrier.
    pub(crate) const DECIDED: Self = Self(1);
    /// It got its response: one fewer entry keeps its batch live.
    pub(crate) const ANSWERED: Self = Self(1 << 1);
    /// It takes a slot of its key: released while approved, or asking for a permit.
    pub(crate) const TAKES_SLOT: Self = Self(1 << 2);
    /// It gives its key's slot back.
    pub(crate) const FREES_SLOT: Self = Self(1 << 3);
    /// Its permit (or its request) goes back to a shared key's store; not after a denial.
    pub(crate) const RETURNS_PERMIT: Self = Self(1 << 4);
    /// It starts: the round tells the host to run it.
    pub(crate) const STARTS: Self = Self(1 << 5);
    /// The round tells the host to acquire a permit for it.
    pub(crate) const ACQUIRES: Self = Self(1 << 6);
    /// The scheduler settled it: the round reports it, with its sentence.
    pub(crate) const REPORTED: Self = Self(1 << 7);
    /// Its execution is over (ended, or given up on): its retry count goes.
    pub(crate) const RAN: Self = Self(1 << 8);
    /// An execution went back in line (a rate limit): back in its key's queue.
    pub(crate) const REQUEUED: Self = Self(1 << 9);
    /// It failed: `on_error = "stop"` may stop the operations behind it.
    pub(crate) const FAILED: Self = Self(1 << 10);
    /// Its key must walk: its queue's front may go now.
    pub(crate) const WALKS: Self = Self(1 << 11);

    const NAMES: [&'static str; 12] = [
        "decided",
        "answered",
        "takes-slot",
        "frees-slot",
        "returns-permit",
        "starts",
        "acquires",
        "reported",
        "ran",
        "requeued",
        "failed",
        "walks",
    ];

    pub(super) const fn and(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    pub(super) const fn and_if(self, other: Self, when: bool) -> Self {
        if when { self.and(other) } else { self }
    }

    /// Whether every effect of `effect` is among these.
    #[inline]
    pub(crate) fn has(self, effect: Self) -> bool {
        self.0 & effect.0 == effect.0
    }

    /// What a transition from `before` to `after` by `event` implies: the definition the
    /// table's effects are checked against.
    pub(super) fn implied(before: State, after: State, event: Event) -> Self {
        let holds_slot = |s: State| s.is_started_unended() || s.holds_permit_unstarted();
        let answered = before.lacks_response() && !after.lacks_response();
        let frees_slot = holds_slot(before) && !holds_slot(after);
        Self::NONE
            .and_if(
                Self::DECIDED,
                before == State::Pending && after != State::Pending,
            )
            .and_if(Self::ANSWERED, answered)
            .and_if(Self::TAKES_SLOT, !holds_slot(before) && holds_slot(after))
            .and_if(Self::FREES_SLOT, frees_slot)
            .and_if(
                Self::RETURNS_PERMIT,
                frees_slot && event != Event::Host(HostEvent::Deny),
            )
            .and_if(
                Self::STARTS,
                after == State::Running && !before.is_started_unended(),
            )
            .and_if(Self::ACQUIRES, after == State::Acquiring)
            .and_if(
                Self::REPORTED,
                matches!(after, State::Settled(_)) && matches!(event, Event::Scheduler(_)),
            )
            .and_if(Self::RAN, answered && before.is_started_unended())
            .and_if(
                Self::REQUEUED,
                before.is_started_unended() && after == State::Approved,
            )
            .and_if(Self::FAILED, after.is_failure())
            .and_if(
                Self::WALKS,
                answered || frees_slot || event == Event::Host(HostEvent::Grant),
            )
    }
}

impl std::fmt::Debug for Effects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = Self::NAMES.iter().enumerate();
        f.debug_set()
            .entries(
                names
                    .filter(|&(i, _)| self.0 & (1 << i) != 0)
                    .map(|(_, n)| n),
            )
            .finish()
    }
}

impl Scheduler {
    /// Moves entry `index` of batch `slot` by `event` and applies what that implies; an illegal
    /// event changes nothing. Inlined, so that where the event is known (a release) the table
    /// and the effects fold to the few lines that rule needs.
    #[inline(always)]
    pub(super) fn transition(
        &mut self,
        slot: u32,
        index: u32,
        event: impl Into<Event>,
    ) -> Result<(), Illegal> {
        let entry = &mut self.batches.slot_mut(slot).entries[index as usize];
        let effects = entry.life.apply(event.into())?;
        let key = entry.key.get();
        self.commit(slot, index, key, effects);
        Ok(())
    }

    /// A move of the scheduler's own that its rules made legal (the entry's state was checked).
    pub(super) fn make(&mut self, slot: u32, index: u32, event: SchedulerEvent) {
        let made = self.transition(slot, index, event);
        debug_assert!(made.is_ok(), "{event:?} is illegal here: {made:?}");
    }

    /// Applies what a transition of entry `index` of batch `slot` (with key `key`) implies.
    /// The order matters in one place: a failure is recorded before the barrier can fall, so
    /// opening the batch stops what is behind it.
    #[inline(always)]
    fn commit(&mut self, slot: u32, index: u32, key: Option<u32>, effects: Effects) {
        let e = self.batches.slot(slot).first + u64::from(index);
        if let Some(k) = key {
            let weight = if effects.has(Effects::STARTS) {
                self.weight(k, slot, index)
            } else {
                1
            };
            let shared = self.keys.key(k).shared;
            self.keys.commit(k, effects, self.now, weight, shared);
            if self.keys.key(k).tree {
                self.hold_paths(k, e, (slot, index), effects);
            }
            if shared && effects.has(Effects::RETURNS_PERMIT) {
                self.released.push(e);
            }
            if effects.has(Effects::REQUEUED) {
                self.requeue(k, e, shared);
            }
            // A key set's other keys take, give back and walk alike (`key_set.rs`).
            for j in self.set_span(slot, index) {
                let Some((k, weight)) = self.set_key(slot, j) else {
                    continue;
                };
                let weight = if effects.has(Effects::STARTS) {
                    weight
                } else {
                    1
                };
                // The set's shared key is its first (`Keys::intern_tool`): its permit holds
                // the set's other keys' slots too.
                let member_shared = self.keys.commit(k, effects, self.now, weight, shared);
                debug_assert!(!member_shared, "a shared key beside a set's first");
                if self.keys.key(k).tree {
                    self.hold_paths(k, e, (slot, index), effects);
                }
                if effects.has(Effects::REQUEUED) {
                    self.keys.requeue(k, e);
                }
            }
        }
        if effects.has(Effects::STARTS) {
            // An execution on an adaptive key joins its limit's current generation.
            let adaptive = key.and_then(|_| self.adaptive_key(slot, index));
            if let Some(generation) = adaptive.and_then(|k| self.keys.generation(k)) {
                self.generations.insert(e, u64::from(generation));
            }
            self.started.push(e);
            self.arm_execution(slot, index);
        }
        // A started entry's deadline (or grace) goes with its slot (`deadline.rs`).
        if effects.has(Effects::FREES_SLOT) {
            self.deadlines.disarm(e);
        }
        if effects.has(Effects::ACQUIRES) {
            self.acquiring.push(e);
        }
        if effects.has(Effects::REPORTED) {
            self.settled.push(e);
        }
        if effects.has(Effects::RAN) && !self.retries.is_empty() {
            self.retries.remove(&e);
        }
        if effects.has(Effects::ANSWERED) && self.batches.slot_mut(slot).answered() {
            self.retiring.push(slot);
        }
        if effects.has(Effects::FAILED) {
            self.record_failure(slot, index);
        }
        if effects.has(Effects::DECIDED) && self.batches.slot_mut(slot).decided() {
            self.open_batch(slot);
        }
    }

    /// An execution of key `k` that hit a rate limit goes back to its place in the key's
    /// queue; on a shared key the entries behind it give their permits back.
    #[inline(never)]
    fn requeue(&mut self, k: u32, e: u64, shared: bool) {
        self.keys.requeue(k, e);
        if shared {
            self.yield_behind(k, e);
        }
    }
}
