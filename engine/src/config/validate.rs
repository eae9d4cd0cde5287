//! Merges the parsed layers per tool and checks the merged config once, collecting every
//! problem: V4 a table needs a `key`, V5 one limit per key over every configured tool (and,
//! in `overlap.rs`, per name a template can make), V6 `on_error = "stop"` needs a limit of at
//! least 1.

use crate::fx::FxHashMap;
use std::num::NonZeroU32;

use super::policy::{Concurrency, ConcurrencyKey, OnError, Policy, RateWindow, ToolPolicy};
use super::raw::{RawConcurrency, RawFanOut, RawLayer};
use super::{Loc, Sink};
use crate::diagnostic::Code;
use crate::limits::{
    KEY_BYTES_MAX, RETRIES_DEFAULT, SHARED_DELAY_MS_MAX, SHARED_RATE_COUNT_MAX, TOOLS_MAX,
};
use crate::retry_after::MAX_WAIT_DEFAULT_MS;

/// One tool after every layer is applied.
#[derive(Debug)]
struct Merged {
    name: String,
    concurrency: Option<RawConcurrency>,
    fan_out_present: bool,
    fan_out_enabled: Option<bool>,
    on_error: OnError,
    on_error_loc: Option<Loc>,
    bad_concurrency: bool,
    bad_fan_out: bool,
}

/// What a tool declares: the key it names and the limit, spacing, retry cap, maximum wait and
/// scope it gives it.
#[derive(Debug, Clone)]
pub(super) struct Declared {
    pub(super) key: String,
    pub(super) limit: u32,
    pub(super) loc: Loc,
    pub(super) integer_form: bool,
    /// Milliseconds between starts, and where it was written.
    pub(super) delay: (u32, Option<Loc>),
    /// Rate windows in ascending order (empty: none), and where they were written.
    pub(super) rate: (Vec<RateWindow>, Option<Loc>),
    /// Starts the rate windows let through at once (1 when unset), and where it was written.
    pub(super) burst: (u32, Option<Loc>),
    /// Units of the rate one call of this tool costs (1 when unset; the tool's own, not
    /// agreed across tools), and where it was written.
    pub(super) weight: (u32, Option<Loc>),
    /// Rate-limit retries per entry, and where it was written.
    pub(super) retries: (u32, Option<Loc>),
    /// The longest rate-limit wait in milliseconds, and where it was written.
    pub(super) max_wait: (u32, Option<Loc>),
    /// Whether the limit holds across processes (1) or not (0), and where it was written.
    pub(super) shared: (u32, Option<Loc>),
    /// The floor of an adaptive limit (0: the limit does not adapt), and where the limit was
    /// written.
    pub(super) adapt: (u32, Option<Loc>),
    /// The path a call takes in the key's tree, as written (a path key; the tool's own, like
    /// its weight: only being a path key is agreed across tools).
    pub(super) path: Option<(String, Loc)>,
}

