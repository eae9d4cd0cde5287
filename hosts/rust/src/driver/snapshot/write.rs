//! Writing the snapshot's JSON text, as `JSON.stringify` (with non-ASCII escaped) and Python's
//! `json.dumps(..., separators=(",", ":"))` write it.

use std::fmt::Write as _;

use serde_json::Value;
use turnstile_engine::schedule::{AbortCause, Outcome, Reason, Saved, SavedState};

use super::super::errors::HostError;
use super::super::outcome::{CallOutcome, EntryOutcome, Status};

pub(super) fn error_field(out: &mut String, e: &HostError) {
    out.push_str("\"error\":{\"name\":");
    string_json(out, &e.name);
    out.push_str(",\"message\":");
    string_json(out, &e.message);
    out.push('}');
}

/// A retired batch as the snapshot keeps it: its number and its outcomes as `run` gave them.
pub(crate) fn retired_json(batch: u64, outcomes: &[CallOutcome]) -> String {
    let mut out = format!("{{\"batch\":\"{batch}\",\"outcomes\":[");
    for (i, call) in outcomes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"id\":");
        string_json(&mut out, &call.id);
        out.push_str(",\"tool\":");
        string_json(&mut out, &call.tool);
        out.push_str(",\"entries\":[");
        for (j, o) in call.entries.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            outcome_json(&mut out, o);
        }
        out.push_str("]}");
    }
    out.push_str("]}");
    out
}

fn outcome_json(out: &mut String, o: &EntryOutcome) {
    let _ = write!(out, "{{\"entry\":\"{}\",\"label\":", o.entry);
    string_json(out, &o.label);
    let _ = write!(out, ",\"status\":\"{}\"", o.status.kind());
    match &o.status {
        Status::Ok(v) | Status::Cancelled(Ok(v)) => {
            out.push_str(",\"value\":");
            value_json(out, v);
        }
        Status::Failed(e) | Status::Cancelled(Err(e)) => {
            out.push(',');
            error_field(out, &e.to_host_error());
        }
        Status::Settled {
            reason,
            message,
            error,
        } => {
            out.push_str(",\"reason\":");
            out.push_str(&reason_json(*reason));
            out.push_str(",\"message\":");
            string_json(out, message);
            if let Some(e) = error {
                out.push(',');
                error_field(out, e);
            }
        }
    }
    out.push('}');
}

/// A reason as the snapshot writes it: `"rejected"`, `{"stopped":1}`, `{"timed-out":"cancelled"}`.
pub(crate) fn reason_json(r: Reason) -> String {
    match r {
        Reason::Stopped { after } => format!("{{\"stopped\":{after}}}"),
        Reason::RateLimited { retries, .. } => format!("{{\"rate-limited\":{retries}}}"),
        Reason::TimedOut { cause } => format!(
            "{{\"timed-out\":\"{}\"}}",
            match cause {
                AbortCause::Cancel => "cancelled",
                AbortCause::Deadline => "deadline",
            }
        ),
        other => format!("\"{}\"", other.name()),
    }
}

/// `Scheduler::unfinished()` with the WIT's names.
pub(crate) fn state_json(s: &SavedState) -> String {
    let mut out = format!(
        "{{\"version\":{},\"policy\":\"{}\",\"next-batch\":\"{}\",\"next-entry\":\"{}\",\"batches\":[",
        s.version, s.policy, s.next_batch, s.next_entry
    );
    for (i, b) in s.batches.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{{\"batch\":\"{}\",\"first\":\"{}\",\"cancelled\":{},\"limits\":{{",
            b.batch.0, b.first.0, b.cancelled
        );
        let mut limits = Vec::new();
        if let Some(ms) = b.limits.execution_ms {
            limits.push(format!("\"execution-ms\":{ms}"));
        }
        if let Some(ms) = b.limits.abort_grace_ms {
            limits.push(format!("\"abort-grace-ms\":{ms}"));
        }
        out.push_str(&limits.join(","));
        out.push_str("},\"calls\":[");
        for (j, c) in b.calls.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            out.push_str("{\"id\":");
            string_json(&mut out, &c.id);
            out.push_str(",\"tool\":");
            string_json(&mut out, &c.tool);
            if let Some(n) = c.operations {
                let _ = write!(out, ",\"operations\":{n}");
            }
            // One key is written `"key"`, as 0.2 wrote it; a key set's `"keys"`; none, nothing.
            if let [key] = c.keys.as_slice() {
                out.push_str(",\"key\":");
                string_json(&mut out, key);
            } else if c.keys.len() > 1 {
                out.push_str(",\"keys\":[");
                for (k, key) in c.keys.iter().enumerate() {
                    if k > 0 {
                        out.push(',');
                    }
                    string_json(&mut out, key);
                }
                out.push(']');
            }
            out.push_str(",\"entries\":[");
            for (k, &(op, state)) in c.entries.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                let state = match state {
                    Saved::Started => "\"started\"".to_owned(),
                    Saved::Ended(Outcome::Ok) => "{\"ended\":\"ok\"}".to_owned(),
                    Saved::Ended(Outcome::Failed) => "{\"ended\":\"failed\"}".to_owned(),
                    Saved::Settled(r) => format!("{{\"settled\":{}}}", reason_json(r)),
                };
                let _ = write!(out, "{{\"operation\":{op},\"state\":{state}}}");
            }
            out.push_str("]}");
        }
        out.push_str("]}");
    }
    out.push_str("]}");
    out
}

/// A JSON value as `JSON.stringify` writes it, non-ASCII escaped (Python's `ensure_ascii`).
pub(crate) fn value_json(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) => string_json(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                value_json(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string_json(out, k);
                out.push(':');
                value_json(out, item);
            }
            out.push('}');
        }
    }
}

/// A string as `JSON.stringify` writes it, every character outside printable ASCII escaped.
pub(crate) fn string_json(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}
