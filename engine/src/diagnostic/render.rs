//! The rustc-style plain-text layout of a diagnostic: a title, one snippet of source per layer
//! with its labels underlined, and an optional help footer. It prints, byte for byte, what
//! annotate-snippets 0.11.5 prints with `Renderer::plain()`, an unbounded terminal width and
//! `fold(true)` (the differential test in `diagnostic/tests.rs` holds it to that), quirks
//! included: columns are counted with unicode-width (tabs and control characters count 0 under
//! the labels but a tab prints as four spaces), secondary labels read `info: ...`, and sources
//! whose every line starts with more than 26 blanks are shifted left behind `...`.
//!
//! It departs from annotate-snippets only where that panics or overflows: a span past the end
//! of its source, backwards, or not on a character boundary renders (bytes count up to the
//! nearest character), and no line is ever cut on the right (the engine used to pass a width of
//! four times the largest layer to stay clear of the trimming arithmetic, which overflows on some
//! whitespace-heavy lines; only a near-1-MiB line of tabs could have been cut there).

use std::ops::Range;

use super::width::width;

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
    let mut grid = Grid {
        lines: Vec::new(),
        gutter: if lineno_max == 0 {
            0
        } else {
            lineno_max.to_string().len()
        },
        depth,
    };
    let title = grid.lines.len();
    grid.puts(title, 0, level);
    grid.append(title, &format!("[{code}]"));
    if !message.is_empty() {
        grid.append(title, ": ");
        grid.append(title, message);
    }
    for (i, (snippet, block)) in snippets.iter().zip(&blocks).enumerate() {
        let at = grid.lines.len();
        grid.puts(at, grid.gutter, if i == 0 { "-->" } else { ":::" });
        grid.puts(at, grid.gutter + 4, snippet.origin);
        grid.append(at, &format!(":{}:{}", block.origin.0, block.origin.1));
        for row in &block.rows {
            grid.row(row, block.cut_left);
        }
    }
    for (i, line) in help.unwrap_or("").lines().enumerate() {
        let at = grid.lines.len();
        if i == 0 {
            grid.puts(at, grid.gutter + 1, "= help");
            if !line.is_empty() {
                grid.append(at, ": ");
            }
        } else {
            grid.puts(at, grid.gutter + 8, " ");
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

/// The characters being drawn, one cell per character as annotate-snippets' buffer has it.
struct Grid {
    lines: Vec<Vec<char>>,
    gutter: usize,
    depth: usize,
}

impl Grid {
    fn putc(&mut self, line: usize, col: usize, c: char) {
        if line >= self.lines.len() {
            self.lines.resize(line + 1, Vec::new());
        }
        let cells = &mut self.lines[line];
        if col >= cells.len() {
            cells.resize(col + 1, ' ');
        }
        cells[col] = c;
    }

    fn puts(&mut self, line: usize, col: usize, text: &str) {
        for (i, c) in text.chars().enumerate() {
            self.putc(line, col + i, c);
        }
    }

    fn append(&mut self, line: usize, text: &str) {
        let col = self.lines.get(line).map_or(0, Vec::len);
        self.puts(line, col, text);
    }

    fn finish(self) -> String {
        let mut out = String::new();
        for (i, line) in self.lines.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.extend(line);
        }
        out
    }

    fn row(&mut self, row: &Row<'_>, cut_left: usize) {
        let at = self.lines.len();
        match row {
            Row::Gutter => self.putc(at, self.gutter + 1, '|'),
            Row::Fold(through) => {
                self.puts(at, 0, "...");
                for d in through {
                    self.putc(at, self.gutter + 3 + d, '|');
                }
            }
            Row::Source(line) => self.source(at, line, cut_left),
        }
    }

    /// A source line and the lines under it: underlines, connectors and labels.
    fn source(&mut self, at: usize, line: &Line<'_>, cut_left: usize) {
        let gutter = self.gutter + 3;
        let code = if self.depth == 0 {
            gutter
        } else {
            gutter + self.depth + 1
        };
        self.puts(at, 0, &format!("{:>w$} |", line.lineno, w = self.gutter));
        for d in &line.through {
            self.putc(at, gutter + d, '|');
        }
        let text = shown(line.text);
        let left = cut_left.min(text.len());
        for (i, c) in text.chars().skip(left).enumerate() {
            self.putc(at, code + i, c);
        }
        if cut_left > 0 {
            self.puts(at, code, "...");
        }
        let left: usize = text.chars().take(left).map(|c| width(c).unwrap_or(1)).sum();

        let mut marks = line.marks.clone();
        sort_stable(&mut marks, |m| std::cmp::Reverse(m.cols.0));
        let (mut placed, mut height) = stack(&marks);
        // Only starts of multi-line spans: the innermost takes the first line, saving one.
        if placed.iter().all(|(_, m)| matches!(m.part, Part::Start(_)))
            && let Some(top) = placed.iter().map(|(p, _)| *p).max()
        {
            for (p, _) in &mut placed {
                *p = top - *p;
            }
            height = height.saturating_sub(1);
        }
        if let [(_, m)] = placed[..] {
            let blank_before = text.chars().take(m.cols.0).all(char::is_whitespace);
            if self.depth == 1 && matches!(m.part, Part::Start(_)) && blank_before {
                placed.clear();
                self.putc(at, gutter, '/');
            }
        }
        if !placed.is_empty() {
            for p in 0..=height {
                self.putc(at + p + 1, self.gutter + 1, '|');
            }
        }
        self.connectors(at, &placed, height, code, left);
        for d in &line.through {
            if placed.is_empty() {
                self.putc(at, gutter + d, '|');
            } else {
                for p in at..=at + height + 1 {
                    self.putc(p, gutter + d, '|');
                }
            }
        }
        for &(p, m) in placed.iter().filter(|(_, m)| m.has_label()) {
            let (row, col) = if p == 0 {
                (at + 1, (m.cols.1 + 1).saturating_sub(left))
            } else {
                (at + p + 2, m.cols.0.saturating_sub(left))
            };
            let prefix = if m.primary { "" } else { "info: " };
            self.puts(row, col + code, prefix);
            self.puts(row, col + code + prefix.len(), m.text);
        }
        sort_stable(&mut placed, |(_, m)| std::cmp::Reverse(m.len()));
        for (_, m) in &placed {
            for c in m.cols.0..m.cols.1 {
                let mark = if m.primary { '^' } else { '-' };
                self.putc(at + 1, (code + c).saturating_sub(left), mark);
            }
        }
    }

    /// The `_` runs of multi-line spans and the `|` lines down to labels and spans.
    fn connectors(
        &mut self,
        at: usize,
        placed: &[(usize, Mark<'_>)],
        height: usize,
        code: usize,
        left: usize,
    ) {
        let gutter = self.gutter + 3;
        for &(p, m) in placed {
            if let Part::Start(d) | Part::End(d) = m.part {
                for col in gutter + d..(code + m.cols.0).saturating_sub(left) {
                    self.putc(at + p + 1, col + 1, '_');
                }
            }
        }
        for &(p, m) in placed {
            if p > 0 && (m.has_label() || m.multiline()) {
                for row in at + 2..=at + p + 1 {
                    self.putc(row, (code + m.cols.0).saturating_sub(left), '|');
                }
            }
            match m.part {
                Part::Start(d) => {
                    for row in at + p + 2..at + height + 2 {
                        self.putc(row, gutter + d, '|');
                    }
                }
                Part::End(d) => {
                    for row in at..=at + p + 1 {
                        self.putc(row, gutter + d, '|');
                    }
                }
                Part::Whole => {}
            }
        }
    }
}

/// Which label line (0 = beside the underline) each mark's label goes on, and how many label
/// lines there are, rustc's rules for keeping labels and connectors from crossing.
fn stack<'a>(marks: &[Mark<'a>]) -> (Vec<(usize, Mark<'a>)>, usize) {
    let mut placed = Vec::with_capacity(marks.len());
    let mut height = 0;
    // One counter for the whole line: a mark's line is at least the line the previous mark
    // pushed the next one to.
    let mut p = 0;
    for (i, m) in marks.iter().enumerate() {
        let later = &marks[i + 1..];
        if m.has_label() && p == 0 {
            let clash =
                |next: &&Mark<'_>| (next.has_label() || next.cols != m.cols) && next.overlaps(m, 0);
            if later.iter().any(|next| clash(&next)) {
                p = 1;
            }
        }
        placed.push((p, *m));
        for next in later {
            let padded = next.overlaps(m, next.text.len() + 2);
            if (padded && m.has_label() && next.has_label())
                || (m.multiline() && next.has_label())
                || (m.has_label() && next.multiline())
                || (m.multiline() && next.multiline())
                || (padded && next.cols.1 <= m.cols.1 && next.has_label() && p == 0)
            {
                p += 1;
                break;
            }
        }
        height = height.max(p);
    }
    if height != 0 {
        height += 1;
    }
    (placed, height)
}

/// The line as shown: tabs as four spaces, and no zero-width joiners or bidirectional controls.
fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\t' => out.push_str("    "),
            '\u{200D}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' => {}
            c => out.push(c),
        }
    }
    out
}
