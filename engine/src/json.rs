//! A strict reader of a call's arguments (JSON text, RFC 8259) that keeps only what key
//! templates need: the top-level fields of an object whose values are strings, numbers or
//! booleans. The whole text is checked, so an invalid document is never half-read. Nesting
//! has no depth limit of its own (only the size of the text bounds it) and is read without
//! recursion, so a deep field never makes a call take its template's fallback key.

/// Why a call's arguments could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JsonError {
    /// Not valid JSON.
    Invalid,
    /// Valid JSON, but not an object.
    NotObject,
}

/// A top-level field's value, as a key template substitutes it: a string's contents, a number
/// as written, `true` or `false`. `None` for `null`, arrays and objects.
pub(crate) fn scalar_fields(
    text: &str,
    wanted: &[String],
    found: &mut Vec<Option<String>>,
) -> Result<(), JsonError> {
    found.clear();
    found.resize(wanted.len(), None);
    let mut r = Reader {
        s: text.as_bytes(),
        at: 0,
    };
    r.ws();
    if r.peek() != Some(b'{') {
        // Check the rest so that "not an object" is only said of valid JSON.
        r.value()?;
        r.ws();
        return if r.at == r.s.len() {
            Err(JsonError::NotObject)
        } else {
            Err(JsonError::Invalid)
        };
    }
    r.at += 1;
    r.ws();
    if r.peek() == Some(b'}') {
        r.at += 1;
    } else {
        loop {
            r.ws();
            let name = r.string()?;
            r.ws();
            r.expect(b':')?;
            r.ws();
            let start = r.at;
            let kind = r.value()?;
            let slot = if name.contains('\\') {
                let name = unescape(name);
                wanted.iter().position(|w| *w == name)
            } else {
                wanted.iter().position(|w| w == name)
            };
            if let Some(i) = slot {
                // A repeated field: the last one wins, as in JavaScript's JSON.parse.
                found[i] = match kind {
                    Kind::String => Some(unescape(&text[start + 1..r.at - 1])),
                    Kind::Scalar => Some(text[start..r.at].to_owned()),
                    Kind::Other => None,
                };
            }
            r.ws();
            match r.next() {
                Some(b',') => {}
                Some(b'}') => break,
                _ => return Err(JsonError::Invalid),
            }
        }
    }
    r.ws();
    if r.at == r.s.len() {
        Ok(())
    } else {
        Err(JsonError::Invalid)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    String,
    Scalar,
    Other,
}

struct Reader<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn expect(&mut self, b: u8) -> Result<(), JsonError> {
        if self.next() == Some(b) {
            Ok(())
        } else {
            Err(JsonError::Invalid)
        }
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), JsonError> {
        if self.s[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(())
        } else {
            Err(JsonError::Invalid)
        }
    }

    /// One value, of any depth: a scalar directly, an array or object by [`Reader::nested`].
    fn value(&mut self) -> Result<Kind, JsonError> {
        match self.peek() {
            Some(b'[' | b'{') => self.nested().map(|()| Kind::Other),
            _ => self.scalar(),
        }
    }

    fn scalar(&mut self) -> Result<Kind, JsonError> {
        match self.peek() {
            Some(b'"') => self.string().map(|_| Kind::String),
            Some(b't') => self.literal(b"true").map(|()| Kind::Scalar),
            Some(b'f') => self.literal(b"false").map(|()| Kind::Scalar),
            Some(b'n') => self.literal(b"null").map(|()| Kind::Other),
            Some(b'-' | b'0'..=b'9') => self.number().map(|()| Kind::Scalar),
            _ => Err(JsonError::Invalid),
        }
    }

    /// An array or object and everything in it, checked but not kept. No recursion: `open`
    /// holds the closing bracket of every container not yet closed, innermost last, so any
    /// depth the text can hold is read (one byte of stack per level, in one vector).
    fn nested(&mut self) -> Result<(), JsonError> {
        let mut open: Vec<u8> = Vec::new();
        loop {
            // A value is expected here.
            self.ws();
            match self.peek() {
                Some(b'[') => {
                    self.at += 1;
                    self.ws();
                    if self.peek() == Some(b']') {
                        self.at += 1;
                    } else {
                        open.push(b']');
                        continue;
                    }
                }
                Some(b'{') => {
                    self.at += 1;
                    self.ws();
                    if self.peek() == Some(b'}') {
                        self.at += 1;
                    } else {
                        open.push(b'}');
                        self.member_name()?;
                        continue;
                    }
                }
                _ => {
                    self.scalar()?;
                }
            }
            // A value ended: close containers until one goes on with a `,`.
            loop {
                let Some(&close) = open.last() else {
                    return Ok(());
                };
                self.ws();
                match self.next() {
                    Some(b',') => {
                        if close == b'}' {
                            self.member_name()?;
                        }
                        break;
                    }
                    Some(b) if b == close => {
                        open.pop();
                    }
                    _ => return Err(JsonError::Invalid),
                }
            }
        }
    }

    /// An object member's name and its `:`.
    fn member_name(&mut self) -> Result<(), JsonError> {
        self.ws();
        self.string()?;
        self.ws();
        self.expect(b':')
    }

    /// A string; returns its raw contents between the quotes (escapes not yet decoded).
    fn string(&mut self) -> Result<&'a str, JsonError> {
        self.expect(b'"')?;
        let start = self.at;
        loop {
            match self.next() {
                None => return Err(JsonError::Invalid),
                Some(b'"') => break,
                Some(b'\\') => match self.next() {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {}
                    Some(b'u') => {
                        for _ in 0..4 {
                            if !self.next().is_some_and(|b| b.is_ascii_hexdigit()) {
                                return Err(JsonError::Invalid);
                            }
                        }
                    }
                    _ => return Err(JsonError::Invalid),
                },
                Some(0..=0x1f) => return Err(JsonError::Invalid),
                Some(_) => {}
            }
        }
        // The text is a `&str` and quotes are ASCII, so the contents are valid UTF-8.
        std::str::from_utf8(&self.s[start..self.at - 1]).map_err(|_| JsonError::Invalid)
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Result<(), JsonError> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(JsonError::Invalid),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return Err(JsonError::Invalid);
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(JsonError::Invalid);
            }
        }
        Ok(())
    }
}

