//! How a call becomes entries: its record, its key, its entries, their places in the key's
//! queue and its id among the live calls. `submit_batch` lays out new calls (every entry
//! pending) and `resume` saved ones (each entry in its restored state) with the same code, so
//! the two cannot drift apart.

use super::Scheduler;
use super::batch::{self, Call, Entry, OptU32};
use super::keys::KeyOf;
use super::lifecycle::{Lifecycle, State};
use super::names::CallRef;

/// One call to lay out, checked.
pub(super) struct Layout<'a> {
    pub(super) id: &'a str,
    /// Its id's hash.
    pub(super) hash: u64,
    /// Its interned tool.
    pub(super) tool: u32,
    /// Its entry count.
    pub(super) count: u32,
    /// A fan-out envelope (its entries are operations).
    pub(super) fan_out: bool,
    pub(super) key: Option<u32>,
    /// The other keys of its key set, with their weights ([`batch::DUPLICATE`] for a key an
    /// earlier member made).
    pub(super) more: &'a [(u32, u32)],
    /// The paths it takes on path keys: `(member, key, normalized path)`.
    pub(super) paths: &'a [(u32, u32, String)],
    /// Its tool's `on_error = "stop"`.
    pub(super) stop: bool,
}

/// Where a templated tool's call takes its key from.
pub(super) enum MadeFrom<'a> {
    /// Its arguments (a new call).
    Arguments(Option<&'a str>),
    /// The key names a saved state kept, one per member of the tool's key set (its arguments
    /// were not saved); a missing or malformed one takes its template's own key.
    Saved(&'a [String]),
}

impl Scheduler {
    /// Builds a checked batch's records into its slot.
    pub(super) fn fill(&mut self, slot: u32, calls: &[Call<'_>]) {
        let total: usize = self.scratch.iter().map(|&(_, n)| n as usize).sum();
        {
            let b = self.batches.slot_mut(slot);
            b.entries.reserve(total);
            b.calls.reserve(calls.len());
        }
        self.batches.ids.reserve(calls.len());
        for (c, call) in calls.iter().enumerate() {
            let (hash, count) = self.scratch[c];
            let tool = self.keys.intern_tool(&self.policy, call.tool);
            let (key, stop) = self.call_key(tool, MadeFrom::Arguments(call.arguments));
            let more = std::mem::take(&mut self.scratch_set);
            let paths = std::mem::take(&mut self.scratch_paths);
            let layout = Layout {
                id: call.id,
                hash,
                tool,
                count,
                fan_out: call.operations.is_some(),
                key,
                more: &more,
                paths: &paths,
                stop,
            };
            self.lay_out(slot, c as u32, &layout, |_| Lifecycle::PENDING);
            self.scratch_set = more;
            self.scratch_paths = paths;
        }
        self.batches.sealed(slot);
    }

    /// The key of a call of tool `tool` (the first of its key set) and whether the tool stops
    /// on a failure; the rest of its key set goes to `scratch_set`, a key an earlier member
    /// made marked [`batch::DUPLICATE`].
    pub(super) fn call_key(&mut self, tool: u32, made: MadeFrom<'_>) -> (Option<u32>, bool) {
        let rec = self.keys.tool(tool);
        let (first, stop, members) = (rec.key, rec.stop, rec.more.len());
        let key = self.member_key(first, &made, 0);
        self.scratch_set.clear();
        for m in 0..members {
            let (of, weight) = self.keys.tool(tool).more[m];
            let Some(k) = self.member_key(of, &made, m + 1) else {
                continue;
            };
            let repeated = key == Some(k) || self.scratch_set.iter().any(|&(j, _)| j == k);
            let weight = if repeated { batch::DUPLICATE } else { weight };
            self.scratch_set.push((k, weight));
        }
        self.call_paths(tool, key, &made);
        (key, stop)
    }

    /// The paths a call of tool `tool` takes on its path keys, into `scratch_paths` (after
    /// `call_key` filled `scratch_set`): made from its arguments, or read back from the names
    /// a saved state kept (`{key}:/{path}`); a path that cannot be made or read is the tree's
    /// root, which overlaps every path (over-excluded, never under).
    fn call_paths(&mut self, tool: u32, key: Option<u32>, made: &MadeFrom<'_>) {
        self.scratch_paths.clear();
        if self.keys.tool(tool).paths.is_empty() {
            return;
        }
        let paths = self.keys.tool(tool).paths.clone();
        let mut out = String::new();
        for (m, path) in paths.iter().enumerate() {
            let Some(path) = path else {
                continue;
            };
            let k = if m == 0 {
                key
            } else {
                self.scratch_set.get(m - 1).map(|&(k, _)| k)
            };
            let Some(k) = k else {
                continue;
            };
            match made {
                MadeFrom::Arguments(arguments) => self.keys.expand_path(path, *arguments, &mut out),
                MadeFrom::Saved(names) => {
                    let tree = &self.keys.key(k).name;
                    let saved = names.get(m).and_then(|n| n.strip_prefix(tree.as_str()));
                    match saved.and_then(|n| n.strip_prefix(":/")) {
                        Some(p) => crate::path::normalize(p, &mut out),
                        None => out.clear(),
                    }
                }
            }
            self.scratch_paths
                .push((m as u32, k, std::mem::take(&mut out)));
        }
    }

    /// The key member `m` of a tool's key set takes.
    fn member_key(&mut self, of: KeyOf, made: &MadeFrom<'_>, m: usize) -> Option<u32> {
        match of {
            KeyOf::Unkeyed => None,
            KeyOf::Fixed(k) => Some(k),
            KeyOf::Template(t) => Some(match made {
                MadeFrom::Arguments(arguments) => self.keys.expand(&self.policy, t, *arguments),
                // A name this member's template could not make (the policy changed, or the
                // state was edited) takes the template's own key: it never borrows another
                // key's terms (a shared key, a second adaptive limit).
                MadeFrom::Saved(names) => match names.get(m) {
                    Some(name)
                        if batch::check_name("key", name, false).is_ok()
                            && self.keys.can_make(t, name) =>
                    {
                        self.keys.expanded_key(&self.policy, t, name)
                    }
                    _ => self.keys.fallback(t),
                },
            }),
        }
    }

    /// Lays out call `c` of the batch being built in `slot`, its entries in the states `life`
    /// gives each operation: pending entries take their places in the key's queue, in entry
    /// order; the lowest failed operation is kept for `on_error = "stop"`.
    #[inline]
    pub(super) fn lay_out(
        &mut self,
        slot: u32,
        c: u32,
        call: &Layout<'_>,
        life: impl Fn(u32) -> Lifecycle,
    ) {
        let b = self.batches.slot_mut(slot);
        batch::push_call(
            b,
            call.id,
            call.tool,
            call.count,
            call.fan_out,
            call.stop,
            call.more,
        );
        for (member, k, path) in call.paths {
            b.push_path(*member, *k, path);
        }
        let start = b.entries.len();
        let first = b.first + start as u64;
        let key = OptU32::new(call.key);
        let pending = b.push_entries((0..call.count).map(|op| Entry {
            call: c,
            key,
            life: life(op),
        }));
        let entries = &b.entries[start..];
        if call.stop
            && pending < call.count
            && let Some(rec) = b.calls.last_mut()
        {
            let failed = entries.iter().position(|e| e.life.get().is_failure());
            rec.first_failed = OptU32::new(failed.map(|op| op as u32));
        }
        // Each key of its set, once: a key set's entries wait in every one of its keys' queues.
        let others = batch::distinct(call.more).map(|(k, _)| k);
        for k in call.key.into_iter().chain(others) {
            if self.keys.first_use(k, b.id) {
                b.keys.push(k);
            }
            let end = first + u64::from(call.count);
            if pending == call.count {
                self.keys.enqueue(k, first, end);
            } else {
                for (e, entry) in (first..end).zip(entries) {
                    if entry.life.get() == State::Pending {
                        self.keys.enqueue(k, e, e + 1);
                    }
                }
            }
        }
        self.batches
            .ids
            .insert(call.hash, CallRef { slot, call: c });
    }
}
