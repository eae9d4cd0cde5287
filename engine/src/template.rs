//! Key templates: `concurrency = { key = "fs:{path}" }` names one key per value of the call's
//! `path` argument. A placeholder `{name}` names a top-level field of the call's arguments
//! (JSON); `{{` and `}}` are a literal brace. Expanding reads the arguments once
//! (`json.rs`).

use crate::json::{self, JsonError};
use crate::limits::{KEY_BYTES_MAX, PLACEHOLDERS_MAX};

/// A parsed template with at least one placeholder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyTemplate {
    parts: Vec<Part>,
    fields: Vec<String>,
    /// The literal texts around the placeholders: before the first, between each two (empty
    /// between adjacent placeholders), after the last; one more than the placeholders.
    segments: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    /// An index into `fields`.
    Field(usize),
}

/// Why a key's text is not a valid template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TemplateError {
    /// Byte offset in the key of the brace at fault.
    pub(crate) at: usize,
    pub(crate) message: String,
}

/// Why a call's key could not be expanded; the call then takes the template's own key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unexpanded {
    /// The host gave no arguments.
    NoArguments,
    /// The arguments are not valid JSON.
    InvalidJson,
    /// The arguments are JSON but not an object.
    NotObject,
    /// A field is missing, or is `null`, an array or an object.
    Field(String),
    /// The expanded key would be longer than `KEY_BYTES_MAX` bytes (the one key length: no key
    /// is made that a shared-key store would refuse).
    TooLong,
}

