//! The renderer against annotate-snippets 0.11.5, the library it replaces: thousands of seeded
//! random sources and label sets must render byte for byte alike (`RENDER_SEED` picks another
//! seed, `RENDER_CASES` another count), and every character must have the same width.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

use annotate_snippets::{Level, Renderer, Snippet};

use super::{Code, Label, Span, render};

/// What `render` printed with annotate-snippets, its configuration unchanged.
fn oracle(
    code: Code,
    message: &str,
    labels: &[Label],
    help: Option<&str>,
    sources: &[&str],
) -> String {
    let level = match code.severity() {
        super::Severity::Error => Level::Error,
        super::Severity::Warning => Level::Warning,
    };
    let mut msg = level.title(message).id(code.as_str());
    let mut seen = Vec::new();
    for label in labels {
        let layer = label.span.layer;
        if seen.contains(&layer) {
            continue;
        }
        seen.push(layer);
        let Some(source) = sources.get(layer as usize) else {
            continue;
        };
        let mut snippet = Snippet::source(source)
            .origin(&label.span.layer_name)
            .fold(true);
        for (i, label) in labels.iter().enumerate() {
            if label.span.layer == layer {
                let level = if i == 0 { Level::Error } else { Level::Info };
                let range = label.span.start as usize..label.span.end as usize;
                snippet = snippet.annotation(level.span(range).label(&label.message));
            }
        }
        msg = msg.snippet(snippet);
    }
    if let Some(help) = help {
        msg = msg.footer(Level::Help.title(help));
    }
    let width = 4 * crate::limits::LAYER_BYTES_MAX;
    Renderer::plain().term_width(width).render(msg).to_string()
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const PIECES: &[&str] = &[
    "a", "key", "= 1", "x", " ", " ", "  ", "\t", "é", "日本", "🦀", "\u{301}", "\u{200D}", "[t]",
    "\"s\"", "#", "{", "}", "\r", "ab_c",
];

fn source(rng: &mut Rng) -> String {
    let lines = match rng.below(6) {
        0 => 9 + rng.below(3),
        1 => 98 + rng.below(4),
        _ => rng.below(8),
    };
    let mut out = String::new();
    for _ in 0..lines {
        if rng.below(9) == 0 {
            out.push_str(&" ".repeat(20 + rng.below(15)));
        }
        for _ in 0..rng.below(7) {
            out.push_str(rng.pick(PIECES));
        }
        out.push_str(if rng.below(4) == 0 { "\r\n" } else { "\n" });
    }
    if rng.below(3) == 0 {
        out.pop();
        for _ in 0..rng.below(3) {
            out.push_str(rng.pick(PIECES));
        }
    }
    out
}

/// A byte offset on a character boundary of `text`, within it or at its end.
fn boundary(rng: &mut Rng, text: &str) -> usize {
    let mut at = rng.below(text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Whether annotate-snippets would panic on these labels: two equal multi-line ranges make the
/// later one start on the range's last byte, which may be inside a character.
fn oracle_panics(labels: &[Label], sources: &[&str]) -> bool {
    labels.iter().enumerate().any(|(i, a)| {
        labels[i + 1..].iter().any(|b| {
            let text = sources[a.span.layer as usize];
            let (s, e) = (a.span.start as usize, a.span.end as usize);
            b.span.layer == a.span.layer
                && (b.span.start, b.span.end) == (a.span.start, a.span.end)
                && text[s..e].contains('\n')
                && !text.is_char_boundary(e.saturating_sub(1))
        })
    })
}

fn case(rng: &mut Rng) -> (Code, String, Vec<Label>, Option<String>, Vec<String>) {
    let layers: Vec<String> = (0..1 + rng.below(2)).map(|_| source(rng)).collect();
    let mut labels: Vec<Label> = Vec::new();
    // 1 to 4 labels, now and then up to 8 (a conflict names every tool).
    let most = if rng.below(8) == 0 { 8 } else { 4 };
    let count = 1 + rng.below(most);
    for _ in 0..count {
        let layer = rng.below(layers.len());
        let text = &layers[layer];
        let (start, end) = match labels.last() {
            Some(prev) if rng.below(6) == 0 && prev.span.layer as usize == layer => {
                (prev.span.start as usize, prev.span.end as usize)
            }
            _ => {
                let start = boundary(rng, text);
                let end = match rng.below(4) {
                    0 => start,
                    1 => boundary(rng, text).max(start),
                    _ => {
                        let near = (start + rng.below(6)).min(text.len());
                        (near..=text.len())
                            .find(|&i| text.is_char_boundary(i))
                            .unwrap()
                    }
                };
                (start, end)
            }
        };
        let message = rng.pick(&["", "here", "this key", "`a` is set to a longer value", "x"]);
        labels.push(Label {
            span: Span {
                layer: layer as u32,
                layer_name: ["base.toml", "user layer"][layer].to_owned(),
                start: start as u32,
                end: end as u32,
                line: 0,
                column: 0,
            },
            message: message.to_owned(),
        });
    }
    let code = *[Code::TableType, Code::UnknownFieldTypo]
        .get(rng.below(2))
        .unwrap();
    let message = rng
        .pick(&["conversation.tools.t is not a table", ""])
        .to_owned();
    let help = match rng.below(4) {
        0 => None,
        1 => Some("did you mean `concurrency`?".to_owned()),
        2 => Some("first line\n\nthird line".to_owned()),
        _ => Some(String::new()),
    };
    (code, message, labels, help, layers)
}

/// Pieces of output that mean a rule was used: a fold, a cut-off left margin, a multi-line span
/// (start, end, and one starting at the line's first non-blank), stacked labels, a secondary
/// label, a two-digit and a three-digit gutter, a second layer, a help footer.
const SHAPES: &[&str] = &[
    "\n...",
    "| ...",
    "|_",
    " __",
    "| /",
    "\n  |     |",
    "info: ",
    "\n10 |",
    "\n100 |",
    "\n ::: ",
    "= help",
];

fn env_number(name: &str, default: u64) -> u64 {
    #[cfg(not(target_arch = "wasm32"))]
    if let Ok(value) = std::env::var(name) {
        return match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
            None => value.parse().unwrap(),
        };
    }
    let _ = name;
    default
}

#[test]
fn renders_like_annotate_snippets() {
    let seed = env_number("RENDER_SEED", 0x7e57_ab1e);
    let cases = env_number("RENDER_CASES", 20_000);
    let mut rng = Rng(seed | 1);
    let mut compared = 0;
    let mut shapes = [0; SHAPES.len()];
    for n in 0..cases {
        let (code, message, labels, help, layers) = case(&mut rng);
        let sources: Vec<&str> = layers.iter().map(String::as_str).collect();
        if oracle_panics(&labels, &sources) {
            continue;
        }
        let want = oracle(code, &message, &labels, help.as_deref(), &sources);
        let got = render(code, &message, &labels, help.as_deref(), &sources);
        compared += 1;
        for (seen, shape) in shapes.iter_mut().zip(SHAPES) {
            *seen += u64::from(want.contains(shape));
        }
        assert_eq!(
            got,
            want,
            "case {n} of seed {seed:#x}: sources {sources:?}, labels {:?}, help {help:?}",
            labels
                .iter()
                .map(|l| (l.span.layer, l.span.start..l.span.end, &l.message))
                .collect::<Vec<_>>()
        );
    }
    assert!(
        compared > cases * 9 / 10,
        "only {compared} of {cases} compared"
    );
}

#[test]
fn no_labels_renders_like_annotate_snippets() {
    for help in [None, Some("a help"), Some("")] {
        let want = oracle(Code::TooManyLayers, "too many layers", &[], help, &[]);
        let got = render(Code::TooManyLayers, "too many layers", &[], help, &[]);
        assert_eq!(got, want);
    }
}

/// Every character's width as annotate-snippets measures it: a label after a run of 32
/// characters starts where their widths put it (a wrong width would need another wrong by the
/// opposite amount in the same run to hide).
#[test]
fn widths_match_unicode_width() {
    let chars: Vec<char> = (0..=0x10_ffffu32)
        .filter_map(char::from_u32)
        .filter(|&c| c != '\n' && c != '\r')
        .collect();
    for run in chars.chunks(32) {
        let mut text: String = run.iter().collect();
        text.push('x');
        let span = Span {
            layer: 0,
            layer_name: String::new(),
            start: text.len() as u32 - 1,
            end: text.len() as u32,
            line: 0,
            column: 0,
        };
        let labels = [Label {
            span,
            message: String::new(),
        }];
        let want = oracle(Code::TableType, "", &labels, None, &[&text]);
        let got = render(Code::TableType, "", &labels, None, &[&text]);
        assert_eq!(got, want, "{:#x}", run[0] as u32);
    }
}

/// Spans annotate-snippets panics on (past the end, inside a character, backwards) still
/// render, and the labels that fit are drawn.
#[test]
fn odd_spans_render_without_panicking() {
    let source = "a = \"日本\"\r\nb = 2\n";
    for (start, end) in [
        (5, 6),
        (9, 3),
        (0, 400),
        (30, 31),
        (u32::MAX - 1, u32::MAX),
        (6, 20),
    ] {
        let labels: Vec<Label> = [(start, end), (4, 11)]
            .into_iter()
            .map(|(start, end)| Label {
                span: Span {
                    layer: 0,
                    layer_name: "odd".to_owned(),
                    start,
                    end,
                    line: 0,
                    column: 0,
                },
                message: "here".to_owned(),
            })
            .collect();
        let rendered = render(Code::TableType, "odd", &labels, Some("h"), &[source]);
        assert!(
            rendered.starts_with("error[table-type]: odd\n --> odd:"),
            "{rendered}"
        );
        assert!(rendered.ends_with("= help: h"), "{rendered}");
    }
}
