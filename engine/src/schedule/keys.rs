//! Concurrency keys and tools: each key's limit, its running count, its FIFO of entries not
//! yet released and its time gate (spacing and pauses); tools interned with their policy
//! resolved once; key templates and the keys they expand to.
//!
//! A configured key lives as long as the scheduler. A key expanded from a template
//! (`fs:{path}` to `fs:/a`) is counted by the live batches that use it and forgotten once none
//! does and its gate has passed (`keys/made.rs`), so memory follows live keys, not every path
//! ever seen.

use std::collections::VecDeque;

use super::adapt::{Aimd, Moved};
use super::effects::Effects;
use super::names::FxHashMap;
use super::rate::Spacing;
use super::time::TimeGate;
use crate::config::{Concurrency, ConcurrencyKey, OnError, Policy, RateWindow, ToolPolicy};
use crate::limits::RETRIES_DEFAULT;
use crate::path::PathSet;
use crate::template::KeyTemplate;
use made::{Idle, Uses};

mod made;

#[derive(Debug)]
pub(crate) struct KeyRec {
    pub(crate) name: String,
    /// The limit now: the configured one, or an adaptive limit where `adapt` last moved it.
    pub(crate) limit: u32,
    /// An adaptive limit's rule (`adapt.rs`), the only writer of `limit` after the key is made.
    pub(crate) adapt: Option<Aimd>,
    /// Entries holding a slot (running, asking, or waiting for a permit); written only by
    /// [`Keys::commit`].
    running: u32,
    /// Shared keys whose granted entries wait for this key's pause (a key set's other key):
    /// lifting the pause walks them, since those entries left this key's queue at their request
    /// (`Scheduler::granted_may_start`).
    pub(crate) pause_wakes: Vec<u32>,
    /// Entry numbers with this key not yet released or settled when last looked at, in
    /// (batch, written) order. Entries that got a response, or whose batch retired, are
    /// dropped when they reach the front.
    queue: VecDeque<u64>,
    dirty: bool,
    /// The last entry released with this key, for the FIFO assertion.
    last_released: Option<u64>,
    /// Minimum milliseconds between consecutive starts (a shared key's store's term).
    pub(crate) delay: u32,
    /// The delay and rate windows this process keeps (none on a shared key).
    spacing: Spacing,
    /// A shared key's rate windows, which its store keeps (a permit request's term): each
    /// window once, with the smallest burst it was given. Empty on other keys.
    pub(crate) store_rates: Box<[RateWindow]>,
    /// Rate-limit retries per entry.
    pub(crate) retries: u32,
    /// Permits come from a store shared across processes (its delay is the store's to keep).
    pub(crate) shared: bool,
    /// The longest wait a rate limit may ask for before its entry is settled instead.
    pub(crate) max_wait_ms: u64,
    /// Its pauses and its wake-up (`time.rs`).
    pub(crate) time: TimeGate,
    /// The template this key was expanded from; `None` for a configured key.
    pub(crate) template: Option<u32>,
    /// The live batches that use it, and whether a made key waits to be forgotten.
    uses: Uses,
    /// A shared key's walk starts here: every queued entry numbered below it has asked for
    /// its permit, holds one, or has its response (so the walk never rescans them).
    scan_from: u64,
    /// A path key (`path_key.rs`): each entry takes paths in the key's tree, and excludes the
    /// entries whose paths overlap its own; its queue keeps written order among overlapping
    /// paths only.
    pub(crate) tree: bool,
    /// A path key's entries holding a slot, in the order they took it, and their paths;
    /// written only by `Scheduler::hold_paths`.
    pub(crate) held: Vec<u64>,
    pub(crate) held_paths: PathSet,
}

/// A shared key's windows as its store keeps them: one arrival time per window (count and
/// length), so a window named twice with two bursts is named once with the smaller, which is
/// what the two would let through together.
fn store_windows(rates: &[RateWindow]) -> Box<[RateWindow]> {
    let mut out: Vec<RateWindow> = Vec::with_capacity(rates.len());
    for w in rates {
        match out
            .iter_mut()
            .find(|o| o.count == w.count && o.per_ms == w.per_ms)
        {
            Some(o) => o.burst = o.burst.min(w.burst),
            None => out.push(*w),
        }
    }
    out.into_boxed_slice()
}

impl KeyRec {
    /// Whether the weight of an entry changes when it may start (else 1 will do).
    pub(crate) fn weighs(&self) -> bool {
        self.spacing.weighs()
    }

