//! The rustc-style plain-text layout of a diagnostic: a title, one snippet of source per layer
//! with its labels underlined, and an optional help footer. It prints, byte for byte, what
//! annotate-snippets 0.11.5 prints with `Renderer::plain()`, an unbounded terminal width and
//! `fold(true)` (the differential test in `diagnostic/tests.rs` holds it to that), quirks
//! included: columns are counted with unicode-width (tabs and control characters count 0 under
//! the labels but a tab prints as four spaces), secondary labels read `info: ...`, and sources
//! whose every non-blank line starts with more than 26 blanks are shifted left behind `...`.
//!
//! It departs from annotate-snippets only where that panics or overflows: a span past the end
//! of its source, backwards, or not on a character boundary renders (bytes count up to the
//! nearest character), and no line is ever cut on the right (the engine used to pass a width of
//! four times the largest layer to stay clear of the trimming arithmetic, which overflows on some
//! whitespace-heavy lines; only a near-1-MiB line of tabs could have been cut there).

use std::ops::Range;

use super::width::width;
use draw::Grid;

mod draw;

/// One layer's source with the labels that point into it.
pub(crate) struct Snippet<'a> {
    pub(crate) layer: u32,
    pub(crate) origin: &'a str,
    pub(crate) source: &'a str,
    pub(crate) labels: Vec<Note<'a>>,
}

/// A label: a byte range, its text, and whether it is the diagnostic's primary (`^`) one.
pub(crate) struct Note<'a> {
    pub(crate) range: Range<usize>,
    pub(crate) text: &'a str,
    pub(crate) primary: bool,
}

/// `level[code]: message`, the snippets, then `= help: ...`.
pub(crate) fn render(
    level: &str,
    code: &str,
    message: &str,
    snippets: &[Snippet<'_>],
    help: Option<&str>,
) -> String {
    let blocks: Vec<Block<'_>> = snippets.iter().map(|s| block(s, help.is_some())).collect();
    let rows = blocks.iter().flat_map(|b| &b.rows);
    let lineno_max = rows
        .clone()
        .filter_map(|r| match r {
            Row::Source(line) => Some(line.lineno),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let depth = rows
        .filter_map(|r| match r {
            Row::Source(line) => line.marks.iter().filter_map(|m| m.depth()).max(),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let gutter = if lineno_max == 0 {
        0
    } else {
        lineno_max.to_string().len()
    };
    let mut grid = Grid::new(gutter, depth);
    let title = grid.next_line();
    grid.puts(title, 0, level);
    grid.append(title, &format!("[{code}]"));
    if !message.is_empty() {
        grid.append(title, ": ");
        grid.append(title, message);
    }
    for (i, (snippet, block)) in snippets.iter().zip(&blocks).enumerate() {
        let at = grid.next_line();
        grid.puts(at, grid.gutter(), if i == 0 { "-->" } else { ":::" });
        grid.puts(at, grid.gutter() + 4, snippet.origin);
        grid.append(at, &format!(":{}:{}", block.origin.0, block.origin.1));
        for row in &block.rows {
            grid.row(row, block.cut_left);
        }
    }
    for (i, line) in help.unwrap_or("").lines().enumerate() {
        let at = grid.next_line();
        if i == 0 {
            grid.puts(at, grid.gutter() + 1, "= help");
            if !line.is_empty() {
                grid.append(at, ": ");
            }
        } else {
            grid.puts(at, grid.gutter() + 8, " ");
        }
        grid.append(at, line);
    }
    grid.finish()
}

/// One snippet laid out: its rows, where its first label starts (line, column), and how many
/// characters of blank every line loses on the left.
struct Block<'a> {
    rows: Vec<Row<'a>>,
    origin: (usize, usize),
    cut_left: usize,
}

enum Row<'a> {
    /// An empty gutter line, `  |`.
    Gutter,
    /// `...` standing for folded lines, with the multi-line spans passing through them.
    Fold(Vec<usize>),
    Source(Line<'a>),
}

struct Line<'a> {
    lineno: usize,
    text: &'a str,
    /// Byte offsets of the line's start and end (without its line ending) in the snippet.
    start: usize,
    end: usize,
    eol: usize,
    /// Depths of the multi-line spans passing through.
    through: Vec<usize>,
    marks: Vec<Mark<'a>>,
}

/// A label's part on one line, in display columns.
#[derive(Clone, Copy)]
struct Mark<'a> {
    cols: (usize, usize),
    part: Part,
    primary: bool,
    text: &'a str,
}

#[derive(Clone, Copy, PartialEq)]
enum Part {
    Whole,
    Start(usize),
    End(usize),
}

impl Mark<'_> {
    fn depth(&self) -> Option<usize> {
        match self.part {
            Part::Whole => None,
            Part::Start(d) | Part::End(d) => Some(d + 1),
        }
    }

    fn has_label(&self) -> bool {
        !self.text.is_empty()
    }

    fn multiline(&self) -> bool {
        self.part != Part::Whole
    }

    fn len(&self) -> usize {
        self.cols.0.abs_diff(self.cols.1)
    }

    /// annotate-snippets' `overlaps(self, other, padding)`.
    fn overlaps(&self, other: &Self, padding: usize) -> bool {
        (other.cols.0..other.cols.1).contains(&self.cols.0)
            || (self.cols.0..self.cols.1 + padding).contains(&other.cols.0)
    }
}

/// A label still to place, with its index among the snippet's labels sorted by start.
struct Pending<'a> {
    key: usize,
    range: Range<usize>,
    text: &'a str,
    primary: bool,
}

