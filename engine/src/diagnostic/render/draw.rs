//! Drawing a laid-out diagnostic onto a grid of characters, one cell per character as
//! annotate-snippets' buffer has it (a wide character takes one cell; the columns under it
//! count its width): source lines, underlines, the connectors of multi-line spans and labels.

use super::{Line, Mark, Part, Row, sort_stable};
use crate::diagnostic::width::width;

/// The characters being drawn, one cell per character as annotate-snippets' buffer has it.
pub(super) struct Grid {
    lines: Vec<Vec<char>>,
    /// Digits of the largest line number shown.
    gutter: usize,
    /// How many multi-line spans are open at most, over every snippet.
    depth: usize,
}

impl Grid {
    pub(super) fn new(gutter: usize, depth: usize) -> Self {
        Self {
            lines: Vec::new(),
            gutter,
            depth,
        }
    }

    /// The index of the next line to draw.
    pub(super) fn next_line(&self) -> usize {
        self.lines.len()
    }

    pub(super) fn gutter(&self) -> usize {
        self.gutter
    }

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

    pub(super) fn puts(&mut self, line: usize, col: usize, text: &str) {
        for (i, c) in text.chars().enumerate() {
            self.putc(line, col + i, c);
        }
    }

    pub(super) fn append(&mut self, line: usize, text: &str) {
        let col = self.lines.get(line).map_or(0, Vec::len);
        self.puts(line, col, text);
    }

    pub(super) fn finish(self) -> String {
        let mut out = String::new();
        for (i, line) in self.lines.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.extend(line);
        }
        out
    }

    pub(super) fn row(&mut self, row: &Row<'_>, cut_left: usize) {
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
