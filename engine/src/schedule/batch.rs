//! Batches: their storage, how an entry number finds its batch, the checks on a new batch, and
//! retirement. Retired slots keep their vectors' capacity and are reused, so a scheduler's
//! memory follows its live work, not its history.

use std::collections::VecDeque;

use super::error::{SubmitError, SubmitErrorCode};
use super::lifecycle::{Lifecycle, State};
use super::names::{CallRef, FxHashMap, LiveIds, grow, id_hash};
use crate::limits::{CALLS_PER_BATCH_MAX, NAME_BYTES_MAX, OPERATIONS_PER_CALL_MAX};

/// An `Option<u32>` in four bytes (`u32::MAX` is none; no count or index reaches it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OptU32(u32);

impl OptU32 {
    pub(crate) const NONE: Self = Self(u32::MAX);

    pub(crate) fn new(value: Option<u32>) -> Self {
        value.map_or(Self::NONE, |v| {
            debug_assert!(v != u32::MAX);
            Self(v)
        })
    }

    pub(crate) fn get(self) -> Option<u32> {
        (self != Self::NONE).then_some(self.0)
    }
}

/// The weight a key set's member records when its key is one an earlier member of the set
/// made (`{src}` and `{dst}` equal): it is kept, so a saved call names every member's key,
/// and skipped wherever the set's keys are taken.
pub(crate) const DUPLICATE: u32 = 0;

/// The keys of a key set's members, each once: the one place a member marked [`DUPLICATE`]
/// (its key an earlier member's) is left out, so the set counts it once everywhere.
#[inline]
pub(crate) fn distinct(members: &[(u32, u32)]) -> impl Iterator<Item = (u32, u32)> + '_ {
    members.iter().copied().filter(|&(_, w)| w != DUPLICATE)
}

/// A path one call takes on a path key: member `member` of its tool's key set.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PathRec {
    pub(crate) call: u32,
    pub(crate) member: u32,
    pub(crate) key: u32,
    start: u32,
    end: u32,
}

/// An entry: 12 bytes, most of what a queued execution costs.
#[derive(Debug)]
pub(crate) struct Entry {
    /// Its call's index in the batch.
    pub(crate) call: u32,
    pub(crate) key: OptU32,
    pub(crate) life: Lifecycle,
}

/// A call; its id is `ids[id_start..id_end]` of its batch.
#[derive(Debug)]
pub(crate) struct CallRec {
    /// Its first entry's index in the batch.
    pub(crate) first: u32,
    pub(crate) count: u32,
    pub(crate) tool: u32,
    pub(crate) id_start: u32,
    pub(crate) id_end: u32,
    /// The lowest failed operation, under `on_error = "stop"`.
    pub(crate) first_failed: OptU32,
    /// The other keys of its key set: `set_keys[set_start..set_start + set_len]` of its batch
    /// (none for a call with one key or none).
    pub(crate) set_start: u32,
    pub(crate) set_len: u32,
    pub(crate) fan_out: bool,
    pub(crate) stop: bool,
}

/// A live batch (or a free slot, whose vectors are kept for reuse).
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) id: u64,
    /// The number of its first entry.
    pub(crate) first: u64,
    pub(crate) entries: Vec<Entry>,
    pub(crate) calls: Vec<CallRec>,
    /// Call ids end to end.
    pub(crate) ids: String,
    /// Keys its entries use, each once.
    pub(crate) keys: Vec<u32>,
    /// The keys of its calls' key sets beyond each call's first, with the units of each key's
    /// rate one call costs (`CallRec::set_start`).
    pub(crate) set_keys: Vec<(u32, u32)>,
    /// The paths its calls take on path keys, in call order (`path_key.rs`); their text is
    /// `path_text[start..end]`, normalized.
    pub(crate) paths: Vec<PathRec>,
    pub(crate) path_text: String,
    /// Entries still pending (the approval barrier). Written only by `push_entries` and
    /// `decided`, so it always counts the pending entries.
    pending: u32,
    /// Entries without a response (pending, approved, running, asking); at zero it retires.
    /// Written only by `push_entries` and `answered`.
    unanswered: u32,
    open: bool,
    cancelled: bool,
    /// Its executions' time limits (`deadline.rs`).
    pub(crate) limits: super::Limits,
}

