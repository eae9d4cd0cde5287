//! The seeded simulator: a deliberately simple reference model of RFD 129's rules and the
//! engine, driven side by side through the public API only, with random configs (layers the
//! model reads through its own generator, never through the resolved policy), random steps
//! mixing legal inputs and host mistakes across batches, retirement with call ids reused, and
//! restarts under the same or a changed config. After every step the exact `Outputs` must
//! match (starts, settlements, refused inputs with list, index and code, retired batches), every
//! live entry's state must match, and the invariants must hold (per key running <= limit and
//! starts in (batch, written) order, nothing starts twice, retired numbers are unknown); at the
//! end everything is approved and ended until every batch retired (liveness). The model keeps
//! its own states and its own transition table and recomputes eligibility from scratch
//! (quadratic and obviously right); at a restart it predicts the export, what comes back
//! pending, what is interrupted and which calls are left out, instead of reading them back.
//! Queries (`inspect`, `label`) are compared too.
//!
//! A second property replays JP ticket 0ya5qnf: a restart after every end gives the same
//! executions in the same order as no restart.
//!
//! A failure prints its seed; `TURNSTILE_SEED=N` replays one, `TURNSTILE_SEEDS=N` sets how many
//! run (default 2000).
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use turnstile_engine::config::{self, Layer, Policy};
use turnstile_engine::limits::{NAME_BYTES_MAX, OPERATIONS_PER_CALL_MAX};
use turnstile_engine::schedule::{
    BatchId, Call, EntryId, EntryStatus, HostSettle, InputErrorCode, InputKind, Inputs, Outcome,
    Outputs, Reason, ResumeErrorCode, SAVED_VERSION, Saved, SavedBatch, SavedCall, SavedState,
    Scheduler, Started, State, SubmitErrorCode, UnrestoredCode, Wait, fingerprint,
};

mod common;

use common::{Rng, seeds};

// ------------------------------------------------------------------------------------------
// The config generator. It decides every tool's key, limit, fan-out and stop first (valid by
// construction: one limit per key, stop only with a limit), then writes them as 1 to 3 TOML
// layers in the integer and table forms, split across layers in ways whose merge is certain,
// with overridden noise below. The model reads its rules from here.
// ------------------------------------------------------------------------------------------

const KEY_POOL: [&str; 3] = ["k0", "k1", "k2"];

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
struct ToolGen {
    name: String,
    conc: Conc,
    fan_out: bool,
    stop: bool,
}

/// A generated config: the tools, one limit (0 to 5), one delay and one retry cap per key
/// name, and the layers' text.
#[derive(Clone, Debug)]
struct Gen {
    tools: Vec<ToolGen>,
    limits: BTreeMap<String, u32>,
    /// Milliseconds between starts (0: none), as every table naming the key writes it.
    delays: BTreeMap<String, u32>,
    /// Rate-limit retries per entry, as every table naming the key writes it.
    retries: BTreeMap<String, u32>,
    layers: Vec<String>,
}

/// Where the docs leave the engine room (today: `wake_at` may be early after a cancellation or
/// a stop removed what waited), the model accepts it, each place marked `strict()`;
/// `TURNSTILE_STRICT=1` makes the model demand the exact value there instead.
fn strict() -> bool {
    std::env::var("TURNSTILE_STRICT").is_ok_and(|v| v == "1")
}

/// The cap of an entry without a key, and of a key whose tables do not write `retries`.
const RETRIES_DEFAULT: u32 = 3;

/// A key as the rules see it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct KeyRule {
    name: String,
    /// `u32::MAX` for a key with limit 0 that is kept for its delay.
    limit: u32,
    delay: u32,
    retries: u32,
}

/// What the rules need of a tool.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rules {
    /// The key; `None` when unbounded and unspaced.
    key: Option<KeyRule>,
    fan_out: bool,
    stop: bool,
}

