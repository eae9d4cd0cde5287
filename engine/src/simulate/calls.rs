//! The call syntax of a batch, as a case file and `--calls` write it: `ID TOOL`, `ID TOOL*N`
//! (a fan-out call of N operations) or `ID TOOL {JSON}` (the arguments, given as written).

use crate::limits::SIMULATE_DURATION_MS_MAX;

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
    if !arguments.is_empty() {
        let mut found = Vec::new();
        if let Err(e) = crate::json::scalar_fields(&arguments, &[], &mut found) {
            let what = match e {
                crate::json::JsonError::Invalid => "not valid JSON",
                crate::json::JsonError::NotObject => "JSON, but not an object",
            };
            return Err(format!(
                "`{}`: the arguments {arguments} are {what}; write them as a JSON object \
                 (`ID TOOL {{\"path\": \"a\"}}`)",
                text.trim()
            ));
        }
    }
    Ok(Written {
        id,
        tool,
        operations,
        arguments: (!arguments.is_empty()).then_some(arguments),
    })
}

/// One `--duration` value: `MS` (every execution) or `LABEL=MS` (one entry's), whole
/// milliseconds up to [`SIMULATE_DURATION_MS_MAX`].
pub(crate) fn read_duration(text: &str) -> Result<(Option<String>, u64), String> {
    let bad = || {
        format!(
            "--duration: expected MS or LABEL=MS in whole milliseconds (at most \
             {SIMULATE_DURATION_MS_MAX}), got `{text}`"
        )
    };
    let (label, ms) = match text.rsplit_once('=') {
        Some((label, ms)) if !label.is_empty() => (Some(label.to_owned()), ms),
        Some(_) => return Err(bad()),
        None => (None, text),
    };
    if ms.is_empty() || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match ms.parse::<u64>() {
        Ok(ms) if ms <= SIMULATE_DURATION_MS_MAX => Ok((label, ms)),
        _ => Err(bad()),
    }
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
        let e = read_call("w1 write {path: a}").unwrap_err();
        assert!(
            e.contains("are not valid JSON; write them as a JSON object"),
            "{e}"
        );
        let e = read_call("w1 write [1, 2]").unwrap_err();
        assert!(e.contains("are JSON, but not an object"), "{e}");
    }

    #[test]
    fn durations_are_whole_milliseconds_up_to_the_limit() {
        assert_eq!(read_duration("25"), Ok((None, 25)));
        assert_eq!(read_duration("a=b=5"), Ok((Some("a=b".to_owned()), 5)));
        assert_eq!(
            read_duration("9007199254740991"),
            Ok((None, SIMULATE_DURATION_MS_MAX))
        );
        for bad in [
            "",
            "=5",
            "x=",
            "soon",
            "-1",
            "+1",
            "1.5",
            "9007199254740992",
            "18446744073709551616",
        ] {
            let e = read_duration(bad).unwrap_err();
            assert!(e.contains("at most 9007199254740991"), "{bad}: {e}");
        }
    }

    #[test]
    fn commas_inside_arguments_do_not_split() {
        let calls = split_calls("a t {\"p\": [1, 2], \"q\": \"x,y\"}, b t").unwrap();
        assert_eq!(calls, ["a t {\"p\": [1, 2], \"q\": \"x,y\"}", "b t"]);
        assert!(split_calls("a t,, b t").unwrap_err().contains("empty call"));
        assert!(split_calls("a t, b").unwrap_err().contains("bad call"));
    }
}
