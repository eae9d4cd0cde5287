//! A layer written in JSON (RFC 8259): the same shape as a TOML layer, read into the same
//! spanned tree (`toml::de::DeTable`) with spans into the JSON text, so every diagnostic of
//! `raw.rs` and `validate.rs` points at the JSON's own lines. A layer is read as JSON when its
//! text starts with `{` (after whitespace), which no TOML document does.
//!
//! JSON values map to TOML's: objects to tables, arrays to arrays, strings, `true`/`false`, and
//! numbers to integers (no fraction or exponent) or floats. `null` has no TOML counterpart and
//! a key given twice in one object is refused, as TOML refuses both. Nesting is bounded
//! ([`DEPTH_MAX`]), so a deep document is an error, never a deep recursion.

use std::borrow::Cow;
use std::collections::HashSet;
use std::ops::Range;

use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue};

/// The deepest nesting of objects and arrays a JSON layer may have (a config is four deep).
pub(crate) const DEPTH_MAX: usize = 64;

/// Why a JSON layer could not be read, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JsonLayerError {
    pub(crate) message: String,
    pub(crate) span: Range<usize>,
}

/// Whether `text` is a JSON layer: its first character other than whitespace is `{`.
pub(crate) fn is_json(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

/// Reads a JSON layer whose root is an object.
pub(crate) fn parse(text: &str) -> Result<Spanned<DeTable<'_>>, JsonLayerError> {
    let mut r = Reader { s: text, at: 0 };
    r.ws();
    let start = r.at;
    let root = r.object(0)?;
    let end = r.at;
    r.ws();
    if r.at < text.len() {
        return Err(r.error(
            "text after the end of the top-level object",
            r.at..text.len(),
        ));
    }
    Ok(Spanned::new(start..end, root))
}

struct Reader<'i> {
    s: &'i str,
    at: usize,
}

impl<'i> Reader<'i> {
    fn error(&self, message: &str, span: Range<usize>) -> JsonLayerError {
        JsonLayerError {
            message: message.to_owned(),
            span,
        }
    }

