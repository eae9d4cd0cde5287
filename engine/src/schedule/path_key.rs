//! Path keys (`concurrency = { key = "fs", path = "{path}" }`): a key that is a tree of paths
//! (`crate::path`). Each entry takes the paths its call made on the tree (two for a move that
//! names the tree for its source and its destination). An entry goes only when no running
//! entry's path overlaps one of its own, and no earlier entry whose path overlaps one of its
//! own still waits: written order holds among overlapping paths, and entries on paths apart
//! from every waiting one pass them. A path key has no limit (the config refuses one: another
//! key of a set caps a tree, in written order), so an entry that passes another never takes
//! what that one waits for. A pause (after a rate limit) holds the whole tree.
//!
//! Why this cannot deadlock or starve, as for key sets (`key_set.rs`): the lowest-numbered
//! waiting entry has no earlier waiting entry in any queue, so it waits only for the host, for
//! time, or for running entries on overlapping paths, which end; and nothing later that
//! overlaps it can start before it.
//!
//! The paired assertions: an entry takes its paths only when no held path overlaps them
//! (`hold_paths`), and gives back only what it took.

use std::collections::VecDeque;

use super::effects::Effects;
use super::{EntryId, Scheduler, State, Turn, Wait};
use crate::path::{PathSet, overlap};

/// How a path key's member shows in `inspect` and in a saved call: the tree's name, then the
/// path from its root (`fs:/a/b`; `fs:/` for the root).
pub(crate) fn display(tree: &str, path: &str) -> String {
    format!("{tree}:/{path}")
}

impl Scheduler {
    /// Whether two live entries' paths on path key `k` overlap.
    fn paths_meet(&self, k: u32, a: (u32, u32), b: (u32, u32)) -> bool {
        let (ba, bb) = (self.batches.slot(a.0), self.batches.slot(b.0));
        let (ca, cb) = (ba.entries[a.1 as usize].call, bb.entries[b.1 as usize].call);
        ba.paths_of(ca, k)
            .any(|p| bb.paths_of(cb, k).any(|q| overlap(p, q)))
    }

