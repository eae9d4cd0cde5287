//! The resolved, validated policy: what the scheduler needs to know about each tool.

use crate::fx::FxHashMap;
use std::num::NonZeroU32;

use crate::diagnostic::{Diagnostic, Severity};
use crate::template::KeyTemplate;

/// The name of the resource a limit protects. Tools naming the same key share one limit.
/// Never empty; compared exactly (case-sensitive, no trimming). A key written with
/// placeholders (`"fs:{path}"`, table form only) is a template: each call names its own key
/// from its arguments, and every key of one template shares the template's limit and delay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConcurrencyKey {
    text: String,
    template: Option<KeyTemplate>,
}

impl ConcurrencyKey {
    /// A key as the table form writes it (already checked to parse as a template).
    pub(crate) fn written(text: String) -> Self {
        debug_assert!(!text.is_empty());
        let template = KeyTemplate::parse(&text).ok().flatten();
        Self { text, template }
    }

    /// The integer form's key: the tool's own name, never a template.
    pub(crate) fn tool_name(text: String) -> Self {
        debug_assert!(!text.is_empty());
        Self {
            text,
            template: None,
        }
    }

    /// The key as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The template, when the key has placeholders.
    pub fn template(&self) -> Option<&KeyTemplate> {
        self.template.as_ref()
    }
}

/// One rate window of a key: on average at most `count` starts per `per_ms` milliseconds,
/// kept as GCRA (the generic cell rate algorithm) on the host's clock: a start is let through
/// when it would leave at most `burst` starts (the window's) ahead of the even pace of
/// `per_ms / count` apart. With a burst of 1 no window of `per_ms` ever holds more than
/// `count` starts; a burst of B lets B start at once after the key was idle, and at most
/// `B + count - 1` in any window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RateWindow {
    /// Starts per window, 1 ..= [`crate::limits::RATE_COUNT_MAX`].
    pub count: u32,
    /// The window's length in milliseconds, at least 1.
    pub per_ms: u32,
    /// Starts this window lets through at once after the key was idle: its own (`{ rate =
    /// "2000/30d", burst = 2000 }`), or else the key's `burst`.
    pub burst: u32,
}

/// A keyed limit: at most `limit` executions with `key` run at once, consecutive starts at
/// least `delay_ms` apart, starts within every rate window of `rates` (with `burst`), and an
/// execution that hits a rate limit is retried up to `retries`
/// times, when the wait it asks for is at most `max_wait_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Concurrency {
    /// The shared key.
    pub key: ConcurrencyKey,
    /// The limit, at least 1. A limit of 0 resolves to no key at all, unless the key has a
    /// delay or a retry cap other than the default: then it is `u32::MAX` (unbounded, but
    /// spaced or capped).
    pub limit: NonZeroU32,
    /// Minimum milliseconds between consecutive starts on the key (0: none).
    pub delay_ms: u32,
    /// The key's rate windows, in ascending order (empty: none). `delay_ms` is the window
    /// `1 / delay_ms` with a burst of 1, kept beside these.
    pub rates: Vec<RateWindow>,
    /// Starts the rate windows without their own burst let through at once after the key was
    /// idle (1 ..= [`crate::limits::BURST_MAX`]; 1 when the key has no rate).
    pub burst: u32,
    /// Units of the rate windows one call of this tool costs (1 ..= every window's burst; 1 when the key
    /// has no rate). The tool's own: tools sharing a key may weigh differently (GitHub's
    /// content-creating requests cost more points than reads). It counts against rates only,
    /// not against the limit or a `delay`.
    pub weight: u32,
    /// How many times one entry with this key may end rate-limited and run again.
    pub retries: u32,
    /// The longest wait a rate limit may ask for, in milliseconds (`max_wait`; at most
    /// [`crate::limits::MAX_WAIT_MS_MAX`], [`crate::retry_after::MAX_WAIT_DEFAULT_MS`] when
    /// unset). An entry whose rate limit asks for longer is settled `rate-limited` at once and
    /// its key is not paused; 0 waits for nothing (a rate limit asking for no wait still runs
    /// again at once, up to `retries`).
    pub max_wait_ms: u32,
    /// `Some(min)`: the limit adapts (AIMD) between `min` and `limit`, its ceiling: it halves
    /// (never below `min`) when an execution on the key ends rate-limited, and grows by one
    /// (up to `limit`) after as many clean ends as the limit then is; only executions started
    /// since the last halving move it. Driven only by the ends the host reports, so it is
    /// deterministic; it starts at the ceiling.
    pub adapt_min: Option<NonZeroU32>,
    /// `Some`: a path key (`path = "{path}"`, `crate::path`). The key names one tree; each
    /// call takes the path this template (or literal) makes from its arguments, normalized,
    /// and excludes every call on the tree whose path is its own, an ancestor or a descendant.
    /// A path that does not expand is the tree's root, which overlaps every path. Its `limit`
    /// is always unbounded (`u32::MAX`): never with a limit, delay, rate, adaptive limit or
    /// sharing, which another key of a set gives a tree.
    pub path: Option<ConcurrencyKey>,
    /// The limit (and delay, and pauses) hold across every process that uses the same store:
    /// an entry with room locally is handed to the host as a permit to acquire, and starts
    /// when the host reports the store granted it.
    pub shared: bool,
}

/// What `fan_out.on_error` says happens after an operation fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnError {
    /// Later operations still start.
    #[default]
    Continue,
    /// No later operation of that call starts.
    Stop,
}

