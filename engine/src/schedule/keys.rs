//! Concurrency keys and tools: each key's limit, its running count, its FIFO of entries not
//! yet released and its time gate (spacing and pauses); tools interned with their policy
//! resolved once.

use std::collections::VecDeque;

use super::names::FxHashMap;
use crate::config::{Concurrency, OnError, Policy, ToolPolicy};
use crate::limits::RETRIES_DEFAULT;

#[derive(Debug)]
pub(crate) struct KeyRec {
    pub(crate) name: String,
    pub(crate) limit: u32,
    pub(crate) running: u32,
    /// Entry numbers with this key not yet released or settled when last looked at, in
    /// (batch, written) order. Entries that got a response, or whose batch retired, are
    /// dropped when they reach the front.
    pub(crate) queue: VecDeque<u64>,
    dirty: bool,
    /// The last entry released with this key, for the FIFO assertion.
    last_released: Option<u64>,
    /// Minimum milliseconds between consecutive starts.
    pub(crate) delay: u32,
    /// Rate-limit retries per entry.
    pub(crate) retries: u32,
    /// When the last entry with this key started (the host's `now` then).
    pub(crate) last_start: Option<u64>,
    /// Nothing with this key starts before this time (a pause only ever extends).
    pub(crate) paused_until: u64,
    /// The time a wake-up is queued for this key, if one is.
    pub(crate) armed: Option<u64>,
}

impl KeyRec {
    /// The earliest time the next entry may start: spacing after the last start, and the pause.
    pub(crate) fn gate(&self) -> u64 {
        let spaced = self
            .last_start
            .map_or(0, |t| t.saturating_add(u64::from(self.delay)));
        spaced.max(self.paused_until)
    }

    /// Whether the front entry may start by the clock at `now` (paired with `gate`).
    pub(crate) fn open_at(&self, now: u64) -> bool {
        self.gate() <= now
    }
}

/// A tool as submitted calls name it, with its policy resolved once.
#[derive(Debug)]
pub(crate) struct ToolRec {
    pub(crate) name: String,
    pub(crate) key: Option<u32>,
    pub(crate) fan_out: bool,
    pub(crate) stop: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Keys {
    recs: Vec<KeyRec>,
    index: FxHashMap<String, u32>,
    dirty: Vec<u32>,
    tools: Vec<ToolRec>,
    tool_index: FxHashMap<String, u32>,
}

impl Keys {
    pub(crate) fn key(&self, k: u32) -> &KeyRec {
        &self.recs[k as usize]
    }

    pub(crate) fn key_mut(&mut self, k: u32) -> &mut KeyRec {
        &mut self.recs[k as usize]
    }

    /// How many keys calls have named (or a pause has).
    pub(crate) fn count(&self) -> usize {
        self.recs.len()
    }

    pub(crate) fn tool(&self, t: u32) -> &ToolRec {
        &self.tools[t as usize]
    }

    /// Whether a tool fans out, without interning it.
    pub(crate) fn fans_out(&self, policy: &Policy, name: &str) -> bool {
        match self.tool_index.get(name) {
            Some(&t) => self.tools[t as usize].fan_out,
            None => policy.tool(name).is_some_and(|t| t.fan_out),
        }
    }

    /// The tool's number, resolving its policy the first time a call names it.
    pub(crate) fn intern_tool(&mut self, policy: &Policy, name: &str) -> u32 {
        if let Some(&t) = self.tool_index.get(name) {
            return t;
        }
        let tool = policy
            .tool(name)
            .cloned()
            .unwrap_or_else(|| ToolPolicy::unconfigured(name));
        let key = tool.concurrency.as_ref().map(|c| self.intern_key(c));
        let t = self.tools.len() as u32;
        self.tools.push(ToolRec {
            name: name.to_owned(),
            key,
            fan_out: tool.fan_out,
            stop: tool.on_error == OnError::Stop,
        });
        self.tool_index.insert(name.to_owned(), t);
        t
    }

