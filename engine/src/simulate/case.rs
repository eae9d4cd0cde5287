//! What `simulate` reads from a case file: its layers, batches and `[simulate]` table. A case
//! file's other fields (a corpus case's expectations and steps) are allowed and not read; a
//! field the case format does not have is an error, as a typo should be.

use std::collections::BTreeMap;

use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue};

use crate::config::Layer;
use crate::limits::SIMULATE_DURATION_MS_MAX;

/// A case file's top-level fields: the ones read here, then the ones a corpus case adds.
const READ: [&str; 3] = ["layer", "batch", "simulate"];
const NOT_READ: [&str; 12] = [
    "description",
    "name",
    "title",
    "notes",
    "comment",
    "reference",
    "diagnostics",
    "rendered",
    "tools",
    "warnings",
    "admission",
    "step",
];

/// One batch as the file writes it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Batch {
    pub(crate) calls: Vec<String>,
    pub(crate) execution_ms: Option<u32>,
    pub(crate) abort_grace_ms: Option<u32>,
}

/// The `[simulate]` table.
#[derive(Clone, Debug, Default)]
pub(crate) struct Timing {
    pub(crate) duration_ms: Option<u64>,
    pub(crate) durations: BTreeMap<String, u64>,
    pub(crate) fail: Vec<String>,
}

/// What a case file holds for `simulate`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Case {
    pub(crate) layers: Vec<Layer>,
    pub(crate) batches: Vec<Batch>,
    pub(crate) timing: Timing,
}

type Value<'i> = Spanned<DeValue<'i>>;