pub(crate) fn merge_and_validate(layers: Vec<RawLayer>, complete: bool, sink: &mut Sink) -> Policy {
    let tools = merge(layers);
    if tools.len() > TOOLS_MAX {
        sink.push(
            Code::TooManyTools,
            &["conversation".to_owned(), "tools".to_owned()],
            format!(
                "{} tools configured; at most {TOOLS_MAX} are accepted",
                tools.len()
            ),
        );
        return Policy::default();
    }
    // A layer that is not TOML might have lifted a limit or fixed a key: checks across tools
    // would only report noise, so they wait until every layer parses.
    let check = complete;
    let mut declared_by_key: Vec<(String, Vec<(String, Declared)>)> = Vec::new();
    let mut key_index: FxHashMap<String, usize> = FxHashMap::default();
    let mut policies = Vec::with_capacity(tools.len());
    for tool in &tools {
        let declared = declared(tool, if check { Some(&mut *sink) } else { None });
        if check && !tool.bad_concurrency {
            let keyless = match &tool.concurrency {
                Some(RawConcurrency::Table { key: None, .. }) => true,
                Some(RawConcurrency::Set { members, .. }) => members
                    .iter()
                    .any(|m| matches!(m, RawConcurrency::Table { key: None, .. })),
                _ => false,
            };
            if tool.on_error == OnError::Stop
                && !tool.bad_fan_out
                && !keyless
                && declared.iter().all(|d| d.limit == 0)
            {
                stop_without_limit(tool, declared.first(), sink);
            }
            if declared.len() > 1 {
                key_set_terms(tool, &declared, sink);
            }
            for d in &declared {
                if d.shared.0 == 1 && d.delay.0 > SHARED_DELAY_MS_MAX {
                    shared_delay_too_long(tool, d, sink);
                }
                rate_terms(tool, d, sink);
                path_terms(tool, d, sink);
                let slot = *key_index.entry(d.key.clone()).or_insert_with(|| {
                    declared_by_key.push((d.key.clone(), Vec::new()));
                    declared_by_key.len() - 1
                });
                // A move names one path key twice: the tool is listed once.
                if let Some((_, list)) = declared_by_key.get_mut(slot)
                    && !list.iter().any(|(t, _)| *t == tool.name)
                {
                    list.push((tool.name.clone(), d.clone()));
                }
            }
        }
        // A limit of 0 lifts the key, unless it spaces starts or has its own retry cap or
        // maximum wait: then it stays, unbounded (its delay, retry cap, maximum wait and pauses
        // still apply). In a key set, a lifted member drops out and the others stay.
        let concurrency = declared.into_iter().filter_map(|d| {
            let own_terms = d.delay.0 > 0
                || !d.rate.0.is_empty()
                || d.retries.0 != RETRIES_DEFAULT
                || d.max_wait.0 != MAX_WAIT_DEFAULT_MS;
            let limit = match NonZeroU32::new(d.limit) {
                Some(limit) => limit,
                None if own_terms => NonZeroU32::MAX,
                None => return None,
            };
            Some(Concurrency {
                key: if d.integer_form {
                    ConcurrencyKey::tool_name(d.key)
                } else {
                    ConcurrencyKey::written(d.key)
                },
                limit,
                delay_ms: d.delay.0,
                burst: if d.rate.0.is_empty() { 1 } else { d.burst.0 },
                weight: if d.rate.0.is_empty() { 1 } else { d.weight.0 },
                rates: d.rate.0,
                retries: d.retries.0,
                max_wait_ms: d.max_wait.0,
                shared: d.shared.0 == 1,
                adapt_min: NonZeroU32::new(d.adapt.0),
                path: d.path.map(|(text, _)| ConcurrencyKey::written(text)),
            })
        });
        let concurrency = concurrency.collect();
        policies.push(ToolPolicy {
            name: tool.name.clone(),
            concurrency,
            fan_out: tool.fan_out_present && tool.fan_out_enabled.unwrap_or(true),
            on_error: tool.on_error,
        });
    }
    for (key, list) in &declared_by_key {
        // A path key named as an exact key elsewhere: every other term follows from that.
        let first = list.first().map(|(_, d)| d);
        if list
            .iter()
            .any(|(_, d)| first.is_some_and(|f| !Agreed::Path.same(f, d)))
        {
            disagreement(key, Agreed::Path, list, sink);
            continue;
        }
        let first = list.first().map(|(_, d)| d.limit);
        if list.iter().any(|(_, d)| Some(d.limit) != first) {
            conflict(key, list, sink);
        }
        for what in [
            Agreed::Delay,
            Agreed::Rate,
            Agreed::Burst,
            Agreed::Retries,
            Agreed::MaxWait,
            Agreed::Shared,
            Agreed::Adapt,
        ] {
            let first = list.first().map(|(_, d)| d);
            if list
                .iter()
                .any(|(_, d)| first.is_some_and(|f| !what.same(f, d)))
            {
                disagreement(key, what, list, sink);
            }
        }
    }
    super::overlap::check(&declared_by_key, sink);
    Policy::new(policies)
}

