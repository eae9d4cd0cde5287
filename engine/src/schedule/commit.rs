//! Every transition of an entry goes through [`Scheduler::transition`]: the lifecycle applies
//! the event and says what it implies ([`Effects`]), and [`Scheduler::commit`] applies that in
//! one place: the batch's barrier and retirement counts, the key's slots, queue and walk, the
//! round's output (starts, permit requests, permits given back, settlements), the retry count
//! and the stop rule. No other code writes a batch's counters or a key's running count.

use super::Scheduler;
use super::lifecycle::{Effects, Event, Illegal, SchedulerEvent};

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
            let shared = self.keys.commit(k, effects, self.now);
            if shared && effects.has(Effects::RETURNS_PERMIT) {
                self.released.push(e);
            }
            if effects.has(Effects::REQUEUED) {
                self.requeue(k, e, shared);
            }
        }
        if effects.has(Effects::STARTS) {
            self.started.push(e);
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
