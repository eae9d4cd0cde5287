//! Reading a snapshot's JSON text back, every field checked, with a sentence that names it
//! (`snapshot.state.batches[0].first must be a u64 as a decimal string, got 3`).

use serde_json::{Map, Value};
use turnstile_engine::schedule::{
    AbortCause, BatchId, EntryId, Limits, Outcome, Reason, Saved, SavedBatch, SavedCall, SavedState,
};

use super::super::errors::{ExecError, HostError};
use super::super::outcome::{CallOutcome, EntryOutcome, Outcomes, Status};
use super::Snapshot;

type Read<T> = Result<T, String>;

pub(super) fn parse(text: &str) -> Read<Snapshot> {
    let top: Value = serde_json::from_str(text)
        .map_err(|e| format!("must be the JSON text persist was given: {e}"))?;
    let top = object(
        &top,
        "snapshot",
        &["turnstile-snapshot", "state", "ended", "retired"],
    )?;
    if top.get("turnstile-snapshot") != Some(&Value::from(1)) {
        return Err(format!(
            "snapshot[\"turnstile-snapshot\"] must be 1, got {}",
            shown(top.get("turnstile-snapshot"))
        ));
    }
    let state = state_in(top.get("state").unwrap_or(&Value::Null), "snapshot.state")?;
    let mut ended = Vec::new();
    if let Some(values) = top.get("ended") {
        let Value::Object(values) = values else {
            return Err(format!(
                "snapshot.ended must be an object, got {}",
                shown(Some(values))
            ));
        };
        for (k, v) in values {
            let name = format!("snapshot.ended[\"{k}\"]");
            let entry = u64_text(&Value::String(k.clone()), &name)?;
            let kept = object(v, &name, &["value", "error"])?;
            if let Some(e) = kept.get("error") {
                host_error(e, &format!("{name}.error"))?;
            }
            ended.push((entry, v.clone()));
        }
    }
    let mut retired = Vec::new();
    if let Some(list) = top.get("retired") {
        for (i, r) in array(list, "snapshot.retired")?.iter().enumerate() {
            let (batch, outcomes) = retired_in(r, &format!("snapshot.retired[{i}]"))?;
            retired.push((batch, outcomes, r.clone()));
        }
    }
    Ok(Snapshot {
        state,
        ended,
        retired,
    })
}

fn shown(v: Option<&Value>) -> String {
    v.map_or_else(|| "nothing".to_owned(), Value::to_string)
}

fn object<'a>(v: &'a Value, name: &str, fields: &[&str]) -> Read<&'a Map<String, Value>> {
    let Value::Object(map) = v else {
        return Err(format!("{name} must be an object, got {}", shown(Some(v))));
    };
    if let Some(k) = map.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(format!("{name} has an unknown field {k:?}"));
    }
    Ok(map)
}

fn array<'a>(v: &'a Value, name: &str) -> Read<&'a Vec<Value>> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(format!(
            "{name} must be an array, got {}",
            shown(Some(other))
        )),
    }
}

fn string(v: Option<&Value>, name: &str) -> Read<String> {
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        other => Err(format!("{name} must be a string, got {}", shown(other))),
    }
}

fn u32_in(v: Option<&Value>, name: &str) -> Read<u32> {
    v.and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("{name} must be a u32, got {}", shown(v)))
}

fn u64_text(v: &Value, name: &str) -> Read<u64> {
    let text = v.as_str().unwrap_or_default();
    let canonical = text == "0" || (!text.starts_with('0') && !text.is_empty());
    match text.parse::<u64>() {
        Ok(n) if canonical && text.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(format!(
            "{name} must be a u64 as a decimal string, got {}",
            shown(Some(v))
        )),
    }
}

fn field<'a>(map: &'a Map<String, Value>, key: &str) -> &'a Value {
    map.get(key).unwrap_or(&Value::Null)
}

fn state_in(v: &Value, name: &str) -> Read<SavedState> {
    let s = object(
        v,
        name,
        &["version", "policy", "next-batch", "next-entry", "batches"],
    )?;
    let mut batches = Vec::new();
    for (i, bv) in array(field(s, "batches"), &format!("{name}.batches"))?
        .iter()
        .enumerate()
    {
        batches.push(batch_in(bv, &format!("{name}.batches[{i}]"))?);
    }
    Ok(SavedState {
        version: u32_in(s.get("version"), &format!("{name}.version"))?,
        policy: u64_text(field(s, "policy"), &format!("{name}.policy"))?,
        next_batch: u64_text(field(s, "next-batch"), &format!("{name}.next-batch"))?,
        next_entry: u64_text(field(s, "next-entry"), &format!("{name}.next-entry"))?,
        batches,
    })
}