fn merge(layers: Vec<RawLayer>) -> Vec<Merged> {
    let mut tools: Vec<Merged> = Vec::new();
    let mut index: FxHashMap<String, usize> = FxHashMap::default();
    for layer in layers {
        for raw in layer.tools {
            let slot = *index.entry(raw.name.clone()).or_insert_with(|| {
                tools.push(Merged {
                    name: raw.name.clone(),
                    concurrency: None,
                    fan_out_present: false,
                    fan_out_enabled: None,
                    on_error: OnError::Continue,
                    on_error_loc: None,
                    bad_concurrency: false,
                    bad_fan_out: false,
                });
                tools.len() - 1
            });
            let Some(tool) = tools.get_mut(slot) else {
                continue;
            };
            tool.bad_concurrency |= raw.bad_concurrency;
            tool.bad_fan_out |= raw.bad_fan_out;
            if let Some(new) = raw.concurrency {
                tool.concurrency = Some(merge_concurrency(tool.concurrency.take(), new));
            }
            match raw.fan_out {
                Some(RawFanOut::Bool { on, loc }) => {
                    tool.fan_out_present = true;
                    tool.fan_out_enabled = Some(on);
                    tool.on_error = OnError::Continue;
                    tool.on_error_loc = Some(loc);
                }
                Some(RawFanOut::Table { enabled, on_error }) => {
                    tool.fan_out_present = true;
                    if let Some((on, _)) = enabled {
                        tool.fan_out_enabled = Some(on);
                    }
                    if let Some((value, loc)) = on_error {
                        tool.on_error = value;
                        tool.on_error_loc = Some(loc);
                    }
                }
                None => {}
            }
        }
    }
    tools
}

/// An integer replaces; a table over a table merges per field; a table over an integer
/// replaces it.
fn merge_concurrency(old: Option<RawConcurrency>, new: RawConcurrency) -> RawConcurrency {
    match (old, new) {
        (
            Some(RawConcurrency::Table {
                key: old_key,
                limit: old_limit,
                delay: old_delay,
                rate: old_rate,
                burst: old_burst,
                weight: old_weight,
                retries: old_retries,
                max_wait: old_max_wait,
                shared: old_shared,
                path: old_path,
                ..
            }),
            RawConcurrency::Table {
                key,
                limit,
                delay,
                rate,
                burst,
                weight,
                retries,
                max_wait,
                shared,
                path,
                loc,
            },
        ) => RawConcurrency::Table {
            key: key.or(old_key),
            limit: limit.or(old_limit),
            delay: delay.or(old_delay),
            rate: rate.or(old_rate),
            burst: burst.or(old_burst),
            weight: weight.or(old_weight),
            retries: retries.or(old_retries),
            max_wait: max_wait.or(old_max_wait),
            shared: shared.or(old_shared),
            path: path.or(old_path),
            loc,
        },
        (_, new) => new,
    }
}

/// What the merged tool declares: one key, every key of its key set in written order, or
/// none. Reports V4 (a table without `key`) when `sink` is given.
fn declared(tool: &Merged, mut sink: Option<&mut Sink>) -> Vec<Declared> {
    match tool.concurrency.as_ref() {
        None => Vec::new(),
        Some(RawConcurrency::Set { members, .. }) => members
            .iter()
            .filter_map(|m| declared_one(tool, m, sink.as_deref_mut()))
            .collect(),
        Some(one) => declared_one(tool, one, sink).into_iter().collect(),
    }
}