/// Reads `text`; its layers are named `file` and cited by the file's own lines (`cite_file`)
/// or by their own names (`L1`, ... when unnamed). `Err` says where and what is wrong.
pub(crate) fn read(file: &str, text: &str, cite_file: bool) -> Result<Case, String> {
    let at = |span: std::ops::Range<usize>, why: String| {
        let (line, column) = line_column(text, span.start);
        format!("line {line}, column {column}: {why}")
    };
    let root = DeTable::parse(text).map_err(|e| {
        let message = e.message().trim_end_matches('\n').to_owned();
        match e.span() {
            Some(span) => at(span, format!("invalid TOML: {message}")),
            None => format!("invalid TOML: {message}"),
        }
    })?;
    let mut case = Case::default();
    for (key, value) in root.get_ref() {
        let name = key.get_ref().as_ref();
        let span = key.span();
        match name {
            "layer" => {
                for (i, item) in tables(value, "layer").map_err(|w| at(span.clone(), w))? {
                    let layer = layer(i, item, text, file, cite_file).map_err(|(s, w)| at(s, w))?;
                    case.layers.push(layer);
                }
            }
            "batch" => {
                for (_, item) in tables(value, "batch").map_err(|w| at(span.clone(), w))? {
                    case.batches.push(batch(item).map_err(|(s, w)| at(s, w))?);
                }
            }
            "simulate" => {
                let DeValue::Table(table) = value.get_ref() else {
                    return Err(at(value.span(), "`simulate` must be a table".to_owned()));
                };
                case.timing = timing(table).map_err(|(s, w)| at(s, w))?;
            }
            _ if NOT_READ.contains(&name) => {}
            _ => {
                let known: Vec<&str> = READ.iter().chain(&NOT_READ).copied().collect();
                return Err(at(
                    span,
                    format!(
                        "unknown field `{name}`: a case file has {}",
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(case)
}

type Fail = (std::ops::Range<usize>, String);

/// `[[NAME]]`: an array of tables, with each one's index.
fn tables<'a, 'i>(
    value: &'a Value<'i>,
    name: &str,
) -> Result<impl Iterator<Item = (usize, &'a Value<'i>)>, String> {
    match value.get_ref() {
        DeValue::Array(items)
            if items
                .iter()
                .all(|v| matches!(v.get_ref(), DeValue::Table(_))) =>
        {
            Ok(items.iter().enumerate())
        }
        _ => Err(format!(
            "`{name}` must be an array of tables (`[[{name}]]`)"
        )),
    }
}

fn fields<'a, 'i>(
    value: &'a Value<'i>,
    allowed: &[&str],
    what: &str,
) -> Result<Vec<(&'a str, &'a Value<'i>)>, Fail> {
    let DeValue::Table(table) = value.get_ref() else {
        return Err((value.span(), format!("{what} must be a table")));
    };
    table_fields(table, allowed, what)
}

fn table_fields<'a, 'i>(
    table: &'a DeTable<'i>,
    allowed: &[&str],
    what: &str,
) -> Result<Vec<(&'a str, &'a Value<'i>)>, Fail> {
    let mut out = Vec::new();
    for (key, value) in table {
        let name = key.get_ref().as_ref();
        if !allowed.contains(&name) {
            let expected: Vec<String> = allowed.iter().map(|a| format!("`{a}`")).collect();
            return Err((
                key.span(),
                format!(
                    "unknown field `{name}` in {what}, expected {}",
                    expected.join(" or ")
                ),
            ));
        }
        out.push((name, value));
    }
    Ok(out)
}

fn layer(
    i: usize,
    value: &Value<'_>,
    file_text: &str,
    file: &str,
    cite_file: bool,
) -> Result<Layer, Fail> {
    let mut name = None;
    let mut text = None;
    for (field, v) in fields(value, &["name", "text"], "a [[layer]]")? {
        let s = string(v, field)?;
        if field == "name" {
            name = Some(s.to_owned());
        } else {
            text = Some((s.to_owned(), v.span()));
        }
    }
    let Some((text, span)) = text else {
        return Err((value.span(), "a [[layer]] needs `text`".to_owned()));
    };
    let named = name.unwrap_or_else(|| format!("L{}", i + 1));
    if !cite_file {
        return Ok(Layer::new(named, text));
    }
    Ok(match verbatim_start(file_text, span.start, &text) {
        // Padded with as many empty lines (and spaces, to its column) as precede it in the
        // file, which TOML ignores: a diagnostic then cites FILE:LINE:COLUMN.
        Some((line, column)) => {
            let mut padded = "\n".repeat(line - 1);
            padded.push_str(&" ".repeat(column - 1));
            padded.push_str(&text);
            Layer::new(file, padded)
        }
        None => Layer::new(format!("{file}[{named}]"), text),
    })
}

/// Where a string value's text starts in the file, when it is written there verbatim (no
/// escapes): the line and column (1-based) of its first character.
fn verbatim_start(file: &str, quoted: usize, text: &str) -> Option<(usize, usize)> {
    let rest = file.get(quoted..)?;
    let multi_line = rest.starts_with("'''") || rest.starts_with("\"\"\"");
    let mut at = quoted + if multi_line { 3 } else { 1 };
    if multi_line {
        let after = file.get(at..)?;
        at += if after.starts_with("\r\n") {
            2
        } else {
            usize::from(after.starts_with('\n'))
        };
    }
    if !file.get(at..)?.starts_with(text) {
        return None;
    }
    Some(line_column(file, at))
}

/// The 1-based line and column (in characters) of byte `at`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = text.get(..at).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() + 1;
    (line, before[line_start..].chars().count() + 1)
}

fn batch(value: &Value<'_>) -> Result<Batch, Fail> {
    let mut batch = Batch::default();
    let mut calls = None;
    for (field, v) in fields(
        value,
        &["calls", "execution_ms", "abort_grace_ms"],
        "a [[batch]]",
    )? {
        match field {
            "calls" => calls = Some(strings(v, field)?),
            "execution_ms" => batch.execution_ms = Some(u32_of(v, field)?),
            _ => batch.abort_grace_ms = Some(u32_of(v, field)?),
        }
    }
    batch.calls = calls.ok_or_else(|| (value.span(), "a [[batch]] needs `calls`".to_owned()))?;
    Ok(batch)
}

fn timing(table: &DeTable<'_>) -> Result<Timing, Fail> {
    let mut timing = Timing::default();
    for (field, v) in table_fields(table, &["duration_ms", "durations", "fail"], "[simulate]")? {
        match field {
            "duration_ms" => timing.duration_ms = Some(u64_of(v, field)?),
            "fail" => timing.fail = strings(v, field)?,
            _ => {
                let DeValue::Table(labels) = v.get_ref() else {
                    return Err((
                        v.span(),
                        "`durations` must be a table of LABEL = MS".to_owned(),
                    ));
                };
                for (label, ms) in labels {
                    let label = label.get_ref().as_ref().to_owned();
                    let ms = u64_of(ms, &label)?;
                    timing.durations.insert(label, ms);
                }
            }
        }
    }
    Ok(timing)
}

fn string<'a>(value: &'a Value<'_>, field: &str) -> Result<&'a str, Fail> {
    match value.get_ref() {
        DeValue::String(s) => Ok(s),
        _ => Err((value.span(), format!("`{field}` must be a string"))),
    }
}

fn strings(value: &Value<'_>, field: &str) -> Result<Vec<String>, Fail> {
    let bad = || {
        (
            value.span(),
            format!("`{field}` must be an array of strings"),
        )
    };
    let DeValue::Array(items) = value.get_ref() else {
        return Err(bad());
    };
    let items: &DeArray<'_> = items;
    items
        .iter()
        .map(|v| match v.get_ref() {
            DeValue::String(s) => Ok(s.to_string()),
            _ => Err(bad()),
        })
        .collect()
}

fn u64_of(value: &Value<'_>, field: &str) -> Result<u64, Fail> {
    let bad = || {
        (
            value.span(),
            format!("`{field}` must be a whole number of milliseconds >= 0"),
        )
    };
    let DeValue::Integer(int) = value.get_ref() else {
        return Err(bad());
    };
    match u64::from_str_radix(int.as_str(), int.radix()) {
        Ok(ms) if ms <= SIMULATE_DURATION_MS_MAX => Ok(ms),
        Ok(_) => Err((
            value.span(),
            format!("`{field}` is at most {SIMULATE_DURATION_MS_MAX} ms"),
        )),
        Err(_) => Err(bad()),
    }
}

/// Whether a layer's text is a case file rather than config (it has `[[layer]]` or
/// `[[batch]]` at the top): config reading ignores those tables, so it would run unbounded.
pub(crate) fn looks_like_a_case(text: &str) -> bool {
    DeTable::parse(text).is_ok_and(|root| {
        root.get_ref()
            .iter()
            .any(|(key, _)| matches!(key.get_ref().as_ref(), "layer" | "batch"))
    })
}

fn u32_of(value: &Value<'_>, field: &str) -> Result<u32, Fail> {
    let n = u64_of(value, field)?;
    u32::try_from(n).map_err(|_| (value.span(), format!("`{field}` is above {}", u32::MAX)))
}