    fn intern_key(&mut self, c: &Concurrency) -> u32 {
        let name = c.key.as_str();
        if let Some(&k) = self.index.get(name) {
            return k;
        }
        let k = self.recs.len() as u32;
        self.index.insert(name.to_owned(), k);
        self.recs.push(KeyRec {
            name: name.to_owned(),
            limit: c.limit.get(),
            running: 0,
            queue: VecDeque::new(),
            dirty: false,
            last_released: None,
            delay: c.delay_ms,
            retries: c.retries,
            last_start: None,
            paused_until: 0,
            armed: None,
        });
        k
    }

    /// A configured key by name, interning it when no call has named it yet; `None` when no
    /// configured tool declares it.
    pub(crate) fn key_named(&mut self, policy: &Policy, name: &str) -> Option<u32> {
        if let Some(&k) = self.index.get(name) {
            return Some(k);
        }
        let c = policy.concurrency_of_key(name)?.clone();
        Some(self.intern_key(&c))
    }

    /// The retry cap of an entry with key `k` (or unkeyed).
    pub(crate) fn retry_cap(&self, k: Option<u32>) -> u32 {
        k.map_or(RETRIES_DEFAULT, |k| self.recs[k as usize].retries)
    }

    /// Puts a retried entry back in its place at the front of the key's queue, in entry order,
    /// and lets the FIFO assertion start over from it.
    pub(crate) fn requeue(&mut self, k: u32, e: u64) {
        let key = &mut self.recs[k as usize];
        let at = key.queue.partition_point(|&q| q < e);
        debug_assert!(key.queue.get(at) != Some(&e), "requeued twice");
        key.queue.insert(at, e);
        // The FIFO check starts over below the lowest entry back in the queue.
        key.last_released = key.last_released.min(e.checked_sub(1));
    }

    /// The key must walk its queue before this step ends.
    pub(crate) fn mark_dirty(&mut self, k: u32) {
        let key = &mut self.recs[k as usize];
        if !key.dirty {
            key.dirty = true;
            self.dirty.push(k);
        }
    }

    /// The next key to walk.
    pub(crate) fn pop_dirty(&mut self) -> Option<u32> {
        let k = self.dirty.pop()?;
        self.recs[k as usize].dirty = false;
        Some(k)
    }

    /// Per-key FIFO at release (paired with the queue's order at enqueue, `enqueue`).
    pub(crate) fn released_in_order(&mut self, k: u32, e: u64) {
        let key = &mut self.recs[k as usize];
        debug_assert!(
            key.last_released.is_none_or(|p| p < e),
            "per-key FIFO broken on {}",
            key.name
        );
        key.last_released = Some(e);
    }

    /// Queues entries `first..end` behind every earlier one with this key.
    pub(crate) fn enqueue(&mut self, k: u32, first: u64, end: u64) {
        let queue = &mut self.recs[k as usize].queue;
        debug_assert!(
            queue.back().is_none_or(|&b| b < first),
            "queued out of order"
        );
        queue.extend(first..end);
    }

    /// A release takes a slot (paired with [`Keys::free_slot`]).
    pub(crate) fn take_slot(&mut self, k: u32) {
        let key = &mut self.recs[k as usize];
        debug_assert!(key.running < key.limit, "limit exceeded on {}", key.name);
        key.running += 1;
    }

    /// A release at `now` on a key: it must be open (paired with [`KeyRec::open_at`]).
    pub(crate) fn started_at(&mut self, k: u32, now: u64) {
        let key = &mut self.recs[k as usize];
        debug_assert!(key.open_at(now), "started before its gate on {}", key.name);
        key.last_start = Some(now);
    }

    /// An end frees a slot (paired with [`Keys::take_slot`]).
    pub(crate) fn free_slot(&mut self, k: u32) {
        let key = &mut self.recs[k as usize];
        debug_assert!(key.running > 0, "slot freed twice on {}", key.name);
        key.running = key.running.saturating_sub(1);
        self.mark_dirty(k);
    }
}
