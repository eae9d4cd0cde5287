//! Keys made from templates, counted: each key knows the live batches that use it (`refs`,
//! expanded keys only) and the last batch that listed it, so a batch lists a key once. When
//! its last user retires, a made key whose gate has passed is forgotten at once; one whose
//! gate lies ahead waits in the idle heap (one live item per key, `idle_at`, like a key's
//! wake-up; stale items are skipped, and dropped once they outnumber the live ones). A made
//! key whose adaptive limit is below its ceiling is kept while it is: what it learned from
//! rate limits would otherwise be lost with it (its limit only moves on ends, so it is looked
//! at again when a batch that used it retires).

use std::collections::VecDeque;

use super::Keys;
use crate::schedule::stale_heap::StaleHeap;

/// How the live batches use one key.
#[derive(Debug, Default)]
pub(super) struct Uses {
    /// Live batches using this key (expanded keys only; configured keys are never forgotten).
    refs: u32,
    /// The last batch that counted itself in `refs` (or listed the key in its `keys`).
    last_batch: u64,
    /// The time an idle-heap item for this key is queued for, if one is (like `armed`).
    idle_at: Option<u64>,
}

/// Made keys no live batch uses whose gate lies ahead: `(gate, key)`, earliest first.
#[derive(Debug, Default)]
pub(super) struct Idle {
    heap: StaleHeap<u32>,
}

impl Keys {
    /// Items in the idle heap, live and stale.
    pub(crate) fn idle_items(&self) -> usize {
        self.idle.heap.len()
    }

    /// Whether batch `batch` uses key `k` for the first time; an expanded key then counts it
    /// as a user until it retires ([`Keys::batch_retired`]).
    pub(crate) fn first_use(&mut self, k: u32, batch: u64) -> bool {
        let key = &mut self.recs[k as usize];
        if key.uses.last_batch == batch {
            return false;
        }
        key.uses.last_batch = batch;
        if key.template.is_some() {
            key.uses.refs += 1;
        }
        true
    }

    /// A batch that used key `k` retired: an expanded key no live batch uses is forgotten
    /// once it has rested (its spacing as if it never started, its pause over: at once, or when
    /// [`Keys::forget_idle`] sees the time come).
    pub(crate) fn batch_retired(&mut self, k: u32, now: u64) {
        let key = &mut self.recs[k as usize];
        if key.template.is_none() {
            return;
        }
        debug_assert!(
            key.uses.refs > 0,
            "key {} retired more often than used",
            key.name
        );
        key.uses.refs = key.uses.refs.saturating_sub(1);
        if key.uses.refs == 0 && !key.adapted_down() {
            let gate = key.rested_at();
            if gate <= now {
                self.forget(k);
            } else if key.uses.idle_at != Some(gate) {
                key.uses.idle_at = Some(gate);
                self.queue_idle(gate, k);
            }
        }
    }

    /// Forgets the idle expanded keys that rested by `now`.
    pub(crate) fn forget_idle(&mut self, now: u64) {
        while let Some((at, k)) = self.idle.heap.pop_due(now) {
            // The item may be stale: another replaced it, the key is used again, or it was
            // forgotten (and its slot perhaps reused).
            let key = &mut self.recs[k as usize];
            if key.uses.idle_at != Some(at) {
                continue;
            }
            key.uses.idle_at = None;
            if key.template.is_none() || key.uses.refs > 0 || key.adapted_down() {
                continue;
            }
            let gate = key.rested_at();
            if gate <= now {
                self.forget(k);
            } else {
                key.uses.idle_at = Some(gate);
                self.queue_idle(gate, k);
            }
        }
    }

    /// Queues idle key `k` to be forgotten at `gate` (its `idle_at`): at most one live item per
    /// key, stale ones dropped once they outnumber those.
    fn queue_idle(&mut self, gate: u64, k: u32) {
        let live = self.live();
        let recs = &self.recs;
        self.idle.heap.push(gate, k, live, |at, k| {
            recs[k as usize].uses.idle_at == Some(at)
        });
    }

    fn forget(&mut self, k: u32) {
        let key = &mut self.recs[k as usize];
        debug_assert!(key.uses.refs == 0 && key.running == 0 && !key.dirty);
        let Some(t) = key.template else {
            debug_assert!(false, "forgot configured key {}", key.name);
            return;
        };
        let name = std::mem::take(&mut key.name);
        key.queue = VecDeque::new();
        key.pause_wakes = Vec::new();
        key.time.disarm();
        key.uses.idle_at = None;
        key.template = None;
        debug_assert!((t as usize) < self.templates.len());
        self.made.remove(&name);
        self.free.push(k);
    }
}
