//! The config generator. It decides every tool's key, limit, fan-out and stop first (valid by
//! construction: one limit per key, stop only with a limit), then writes them as 1 to 3 TOML
//! layers in the integer and table forms, split across layers in ways whose merge is certain,
//! with overridden noise below. The model reads its rules from here (`Rules`, `KeyRule`).

use std::collections::BTreeMap;

use turnstile_engine::config::{self, Layer, Policy};

use crate::common::Rng;

pub(super) const KEY_POOL: [&str; 4] = ["k0", "k1", "k2", TEMPLATE];

/// The pool's key template: each call's key is `f:` and its `p` argument.
pub(super) const TEMPLATE: &str = "f:{p}";

/// Arguments calls of a templated tool are given, and the key each makes: written here as
/// plain data, so the model never parses JSON (`None`: the template's own key).
pub(super) const ARGUMENTS: [(Option<&str>, Option<&str>); 9] = [
    (Some(r#"{"p":"a"}"#), Some("f:a")),
    (Some(r#"{"p":"b","q":[1,{"p":"x"}]}"#), Some("f:b")),
    (Some(r#" { "p" : "a" } "#), Some("f:a")),
    (Some(r#"{"p":1}"#), Some("f:1")),
    (Some(r#"{"p":"\u0061"}"#), Some("f:a")),
    (Some(r#"{"p":null}"#), None),
    (Some(r#"{"q":"a"}"#), None),
    (Some(r#"{"p":"a""#), None),
    (None, None),
];

/// Names an expanded key of the pool's template can have (a pause may name them).
pub(super) const MADE_KEYS: [&str; 3] = ["f:a", "f:b", "f:1"];

/// A tool's `concurrency` as the generator chose it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Conc {
    Unset,
    /// `concurrency = N`: the key is the tool's own name.
    Int,
    /// `{ key, limit }`.
    Table(String),
}

#[derive(Clone, Debug)]
pub(super) struct ToolGen {
    pub(super) name: String,
    conc: Conc,
    fan_out: bool,
    stop: bool,
    /// Units of its key's rate one call costs, when the key has a rate (at most its burst).
    weight: u32,
}

/// A generated config: the tools, one limit (0 to 5), one delay, one retry cap and one
/// maximum wait per key name, and the layers' text.
#[derive(Clone, Debug)]
pub(super) struct Gen {
    pub(super) tools: Vec<ToolGen>,
    limits: BTreeMap<String, u32>,
    /// Milliseconds between starts (0: none), as every table naming the key writes it.
    delays: BTreeMap<String, u32>,
    /// Rate windows and burst, as every table naming the key writes them.
    rates: BTreeMap<String, Rates>,
    /// Whether the key's limit adapts, and its floor (clamped to the limit when written).
    adapts: BTreeMap<String, Option<u32>>,
    /// Rate-limit retries per entry, as every table naming the key writes it.
    retries: BTreeMap<String, u32>,
    /// The longest rate-limit wait in ms, as every table naming the key writes it.
    max_waits: BTreeMap<String, u32>,
    /// Whether the key is shared (permits from a store), as every table naming it says.
    shared: BTreeMap<String, bool>,
    layers: Vec<String>,
}

/// The cap of an entry without a key, and of a key whose tables do not write `retries`.
pub(super) const RETRIES_DEFAULT: u32 = 3;
/// The longest wait a rate limit may ask for on an unkeyed entry and on a key whose tables do
/// not write `max_wait`, in ms.
pub(super) const MAX_WAIT_MS: u64 = 5 * 60 * 1_000;

/// A key as the rules see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct KeyRule {
    pub(super) name: String,
    /// `u32::MAX` for a key with limit 0 that is kept for its delay.
    pub(super) limit: u32,
    /// The delay the scheduler keeps: 0 on a shared key, whose store keeps it.
    pub(super) delay: u32,
    /// The rate windows `(count, per_ms)` and their burst (none on a shared key).
    pub(super) rates: Rates,
    /// The floor of an adaptive limit (`limit` is then its ceiling).
    pub(super) adapt_min: Option<u32>,
    /// Units of the key's rate one call of this tool costs (1 when the key has no rate).
    pub(super) weight: u32,
    pub(super) retries: u32,
    /// The longest rate-limit wait in ms; a longer one settles the entry.
    pub(super) max_wait: u64,
    /// Permits from a store shared across processes.
    pub(super) shared: bool,
    /// What a shared key's permit requests must carry for its store (none on a local key).
    pub(super) store: Option<StoreTerms>,
}

/// A shared key's terms as its store keeps them, from the docs (WIT `permit-request`): the
/// key's limit (none when unbounded), its delay, its rate windows `(count, per_ms, burst)`
/// ascending, each window once with the smallest burst it was given, and the call's weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct StoreTerms {
    pub(super) limit: Option<u32>,
    pub(super) delay: u32,
    pub(super) rates: Vec<(u32, u32, u32)>,
    pub(super) weight: u32,
}

/// What the rules need of a tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Rules {
    /// The key; `None` when unbounded and unspaced.
    pub(super) key: Option<KeyRule>,
    pub(super) fan_out: bool,
    pub(super) stop: bool,
}

/// A key's rate windows `(count, per_ms)`, ascending without repeats, and the burst they
/// let through at once (1 when there are none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Rates {
    /// `(count, per_ms, own burst)`; a window without its own takes `burst`.
    pub(super) windows: Vec<(u32, u32, Option<u32>)>,
    pub(super) burst: u32,
}

impl Rates {
    /// A window's `(count, per_ms, burst)`, its burst its own or the key's.
    pub(super) fn window(&self, i: usize) -> (u32, u32, u32) {
        let (count, per_ms, own) = self.windows[i];
        (count, per_ms, own.unwrap_or(self.burst))
    }

    /// The smallest burst of any window (what one call may weigh at most).
    fn least_burst(&self) -> u32 {
        (0..self.windows.len())
            .map(|i| self.window(i).2)
            .min()
            .unwrap_or(1)
    }

    fn none() -> Self {
        Self {
            windows: Vec::new(),
            burst: 1,
        }
    }
}

/// Mostly none; else one or two windows of 1 to 4 starts per 5 to 80 ms (the generated waits'
/// scale), often with a burst.
fn random_rates(rng: &mut Rng) -> Rates {
    if rng.chance(65) {
        return Rates::none();
    }
    let mut windows: Vec<(u32, u32)> = (0..1 + rng.below(2))
        .map(|_| (1 + rng.below(4) as u32, 5 + rng.below(76) as u32))
        .collect();
    windows.sort_unstable();
    windows.dedup();
    // Sometimes a window has its own burst (a long window's quota spent freely).
    let windows = windows
        .into_iter()
        .map(|(count, per_ms)| {
            (
                count,
                per_ms,
                rng.chance(20).then(|| 1 + rng.below(6) as u32),
            )
        })
        .collect();
    let burst = if rng.chance(50) {
        1
    } else {
        1 + rng.below(4) as u32
    };
    Rates { windows, burst }
}

/// Mostly a fixed limit; else an adaptive one with a floor of 1 to 3 (at most the ceiling).
fn random_adapt(rng: &mut Rng) -> Option<u32> {
    rng.chance(30).then(|| 1 + rng.below(3) as u32)
}

fn random_delay(rng: &mut Rng) -> u32 {
    match rng.below(10) {
        0..=4 => 0,
        5..=7 => 1 + rng.below(10) as u32,
        _ => 10 + rng.below(41) as u32,
    }
}

/// Mostly the default; often short enough that the generated waits (up to 80 ms) pass it;
/// sometimes 0 (no wait at all) or longer than the default.
fn random_max_wait(rng: &mut Rng) -> u32 {
    match rng.below(10) {
        0..=4 => MAX_WAIT_MS as u32,
        5 => 0,
        6..=8 => 1 + rng.below(60) as u32,
        _ => 2 * MAX_WAIT_MS as u32,
    }
}

fn random_limit(rng: &mut Rng) -> u32 {
    match rng.below(10) {
        0 | 1 => 0,
        2..=5 => 1,
        _ => 2 + rng.below(4) as u32,
    }
}

impl Gen {
    pub(super) fn random(rng: &mut Rng) -> Self {
        let n = 1 + rng.below(5);
        let names: Vec<String> = (0..n).map(|t| format!("t{t}")).collect();
        let key_names: Vec<String> = KEY_POOL
            .iter()
            .map(|k| (*k).to_owned())
            .chain(names.iter().cloned())
            .collect();
        let limits = key_names
            .iter()
            .map(|k| (k.clone(), random_limit(rng)))
            .collect();
        let delays = key_names
            .iter()
            .map(|k| (k.clone(), random_delay(rng)))
            .collect();
        let rates = key_names
            .iter()
            .map(|k| (k.clone(), random_rates(rng)))
            .collect();
        let adapts = key_names
            .iter()
            .map(|k| (k.clone(), random_adapt(rng)))
            .collect();
        let retries = key_names
            .iter()
            .map(|k| (k.clone(), rng.below(4) as u32))
            .collect();
        let max_waits = key_names
            .iter()
            .map(|k| (k.clone(), random_max_wait(rng)))
            .collect();
        let shared = key_names
            .iter()
            .map(|k| (k.clone(), rng.chance(30)))
            .collect();
        let tools = names
            .into_iter()
            .map(|name| ToolGen {
                weight: 1 + rng.below(3) as u32,
                name,
                conc: Conc::Unset,
                fan_out: false,
                stop: false,
            })
            .collect();
        let mut g = Self {
            tools,
            limits,
            delays,
            rates,
            adapts,
            retries,
            max_waits,
            shared,
            layers: Vec::new(),
        };
        for t in 0..n {
            g.reroll_conc(t, rng);
            g.reroll_fan_out(t, rng);
        }
        g.seal(rng);
        g
    }

    /// Some keys get new limits, some tools new forms or fan-out; written anew.
    pub(super) fn changed(&self, rng: &mut Rng) -> Self {
        let mut g = self.clone();
        for limit in g.limits.values_mut() {
            if rng.chance(40) {
                *limit = random_limit(rng);
            }
        }
        for delay in g.delays.values_mut() {
            if rng.chance(30) {
                *delay = random_delay(rng);
            }
        }
        for rates in g.rates.values_mut() {
            if rng.chance(30) {
                *rates = random_rates(rng);
            }
        }
        for adapt in g.adapts.values_mut() {
            if rng.chance(30) {
                *adapt = random_adapt(rng);
            }
        }
        for retries in g.retries.values_mut() {
            if rng.chance(30) {
                *retries = rng.below(4) as u32;
            }
        }
        for max_wait in g.max_waits.values_mut() {
            if rng.chance(20) {
                *max_wait = random_max_wait(rng);
            }
        }
        for shared in g.shared.values_mut() {
            if rng.chance(20) {
                *shared = !*shared;
            }
        }
        for t in 0..g.tools.len() {
            if rng.chance(35) {
                g.reroll_conc(t, rng);
            }
            if rng.chance(35) {
                g.reroll_fan_out(t, rng);
            }
        }
        g.seal(rng);
        g
    }

    /// The same rules written anew (other forms, other layers).
    pub(super) fn rewritten(&self, rng: &mut Rng) -> Self {
        let mut g = self.clone();
        g.seal(rng);
        g
    }

    fn reroll_conc(&mut self, t: usize, rng: &mut Rng) {
        let tools = self.tools.len();
        self.tools[t].conc = match rng.below(4) {
            0 => Conc::Unset,
            1 => Conc::Int,
            _ if rng.chance(70) => Conc::Table(KEY_POOL[rng.below(KEY_POOL.len())].to_owned()),
            // Keys and tool names share one namespace.
            _ => Conc::Table(format!("t{}", rng.below(tools))),
        };
    }

    fn reroll_fan_out(&mut self, t: usize, rng: &mut Rng) {
        self.tools[t].fan_out = rng.chance(60);
        self.tools[t].stop = rng.chance(50);
    }

    /// Stop only with a limit (else the config is invalid); then the text.
    fn seal(&mut self, rng: &mut Rng) {
        for t in 0..self.tools.len() {
            if self.declared(&self.tools[t]).is_none_or(|(_, l)| l == 0) {
                self.tools[t].stop = false;
            }
        }
        self.layers = emit(self, rng);
    }

    /// The key a tool names and the limit it gives it (`concurrency = 0` names none).
    fn declared(&self, t: &ToolGen) -> Option<(String, u32)> {
        let key = match &t.conc {
            Conc::Unset => return None,
            Conc::Int => t.name.clone(),
            Conc::Table(k) => k.clone(),
        };
        let limit = self.limits[&key];
        (t.conc != Conc::Int || limit > 0).then_some((key, limit))
    }

    /// The delay, retry cap and maximum wait every tool naming `key` gives it: the integer
    /// form can write none (no delay, the default cap and wait), so a key some tool names that
    /// way has those.
    fn timing(&self, key: &str) -> (u32, u32, u32) {
        if self
            .tools
            .iter()
            .any(|t| t.conc == Conc::Int && t.name == key)
        {
            (0, RETRIES_DEFAULT, MAX_WAIT_MS as u32)
        } else {
            (self.delays[key], self.retries[key], self.max_waits[key])
        }
    }

    /// The rate windows every tool naming `key` gives it: none when the integer form names it
    /// (it can write none). A shared key's are its store's (`KeyRule::store`).
    fn rates_of(&self, key: &str) -> Rates {
        let int_form = self
            .tools
            .iter()
            .any(|t| t.conc == Conc::Int && t.name == key);
        if int_form {
            Rates::none()
        } else {
            self.rates[key].clone()
        }
    }

    /// The weight a tool's calls have on its key's rate: its own, at most the burst, and 1
    /// when the key has no rate (then it is not written).
    fn weight_of(&self, t: &ToolGen, rates: &Rates) -> u32 {
        if rates.windows.is_empty() {
            1
        } else {
            t.weight.min(rates.least_burst())
        }
    }

    /// The floor of `key`'s adaptive limit: none when the integer form names it, or when its
    /// limit is 0 (unbounded). A shared key adapts too: it asks its store for its limit now.
    fn adapt_of(&self, key: &str) -> Option<u32> {
        let int_form = self
            .tools
            .iter()
            .any(|t| t.conc == Conc::Int && t.name == key);
        let limit = self.limits[key];
        if int_form || limit == 0 {
            return None;
        }
        self.adapts[key].map(|min| min.min(limit))
    }

    /// `key`'s limit as a table writes it: `N`, or `{ max = N, min = M, adapt = "aimd" }`.
    fn limit_text(&self, key: &str, rng: &mut Rng) -> String {
        let limit = self.limits[key];
        match self.adapt_of(key) {
            None => limit.to_string(),
            Some(1) if rng.chance(50) => format!("{{ adapt = \"aimd\", max = {limit} }}"),
            Some(min) => format!("{{ max = {limit}, min = {min}, adapt = \"aimd\" }}"),
        }
    }

    /// Whether `key` is shared: the integer form cannot say so.
    fn is_shared(&self, key: &str) -> bool {
        !self
            .tools
            .iter()
            .any(|t| t.conc == Conc::Int && t.name == key)
            && self.shared[key]
    }

    /// A tool's key: a limit of 0 lifts it, unless the key has a delay, or a retry cap or
    /// maximum wait other than the default (then it is unbounded but spaced, or capped).
    fn key_rule(&self, t: &ToolGen) -> Option<KeyRule> {
        let (name, limit) = self.declared(t)?;
        let (delay, retries, max_wait) = self.timing(&name);
        let max_wait = u64::from(max_wait);
        let shared = self.is_shared(&name);
        let rates = self.rates_of(&name);
        let adapt_min = self.adapt_of(&name);
        let weight = self.weight_of(t, &rates);
        let limit = match limit {
            0 if delay > 0
                || !rates.windows.is_empty()
                || retries != RETRIES_DEFAULT
                || max_wait != MAX_WAIT_MS =>
            {
                u32::MAX
            }
            0 => return None,
            n => n,
        };
        let store = shared.then(|| {
            let mut windows: BTreeMap<(u32, u32), u32> = BTreeMap::new();
            for i in 0..rates.windows.len() {
                let (count, per_ms, burst) = rates.window(i);
                let least = windows.entry((count, per_ms)).or_insert(burst);
                *least = (*least).min(burst);
            }
            StoreTerms {
                limit: (limit != u32::MAX).then_some(limit),
                delay,
                rates: windows.into_iter().map(|((c, p), b)| (c, p, b)).collect(),
                weight,
            }
        });
        Some(KeyRule {
            name,
            limit,
            delay: if shared { 0 } else { delay },
            rates: if shared { Rates::none() } else { rates },
            adapt_min,
            weight: if shared { 1 } else { weight },
            retries,
            max_wait,
            shared,
            store,
        })
    }

    /// The rule every key made from `TEMPLATE` follows, when some tool declares it.
    pub(super) fn template_rule(&self) -> Option<KeyRule> {
        self.tools
            .iter()
            .filter_map(|t| self.key_rule(t))
            .find(|k| k.name == TEMPLATE)
    }

    /// Whether some configured tool declares `key` (a pause may name it).
    pub(super) fn knows_key(&self, key: &str) -> bool {
        self.tools
            .iter()
            .any(|t| self.key_rule(t).is_some_and(|k| k.name == key))
    }

    pub(super) fn rules(&self, tool: &str) -> Rules {
        match self.tools.iter().find(|t| t.name == tool) {
            None => Rules {
                key: None,
                fan_out: false,
                stop: false,
            },
            Some(t) => Rules {
                key: self.key_rule(t),
                fan_out: t.fan_out,
                stop: t.stop,
            },
        }
    }

    pub(super) fn text(&self) -> String {
        self.layers
            .iter()
            .enumerate()
            .map(|(i, t)| format!("# layer {i}\n{t}"))
            .collect()
    }

    pub(super) fn policy(&self) -> Policy {
        let layers: Vec<Layer> = self
            .layers
            .iter()
            .enumerate()
            .map(|(i, t)| Layer::new(format!("layer{i}"), t.clone()))
            .collect();
        config::resolve(&layers).unwrap_or_else(|d| {
            let rendered: Vec<String> = d.iter().map(|d| d.rendered.clone()).collect();
            panic!(
                "the generated config does not resolve:\n{}\n{}",
                self.text(),
                rendered.join("\n")
            )
        })
    }
}

/// Writes a config as 1 to 3 layers.
fn emit(g: &Gen, rng: &mut Rng) -> Vec<String> {
    let n = 1 + rng.below(3);
    let mut lines: Vec<Vec<(usize, String)>> = vec![Vec::new(); n];
    for (t, tool) in g.tools.iter().enumerate() {
        for (layer, line) in conc_lines(g, tool, n, rng) {
            lines[layer].push((t, line));
        }
        for (layer, line) in fan_out_lines(tool, n, rng) {
            lines[layer].push((t, line));
        }
        if rng.chance(15) {
            let other = [
                "enable = false",
                "enable = \"explicit\"",
                "enable = { state = true }",
                "source = \"builtin\"",
            ];
            lines[rng.below(n)].push((t, other[rng.below(other.len())].to_owned()));
        }
    }
    lines
        .into_iter()
        .map(|mut layer| {
            layer.sort_by_key(|&(t, _)| t);
            let mut text = String::new();
            let mut current = None;
            for (t, line) in layer {
                if current != Some(t) {
                    text.push_str(&format!("[conversation.tools.{}]\n", g.tools[t].name));
                    current = Some(t);
                }
                text.push_str(&line);
                text.push('\n');
            }
            text
        })
        .collect()
}

fn conc_noise(rng: &mut Rng, tables: bool) -> String {
    let key = ["k0", "k1", "k2", "t0", "zz"][rng.below(5)];
    let n = rng.below(6);
    match rng.below(if tables { 4 } else { 1 }) {
        0 => format!("concurrency = {n}"),
        1 => format!("concurrency = {{ key = \"{key}\", limit = {n} }}"),
        2 => format!("concurrency = {{ key = \"{key}\" }}"),
        _ => format!("concurrency = {{ limit = {n} }}"),
    }
}

/// Overridden `concurrency` lines in layers `0..below`.
fn conc_noise_below(out: &mut Vec<(usize, String)>, below: usize, tables: bool, rng: &mut Rng) {
    for layer in 0..below {
        if rng.chance(50) {
            out.push((layer, conc_noise(rng, tables)));
        }
    }
}

/// A key's `delay`, `retries` and `max_wait` as table fields (`, delay = 5`), each given to the
/// line below (`.0`) or on top (`.1`) of a table over a table, which merge per field. A field at
/// its default is sometimes left out.
fn time_fields(g: &Gen, key: &str, rng: &mut Rng) -> (String, String) {
    let (delay, retries, max_wait) = g.timing(key);
    let mut fields = (String::new(), String::new());
    let mut put = |text: String, rng: &mut Rng| {
        if rng.chance(50) {
            fields.0.push_str(&text);
        } else {
            fields.1.push_str(&text);
        }
    };
    if delay > 0 || rng.chance(30) {
        let text = match rng.below(3) {
            0 => format!(", delay = {delay}"),
            1 => format!(", delay = \"{delay}ms\""),
            _ if delay % 10 == 0 => format!(", delay = \"0.{:02}s\"", delay / 10),
            _ => format!(", delay = \"{delay}ms\""),
        };
        put(text, rng);
    }
    let rates = g.rates_of(key);
    if !rates.windows.is_empty() {
        let spell = |&(count, per_ms, own): &(u32, u32, Option<u32>), rng: &mut Rng| {
            let text = match rng.below(3) {
                0 if per_ms % 1_000 == 0 && per_ms > 1_000 => {
                    format!("\"{count}/{}s\"", per_ms / 1_000)
                }
                1 => format!("\"{count}/{per_ms}ms\""),
                _ if per_ms % 10 == 0 => format!("\"{count}/0.{:02}s\"", per_ms / 10),
                _ => format!("\"{count}/{per_ms}ms\""),
            };
            match own {
                Some(b) => format!("{{ rate = {text}, burst = {b} }}"),
                None => text,
            }
        };
        let mut written: Vec<String> = rates.windows.iter().map(|w| spell(w, rng)).collect();
        if rng.chance(20) {
            // A window written twice limits once.
            written.push(spell(&rates.windows[0], rng));
        }
        if rng.chance(50) {
            written.reverse();
        }
        let text = match written.as_slice() {
            [one] if rng.chance(50) && !one.starts_with('{') => format!(", rate = {one}"),
            _ => format!(", rate = [{}]", written.join(", ")),
        };
        put(text, rng);
        if rates.burst != 1 || rng.chance(30) {
            put(format!(", burst = {}", rates.burst), rng);
        }
    }
    if retries != RETRIES_DEFAULT || rng.chance(30) {
        put(format!(", retries = {retries}"), rng);
    }
    if u64::from(max_wait) != MAX_WAIT_MS || rng.chance(20) {
        let text = match rng.below(3) {
            0 => format!(", max_wait = {max_wait}"),
            _ if max_wait % 60_000 == 0 => format!(", max_wait = \"{}m\"", max_wait / 60_000),
            _ => format!(", max_wait = \"{max_wait}ms\""),
        };
        put(text, rng);
    }
    let shared = g.is_shared(key);
    if shared || rng.chance(20) {
        put(format!(", shared = {shared}"), rng);
    }
    fields
}

fn conc_lines(g: &Gen, tool: &ToolGen, n: usize, rng: &mut Rng) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let top = rng.below(n);
    match &tool.conc {
        Conc::Unset => {
            if rng.chance(30) {
                conc_noise_below(&mut out, top, true, rng);
                out.push((top, "concurrency = 0".to_owned()));
            }
        }
        Conc::Int => {
            conc_noise_below(&mut out, top, true, rng);
            out.push((top, format!("concurrency = {}", g.limits[&tool.name])));
        }
        Conc::Table(key) => {
            let limit = g.limits[key];
            let (below_fields, mut top_fields) = time_fields(g, key, rng);
            let weight = g.weight_of(tool, &g.rates_of(key));
            if weight > 1 || (!g.rates_of(key).windows.is_empty() && rng.chance(20)) {
                top_fields.push_str(&format!(", weight = {weight}"));
            }
            let all = format!("{below_fields}{top_fields}");
            match rng.below(4) {
                // `{ key }` is a limit of 1; a table below would lend it its limit.
                1 if limit == 1 && g.adapt_of(key).is_none() => {
                    conc_noise_below(&mut out, top, false, rng);
                    out.push((top, format!("concurrency = {{ key = \"{key}\"{all} }}")));
                }
                // The key below, the limit on top (a table over a table merges per field).
                2 if top >= 1 => {
                    let below = rng.below(top);
                    conc_noise_below(&mut out, below, true, rng);
                    let line = if rng.chance(50) {
                        format!("concurrency = {{ key = \"{key}\"{below_fields} }}")
                    } else {
                        format!(
                            "concurrency = {{ key = \"{key}\", limit = {}{below_fields} }}",
                            rng.below(6)
                        )
                    };
                    out.push((below, line));
                    let limit = g.limit_text(key, rng);
                    out.push((
                        top,
                        format!("concurrency = {{ limit = {limit}{top_fields} }}"),
                    ));
                }
                // The limit below, the key on top.
                3 if top >= 1 => {
                    let below = rng.below(top);
                    conc_noise_below(&mut out, below, true, rng);
                    let limit = g.limit_text(key, rng);
                    out.push((
                        below,
                        format!("concurrency = {{ limit = {limit}{below_fields} }}"),
                    ));
                    out.push((
                        top,
                        format!("concurrency = {{ key = \"{key}\"{top_fields} }}"),
                    ));
                }
                _ => {
                    conc_noise_below(&mut out, top, true, rng);
                    let limit = g.limit_text(key, rng);
                    out.push((
                        top,
                        format!("concurrency = {{ key = \"{key}\", limit = {limit}{all} }}"),
                    ));
                }
            }
        }
    }
    out
}

/// `fan_out` lines from `allowed` (or any shape) in layers `0..below`.
fn fan_out_noise_below(
    out: &mut Vec<(usize, String)>,
    below: usize,
    allowed: Option<&[&str]>,
    rng: &mut Rng,
) {
    const ANY: &[&str] = &[
        "fan_out = true",
        "fan_out = false",
        "fan_out = { on_error = \"stop\" }",
        "fan_out = { enabled = false }",
        "fan_out = { enabled = true, on_error = \"continue\" }",
    ];
    let allowed = allowed.unwrap_or(ANY);
    for layer in 0..below {
        if rng.chance(50) {
            out.push((layer, allowed[rng.below(allowed.len())].to_owned()));
        }
    }
}

/// `line` in layer `top` over noise from `allowed` (or any shape).
fn single_fan_out(
    out: &mut Vec<(usize, String)>,
    top: usize,
    allowed: Option<&[&str]>,
    line: &str,
    rng: &mut Rng,
) {
    fan_out_noise_below(out, top, allowed, rng);
    out.push((top, line.to_owned()));
}

fn fan_out_lines(tool: &ToolGen, n: usize, rng: &mut Rng) -> Vec<(usize, String)> {
    // Shapes that leave `enabled` true (or unset), or `on_error` continue, when merged.
    const ENABLED: &[&str] = &["fan_out = true", "fan_out = { enabled = true }"];
    const CONTINUE: &[&str] = &[
        "fan_out = true",
        "fan_out = false",
        "fan_out = { on_error = \"continue\" }",
    ];
    let mut out = Vec::new();
    let top = rng.below(n);
    let single =
        |out: &mut Vec<(usize, String)>, allowed: Option<&[&str]>, line: &str, rng: &mut Rng| {
            single_fan_out(out, top, allowed, line, rng);
        };
    match (tool.fan_out, tool.stop) {
        (false, false) => match rng.below(4) {
            0 => {}
            1 => single(&mut out, None, "fan_out = false", rng),
            2 => single(
                &mut out,
                Some(CONTINUE),
                "fan_out = { enabled = false }",
                rng,
            ),
            _ => single(
                &mut out,
                None,
                "fan_out = { enabled = false, on_error = \"continue\" }",
                rng,
            ),
        },
        (true, false) => match rng.below(4) {
            0 => single(&mut out, None, "fan_out = true", rng),
            1 => single(
                &mut out,
                Some(ENABLED),
                "fan_out = { on_error = \"continue\" }",
                rng,
            ),
            2 => single(
                &mut out,
                Some(CONTINUE),
                "fan_out = { enabled = true }",
                rng,
            ),
            _ => single(
                &mut out,
                None,
                "fan_out = { enabled = true, on_error = \"continue\" }",
                rng,
            ),
        },
        (enabled, true) => match rng.below(3) {
            0 if enabled => single(
                &mut out,
                Some(ENABLED),
                "fan_out = { on_error = \"stop\" }",
                rng,
            ),
            // `on_error` below, `enabled` on top (a table over a table merges per field).
            1 if top >= 1 => {
                let below = rng.below(top);
                fan_out_noise_below(&mut out, below, None, rng);
                out.push((below, "fan_out = { on_error = \"stop\" }".to_owned()));
                out.push((top, format!("fan_out = {{ enabled = {enabled} }}")));
            }
            _ => single(
                &mut out,
                None,
                &format!("fan_out = {{ enabled = {enabled}, on_error = \"stop\" }}"),
                rng,
            ),
        },
    }
    out
}