impl Batch {
    /// The id of call `call`, which the caller knows is in this batch (plain indexing: a bad
    /// index is our bug, never the host's).
    pub(crate) fn call_id(&self, call: u32) -> &str {
        let c = &self.calls[call as usize];
        &self.ids[c.id_start as usize..c.id_end as usize]
    }

    /// The label of entry `index` (in this batch): `call` or `call#i`.
    pub(crate) fn label(&self, index: u32) -> String {
        let entry = &self.entries[index as usize];
        let call = &self.calls[entry.call as usize];
        let id = self.call_id(entry.call);
        if call.fan_out {
            format!("{id}#{}", index - call.first)
        } else {
            id.to_owned()
        }
    }

    /// The keys of entry `index`'s key set beyond its first, each once, with the units of each
    /// key's rate one call costs ([`distinct`] of its members).
    #[inline]
    pub(crate) fn other_keys(&self, index: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
        distinct(self.more_keys(index))
    }

    /// The members of entry `index`'s key set beyond its first (its call's), with the units of
    /// each key's rate one call costs; a member that made a key an earlier member made is
    /// kept, marked [`DUPLICATE`] (a saved call names every member's key).
    #[inline]
    pub(crate) fn more_keys(&self, index: u32) -> &[(u32, u32)] {
        let call = &self.calls[self.entries[index as usize].call as usize];
        let start = call.set_start as usize;
        &self.set_keys[start..start + call.set_len as usize]
    }

    /// The paths call `call` takes on path key `k` (normalized; two when a move names the
    /// tree for its source and its destination).
    pub(crate) fn paths_of(&self, call: u32, k: u32) -> impl Iterator<Item = &str> + Clone + '_ {
        let at = self.paths.partition_point(|p| p.call < call);
        self.paths[at..]
            .iter()
            .take_while(move |p| p.call == call)
            .filter(move |p| p.key == k)
            .map(|p| &self.path_text[p.start as usize..p.end as usize])
    }

    /// The path member `member` of call `call`'s key set takes, if it is a path key.
    pub(crate) fn member_path(&self, call: u32, member: u32) -> Option<&str> {
        let at = self.paths.partition_point(|p| p.call < call);
        self.paths[at..]
            .iter()
            .take_while(|p| p.call == call)
            .find(|p| p.member == member)
            .map(|p| &self.path_text[p.start as usize..p.end as usize])
    }

    /// Records the path member `member` of the call being added takes on key `k`.
    pub(crate) fn push_path(&mut self, member: u32, k: u32, path: &str) {
        let call = self.calls.len() as u32 - 1;
        let start = self.path_text.len() as u32;
        self.path_text.push_str(path);
        self.paths.push(PathRec {
            call,
            member,
            key: k,
            start,
            end: self.path_text.len() as u32,
        });
    }

    /// Entries still pending (the approval barrier).
    pub(crate) fn pending(&self) -> u32 {
        self.pending
    }

    /// Entries without a response.
    pub(crate) fn unanswered(&self) -> u32 {
        self.unanswered
    }

    /// The barrier fell: its approved entries may go.
    pub(crate) fn is_open(&self) -> bool {
        self.open
    }

    /// It was cancelled: nothing of it starts again.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled
    }

    /// Adds entries (new ones are pending; restored ones may have their response) and counts
    /// them; returns how many are pending.
    #[inline]
    pub(crate) fn push_entries(&mut self, entries: impl Iterator<Item = Entry>) -> u32 {
        let (mut pending, mut unanswered) = (0, 0);
        for entry in entries {
            let state = entry.life.get();
            pending += u32::from(state == State::Pending);
            unanswered += u32::from(state.lacks_response());
            self.entries.push(entry);
        }
        self.pending += pending;
        self.unanswered += unanswered;
        pending
    }

    /// An entry left `pending` ([`Effects::DECIDED`](super::effects::Effects)); true when
    /// that lets the barrier fall (never in a cancelled batch, which opens no more).
    #[inline]
    pub(crate) fn decided(&mut self) -> bool {
        debug_assert!(self.pending > 0, "batch {} decided twice", self.id);
        self.pending -= 1;
        self.pending == 0 && !self.cancelled
    }

    /// An entry got its response; true when that was the last one (the batch retires).
    #[inline]
    pub(crate) fn answered(&mut self) -> bool {
        debug_assert!(self.unanswered > 0, "batch {} answered twice", self.id);
        self.unanswered -= 1;
        self.unanswered == 0
    }

    /// The barrier falls (paired with `decided` reaching zero).
    pub(crate) fn open(&mut self) {
        debug_assert!(!self.open && self.pending == 0 && !self.cancelled);
        self.open = true;
    }

    /// Marks it cancelled; its pending entries are settled next, which brings `pending` to
    /// zero without opening it.
    pub(crate) fn cancel(&mut self) {
        self.cancelled = true;
    }

    pub(crate) fn end(&self) -> u64 {
        self.first + self.entries.len() as u64
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.calls.clear();
        self.ids.clear();
        self.keys.clear();
        self.set_keys.clear();
        self.paths.clear();
        self.path_text.clear();
        self.pending = 0;
        self.unanswered = 0;
        self.open = false;
        self.cancelled = false;
        self.limits = super::Limits::default();
    }
}

