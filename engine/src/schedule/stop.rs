//! Rule 4, `on_error = "stop"`: once an operation fails, the approved operations behind it in
//! the same call are settled as stopped. A call keeps its lowest failed position; a failure
//! scans only the operations between it and the previous lowest failure, so each operation is
//! stopped at most once.

use super::Scheduler;
use super::batch::OptU32;
use super::lifecycle::SchedulerEvent;

impl Scheduler {
    /// The one-based position of the failure that stops entry `index` of a batch, if one does.
    pub(super) fn stopped_by(&self, slot: u32, index: u32) -> Option<u32> {
        let batch = self.batches.slot(slot);
        let call = &batch.calls[batch.entries[index as usize].call as usize];
        let failed = call.first_failed.get()?;
        (call.stop && index - call.first > failed).then_some(failed + 1)
    }

    pub(super) fn settle_stopped(&mut self, slot: u32, index: u32, after: u32) {
        self.make(slot, index, SchedulerEvent::Stop { after });
    }

    /// Records a failure of entry `index` and, once the batch is open, settles the approved
    /// operations behind it.
    #[inline(never)]
    pub(super) fn record_failure(&mut self, slot: u32, index: u32) {
        let batch = self.batches.slot_mut(slot);
        let c = batch.entries[index as usize].call as usize;
        let call = &mut batch.calls[c];
        if !call.stop {
            return;
        }
        let pos = index - call.first;
        let previous = call.first_failed.get();
        if previous.is_some_and(|p| p <= pos) {
            return;
        }
        call.first_failed = OptU32::new(Some(pos));
        let (first, count) = (call.first, call.count);
        if !batch.is_open() || batch.is_cancelled() {
            return;
        }
        // Behind the previous failure everything approved was already stopped.
        let end = previous.map_or(count, |p| p + 1).min(count);
        for op in pos + 1..end {
            let i = first + op;
            let state = self.batches.slot(slot).entries[i as usize].life.get();
            if state == super::State::Approved || state.holds_permit_unstarted() {
                self.settle_stopped(slot, i, pos + 1);
            }
        }
    }
}
