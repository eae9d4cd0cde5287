//! Restart: [`Scheduler::unfinished`] exports every live batch as a versioned [`SavedState`],
//! and [`Scheduler::resume`] rebuilds them, with the same numbers, in a fresh scheduler under
//! the same or a changed policy.
//!
//! Format, version 2: the policy's fingerprint, the next batch and entry numbers, and per live
//! batch its number, first entry, whether it was cancelled, its time limits, and every call in written order
//! with the state of each entry that is not pending or approved ([`Saved`]). Pending and
//! approved entries are decided again after a restart (JP re-asks for permission).

use super::batch::{self, Call};
use super::error::{ResumeError, ResumeErrorCode, Unrestored, UnrestoredCode};
use super::layout::{Layout, MadeFrom};
use super::lifecycle::{Lifecycle, Saved};
use super::names::id_hash;
use super::{BatchId, EntryId, Reason, Scheduler, State};
use crate::config::Policy;
use crate::limits::{ENTRIES_MAX, OPERATIONS_PER_CALL_MAX};

/// The version of [`SavedState`] this engine writes and reads.
pub const SAVED_VERSION: u32 = 2;

/// A scheduler's state, for [`Scheduler::resume`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedState {
    /// [`SAVED_VERSION`].
    pub version: u32,
    /// A fingerprint of the policy the state was made under ([`fingerprint`]).
    pub policy: u64,
    /// The batch number the scheduler would have handed out next.
    pub next_batch: u64,
    /// The entry number it would have handed out next.
    pub next_entry: u64,
    /// Every live batch, in entry order.
    pub batches: Vec<SavedBatch>,
}

/// A live batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedBatch {
    /// Its number.
    pub batch: BatchId,
    /// Its first entry.
    pub first: EntryId,
    /// It was cancelled: nothing of it starts again.
    pub cancelled: bool,
    /// Its executions' time limits, kept over a restart (a deadline itself is not: time is
    /// the host process's, so what runs again gets a new deadline when it starts).
    pub limits: super::Limits,
    /// Every call, in written order.
    pub calls: Vec<SavedCall>,
}

/// A call of a live batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedCall {
    /// Its id.
    pub id: String,
    /// Its tool.
    pub tool: String,
    /// `None` for a plain call, else its operation count.
    pub operations: Option<u32>,
    /// The keys its arguments made, for a tool with a key template: the name of every key of
    /// its key set, one per member in written order, a shared key first (a template's own text where the
    /// arguments made none); empty for other tools. `resume` gives the call these keys again.
    /// A state saved before key sets has at most one name, its one template's key.
    pub keys: Vec<String>,
    /// `(operation, state)` of each entry that was neither pending nor approved (operation 0
    /// for a plain call).
    pub entries: Vec<(u32, Saved)>,
}

/// What [`Scheduler::resume`] does with entries that had started and have no response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Started {
    /// Pending again; they run again once approved (RFD 129).
    #[default]
    RunAgain,
    /// Settled as [`Reason::Interrupted`], reported by the first `next_releases`.
    Interrupt,
}

/// A fingerprint of what a policy means to the scheduler ([`Policy::fingerprint`]); a
/// [`SavedState`] carries the one it was made under.
pub fn fingerprint(policy: &Policy) -> u64 {
    policy.fingerprint()
}

impl Scheduler {
    /// Exports every live batch, for [`Scheduler::resume`]. Costs time proportional to live
    /// work.
    pub fn unfinished(&self) -> SavedState {
        // What the scheduler settled but no `next_releases` has reported yet is saved as it was
        // before, so that the resumed scheduler answers it again rather than never: an
        // execution it gave up on (interrupted, rate-limited past its cap, timed out) as started,
        // an entry it settled before it ran (cancelled, stopped) as pending.
        let undelivered = |e: u64, state: State| match state {
            State::Settled(
                Reason::Interrupted | Reason::RateLimited { .. } | Reason::TimedOut { .. },
            ) if self.settled.contains(&e) => Some(Some(Saved::Started)),
            State::Settled(Reason::Cancelled | Reason::Stopped { .. })
                if self.settled.contains(&e) =>
            {
                Some(None)
            }
            _ => None,
        };
        let batches = self
            .batches
            .live()
            .map(|slot| {
                let b = self.batches.slot(slot);
                let calls = b
                    .calls
                    .iter()
                    .enumerate()
                    .map(|(c, call)| SavedCall {
                        id: b.call_id(c as u32).to_owned(),
                        tool: self.keys.tool(call.tool).name.clone(),
                        operations: call.fan_out.then_some(call.count),
                        keys: self.made_keys(slot, call.first),
                        entries: (0..call.count)
                            .filter_map(|op| {
                                let index = call.first + op;
                                let state = b.entries[index as usize].life.get();
                                let saved = match undelivered(b.first + u64::from(index), state) {
                                    Some(before) => before,
                                    None => Saved::of(state),
                                };
                                saved.map(|s| (op, s))
                            })
                            .collect(),
                    })
                    .collect();
                SavedBatch {
                    batch: BatchId(b.id),
                    first: EntryId(b.first),
                    cancelled: b.is_cancelled(),
                    limits: b.limits,
                    calls,
                }
            })
            .collect();
        SavedState {
            version: SAVED_VERSION,
            policy: self.policy.fingerprint(),
            next_batch: self.next_batch,
            next_entry: self.next_entry,
            batches,
        }
    }

