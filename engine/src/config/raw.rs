//! One layer's TOML, parsed into mirrors of the settings RFD 129 owns, with a location on every
//! value. Strict for `concurrency`, `fan_out`, `enable` and the `'*'` prohibitions; every other
//! field and section is skipped, so any file JP loads also loads here, with a warning for a
//! name a small edit away from one read here (`concurency`, `conversation.tool`, `fanout`).

use std::borrow::Cow;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::duration::parse_duration;
use super::json_layer;
use super::policy::{OnError, RateWindow};
use super::rate::parse_rate;
use super::{Loc, Sink};
use crate::diagnostic::Code;
use crate::limits::{
    BURST_MAX, KEY_BYTES_MAX, KEYS_PER_CALL_MAX, MAX_WAIT_MS_MAX, NAME_BYTES_MAX, RATE_WINDOWS_MAX,
    RETRIES_MAX,
};
use crate::template::KeyTemplate;

/// One layer's view of `conversation.tools`.
#[derive(Debug, Default)]
pub(crate) struct RawLayer {
    pub(crate) tools: Vec<RawTool>,
}

/// One `conversation.tools.<name>` table of one layer.
#[derive(Debug)]
pub(crate) struct RawTool {
    pub(crate) name: String,
    pub(crate) concurrency: Option<RawConcurrency>,
    pub(crate) fan_out: Option<RawFanOut>,
    /// `concurrency` failed to parse, so the checks that read it skip this tool rather than
    /// report errors that only follow from the first one.
    pub(crate) bad_concurrency: bool,
    /// `fan_out` failed to parse; likewise for the stop check.
    pub(crate) bad_fan_out: bool,
}

// One per tool per layer, made once at parse: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub(crate) enum RawConcurrency {
    Int {
        n: u32,
        loc: Loc,
    },
    Table {
        key: Option<(String, Loc)>,
        /// The limit (an adaptive one's ceiling, `max`), the floor it adapts down to when it
        /// is adaptive (`limit = { max, min, adapt = "aimd" }`), and where it was written: a
        /// limit written in a layer replaces the whole of a lower one's.
        limit: Option<(u32, Option<u32>, Loc)>,
        /// Milliseconds between consecutive starts on the key.
        delay: Option<(u32, Loc)>,
        /// Rate windows (`rate`), in ascending order.
        rate: Option<(Vec<RateWindow>, Loc)>,
        /// Starts the rate windows let through at once (`burst`).
        burst: Option<(u32, Loc)>,
        /// Units of the key's rate windows one call of this tool costs (`weight`).
        weight: Option<(u32, Loc)>,
        /// Rate-limit retries per entry.
        retries: Option<(u32, Loc)>,
        /// The longest rate-limit wait the key pauses for, in milliseconds.
        max_wait: Option<(u32, Loc)>,
        /// Whether the limit holds across processes (a store grants permits).
        shared: Option<(bool, Loc)>,
        /// The path a call takes in the key's tree (`path = "{path}"`, a template or a literal
        /// such as `"/"`): the key is then a path key (`crate::path`).
        path: Option<(String, Loc)>,
        loc: Loc,
    },
    /// A key set, `[{ key = "fs:{src}" }, { key = "fs:{dst}" }]`: each call takes every
    /// member's key. Its members are tables; an empty set leaves the tool unbounded. A set
    /// replaces whatever a lower layer wrote, and is replaced whole by a higher one.
    Set {
        members: Vec<Self>,
    },
}

#[derive(Debug, Clone)]
pub(crate) enum RawFanOut {
    Bool {
        on: bool,
        loc: Loc,
    },
    Table {
        enabled: Option<(bool, Loc)>,
        on_error: Option<(OnError, Loc)>,
    },
}

type Value<'i> = Spanned<DeValue<'i>>;

/// Parses one layer: TOML, or JSON when it starts with `{` (`json_layer.rs`), read into the
/// same tree. Returns `None` when the text cannot be read; every problem goes to `sink`.
pub(crate) fn parse_layer(layer: u32, text: &str, sink: &mut Sink) -> Option<RawLayer> {
    if json_layer::is_json(text) {
        return match json_layer::parse(text) {
            Ok(root) => Some(read_root(layer, root.get_ref(), sink)),
            Err(err) => {
                let loc = Loc::new(layer, err.span.start, err.span.end);
                sink.push(
                    Code::JsonSyntax,
                    &[],
                    format!("invalid JSON: {}", err.message),
                )
                .label(loc, "here");
                None
            }
        };
    }
    let root = DeTable::parse(text);
    if let Err(err) = &root {
        // Only the first: recovery after a syntax error mostly reports echoes of it.
        {
            let span = err.span().unwrap_or(0..0);
            let loc = Loc::new(layer, span.start, span.end);
            let message = err.message().trim_end_matches('\n').to_owned();
            sink.push(Code::TomlSyntax, &[], format!("invalid TOML: {message}"))
                .label(loc, "here");
        }
        return None;
    }
    let Ok(root) = root else {
        return None;
    };
    Some(read_root(layer, root.get_ref(), sink))
}