/// What one integer or table (a tool's concurrency, or a member of its key set) declares.
fn declared_one(tool: &Merged, raw: &RawConcurrency, sink: Option<&mut Sink>) -> Option<Declared> {
    match raw {
        // A set's members are tables (`raw.rs`).
        RawConcurrency::Set { .. } => None,
        RawConcurrency::Int { n: 0, .. } => None,
        RawConcurrency::Int { loc, .. } if tool.name.len() > KEY_BYTES_MAX => {
            // The integer form's key is the tool's name, and a key has one length limit.
            if let Some(sink) = sink {
                sink.push(
                    Code::TooLarge,
                    &tool_path(&tool.name, Some("concurrency")),
                    format!(
                        "the integer form's key is the tool's name, which is longer than the \
                         {KEY_BYTES_MAX} bytes a key may be"
                    ),
                )
                .label(*loc, "the key would be the tool's name")
                .help("write concurrency = { key = \"a-shorter-name\", limit = N }");
            }
            None
        }
        RawConcurrency::Int { n, loc } => Some(Declared {
            key: tool.name.clone(),
            limit: *n,
            loc: *loc,
            integer_form: true,
            delay: (0, None),
            rate: (Vec::new(), None),
            burst: (1, None),
            weight: (1, None),
            retries: (RETRIES_DEFAULT, None),
            max_wait: (MAX_WAIT_DEFAULT_MS, None),
            shared: (0, None),
            adapt: (0, None),
            path: None,
        }),
        RawConcurrency::Table {
            key,
            limit,
            delay,
            rate,
            burst,
            weight,
            retries,
            max_wait,
            shared,
            path,
            loc,
        } => {
            let Some((key, _)) = key else {
                if let Some(sink) = sink.filter(|_| !tool.bad_concurrency) {
                    let path = tool_path(&tool.name, Some("concurrency"));
                    let hint = limit.as_ref().map_or(1, |(n, _, _)| *n);
                    sink.push(
                        Code::ConcurrencyKeyMissing,
                        &path,
                        "the concurrency table has no `key`".to_owned(),
                    )
                    .label(*loc, "no key in this table or any lower layer")
                    .help(format!(
                        "write concurrency = {hint} for a limit on this tool alone, or add \
                         key = \"name\" to share it"
                    ));
                }
                return None;
            };
            Some(Declared {
                key: key.clone(),
                // A path key without a limit bounds nothing but overlapping paths.
                limit: limit
                    .as_ref()
                    .map_or(if path.is_some() { u32::MAX } else { 1 }, |(n, _, _)| *n),
                loc: *loc,
                integer_form: false,
                delay: delay.map_or((0, None), |(ms, l)| (ms, Some(l))),
                rate: rate.as_ref().map_or((Vec::new(), None), |(windows, l)| {
                    // A window without its own burst takes the key's.
                    let key_burst = burst.map_or(1, |(n, _)| n);
                    let mut windows: Vec<RateWindow> = windows
                        .iter()
                        .map(|w| RateWindow {
                            burst: if w.burst == 0 { key_burst } else { w.burst },
                            ..*w
                        })
                        .collect();
                    windows.sort_unstable();
                    windows.dedup();
                    (windows, Some(*l))
                }),
                burst: burst.map_or((1, None), |(n, l)| (n, Some(l))),
                weight: weight.map_or((1, None), |(n, l)| (n, Some(l))),
                retries: retries.map_or((RETRIES_DEFAULT, None), |(n, l)| (n, Some(l))),
                max_wait: max_wait.map_or((MAX_WAIT_DEFAULT_MS, None), |(ms, l)| (ms, Some(l))),
                shared: shared.map_or((0, None), |(b, l)| (u32::from(b), Some(l))),
                adapt: limit
                    .as_ref()
                    .map_or((0, None), |(_, min, l)| (min.unwrap_or(0), Some(*l))),
                path: path.clone(),
            })
        }
    }
}

fn stop_without_limit(tool: &Merged, declared: Option<&Declared>, sink: &mut Sink) {
    let path = tool_path(&tool.name, None);
    let d = sink.push(
        Code::StopWithoutLimit,
        &path,
        "fan_out.on_error = \"stop\" has nothing to stop without a concurrency limit, because \
         every operation starts at release"
            .to_owned(),
    );
    if let Some(loc) = tool.on_error_loc {
        d.label(loc, "on_error = \"stop\" set here");
    }
    match (&tool.concurrency, declared) {
        (Some(RawConcurrency::Int { loc, .. }), None) => {
            d.label(*loc, "the limit is lifted here");
        }
        (_, Some(decl)) => {
            d.label(decl.loc, "a limit of 0 is unbounded");
        }
        _ => {}
    }
    d.help("set concurrency to 1 or more, or on_error = \"continue\"");
}

/// A shared key's store keeps its spacing, and a store keeps at most a day
/// ([`SHARED_DELAY_MS_MAX`]): a longer delay would resolve and then fail every permit request.
fn shared_delay_too_long(tool: &Merged, declared: &Declared, sink: &mut Sink) {
    let mut path = tool_path(&tool.name, Some("concurrency"));
    path.push("delay".to_owned());
    let d = sink.push(
        Code::ConcurrencyType,
        &path,
        format!(
            "{} ms is above the longest delay a shared key's store keeps, \
             {SHARED_DELAY_MS_MAX} ms (24h)",
            declared.delay.0
        ),
    );
    if let Some(loc) = declared.delay.1 {
        d.label(loc, "longer than a shared store keeps");
    }
    if let Some(loc) = declared.shared.1 {
        d.label(loc, "shared here");
    }
    d.help("a shared key's store keeps its spacing, for at most 24h; use a shorter delay");
}