    /// Imports what [`Scheduler::unfinished`] exported, under `policy`: every batch keeps its
    /// numbers; what ended or was settled keeps its response and never runs again; pending and
    /// approved entries are pending; started ones are pending or interrupted as `started`
    /// says (always interrupted in a cancelled batch). A call that cannot be restored (its
    /// tool no longer fans out, its id is taken, its numbers are wrong) is left out and
    /// listed; its entries are never released, and the host answers it. Interrupted entries
    /// are reported by the first [`Scheduler::next_releases`].
    pub fn resume(
        policy: Policy,
        state: &SavedState,
        started: Started,
    ) -> Result<(Self, Vec<Unrestored>), ResumeError> {
        if state.version != SAVED_VERSION {
            return Err(ResumeError::new(
                ResumeErrorCode::UnsupportedVersion,
                format!(
                    "saved state version {} is not {SAVED_VERSION}, the version this engine reads",
                    state.version
                ),
            ));
        }
        let total: u64 = state
            .batches
            .iter()
            .flat_map(|b| &b.calls)
            .map(|c| u64::from(c.operations.unwrap_or(1)))
            .sum();
        if total > ENTRIES_MAX as u64 {
            return Err(ResumeError::new(
                ResumeErrorCode::TooLarge,
                format!("the state holds more than {ENTRIES_MAX} live entries"),
            ));
        }
        let mut s = Self::new(policy);
        // Numbers start at 1 (0 never names anything); a crafted state cannot move them below.
        s.next_batch = state.next_batch.max(1);
        s.next_entry = state.next_entry.max(1);
        let mut unrestored = Vec::new();
        let mut end = 1u64;
        for saved in &state.batches {
            let count: u64 = saved
                .calls
                .iter()
                .map(|c| u64::from(c.operations.unwrap_or(1)))
                .sum();
            let numbers_ok = saved.first.0 >= end
                && saved
                    .first
                    .0
                    .checked_add(count)
                    .is_some_and(|e| e <= state.next_entry)
                && (1..state.next_batch).contains(&saved.batch.0)
                && s.batches.find(saved.batch.0).is_none()
                && !saved.calls.is_empty()
                && saved.calls.iter().all(|c| {
                    c.operations
                        .is_none_or(|n| (1..=OPERATIONS_PER_CALL_MAX).contains(&n))
                });
            if !numbers_ok {
                unrestored.extend(saved.calls.iter().map(|c| Unrestored {
                    batch: saved.batch.0,
                    call: c.id.clone(),
                    code: UnrestoredCode::InvalidNumbers,
                    message: format!(
                        "batch {} (entries from {}) overlaps another batch, lies beyond the \
                         state's next numbers, or has an impossible operation count",
                        saved.batch.0, saved.first.0
                    ),
                }));
                continue;
            }
            end = saved.first.0 + count;
            s.restore_batch(saved, started, &mut unrestored);
        }
        Ok((s, unrestored))
    }