/// Reads a layer's tree, TOML's or JSON's.
fn read_root(layer: u32, root: &DeTable<'_>, sink: &mut Sink) -> RawLayer {
    let mut out = RawLayer::default();
    warn_near_misses(layer, &[], root, &["conversation"], sink);
    // Tools written at the top (`[tools.a]`, `{ "tools": ... }`) would configure nothing and
    // leave every tool unbounded: said, since it is no near miss of a name.
    if let Some((field, _)) = root.iter().find(|(k, _)| k.get_ref().as_ref() == "tools") {
        sink.push(
            Code::UnknownFieldTypo,
            &["tools".to_owned()],
            "unknown field `tools` is ignored, so nothing it sets applies: Turnstile reads \
             tools only under `conversation`"
                .to_owned(),
        )
        .label(Loc::from_span(layer, field.span()), "ignored")
        .help("did you mean `conversation.tools`? ([conversation.tools.NAME] in TOML)");
    }
    let Some(conversation) = find(root, "conversation") else {
        return out;
    };
    let path = ["conversation".to_owned()];
    let Some(conversation) = expect_table(layer, &path, conversation, sink) else {
        return out;
    };
    warn_near_misses(layer, &path, conversation, &["tools"], sink);
    let Some(tools) = find(conversation, "tools") else {
        return out;
    };
    let path = ["conversation".to_owned(), "tools".to_owned()];
    let Some(tools) = expect_table(layer, &path, tools, sink) else {
        return out;
    };
    for (name, value) in tools.iter() {
        let name_loc = Loc::from_span(layer, name.span());
        let name = name.get_ref().as_ref();
        let mut path = path.to_vec();
        path.push(name.to_owned());
        if name.len() > NAME_BYTES_MAX {
            sink.push(
                Code::TooLarge,
                &path,
                format!("tool name is longer than {NAME_BYTES_MAX} bytes"),
            )
            .label(name_loc, "this name");
            continue;
        }
        let Some(table) = expect_table(layer, &path, value, sink) else {
            continue;
        };
        if name == "*" {
            parse_defaults(layer, &path, table, sink);
        } else {
            out.tools.push(parse_tool(layer, &path, name, table, sink));
        }
    }
    out
}

/// The names Turnstile reads in a tool's table; the others are ignored.
const TOOL_FIELDS: &[&str] = &["concurrency", "fan_out"];
/// The fields of a concurrency table and of a fan_out table.
const CONCURRENCY_FIELDS: &[&str] = &[
    "key", "limit", "delay", "rate", "burst", "weight", "retries", "max_wait", "shared", "path",
];
const FAN_OUT_FIELDS: &[&str] = &["enabled", "on_error"];

/// Warns of every name in `table` that Turnstile does not read but is a near miss of one in
/// `known` (`typo.rs`): ignored like any unknown field, but most likely meant.
fn warn_near_misses(
    layer: u32,
    path: &[String],
    table: &DeTable<'_>,
    known: &[&str],
    sink: &mut Sink,
) {
    for (field, _) in table.iter() {
        let name = field.get_ref().as_ref();
        let Some(meant) = super::typo::near_miss(name, known) else {
            continue;
        };
        let mut path = path.to_vec();
        path.push(name.to_owned());
        sink.push(
            Code::UnknownFieldTypo,
            &path,
            format!("unknown field `{name}` is ignored, so nothing it sets applies"),
        )
        .label(Loc::from_span(layer, field.span()), "ignored")
        .help(did_you_mean(meant));
    }
}

fn did_you_mean(meant: &str) -> String {
    format!("did you mean `{meant}`?")
}

fn find<'a, 'i>(table: &'a DeTable<'i>, key: &str) -> Option<&'a Value<'i>> {
    table
        .iter()
        .find(|(k, _)| k.get_ref().as_ref() == key)
        .map(|(_, v)| v)
}

fn expect_table<'a, 'i>(
    layer: u32,
    path: &[String],
    value: &'a Value<'i>,
    sink: &mut Sink,
) -> Option<&'a DeTable<'i>> {
    if let DeValue::Table(table) = value.get_ref() {
        return Some(table);
    }
    sink.push(
        Code::TableType,
        path,
        format!("expected a table, found {}", found(value.get_ref())),
    )
    .label(Loc::from_span(layer, value.span()), "not a table");
    None
}

