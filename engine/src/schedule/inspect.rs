//! `inspect`: each entry's state and, when it waits, why. A query: it changes nothing.

use super::{BatchId, EntryId, Scheduler, State, explain};

/// One entry as [`Scheduler::inspect`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryStatus {
    /// The entry's number.
    pub entry: EntryId,
    /// Its label (`call` or `call#i`).
    pub label: String,
    /// The tool it calls.
    pub tool: String,
    /// Its concurrency keys: one, every key of its key set (in written order, each once; a
    /// shared key first), or none when unbounded.
    pub keys: Vec<String>,
    /// Where it is.
    pub state: State,
    /// Why an approved (or acquiring, or granted) entry is not running yet.
    pub wait: Option<Wait>,
    /// The same as one plain sentence ([`explain::wait_sentence`]).
    pub why: Option<String>,
}

/// Why an approved, acquiring or granted entry waits.
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
    /// An earlier entry with one of its keys has not started yet.
    Behind {
        /// The earlier entry's label.
        label: String,
        /// The key they share (for a key set, the first of its keys found holding it).
        key: String,
    },
    /// It is first in line for its key and there is room, but the key is paused (by the host,
    /// or after a rate limit) until `until`.
    KeyPaused {
        /// The key.
        key: String,
        /// When the pause ends (the host's clock).
        until: u64,
    },
    /// It is first in line for its key and there is room, but the key's `delay` since its last
    /// start has not passed: it may start at `until`.
    KeySpacing {
        /// The key.
        key: String,
        /// When it may start (the host's clock).
        until: u64,
    },
    /// An unkeyed entry that hit a rate limit; it runs again at `until`.
    RetryAt {
        /// When it runs again (the host's clock).
        until: u64,
    },
    /// Its key is shared: the host was asked for a permit from the store (`acquiring`).
    PermitRequested {
        /// The key.
        key: String,
    },
    /// Its permit was granted; it starts once every earlier entry with its key has (`granted`).
    PermitGranted {
        /// The key.
        key: String,
    },
}

impl Scheduler {
    /// Every entry of a live batch in written order, with its state and why it waits; `None`
    /// for a batch number that is not live.
    pub fn inspect(&self, batch: BatchId) -> Option<Vec<EntryStatus>> {
        self.inspect_part(batch, 0, usize::MAX)
    }