/// Every live batch, by slot; live slots in entry order; batch numbers; live call ids.
#[derive(Debug, Default)]
pub(crate) struct Batches {
    slots: Vec<Batch>,
    free: Vec<u32>,
    /// `(first entry, slot)` of every live batch in entry order; `u32::MAX` marks a retired one,
    /// dropped from the front at once and compacted away when they are half the list.
    order: VecDeque<(u64, u32)>,
    retired_in_order: usize,
    by_id: FxHashMap<u64, u64>,
    pub(crate) ids: LiveIds,
    live_entries: usize,
}

const RETIRED: u32 = u32::MAX;

impl Batches {
    pub(crate) fn slot(&self, slot: u32) -> &Batch {
        &self.slots[slot as usize]
    }

    pub(crate) fn slot_mut(&mut self, slot: u32) -> &mut Batch {
        &mut self.slots[slot as usize]
    }

    pub(crate) fn live_entries(&self) -> usize {
        self.live_entries
    }

    /// The slot of a live batch.
    pub(crate) fn find(&self, id: u64) -> Option<u32> {
        self.by_id.get(&id).map(|&slot| slot as u32)
    }

    /// The slot and index of a live entry.
    pub(crate) fn locate(&self, entry: u64) -> Option<(u32, u32)> {
        // Batches are numbered in entry order; the newest is the usual target.
        let i = match self.order.back() {
            Some(&(first, _)) if first <= entry => self.order.len() - 1,
            _ => self
                .order
                .partition_point(|&(first, _)| first <= entry)
                .checked_sub(1)?,
        };
        let (first, slot) = self.order[i];
        if slot == RETIRED {
            return None;
        }
        let index = entry - first;
        (index < self.slots[slot as usize].entries.len() as u64).then_some((slot, index as u32))
    }

    /// Live slots in entry order.
    pub(crate) fn live(&self) -> impl Iterator<Item = u32> + '_ {
        self.order
            .iter()
            .map(|&(_, slot)| slot)
            .filter(|&slot| slot != RETIRED)
    }

    /// A cleared slot for a new batch numbered `id` from entry `first`; `first` is past every
    /// live batch's entries.
    pub(crate) fn open_slot(&mut self, id: u64, first: u64) -> u32 {
        debug_assert!(self.order.back().is_none_or(|&(f, s)| {
            f <= first && (s == RETIRED || self.slots[s as usize].end() <= first)
        }));
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                grow(&mut self.slots, 1);
                self.slots.push(Batch::default());
                (self.slots.len() - 1) as u32
            }
        };
        let batch = &mut self.slots[slot as usize];
        batch.clear();
        batch.id = id;
        batch.first = first;
        self.order.push_back((first, slot));
        self.by_id.insert(id, u64::from(slot));
        slot
    }

    /// Counts a sealed batch's entries as live.
    pub(crate) fn sealed(&mut self, slot: u32) {
        self.live_entries += self.slots[slot as usize].entries.len();
    }

    /// Forgets a batch whose every entry has a response: its numbers and call ids are retired.
    pub(crate) fn retire(&mut self, slot: u32) {
        let batch = &self.slots[slot as usize];
        debug_assert_eq!(batch.unanswered, 0);
        for (c, _) in batch.calls.iter().enumerate() {
            let id = batch.call_id(c as u32);
            self.ids.remove(
                id_hash(id),
                CallRef {
                    slot,
                    call: c as u32,
                },
            );
        }
        let (id, first) = (batch.id, batch.first);
        self.live_entries -= batch.entries.len();
        self.by_id.remove(&id);
        let i = self.order.partition_point(|&(f, _)| f < first);
        debug_assert!(
            self.order
                .get(i)
                .is_some_and(|&(f, s)| f == first && s == slot)
        );
        if let Some(place) = self.order.get_mut(i) {
            place.1 = RETIRED;
            self.retired_in_order += 1;
        }
        while self.order.front().is_some_and(|&(_, s)| s == RETIRED) {
            self.order.pop_front();
            self.retired_in_order -= 1;
        }
        if self.retired_in_order > 16 && self.retired_in_order * 2 > self.order.len() {
            self.order.retain(|&(_, s)| s != RETIRED);
            self.retired_in_order = 0;
        }
        self.free.push(slot);
    }
}

