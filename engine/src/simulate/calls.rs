//! The call syntax of a batch, as a case file and `--calls` write it: `ID TOOL`, `ID TOOL*N`
//! (a fan-out call of N operations) or `ID TOOL {JSON}` (the arguments, given as written).

/// One call as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) id: String,
    pub(crate) tool: String,
    pub(crate) operations: Option<u32>,
    pub(crate) arguments: Option<String>,
}

/// Reads one call; `Err` says what is wrong with it.
pub(crate) fn read_call(text: &str) -> Result<Written, String> {
    let first_word = |s: &str| -> (String, String) {
        let s = s.trim();
        let (word, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
        (word.to_owned(), rest.trim().to_owned())
    };
    let (id, rest) = first_word(text);
    let (tool, arguments) = first_word(&rest);
    if id.is_empty() || tool.is_empty() {
        return Err(format!(
            "bad call {text:?}: write `ID TOOL`, `ID TOOL*N` or `ID TOOL {{JSON}}`"
        ));
    }
    let (tool, operations) = match tool.split_once('*') {
        None => (tool, None),
        Some((tool, count)) => match count.parse::<u32>() {
            Ok(0) => {
                return Err(format!(
                    "`{}`: a fan-out call has at least one operation (`ID TOOL*N`, N >= 1)",
                    text.trim()
                ));
            }
            Ok(n) => (tool.to_owned(), Some(n)),
            Err(_) => return Err(format!("bad operation count in {text:?}")),
        },
    };
    Ok(Written {
        id,
        tool,
        operations,
        arguments: (!arguments.is_empty()).then_some(arguments),
    })
}

/// Splits one `--calls` text into its calls: separated by commas, except a comma inside a
/// call's JSON arguments (in brackets, braces or a string).
pub(crate) fn split_calls(text: &str) -> Result<Vec<String>, String> {
    let mut calls = Vec::new();
    let (mut depth, mut in_string, mut escaped, mut start) = (0usize, false, false, 0);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '{' | '[' if !in_string => depth += 1,
            '}' | ']' if !in_string => depth = depth.saturating_sub(1),
            ',' if !in_string && depth == 0 => {
                calls.push(text[start..i].trim().to_owned());
                start = i + 1;
            }
            _ => {}
        }
    }
    calls.push(text[start..].trim().to_owned());
    if calls.iter().any(String::is_empty) {
        return Err(format!(
            "empty call in {text:?}: separate calls with one comma each"
        ));
    }
    for call in &calls {
        read_call(call)?;
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

    #[test]
    fn calls_read_as_written() {
        let c = read_call(" w1  fs_write {\"path\": \"a, b\"} ").unwrap();
        assert_eq!(
            (c.id.as_str(), c.tool.as_str(), c.operations),
            ("w1", "fs_write", None)
        );
        assert_eq!(c.arguments.as_deref(), Some("{\"path\": \"a, b\"}"));
        assert_eq!(read_call("d del*3").unwrap().operations, Some(3));
        assert!(
            read_call("d del*0")
                .unwrap_err()
                .contains("at least one operation")
        );
        assert!(
            read_call("d del*x")
                .unwrap_err()
                .contains("bad operation count")
        );
        assert!(read_call("lonely").unwrap_err().contains("bad call"));
    }

    #[test]
    fn commas_inside_arguments_do_not_split() {
        let calls = split_calls("a t {\"p\": [1, 2], \"q\": \"x,y\"}, b t").unwrap();
        assert_eq!(calls, ["a t {\"p\": [1, 2], \"q\": \"x,y\"}", "b t"]);
        assert!(split_calls("a t,, b t").unwrap_err().contains("empty call"));
        assert!(split_calls("a t, b").unwrap_err().contains("bad call"));
    }
}
