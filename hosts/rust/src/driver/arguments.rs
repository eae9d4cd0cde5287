//! Which call arguments reach the engine: the argument names each tool's key templates read,
//! and the JSON text of only those fields for each call.

use std::collections::HashMap;

use serde_json::Value;

use super::options::Call;
use super::policy::Policy;

/// Each call's arguments text for the engine ([`arguments_text`] over its tool's `templates`;
/// nothing for a tool whose keys read no argument).
pub(super) fn arguments_texts(
    templates: &HashMap<String, Vec<String>>,
    calls: &[Call],
) -> Vec<Option<String>> {
    calls
        .iter()
        .map(|c| {
            let names = templates.get(&c.tool)?;
            arguments_text(&c.arguments, names)
        })
        .collect()
}

/// The top-level argument names each tool's keys read (every member's of a key set: its
/// template's, then its path's, each once, in written order), for the tools that have any.
pub(super) fn templates_of(policy: &Policy) -> HashMap<String, Vec<String>> {
    let mut out = HashMap::new();
    for tool in policy.tools() {
        let mut names: Vec<String> = Vec::new();
        for c in &tool.concurrency {
            let templates = [c.key.template(), c.path.as_ref().and_then(|p| p.template())];
            for field in templates.into_iter().flatten().flat_map(|t| t.fields()) {
                if !names.contains(field) {
                    names.push(field.clone());
                }
            }
        }
        if !names.is_empty() {
            out.insert(tool.name.clone(), names);
        }
    }
    out
}

/// The JSON text of a call's arguments for the engine: only the fields its tool's key
/// templates name (`names`) that can make a key (a string, a number, a boolean), as the JS and
/// Python drivers send them. Nothing when the arguments are not an object, when no named field
/// can make a key, or when the text is over the engine's size limit: the call then takes the
/// template's own key (limited, never unbounded). A large field no template names (a file's
/// `content`) never moves a call off its key.
fn arguments_text(arguments: &Value, names: &[String]) -> Option<String> {
    let arguments = arguments.as_object()?;
    let mut picked = serde_json::Map::new();
    for name in names {
        if let Some(value @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) =
            arguments.get(name)
        {
            picked.insert(name.clone(), value.clone());
        }
    }
    if picked.is_empty() {
        return None;
    }
    let text = serde_json::to_string(&picked).ok()?;
    (text.len() <= turnstile_engine::limits::ARGUMENTS_BYTES_MAX).then_some(text)
}