    fn restore_batch(
        &mut self,
        saved: &SavedBatch,
        started: Started,
        unrestored: &mut Vec<Unrestored>,
    ) {
        let slot = self.batches.open_slot(saved.batch.0, saved.first.0);
        if saved.cancelled {
            self.batches.slot_mut(slot).cancel();
        }
        self.batches.slot_mut(slot).limits = saved.limits;
        let rerun = started == Started::RunAgain && !saved.cancelled;
        for (c, call) in saved.calls.iter().enumerate() {
            let count = call.operations.unwrap_or(1);
            // Each operation's saved state, by index: one pass, however many there are.
            let mut states: Vec<Option<Saved>> = vec![None; count as usize];
            let mut listed_twice = false;
            for &(op, state) in &call.entries {
                match states.get_mut(op as usize) {
                    Some(place @ None) => *place = Some(state),
                    Some(Some(_)) => listed_twice = true,
                    None => {}
                }
            }
            let problem = self.restorable(call, listed_twice);
            let tool = self.keys.intern_tool(&self.policy, &call.tool);
            let (key, stop) = match problem {
                // The key the call had: saved by name, since its arguments are not.
                None => self.call_key(tool, MadeFrom::Saved(&call.keys)),
                Some(_) => {
                    self.scratch_set.clear();
                    self.scratch_paths.clear();
                    (None, false)
                }
            };
            let more = std::mem::take(&mut self.scratch_set);
            let paths = std::mem::take(&mut self.scratch_paths);
            let layout = Layout {
                id: &call.id,
                hash: id_hash(&call.id),
                tool,
                count,
                fan_out: call.operations.is_some(),
                key,
                more: &more,
                paths: &paths,
                stop,
            };
            // A left-out call keeps its id while its batch lives, like any live call.
            self.lay_out(slot, c as u32, &layout, |op| {
                let saved_state = states[op as usize];
                match problem {
                    Some(_) => Lifecycle::unrestored(saved_state),
                    None => Lifecycle::restored(saved_state, rerun, saved.cancelled),
                }
            });
            self.scratch_set = more;
            self.scratch_paths = paths;
            // Settled by this restart (not before it): the first `next_releases` reports it.
            let b = self.batches.slot(slot);
            let first = b.entries.len() - count as usize;
            for (op, &saved_state) in states.iter().enumerate() {
                let e = b.first + (first + op) as u64;
                if let State::Settled(reason @ (Reason::Interrupted | Reason::Cancelled)) =
                    b.entries[first + op].life.get()
                    && problem.is_none()
                    && saved_state != Some(Saved::Settled(reason))
                {
                    self.settled.push(e);
                }
            }
            if let Some((code, message)) = problem {
                unrestored.push(Unrestored {
                    batch: saved.batch.0,
                    call: call.id.clone(),
                    code,
                    message,
                });
            }
        }
        self.batches.sealed(slot);
        let b = self.batches.slot_mut(slot);
        // A cancelled batch has nothing pending (a restart settles it) and never opens.
        debug_assert!(!b.is_cancelled() || b.pending() == 0);
        if !b.is_cancelled() && b.pending() == 0 {
            self.open_restored(slot);
        }
        if self.batches.slot(slot).unanswered() == 0 {
            self.retiring.push(slot);
        }
    }

    /// A restored batch with nothing pending is open at once; nothing of it is approved, so
    /// nothing is released.
    fn open_restored(&mut self, slot: u32) {
        self.batches.slot_mut(slot).open();
    }

    /// Why a saved call cannot be restored under this scheduler's policy, if it cannot.
    fn restorable(&self, call: &SavedCall, listed_twice: bool) -> Option<(UnrestoredCode, String)> {
        let named = batch::check_name("call id", &call.id, true)
            .and_then(|()| batch::check_name("tool name", &call.tool, false));
        if let Err(message) = named {
            return Some((UnrestoredCode::InvalidId, message));
        }
        let batches = &self.batches;
        if batches
            .ids
            .find(id_hash(&call.id), &call.id, |c| {
                batches.slot(c.slot).call_id(c.call)
            })
            .is_some()
        {
            return Some((
                UnrestoredCode::DuplicateId,
                format!(
                    "call id {:?} is used by an earlier call of the state",
                    call.id
                ),
            ));
        }
        let probe = Call {
            id: &call.id,
            tool: &call.tool,
            operations: call.operations,
            arguments: None,
        };
        let fan_out = self.keys.fans_out(&self.policy, &call.tool);
        let count = match batch::entry_count(&probe, fan_out) {
            Ok(count) => count,
            Err(e) => return Some((UnrestoredCode::InvalidOperations, e.message)),
        };
        if listed_twice || call.entries.iter().any(|&(op, _)| op >= count) {
            return Some((
                UnrestoredCode::InvalidOperations,
                format!(
                    "call {:?}: a saved operation is outside 0..{count} or listed twice",
                    call.id
                ),
            ));
        }
        None
    }
}

impl Scheduler {
    /// The names a saved call keeps for the keys its arguments made: every member's key of
    /// its set, in written order, when one of them was made from a template (else none: a
    /// configured key needs no name to be found again).
    fn made_keys(&self, slot: u32, index: u32) -> Vec<String> {
        let b = self.batches.slot(slot);
        let entry = &b.entries[index as usize];
        let Some(first) = entry.key.get() else {
            return Vec::new();
        };
        if !self
            .keys
            .tool(b.calls[entry.call as usize].tool)
            .has_template()
        {
            return Vec::new();
        }
        // Every member, repeats included: names go back to members by position; a path key's
        // member names its path too.
        let keys = std::iter::once(first).chain(b.more_keys(index).iter().map(|&(k, _)| k));
        keys.enumerate()
            .map(|(m, k)| match b.member_path(entry.call, m as u32) {
                Some(path) => super::path_key::display(&self.keys.key(k).name, path),
                None => self.keys.key(k).name.clone(),
            })
            .collect()
    }
}