    /// The earliest time the next entry, of `weight` units of the key's rate, may start: its
    /// spacing (delay and rate windows), and the pause.
    pub(crate) fn gate(&self, weight: u32) -> u64 {
        self.spacing.opens_at(weight).max(self.time.paused_until())
    }

    /// The time from which nothing of the key's past holds a start back: its spacing is as
    /// if it had never started and its pause is over. A key made from a template is forgotten
    /// only then, so forgetting it never lets more through than its terms allow.
    pub(crate) fn rested_at(&self) -> u64 {
        self.spacing.rested_at().max(self.time.paused_until())
    }

    /// Entry numbers with this key not yet released or settled when last looked at, in
    /// (batch, written) order.
    pub(crate) fn queue(&self) -> &VecDeque<u64> {
        &self.queue
    }

    /// Where a shared key's walk starts.
    pub(crate) fn scan_from(&self) -> u64 {
        self.scan_from
    }

    /// Whether one more entry may take a slot.
    pub(crate) fn has_room(&self) -> bool {
        self.running < self.limit
    }

    /// Whether the key's adaptive limit is below its ceiling (a made key is kept while it is).
    pub(crate) fn adapted_down(&self) -> bool {
        self.adapt.is_some_and(|a| self.limit < a.bounds().1)
    }

    /// What a sentence about the key being full adds when its limit adapts: its bounds and
    /// what last moved it (nothing of its history at the ceiling, which is where a key made
    /// afresh starts).
    pub(crate) fn adaptive_note(&self) -> Option<String> {
        let adapt = self.adapt.as_ref()?;
        let (min, max) = adapt.bounds();
        let why = match adapt.last() {
            _ if self.limit == max => "at its ceiling",
            Some(Moved::Halved) | None => "halved after a rate limit",
            Some(Moved::Grew) => "growing back by clean ends",
        };
        Some(format!(
            "; its limit adapts between {min} and {max} and is {} now, {why}",
            self.limit
        ))
    }

    /// Whether the front entry may start by the clock at `now` (paired with `gate`).
    pub(crate) fn open_at(&self, now: u64, weight: u32) -> bool {
        self.gate(weight) <= now
    }
}

/// What key a tool's calls take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyOf {
    Unkeyed,
    Fixed(u32),
    /// Each call's own key, from its arguments, by template number.
    Template(u32),
}

/// A tool as submitted calls name it, with its policy resolved once.
#[derive(Debug)]
pub(crate) struct ToolRec {
    pub(crate) name: String,
    /// The key its calls take (the first of its key set; a set's shared key, if it has one).
    pub(crate) key: KeyOf,
    /// Units of its key's rate one call costs (1 unless the tool says).
    pub(crate) weight: u32,
    /// The other keys of its key set, in written order, each with the units of its rate one
    /// call costs (empty for a tool with one key or none).
    pub(crate) more: Box<[(KeyOf, u32)]>,
    /// The path of each member of its key set that is a path key, by member (0 its first
    /// key); empty when none is.
    pub(crate) paths: Box<[Option<ConcurrencyKey>]>,
    pub(crate) fan_out: bool,
    pub(crate) stop: bool,
}

impl ToolRec {
    /// Whether a key of its set, or a path, is made from its calls' arguments (a saved call
    /// keeps what they made).
    pub(crate) fn has_template(&self) -> bool {
        !self.paths.is_empty()
            || std::iter::once(&self.key)
                .chain(self.more.iter().map(|(k, _)| k))
                .any(|k| matches!(k, KeyOf::Template(_)))
    }
}

/// A key template.
#[derive(Debug)]
struct TemplateRec {
    template: KeyTemplate,
    concurrency: Concurrency,
    /// The key named by the template's own text, taken by calls whose arguments do not
    /// expand: they are limited (among themselves), never unbounded.
    fallback: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Keys {
    recs: Vec<KeyRec>,
    /// Slots of forgotten expanded keys, for reuse.
    free: Vec<u32>,
    /// Configured keys by name.
    index: FxHashMap<String, u32>,
    dirty: Vec<u32>,
    tools: Vec<ToolRec>,
    tool_index: FxHashMap<String, u32>,
    templates: Vec<TemplateRec>,
    template_index: FxHashMap<String, u32>,
    /// Live keys made from templates, by name: one namespace with the configured keys (a
    /// made name that is a configured key is that key), so every template making a name, and
    /// a pause naming it, reach the same key.
    made: FxHashMap<String, u32>,
    /// Made keys no live batch uses, forgotten once their gate passes (`made.rs`).
    idle: Idle,
    /// Scratch for expanding templates.
    fields: Vec<Option<String>>,
    expanded: String,
}

impl Keys {
    pub(crate) fn key(&self, k: u32) -> &KeyRec {
        &self.recs[k as usize]
    }

