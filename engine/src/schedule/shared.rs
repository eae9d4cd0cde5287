//! Shared keys: permits from a store the host keeps across processes. An approved entry of a
//! shared key takes a local slot and asks the host for a permit (`acquire`); a granted entry
//! starts in written order once the key's pause is over; a permit, or its request, goes back
//! (`release`) when its entry ends, hits a rate limit, is cancelled or stopped while waiting,
//! or stands behind an entry of its key that went back in line (it yields and asks again
//! after it). The store keeps the key's limit, delay and rate windows across processes; the
//! local limit bounds what this process asks for.

use super::lifecycle::SchedulerEvent;
use super::{EntryId, KeyPause, Permit, PermitRequest, Releases, Scheduler, State, Turn};

impl Scheduler {
    /// A shared key's walk: granted entries at the front start in order once the key's pause
    /// is over; behind the entries waiting for a permit, approved ones ask for one
    /// while there is room locally. The scan starts at the key's `scan_from`, so each entry is
    /// passed once between rescans (a retry or a yield moves it back).
    pub(super) fn walk_shared(&mut self, k: u32) {
        while let Some(&e) = self.keys.key(k).queue().front() {
            if let Some((slot, index)) = self.batches.locate(e) {
                match self.batches.slot(slot).entries[index as usize].life.get() {
                    State::Granted if !self.granted_may_start(k, slot, index) => break,
                    State::Granted => {
                        self.keys.released_in_order(k, e);
                        self.release(slot, index);
                    }
                    State::Pending | State::Approved | State::Acquiring => break,
                    _ => {}
                }
            }
            self.keys.pop_front(k);
        }
        // Every entry before `scan_from` needs nothing more: start there, and move it past
        // each entry this walk leaves needing nothing.
        let key = self.keys.key(k);
        let mut i = key.queue().partition_point(|&q| q < key.scan_from());
        while let Some(&e) = self.keys.key(k).queue().get(i) {
            match self.turn(k, e) {
                Turn::Wait => return,
                Turn::Go(slot, index) => {
                    self.request(slot, index);
                    // Its set's other keys gave it their slots now: they record it in order
                    // and walk on behind it (`key_set.rs`).
                    if self.in_set(slot, index) {
                        self.set_released(k, e, slot, index);
                    }
                }
                Turn::Pass => {}
            }
            self.keys.scanned(k, e);
            i += 1;
        }
    }

    /// Hands a shared key's entry to the host to acquire a permit; it holds a local slot.
    pub(super) fn request(&mut self, slot: u32, index: u32) {
        self.make(slot, index, SchedulerEvent::Request);
    }

    /// Whether a granted entry at the front of shared key `k` may start by the clock. A pause
    /// holds every entry of its key, granted ones too, as on a local key: the entry keeps its
    /// permit and its local slot, and the key's wake-up is armed for the pause's end. (A shared
    /// key's spacing is the store's, so only a pause closes its gate.)
    pub(super) fn granted_may_start(&mut self, k: u32, slot: u32, index: u32) -> bool {
        // A shared key keeps no rate here (its store keeps its terms), so weight is moot; the
        // other keys of its set are not spaced (the config refuses it), so only their pauses
        // can close them.
        let mut keys = vec![k];
        if self.in_set(slot, index) {
            keys = self.keys_of(slot, index);
        }
        for key in keys {
            let gate = self.keys.key(key).gate(1);
            if gate > self.now {
                // This key's walk wakes then, or when the host lifts that pause: the entry no
                // longer waits in the other keys' queues, so their walks would not start it.
                self.arm_key(k, gate);
                let wakes = &mut self.keys.key_mut(key).pause_wakes;
                if key != k && !wakes.contains(&k) {
                    wakes.push(k);
                }
                return false;
            }
        }
        true
    }

    /// A shared key's entry `e` went back in line: every entry behind it that asked for a
    /// permit, or holds one without having started, gives it back and asks again after `e`.
    /// Otherwise a process could hold granted permits for entries that wait behind one with
    /// no request at the store, while every other process does the same: none would start.
    pub(super) fn yield_behind(&mut self, k: u32, e: u64) {
        let queue = self.keys.key(k).queue();
        let from = queue.partition_point(|&q| q <= e);
        let behind: Vec<u64> = queue.iter().skip(from).copied().collect();
        for b in behind {
            let Some((slot, index)) = self.batches.locate(b) else {
                continue;
            };
            let entry = &self.batches.slot(slot).entries[index as usize];
            if entry.life.get().holds_permit_unstarted() {
                debug_assert_eq!(entry.key.get(), Some(k));
                self.make(slot, index, SchedulerEvent::Yield);
                // The other keys of its set gave it their slots at its request: it waits in
                // their queues again, in its place.
                if self.in_set(slot, index) {
                    for other in self.keys_of(slot, index).into_iter().filter(|&o| o != k) {
                        self.keys.queue_again(other, b);
                        self.keys.mark_dirty(other);
                    }
                }
            }
        }
    }

    /// Moves the round's permit requests and permits to give back into `out`: each names its
    /// key, and a request carries the terms the store keeps: the key's limit, delay and rate
    /// windows, and the entry's weight in them.
    pub(super) fn hand_over_permits(&mut self, out: &mut Releases) {
        for &e in &self.acquiring {
            let key = self.keys.key(self.key_of(e));
            let weight = match self.batches.locate(e) {
                Some((slot, index)) if !key.store_rates.is_empty() => {
                    let batch = self.batches.slot(slot);
                    let call = batch.entries[index as usize].call;
                    self.keys.tool(batch.calls[call as usize].tool).weight
                }
                _ => 1,
            };
            out.acquire.push(PermitRequest {
                entry: EntryId(e),
                key: key.name.clone(),
                limit: (key.limit != u32::MAX).then_some(key.limit),
                delay_ms: key.delay,
                rates: key.store_rates.to_vec(),
                weight,
            });
        }
        self.acquiring.clear();
        for &e in &self.released {
            out.release.push(Permit {
                entry: EntryId(e),
                key: self.keys.key(self.key_of(e)).name.clone(),
            });
        }
        self.released.clear();
    }

    /// Moves the round's store pauses into `out`: each shared key whose pause moved later
    /// since the last round, with its pause's end, while that lies ahead of the round's clock
    /// (in the order the keys' pauses first moved). Before retirement, so no key here has been
    /// forgotten.
    pub(super) fn hand_over_store_pauses(&mut self, out: &mut Releases) {
        for k in self.store_pauses.drain(..) {
            let key = self.keys.key_mut(k);
            debug_assert!(key.shared, "store pause of local key {}", key.name);
            if let Some(until) = key.time.take_store_pause(self.now) {
                out.pause_store.push(KeyPause {
                    key: key.name.clone(),
                    until,
                });
            }
        }
    }

    /// The key of a live keyed entry (one that asks for or gives back a permit).
    fn key_of(&self, e: u64) -> u32 {
        let key = self
            .batches
            .locate(e)
            .and_then(|(slot, index)| self.batches.slot(slot).entries[index as usize].key.get());
        debug_assert!(key.is_some(), "permit for entry {e}, which has no live key");
        key.unwrap_or(0)
    }
}