fn parse_defaults(layer: u32, path: &[String], table: &DeTable<'_>, sink: &mut Sink) {
    for (field, value) in table.iter() {
        let loc = Loc::from_span(layer, field.span()).to(value.span());
        let mut path = path.to_vec();
        path.push(field.get_ref().to_string());
        match field.get_ref().as_ref() {
            "concurrency" => {
                sink.push(
                    Code::ConcurrencyOnDefaults,
                    &path,
                    "concurrency is set per tool, not on '*'".to_owned(),
                )
                .label(loc, "not allowed on '*'")
                .help(
                    "whether a tool's executions conflict depends on what the tool does; set \
                     concurrency on conversation.tools.<name> for each tool that needs it",
                );
            }
            "fan_out" => {
                sink.push(
                    Code::FanOutOnDefaults,
                    &path,
                    "fan_out is set per tool, not on '*'".to_owned(),
                )
                .label(loc, "not allowed on '*'")
                .help("set fan_out on conversation.tools.<name> for each tool that fans out");
            }
            "enable" => {
                parse_enable(layer, &path, value, sink);
            }
            _ => {}
        }
    }
}

fn parse_tool(
    layer: u32,
    path: &[String],
    name: &str,
    table: &DeTable<'_>,
    sink: &mut Sink,
) -> RawTool {
    let mut tool = RawTool {
        name: name.to_owned(),
        concurrency: None,
        fan_out: None,
        bad_concurrency: false,
        bad_fan_out: false,
    };
    for (field, value) in table.iter() {
        let mut path = path.to_vec();
        path.push(field.get_ref().to_string());
        match field.get_ref().as_ref() {
            "concurrency" => {
                tool.concurrency = parse_concurrency(layer, &path, value, sink);
                tool.bad_concurrency = tool.concurrency.is_none();
            }
            "fan_out" => {
                tool.fan_out = parse_fan_out(layer, &path, value, sink);
                tool.bad_fan_out = tool.fan_out.is_none();
            }
            "enable" => parse_enable(layer, &path, value, sink),
            _ => {}
        }
    }
    warn_near_misses(layer, path, table, TOOL_FIELDS, sink);
    tool
}

const CONCURRENCY_SHAPES: &str = "a non-negative integer, a { key, limit, delay, rate, burst, \
     weight, retries, max_wait, shared } table, or an array of such tables (a key set)";

fn parse_concurrency(
    layer: u32,
    path: &[String],
    value: &Value<'_>,
    sink: &mut Sink,
) -> Option<RawConcurrency> {
    let loc = Loc::from_span(layer, value.span());
    match value.get_ref() {
        DeValue::Integer(_) => {
            let n = non_negative(layer, path, value, sink)?;
            Some(RawConcurrency::Int { n, loc })
        }
        DeValue::Array(items) => key_set(layer, path, items, loc, sink),
        DeValue::Table(table) => {
            let mut key = None;
            let mut limit = None;
            let mut delay = None;
            let mut rate = None;
            let mut burst = None;
            let mut weight = None;
            let mut retries = None;
            let mut max_wait = None;
            let mut shared = None;
            let mut path_of = None;
            let mut ok = true;
            for (field, v) in table.iter() {
                let mut fpath = path.to_vec();
                fpath.push(field.get_ref().to_string());
                let vloc = Loc::from_span(layer, v.span());
                match field.get_ref().as_ref() {
                    "key" => match templated(Templated::Key, &fpath, v, vloc, sink) {
                        Some(text) => key = Some((text, vloc)),
                        None => ok = false,
                    },
                    "limit" => match v.get_ref() {
                        DeValue::Table(t) => match adaptive_limit(layer, &fpath, t, vloc, sink) {
                            Some((max, min)) => limit = Some((max, Some(min), vloc)),
                            None => ok = false,
                        },
                        _ => match non_negative(layer, &fpath, v, sink) {
                            Some(n) => limit = Some((n, None, vloc)),
                            None => ok = false,
                        },
                    },
                    "delay" => match duration(layer, &fpath, v, sink) {
                        Some(ms) => delay = Some((ms, vloc)),
                        None => ok = false,
                    },
                    "rate" => match rates(layer, &fpath, v, sink) {
                        Some(windows) => rate = Some((windows, vloc)),
                        None => ok = false,
                    },
                    "burst" => match units(layer, &fpath, v, sink) {
                        Some(n) => burst = Some((n, vloc)),
                        None => ok = false,
                    },
                    "weight" => match units(layer, &fpath, v, sink) {
                        Some(n) => weight = Some((n, vloc)),
                        None => ok = false,
                    },
                    "retries" => match non_negative(layer, &fpath, v, sink) {
                        Some(n) if n <= RETRIES_MAX => retries = Some((n, vloc)),
                        Some(n) => {
                            ok = false;
                            sink.push(
                                Code::ConcurrencyType,
                                &fpath,
                                format!("{n} retries is above the largest, {RETRIES_MAX}"),
                            )
                            .label(vloc, "too many");
                        }
                        None => ok = false,
                    },
                    "max_wait" => match duration(layer, &fpath, v, sink) {
                        Some(ms) if ms <= MAX_WAIT_MS_MAX => max_wait = Some((ms, vloc)),
                        Some(ms) => {
                            ok = false;
                            sink.push(
                                Code::ConcurrencyType,
                                &fpath,
                                format!(
                                    "{ms} ms is above the longest maximum wait, \
                                     {MAX_WAIT_MS_MAX} ms (24h)"
                                ),
                            )
                            .label(vloc, "too long")
                            .help(
                                "a rate limit that asks to wait longer than max_wait settles \
                                 its call at once; 24h is the longest a shared store pauses",
                            );
                        }
                        None => ok = false,
                    },
                    "shared" => match v.get_ref() {
                        DeValue::Boolean(b) => shared = Some((*b, vloc)),
                        other => {
                            ok = false;
                            sink.push(
                                Code::ConcurrencyType,
                                &fpath,
                                format!("expected true or false, found {}", found(other)),
                            )
                            .label(vloc, "not a boolean")
                            .help(
                                "shared = true makes the key's limit hold across processes \
                                 that use the same store",
                            );
                        }
                    },
                    "path" => match templated(Templated::Path, &fpath, v, vloc, sink) {
                        Some(text) => path_of = Some((text, vloc)),
                        None => ok = false,
                    },
                    other => {
                        ok = false;
                        let floc = Loc::from_span(layer, field.span()).to(v.span());
                        let d = sink
                            .push(
                                Code::ConcurrencyUnknownField,
                                &fpath,
                                format!(
                                    "unknown field `{other}`; concurrency accepts `key`, \
                                     `limit`, `delay`, `rate`, `burst`, `weight`, `retries`, \
                                     `max_wait`, `shared` and `path`"
                                ),
                            )
                            .label(floc, "unknown field");
                        if let Some(meant) = super::typo::near_miss(other, CONCURRENCY_FIELDS) {
                            d.help(did_you_mean(meant));
                        }
                    }
                }
            }
            ok.then_some(RawConcurrency::Table {
                key,
                limit,
                delay,
                rate,
                burst,
                weight,
                retries,
                max_wait,
                shared,
                path: path_of,
                loc,
            })
        }
        other => {
            sink.push(
                Code::ConcurrencyType,
                path,
                format!("expected {CONCURRENCY_SHAPES}, found {}", found(other)),
            )
            .label(loc, "not an integer, a table or an array")
            .help(
                "write concurrency = 1, or concurrency = { key = \"name\", limit = 2 }, \
                 optionally with delay = \"250ms\"",
            );
            None
        }
    }
}