/// A key set names each key once, and at most one of its keys is shared, whose set-mates are
/// not spaced: the set's call holds its other keys' slots while it asks the store for the
/// permit, and starts when it comes.
fn key_set_terms(tool: &Merged, set: &[Declared], sink: &mut Sink) {
    let path = tool_path(&tool.name, Some("concurrency"));
    for (i, d) in set.iter().enumerate() {
        // One path key may be named twice with two paths (a move's source and destination).
        let repeats = |e: &&Declared| {
            e.key == d.key
                && (e.path.is_none()
                    || d.path.is_none()
                    || e.path.as_ref().map(|p| &p.0) == d.path.as_ref().map(|p| &p.0))
        };
        if let Some(first) = set[..i].iter().find(repeats) {
            sink.push(
                Code::ConcurrencyKeyRepeated,
                &path,
                format!("the key set names {:?} twice", d.key),
            )
            .label(d.loc, "named again here")
            .label(first.loc, "first named here")
            .help("name each key once; two templates that make one key (fs:{src}, fs:{dst}) are fine and count once");
        }
    }
    // One shared key per set: its permit is the one thing the set waits for from a store, taken
    // while the set's other keys' slots are held, so nothing is ever held partly. Two would
    // need every process to take them in one global order, all or none (not yet).
    let mut shared = set.iter().filter(|d| d.shared.0 == 1);
    let first_shared = shared.next();
    for d in shared {
        let Some(at) = d.shared.1 else { continue };
        let first = first_shared.map_or("", |f| f.key.as_str());
        sink.push(
            Code::SharedKeyInSet,
            &path,
            format!(
                "{:?} and {first:?} are both shared: a key set takes at most one shared key \
                 (two stores' permits cannot yet be taken all or none, in one order across \
                 processes)",
                d.key
            ),
        )
        .label(at, "a second shared key in the set")
        .help("keep one shared key in the set, and the others local to this process");
    }
    // The set's call starts when the store grants the permit: a local delay or rate would be a
    // second gate that could close in front of a granted call, so the shared key paces instead.
    if let Some(s) = first_shared {
        for d in set.iter().filter(|d| d.shared.0 != 1) {
            let spaced = [
                (d.delay.0 > 0, d.delay.1, "a delay"),
                (!d.rate.0.is_empty(), d.rate.1, "a rate"),
            ];
            for (_, at, what) in spaced.into_iter().filter(|s| s.0) {
                let Some(at) = at else { continue };
                sink.push(
                    Code::SharedKeyInSet,
                    &path,
                    format!(
                        "{:?} has {what} in a key set with the shared key {:?}: the set's calls \
                         start when the store grants the permit, and a local gate could then \
                         close in front of a granted call",
                        d.key, s.key
                    ),
                )
                .label(at, "spacing a key of a set with a shared key")
                .help("pace the shared key instead (its store keeps delays and rates across processes), or give this key none");
            }
        }
    }
    let mut adaptive = set.iter().filter(|d| d.adapt.0 > 0);
    if let (Some(first), Some(second)) = (adaptive.next(), adaptive.next()) {
        let d = sink.push(
            Code::AdaptiveKeysInSet,
            &path,
            format!(
                "{:?} and {:?} both adapt their limit, and a rate limit on a call of the set \
                 could not say which one to halve",
                first.key, second.key
            ),
        );
        for d2 in [first, second] {
            if let Some(at) = d2.adapt.1 {
                d.label(at, "an adaptive limit");
            }
        }
        d.help("let one key of the set adapt (the endpoint that answers 429), and give the others fixed limits");
    }
}