fn batch_in(v: &Value, name: &str) -> Read<SavedBatch> {
    let b = object(v, name, &["batch", "first", "cancelled", "limits", "calls"])?;
    let empty = Value::Object(Map::new());
    let l = object(
        b.get("limits").unwrap_or(&empty),
        &format!("{name}.limits"),
        &["execution-ms", "abort-grace-ms"],
    )?;
    let limit = |key: &str| {
        l.get(key)
            .map(|v| u32_in(Some(v), &format!("{name}.limits.{key}")))
            .transpose()
    };
    let Some(Value::Bool(cancelled)) = b.get("cancelled") else {
        return Err(format!(
            "{name}.cancelled must be a boolean, got {}",
            shown(b.get("cancelled"))
        ));
    };
    let mut calls = Vec::new();
    for (j, cv) in array(field(b, "calls"), &format!("{name}.calls"))?
        .iter()
        .enumerate()
    {
        calls.push(call_in(cv, &format!("{name}.calls[{j}]"))?);
    }
    Ok(SavedBatch {
        batch: BatchId(u64_text(field(b, "batch"), &format!("{name}.batch"))?),
        first: EntryId(u64_text(field(b, "first"), &format!("{name}.first"))?),
        cancelled: *cancelled,
        limits: Limits {
            execution_ms: limit("execution-ms")?,
            abort_grace_ms: limit("abort-grace-ms")?,
        },
        calls,
    })
}

fn call_in(v: &Value, name: &str) -> Read<SavedCall> {
    let c = object(
        v,
        name,
        &["id", "tool", "operations", "key", "keys", "entries"],
    )?;
    let keys = match (c.get("key"), c.get("keys")) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{name} has both keys and key (a state saved by 0.2): give one"
            ));
        }
        (Some(key), None) => vec![string(Some(key), &format!("{name}.key"))?],
        (None, Some(keys)) => {
            let mut out = Vec::new();
            for (i, k) in array(keys, &format!("{name}.keys"))?.iter().enumerate() {
                out.push(string(Some(k), &format!("{name}.keys[{i}]"))?);
            }
            out
        }
        (None, None) => Vec::new(),
    };
    let mut entries = Vec::new();
    for (k, ev) in array(field(c, "entries"), &format!("{name}.entries"))?
        .iter()
        .enumerate()
    {
        let en = format!("{name}.entries[{k}]");
        let e = object(ev, &en, &["operation", "state"])?;
        let op = u32_in(e.get("operation"), &format!("{en}.operation"))?;
        entries.push((op, saved_in(field(e, "state"), &format!("{en}.state"))?));
    }
    Ok(SavedCall {
        id: string(c.get("id"), &format!("{name}.id"))?,
        tool: string(c.get("tool"), &format!("{name}.tool"))?,
        operations: c
            .get("operations")
            .map(|v| u32_in(Some(v), &format!("{name}.operations")))
            .transpose()?,
        keys,
        entries,
    })
}

fn saved_in(v: &Value, name: &str) -> Read<Saved> {
    if v.as_str() == Some("started") {
        return Ok(Saved::Started);
    }
    let s = object(v, name, &["ended", "settled"])?;
    match (s.get("ended"), s.get("settled")) {
        (Some(Value::String(o)), None) if o == "ok" => Ok(Saved::Ended(Outcome::Ok)),
        (Some(Value::String(o)), None) if o == "failed" => Ok(Saved::Ended(Outcome::Failed)),
        (None, Some(r)) => Ok(Saved::Settled(reason_in(r, &format!("{name}.settled"))?)),
        _ => Err(format!(
            "{name} must be \"started\", {{\"ended\": \"ok\" | \"failed\"}} or {{\"settled\": ...}}"
        )),
    }
}