    /// The paths live entry `e` takes on path key `k` (none for an entry that is not live).
    fn paths_at(&self, k: u32, e: u64) -> impl Iterator<Item = &str> + '_ {
        let at = self.batches.locate(e);
        at.into_iter().flat_map(move |(slot, index)| {
            let b = self.batches.slot(slot);
            b.paths_of(b.entries[index as usize].call, k)
        })
    }

    /// The running entries on path key `k` whose paths overlap entry `at`'s, in the order
    /// they started.
    pub(super) fn held_over(&self, k: u32, at: (u32, u32)) -> impl Iterator<Item = u64> + '_ {
        self.keys.key(k).held.iter().copied().filter(move |&h| {
            self.batches
                .locate(h)
                .is_some_and(|other| self.paths_meet(k, other, at))
        })
    }

    /// The last entry before `e` (at `at`) in path key `k`'s queue that still waits and whose
    /// paths overlap `e`'s: the one `e` stands behind.
    pub(super) fn waits_behind(&self, k: u32, e: u64, at: (u32, u32)) -> Option<u64> {
        let queue = self.keys.key(k).queue();
        let before = queue.partition_point(|&q| q < e);
        queue.range(..before).rev().copied().find(|&q| {
            self.batches.locate(q).is_some_and(|other| {
                let state = self.batches.slot(other.0).entries[other.1 as usize]
                    .life
                    .get();
                matches!(state, State::Pending | State::Approved) && self.paths_meet(k, other, at)
            })
        })
    }

    /// Whether no running entry on path key `k` holds a path that overlaps one of entry
    /// `at`'s (in time proportional to the paths' depth: `PathSet`).
    fn held_clear(&self, k: u32, at: (u32, u32)) -> bool {
        let held = &self.keys.key(k).held_paths;
        let batch = self.batches.slot(at.0);
        let call = batch.entries[at.1 as usize].call;
        !batch.paths_of(call, k).any(|p| held.meets(p))
    }

    /// Whether entry `e` (at `at`) may take its paths on path key `k` as far as paths go:
    /// nothing overlapping it waits before it or runs (`key_set.rs` asks this of a set's
    /// other keys).
    pub(super) fn paths_clear(&self, k: u32, e: u64, at: (u32, u32)) -> bool {
        self.held_clear(k, at) && self.waits_behind(k, e, at).is_none()
    }

    /// A path key's walk: through the whole queue, releasing every approved entry whose paths
    /// are clear, skipping (and keeping) the ones that wait, and stopping at the first that
    /// could go but for the tree's limit or pause. Entries that no longer wait are dropped.
    pub(super) fn walk_tree(&mut self, k: u32) {
        let queue = self.keys.take_queue(k);
        let mut kept = VecDeque::with_capacity(queue.len());
        // The paths of the entries kept waiting so far: a later entry overlapping one of them
        // stays behind it. Once the root waits, everything after it does.
        let mut waiting = PathSet::default();
        let mut stopped = false;
        for e in queue {
            if stopped {
                kept.push_back(e);
                continue;
            }
            let Some(at) = self.batches.locate(e) else {
                continue;
            };
            let batch = self.batches.slot(at.0);
            let state = batch.entries[at.1 as usize].life.get();
            if !matches!(state, State::Pending | State::Approved) {
                continue;
            }
            let call = batch.entries[at.1 as usize].call;
            let behind = batch.paths_of(call, k).any(|p| waiting.meets(p));
            if !behind && state == State::Approved && batch.is_open() {
                let key = self.keys.key(k);
                let gate = key.gate(1);
                if !key.has_room() || gate > self.now {
                    if key.has_room() {
                        self.arm_key(k, gate);
                    }
                    stopped = true;
                    kept.push_back(e);
                    continue;
                }
                if self.held_clear(k, at) {
                    let in_set = self.in_set(at.0, at.1);
                    let turn = if in_set {
                        self.set_turn(k, e, at.0, at.1)
                    } else {
                        Turn::Go(at.0, at.1)
                    };
                    if let Turn::Go(slot, index) = turn {
                        self.release(slot, index);
                        if in_set {
                            self.set_released(k, e, slot, index);
                        }
                        continue;
                    }
                }
            }
            let batch = self.batches.slot(at.0);
            for p in batch.paths_of(batch.entries[at.1 as usize].call, k) {
                waiting.insert(p);
            }
            stopped = waiting.has_root();
            kept.push_back(e);
        }
        self.keys.put_queue(k, kept);
    }

    /// Why entry `e` (at `at`, approved in an open batch) waits on path key `k`, for
    /// `inspect`: behind an earlier waiting entry on an overlapping path, for the tree's
    /// limit or pause, or for running entries on overlapping paths (a path holds one at a
    /// time: shown as its path being full, limit 1); `None` when `k` lets it go.
    pub(super) fn tree_wait(&self, k: u32, e: u64, at: (u32, u32)) -> Option<Wait> {
        let key = self.keys.key(k);
        // Entry `e`'s path that meets one of entry `other`'s, as the wait names it.
        let meeting = |other: u64| {
            let theirs: Vec<&str> = self.paths_at(k, other).collect();
            let first = self.paths_at(k, e).next().unwrap_or_default();
            let path = self
                .paths_at(k, e)
                .find(|p| theirs.iter().any(|o| overlap(p, o)));
            display(&key.name, path.unwrap_or(first))
        };
        if let Some(q) = self.waits_behind(k, e, at) {
            return Some(Wait::Behind {
                label: self.label(EntryId(q)).unwrap_or_default(),
                key: meeting(q),
            });
        }
        if !key.has_room() {
            return Some(Wait::KeyFull {
                key: key.name.clone(),
                limit: key.limit,
                running: self.running_labels(k),
            });
        }
        if key.gate(1) > self.now {
            return Some(Wait::KeyPaused {
                key: key.name.clone(),
                until: key.gate(1),
            });
        }
        let held: Vec<u64> = self.held_over(k, at).collect();
        Some(Wait::KeyFull {
            key: meeting(*held.first()?),
            limit: 1,
            running: held
                .iter()
                .filter_map(|&h| self.label(EntryId(h)))
                .collect(),
        })
    }

    /// Applies a transition's slot effects to the paths entry `e` (at `at`) holds on path
    /// key `k`: taken with its slot, given back with it.
    pub(super) fn hold_paths(&mut self, k: u32, e: u64, at: (u32, u32), effects: Effects) {
        let batch = self.batches.slot(at.0);
        let paths = batch.paths_of(batch.entries[at.1 as usize].call, k);
        let key = self.keys.key_mut(k);
        if effects.has(Effects::TAKES_SLOT) {
            // A move's own two paths may overlap each other: check them all, then take them.
            debug_assert!(
                !paths.clone().any(|p| key.held_paths.meets(p)),
                "overlapping paths held at once on {}",
                key.name
            );
            for p in paths {
                key.held_paths.insert(p);
            }
            key.held.push(e);
        } else if effects.has(Effects::FREES_SLOT) {
            let place = key.held.iter().position(|&h| h == e);
            debug_assert!(place.is_some(), "paths given back twice on {}", key.name);
            if let Some(place) = place {
                key.held.remove(place);
                for p in paths {
                    key.held_paths.remove(p);
                }
            }
        }
    }
}