    /// An error at the current byte (or at the end of the text).
    fn here(&self, message: &str) -> JsonLayerError {
        let end = self.s[self.at..]
            .chars()
            .next()
            .map_or(self.at, |c| self.at + c.len_utf8());
        self.error(message, self.at..end)
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.at).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8, what: &str) -> Result<(), JsonLayerError> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else if self.at >= self.s.len() {
            Err(self.here(&format!("the text ends where {what} was expected")))
        } else {
            Err(self.here(&format!("expected {what}")))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Spanned<DeValue<'i>>, JsonLayerError> {
        let start = self.at;
        let value = match self.peek() {
            Some(b'{') => DeValue::Table(self.object(depth + 1)?),
            Some(b'[') => DeValue::Array(self.array(depth + 1)?),
            Some(b'"') => DeValue::String(self.string()?),
            Some(b't') => self.word("true", DeValue::Boolean(true))?,
            Some(b'f') => self.word("false", DeValue::Boolean(false))?,
            Some(b'n') => {
                self.word("null", DeValue::Boolean(false))?;
                return Err(self.error(
                    "null has no TOML counterpart: leave the field out instead",
                    start..self.at,
                ));
            }
            Some(b'-' | b'0'..=b'9') => self.number()?,
            None => return Err(self.here("the text ends where a value was expected")),
            Some(_) => return Err(self.here("expected a value")),
        };
        Ok(Spanned::new(start..self.at, value))
    }

    fn word(&mut self, word: &str, value: DeValue<'i>) -> Result<DeValue<'i>, JsonLayerError> {
        if self.s[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.here("expected a value"))
        }
    }

    /// An object, at its `{`.
    fn object(&mut self, depth: usize) -> Result<DeTable<'i>, JsonLayerError> {
        if depth > DEPTH_MAX {
            return Err(self.here(&format!("nested deeper than {DEPTH_MAX} levels")));
        }
        self.eat(b'{', "`{`")?;
        let mut table = DeTable::new();
        // The names seen, to refuse a repeat without searching the table (linear) each time.
        let mut names: HashSet<Cow<'i, str>> = HashSet::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(table);
        }
        loop {
            self.ws();
            let key_start = self.at;
            if self.peek() != Some(b'"') {
                return Err(self.here("expected a field name in double quotes"));
            }
            let key = self.string()?;
            let key_span = key_start..self.at;
            if !names.insert(key.clone()) {
                return Err(self.error(
                    &format!("the field {key:?} is given twice in one object"),
                    key_span,
                ));
            }
            self.ws();
            self.eat(b':', "`:` after the field name")?;
            self.ws();
            let value = self.value(depth)?;
            table.insert(Spanned::new(key_span, key), value);
            self.ws();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(table);
                }
                None => return Err(self.here("the text ends inside an object")),
                Some(_) => return Err(self.here("expected `,` or `}` after a field")),
            }
        }
    }

    /// An array, at its `[`.
    fn array(&mut self, depth: usize) -> Result<DeArray<'i>, JsonLayerError> {
        if depth > DEPTH_MAX {
            return Err(self.here(&format!("nested deeper than {DEPTH_MAX} levels")));
        }
        self.eat(b'[', "`[`")?;
        let mut array = DeArray::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(array);
        }
        loop {
            self.ws();
            array.push(self.value(depth)?);
            self.ws();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(array);
                }
                None => return Err(self.here("the text ends inside an array")),
                Some(_) => return Err(self.here("expected `,` or `]` after an item")),
            }
        }
    }

    /// A string, at its `"`: borrowed from the text when it has no escapes.
    fn string(&mut self) -> Result<Cow<'i, str>, JsonLayerError> {
        self.eat(b'"', "`\"`")?;
        let start = self.at;
        let mut owned: Option<String> = None;
        loop {
            let Some(c) = self.s[self.at..].chars().next() else {
                return Err(self.error("the text ends inside a string", start - 1..self.at));
            };
            match c {
                '"' => {
                    let text = owned.map_or(Cow::Borrowed(&self.s[start..self.at]), Cow::Owned);
                    self.at += 1;
                    return Ok(text);
                }
                '\\' => {
                    let buf = owned.get_or_insert_with(|| self.s[start..self.at].to_owned());
                    let escape_at = self.at;
                    self.at += 1;
                    let decoded = match self.peek() {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.at += 1;
                            let unit = self.hex4(escape_at)?;
                            let c = if (0xD800..0xDC00).contains(&unit) {
                                // A high surrogate: its low half must follow as `\uDC00`..`\uDFFF`.
                                if !self.s[self.at..].starts_with("\\u") {
                                    return Err(self.error(
                                        "a \\u escape of half a surrogate pair",
                                        escape_at..self.at,
                                    ));
                                }
                                self.at += 2;
                                let low = self.hex4(escape_at)?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return Err(self.error(
                                        "a \\u escape of half a surrogate pair",
                                        escape_at..self.at,
                                    ));
                                }
                                char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
                            } else {
                                char::from_u32(unit)
                            };
                            let Some(c) = c else {
                                return Err(self.error(
                                    "a \\u escape of half a surrogate pair",
                                    escape_at..self.at,
                                ));
                            };
                            buf.push(c);
                            continue;
                        }
                        _ => {
                            return Err(self.error(
                                "an escape JSON does not have",
                                escape_at..(self.at + 1).min(self.s.len()),
                            ));
                        }
                    };
                    buf.push(decoded);
                    self.at += 1;
                }
                c if (c as u32) < 0x20 => {
                    return Err(self.here("a control character in a string (write it as \\u00XX)"));
                }
                c => {
                    if let Some(buf) = owned.as_mut() {
                        buf.push(c);
                    }
                    self.at += c.len_utf8();
                }
            }
        }
    }

    /// Four hex digits of a `\u` escape (`escape_at`: where the escape began).
    fn hex4(&mut self, escape_at: usize) -> Result<u32, JsonLayerError> {
        let digits = self.s.get(self.at..self.at + 4).unwrap_or("");
        match u32::from_str_radix(digits, 16) {
            Ok(unit) if digits.len() == 4 && digits.bytes().all(|b| b.is_ascii_hexdigit()) => {
                self.at += 4;
                Ok(unit)
            }
            _ => {
                let hex = digits.bytes().take_while(u8::is_ascii_hexdigit).count();
                Err(self.error(
                    "a \\u escape needs four hex digits",
                    escape_at..self.at + hex,
                ))
            }
        }
    }

    /// A number by RFC 8259's grammar, read by TOML's own reader (whose grammar includes
    /// JSON's): an integer when it has no fraction and no exponent, else a float.
    fn number(&mut self) -> Result<DeValue<'i>, JsonLayerError> {
        let start = self.at;
        let b = self.s.as_bytes();
        let mut i = self.at;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        let digits = |i: &mut usize| {
            let from = *i;
            while b.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i - from
        };
        let int_at = i;
        let int_len = digits(&mut i);
        let bad = |r: &Self, i: usize| {
            Err(r.error(
                "a number JSON does not allow (digits, with an optional `-`, fraction and exponent; no leading zero)",
                start..i.max(start + 1).min(r.s.len()),
            ))
        };
        if int_len == 0 || (int_len > 1 && b[int_at] == b'0') {
            return bad(self, i);
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            if digits(&mut i) == 0 {
                return bad(self, i);
            }
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            if digits(&mut i) == 0 {
                return bad(self, i);
            }
        }
        self.at = i;
        match DeValue::parse(&self.s[start..i]) {
            Ok(value) => Ok(value.into_inner()),
            Err(_) => Err(self.error("a number too large to read", start..i)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a, 'i>(table: &'a DeTable<'i>, name: &str) -> &'a Spanned<DeValue<'i>> {
        table
            .iter()
            .find(|(k, _)| k.get_ref() == name)
            .map(|(_, v)| v)
            .unwrap()
    }

    fn err(text: &str) -> (String, Range<usize>) {
        let e = parse(text).expect_err(text);
        (e.message, e.span)
    }

    #[test]
    fn reads_every_kind_of_value_with_spans_into_the_text() {
        let text = r#" { "a": { "n": -12, "f": 2.5e-1, "s": "x\u00e9\n", "t": true, "l": [1, "b"], "e": {} } } "#;
        let root = parse(text).unwrap();
        assert_eq!(root.span(), 1..text.len() - 1);
        let DeValue::Table(a) = get(root.get_ref(), "a").get_ref() else {
            panic!("a is a table")
        };
        let n = get(a, "n");
        assert_eq!(&text[n.span()], "-12");
        assert_eq!(n.get_ref().as_integer().map(|i| i.as_str()), Some("-12"));
        assert!(get(a, "f").get_ref().is_float());
        assert_eq!(get(a, "s").get_ref().as_str(), Some("xé\n"));
        assert_eq!(get(a, "t").get_ref().as_bool(), Some(true));
        assert_eq!(get(a, "l").get_ref().as_array().map(|l| l.len()), Some(2));
        let (key, _) = a.iter().find(|(k, _)| k.get_ref() == "e").unwrap();
        assert_eq!(&text[key.span()], "\"e\"");
        assert!(is_json(text) && !is_json("[conversation]\n") && !is_json(""));
    }

    #[test]
    fn refuses_what_json_or_toml_cannot_say_and_points_at_it() {
        let cases: &[(&str, &str, &str)] = &[
            (r#"{"a": null}"#, "null has no TOML counterpart", "null"),
            (r#"{"a": 1, "a": 2}"#, "given twice", "\"a\""),
            (r#"{"a": 01}"#, "no leading zero", "01"),
            (r#"{"a": 1.}"#, "no leading zero", "1."),
            (r#"{"a": -}"#, "no leading zero", "-"),
            (r#"{"a": "\x"}"#, "an escape JSON does not have", "\\x"),
            (r#"{"a": "\ud800"}"#, "half a surrogate pair", "\\ud800"),
            (r#"{"a": "\u12"}"#, "four hex digits", "\\u12"),
            ("{\"a\": \"\t\"}", "control character", "\t"),
            (r#"{"a": 1 "b": 2}"#, "expected `,` or `}`", "\""),
            (r#"{"a": [1 2]}"#, "expected `,` or `]`", "2"),
            (r#"{a: 1}"#, "field name in double quotes", "a"),
            (r#"{"a": 1} x"#, "text after the end", "x"),
            (r#"{"a": tru}"#, "expected a value", "t"),
            (r#"{"a": 1"#, "ends inside an object", ""),
            (r#"{"a": "b"#, "ends inside a string", "\"b"),
        ];
        for &(text, message, at) in cases {
            let (got, span) = err(text);
            assert!(got.contains(message), "{text}: {got}");
            assert_eq!(&text[span], at, "{text}: {got}");
        }
        let deep = format!("{{\"a\": {}1{}}}", "[".repeat(100), "]".repeat(100));
        assert!(err(&deep).0.contains("nested deeper than 64"));
    }
}