fn block<'a>(snippet: &Snippet<'a>, has_help: bool) -> Block<'a> {
    // Keep only the lines from the first label's to the last label's.
    let source = snippet.source;
    let first = snippet
        .labels
        .iter()
        .map(|l| l.range.start)
        .min()
        .unwrap_or(0);
    let skip = source
        .get(..first)
        .and_then(|s| s.rfind('\n'))
        .map_or(0, |n| n + 1);
    let lineno_start = 1 + source.as_bytes()[..skip.min(source.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    let mut source = source.get(skip..).unwrap_or("");
    let shift = |r: &Range<usize>| r.start.saturating_sub(skip)..r.end.saturating_sub(skip);
    let last = snippet.labels.iter().map(|l| shift(&l.range).end).max();
    let last = last.unwrap_or(source.len());
    if let Some(n) = source.get(last..).and_then(|s| s.find('\n')) {
        source = &source[..last + n];
    }
    let mut pending: Vec<Pending<'a>> = snippet
        .labels
        .iter()
        .map(|l| Pending {
            key: 0,
            range: shift(&l.range),
            text: l.text,
            primary: l.primary,
        })
        .collect();
    let origin_at = pending.first().map(|p| p.range.start);
    merge_same_multiline(&mut pending, source);
    sort_stable(&mut pending, |p| p.range.start);
    for (key, p) in pending.iter_mut().enumerate() {
        p.key = key;
    }

    let mut lines = Vec::new();
    let mut blanks_min = usize::MAX;
    let mut depths: Vec<(usize, usize)> = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let mut rest = source;
    while !rest.is_empty() {
        let (text, eol, next) = match rest.find('\n') {
            Some(n) if n > 0 && rest.as_bytes()[n - 1] == b'\r' => (&rest[..n - 1], 2, n + 1),
            Some(n) => (&rest[..n], 1, n + 1),
            None => (rest, 0, rest.len()),
        };
        rest = &rest[next..];
        if text.chars().any(|c| !c.is_whitespace()) {
            let blanks = text
                .chars()
                .take_while(|c| c.is_whitespace())
                .map(|c| if c == '\t' { 4 } else { 1 })
                .sum();
            blanks_min = blanks_min.min(blanks);
        }
        let mut line = Line {
            lineno: lineno_start + lines.len(),
            text,
            start,
            end: start + text.len(),
            eol,
            through: Vec::new(),
            marks: Vec::new(),
        };
        pending.retain(|p| !place(&mut line, p, &mut depths, &mut depth));
        depth = depth.min(depths.len());
        start = line.end + eol;
        lines.push(line);
    }

    let mut rows = vec![Row::Gutter];
    fold(lines, &mut rows);
    let origin = origin_at.map_or((1, 1), |at| origin_of(&rows, at));
    if has_help || matches!(rows.last(), Some(Row::Source(_) | Row::Gutter)) {
        rows.push(Row::Gutter);
    }
    // annotate-snippets' margin with an unbounded width: only long leading blanks are cut.
    let blanks = blanks_min.saturating_sub(6);
    let cut_left = if blanks > 20 { blanks - 16 } else { 0 };
    Block {
        rows,
        origin,
        cut_left,
    }
}

/// Labels after the first with the same multi-line range as an earlier one shrink to the range's
/// last byte, so one vertical line serves them all.
fn merge_same_multiline(pending: &mut [Pending<'_>], source: &str) {
    let ranges: Vec<Range<usize>> = pending.iter().map(|p| p.range.clone()).collect();
    for (i, range) in ranges.iter().enumerate() {
        for p in pending.iter_mut().skip(i + 1) {
            let lines = source.get(p.range.clone()).map_or(0, |s| s.lines().count());
            if lines > 1 && p.range == *range {
                p.range.start = p.range.end.saturating_sub(1);
            }
        }
    }
}

/// Puts what `p` shows on `line`; true once `p` is done with.
fn place<'a>(
    line: &mut Line<'a>,
    p: &Pending<'a>,
    depths: &mut Vec<(usize, usize)>,
    depth: &mut usize,
) -> bool {
    let (start, end) = (p.range.start, p.range.end);
    let reach = line.end + line.eol.max(1);
    let col = |at: usize| columns(line.text, at.saturating_sub(line.start));
    let mark = |cols, part, text| Mark {
        cols,
        part,
        primary: p.primary,
        text,
    };
    if start > line.end + line.eol {
        false
    } else if start >= line.start && end <= reach {
        let (from, mut to) = (col(start), col(end));
        if from == to {
            to += 1;
        }
        line.marks.push(mark((from, to), Part::Whole, p.text));
        true
    } else if start >= line.start
        && start <= line.end + line.eol.saturating_sub(1)
        && end > line.end
    {
        let from = col(start);
        line.marks
            .push(mark((from, from + 1), Part::Start(*depth), ""));
        depths.push((p.key, *depth));
        *depth += 1;
        false
    } else if start < line.start && end > reach {
        let d = depths
            .iter()
            .find(|(k, _)| *k == p.key)
            .map_or(0, |(_, d)| *d);
        line.through.push(d);
        false
    } else if start < line.start && end >= line.start && end <= reach {
        let mut at = col(end).saturating_sub(1);
        if end > line.end || (end == line.end + 1 && line.eol == 0) {
            at += 1;
        }
        let d = match depths.iter().position(|(k, _)| *k == p.key) {
            Some(i) => depths.remove(i).1,
            None => 0,
        };
        line.marks.push(mark((at, at + 1), Part::End(d), p.text));
        true
    } else {
        false
    }
}

/// The display width of `text`'s first `bytes` bytes (whole characters).
fn columns(text: &str, bytes: usize) -> usize {
    text.char_indices()
        .take_while(|&(i, _)| i < bytes)
        .map(|(_, c)| width(c).unwrap_or(0))
        .sum()
}

/// The line and character column of byte `at`, on the first shown line that holds it.
fn origin_of(rows: &[Row<'_>], at: usize) -> (usize, usize) {
    let lines = rows.iter().filter_map(|r| match r {
        Row::Source(line) => Some(line),
        _ => None,
    });
    for line in lines {
        if at >= line.start && at < line.end + line.eol.max(1) {
            let bytes = (at - line.start).min(line.text.len());
            let column = line
                .text
                .char_indices()
                .take_while(|&(i, _)| i < bytes)
                .count();
            return (line.lineno, column + 1);
        }
    }
    (1, 1)
}

/// Drops the lines before the first and after the last labelled one, and runs of more than
/// three unlabelled lines between, which keep their first and last line around a `...`.
fn fold<'a>(lines: Vec<Line<'a>>, rows: &mut Vec<Row<'a>>) {
    let mut kept = 0;
    let mut quiet: Vec<Line<'a>> = Vec::new();
    for line in lines {
        if line.marks.is_empty() {
            quiet.push(line);
            continue;
        }
        if kept == 0 {
            quiet.clear();
        }
        if quiet.len() > 3 {
            let mut quiet = quiet.drain(..);
            if let Some(first) = quiet.next() {
                let through = first.through.clone();
                rows.push(Row::Source(first));
                rows.push(Row::Fold(through));
            }
            rows.extend(quiet.next_back().map(Row::Source));
        } else {
            rows.extend(quiet.drain(..).map(Row::Source));
        }
        quiet.clear();
        rows.push(Row::Source(line));
        kept += 1;
    }
}

/// A stable insertion sort: labels are few, and this keeps the merge sort out of the binary.
fn sort_stable<T, K: Ord>(items: &mut [T], key: impl Fn(&T) -> K) {
    for i in 1..items.len() {
        let mut j = i;
        while j > 0 && key(&items[j - 1]) > key(&items[j]) {
            items.swap(j - 1, j);
            j -= 1;
        }
    }
}