/// Decodes a checked string's escapes. A lone surrogate becomes U+FFFD.
fn unescape(raw: &str) -> String {
    if !raw.contains('\\') {
        return raw.to_owned();
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('u') => {
                let hi = hex4(&mut chars);
                let c = if (0xD800..0xDC00).contains(&hi) {
                    let mut ahead = chars.clone();
                    if ahead.next() == Some('\\') && ahead.next() == Some('u') {
                        let lo = hex4(&mut ahead);
                        if (0xDC00..0xE000).contains(&lo) {
                            chars = ahead;
                            char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
                        } else {
                            None
                        }
                    } else {
                        None
                    }
                } else {
                    char::from_u32(hi)
                };
                out.push(c.unwrap_or('\u{FFFD}'));
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

fn hex4(chars: &mut std::str::Chars<'_>) -> u32 {
    (0..4).fold(0, |n, _| {
        n * 16 + chars.next().and_then(|c| c.to_digit(16)).unwrap_or(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

    fn read(text: &str, wanted: &[&str]) -> Result<Vec<Option<String>>, JsonError> {
        let wanted: Vec<String> = wanted.iter().map(|w| (*w).to_owned()).collect();
        let mut found = Vec::new();
        scalar_fields(text, &wanted, &mut found).map(|()| found)
    }

    #[test]
    fn invalid_documents_are_refused_whole() {
        for bad in [
            "",
            " ",
            "{",
            "}",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "{\"a\":1 \"b\":2}",
            "{'a':1}",
            "{\"a\":01}",
            "{\"a\":1.}",
            "{\"a\":1e}",
            "{\"a\":-}",
            "{\"a\":tru}",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\\u12g4\"}",
            "{\"a\":\"tab\there\"}",
            "{\"a\":[1,]}",
            "{\"a\":1} x",
            "{\"a\":[1}",
            "{\"a\":{\"b\":1}",
            "{a:1}",
            "nul",
        ] {
            assert_eq!(read(bad, &["a"]), Err(JsonError::Invalid), "{bad:?}");
        }
        // Deeply nested but broken documents are refused whole, at any depth.
        for broken in [
            format!("{{\"a\":{}", "[".repeat(DEEP)),
            format!("{{\"a\":{}{}}}", "[".repeat(DEEP), "]".repeat(DEEP - 1)),
            format!(
                "{{\"a\":{}}}{}}}",
                "{\"b\":".repeat(DEEP),
                "}".repeat(DEEP - 1)
            ),
            format!("{{\"a\":{}1,{}}}", "[".repeat(DEEP), "]".repeat(DEEP)),
            format!("{{\"a\":{}{}}}", "[".repeat(DEEP), "}".repeat(DEEP)),
            format!("{{\"a\":{}{}}}", "{\"b\":[".repeat(DEEP), "}]".repeat(DEEP)),
            format!("{}{}", "[".repeat(DEEP), "]".repeat(DEEP + 1)),
            format!("{{\"a\":{}1{}}}", "[".repeat(DEEP), "}".repeat(DEEP)),
            "{\"a\":[1}}".to_owned(),
            "{\"a\":{\"b\":1]}".to_owned(),
            "{\"a\":{\"b\":1,2}}".to_owned(),
            "{\"a\":{\"b\":1,\"c\"}}".to_owned(),
            "{\"a\":{\"b\" 1}}".to_owned(),
            "{\"a\":{1:1}}".to_owned(),
        ] {
            assert_eq!(read(&broken, &["a"]), Err(JsonError::Invalid));
        }
    }

    /// Deeper than any real call, and far deeper than a recursive reader's stack allows.
    const DEEP: usize = 60_000;

    #[test]
    fn any_depth_is_read_without_recursion() {
        let arrays = format!("{}{}", "[".repeat(DEEP), "]".repeat(DEEP));
        let objects = format!("{}1{}", "{\"b\":".repeat(DEEP), "}".repeat(DEEP));
        let mixed = format!("{}true{}", "{\"b\":[ ".repeat(DEEP), " ]}".repeat(DEEP));
        for deep in [&arrays, &objects, &mixed] {
            let text = format!("{{\"x\":{deep},\"path\":\"/a\",\"y\":{deep}}}");
            assert_eq!(
                read(&text, &["path", "x"]),
                Ok(vec![Some("/a".to_owned()), None])
            );
            // A deep document alone: read whole, without the field.
            let alone = if deep.starts_with('[') {
                Err(JsonError::NotObject)
            } else {
                Ok(vec![None])
            };
            assert_eq!(read(deep, &["path"]), alone);
        }
        let wide = r#"{"o":{"b":1,"c":[2,{"d":null,"e":"}"}],"f":{}},"path":"/a"}"#;
        assert_eq!(read(wide, &["path"]), Ok(vec![Some("/a".to_owned())]));
        let siblings = format!("{{\"x\":[{}],\"path\":2}}", "[[],{}],".repeat(DEEP) + "[]");
        assert_eq!(read(&siblings, &["path"]), Ok(vec![Some("2".to_owned())]));
    }

    #[test]
    fn valid_non_objects_say_so() {
        for text in ["1", "\"a\"", "[1]", "null", " true "] {
            assert_eq!(read(text, &["a"]), Err(JsonError::NotObject), "{text:?}");
        }
    }

    #[test]
    fn scalars_substitute_and_the_rest_do_not() {
        let text = r#" { "path" : "a\/b\n\u00e9\ud83d\ude00", "n": -1.5e3, "t": true,
            "z": null, "l": [1, {"x": "y"}], "o": {"path": "inner"}, "f": false } "#;
        let got = read(text, &["path", "n", "t", "z", "l", "o", "f", "missing"]).unwrap();
        assert_eq!(
            got,
            vec![
                Some("a/b\né😀".to_owned()),
                Some("-1.5e3".to_owned()),
                Some("true".to_owned()),
                None,
                None,
                None,
                Some("false".to_owned()),
                None,
            ]
        );
        assert_eq!(
            read(r#"{"a":"1","a":"2"}"#, &["a"]).unwrap(),
            vec![Some("2".to_owned())]
        );
        assert_eq!(
            read(r#"{"a":"\ud800x"}"#, &["a"]).unwrap(),
            vec![Some("\u{FFFD}x".to_owned())]
        );
        assert_eq!(read("{}", &["a"]).unwrap(), vec![None]);
    }
}