/// A path key (`path = "{path}"`) is one tree, named by a plain key: it only excludes
/// overlapping paths (`retries` and `max_wait` keep their meaning, `limit = 0` lifts it). A
/// limit, delay, rate, burst, weight, adaptive limit or sharing is refused: each would hold
/// the whole tree, in an order that overtaking on paths apart would not keep, and another key
/// of a set says it plainly, in written order (`[{ key = "fs", path = "{path}" }, { key =
/// "fs-writes", limit = 4 }]`).
fn path_terms(tool: &Merged, d: &Declared, sink: &mut Sink) {
    let Some((_, at)) = &d.path else {
        return;
    };
    let path = tool_path(&tool.name, Some("concurrency"));
    if crate::template::KeyTemplate::parse(&d.key).is_ok_and(|t| t.is_some()) {
        sink.push(
            Code::PathKeyTerms,
            &path,
            format!(
                "the path key {:?} has placeholders; a path key names one tree, and its calls' \
                 paths vary",
                d.key
            ),
        )
        .label(*at, "a path for a templated key")
        .help("name the tree plainly (key = \"fs\") and put the varying part in the path (path = \"{repo}/{file}\")");
    }
    let limited = d.limit != 0 && d.limit != u32::MAX && d.adapt.0 == 0;
    let terms = [
        ("a limit", limited, d.adapt.1),
        ("a delay", d.delay.0 > 0, d.delay.1),
        ("a rate", d.rate.1.is_some(), d.rate.1),
        ("a burst", d.burst.1.is_some(), d.burst.1),
        ("a weight", d.weight.1.is_some(), d.weight.1),
        ("an adaptive limit", d.adapt.0 > 0, d.adapt.1),
        ("sharing", d.shared.0 == 1, d.shared.1),
    ];
    for (what, _, written) in terms.iter().filter(|t| t.1) {
        let diag = sink.push(
            Code::PathKeyTerms,
            &path,
            format!(
                "the path key {:?} has {what}; a path key only keeps overlapping paths apart",
                d.key
            ),
        );
        // One label: two on one line collide in the renderer's layout.
        diag.label(written.unwrap_or(*at), format!("{what} on a path key"))
            .help(
                "give the call a second key for it in a key set: concurrency = [{ key = \"fs\", \
             path = \"{path}\" }, { key = \"fs-writes\", limit = 4 }]",
            );
    }
}

/// A `burst` and a `weight` need a `rate`, and a weight above the burst could never start. A
/// shared key's store keeps its rate windows, exactly only for counts and bursts up to
/// [`SHARED_RATE_COUNT_MAX`].
fn rate_terms(tool: &Merged, d: &Declared, sink: &mut Sink) {
    let path = tool_path(&tool.name, Some("concurrency"));
    // A rate lifted by a higher layer (`rate = []`) leaves a lower layer's burst and weights
    // harmless: only a burst or weight where no layer writes a rate is refused.
    if let (Some(at), true) = (d.burst.1, d.rate.1.is_none()) {
        sink.push(
            Code::BurstWithoutRate,
            &path,
            format!(
                "burst = {} has no rate to let through: burst is how many starts the key's \
                 rate windows allow at once",
                d.burst.0
            ),
        )
        .label(at, "burst without a rate")
        .help("add a rate (rate = \"10/s\"), or remove burst");
    }
    if let (Some(at), true) = (d.weight.1, d.rate.1.is_none() && d.weight.0 > 1) {
        sink.push(
            Code::WeightWithoutRate,
            &path,
            format!(
                "weight = {} has no rate to count against: a weight is how many units of the \
                 key's rate windows one call costs",
                d.weight.0
            ),
        )
        .label(at, "weight without a rate")
        .help("add a rate (rate = \"900/min\"), or remove weight");
    }
    let least = d.rate.0.iter().map(|w| w.burst).min();
    if let (Some(at), Some(least)) = (d.weight.1, least.filter(|&b| d.weight.0 > b)) {
        // The message names the burst; a second label on the same line would collide with
        // this one in the renderer's (annotate-snippets') layout.
        sink.push(
            Code::WeightAboveBurst,
            &path,
            format!(
                "weight = {} is above the burst of {least} (the smallest of its rate windows'): \
                 a call that costs more than the rate ever lets through at once could never \
                 start",
                d.weight.0
            ),
        )
        .label(at, "heavier than the burst")
        .help(format!(
            "raise that burst to {} or more, or lower the weight",
            d.weight.0
        ));
    }
    let too_large = |w: &RateWindow| w.count.max(w.burst) > SHARED_RATE_COUNT_MAX;
    if let (Some(at), Some(shared), true, Some(w)) = (
        d.rate.1,
        d.shared.1,
        d.shared.0 == 1,
        d.rate.0.iter().find(|w| too_large(w)),
    ) {
        sink.push(
            Code::SharedRateOutOfRange,
            &path,
            format!(
                "a shared key's rate window counts at most {SHARED_RATE_COUNT_MAX} starts with \
                 a burst of at most {SHARED_RATE_COUNT_MAX}, and this one has {} with a burst \
                 of {}: its store keeps arrival times exactly, within 53 bits",
                w.count, w.burst
            ),
        )
        .label(at, "too large for a store")
        .label(shared, "on a shared key")
        .help(
            "write the rate over a shorter window (\"1000/ms\" rather than \"1000000/s\"), or \
             keep it on a key that is not shared",
        );
    }
}