impl KeyTemplate {
    /// `Ok(None)` for a key without placeholders (a plain key).
    pub(crate) fn parse(text: &str) -> Result<Option<Self>, TemplateError> {
        let mut parts = Vec::new();
        let mut fields: Vec<String> = Vec::new();
        let mut literal = String::new();
        let mut rest = text.char_indices().peekable();
        while let Some((at, c)) = rest.next() {
            match c {
                '{' if rest.peek().is_some_and(|&(_, n)| n == '{') => {
                    rest.next();
                    literal.push('{');
                }
                '}' if rest.peek().is_some_and(|&(_, n)| n == '}') => {
                    rest.next();
                    literal.push('}');
                }
                '}' => {
                    return Err(TemplateError {
                        at,
                        message: "`}` without an opening `{` (write `}}` for a literal brace)"
                            .to_owned(),
                    });
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match rest.next() {
                            Some((_, '}')) => break,
                            Some((_, '{')) | None => {
                                return Err(TemplateError {
                                    at,
                                    message: "`{` is not closed (write `{{` for a literal brace)"
                                        .to_owned(),
                                });
                            }
                            Some((_, c)) => name.push(c),
                        }
                    }
                    if name.is_empty() {
                        return Err(TemplateError {
                            at,
                            message: "`{}` names no argument".to_owned(),
                        });
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    let index = match fields.iter().position(|f| *f == name) {
                        Some(i) => i,
                        None if fields.len() >= PLACEHOLDERS_MAX => {
                            return Err(TemplateError {
                                at,
                                message: format!(
                                    "more than {PLACEHOLDERS_MAX} different arguments"
                                ),
                            });
                        }
                        None => {
                            fields.push(name);
                            fields.len() - 1
                        }
                    };
                    parts.push(Part::Field(index));
                }
                c => literal.push(c),
            }
        }
        if fields.is_empty() {
            return Ok(None);
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        let mut segments = vec![String::new()];
        for part in &parts {
            match part {
                Part::Text(t) => segments.last_mut().map_or((), |s| s.push_str(t)),
                Part::Field(_) => segments.push(String::new()),
            }
        }
        Ok(Some(Self {
            parts,
            fields,
            segments,
        }))
    }

    /// The argument names the placeholders use, each once, in first-use order.
    pub fn fields(&self) -> &[String] {
        &self.fields
    }

    /// Whether some call could make `name` from this template. A placeholder can be any text
    /// (a string argument holds any characters, the empty string included), so this is glob
    /// matching with one `*` per placeholder: `name` starts with the text before the first
    /// placeholder, ends with the text after the last, and holds the texts between them in
    /// order, not overlapping. A placeholder used twice is treated as two (`{a}-{a}` is taken
    /// to make `x-y`), so the answer errs towards yes, never towards no.
    pub(crate) fn can_make(&self, name: &str) -> bool {
        if name.is_empty() || name.len() > KEY_BYTES_MAX {
            return false;
        }
        let segments = &self.segments;
        let (Some((first, rest)), Some(last)) = (segments.split_first(), segments.last()) else {
            return false;
        };
        let middle = &rest[..rest.len().saturating_sub(1)];
        let Some(body) = name
            .strip_prefix(first.as_str())
            .and_then(|b| b.strip_suffix(last.as_str()))
        else {
            return false;
        };
        let mut body = body;
        for segment in middle {
            match body.find(segment.as_str()) {
                Some(at) => body = &body[at + segment.len()..],
                None => return false,
            }
        }
        true
    }

    /// Whether both templates' placeholders could make one name. Two globs that each
    /// have a `*` share a name exactly when their leading texts are one a prefix of the other
    /// and their trailing texts one a suffix of the other: the longer leading text, then every
    /// middle text of both, then the longer trailing text is such a name. As in
    /// [`KeyTemplate::can_make`], repeated placeholders and the key length are not taken into
    /// account, so this may find a name no call makes, never miss one. (Each template's own
    /// text is a key too; [`KeyTemplate::can_make`] answers for those.)
    pub(crate) fn globs_meet(&self, other: &Self) -> bool {
        let (a0, b0, an, bn) = (self.prefix(), other.prefix(), self.suffix(), other.suffix());
        (a0.starts_with(b0) || b0.starts_with(a0)) && (an.ends_with(bn) || bn.ends_with(an))
    }

    /// The name of [`KeyTemplate::globs_meet`]'s proof, for two templates that meet.
    pub(crate) fn shared_name(&self, other: &Self) -> String {
        let longer = |x: &str, y: &str| if x.len() >= y.len() { x } else { y }.to_owned();
        let middles = |s: &[String]| s[1..s.len() - 1].concat();
        let name = longer(self.prefix(), other.prefix())
            + &middles(&self.segments)
            + &middles(&other.segments)
            + &longer(self.suffix(), other.suffix());
        // Only placeholders: any name will do.
        if name.is_empty() {
            "x".to_owned()
        } else {
            name
        }
    }

    /// The text before the first placeholder.
    pub(crate) fn prefix(&self) -> &str {
        self.segments.first().map_or("", String::as_str)
    }

    /// The text after the last placeholder.
    pub(crate) fn suffix(&self) -> &str {
        self.segments.last().map_or("", String::as_str)
    }

    /// The key this template names for a call with these arguments, into `out` (cleared
    /// first). `scratch` is reused between calls.
    pub(crate) fn expand(
        &self,
        arguments: Option<&str>,
        scratch: &mut Vec<Option<String>>,
        out: &mut String,
    ) -> Result<(), Unexpanded> {
        out.clear();
        let arguments = arguments.ok_or(Unexpanded::NoArguments)?;
        json::scalar_fields(arguments, &self.fields, scratch).map_err(|e| match e {
            JsonError::Invalid => Unexpanded::InvalidJson,
            JsonError::NotObject => Unexpanded::NotObject,
        })?;
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Field(i) => match &scratch[*i] {
                    Some(value) => out.push_str(value),
                    None => return Err(Unexpanded::Field(self.fields[*i].clone())),
                },
            }
            if out.len() > KEY_BYTES_MAX {
                return Err(Unexpanded::TooLong);
            }
        }
        if out.is_empty() {
            // Every placeholder was an empty string: the template's own key stands in, since
            // a key is never empty.
            return Err(Unexpanded::Field(self.fields[0].clone()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

    fn expand(t: &str, args: Option<&str>) -> Result<String, Unexpanded> {
        let t = KeyTemplate::parse(t).unwrap().unwrap();
        let mut out = String::new();
        t.expand(args, &mut Vec::new(), &mut out).map(|()| out)
    }

    #[test]
    fn parse_errors_point_at_the_brace() {
        for (text, at) in [
            ("a{b", 1),
            ("a}b", 1),
            ("x{}", 1),
            ("{a{b}}", 0),
            ("ok{a}}", 5),
        ] {
            let e = KeyTemplate::parse(text).unwrap_err();
            assert_eq!(e.at, at, "{text}: {}", e.message);
        }
        assert_eq!(KeyTemplate::parse("plain"), Ok(None));
        assert_eq!(KeyTemplate::parse("a{{b}}"), Ok(None));
        let many: String = (0..=PLACEHOLDERS_MAX)
            .map(|i| format!("{{f{i}}}"))
            .collect();
        assert!(KeyTemplate::parse(&many).is_err());
    }

    #[test]
    fn expansion_and_its_failures() {
        assert_eq!(
            expand("fs:{path}", Some(r#"{"path":"/a"}"#)),
            Ok("fs:/a".into())
        );
        assert_eq!(
            expand("{{{a}}}-{b}-{a}", Some(r#"{"a":1,"b":true}"#)),
            Ok("{1}-true-1".into())
        );
        assert_eq!(expand("fs:{path}", None), Err(Unexpanded::NoArguments));
        assert_eq!(expand("fs:{path}", Some("{")), Err(Unexpanded::InvalidJson));
        assert_eq!(expand("fs:{path}", Some("[]")), Err(Unexpanded::NotObject));
        assert_eq!(
            expand("fs:{path}", Some(r#"{"path":null}"#)),
            Err(Unexpanded::Field("path".into()))
        );
        assert_eq!(
            expand("{path}", Some(r#"{"path":""}"#)),
            Err(Unexpanded::Field("path".into()))
        );
        let fits = "x".repeat(KEY_BYTES_MAX - 3);
        let args = format!(r#"{{"path":"{fits}"}}"#);
        assert_eq!(expand("fs:{path}", Some(&args)), Ok(format!("fs:{fits}")));
        let long = format!(r#"{{"path":"{fits}x"}}"#);
        assert_eq!(expand("fs:{path}", Some(&long)), Err(Unexpanded::TooLong));
    }
}