    pub(crate) fn key_mut(&mut self, k: u32) -> &mut KeyRec {
        &mut self.recs[k as usize]
    }

    /// How many key slots there are (live keys and forgotten ones kept for reuse).
    pub(crate) fn count(&self) -> usize {
        self.recs.len()
    }

    /// How many keys are live (for tests that check expanded keys are forgotten).
    pub(crate) fn live(&self) -> usize {
        self.recs.len() - self.free.len()
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
        // A set's shared key (the config allows one) is its first: its walk asks the store for
        // the permit, with the set's other keys' slots taken (`shared.rs`). The rest keep their
        // written order.
        let members: Vec<&Concurrency> = (tool.concurrency.iter().filter(|c| c.shared))
            .chain(tool.concurrency.iter().filter(|c| !c.shared))
            .collect();
        debug_assert!(
            members.len() < 2 || members.iter().filter(|c| c.shared).count() <= 1,
            "two shared keys in one key set resolved"
        );
        let mut set = members.iter().map(|&c| {
            let key = match c.key.template() {
                None => KeyOf::Fixed(self.intern_key(c)),
                Some(template) => KeyOf::Template(self.intern_template(c, template)),
            };
            (key, c.weight)
        });
        let (key, weight) = set.next().unwrap_or((KeyOf::Unkeyed, 1));
        let more = set.collect();
        let paths = if members.iter().any(|c| c.path.is_some()) {
            members.iter().map(|c| c.path.clone()).collect()
        } else {
            Box::default()
        };
        let t = self.tools.len() as u32;
        self.tools.push(ToolRec {
            name: name.to_owned(),
            key,
            weight,
            more,
            paths,
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
        let k = self.new_key(name, c, None);
        self.index.insert(name.to_owned(), k);
        k
    }

    fn new_key(&mut self, name: &str, c: &Concurrency, template: Option<u32>) -> u32 {
        let rec = KeyRec {
            name: name.to_owned(),
            limit: c.limit.get(),
            adapt: c.adapt_min.map(|min| Aimd::new(min.get(), c.limit.get())),
            running: 0,
            pause_wakes: Vec::new(),
            queue: VecDeque::new(),
            dirty: false,
            last_released: None,
            // A shared key's spacing holds across processes: the store keeps it (its local
            // spacing is empty), and permit requests carry it as the store's term.
            delay: c.delay_ms,
            spacing: Spacing::new(c),
            store_rates: if c.shared {
                store_windows(&c.rates)
            } else {
                Box::default()
            },
            retries: c.retries,
            shared: c.shared,
            max_wait_ms: crate::retry_after::max_wait_ms(Some(c)),
            time: TimeGate::default(),
            template,
            uses: Uses::default(),
            scan_from: 0,
            tree: c.path.is_some(),
            held: Vec::new(),
            held_paths: PathSet::default(),
        };
        match self.free.pop() {
            Some(k) => {
                self.recs[k as usize] = rec;
                k
            }
            None => {
                self.recs.push(rec);
                (self.recs.len() - 1) as u32
            }
        }
    }

    fn intern_template(&mut self, c: &Concurrency, template: &KeyTemplate) -> u32 {
        if let Some(&t) = self.template_index.get(c.key.as_str()) {
            return t;
        }
        let fallback = self.intern_key(c);
        let t = self.templates.len() as u32;
        self.templates.push(TemplateRec {
            template: template.clone(),
            concurrency: c.clone(),
            fallback,
        });
        self.template_index.insert(c.key.as_str().to_owned(), t);
        t
    }

    /// The key a call of template `t` takes with these arguments: its expanded key (interned
    /// when no live batch uses it yet), or the template's own key when they do not expand.
    pub(crate) fn expand(&mut self, policy: &Policy, t: u32, arguments: Option<&str>) -> u32 {
        let rec = &self.templates[t as usize];
        let mut name = std::mem::take(&mut self.expanded);
        let k = match rec.template.expand(arguments, &mut self.fields, &mut name) {
            Err(_) => rec.fallback,
            Ok(()) => self.expanded_key(policy, t, &name),
        };
        self.expanded = name;
        k
    }

    /// The key named `name` (1 to `NAME_BYTES_MAX` bytes) that template `t` made: a configured
    /// key of that name, else a live made key of that name (from any template: the first to
    /// make it gave it its limit), else a new one with template `t`'s limit and delay.
    pub(crate) fn expanded_key(&mut self, policy: &Policy, t: u32, name: &str) -> u32 {
        if let Some(k) = self.configured(policy, name) {
            return k;
        }
        if let Some(&k) = self.made.get(name) {
            return k;
        }
        let c = self.templates[t as usize].concurrency.clone();
        let k = self.new_key(name, &c, Some(t));
        self.made.insert(name.to_owned(), k);
        k
    }

    /// A configured key by name (interned when no call has named it yet), or `None`. A
    /// template's own text counts as its key (the key of arguments that do not expand).
    fn configured(&mut self, policy: &Policy, name: &str) -> Option<u32> {
        if let Some(&k) = self.index.get(name) {
            return Some(k);
        }
        let c = policy.concurrency_of_key(name)?.clone();
        Some(match c.key.template() {
            None => self.intern_key(&c),
            Some(template) => {
                let t = self.intern_template(&c, template);
                self.templates[t as usize].fallback
            }
        })
    }

    /// The path a call with these arguments takes by `path` (a template, or a literal),
    /// normalized into `out`; the tree's root (which overlaps every path) when its arguments
    /// do not expand.
    pub(crate) fn expand_path(
        &mut self,
        path: &ConcurrencyKey,
        arguments: Option<&str>,
        out: &mut String,
    ) {
        let mut raw = std::mem::take(&mut self.expanded);
        let made = match path.template() {
            None => {
                raw.clear();
                raw.push_str(path.as_str());
                true
            }
            Some(template) => template
                .expand(arguments, &mut self.fields, &mut raw)
                .is_ok(),
        };
        if made {
            crate::path::normalize(&raw, out);
        } else {
            out.clear();
        }
        self.expanded = raw;
    }

    /// Whether template `t` could make key `name` (a saved name is taken only then).
    pub(crate) fn can_make(&self, t: u32, name: &str) -> bool {
        self.templates[t as usize].template.can_make(name)
    }

    /// The key template `t` takes when a call's arguments do not expand.
    pub(crate) fn fallback(&self, t: u32) -> u32 {
        self.templates[t as usize].fallback
    }

    /// A key by name: a configured key (interned when no call has named it yet), else a live
    /// key made from a template; `None` when there is none.
    pub(crate) fn key_named(&mut self, policy: &Policy, name: &str) -> Option<u32> {
        self.configured(policy, name)
            .or_else(|| self.made.get(name).copied())
    }

    /// The retry cap of an entry with key `k` (or unkeyed).
    pub(crate) fn retry_cap(&self, k: Option<u32>) -> u32 {
        k.map_or(RETRIES_DEFAULT, |k| self.recs[k as usize].retries)
    }

    /// The maximum wait on a rate limit of an entry with key `k` (or unkeyed).
    pub(crate) fn max_wait_ms(&self, k: Option<u32>) -> u64 {
        k.map_or_else(
            || crate::retry_after::max_wait_ms(None),
            |k| self.recs[k as usize].max_wait_ms,
        )
    }

    /// Puts a retried entry back in its place at the front of the key's queue, in entry order,
    /// and lets the FIFO assertion start over from it.
    pub(crate) fn requeue(&mut self, k: u32, e: u64) {
        let key = &mut self.recs[k as usize];
        key.scan_from = key.scan_from.min(e);
        let at = key.queue.partition_point(|&q| q < e);
        debug_assert!(key.queue.get(at) != Some(&e), "requeued twice");
        key.queue.insert(at, e);
        // The FIFO check starts over below the lowest entry back in the queue.
        key.last_released = key.last_released.min(e.checked_sub(1));
    }

    /// Puts an entry that gave its slot back unstarted (a set's entry yielding its shared
    /// key's permit) back in its place in the key's queue, unless the queue still holds it.
    pub(crate) fn queue_again(&mut self, k: u32, e: u64) {
        let key = &mut self.recs[k as usize];
        let at = key.queue.partition_point(|&q| q < e);
        if key.queue.get(at) != Some(&e) {
            key.queue.insert(at, e);
        }
        key.scan_from = key.scan_from.min(e);
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

    /// Key `k`'s queue, taken out for a path key's walk (which keeps what still waits).
    pub(crate) fn take_queue(&mut self, k: u32) -> VecDeque<u64> {
        std::mem::take(&mut self.recs[k as usize].queue)
    }

    /// Puts back the queue a path key's walk kept, in entry order.
    pub(crate) fn put_queue(&mut self, k: u32, kept: VecDeque<u64>) {
        debug_assert!(kept.iter().zip(kept.iter().skip(1)).all(|(a, b)| a < b));
        debug_assert!(
            self.recs[k as usize].queue.is_empty(),
            "queued during a walk"
        );
        self.recs[k as usize].queue = kept;
    }

    /// The walk is done with the front of key `k`'s queue (released, answered or retired).
    pub(crate) fn pop_front(&mut self, k: u32) {
        self.recs[k as usize].queue.pop_front();
    }

    /// A shared key's walk needs nothing more from the entries numbered below `e + 1`.
    pub(crate) fn scanned(&mut self, k: u32, e: u64) {
        self.recs[k as usize].scan_from = e + 1;
    }

    /// The next key to walk.
    pub(crate) fn pop_dirty(&mut self) -> Option<u32> {
        let k = self.dirty.pop()?;
        self.recs[k as usize].dirty = false;
        Some(k)
    }

    /// Per-key FIFO at release (paired with the queue's order at enqueue, `enqueue`). A path
    /// key keeps written order among overlapping paths only, asserted where an entry takes
    /// its paths (`Scheduler::hold_paths`).
    pub(crate) fn released_in_order(&mut self, k: u32, e: u64) {
        let key = &mut self.recs[k as usize];
        if key.tree {
            return;
        }
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

    /// The generation of key `k`'s adaptive limit, which an execution starting now joins
    /// (`None`: its limit is fixed).
    pub(crate) fn generation(&self, k: u32) -> Option<u32> {
        self.recs[k as usize].adapt.as_ref().map(Aimd::generation)
    }

    /// An execution of generation `started` on key `k` ended rate-limited: an adaptive limit
    /// halves (once per generation).
    pub(crate) fn rate_limited(&mut self, k: u32, started: u32) {
        let key = &mut self.recs[k as usize];
        if let Some(adapt) = key.adapt.as_mut() {
            adapt.rate_limited(&mut key.limit, started);
        }
    }

    /// An execution of generation `started` on key `k` ended clean: an adaptive limit that
    /// grew lets the key walk.
    pub(crate) fn ended_clean(&mut self, k: u32, started: u32) {
        let key = &mut self.recs[k as usize];
        if key
            .adapt
            .as_mut()
            .is_some_and(|a| a.clean_end(&mut key.limit, started))
        {
            self.mark_dirty(k);
        }
    }

    /// Applies what a transition implies for its key `k`: slots taken and freed, the start
    /// time, the walk. The paired assertions: a slot is taken only below the limit and freed
    /// only when taken; a start passes the gate; a granted start holds the slot its request
    /// took. Returns whether the key is shared (its permits go back to a store).
    #[inline]
    pub(crate) fn commit(
        &mut self,
        k: u32,
        effects: Effects,
        now: u64,
        weight: u32,
        by_permit: bool,
    ) -> bool {
        let key = &mut self.recs[k as usize];
        if effects.has(Effects::TAKES_SLOT) {
            debug_assert!(key.running < key.limit, "limit exceeded on {}", key.name);
            key.running += 1;
        }
        if effects.has(Effects::STARTS) {
            // A granted entry's slot was taken at its request (on its shared key and on the
            // other keys of its set, `by_permit`); the store kept the spacing, and the keys'
            // pauses are over (`Scheduler::granted_may_start`). Any other start takes its slot.
            debug_assert!(
                effects.has(Effects::TAKES_SLOT) || (by_permit && key.running > 0),
                "a start on {} without a slot",
                key.name
            );
            debug_assert!(
                key.open_at(now, weight),
                "started before its gate on {}",
                key.name
            );
            key.spacing.started(now, weight);
        }
        if effects.has(Effects::FREES_SLOT) {
            debug_assert!(key.running > 0, "slot freed twice on {}", key.name);
            key.running = key.running.saturating_sub(1);
        }
        let shared = key.shared;
        if effects.has(Effects::WALKS) {
            self.mark_dirty(k);
        }
        shared
    }
}
