//! Wake-ups that go stale instead of being removed: one mechanism for the key and retry timers
//! (`time.rs`), the idle made keys (`keys/made.rs`) and the execution deadlines
//! (`deadline.rs`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Wake-ups `(time, item)`, earliest first. Each owner keeps what is live; an item that no
/// longer matches it is stale and skipped when it comes up, never searched for. Once stale
/// items outnumber the live ones (at most `live` of them), a push keeps only the live ones,
/// so the heap follows live work and a push costs O(log n) amortized.
#[derive(Debug)]
pub(crate) struct StaleHeap<T> {
    heap: BinaryHeap<Reverse<(u64, T)>>,
}

impl<T: Ord> Default for StaleHeap<T> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
        }
    }
}

impl<T: Ord + Copy> StaleHeap<T> {
    /// Queues `item` at `at`; `live` bounds the live items, `is_live` tells one.
    pub(crate) fn push(&mut self, at: u64, item: T, live: usize, is_live: impl Fn(u64, T) -> bool) {
        self.heap.push(Reverse((at, item)));
        if self.heap.len() > 2 * live + 64 {
            self.heap.retain(|&Reverse((at, item))| is_live(at, item));
        }
    }

    /// Removes the earliest item due by `now`, live or stale: its owner tells which.
    pub(crate) fn pop_due(&mut self, now: u64) -> Option<(u64, T)> {
        let &Reverse((at, item)) = self.heap.peek()?;
        if at > now {
            return None;
        }
        self.heap.pop();
        Some((at, item))
    }

    /// The earliest live item's time; stale items on top are dropped on the way.
    pub(crate) fn first_live(&mut self, is_live: impl Fn(u64, T) -> bool) -> Option<u64> {
        while let Some(&Reverse((at, item))) = self.heap.peek() {
            if is_live(at, item) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// Items queued, live and stale.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}
