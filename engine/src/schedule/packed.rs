//! A batch as it crosses the component boundary: two texts and two short lists, so that a batch
//! of any size is a few values for the host to lower (a record per call costs a host such as
//! wasmtime-py microseconds per field). [`unpack`] turns it into [`Call`]s borrowing from it,
//! or says why it cannot; [`Scheduler::submit_batch_with`](super::Scheduler::submit_batch_with)
//! then judges the calls as always.

use super::batch::Call;
use super::error::{SubmitError, SubmitErrorCode};
use crate::limits::CALLS_PER_BATCH_MAX;

/// The calls of a packed batch, in written order: `ids` and `tools` hold one name per line,
/// each followed by a newline; `fan_outs` (call index, operations) marks the fan-out envelopes;
/// `arguments` (call index, JSON text) carries the arguments of the calls that need them.
pub fn unpack<'a>(
    ids: &'a str,
    tools: &'a str,
    fan_outs: impl IntoIterator<Item = (u32, u32)>,
    arguments: impl IntoIterator<Item = (u32, &'a str)>,
) -> Result<Vec<Call<'a>>, SubmitError> {
    // Counted before anything is allocated: a text of ten million lines is refused, not laid out.
    let count = lines(ids, "ids")?;
    let tool_count = lines(tools, "tools")?;
    if count != tool_count {
        return Err(malformed(format!(
            "ids name {count} calls and tools {tool_count}; give one tool per call"
        )));
    }
    if count > CALLS_PER_BATCH_MAX {
        return Err(SubmitError::new(
            SubmitErrorCode::TooLarge,
            format!("{count} calls in one batch; at most {CALLS_PER_BATCH_MAX} are accepted"),
        ));
    }
    let mut calls: Vec<Call<'a>> = ids
        .split_terminator('\n')
        .zip(tools.split_terminator('\n'))
        .map(|(id, tool)| Call {
            id,
            tool,
            operations: None,
            arguments: None,
        })
        .collect();
    debug_assert_eq!(calls.len(), count);
    for (index, operations) in fan_outs {
        let call = at(&mut calls, index, "fan-outs")?;
        if call.operations.replace(operations).is_some() {
            return Err(malformed(format!("fan-outs lists call {index} twice")));
        }
    }
    for (index, json) in arguments {
        let call = at(&mut calls, index, "arguments")?;
        if call.arguments.replace(json).is_some() {
            return Err(malformed(format!("arguments lists call {index} twice")));
        }
    }
    Ok(calls)
}

/// How many names `text` holds, one per line, each followed by a newline.
fn lines(text: &str, what: &str) -> Result<usize, SubmitError> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(malformed(format!(
            "{what} must end with a newline (each name is followed by one)"
        )));
    }
    Ok(text.bytes().filter(|&b| b == b'\n').count())
}

fn at<'c, 'a>(
    calls: &'c mut [Call<'a>],
    index: u32,
    what: &str,
) -> Result<&'c mut Call<'a>, SubmitError> {
    let len = calls.len();
    calls.get_mut(index as usize).ok_or_else(|| {
        malformed(format!(
            "{what} names call {index}, but the batch has {len} calls (indexes from 0)"
        ))
    })
}

fn malformed(message: String) -> SubmitError {
    SubmitError::new(SubmitErrorCode::MalformedBatch, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<Vec<Call<'_>>, SubmitError>) -> SubmitErrorCode {
        r.expect_err("refused").code
    }

    #[test]
    fn unpacks_in_written_order() {
        let calls = unpack("a\nb\nc\n", "t\nf\nt\n", [(1, 3)], [(2, "{\"p\":1}")]).unwrap();
        let got: Vec<_> = calls
            .iter()
            .map(|c| (c.id, c.tool, c.operations, c.arguments))
            .collect();
        assert_eq!(
            got,
            [
                ("a", "t", None, None),
                ("b", "f", Some(3), None),
                ("c", "t", None, Some("{\"p\":1}")),
            ]
        );
        assert!(unpack("", "", [], []).unwrap().is_empty());
        // An empty name is a call; `submit_batch` refuses it as `invalid-id`.
        assert_eq!(unpack("\n", "t\n", [], []).unwrap()[0].id, "");
    }

    #[test]
    fn refuses_what_cannot_be_laid_out() {
        use SubmitErrorCode::{MalformedBatch, TooLarge};
        assert_eq!(code(unpack("a\nb\n", "t\n", [], [])), MalformedBatch);
        assert_eq!(code(unpack("a", "t\n", [], [])), MalformedBatch);
        assert_eq!(code(unpack("a\n", "t", [], [])), MalformedBatch);
        assert_eq!(code(unpack("", "t\n", [], [])), MalformedBatch);
        assert_eq!(code(unpack("a\n", "t\n", [(1, 2)], [])), MalformedBatch);
        assert_eq!(
            code(unpack("a\n", "t\n", [(0, 2), (0, 3)], [])),
            MalformedBatch
        );
        assert_eq!(code(unpack("a\n", "t\n", [], [(1, "{}")])), MalformedBatch);
        assert_eq!(
            code(unpack("a\n", "t\n", [], [(0, "{}"), (0, "{}")])),
            MalformedBatch
        );
        let many = "x\n".repeat(CALLS_PER_BATCH_MAX + 1);
        assert_eq!(code(unpack(&many, &many, [], [])), TooLarge);
    }
}