/// One tool's resolved policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolPolicy {
    /// The configured name (the key under `conversation.tools`).
    pub name: String,
    /// The keys each call takes, in written order: one (`concurrency = 2`, or a table), the
    /// members of a key set (`concurrency = [{ key = "fs:{src}" }, { key = "fs:{dst}" }]`), or
    /// none when the tool is unbounded (unset, `0`, `{ key, limit = 0 }`, or `[]`). A call
    /// starts only when every key of its set has room and it is first in line on each, and
    /// holds them all until it ends.
    pub concurrency: Vec<Concurrency>,
    /// Whether a call may be an envelope of operations.
    pub fan_out: bool,
    /// What a failed operation does to the later operations of its call.
    pub on_error: OnError,
}

impl ToolPolicy {
    /// The policy of a tool no layer configures: unbounded, no fan-out.
    pub fn unconfigured(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            concurrency: Vec::new(),
            fan_out: false,
            on_error: OnError::Continue,
        }
    }
}

/// A validated config: every tool's policy, in configuration order. Only [`super::resolve`]
/// makes one, so a scheduler never sees a config that failed validation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    tools: Vec<ToolPolicy>,
    index: FxHashMap<String, usize>,
    warnings: Vec<Diagnostic>,
}

impl Policy {
    pub(crate) fn new(tools: Vec<ToolPolicy>) -> Self {
        let index = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Self {
            tools,
            index,
            warnings: Vec::new(),
        }
    }

    /// This policy as one process sees it alone: every shared key local, with the same limit,
    /// delay and rates (a store serving one process grants by the same rules). `simulate`
    /// runs one process.
    pub(crate) fn into_one_process(mut self) -> Self {
        for c in self.tools.iter_mut().flat_map(|t| t.concurrency.iter_mut()) {
            c.shared = false;
        }
        self
    }

    pub(crate) fn with_warnings(self, warnings: Vec<Diagnostic>) -> Self {
        debug_assert!(warnings.iter().all(|w| w.severity == Severity::Warning));
        Self { warnings, ..self }
    }

    /// What resolving found worth a look that did not stop it, in the order found: names a
    /// small edit away from ones Turnstile reads (`unknown-field-typo`), which were ignored.
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// The configured tools, in configuration order.
    pub fn tools(&self) -> &[ToolPolicy] {
        &self.tools
    }

    /// The concurrency of a key some configured tool declares (every tool naming a key agrees on
    /// it), or `None`.
    pub fn concurrency_of_key(&self, key: &str) -> Option<&Concurrency> {
        self.tools
            .iter()
            .flat_map(|t| &t.concurrency)
            .find(|c| c.key.as_str() == key)
    }

    /// A configured tool's policy, or `None` when no layer names it (it is then unbounded;
    /// see [`ToolPolicy::unconfigured`]).
    pub fn tool(&self, name: &str) -> Option<&ToolPolicy> {
        self.index.get(name).and_then(|&i| self.tools.get(i))
    }

    /// A fingerprint of what this policy means to the scheduler: every configured tool's key,
    /// limit, delay, rates and burst, retry cap, maximum wait, sharing, fan-out and stop, in configuration order
    /// (FNV-1a, 64 bits). A saved scheduler state carries it, so a host can tell the policy
    /// changed before resuming.
    pub fn fingerprint(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        for tool in &self.tools {
            eat(tool.name.as_bytes());
            eat(&[0]);
            // A key set's members one after another, marked, so that a single key's
            // fingerprint is what it was before key sets.
            if tool.concurrency.len() > 1 {
                eat(b"set");
                eat(&(tool.concurrency.len() as u32).to_le_bytes());
            }
            for c in &tool.concurrency {
                eat(c.key.as_str().as_bytes());
                eat(&c.limit.get().to_le_bytes());
                eat(&c.delay_ms.to_le_bytes());
                eat(&c.retries.to_le_bytes());
                // Only when set, so that every fingerprint from before `shared` stays the same.
                if c.shared {
                    eat(b"shared");
                }
                // Likewise only when set, for fingerprints from before rates.
                if !c.rates.is_empty() {
                    eat(b"rate");
                    for w in &c.rates {
                        eat(&w.count.to_le_bytes());
                        eat(&w.per_ms.to_le_bytes());
                        eat(&w.burst.to_le_bytes());
                    }
                    eat(&c.burst.to_le_bytes());
                    if c.weight != 1 {
                        eat(b"weight");
                        eat(&c.weight.to_le_bytes());
                    }
                }
                // Likewise only when set, for fingerprints from before adaptive limits.
                if let Some(min) = c.adapt_min {
                    eat(b"aimd");
                    eat(&min.get().to_le_bytes());
                }
                // Likewise only when set, for fingerprints from before path keys.
                if let Some(path) = &c.path {
                    eat(b"path");
                    eat(path.as_str().as_bytes());
                    eat(&[0]);
                }
                // Likewise only when not the default, for fingerprints from before `max_wait`.
                if c.max_wait_ms != crate::retry_after::MAX_WAIT_DEFAULT_MS {
                    eat(b"max_wait");
                    eat(&c.max_wait_ms.to_le_bytes());
                }
            }
            eat(&[
                1,
                u8::from(tool.fan_out),
                u8::from(tool.on_error == OnError::Stop),
            ]);
        }
        h
    }
}
