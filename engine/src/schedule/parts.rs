//! An exported [`SavedState`] in parts of bounded size, and the parts joined back.
//!
//! A host's runtime may cap what one call copies out of the component (wasmtime: 128 MiB by
//! default, and its dynamic API counts about 48 bytes a value), so a state of millions of
//! started entries cannot cross in one result. [`SavedState::into_parts`] splits it between
//! calls; [`SavedState::join`] is its inverse, for hosts and tests.

use super::restart::{SavedBatch, SavedState};

/// The most weight one part holds: one per saved entry, [`CALL_WEIGHT`] per call. A call
/// weighs at most 100004, so every call fits in a part.
pub const PART_WEIGHT_MAX: usize = 1 << 17;

/// A call's weight besides its entries: its id, tool, key and fields.
pub const CALL_WEIGHT: usize = 4;

impl SavedState {
    /// The state in parts of whole calls, each at most [`PART_WEIGHT_MAX`] in weight, in order;
    /// every part has the state's header. A batch split over parts is in each, with its
    /// numbers, `cancelled` and limits, its calls continuing. Always at least one part (a
    /// state with no batches is one part with none).
    pub fn into_parts(self) -> Vec<Self> {
        let header = |batches| Self {
            version: self.version,
            policy: self.policy,
            next_batch: self.next_batch,
            next_entry: self.next_entry,
            batches,
        };
        let mut parts = Vec::new();
        let mut batches: Vec<SavedBatch> = Vec::new();
        let mut weight = 0;
        for mut batch in self.batches {
            let calls = std::mem::take(&mut batch.calls);
            // The piece of this batch in the part being filled.
            let mut piece = batch.clone_header();
            for call in calls {
                let w = CALL_WEIGHT + call.entries.len();
                if weight + w > PART_WEIGHT_MAX && weight > 0 {
                    if !piece.calls.is_empty() {
                        batches.push(std::mem::replace(&mut piece, batch.clone_header()));
                    }
                    parts.push(header(std::mem::take(&mut batches)));
                    weight = 0;
                }
                weight += w;
                piece.calls.push(call);
            }
            // A batch with no calls is never exported, but is kept whole if given.
            batches.push(piece);
        }
        parts.push(header(batches));
        debug_assert!(
            parts
                .iter()
                .all(|p| p.weight() <= PART_WEIGHT_MAX || p.calls() == 1)
        );
        parts
    }

    /// Parts [`SavedState::into_parts`] made, joined: the first part's header, every part's
    /// batches in order, a batch that ends one part and starts the next (same number) made
    /// one. `None` for no parts.
    pub fn join(parts: impl IntoIterator<Item = Self>) -> Option<Self> {
        let mut parts = parts.into_iter();
        let mut state = parts.next()?;
        for part in parts {
            let mut batches = part.batches.into_iter();
            if let Some(first) = batches.next() {
                match state.batches.last_mut() {
                    Some(last) if last.batch == first.batch => last.calls.extend(first.calls),
                    _ => state.batches.push(first),
                }
            }
            state.batches.extend(batches);
        }
        Some(state)
    }

    fn weight(&self) -> usize {
        let calls = self.batches.iter().flat_map(|b| &b.calls);
        calls.map(|c| CALL_WEIGHT + c.entries.len()).sum()
    }

    fn calls(&self) -> usize {
        self.batches.iter().map(|b| b.calls.len()).sum()
    }
}

impl SavedBatch {
    fn clone_header(&self) -> Self {
        Self {
            batch: self.batch,
            first: self.first,
            cancelled: self.cancelled,
            limits: self.limits,
            calls: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::lifecycle::Saved;
    use crate::schedule::restart::SavedCall;
    use crate::schedule::{BatchId, EntryId, Limits};

    fn state(calls_per_batch: &[&[usize]]) -> SavedState {
        let mut entry = 1;
        let batches = calls_per_batch
            .iter()
            .enumerate()
            .map(|(b, calls)| {
                let first = entry;
                let calls = calls
                    .iter()
                    .enumerate()
                    .map(|(c, &n)| {
                        entry += n.max(1) as u64;
                        SavedCall {
                            id: format!("b{b}c{c}"),
                            tool: "t".into(),
                            operations: Some(n.max(1) as u32),
                            keys: Vec::new(),
                            entries: (0..n as u32).map(|i| (i, Saved::Started)).collect(),
                        }
                    })
                    .collect();
                SavedBatch {
                    batch: BatchId(b as u64 + 1),
                    first: EntryId(first),
                    cancelled: b % 2 == 1,
                    limits: Limits::default(),
                    calls,
                }
            })
            .collect();
        SavedState {
            version: 2,
            policy: 7,
            next_batch: calls_per_batch.len() as u64 + 1,
            next_entry: entry,
            batches,
        }
    }

    #[test]
    fn a_small_state_is_one_part() {
        let s = state(&[&[1, 3], &[0, 2]]);
        let parts = s.clone().into_parts();
        assert_eq!(parts, vec![s]);
    }

    #[test]
    fn an_empty_state_is_one_part_with_no_batches() {
        let s = state(&[]);
        let parts = s.clone().into_parts();
        assert_eq!(parts.len(), 1);
        assert_eq!(SavedState::join(parts), Some(s));
    }

    #[test]
    fn parts_hold_whole_calls_within_the_weight_and_join_back() {
        let big = 100_000;
        let s = state(&[&[big, big, 5], &[1; 50_000], &[big]]);
        let parts = s.clone().into_parts();
        assert!(parts.len() > 1);
        for p in &parts {
            assert!(p.weight() <= PART_WEIGHT_MAX, "{}", p.weight());
            assert_eq!(
                (p.version, p.policy, p.next_batch, p.next_entry),
                (2, 7, 4, s.next_entry)
            );
        }
        // The first batch is split: its header is in each part that has a piece of it.
        assert_eq!(parts[0].batches[0].batch, BatchId(1));
        assert_eq!(parts[1].batches[0].batch, BatchId(1));
        assert!(parts[1].batches[0].cancelled == s.batches[0].cancelled);
        assert_eq!(SavedState::join(parts), Some(s));
    }

    #[test]
    fn join_of_no_parts_is_none() {
        assert_eq!(SavedState::join(Vec::new()), None);
    }
}