fn conflict(key: &str, list: &[(String, Declared)], sink: &mut Sink) {
    let describe = |(tool, d): &(String, Declared)| {
        if d.integer_form {
            format!(
                "{tool} = {} (integer form: key is the tool's own name)",
                d.limit
            )
        } else {
            format!("{tool} = {}", d.limit)
        }
    };
    let listing: Vec<String> = list
        .iter()
        .map(describe)
        .map(|s| s.replace(&u32::MAX.to_string(), "unbounded"))
        .collect();
    let d = sink.push(
        Code::ConcurrencyLimitConflict,
        &["conversation".to_owned(), "tools".to_owned()],
        format!(
            "concurrency key {key:?} has conflicting limits: {}; every tool naming a key must \
             give it the same limit",
            listing.join(", ")
        ),
    );
    for (entry, text) in list.iter().zip(&listing) {
        d.label(entry.1.loc, text.clone());
    }
    d.tools(list.iter().map(|(tool, _)| tool.clone()).collect())
        .help("the check covers every configured tool, enabled or not");
}

/// The fields besides the limit that every tool naming a key must agree on (and, in
/// `overlap.rs`, a template and the keys it can make).
#[derive(Clone, Copy)]
pub(super) enum Agreed {
    Delay,
    Rate,
    Burst,
    Retries,
    MaxWait,
    Shared,
    Adapt,
    /// Whether the key is a path key.
    Path,
}

impl Agreed {
    /// Whether two tools give the key the same value.
    pub(super) fn same(self, a: &Declared, b: &Declared) -> bool {
        match self {
            // Each window as written: a burst that is the key's is compared as `burst`.
            Self::Rate => written_rates(a) == written_rates(b),
            _ => self.number(a) == self.number(b),
        }
    }

    fn number(self, d: &Declared) -> u32 {
        match self {
            Self::Delay => d.delay.0,
            Self::Rate => 0,
            Self::Burst => d.burst.0,
            Self::Retries => d.retries.0,
            Self::MaxWait => d.max_wait.0,
            Self::Shared => d.shared.0,
            Self::Adapt => d.adapt.0,
            Self::Path => u32::from(d.path.is_some()),
        }
    }

    /// Where the tool wrote the value (`None`: it did not, and gives the default).
    pub(super) fn at(self, d: &Declared) -> Option<Loc> {
        match self {
            Self::Delay => d.delay.1,
            Self::Rate => d.rate.1,
            Self::Burst => d.burst.1,
            Self::Retries => d.retries.1,
            Self::MaxWait => d.max_wait.1,
            Self::Shared => d.shared.1,
            // A limit written as an integer says "not adaptive" as plainly as a table says
            // "adaptive", so only an unwritten limit is the default.
            Self::Adapt => d.adapt.1,
            Self::Path => d.path.as_ref().map(|p| p.1),
        }
    }

    /// The value as a diagnostic shows it.
    pub(super) fn show(self, d: &Declared) -> String {
        match self {
            Self::Delay | Self::MaxWait => format!("{} ms", self.number(d)),
            Self::Rate => show_rates(&d.rate.0, d.burst.0),
            Self::Shared => (d.shared.0 == 1).to_string(),
            Self::Adapt if d.adapt.0 == 0 => "fixed".to_owned(),
            Self::Adapt => format!("adapts down to {}", d.adapt.0),
            Self::Path if d.path.is_some() => "a path key".to_owned(),
            Self::Path => "an exact key".to_owned(),
            Self::Burst | Self::Retries => self.number(d).to_string(),
        }
    }