/// One call of a new batch, as the model wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call<'a> {
    /// Unique among live calls; 1 to `NAME_BYTES_MAX` bytes, no `#` or newline.
    pub id: &'a str,
    /// The configured tool name. A tool no layer configures is unbounded.
    pub tool: &'a str,
    /// `None`: a plain call, one entry labelled `id`. `Some(n)`: a fan-out envelope of `n`
    /// operations, entries `id#0` .. `id#(n-1)`; the tool must fan out.
    pub operations: Option<u32>,
    /// The call's arguments as JSON text, read only when its tool's key is a template
    /// (`key = "fs:{path}"`); at most `ARGUMENTS_BYTES_MAX` bytes. A call of a templated
    /// tool whose arguments are missing, not a JSON object, or lack a field (or hold `null`,
    /// an array or an object there) takes the key named by the template's own text, with the
    /// same limit and delay: it is limited, never unbounded.
    pub arguments: Option<&'a str>,
}

pub(crate) fn check_name(what: &str, name: &str, call_id: bool) -> Result<(), String> {
    if name.is_empty()
        || name.len() > NAME_BYTES_MAX
        || (call_id && (name.contains('#') || name.contains('\n')))
    {
        return Err(format!(
            "{what} {:?} must be 1 to {NAME_BYTES_MAX} bytes{}",
            truncate(name),
            if call_id {
                " without '#' or a newline"
            } else {
                ""
            }
        ));
    }
    Ok(())
}

pub(crate) fn truncate(s: &str) -> &str {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The entry count of a call, or why it cannot be one.
pub(crate) fn entry_count(call: &Call<'_>, fan_out: bool) -> Result<u32, SubmitError> {
    match call.operations {
        None => Ok(1),
        Some(_) if !fan_out => Err(SubmitError::new(
            SubmitErrorCode::NotFanOut,
            format!(
                "call {:?} has operations, but tool {:?} does not fan out",
                call.id, call.tool
            ),
        )),
        Some(0) => Err(SubmitError::new(
            SubmitErrorCode::InvalidOperations,
            format!(
                "call {:?} has zero operations; submit an envelope the tool cannot split as a \
                 plain call and settle it as failed",
                call.id
            ),
        )),
        Some(n) if n > OPERATIONS_PER_CALL_MAX => Err(SubmitError::new(
            SubmitErrorCode::TooLarge,
            format!(
                "call {:?} has {n} operations; at most {OPERATIONS_PER_CALL_MAX} are accepted",
                call.id
            ),
        )),
        Some(n) => Ok(n),
    }
}

pub(crate) fn check_batch_size(calls: usize) -> Result<(), SubmitError> {
    if calls == 0 {
        return Err(SubmitError::new(
            SubmitErrorCode::EmptyBatch,
            "a batch needs at least one call".to_owned(),
        ));
    }
    if calls > CALLS_PER_BATCH_MAX {
        return Err(SubmitError::new(
            SubmitErrorCode::TooLarge,
            format!("{calls} calls in one batch; at most {CALLS_PER_BATCH_MAX} are accepted"),
        ));
    }
    Ok(())
}

/// Adds a call's records to a batch being built; the caller checked it.
pub(crate) fn push_call(
    batch: &mut Batch,
    id: &str,
    tool: u32,
    count: u32,
    fan_out: bool,
    stop: bool,
    more: &[(u32, u32)],
) {
    let id_start = batch.ids.len() as u32;
    let set_start = batch.set_keys.len() as u32;
    batch.set_keys.extend_from_slice(more);
    batch.ids.push_str(id);
    batch.calls.push(CallRec {
        first: batch.entries.len() as u32,
        count,
        tool,
        id_start,
        id_end: batch.ids.len() as u32,
        first_failed: OptU32::NONE,
        set_start,
        set_len: more.len() as u32,
        fan_out,
        stop,
    });
}