    /// [`Scheduler::inspect`] from the batch's `offset`-th entry on, at most `max` of them
    /// (none past its last): the cost of a part is what it reports, plus one pass over the
    /// batch's keys' queues, so a host reading a large batch in parts pays for each status once.
    pub fn inspect_part(
        &self,
        batch: BatchId,
        offset: usize,
        max: usize,
    ) -> Option<Vec<EntryStatus>> {
        let slot = self.batches.find(batch.0)?;
        let rec = self.batches.slot(slot);
        let start = offset.min(rec.entries.len());
        let end = start.saturating_add(max).min(rec.entries.len());
        // Why each entry of the part waits, by its index in the part.
        let mut waits: Vec<Option<Wait>> = Vec::new();
        waits.resize_with(end - start, || None);
        // What holds each key set's entry, key by key: `(index, key, wait)`.
        let mut set_waits: Vec<(usize, u32, Wait)> = Vec::new();
        if rec.is_open() {
            for &k in &rec.keys {
                let key = self.keys.key(k);
                if key.tree {
                    // A path key: order holds among overlapping paths (`path_key.rs`).
                    for &e in key.queue() {
                        let Some(at) = e
                            .checked_sub(rec.first)
                            .and_then(|i| usize::try_from(i).ok())
                            .filter(|i| (start..end).contains(i))
                        else {
                            continue;
                        };
                        if rec.entries[at].life.get() != State::Approved {
                            continue;
                        }
                        match self.tree_wait(k, e, (slot, at as u32)) {
                            Some(wait) if self.in_set(slot, at as u32) => {
                                set_waits.push((at, k, wait));
                            }
                            wait => waits[at - start] = wait,
                        }
                    }
                    continue;
                }
                let mut previous: Option<u64> = None;
                for &e in key.queue() {
                    if !matches!(
                        self.state(EntryId(e)),
                        Some(State::Pending | State::Approved)
                    ) {
                        continue;
                    }
                    let Some(at) = e
                        .checked_sub(rec.first)
                        .and_then(|i| usize::try_from(i).ok())
                        .filter(|i| (start..end).contains(i))
                    else {
                        previous = Some(e); // another batch's, or outside the part
                        continue;
                    };
                    let in_set = self.in_set(slot, at as u32);
                    let wait = match previous {
                        Some(p) => Some(Wait::Behind {
                            label: self.label(EntryId(p)).unwrap_or_default(),
                            key: key.name.clone(),
                        }),
                        // The front entry: its own weight decides when the key's rate lets it.
                        None => match key.gate(self.weight(k, slot, at as u32)) {
                            gate if key.has_room() && gate > self.now => {
                                Some(if key.time.paused_until() >= gate {
                                    Wait::KeyPaused {
                                        key: key.name.clone(),
                                        until: key.time.paused_until(),
                                    }
                                } else {
                                    Wait::KeySpacing {
                                        key: key.name.clone(),
                                        until: gate,
                                    }
                                })
                            }
                            // This key of a set lets it go: another one holds it.
                            _ if in_set && key.has_room() => None,
                            _ => Some(Wait::KeyFull {
                                key: key.name.clone(),
                                limit: key.limit,
                                running: self.running_labels(k),
                            }),
                        },
                    };
                    match wait {
                        Some(wait) if in_set => set_waits.push((at, k, wait)),
                        wait => waits[at - start] = wait,
                    }
                    previous = Some(e);
                }
            }
        }
        // A key set's entry waits on the first key of its set, in its keys' order, that holds it:
        // each entry keeps the wait of the lowest place in its set seen so far.
        let mut ranks = vec![usize::MAX; if set_waits.is_empty() { 0 } else { end - start }];
        for (at, k, wait) in set_waits {
            let keys = self.keys_of(slot, at as u32);
            let rank = keys.iter().position(|&j| j == k).unwrap_or(usize::MAX);
            if rank < ranks[at - start] {
                ranks[at - start] = rank;
                waits[at - start] = Some(wait);
            }
        }
        let out = rec.entries[start..end]
            .iter()
            .enumerate()
            .map(|(j, entry)| {
                let i = start + j;
                let e = rec.first + i as u64;
                let call = &rec.calls[entry.call as usize];
                let state = entry.life.get();
                let wait = match state {
                    State::Approved if !rec.is_open() => Some(Wait::BatchNotApproved {
                        pending: rec.pending(),
                    }),
                    State::Approved => waits.get_mut(j).and_then(Option::take).or_else(|| {
                        self.not_before
                            .get(&e)
                            .map(|&until| Wait::RetryAt { until })
                    }),
                    State::Acquiring | State::Granted => entry.key.get().map(|k| {
                        let rec = self.keys.key(k);
                        let key = rec.name.clone();
                        // A shared key keeps no rate here, nor do the other keys of its set:
                        // their gates are their pauses, which hold granted entries too.
                        let paused = (state == State::Granted)
                            .then(|| self.keys_of(slot, i as u32))
                            .into_iter()
                            .flatten()
                            .map(|j| self.keys.key(j))
                            .find(|r| r.gate(1) > self.now);
                        if let Some(r) = paused {
                            Wait::KeyPaused {
                                key: r.name.clone(),
                                until: r.gate(1),
                            }
                        } else if state == State::Granted {
                            Wait::PermitGranted { key }
                        } else {
                            Wait::PermitRequested { key }
                        }
                    }),
                    _ => None,
                };
                let keys = self.keys_of(slot, i as u32);
                let why = wait.as_ref().map(|w| {
                    let mut why = explain::wait_sentence(w, self.now);
                    // A full key is one of the entry's own: its adaptive limit says where it is.
                    if let Wait::KeyFull { key: full, .. } = w
                        && let Some(&k) = keys.iter().find(|&&k| self.keys.key(k).name == *full)
                        && let Some(note) = self.keys.key(k).adaptive_note()
                    {
                        why.push_str(&note);
                    }
                    why
                });
                let keys = keys
                    .iter()
                    .flat_map(|&k| {
                        let key = self.keys.key(k);
                        let paths: Vec<String> = if key.tree {
                            // Each path once (a move whose source is its destination).
                            let mut paths: Vec<String> = Vec::new();
                            for p in rec.paths_of(entry.call, k) {
                                let name = super::path_key::display(&key.name, p);
                                if !paths.contains(&name) {
                                    paths.push(name);
                                }
                            }
                            paths
                        } else {
                            vec![key.name.clone()]
                        };
                        paths
                    })
                    .collect();
                EntryStatus {
                    entry: EntryId(e),
                    label: rec.label(i as u32),
                    tool: self.keys.tool(call.tool).name.clone(),
                    keys,
                    state,
                    wait,
                    why,
                }
            })
            .collect();
        Some(out)
    }

    /// The labels of the executions holding a key's slots, in entry order.
    pub(super) fn running_labels(&self, k: u32) -> Vec<String> {
        let mut out = Vec::new();
        for slot in self.batches.live() {
            let b = self.batches.slot(slot);
            for (i, e) in b.entries.iter().enumerate() {
                let state = e.life.get();
                let holds =
                    |index: u32| e.key.get() == Some(k) || b.other_keys(index).any(|(j, _)| j == k);
                if (state.is_started_unended() || state.holds_permit_unstarted()) && holds(i as u32)
                {
                    out.push(b.label(i as u32));
                }
            }
        }
        out
    }
}