    /// The code, the field, and the plural noun for "conflicting ...".
    pub(super) fn names(self) -> (Code, &'static str, &'static str) {
        match self {
            Self::Delay => (Code::ConcurrencyDelayConflict, "delay", "delays"),
            Self::Rate => (Code::ConcurrencyRateConflict, "rate", "rates"),
            Self::Burst => (Code::ConcurrencyBurstConflict, "burst", "bursts"),
            Self::Retries => (Code::ConcurrencyRetriesConflict, "retries", "retry caps"),
            Self::MaxWait => (
                Code::ConcurrencyMaxWaitConflict,
                "max_wait",
                "maximum waits",
            ),
            Self::Shared => (Code::ConcurrencySharedConflict, "shared", "scopes"),
            Self::Adapt => (
                Code::ConcurrencyAdaptConflict,
                "adaptive limit",
                "adaptations",
            ),
            Self::Path => (
                Code::ConcurrencyPathConflict,
                "kind of key (a path, or none)",
                "kinds",
            ),
        }
    }
}

/// A tool's windows with the key's burst left out (0), so that a key's `burst` that differs is
/// `burst`'s conflict alone.
fn written_rates(d: &Declared) -> Vec<(u32, u32, u32)> {
    d.rate
        .0
        .iter()
        .map(|w| {
            (
                w.count,
                w.per_ms,
                if w.burst == d.burst.0 { 0 } else { w.burst },
            )
        })
        .collect()
}

/// Rate windows as a config writes them: `"5000/3600000ms"` (with ` burst N` when a window's
/// own differs from the key's `burst`), or `none`.
fn show_rates(rates: &[RateWindow], key_burst: u32) -> String {
    if rates.is_empty() {
        return "none".to_owned();
    }
    let windows: Vec<String> = rates
        .iter()
        .map(|w| match w.burst {
            b if b == key_burst => format!("\"{}/{}ms\"", w.count, w.per_ms),
            b => format!("\"{}/{}ms\" burst {b}", w.count, w.per_ms),
        })
        .collect();
    if let [one] = windows.as_slice() {
        return one.clone();
    }
    format!("[{}]", windows.join(", "))
}

/// V5 for `delay`, `rate`, `burst`, `retries`, `max_wait` and `shared`: one value per key. A
/// tool that does not write the field gives the default (no delay, no rate, a burst of 1,
/// `RETRIES_DEFAULT` retries, `MAX_WAIT_DEFAULT_MS`, not shared), and the label says so.
fn disagreement(key: &str, what: Agreed, list: &[(String, Declared)], sink: &mut Sink) {
    let (code, field, noun) = what.names();
    let describe = |(tool, d): &(String, Declared)| {
        let value = what.show(d);
        match what.at(d) {
            Some(_) => format!("{tool} = {value}"),
            None => format!("{tool} = {value} (not set: the default)"),
        }
    };
    let listing: Vec<String> = list.iter().map(describe).collect();
    let d = sink.push(
        code,
        &["conversation".to_owned(), "tools".to_owned()],
        format!(
            "concurrency key {key:?} has conflicting {noun}: {}; every tool naming a key must \
             give it the same {field}",
            listing.join(", ")
        ),
    );
    for (entry, text) in list.iter().zip(&listing) {
        d.label(what.at(&entry.1).unwrap_or(entry.1.loc), text.clone());
    }
    d.tools(list.iter().map(|(tool, _)| tool.clone()).collect())
        .help(format!(
            "write the same {field} in every tool's concurrency table; the check covers every \
             configured tool, enabled or not"
        ));
}

fn tool_path(tool: &str, field: Option<&str>) -> Vec<String> {
    let mut path = vec![
        "conversation".to_owned(),
        "tools".to_owned(),
        tool.to_owned(),
    ];
    if let Some(field) = field {
        path.push(field.to_owned());
    }
    path
}