/// A string field that may hold placeholders: a key or a path key's path.
#[derive(Clone, Copy)]
enum Templated {
    Key,
    Path,
}

/// A `key` or a `path`: a string of 1 to [`KEY_BYTES_MAX`] bytes that parses as a template (or
/// has no placeholders).
fn templated(
    what: Templated,
    path: &[String],
    value: &Value<'_>,
    loc: Loc,
    sink: &mut Sink,
) -> Option<String> {
    let (noun, example) = match what {
        Templated::Key => ("concurrency key", "key = \"fs:{path}\""),
        Templated::Path => ("path", "path = \"{path}\""),
    };
    match value.get_ref() {
        DeValue::String(s) if s.is_empty() => {
            let d = match what {
                Templated::Key => sink
                    .push(
                        Code::ConcurrencyKeyEmpty,
                        path,
                        format!("the {noun} is empty"),
                    )
                    .label(loc, "empty key"),
                Templated::Path => sink
                    .push(Code::ConcurrencyType, path, format!("the {noun} is empty"))
                    .label(loc, "empty path"),
            };
            d.help(match what {
                Templated::Key => "name the resource the limit protects, for example key = \"rfd\"",
                Templated::Path => "write path = \"/\" for the whole tree",
            });
            None
        }
        DeValue::String(s) if s.len() > KEY_BYTES_MAX => {
            sink.push(
                Code::TooLarge,
                path,
                format!("the {noun} is longer than {KEY_BYTES_MAX} bytes"),
            )
            .label(
                loc,
                format!("this {}", noun.rsplit(' ').next().unwrap_or(noun)),
            );
            None
        }
        DeValue::String(s) => match KeyTemplate::parse(s) {
            Ok(_) => Some(s.to_string()),
            Err(e) => {
                let noun = noun.rsplit(' ').next().unwrap_or(noun);
                sink.push(
                    Code::ConcurrencyKeyTemplate,
                    path,
                    format!("the {noun} template {s:?} is not valid: {}", e.message),
                )
                .label(loc, "not a valid template")
                .help(format!(
                    "a placeholder names a top-level argument of the call, for example {example}"
                ));
                None
            }
        },
        other => {
            sink.push(
                Code::ConcurrencyType,
                path,
                format!("expected a string, found {}", found(other)),
            )
            .label(loc, "not a string");
            None
        }
    }
}