fn random_delay(rng: &mut Rng) -> u32 {
    match rng.below(10) {
        0..=4 => 0,
        5..=7 => 1 + rng.below(10) as u32,
        _ => 10 + rng.below(41) as u32,
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
    fn random(rng: &mut Rng) -> Self {
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
        let retries = key_names
            .iter()
            .map(|k| (k.clone(), rng.below(4) as u32))
            .collect();
        let tools = names
            .into_iter()
            .map(|name| ToolGen {
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
            retries,
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
    fn changed(&self, rng: &mut Rng) -> Self {
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
        for retries in g.retries.values_mut() {
            if rng.chance(30) {
                *retries = rng.below(4) as u32;
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
    fn rewritten(&self, rng: &mut Rng) -> Self {
        let mut g = self.clone();
        g.seal(rng);
        g
    }

    fn reroll_conc(&mut self, t: usize, rng: &mut Rng) {
        let tools = self.tools.len();
        self.tools[t].conc = match rng.below(4) {
            0 => Conc::Unset,
            1 => Conc::Int,
            _ if rng.chance(70) => Conc::Table(KEY_POOL[rng.below(3)].to_owned()),
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

    /// The delay and retry cap every tool naming `key` gives it: the integer form can write
    /// neither (no delay, the default cap), so a key some tool names that way has those.
    fn timing(&self, key: &str) -> (u32, u32) {
        if self
            .tools
            .iter()
            .any(|t| t.conc == Conc::Int && t.name == key)
        {
            (0, RETRIES_DEFAULT)
        } else {
            (self.delays[key], self.retries[key])
        }
    }

    /// A tool's key: a limit of 0 lifts it, unless the key has a delay or a retry cap other
    /// than the default (then it is unbounded but spaced, or capped).
    fn key_rule(&self, t: &ToolGen) -> Option<KeyRule> {
        let (name, limit) = self.declared(t)?;
        let (delay, retries) = self.timing(&name);
        let limit = match limit {
            0 if delay > 0 || retries != RETRIES_DEFAULT => u32::MAX,
            0 => return None,
            n => n,
        };
        Some(KeyRule {
            name,
            limit,
            delay,
            retries,
        })
    }

    /// Whether some configured tool declares `key` (a pause may name it).
    fn knows_key(&self, key: &str) -> bool {
        self.tools
            .iter()
            .any(|t| self.key_rule(t).is_some_and(|k| k.name == key))
    }

    fn rules(&self, tool: &str) -> Rules {
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

    fn text(&self) -> String {
        self.layers
            .iter()
            .enumerate()
            .map(|(i, t)| format!("# layer {i}\n{t}"))
            .collect()
    }

    fn policy(&self) -> Policy {
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

/// A key's `delay` and `retries` as table fields (`, delay = 5`), each given to the line
/// below (`.0`) or on top (`.1`) of a table over a table, which merge per field. A field at
/// its default is sometimes left out.
fn time_fields(g: &Gen, key: &str, rng: &mut Rng) -> (String, String) {
    let (delay, retries) = g.timing(key);
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
    if retries != RETRIES_DEFAULT || rng.chance(30) {
        put(format!(", retries = {retries}"), rng);
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
            let (below_fields, top_fields) = time_fields(g, key, rng);
            let all = format!("{below_fields}{top_fields}");
            match rng.below(4) {
                // `{ key }` is a limit of 1; a table below would lend it its limit.
                1 if limit == 1 => {
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
                    out.push((
                        top,
                        format!("concurrency = {{ limit = {limit}{top_fields} }}"),
                    ));
                }
                // The limit below, the key on top.
                3 if top >= 1 => {
                    let below = rng.below(top);
                    conc_noise_below(&mut out, below, true, rng);
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

// ------------------------------------------------------------------------------------------
// The reference model: its own states, its own transition table, eligibility from scratch.
// ------------------------------------------------------------------------------------------

/// An entry's state, as the model sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Pending,
    Approved,
    Running,
    Asking,
    Ok,
    Failed,
    Rejected,
    Skipped,
    SettledFailed,
    Cancelled,
    Stopped(u32),
    Interrupted,
    /// Hit a rate limit once more than its key's cap allows, after this many retries.
    RateLimited(u32),
}

impl St {
    fn unanswered(self) -> bool {
        matches!(
            self,
            Self::Pending | Self::Approved | Self::Running | Self::Asking
        )
    }

    fn holds_slot(self) -> bool {
        matches!(self, Self::Running | Self::Asking)
    }

    fn undecided_or_parked(self) -> bool {
        matches!(self, Self::Pending | Self::Approved)
    }

    fn failure(self) -> bool {
        matches!(
            self,
            Self::Failed | Self::SettledFailed | Self::RateLimited(_)
        )
    }

    fn ended(self) -> bool {
        matches!(self, Self::Ok | Self::Failed)
    }

    /// The engine's spelling, to compare.
    fn engine(self) -> State {
        match self {
            Self::Pending => State::Pending,
            Self::Approved => State::Approved,
            Self::Running => State::Running,
            Self::Asking => State::Asking,
            Self::Ok => State::Ended(Outcome::Ok),
            Self::Failed => State::Ended(Outcome::Failed),
            Self::Rejected => State::Settled(Reason::Rejected),
            Self::Skipped => State::Settled(Reason::Skipped),
            Self::SettledFailed => State::Settled(Reason::Failed),
            Self::Cancelled => State::Settled(Reason::Cancelled),
            Self::Stopped(after) => State::Settled(Reason::Stopped { after }),
            Self::Interrupted => State::Settled(Reason::Interrupted),
            Self::RateLimited(retries) => State::Settled(Reason::RateLimited { retries }),
        }
    }

    /// How an export must carry it.
    fn saved(self) -> Option<Saved> {
        match self {
            Self::Pending | Self::Approved => None,
            Self::Running | Self::Asking => Some(Saved::Started),
            Self::Ok => Some(Saved::Ended(Outcome::Ok)),
            Self::Failed => Some(Saved::Ended(Outcome::Failed)),
            other => match other.engine() {
                State::Settled(reason) => Some(Saved::Settled(reason)),
                _ => unreachable!(),
            },
        }
    }
}

/// The model's transition table for host inputs.
fn transition(kind: InputKind, st: St, how: Option<HostSettle>) -> Result<St, InputErrorCode> {
    use InputErrorCode as E;
    match kind {
        InputKind::Approve | InputKind::Settle if st != St::Pending => Err(E::AlreadyDecided),
        InputKind::Approve => Ok(St::Approved),
        InputKind::Settle => Ok(match how {
            Some(HostSettle::Rejected) => St::Rejected,
            Some(HostSettle::Skipped) => St::Skipped,
            _ => St::SettledFailed,
        }),
        _ if st.ended() => Err(E::AlreadyEnded),
        InputKind::Ask if st == St::Running => Ok(St::Asking),
        InputKind::Ask => Err(E::NotRunning),
        InputKind::Answer if st == St::Asking => Ok(St::Running),
        InputKind::Answer => Err(E::NotAsking),
        InputKind::Ok | InputKind::Failed if st.holds_slot() => Ok(if kind == InputKind::Ok {
            St::Ok
        } else {
            St::Failed
        }),
        _ => Err(E::NotRunning),
    }
}

#[derive(Clone, Debug)]
struct MCall {
    id: String,
    tool: String,
    ops: Option<u32>,
    first: u64,
    /// From the generator's rules when the call was submitted or restored; none for a call a
    /// restart left out.
    key: Option<KeyRule>,
    stop: bool,
}

impl MCall {
    fn count(&self) -> u64 {
        u64::from(self.ops.unwrap_or(1))
    }
}

#[derive(Clone, Debug)]
struct MBatch {
    id: u64,
    first: u64,
    end: u64,
    calls: Vec<MCall>,
    cancelled: bool,
    live: bool,
}

#[derive(Clone, Debug)]
struct MEntry {
    batch: usize,
    call: usize,
    op: u32,
    st: St,
}

/// A call to submit.
#[derive(Clone, Debug)]
struct SubCall {
    id: String,
    tool: String,
    ops: Option<u32>,
}

/// The inputs of one step, owned.
#[derive(Clone, Debug, Default)]
struct Ins {
    approve: Vec<u64>,
    settle: Vec<(u64, HostSettle)>,
    ask: Vec<u64>,
    answer: Vec<u64>,
    ok: Vec<u64>,
    failed: Vec<u64>,
    cancel: Vec<u64>,
    now: Option<u64>,
    retry: Vec<(u64, u64)>,
    pause: Vec<(String, u64)>,
}

impl Ins {
    fn is_empty(&self) -> bool {
        self.now.is_none()
            && self.retry.is_empty()
            && self.pause.is_empty()
            && self.approve.is_empty()
            && self.settle.is_empty()
            && self.ask.is_empty()
            && self.answer.is_empty()
            && self.ok.is_empty()
            && self.failed.is_empty()
            && self.cancel.is_empty()
    }
}

/// One step's output, in comparable form.
#[derive(Debug, Default, PartialEq, Eq)]
struct Out {
    start: Vec<u64>,
    settle: Vec<(u64, Reason)>,
    errors: Vec<(InputKind, u32, InputErrorCode)>,
    retired: Vec<u64>,
    wake_at: Option<u64>,
}

impl Out {
    fn of(out: &Outputs) -> Self {
        Self {
            start: out.start.iter().map(|e| e.0).collect(),
            settle: out.settle.iter().map(|&(e, r)| (e.0, r)).collect(),
            errors: out
                .errors
                .iter()
                .map(|e| (e.input, e.index, e.code))
                .collect(),
            retired: out.retired.iter().map(|b| b.0).collect(),
            wake_at: out.wake_at,
        }
    }
}

/// The reference model. Batch `b` is `batches[b - 1]`, entry `n` is `entries[n - 1]`: numbers
/// start at 1, are handed out in order and never twice, so they index the history.
#[derive(Clone, Debug)]
struct Model {
    cfg: Gen,
    batches: Vec<MBatch>,
    entries: Vec<MEntry>,
    /// Settlements a restart made, reported by the next step.
    reports: Vec<(u64, Reason)>,
    /// Time: the clock as last given (a scheduler starts at 0 and a restart forgets time).
    time: Time,
}

/// What the model knows of time since the scheduler was made or resumed.
#[derive(Clone, Debug, Default)]
struct Time {
    now: u64,
    /// Per key name, the end of its pause (a pause only extends).
    paused: HashMap<String, u64>,
    /// Per key name, the host's `now` at its last start.
    last_start: HashMap<String, u64>,
    /// Per entry, how many times it ran again after a rate limit.
    retried: HashMap<u64, u32>,
    /// Unkeyed retried entries that wait alone, until when.
    not_before: HashMap<u64, u64>,
    /// Retried entries the engine does not stop although a failure before them in their call
    /// came first (a deviation, see `retry`).
    unstoppable: HashSet<u64>,
}

/// The index of entry `n` (numbers start at 1) in the model's history.
fn ix(n: u64) -> usize {
    (n - 1) as usize
}

fn valid_name(name: &str, call_id: bool) -> bool {
    !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && !(call_id && (name.contains('#') || name.contains('\n')))
}

impl Model {
    fn new(cfg: Gen) -> Self {
        Self {
            cfg,
            batches: Vec::new(),
            entries: Vec::new(),
            reports: Vec::new(),
            time: Time::default(),
        }
    }

    fn next_batch(&self) -> u64 {
        self.batches.len() as u64 + 1
    }

    fn next_entry(&self) -> u64 {
        self.entries.len() as u64 + 1
    }

    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.batches.len()).filter(|&b| self.batches[b].live)
    }

    fn live_entries(&self) -> impl Iterator<Item = u64> + '_ {
        self.live()
            .flat_map(|b| self.batches[b].first..self.batches[b].end)
    }

    fn is_live(&self, n: u64) -> bool {
        n.checked_sub(1)
            .and_then(|i| self.entries.get(i as usize))
            .is_some_and(|e| self.batches[e.batch].live)
    }

    fn st(&self, n: u64) -> St {
        self.entries[ix(n)].st
    }

    fn set(&mut self, n: u64, st: St) {
        self.entries[ix(n)].st = st;
    }

    fn call(&self, n: u64) -> &MCall {
        let e = &self.entries[ix(n)];
        &self.batches[e.batch].calls[e.call]
    }

    fn key(&self, n: u64) -> Option<(&str, u32)> {
        self.call(n)
            .key
            .as_ref()
            .map(|k| (k.name.as_str(), k.limit))
    }

    fn rule(&self, n: u64) -> Option<&KeyRule> {
        self.call(n).key.as_ref()
    }

    /// The earliest time key `k` may start its next entry: its delay after its last start,
    /// and its pause.
    fn gate(&self, k: &KeyRule) -> u64 {
        let spaced = self
            .time
            .last_start
            .get(&k.name)
            .map_or(0, |&t| t + u64::from(k.delay));
        spaced.max(self.time.paused.get(&k.name).copied().unwrap_or(0))
    }

    /// Entries that hold a slot of key `k`.
    fn running(&self, k: &str) -> usize {
        self.live_entries()
            .filter(|&m| self.key(m).is_some_and(|(mk, _)| mk == k))
            .filter(|&m| self.st(m).holds_slot())
            .count()
    }

    /// The first entry of key `k` not started yet (pending or approved), in entry order.
    fn front(&self, k: &str) -> Option<u64> {
        self.live_entries().find(|&m| {
            self.key(m).is_some_and(|(mk, _)| mk == k) && self.st(m).undecided_or_parked()
        })
    }

    /// When something waits on time: a key whose front entry could start but for its gate, or
    /// an unkeyed retried entry waiting alone.
    fn wake_at(&self) -> Option<u64> {
        let mut names: Vec<&KeyRule> = Vec::new();
        for n in self.live_entries() {
            if let Some(k) = self.rule(n)
                && !names.iter().any(|m| m.name == k.name)
            {
                names.push(k);
            }
        }
        let keys = names.into_iter().filter_map(|k| {
            let front = self.front(&k.name)?;
            let gate = self.gate(k);
            (self.st(front) == St::Approved
                && self.open(self.entries[ix(front)].batch)
                && self.running(&k.name) < k.limit as usize
                && gate > self.time.now)
                .then_some(gate)
        });
        let alone = self
            .time
            .not_before
            .iter()
            .filter(|&(&n, _)| self.is_live(n) && self.st(n) == St::Approved)
            .map(|(_, &t)| t);
        keys.chain(alone).min()
    }

    fn label(&self, n: u64) -> String {
        let c = self.call(n);
        match c.ops {
            Some(_) => format!("{}#{}", c.id, self.entries[ix(n)].op),
            None => c.id.clone(),
        }
    }

    /// Rule 1: nothing pending, not cancelled.
    fn open(&self, b: usize) -> bool {
        let batch = &self.batches[b];
        batch.live
            && !batch.cancelled
            && (batch.first..batch.end).all(|n| self.st(n) != St::Pending)
    }

    /// The lowest failed operation of an entry's call.
    fn lowest_failure(&self, n: u64) -> Option<u32> {
        let c = self.call(n);
        (c.first..c.first + c.count())
            .filter(|&m| self.st(m).failure())
            .map(|m| self.entries[ix(m)].op)
            .min()
    }

    /// A call id is taken while its batch lives, even by a call a restart left out (its
    /// batch still holds its entries; an id free before the batch retires would make the next
    /// export hold two calls with one id).
    fn live_call(&self, id: &str) -> bool {
        self.live()
            .any(|b| self.batches[b].calls.iter().any(|c| c.id == id))
    }

    fn submit(&mut self, calls: &[SubCall]) -> Result<(u64, u64, u32), SubmitErrorCode> {
        if calls.is_empty() {
            return Err(SubmitErrorCode::EmptyBatch);
        }
        for (i, c) in calls.iter().enumerate() {
            if !valid_name(&c.id, true) || !valid_name(&c.tool, false) {
                return Err(SubmitErrorCode::InvalidId);
            }
            if self.live_call(&c.id) || calls[..i].iter().any(|d| d.id == c.id) {
                return Err(SubmitErrorCode::DuplicateId);
            }
            match c.ops {
                Some(_) if !self.cfg.rules(&c.tool).fan_out => {
                    return Err(SubmitErrorCode::NotFanOut);
                }
                Some(0) => return Err(SubmitErrorCode::InvalidOperations),
                Some(n) if n > OPERATIONS_PER_CALL_MAX => return Err(SubmitErrorCode::TooLarge),
                _ => {}
            }
        }
        let (id, first) = (self.next_batch(), self.next_entry());
        let b = self.batches.len();
        let mut batch = MBatch {
            id,
            first,
            end: first,
            calls: Vec::new(),
            cancelled: false,
            live: true,
        };
        for (ci, c) in calls.iter().enumerate() {
            let rules = self.cfg.rules(&c.tool);
            let call = MCall {
                id: c.id.clone(),
                tool: c.tool.clone(),
                ops: c.ops,
                first: batch.end,
                key: rules.key,
                stop: rules.stop,
            };
            for op in 0..call.count() as u32 {
                self.entries.push(MEntry {
                    batch: b,
                    call: ci,
                    op,
                    st: St::Pending,
                });
            }
            batch.end += call.count();
            batch.calls.push(call);
        }
        let count = (batch.end - first) as u32;
        self.batches.push(batch);
        Ok((id, first, count))
    }

    /// One step: every input judged on its own, in field order; then the key walks and
    /// retirement.
    fn step(&mut self, ins: &Ins) -> Out {
        let mut out = Out {
            settle: std::mem::take(&mut self.reports),
            ..Out::default()
        };
        if let Some(now) = ins.now {
            if now < self.time.now {
                out.errors
                    .push((InputKind::Now, 0, InputErrorCode::TimeBackwards));
            } else {
                self.time.now = now;
            }
        }
        // Unkeyed retried entries whose wait is over run again as the clock reaches them.
        let due: Vec<u64> = self
            .time
            .not_before
            .iter()
            .filter(|&(_, &t)| t <= self.time.now)
            .map(|(&n, _)| n)
            .collect();
        for n in due {
            self.time.not_before.remove(&n);
            if self.is_live(n) && self.st(n) == St::Approved {
                self.set(n, St::Running);
                out.start.push(n);
            }
        }
        for (i, &n) in ins.approve.iter().enumerate() {
            self.judge(InputKind::Approve, i, n, None, &mut out);
        }
        for (i, &(n, how)) in ins.settle.iter().enumerate() {
            self.judge(InputKind::Settle, i, n, Some(how), &mut out);
        }
        let lists = [
            (InputKind::Ask, &ins.ask),
            (InputKind::Answer, &ins.answer),
            (InputKind::Ok, &ins.ok),
            (InputKind::Failed, &ins.failed),
        ];
        for (kind, list) in lists {
            for (i, &n) in list.iter().enumerate() {
                self.judge(kind, i, n, None, &mut out);
            }
        }
        for (i, &(n, until)) in ins.retry.iter().enumerate() {
            if let Err(code) = self.retry(n, until, &mut out) {
                out.errors.push((InputKind::Retry, i as u32, code));
            }
        }
        for (i, &b) in ins.cancel.iter().enumerate() {
            if let Err(code) = self.cancel(b, &mut out) {
                out.errors.push((InputKind::Cancel, i as u32, code));
            }
        }
        for (i, (key, until)) in ins.pause.iter().enumerate() {
            if self.cfg.knows_key(key) {
                let p = self.time.paused.entry(key.clone()).or_insert(0);
                *p = (*p).max(*until);
            } else {
                out.errors
                    .push((InputKind::Pause, i as u32, InputErrorCode::UnknownKey));
            }
        }
        self.walk(&mut out);
        self.retire(&mut out);
        out.start.sort_unstable();
        out.settle.sort_by_key(|s| s.0);
        out.wake_at = self.wake_at();
        out
    }

    /// An execution hit a rate limit: its slot is free and its key paused until `until`; it
    /// runs again (keyed: from its place in its key's order; unkeyed: alone, at `until`),
    /// unless its batch was cancelled or it already ran again as often as its key allows.
    fn retry(&mut self, n: u64, until: u64, out: &mut Out) -> Result<(), InputErrorCode> {
        if !self.is_live(n) {
            return Err(InputErrorCode::UnknownEntry);
        }
        let rule = self.rule(n).cloned();
        let cap = rule.as_ref().map_or(RETRIES_DEFAULT, |k| k.retries);
        let cancelled = self.batches[self.entries[ix(n)].batch].cancelled;
        match self.st(n) {
            St::Running | St::Asking => {}
            st if st.ended() => return Err(InputErrorCode::AlreadyEnded),
            _ => return Err(InputErrorCode::NotRunning),
        }
        if let Some(k) = &rule {
            let p = self.time.paused.entry(k.name.clone()).or_insert(0);
            *p = (*p).max(until);
        }
        let done = self.time.retried.get(&n).copied().unwrap_or(0);
        // It may not run again when its batch was cancelled, when an earlier operation of its
        // call failed under `stop` (the earlier cause wins over the cap), or past its key's cap.
        let op = self.entries[ix(n)].op;
        let c = self.call(n);
        let behind = if c.stop && c.ops.is_some() {
            self.lowest_failure(n).filter(|&f| f < op)
        } else {
            None
        };
        let give_up = if cancelled {
            Some(St::Cancelled)
        } else if let Some(f) = behind {
            Some(St::Stopped(f + 1))
        } else if done >= cap {
            Some(St::RateLimited(done))
        } else {
            None
        };
        match give_up {
            Some(st) => {
                self.set(n, st);
                out.settle.push((
                    n,
                    match st.engine() {
                        State::Settled(r) => r,
                        _ => unreachable!(),
                    },
                ));
                self.immediate(out);
            }
            None => {
                self.time.retried.insert(n, done + 1);
                self.set(n, St::Approved);
                if rule.is_none() && until > self.time.now {
                    self.time.not_before.insert(n, until);
                }
                self.immediate(out);
            }
        }
        Ok(())
    }

    fn judge(&mut self, kind: InputKind, i: usize, n: u64, how: Option<HostSettle>, out: &mut Out) {
        let next = if self.is_live(n) {
            transition(kind, self.st(n), how)
        } else {
            Err(InputErrorCode::UnknownEntry)
        };
        match next {
            Ok(st) => {
                self.set(n, st);
                self.immediate(out);
            }
            Err(code) => out.errors.push((kind, i as u32, code)),
        }
    }

    fn cancel(&mut self, b: u64, out: &mut Out) -> Result<(), InputErrorCode> {
        let Some(bi) = (b as usize)
            .checked_sub(1)
            .filter(|&i| self.batches.get(i).is_some_and(|x| x.live))
        else {
            return Err(InputErrorCode::UnknownBatch);
        };
        if self.batches[bi].cancelled {
            return Err(InputErrorCode::BatchCancelled);
        }
        self.batches[bi].cancelled = true;
        for n in self.batches[bi].first..self.batches[bi].end {
            if self.st(n).undecided_or_parked() {
                self.set(n, St::Cancelled);
                out.settle.push((n, Reason::Cancelled));
            }
        }
        Ok(())
    }

    /// What happens at once in an open batch: rule 4 (approved operations behind the lowest
    /// failure of a stop call are stopped) and rule 1 (unkeyed approved entries start).
    fn immediate(&mut self, out: &mut Out) {
        for b in 0..self.batches.len() {
            if !self.open(b) {
                continue;
            }
            for n in self.batches[b].first..self.batches[b].end {
                if self.st(n) != St::Approved {
                    continue;
                }
                let op = self.entries[ix(n)].op;
                let c = self.call(n);
                let unkeyed = c.key.is_none();
                let behind = if c.stop && c.ops.is_some() && !self.time.unstoppable.contains(&n) {
                    self.lowest_failure(n).filter(|&f| f < op)
                } else {
                    None
                };
                if let Some(f) = behind {
                    self.set(n, St::Stopped(f + 1));
                    out.settle.push((n, Reason::Stopped { after: f + 1 }));
                } else if unkeyed && !self.time.not_before.contains_key(&n) {
                    self.set(n, St::Running);
                    out.start.push(n);
                }
            }
        }
    }

    /// Rule 2, from scratch: the first entry that may start starts, until none may.
    fn walk(&mut self, out: &mut Out) {
        loop {
            let next = self.live_entries().find(|&n| self.eligible(n));
            let Some(n) = next else {
                return;
            };
            self.set(n, St::Running);
            out.start.push(n);
            if let Some((k, _)) = self.key(n) {
                let k = k.to_owned();
                self.time.last_start.insert(k, self.time.now);
            }
        }
    }

    fn eligible(&self, n: u64) -> bool {
        if self.st(n) != St::Approved {
            return false;
        }
        let Some((key, limit)) = self.key(n) else {
            return false;
        };
        let same = |m: &u64| self.key(*m).is_some_and(|(k, _)| k == key);
        self.open(self.entries[ix(n)].batch)
            && self.rule(n).is_some_and(|k| self.gate(k) <= self.time.now)
            && self
                .live_entries()
                .filter(same)
                .filter(|&m| self.st(m).holds_slot())
                .count()
                < limit as usize
            && !self
                .live_entries()
                .filter(same)
                .any(|m| m < n && self.st(m).undecided_or_parked())
    }

    fn retire(&mut self, out: &mut Out) {
        let done: Vec<usize> = self
            .live()
            .filter(|&b| {
                let batch = &self.batches[b];
                (batch.first..batch.end).all(|n| !self.st(n).unanswered())
            })
            .collect();
        for b in done {
            self.batches[b].live = false;
            out.retired.push(self.batches[b].id);
        }
    }

    /// How an export carries entry `n`. What a restart settled and no step has reported yet is
    /// carried as it was before that restart, so that the next restart reports it again.
    fn saved(&self, n: u64) -> Option<Saved> {
        match self.reports.iter().find(|&&(m, _)| m == n) {
            Some((_, Reason::Interrupted)) => Some(Saved::Started),
            Some(_) => None,
            None => self.st(n).saved(),
        }
    }

    /// What `unfinished` must export.
    fn export(&self) -> Vec<SavedBatch> {
        self.live()
            .map(|b| {
                let batch = &self.batches[b];
                SavedBatch {
                    batch: BatchId(batch.id),
                    first: EntryId(batch.first),
                    cancelled: batch.cancelled,
                    calls: batch
                        .calls
                        .iter()
                        .map(|c| SavedCall {
                            id: c.id.clone(),
                            tool: c.tool.clone(),
                            operations: c.ops,
                            entries: (0..c.count())
                                .filter_map(|op| self.saved(c.first + op).map(|s| (op as u32, s)))
                                .collect(),
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// A restart under `cfg`: predicts the resumed state and the calls left out. Returns those
    /// and the entries that may start again.
    fn resume(
        &mut self,
        cfg: Gen,
        started: Started,
    ) -> (Vec<(u64, String, UnrestoredCode)>, Vec<u64>) {
        self.cfg = cfg;
        // A resumed scheduler is fresh: its clock is 0 and it knows no pause, start or retry.
        self.time = Time::default();
        // Unreported settlements of an earlier restart count as what they were before it.
        for (n, reason) in std::mem::take(&mut self.reports) {
            let before = if reason == Reason::Interrupted {
                St::Running
            } else {
                St::Pending
            };
            self.set(n, before);
        }
        let mut taken: HashSet<String> = HashSet::new();
        let mut unrestored = Vec::new();
        let mut again = Vec::new();
        let live: Vec<usize> = self.live().collect();
        for b in live {
            let cancelled = self.batches[b].cancelled;
            let rerun = started == Started::RunAgain && !cancelled;
            for c in 0..self.batches[b].calls.len() {
                let call = &self.batches[b].calls[c];
                let rules = self.cfg.rules(&call.tool);
                let code = if taken.contains(&call.id) {
                    Some(UnrestoredCode::DuplicateId)
                } else if call.ops.is_some() && !rules.fan_out {
                    Some(UnrestoredCode::InvalidOperations)
                } else {
                    None
                };
                let (first, count) = (call.first, call.count());
                if let Some(code) = code {
                    unrestored.push((self.batches[b].id, call.id.clone(), code));
                }
                taken.insert(call.id.clone());
                let call = &mut self.batches[b].calls[c];
                call.key = if code.is_some() { None } else { rules.key };
                call.stop = code.is_none() && rules.stop;
                for n in first..first + count {
                    let st = self.st(n);
                    let next = match st {
                        // Left out: keeps a response; without one it is interrupted, and
                        // the unrestored list is its report.
                        other if code.is_some() && !other.unanswered() => other,
                        _ if code.is_some() => St::Interrupted,
                        St::Pending | St::Approved if cancelled => St::Cancelled,
                        St::Pending | St::Approved => St::Pending,
                        St::Running | St::Asking if rerun => St::Pending,
                        St::Running | St::Asking => St::Interrupted,
                        other => other,
                    };
                    if code.is_none() && st.unanswered() && !next.unanswered() {
                        self.reports.push((
                            n,
                            match next.engine() {
                                State::Settled(r) => r,
                                _ => unreachable!(),
                            },
                        ));
                    }
                    if st.holds_slot() && next == St::Pending {
                        again.push(n);
                    }
                    self.set(n, next);
                }
            }
        }
        (unrestored, again)
    }

    /// What `inspect` must say of batch `b`.
    fn inspect(&self, b: u64) -> Option<Vec<EntryStatus>> {
        let bi = (b as usize)
            .checked_sub(1)
            .filter(|&i| self.batches.get(i).is_some_and(|x| x.live))?;
        let batch = &self.batches[bi];
        let open = self.open(bi);
        let pending = (batch.first..batch.end)
            .filter(|&n| self.st(n) == St::Pending)
            .count() as u32;
        let statuses = (batch.first..batch.end)
            .map(|n| {
                let key = self.key(n);
                let wait = match (self.st(n), key) {
                    (St::Approved, _) if !open => Some(Wait::BatchNotApproved { pending }),
                    (St::Approved, Some((k, limit))) => {
                        let same: Vec<u64> = self
                            .live_entries()
                            .filter(|&m| self.key(m).is_some_and(|(mk, _)| mk == k))
                            .collect();
                        let ahead = same
                            .iter()
                            .copied()
                            .rev()
                            .find(|&m| m < n && self.st(m).undecided_or_parked());
                        let rule = self.rule(n).unwrap();
                        let gate = self.gate(rule);
                        let paused = self.time.paused.get(k).copied().unwrap_or(0);
                        let room = self.running(k) < limit as usize;
                        Some(match ahead {
                            Some(m) => Wait::Behind(self.label(m)),
                            None if room && gate > self.time.now && paused >= gate => {
                                Wait::KeyPaused {
                                    key: k.to_owned(),
                                    until: paused,
                                }
                            }
                            None if room && gate > self.time.now => Wait::KeySpacing {
                                key: k.to_owned(),
                                until: gate,
                            },
                            None => Wait::KeyFull {
                                key: k.to_owned(),
                                limit,
                                running: same
                                    .iter()
                                    .filter(|&&m| self.st(m).holds_slot())
                                    .map(|&m| self.label(m))
                                    .collect(),
                            },
                        })
                    }
                    (St::Approved, None) => self
                        .time
                        .not_before
                        .get(&n)
                        .map(|&until| Wait::RetryAt { until }),
                    _ => None,
                };
                EntryStatus {
                    entry: EntryId(n),
                    label: self.label(n),
                    tool: self.call(n).tool.clone(),
                    key: key.map(|(k, _)| k.to_owned()),
                    state: self.st(n).engine(),
                    wait,
                }
            })
            .collect();
        Some(statuses)
    }
}

// ------------------------------------------------------------------------------------------
// The simulator: random rounds on both sides, compared after each.
// ------------------------------------------------------------------------------------------

/// Per-seed weights over the operation mix (swarm testing), in percent.
#[derive(Debug)]
struct Weights {
    submit: usize,
    restart: usize,
    query: usize,
    mistake: u64,
    settle: u64,
    fail: u64,
    ask: u64,
    cancel: u64,
    change: u64,
    interrupt: u64,
    whole_batch: u64,
    /// A step carries `now`.
    clock: u64,
    /// Of those, one goes back.
    backwards: u64,
    /// Of those, one jumps to the last `wake_at`.
    jump: u64,
    /// A running entry hits a rate limit.
    retry: u64,
    /// The host pauses a key.
    pause: u64,
}

impl Weights {
    fn random(rng: &mut Rng) -> Self {
        Self {
            submit: 15 + rng.below(25),
            restart: rng.below(10),
            query: rng.below(10),
            mistake: [0, 5, 15, 40][rng.below(4)],
            settle: [0, 5, 20][rng.below(3)],
            fail: [0, 15, 50][rng.below(3)],
            ask: [0, 10, 30][rng.below(3)],
            cancel: [0, 3, 10][rng.below(3)],
            change: [0, 50, 100][rng.below(3)],
            interrupt: [0, 50, 100][rng.below(3)],
            whole_batch: [20, 60][rng.below(2)],
            clock: [20, 50, 90][rng.below(3)],
            backwards: [0, 5, 15][rng.below(3)],
            jump: [0, 30, 70][rng.below(3)],
            retry: [0, 10, 30, 60][rng.below(4)],
            pause: [0, 5, 20][rng.below(3)],
        }
    }
}

/// What the time properties need, since the scheduler was made or resumed (a resumed
/// scheduler starts a fresh clock and knows no pause, start or retry). Kept from the inputs
/// that were not refused and the outputs, never from the model's reasoning.
#[derive(Default)]
struct Timing {
    /// The scheduler's clock: the last `now` that was not refused.
    clock: u64,
    /// Per key, the time of its last start.
    started_at: HashMap<String, u64>,
    /// Per key, the end of its longest pause.
    paused: HashMap<String, u64>,
    /// Per key, retried entries that have not started again.
    waiting: HashMap<String, BTreeSet<u64>>,
    /// Unkeyed retried entries, and when they may run again.
    alone: HashMap<u64, u64>,
    /// Per entry, how many times it ran again.
    retries: HashMap<u64, u32>,
}

/// The engine and the model side by side, with what the invariants need to remember.
struct Sim {
    rng: Rng,
    w: Weights,
    engine: Scheduler,
    policy: Policy,
    model: Model,
    out: Outputs,
    /// Entries started (by the engine's outputs) that may not start again.
    started: HashSet<u64>,
    /// Per key, the last entry started in this scheduler for the first time since it was
    /// made or resumed (a retried entry starting again is not a first start).
    last_start: HashMap<String, u64>,
    /// The host's clock, monotonic across restarts; `now` inputs come from it.
    host_now: u64,
    /// What the time properties remember, read from inputs and outputs only.
    timing: Timing,
    log: Vec<String>,
    /// What the seed exercised, summed over seeds and printed (coverage at a glance).
    stats: Stats,
    /// Keep a log to print on failure (a failing seed is replayed with it).
    verbose: bool,
}

const CALL_IDS: [&str; 6] = ["c0", "c1", "c2", "c3", "c4", "c5"];

impl Sim {
    fn new(seed: u64, verbose: bool) -> Self {
        let mut rng = Rng(seed);
        let w = Weights::random(&mut rng);
        let cfg = Gen::random(&mut rng);
        let policy = cfg.policy();
        let log = vec![format!("weights {w:?}"), cfg.text()];
        Self {
            rng,
            w,
            engine: Scheduler::new(policy.clone()),
            policy,
            model: Model::new(cfg),
            out: Outputs::default(),
            started: HashSet::new(),
            last_start: HashMap::new(),
            host_now: 0,
            timing: Timing::default(),
            log,
            stats: Stats::new(),
            verbose,
        }
    }

    fn count(&mut self, what: &'static str, detail: &'static str) {
        *self.stats.entry((what, detail)).or_insert(0) += 1;
    }

    fn fail(&self, what: &str) -> ! {
        if self.verbose {
            panic!("{what}\n--- log ---\n{}", self.log.join("\n"))
        }
        panic!("{what}")
    }

    fn round(&mut self) {
        let roll = self.rng.below(100);
        let w = (self.w.submit, self.w.restart, self.w.query);
        let idle = self.model.live().next().is_none();
        if roll < w.0 || (idle && self.rng.chance(70)) {
            self.submit();
        } else if roll < w.0 + w.1 {
            self.restart();
        } else if roll < w.0 + w.1 + w.2 {
            self.query();
        } else {
            let ins = self.random_inputs();
            self.step(ins);
        }
    }

    fn random_calls(&mut self) -> Vec<SubCall> {
        if self.rng.chance(3) {
            return Vec::new();
        }
        let mut tools: Vec<String> = self
            .model
            .cfg
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect();
        tools.push("ghost".to_owned());
        let mut calls: Vec<SubCall> = Vec::new();
        for _ in 0..1 + self.rng.below(4) {
            let free: Vec<&str> = CALL_IDS
                .iter()
                .copied()
                .filter(|id| !self.model.live_call(id) && !calls.iter().any(|c| c.id == *id))
                .collect();
            let id = match self.rng.below(100) {
                0 => ["", "a#1", "x\ny"][self.rng.below(3)].to_owned(),
                1..=8 => CALL_IDS[self.rng.below(CALL_IDS.len())].to_owned(),
                _ => match self.rng.pick(&free) {
                    Some(id) => id.to_owned(),
                    None => CALL_IDS[self.rng.below(CALL_IDS.len())].to_owned(),
                },
            };
            let tool = if self.rng.chance(1) {
                String::new()
            } else {
                tools[self.rng.below(tools.len())].clone()
            };
            let fans = self.model.cfg.rules(&tool).fan_out;
            let ops = match self.rng.below(100) {
                0 => Some(0),
                1 => Some(OPERATIONS_PER_CALL_MAX + 1),
                2 | 3 => Some(1 + self.rng.below(3) as u32),
                _ if fans && self.rng.chance(70) => Some(1 + self.rng.below(3) as u32),
                _ => None,
            };
            calls.push(SubCall { id, tool, ops });
        }
        calls
    }

    fn submit(&mut self) {
        let calls = self.random_calls();
        if self.verbose {
            self.log.push(format!("submit {calls:?}"));
        }
        let engine_calls: Vec<Call<'_>> = calls
            .iter()
            .map(|c| Call {
                id: &c.id,
                tool: &c.tool,
                operations: c.ops,
            })
            .collect();
        let got = self
            .engine
            .submit(&engine_calls)
            .map(|s| (s.batch.0, s.first.0, s.count));
        let want = self.model.submit(&calls);
        match (&got, &want) {
            (Ok(g), Ok(w)) if g == w => {}
            (Err(e), Err(code)) if e.code == *code && !e.message.is_empty() => {}
            _ => self.fail(&format!("submit: model {want:?}, engine {got:?}")),
        }
        if self.verbose {
            self.log.push(format!("  -> {want:?}"));
        }
        match want {
            Ok(_) => self.count("submit", "ok"),
            Err(code) => self.count("submit", code.as_str()),
        }
    }

    /// A number no live entry has: retired, never handed out, or absurd.
    fn unknown_entry(&mut self) -> u64 {
        let next = self.model.next_entry();
        let retired: Vec<u64> = (1..next).filter(|&n| !self.model.is_live(n)).collect();
        match self.rng.below(5) {
            0 | 1 if !retired.is_empty() => retired[self.rng.below(retired.len())],
            2 => u64::MAX,
            3 => 0,
            _ => next + self.rng.below(3) as u64,
        }
    }

    /// A host mistake: an unknown number, or a live entry in any state.
    fn mistaken_entry(&mut self) -> u64 {
        let live: Vec<u64> = self.model.live_entries().collect();
        match self.rng.pick(&live) {
            Some(n) if self.rng.chance(60) => n,
            _ => self.unknown_entry(),
        }
    }

    fn random_inputs(&mut self) -> Ins {
        let live: Vec<u64> = self.model.live_entries().collect();
        let with = |m: &Model, f: fn(St) -> bool| -> Vec<u64> {
            live.iter().copied().filter(|&n| f(m.st(n))).collect()
        };
        let pending = with(&self.model, |s| s == St::Pending);
        let running = with(&self.model, St::holds_slot);
        let asking = with(&self.model, |s| s == St::Asking);
        let mut ins = Ins::default();
        // Approvals: a whole batch's pending entries, or a few.
        if let Some(n) = self.rng.pick(&pending) {
            if self.rng.chance(self.w.whole_batch) {
                let b = self.model.entries[ix(n)].batch;
                ins.approve.extend(
                    pending
                        .iter()
                        .filter(|&&m| self.model.entries[ix(m)].batch == b),
                );
            } else {
                for _ in 0..1 + self.rng.below(3) {
                    ins.approve.extend(self.rng.pick(&pending));
                }
            }
        }
        if self.rng.chance(self.w.settle) {
            for _ in 0..1 + self.rng.below(2) {
                let how = [
                    HostSettle::Rejected,
                    HostSettle::Skipped,
                    HostSettle::Failed,
                ][self.rng.below(3)];
                if let Some(n) = self.rng.pick(&pending) {
                    ins.settle.push((n, how));
                }
            }
        }
        if self.rng.chance(self.w.ask) {
            ins.ask.extend(self.rng.pick(&running));
        }
        if self.rng.chance(50) {
            ins.answer.extend(self.rng.pick(&asking));
        }
        for _ in 0..self.rng.below(4) {
            if let Some(n) = self.rng.pick(&running) {
                if self.rng.chance(self.w.fail) {
                    ins.failed.push(n);
                } else {
                    ins.ok.push(n);
                }
            }
        }
        if self.rng.chance(self.w.cancel) {
            let live_batches: Vec<u64> = self.model.live().map(|b| b as u64 + 1).collect();
            ins.cancel.extend(self.rng.pick(&live_batches));
        }
        self.add_time(&mut ins, &running);
        self.add_mistakes(&mut ins, &running);
        ins
    }

    /// `now` (mostly forward, sometimes to the last `wake_at`, sometimes back), rate limits of
    /// running entries, and pauses of keys (some unknown).
    fn add_time(&mut self, ins: &mut Ins, running: &[u64]) {
        if self.rng.chance(self.w.clock) {
            let clock = self.model.time.now;
            ins.now = Some(if clock > 0 && self.rng.chance(self.w.backwards) {
                clock - 1 - self.rng.below(clock.min(30) as usize) as u64
            } else {
                match self.out.wake_at {
                    Some(t) if self.rng.chance(self.w.jump) => {
                        self.host_now = self.host_now.max(t + self.rng.below(3) as u64);
                    }
                    _ => self.host_now += [0, 1, 5, 20, 60][self.rng.below(5)],
                }
                self.host_now
            });
        }
        let base = ins.now.unwrap_or(self.host_now).max(self.model.time.now);
        if self.rng.chance(self.w.retry) {
            for _ in 0..1 + self.rng.below(2) {
                if let Some(n) = self.rng.pick(running) {
                    let until = match self.rng.below(6) {
                        0 => base.saturating_sub(self.rng.below(10) as u64),
                        1 => base,
                        _ => base + 1 + self.rng.below(80) as u64,
                    };
                    ins.retry.push((n, until));
                }
            }
        }
        if self.rng.chance(self.w.pause) {
            let tools = self.model.cfg.tools.len();
            let known: Vec<String> = KEY_POOL
                .iter()
                .map(|k| (*k).to_owned())
                .chain((0..tools).map(|t| format!("t{t}")))
                .filter(|k| self.model.cfg.knows_key(k))
                .collect();
            let key = match self.rng.below(6) {
                0 => "zz".to_owned(),
                1 => format!("t{}", self.rng.below(tools)),
                2 => KEY_POOL[self.rng.below(3)].to_owned(),
                _ => match self.rng.below(known.len().max(1)) {
                    i if i < known.len() => known[i].clone(),
                    _ => "zz".to_owned(),
                },
            };
            let until = match self.rng.below(4) {
                0 => base.saturating_sub(self.rng.below(10) as u64),
                _ => base + self.rng.below(100) as u64,
            };
            ins.pause.push((key, until));
        }
    }

    /// Host mistakes mixed in: unknown and stale numbers, double decisions, ends of entries not
    /// running, ask and answer misuse, cancelling twice.
    fn add_mistakes(&mut self, ins: &mut Ins, running: &[u64]) {
        while self.rng.chance(self.w.mistake) {
            let n = self.mistaken_entry();
            match self.rng.below(10) {
                8 => ins
                    .retry
                    .push((n, self.host_now + self.rng.below(50) as u64)),
                9 => {
                    // A rate limit twice in one step: the second finds it not running.
                    if let Some(m) = self.rng.pick(running) {
                        ins.retry.push((m, self.host_now + 10));
                        ins.retry.push((m, self.host_now + 20));
                    }
                }
                0 => ins.approve.push(n),
                1 => ins.settle.push((n, HostSettle::Skipped)),
                2 => ins.ask.push(n),
                3 => ins.answer.push(n),
                4 => ins.ok.push(n),
                5 => ins.failed.push(n),
                6 => {
                    // The same input twice, or an end in both lists.
                    if let Some(&m) = ins.approve.first() {
                        ins.settle.push((m, HostSettle::Rejected));
                    }
                    if let Some(m) = self.rng.pick(running) {
                        ins.ok.push(m);
                        ins.failed.push(m);
                    }
                }
                _ => {
                    let next = self.model.next_batch();
                    let b = match self.rng.below(4) {
                        0 => 0,
                        1 => next + self.rng.below(2) as u64,
                        _ => 1 + self.rng.below(next as usize) as u64,
                    };
                    ins.cancel.push(b);
                    if self.rng.chance(30) {
                        ins.cancel.push(b);
                    }
                }
            }
        }
        self.rng.shuffle(&mut ins.approve);
        self.rng.shuffle(&mut ins.ok);
        self.rng.shuffle(&mut ins.cancel);
        self.rng.shuffle(&mut ins.retry);
    }

    fn step(&mut self, ins: Ins) {
        if self.verbose {
            self.log.push(format!("step {ins:?}"));
        }
        let ids = |v: &[u64]| -> Vec<EntryId> { v.iter().map(|&n| EntryId(n)).collect() };
        let (approve, ask, answer, ok, failed) = (
            ids(&ins.approve),
            ids(&ins.ask),
            ids(&ins.answer),
            ids(&ins.ok),
            ids(&ins.failed),
        );
        let settle: Vec<(EntryId, HostSettle)> =
            ins.settle.iter().map(|&(n, h)| (EntryId(n), h)).collect();
        let cancel: Vec<BatchId> = ins.cancel.iter().map(|&b| BatchId(b)).collect();
        let retry: Vec<(EntryId, u64)> = ins.retry.iter().map(|&(n, t)| (EntryId(n), t)).collect();
        let pause: Vec<(&str, u64)> = ins.pause.iter().map(|(k, t)| (k.as_str(), *t)).collect();
        let inputs = Inputs {
            now: ins.now,
            approve: &approve,
            settle: &settle,
            ask: &ask,
            answer: &answer,
            ok: &ok,
            failed: &failed,
            retry: &retry,
            cancel: &cancel,
            pause: &pause,
        };
        self.engine.step(&inputs, &mut self.out);
        let mut got = Out::of(&self.out);
        let want = self.model.step(&ins);
        // Deviation: the engine's `wake_at` may be earlier than anything waits (a wake-up whose
        // waiter was cancelled or stopped stays until it passes). Never later: that would be a
        // missed wake-up.
        let early = match (got.wake_at, want.wake_at) {
            (Some(g), Some(w)) => g < w,
            (Some(_), None) => true,
            _ => false,
        };
        if early && !strict() {
            self.count("wake_at", "earlier than anything waits (stale)");
            got.wake_at = want.wake_at;
        }
        if got != want {
            self.fail(&format!(
                "step outputs differ\n model: {}\nengine: {}",
                self.render(&want),
                self.render(&got)
            ));
        }
        if self.verbose {
            let line = format!("  -> {}", self.render(&want));
            self.log.push(line);
        }
        for e in &self.out.errors {
            if e.message.is_empty() || e.message.ends_with('.') {
                self.fail(&format!("badly worded error: {e}"));
            }
        }
        let start = self.check_time(&ins, &want);
        self.check_starts(&start);
        self.check_states(&want.retired);
        let inputs = ins.approve.len()
            + usize::from(ins.now.is_some())
            + ins.retry.len()
            + ins.pause.len()
            + ins.settle.len()
            + ins.ask.len()
            + ins.answer.len()
            + ins.ok.len()
            + ins.failed.len()
            + ins.cancel.len();
        if inputs > want.errors.len() && !want.errors.is_empty() {
            self.count("step", "with refused and applied inputs");
        } else if inputs > 0 && inputs == want.errors.len() {
            self.count("step", "with every input refused");
        }
        for (kind, _, code) in &want.errors {
            self.count(kind_name(*kind), code.as_str());
        }
        for (_, reason) in &want.settle {
            self.count("settled", reason.name());
        }
        self.count(
            "step starts",
            ["none", "one", "two", "more"][want.start.len().min(3)],
        );
        if want.wake_at.is_some() {
            self.count("step", "with a wake_at");
        }
        for _ in &want.retired {
            self.count("batch", "retired");
        }
    }

    fn render(&self, out: &Out) -> String {
        let name = |n: u64| {
            if (1..self.model.next_entry()).contains(&n) {
                format!("{n}:{}", self.model.label(n))
            } else {
                n.to_string()
            }
        };
        let start: Vec<String> = out.start.iter().map(|&n| name(n)).collect();
        let settle: Vec<String> = out
            .settle
            .iter()
            .map(|&(n, r)| format!("{} {r:?}", name(n)))
            .collect();
        format!(
            "start {start:?} settle {settle:?} errors {:?} retired {:?} wake_at {:?} (now {})",
            out.errors, out.retired, out.wake_at, self.model.time.now
        )
    }

    /// Nothing starts twice unless it was retried in between; per key, starts follow
    /// (batch, written) order, a retried entry starting again before every entry behind it
    /// and after every retried entry before it.
    fn check_starts(&mut self, start: &[u64]) {
        for &n in start {
            if !self.started.insert(n) {
                self.fail(&format!("{} started twice", self.model.label(n)));
            }
            if let Some((k, _)) = self.model.key(n) {
                let k = k.to_owned();
                let waiting = self.timing.waiting.entry(k.clone()).or_default();
                if waiting.contains(&n) {
                    if waiting.first() != Some(&n) {
                        let first = waiting.first().copied();
                        self.fail(&format!(
                            "key {k}: retried {n} started again before retried {first:?}"
                        ));
                    }
                    waiting.remove(&n);
                    continue;
                }
                if let Some(&r) = waiting.first()
                    && r < n
                {
                    self.fail(&format!("key {k}: {n} started before retried {r}"));
                }
                if let Some(&last) = self.last_start.get(&k)
                    && last > n
                {
                    self.fail(&format!("key {k}: {n} started after {last}"));
                }
                self.last_start.insert(k, n);
            }
        }
    }

    /// The time properties, from this step's inputs and outputs: no two starts on a key closer
    /// than its delay, nothing on a paused key before its pause ends, an unkeyed retried entry
    /// not before its time, the retry cap honoured; and `wake_at` is later than the clock.
    /// Returns the starts that follow the step's retries: an unkeyed entry may start (when its
    /// batch opens, or its wait ends) and then hit a rate limit in the same step (a host
    /// mistake, accepted: inputs apply in order); that first start is left out.
    fn check_time(&mut self, ins: &Ins, out: &Out) -> Vec<u64> {
        let mut start = out.start.clone();
        let refused = |kind: InputKind, i: usize| {
            out.errors
                .iter()
                .any(|&(k, j, _)| k == kind && j as usize == i)
        };
        if let Some(now) = ins.now {
            if refused(InputKind::Now, 0) != (now < self.timing.clock) {
                self.fail(&format!(
                    "now = {now} after {}: refused {}",
                    self.timing.clock,
                    refused(InputKind::Now, 0)
                ));
            }
            self.timing.clock = self.timing.clock.max(now);
        }
        let clock = self.timing.clock;
        let settled: HashMap<u64, Reason> = out.settle.iter().copied().collect();
        // An entry may hit a rate limit more than once in a step (it ran again at once); only
        // its last accepted retry can be the one that gave up.
        let mut last: HashMap<u64, usize> = HashMap::new();
        for (i, &(n, _)) in ins.retry.iter().enumerate() {
            if !refused(InputKind::Retry, i) {
                last.insert(n, i);
            }
        }
        for (i, &(n, until)) in ins.retry.iter().enumerate() {
            if refused(InputKind::Retry, i) {
                continue;
            }
            // A retry gives up (settled at once), or the entry runs again and may still be
            // settled later in the step: stopped by a sibling's failure, or cancelled by a
            // cancel of its batch in this step (cancels apply after retries).
            let batch = self.model.batches[self.model.entries[ix(n)].batch].id;
            let cancelled_now = ins
                .cancel
                .iter()
                .enumerate()
                .any(|(j, &b)| b == batch && !refused(InputKind::Cancel, j));
            let settled = |n: &u64| {
                settled.get(n).filter(|_| last[n] == i).filter(|r| match r {
                    Reason::RateLimited { .. } | Reason::Stopped { .. } => true,
                    Reason::Cancelled => !cancelled_now,
                    _ => false,
                })
            };
            let rule = self.model.rule(n).cloned();
            if let Some(k) = &rule {
                let p = self.timing.paused.entry(k.name.clone()).or_insert(0);
                *p = (*p).max(until);
            }
            let done = self.timing.retries.get(&n).copied().unwrap_or(0);
            let cap = rule.as_ref().map_or(RETRIES_DEFAULT, |k| k.retries);
            match settled(&n) {
                Some(Reason::RateLimited { retries }) => {
                    if *retries != done || done != cap {
                        self.fail(&format!(
                            "{n} gave up after {retries} retries, ran again {done}, cap {cap}"
                        ));
                    }
                    self.count("retry", "past the cap");
                }
                Some(Reason::Cancelled) => self.count("retry", "in a cancelled batch"),
                Some(Reason::Stopped { .. }) => self.count("retry", "behind a failure under stop"),
                Some(other) => self.fail(&format!("retried {n} settled {other:?}")),
                None => {
                    if done + 1 > cap {
                        self.fail(&format!("{n} ran again {} times, cap {cap}", done + 1));
                    }
                    if !self.started.contains(&n) {
                        // Started earlier in this step (only unkeyed entries can be).
                        let Some(at) = start.iter().position(|&m| m == n) else {
                            self.fail(&format!("{n} was retried but never started"));
                        };
                        if rule.is_some() {
                            self.fail(&format!("keyed {n} started before this step's retries"));
                        }
                        start.remove(at);
                        if let Some(until) = self.timing.alone.remove(&n)
                            && clock < until
                        {
                            self.fail(&format!("unkeyed {n} ran again at {clock}, before {until}"));
                        }
                        self.count("retry", "of an entry started in the same step");
                    }
                    self.timing.retries.insert(n, done + 1);
                    self.started.remove(&n);
                    match &rule {
                        Some(k) => {
                            self.timing
                                .waiting
                                .entry(k.name.clone())
                                .or_default()
                                .insert(n);
                        }
                        None => {
                            self.timing.alone.insert(n, until);
                        }
                    }
                    self.count("retry", "runs again");
                }
            }
        }
        for (i, (key, until)) in ins.pause.iter().enumerate() {
            if refused(InputKind::Pause, i) {
                self.count("pause", "refused");
            } else {
                let p = self.timing.paused.entry(key.clone()).or_insert(0);
                *p = (*p).max(*until);
                self.count("pause", "applied");
            }
        }
        for &n in &start {
            match self.model.rule(n).cloned() {
                Some(k) => {
                    let paused = self.timing.paused.get(&k.name).copied().unwrap_or(0);
                    if clock < paused {
                        self.fail(&format!(
                            "key {}: {n} started at {clock}, paused until {paused}",
                            k.name
                        ));
                    }
                    if let Some(&last) = self.timing.started_at.get(&k.name) {
                        if clock < last + u64::from(k.delay) {
                            self.fail(&format!(
                                "key {}: {n} started at {clock}, {} after a start at {last}",
                                k.name,
                                clock - last.min(clock)
                            ));
                        }
                        if k.delay > 0 && clock > last && clock == last + u64::from(k.delay) {
                            self.count("start", "exactly one delay after the last");
                        }
                    }
                    self.timing.started_at.insert(k.name.clone(), clock);
                }
                None => {
                    if let Some(until) = self.timing.alone.remove(&n) {
                        if clock < until {
                            self.fail(&format!("unkeyed {n} ran again at {clock}, before {until}"));
                        }
                        self.count("start", "unkeyed, again");
                    }
                }
            }
        }
        for n in settled.keys() {
            self.timing.alone.remove(n);
            for waiting in self.timing.waiting.values_mut() {
                waiting.remove(n);
            }
        }
        if let Some(t) = out.wake_at
            && t <= clock
        {
            self.fail(&format!("wake_at {t} is not later than the clock {clock}"));
        }
        start
    }

    /// Every live entry's state agrees; per key, running <= limit; retired numbers are unknown.
    fn check_states(&self, retired: &[u64]) {
        let mut running: HashMap<&str, (u32, u32)> = HashMap::new();
        let mut live = 0;
        for n in self.model.live_entries() {
            live += 1;
            let want = self.model.st(n).engine();
            let got = self.engine.state(EntryId(n));
            if got != Some(want) {
                self.fail(&format!(
                    "state of {n}:{} is {got:?}, the model says {want:?}",
                    self.model.label(n)
                ));
            }
            if let (Some((k, limit)), true) = (self.model.key(n), want.is_started_unended()) {
                let count = running.entry(k).or_insert((0, limit));
                count.0 += 1;
                if count.0 > count.1 {
                    self.fail(&format!("key {k} runs more than its limit {limit}"));
                }
            }
        }
        if self.engine.live_entries() != live {
            self.fail(&format!(
                "the engine holds {} live entries, the model {live}",
                self.engine.live_entries()
            ));
        }
        for &b in retired {
            let batch = &self.model.batches[b as usize - 1];
            for n in batch.first..batch.end {
                if self.engine.state(EntryId(n)).is_some()
                    || self.engine.label(EntryId(n)).is_some()
                {
                    self.fail(&format!("entry {n} of retired batch {b} is still known"));
                }
            }
            if self.engine.inspect(BatchId(b)).is_some() {
                self.fail(&format!("retired batch {b} is still inspectable"));
            }
        }
    }

    /// Queries change nothing and agree with the model.
    fn query(&mut self) {
        let next = self.model.next_batch();
        let b = match self.rng.below(5) {
            0 => next + self.rng.below(2) as u64,
            _ => 1 + self.rng.below(next as usize) as u64,
        };
        if self.verbose {
            self.log.push(format!("inspect {b}"));
        }
        let got = self.engine.inspect(BatchId(b));
        let want = self.model.inspect(b);
        if got != want {
            self.fail(&format!("inspect {b}\n model: {want:#?}\nengine: {got:#?}"));
        }
        for _ in 0..3 {
            let n = self.mistaken_entry();
            let want = self.model.is_live(n).then(|| self.model.label(n));
            let got = self.engine.label(EntryId(n));
            if got != want {
                self.fail(&format!("label of {n}: model {want:?}, engine {got:?}"));
            }
        }
        self.check_states(&[]);
    }

    /// `unfinished` then `resume` into a fresh scheduler, maybe under a changed config, maybe
    /// interrupting what had started. The model predicts the result itself.
    fn restart(&mut self) {
        let saved = self.engine.unfinished();
        let want = SavedState {
            version: SAVED_VERSION,
            policy: fingerprint(&self.policy),
            next_batch: self.model.next_batch(),
            next_entry: self.model.next_entry(),
            batches: self.model.export(),
        };
        if saved != want {
            self.fail(&format!(
                "unfinished differs\n model: {want:#?}\nengine: {saved:#?}"
            ));
        }
        if self.rng.chance(10) {
            let mut bad = saved.clone();
            bad.version = SAVED_VERSION + 1;
            match Scheduler::resume(self.policy.clone(), &bad, Started::RunAgain) {
                Err(e) if e.code == ResumeErrorCode::UnsupportedVersion => {}
                other => self.fail(&format!(
                    "resume of version {}: {:?}",
                    bad.version,
                    other.err()
                )),
            }
        }
        let cfg = if self.rng.chance(self.w.change) {
            self.count("restart", "under a changed config");
            self.model.cfg.changed(&mut self.rng)
        } else if self.rng.chance(30) {
            self.model.cfg.rewritten(&mut self.rng)
        } else {
            self.model.cfg.clone()
        };
        let started = if self.rng.chance(self.w.interrupt) {
            Started::Interrupt
        } else {
            Started::RunAgain
        };
        if self.verbose {
            self.log
                .push(format!("restart {started:?} under\n{}", cfg.text()));
        }
        let policy = cfg.policy();
        let (engine, unrestored) = Scheduler::resume(policy.clone(), &saved, started)
            .unwrap_or_else(|e| self.fail(&format!("resume refused: {e}")));
        let (want_unrestored, again) = self.model.resume(cfg, started);
        let got_unrestored: Vec<(u64, String, UnrestoredCode)> = unrestored
            .iter()
            .map(|u| (u.batch, u.call.clone(), u.code))
            .collect();
        if got_unrestored != want_unrestored {
            self.fail(&format!(
                "unrestored: model {want_unrestored:?}, engine {got_unrestored:?}"
            ));
        }
        if self.verbose {
            self.log
                .push(format!("  -> unrestored {want_unrestored:?}"));
        }
        self.count(
            "restart",
            if started == Started::Interrupt {
                "interrupt"
            } else {
                "run again"
            },
        );
        for (_, _, code) in &want_unrestored {
            self.count("unrestored", code.as_str());
        }
        self.engine = engine;
        self.policy = policy;
        for n in again {
            self.started.remove(&n);
        }
        self.last_start.clear();
        self.timing = Timing::default();
        self.out.wake_at = None;
        self.check_states(&[]);
    }

    /// Liveness: approve everything pending and end everything running until every batch
    /// retired; a step that changes nothing before then is a stall.
    fn drain(&mut self) {
        while self.model.live().next().is_some() {
            let live: Vec<u64> = self.model.live_entries().collect();
            let ins = Ins {
                approve: live
                    .iter()
                    .copied()
                    .filter(|&n| self.model.st(n) == St::Pending)
                    .collect(),
                ok: live
                    .iter()
                    .copied()
                    .filter(|&n| self.model.st(n).holds_slot())
                    .collect(),
                ..Ins::default()
            };
            let mut ins = ins;
            let idle = ins.is_empty();
            if idle {
                // Nothing to do but wait: wake up when the scheduler said (the model says when
                // something waits; the engine may say earlier, see `step`).
                if let Some(t) = self.model.wake_at().or(self.out.wake_at) {
                    self.host_now = self.host_now.max(t);
                    ins.now = Some(self.host_now);
                }
            }
            self.step(ins);
            if idle && self.out.is_empty() && self.out.wake_at.is_none() {
                self.fail("stalled: live batches, nothing to do");
            }
        }
        if self.engine.live_entries() != 0 || !self.engine.unfinished().batches.is_empty() {
            self.fail("the engine holds live work after the drain");
        }
    }
}

fn kind_name(kind: InputKind) -> &'static str {
    match kind {
        InputKind::Approve => "refused approve",
        InputKind::Settle => "refused settle",
        InputKind::Ask => "refused ask",
        InputKind::Answer => "refused answer",
        InputKind::Ok => "refused ok",
        InputKind::Failed => "refused failed",
        InputKind::Cancel => "refused cancel",
        InputKind::Now => "refused now",
        InputKind::Retry => "refused retry",
        InputKind::Pause => "refused pause",
    }
}

/// Counts of what the seeds exercised, by kind and detail.
type Stats = BTreeMap<(&'static str, &'static str), u64>;

/// Runs `f(seed, verbose)` for every seed. A failing seed is run again verbose (with its log)
/// and reported with its number; quiet runs keep 2000 seeds fast.
fn run_seeds(what: &str, f: impl Fn(u64, bool) -> Stats + std::panic::RefUnwindSafe) {
    let seeds = seeds();
    let replay = seeds.len() == 1;
    let mut stats = Stats::new();
    for &seed in &seeds {
        let result = std::panic::catch_unwind(|| f(seed, replay))
            .or_else(|_| std::panic::catch_unwind(|| f(seed, true)));
        match result {
            Ok(seen) => {
                for (k, v) in seen {
                    *stats.entry(k).or_insert(0) += v;
                }
            }
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                panic!("{what}: seed {seed} failed (replay: TURNSTILE_SEED={seed}): {msg}");
            }
        }
    }
    eprintln!("{what}: {} seeds", seeds.len());
    for ((kind, detail), n) in stats {
        eprintln!("  {n:>8}  {kind} {detail}");
    }
}

#[test]
fn engine_agrees_with_the_reference_model() {
    run_seeds("model", |seed, verbose| {
        let mut sim = Sim::new(seed, verbose);
        let rounds = 30 + sim.rng.below(150);
        for _ in 0..rounds {
            sim.round();
        }
        sim.drain();
        sim.stats
    });
}

// ------------------------------------------------------------------------------------------
// Restart at every step (JP ticket 0ya5qnf).
// ------------------------------------------------------------------------------------------

fn reason_line(r: Reason) -> String {
    match r {
        Reason::Stopped { after } => format!("stopped {after}"),
        other => other.name().to_owned(),
    }
}

/// Runs random batches to the end, ending the first running entry (in written order) each
/// step, with a fixed outcome per entry. With `restart`, after every end the scheduler is
/// replaced by one resumed from `unfinished()` (what was running runs again) and everything
/// pending is approved again in reverse order. Returns the ends and the settlements, in order.
fn run_to_end(seed: u64, restart: bool) -> Vec<String> {
    let mut rng = Rng(seed);
    let mut text = String::new();
    for t in 0..4 {
        text.push_str(&format!("[conversation.tools.t{t}]\n"));
        let keyed = match rng.below(4) {
            0 => false,
            1 => {
                text.push_str("concurrency = 1\n");
                true
            }
            k => {
                text.push_str(&format!("concurrency = {{ key = \"k{}\" }}\n", k - 2));
                true
            }
        };
        match rng.below(3) {
            0 => {}
            1 => text.push_str("fan_out = true\n"),
            _ if keyed => text.push_str("fan_out = { on_error = \"stop\" }\n"),
            _ => text.push_str("fan_out = true\n"),
        }
    }
    let policy = config::resolve(&[Layer::new("restart", text)])
        .unwrap_or_else(|_| panic!("seed {seed}: config"));
    let mut s = Scheduler::new(policy.clone());
    let mut labels = Vec::new();
    let mut id = 0;
    for _ in 0..1 + rng.below(3) {
        let mut calls = Vec::new();
        for _ in 0..1 + rng.below(5) {
            let tool = format!("t{}", rng.below(4));
            let fan_out = policy.tool(&tool).is_some_and(|t| t.fan_out);
            let ops = (fan_out && rng.below(2) == 0).then(|| 1 + rng.below(3) as u32);
            calls.push((format!("c{id}"), tool, ops));
            id += 1;
        }
        let calls: Vec<Call<'_>> = calls
            .iter()
            .map(|(id, tool, ops)| Call {
                id,
                tool,
                operations: *ops,
            })
            .collect();
        let batch = s.submit(&calls).unwrap_or_else(|e| panic!("{e}"));
        let mut n = batch.first.0;
        for c in &calls {
            match c.operations {
                None => labels.push((n, c.id.to_owned())),
                Some(ops) => {
                    labels.extend((0..ops).map(|op| (n + u64::from(op), format!("{}#{op}", c.id))))
                }
            }
            n += u64::from(c.operations.unwrap_or(1));
        }
    }
    let labels: HashMap<u64, String> = labels.into_iter().collect();
    let label = |e: EntryId| labels[&e.0].clone();
    let mut out = Outputs::default();
    let approve_all = |s: &mut Scheduler, out: &mut Outputs| {
        let next = s.unfinished().next_entry;
        let pending: Vec<EntryId> = (0..next)
            .rev()
            .map(EntryId)
            .filter(|&e| s.state(e) == Some(State::Pending))
            .collect();
        s.step(
            &Inputs {
                approve: &pending,
                ..Inputs::default()
            },
            out,
        );
        assert!(out.errors.is_empty(), "{:?}", out.errors);
    };
    let outcome = |label: &str| {
        let h = label
            .bytes()
            .fold(seed, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        if h % 3 == 0 {
            Outcome::Failed
        } else {
            Outcome::Ok
        }
    };
    approve_all(&mut s, &mut out);
    let mut log = Vec::new();
    let mut running: Vec<EntryId> = Vec::new();
    for _ in 0..1000 {
        for &(e, reason) in &out.settle {
            log.push(format!("settle {} {}", label(e), reason_line(reason)));
        }
        running.extend(&out.start);
        running.sort_unstable();
        running.dedup();
        if running.is_empty() {
            assert!(s.unfinished().batches.is_empty(), "seed {seed}: stalled");
            return log;
        }
        let e = running.remove(0);
        let o = outcome(&label(e));
        let one = [e];
        let inputs = match o {
            Outcome::Ok => Inputs {
                ok: &one,
                ..Inputs::default()
            },
            Outcome::Failed => Inputs {
                failed: &one,
                ..Inputs::default()
            },
        };
        s.step(&inputs, &mut out);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        log.push(format!("end {} {o:?}", label(e)));
        if restart {
            for &(e, reason) in &out.settle {
                log.push(format!("settle {} {}", label(e), reason_line(reason)));
            }
            let saved = s.unfinished();
            let (fresh, unrestored) = Scheduler::resume(policy.clone(), &saved, Started::RunAgain)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(unrestored.is_empty(), "{unrestored:?}");
            s = fresh;
            // The host cancelled what was running; it runs again when released again.
            running.clear();
            approve_all(&mut s, &mut out);
        }
    }
    panic!("seed {seed}: did not finish");
}

/// A restart at every step gives the same executions, in the same order, as no restart: an
/// ended execution never runs again, and the rest release in written order (the restart-
/// reorder bug of JP ticket 0ya5qnf cannot happen).
#[test]
fn restart_at_every_step_keeps_the_order() {
    run_seeds("restart", |seed, _| {
        let plain = run_to_end(seed, false);
        let restarted = run_to_end(seed, true);
        let ends: Vec<&String> = plain.iter().filter(|l| l.starts_with("end ")).collect();
        let unique: HashSet<&String> = ends.iter().copied().collect();
        assert_eq!(ends.len(), unique.len(), "an execution ended twice");
        assert_eq!(plain, restarted);
        Stats::new()
    });
}
