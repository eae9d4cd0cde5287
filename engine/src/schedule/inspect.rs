//! `inspect`: each entry's state and, when it waits, why. A query: it changes nothing.

use std::collections::HashMap;

use super::{BatchId, EntryId, Error, Scheduler, State};

/// One entry as [`Scheduler::inspect`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryStatus {
    /// The entry's id.
    pub entry: EntryId,
    /// Its label (`call` or `call#i`).
    pub label: String,
    /// The tool it calls.
    pub tool: String,
    /// Its concurrency key, `None` when unbounded.
    pub key: Option<String>,
    /// Where it is.
    pub state: State,
    /// Why an approved entry is not running yet.
    pub wait: Option<Wait>,
}

/// Why an approved entry waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Some entry of its batch is still pending (the approval barrier); `pending` says how many.
    BatchNotApproved {
        /// Pending entries in the batch.
        pending: u32,
    },
    /// It is first in line for its key, and the key is full.
    KeyFull {
        /// The key.
        key: String,
        /// Its limit.
        limit: u32,
        /// The labels of the executions holding its slots, in entry order.
        running: Vec<String>,
    },
    /// An earlier entry with the same key (this label) has not started yet.
    Behind(String),
}

impl Scheduler {
    /// Every entry of a batch in written order, with its state and why it waits.
    pub fn inspect(&self, batch: BatchId) -> Result<Vec<EntryStatus>, Error> {
        let b = self.batch_index(batch)?;
        let rec = &self.batches[b as usize];
        let mut waits: HashMap<u32, Wait> = HashMap::new();
        if rec.open {
            for &k in &rec.keys {
                let key = &self.keys[k as usize];
                let mut previous: Option<u32> = None;
                for &e in &key.queue {
                    if !matches!(self.entry(e).state, State::Pending | State::Approved) {
                        continue;
                    }
                    let wait = match previous {
                        Some(p) => Wait::Behind(self.label(EntryId(p))),
                        None => Wait::KeyFull {
                            key: key.name.clone(),
                            limit: key.limit,
                            running: self.running_labels(k),
                        },
                    };
                    waits.insert(e, wait);
                    previous = Some(e);
                }
            }
        }
        let mut out = Vec::with_capacity(rec.entries as usize);
        for e in rec.first_entry..rec.first_entry + rec.entries {
            let entry = self.entry(e);
            let call = &self.calls[entry.call as usize];
            let wait = match entry.state {
                State::Approved if !rec.open => Some(Wait::BatchNotApproved {
                    pending: rec.pending,
                }),
                State::Approved => waits.remove(&e),
                _ => None,
            };
            out.push(EntryStatus {
                entry: EntryId(e),
                label: self.label(EntryId(e)),
                tool: self.tool_name(call.tool).to_owned(),
                key: entry.key.get().map(|k| self.keys[k as usize].name.clone()),
                state: entry.state,
                wait,
            });
        }
        Ok(out)
    }

    fn running_labels(&self, k: u32) -> Vec<String> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.key.get() == Some(k) && e.state.is_started_unended())
            .map(|(i, _)| self.label(EntryId(i as u32)))
            .collect()
    }
}