/// A key set: an array of 0 to [`KEYS_PER_CALL_MAX`] tables, each parsed as the table form.
fn key_set(
    layer: u32,
    path: &[String],
    items: &[Value<'_>],
    loc: Loc,
    sink: &mut Sink,
) -> Option<RawConcurrency> {
    let help = "write a key set as an array of tables: concurrency = [{ key = \"fs:{src}\" }, \
                { key = \"fs:{dst}\" }]";
    if items.len() > KEYS_PER_CALL_MAX {
        sink.push(
            Code::ConcurrencyType,
            path,
            format!(
                "a key set has at most {KEYS_PER_CALL_MAX} keys; this array has {}",
                items.len()
            ),
        )
        .label(loc, "too many keys")
        .help(help);
        return None;
    }
    let mut members = Vec::with_capacity(items.len());
    let mut ok = true;
    for item in items {
        if let DeValue::Table(_) = item.get_ref() {
            match parse_concurrency(layer, path, item, sink) {
                Some(member) => members.push(member),
                None => ok = false,
            }
        } else {
            ok = false;
            sink.push(
                Code::ConcurrencyType,
                path,
                format!(
                    "a key set's members are {{ key, limit, ... }} tables, found {}",
                    found(item.get_ref())
                ),
            )
            .label(Loc::from_span(layer, item.span()), "not a table")
            .help(help);
        }
    }
    ok.then_some(RawConcurrency::Set { members })
}

/// An adaptive limit, `{ max = 8, min = 1, adapt = "aimd" }`: its ceiling and its floor
/// (default 1), with 1 <= min <= max, and `adapt` naming the rule (`"aimd"`, the one there is).
fn adaptive_limit(
    layer: u32,
    path: &[String],
    table: &DeTable<'_>,
    loc: Loc,
    sink: &mut Sink,
) -> Option<(u32, u32)> {
    let help = "an adaptive limit is limit = { max = 8, min = 1, adapt = \"aimd\" }: it halves \
                (never below min) when a call on the key hits a rate limit, and grows by one \
                after a limit's worth of clean ends, up to max";
    let (mut max, mut min, mut adapt, mut ok) = (None, None, false, true);
    for (field, v) in table.iter() {
        let mut fpath = path.to_vec();
        fpath.push(field.get_ref().to_string());
        let vloc = Loc::from_span(layer, v.span());
        match field.get_ref().as_ref() {
            "max" | "min" => match non_negative(layer, &fpath, v, sink) {
                Some(0) => {
                    ok = false;
                    sink.push(
                        Code::ConcurrencyType,
                        &fpath,
                        format!("an adaptive limit's `{}` is 1 or more", field.get_ref()),
                    )
                    .label(vloc, "0 here")
                    .help(help);
                }
                Some(n) if field.get_ref() == "max" => max = Some(n),
                Some(n) => min = Some((n, vloc)),
                None => ok = false,
            },
            "adapt" => match v.get_ref() {
                DeValue::String(s) if s == "aimd" => adapt = true,
                other => {
                    ok = false;
                    sink.push(
                        Code::ConcurrencyType,
                        &fpath,
                        format!("expected \"aimd\", found {}", found(other)),
                    )
                    .label(vloc, "not a rule Turnstile knows")
                    .help(help);
                }
            },
            other => {
                ok = false;
                let floc = Loc::from_span(layer, field.span()).to(v.span());
                sink.push(
                    Code::ConcurrencyUnknownField,
                    &fpath,
                    format!(
                        "unknown field `{other}`; an adaptive limit accepts `max`, `min` and \
                         `adapt`"
                    ),
                )
                .label(floc, "unknown field")
                .help(help);
            }
        }
    }
    if !ok {
        return None;
    }
    let missing = match (max, adapt) {
        (None, _) => Some("`max`, the limit it never grows past"),
        (_, false) => Some("`adapt = \"aimd\"`, the rule it adapts by"),
        _ => None,
    };
    if let Some(missing) = missing {
        sink.push(
            Code::ConcurrencyType,
            path,
            format!("the limit table has no {missing}"),
        )
        .label(loc, "incomplete adaptive limit")
        .help(help);
        return None;
    }
    let max = max?;
    let (min, min_loc) = min.map_or((1, loc), |(n, l)| (n, l));
    if min > max {
        sink.push(
            Code::ConcurrencyType,
            path,
            format!("an adaptive limit's min ({min}) is above its max ({max})"),
        )
        .label(min_loc, "above max")
        .help(help);
        return None;
    }
    Some((max, min))
}

/// A key's rate windows: one window string (`"5000/h"`) or an array of them (`["1/s",
/// "2000/30d"]`), at most [`RATE_WINDOWS_MAX`] (`[]`: none, which lifts a lower layer's), in ascending order with repeats dropped (a
/// window written twice limits once).
fn rates(
    layer: u32,
    path: &[String],
    value: &Value<'_>,
    sink: &mut Sink,
) -> Option<Vec<RateWindow>> {
    let loc = Loc::from_span(layer, value.span());
    let help = "write rate = \"5000/h\", or several windows: rate = [\"1/s\", \"2000/30d\"] \
                (a count, `/`, and ms, s, m, h, d or a duration)";
    let one = |text: &str, at: Loc, sink: &mut Sink| match parse_rate(text) {
        Ok(w) => Some(w),
        Err(why) => {
            sink.push(
                Code::ConcurrencyType,
                path,
                format!("{text:?} is not a rate: {why}"),
            )
            .label(at, "not a rate")
            .help(help);
            None
        }
    };
    let mut windows = match value.get_ref() {
        DeValue::String(text) => vec![one(text, loc, sink)?],
        DeValue::Array(items) if items.len() > RATE_WINDOWS_MAX => {
            sink.push(
                Code::ConcurrencyType,
                path,
                format!(
                    "a key has at most {RATE_WINDOWS_MAX} rate windows; this array has {}",
                    items.len()
                ),
            )
            .label(loc, "wrong number of windows")
            .help(help);
            return None;
        }
        DeValue::Array(items) => {
            let mut windows = Vec::with_capacity(items.len());
            let mut ok = true;
            for item in items.iter() {
                let at = Loc::from_span(layer, item.span());
                match item.get_ref() {
                    DeValue::String(text) => match one(text, at, sink) {
                        Some(w) => windows.push(w),
                        None => ok = false,
                    },
                    DeValue::Table(t) => match own_burst(layer, path, t, at, sink, &one) {
                        Some(w) => windows.push(w),
                        None => ok = false,
                    },
                    other => {
                        ok = false;
                        sink.push(
                            Code::ConcurrencyType,
                            path,
                            format!(
                                "expected a rate string or {{ rate, burst }}, found {}",
                                found(other)
                            ),
                        )
                        .label(at, "not a rate")
                        .help(help);
                    }
                }
            }
            if !ok {
                return None;
            }
            windows
        }
        other => {
            sink.push(
                Code::ConcurrencyType,
                path,
                format!(
                    "expected a rate string or an array of them, found {}",
                    found(other)
                ),
            )
            .label(loc, "not a rate")
            .help(help);
            return None;
        }
    };
    windows.sort_unstable();
    windows.dedup();
    Some(windows)
}

/// A `burst` or a `weight`: 1 ..= [`BURST_MAX`] units of a rate.
fn units(layer: u32, path: &[String], value: &Value<'_>, sink: &mut Sink) -> Option<u32> {
    let n = non_negative(layer, path, value, sink)?;
    if (1..=BURST_MAX).contains(&n) {
        return Some(n);
    }
    let (what, help) = match path.last().map(String::as_str) {
        Some("weight") => (
            "weight",
            "weight is how many units of the key's rate one call of this tool costs: 1 (the \
             default) or more",
        ),
        _ => (
            "burst",
            "burst is how many starts the rate lets through at once after the key was idle: 1 \
             (the default) or more",
        ),
    };
    sink.push(
        Code::ConcurrencyType,
        path,
        format!("a {what} of {n} is not in 1 ..= {BURST_MAX}"),
    )
    .label(Loc::from_span(layer, value.span()), "out of range")
    .help(help);
    None
}

/// A rate window with its own burst, `{ rate = "2000/30d", burst = 2000 }`: a long window's
/// quota spent freely while a short window keeps the pace.
fn own_burst(
    layer: u32,
    path: &[String],
    table: &DeTable<'_>,
    at: Loc,
    sink: &mut Sink,
    one: &dyn Fn(&str, Loc, &mut Sink) -> Option<RateWindow>,
) -> Option<RateWindow> {
    let help = "a window with its own burst is { rate = \"2000/30d\", burst = 2000 }";
    let (mut window, mut burst, mut ok) = (None, None, true);
    for (field, v) in table.iter() {
        let mut fpath = path.to_vec();
        fpath.push(field.get_ref().to_string());
        let vloc = Loc::from_span(layer, v.span());
        match (field.get_ref().as_ref(), v.get_ref()) {
            ("rate", DeValue::String(text)) => match one(text, vloc, sink) {
                Some(w) => window = Some(w),
                None => ok = false,
            },
            ("burst", _) => match units(layer, &fpath, v, sink) {
                Some(n) => burst = Some(n),
                None => ok = false,
            },
            ("rate", other) => {
                ok = false;
                sink.push(
                    Code::ConcurrencyType,
                    &fpath,
                    format!("expected a rate string, found {}", found(other)),
                )
                .label(vloc, "not a rate")
                .help(help);
            }
            (name, _) => {
                ok = false;
                let floc = Loc::from_span(layer, field.span()).to(v.span());
                sink.push(
                    Code::ConcurrencyUnknownField,
                    &fpath,
                    format!("unknown field `{name}`; a rate window accepts `rate` and `burst`"),
                )
                .label(floc, "unknown field")
                .help(help);
            }
        }
    }
    if !ok {
        return None;
    }
    let Some(mut window) = window else {
        sink.push(
            Code::ConcurrencyType,
            path,
            "the rate window table has no `rate`".to_owned(),
        )
        .label(at, "no rate")
        .help(help);
        return None;
    };
    window.burst = burst.unwrap_or(0);
    Some(window)
}

/// A duration in whole milliseconds (`delay`, `max_wait`): an integer (milliseconds) or a
/// string of digits (with an optional fraction) followed by `ms`, `s`, `m` or `h`: `250`,
/// `"250ms"`, `"1.5s"`, `"2m"`. At most `u32::MAX` milliseconds (about 49 days).
fn duration(layer: u32, path: &[String], value: &Value<'_>, sink: &mut Sink) -> Option<u32> {
    let loc = Loc::from_span(layer, value.span());
    let field = path.last().map_or("delay", String::as_str);
    let help =
        || format!("write {field} = 250 (milliseconds) or {field} = \"250ms\", \"1.5s\", \"2m\"");
    let text = match value.get_ref() {
        DeValue::Integer(_) => {
            return non_negative(layer, path, value, sink);
        }
        DeValue::String(text) => text,
        other => {
            sink.push(
                Code::ConcurrencyType,
                path,
                format!(
                    "expected milliseconds or a duration string, found {}",
                    found(other)
                ),
            )
            .label(loc, "not a duration")
            .help(help());
            return None;
        }
    };
    match parse_duration(text) {
        Ok(ms) => Some(ms),
        Err(why) => {
            // "-5ms" is the same mistake as -5.
            let code = if text.starts_with('-') {
                Code::ConcurrencyNegative
            } else {
                Code::ConcurrencyType
            };
            sink.push(code, path, format!("{text:?} is not a duration: {why}"))
                .label(loc, "not a duration")
                .help(help());
            None
        }
    }
}

/// An integer in `0..=u32::MAX`. A negative one is `concurrency-negative` wherever it is
/// written (the integer form, `limit`, `delay`, `retries`, `max_wait`): one mistake, one code.
/// Everything else that is not such an integer is `concurrency-type`.
fn non_negative(layer: u32, path: &[String], value: &Value<'_>, sink: &mut Sink) -> Option<u32> {
    let help = match path.last().map(String::as_str) {
        Some("delay") => "a delay is 0 (none) or more milliseconds",
        Some("retries") => "retries is 0 (never run again) or more",
        Some("burst") => "a burst is 1 (the default) or more starts at once",
        Some("weight") => "a weight is 1 (the default) or more units of the key's rate",
        Some("max_wait") => {
            "a max_wait is 0 (never wait on a rate limit) or more milliseconds, 5 minutes when \
             unset"
        }
        _ => "0 means unbounded; a limit is 1 or more",
    };
    let loc = Loc::from_span(layer, value.span());
    let DeValue::Integer(int) = value.get_ref() else {
        sink.push(
            Code::ConcurrencyType,
            path,
            format!(
                "expected a non-negative integer, found {}",
                found(value.get_ref())
            ),
        )
        .label(loc, "not an integer");
        return None;
    };
    // The sign apart and the magnitude as a u64 (TOML integers fit an i64): formatting an
    // i128 would cost the component 1.5 KB of 128-bit printing.
    let (negative, magnitude) = match int.as_str().strip_prefix('-') {
        Some(magnitude) => (true, magnitude),
        None => (false, int.as_str()),
    };
    let parsed = u64::from_str_radix(magnitude, int.radix()).ok();
    match parsed {
        Some(n) if negative && n > 0 => {
            sink.push(
                Code::ConcurrencyNegative,
                path,
                format!("expected a non-negative integer, found -{n}"),
            )
            .label(loc, "negative")
            .help(help);
            None
        }
        Some(n) => match u32::try_from(n) {
            Ok(n) => Some(n),
            Err(_) => {
                sink.push(
                    Code::ConcurrencyType,
                    path,
                    format!("{n} is above the largest limit, {}", u32::MAX),
                )
                .label(loc, "too large");
                None
            }
        },
        None => {
            sink.push(
                Code::ConcurrencyType,
                path,
                "integer out of range".to_owned(),
            )
            .label(loc, "out of range");
            None
        }
    }
}

fn parse_fan_out(
    layer: u32,
    path: &[String],
    value: &Value<'_>,
    sink: &mut Sink,
) -> Option<RawFanOut> {
    let loc = Loc::from_span(layer, value.span());
    match value.get_ref() {
        DeValue::Boolean(on) => Some(RawFanOut::Bool { on: *on, loc }),
        DeValue::Table(table) => {
            let mut enabled = None;
            let mut on_error = None;
            let mut ok = true;
            for (field, v) in table.iter() {
                let mut fpath = path.to_vec();
                fpath.push(field.get_ref().to_string());
                let vloc = Loc::from_span(layer, v.span());
                let floc = Loc::from_span(layer, field.span()).to(v.span());
                match (field.get_ref().as_ref(), v.get_ref()) {
                    ("enabled", DeValue::Boolean(b)) => enabled = Some((*b, vloc)),
                    ("enabled", other) => {
                        ok = false;
                        sink.push(
                            Code::FanOutType,
                            &fpath,
                            format!("expected a boolean, found {}", found(other)),
                        )
                        .label(vloc, "not a boolean");
                    }
                    ("on_error", DeValue::String(s)) if s == "continue" => {
                        on_error = Some((OnError::Continue, vloc));
                    }
                    ("on_error", DeValue::String(s)) if s == "stop" => {
                        on_error = Some((OnError::Stop, vloc));
                    }
                    ("on_error", other) => {
                        ok = false;
                        sink.push(
                            Code::FanOutOnErrorValue,
                            &fpath,
                            format!("expected \"continue\" or \"stop\", found {}", found(other)),
                        )
                        .label(vloc, "not \"continue\" or \"stop\"");
                    }
                    ("concurrency", _) => {
                        ok = false;
                        let tool = path.get(2).map_or("<name>", String::as_str);
                        sink.push(
                            Code::FanOutConcurrencyRemoved,
                            &fpath,
                            format!(
                                "removed; the limit now lives at conversation.tools.{tool}.concurrency \
                                 and also orders separate calls"
                            ),
                        )
                        .label(floc, "removed by RFD 129")
                        .help(format!(
                            "move it to the tool: [conversation.tools.{tool}] concurrency = N"
                        ));
                    }
                    (other, _) => {
                        ok = false;
                        let d = sink
                            .push(
                                Code::FanOutUnknownField,
                                &fpath,
                                format!(
                                    "unknown field `{other}`; fan_out accepts `enabled` and \
                                     `on_error`"
                                ),
                            )
                            .label(floc, "unknown field");
                        if let Some(meant) = super::typo::near_miss(other, FAN_OUT_FIELDS) {
                            d.help(did_you_mean(meant));
                        }
                    }
                }
            }
            ok.then_some(RawFanOut::Table { enabled, on_error })
        }
        other => {
            sink.push(
                Code::FanOutType,
                path,
                format!(
                    "expected a boolean or an {{ enabled, on_error }} table, found {}",
                    found(other)
                ),
            )
            .label(loc, "not a boolean or a table");
            None
        }
    }
}

const ENABLE_SHAPES: &str = "expected a boolean, one of \"on\", \"off\", \"explicit\", \"always\", \
                             or a { state, allow_toggle } table";

fn parse_enable(layer: u32, path: &[String], value: &Value<'_>, sink: &mut Sink) {
    let loc = Loc::from_span(layer, value.span());
    let bad = |sink: &mut Sink, what: Cow<'_, str>, loc: Loc| {
        sink.push(
            Code::EnableValue,
            path,
            format!("invalid enable value: {what}, {ENABLE_SHAPES}"),
        )
        .label(loc, "not an enable value");
    };
    match value.get_ref() {
        DeValue::Boolean(_) => {}
        DeValue::String(s) => {
            if !matches!(
                s.as_ref(),
                "on" | "true" | "off" | "false" | "always" | "explicit"
            ) {
                bad(sink, Cow::Owned(format!("'{s}'")), loc);
            }
        }
        DeValue::Table(table) => {
            for (field, v) in table.iter() {
                let vloc = Loc::from_span(layer, v.span());
                match (field.get_ref().as_ref(), v.get_ref()) {
                    ("state", DeValue::Boolean(_)) => {}
                    ("allow_toggle", DeValue::String(s))
                        if matches!(
                            s.as_ref(),
                            "any" | "never" | "if_named" | "if_named_or_group"
                        ) => {}
                    ("state" | "allow_toggle", other) => {
                        bad(sink, Cow::Owned(found(other)), vloc);
                    }
                    (other, _) => {
                        let floc = Loc::from_span(layer, field.span()).to(v.span());
                        bad(sink, Cow::Owned(format!("unknown field `{other}`")), floc);
                    }
                }
            }
        }
        other => bad(sink, Cow::Owned(found(other)), loc),
    }
}

/// Describes a value for "found ..." in messages.
fn found(value: &DeValue<'_>) -> String {
    match value {
        DeValue::String(s) => format!("string {s:?}"),
        DeValue::Integer(i) => format!("integer {}", i.as_str()),
        DeValue::Float(f) => format!("float {}", f.as_str()),
        DeValue::Boolean(b) => format!("boolean {b}"),
        DeValue::Datetime(_) => "a datetime".to_owned(),
        DeValue::Array(_) => "an array".to_owned(),
        DeValue::Table(_) => "a table".to_owned(),
    }
}