fn reason_in(v: &Value, name: &str) -> Read<Reason> {
    if let Value::String(kind) = v {
        return match kind.as_str() {
            "rejected" => Ok(Reason::Rejected),
            "skipped" => Ok(Reason::Skipped),
            "failed" => Ok(Reason::Failed),
            "cancelled" => Ok(Reason::Cancelled),
            "interrupted" => Ok(Reason::Interrupted),
            other => Err(format!("{name} must be a reason, got {other:?}")),
        };
    }
    let r = object(v, name, &["stopped", "rate-limited", "timed-out"])?;
    if r.len() != 1 {
        return Err(format!(
            "{name} must have exactly one field, got {}",
            r.len()
        ));
    }
    if let Some(after) = r.get("stopped") {
        return Ok(Reason::Stopped {
            after: u32_in(Some(after), &format!("{name}.stopped"))?,
        });
    }
    if let Some(retries) = r.get("rate-limited") {
        return Ok(Reason::RateLimited {
            retries: u32_in(Some(retries), &format!("{name}.rate-limited"))?,
            asked_s: None,
        });
    }
    match r.get("timed-out").and_then(Value::as_str) {
        Some("deadline") => Ok(Reason::TimedOut {
            cause: AbortCause::Deadline,
        }),
        Some("cancelled") => Ok(Reason::TimedOut {
            cause: AbortCause::Cancel,
        }),
        _ => Err(format!(
            "{name}.timed-out must be \"deadline\" or \"cancelled\""
        )),
    }
}

pub(crate) fn host_error(v: &Value, name: &str) -> Read<HostError> {
    let e = object(v, name, &["name", "message"])?;
    Ok(HostError::new(
        string(e.get("name"), &format!("{name}.name"))?,
        string(e.get("message"), &format!("{name}.message"))?,
    ))
}

fn retired_in(v: &Value, name: &str) -> Read<(u64, Outcomes)> {
    let r = object(v, name, &["batch", "outcomes"])?;
    let batch = u64_text(field(r, "batch"), &format!("{name}.batch"))?;
    let mut calls = Vec::new();
    for (i, cv) in array(field(r, "outcomes"), &format!("{name}.outcomes"))?
        .iter()
        .enumerate()
    {
        let cn = format!("{name}.outcomes[{i}]");
        let c = object(cv, &cn, &["id", "tool", "entries"])?;
        let mut entries = Vec::new();
        for (j, ev) in array(field(c, "entries"), &format!("{cn}.entries"))?
            .iter()
            .enumerate()
        {
            entries.push(outcome_in(ev, &format!("{cn}.entries[{j}]"))?);
        }
        calls.push(CallOutcome {
            id: string(c.get("id"), &format!("{cn}.id"))?,
            tool: string(c.get("tool"), &format!("{cn}.tool"))?,
            entries,
        });
    }
    Ok((batch, Outcomes { batch, calls }))
}

fn outcome_in(v: &Value, name: &str) -> Read<EntryOutcome> {
    let e = object(
        v,
        name,
        &[
            "entry", "label", "status", "value", "error", "reason", "message",
        ],
    )?;
    let entry = u64_text(field(e, "entry"), &format!("{name}.entry"))?;
    let label = string(e.get("label"), &format!("{name}.label"))?;
    let value = || e.get("value").cloned().unwrap_or(Value::Null);
    let error = || -> Read<Option<ExecError>> {
        e.get("error")
            .map(|v| host_error(v, &format!("{name}.error")).map(ExecError::Failed))
            .transpose()
    };
    let status = match e.get("status").and_then(Value::as_str) {
        Some("ok") => Status::Ok(value()),
        Some("failed") => Status::Failed(
            error()?.unwrap_or_else(|| ExecError::failed("Error", "no error was saved")),
        ),
        Some("cancelled") => Status::Cancelled(error()?.map_or_else(|| Ok(value()), Err)),
        Some("settled") => Status::Settled {
            reason: reason_in(field(e, "reason"), &format!("{name}.reason"))?,
            message: string(e.get("message"), &format!("{name}.message"))?,
            error: e
                .get("error")
                .map(|v| host_error(v, &format!("{name}.error")))
                .transpose()?,
        },
        _ => {
            return Err(format!(
                "{name}.status must be one of \"ok\", \"failed\", \"cancelled\", \"settled\", got {}",
                shown(e.get("status"))
            ));
        }
    };
    Ok(EntryOutcome {
        entry,
        label,
        status,
    })
}
