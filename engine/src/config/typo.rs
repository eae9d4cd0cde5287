//! Near misses of the names Turnstile reads. Unknown fields are ignored (real config files
//! carry many), but one a small edit away from a name Turnstile reads most likely meant it:
//! `concurency`, `conversation.tool`, `fanout` and `fan-out` would otherwise resolve to
//! "ok, unbounded".
//!
//! The rule: after folding case and reading `-` as `_`, the name equals the known one, or is
//! within a Damerau-Levenshtein distance of 2 of it (optimal string alignment: insertions,
//! deletions, substitutions and swaps of neighbours, each counted once). Names shorter than
//! 3 characters are never near misses (every short name is two edits from `key`).

/// The name in `known` that `name` is a near miss of, if any: the nearest, the first on a tie.
/// `None` when `name` is one of `known` exactly.
pub(super) fn near_miss<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    if known.contains(&name) || name.chars().count() < 3 {
        return None;
    }
    // ASCII folding only: every name Turnstile reads is ASCII, and Unicode case tables would
    // grow the component by tens of KB for no near miss they could find.
    let folded: Vec<char> = name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c == '-' { '_' } else { c })
        .collect();
    let mut best: Option<(usize, &str)> = None;
    for &k in known {
        let k_chars: Vec<char> = k.chars().collect();
        let d = distance(&folded, &k_chars, MAX_EDITS);
        if d <= MAX_EDITS && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, k));
        }
    }
    best.map(|(_, k)| k)
}

const MAX_EDITS: usize = 2;

/// Optimal string alignment distance, or anything above `max` once it must be (lengths that
/// differ by more, or a row whose best is over it): config names are short, so this is a
/// small table at most.
fn distance(a: &[char], b: &[char], max: usize) -> usize {
    if a.len().abs_diff(b.len()) > max {
        return max + 1;
    }
    let width = b.len() + 1;
    let mut rows = vec![0usize; (a.len() + 1) * width];
    let at = |i: usize, j: usize| i * width + j;
    for j in 0..width {
        rows[at(0, j)] = j;
    }
    for i in 1..=a.len() {
        rows[at(i, 0)] = i;
        let mut row_min = i;
        for j in 1..width {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[at(i - 1, j)] + 1)
                .min(rows[at(i, j - 1)] + 1)
                .min(rows[at(i - 1, j - 1)] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[at(i - 2, j - 2)] + 1);
            }
            rows[at(i, j)] = d;
            row_min = row_min.min(d);
        }
        if row_min > max {
            return max + 1;
        }
    }
    rows[at(a.len(), b.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_and_not() {
        let known = ["concurrency", "fan_out"];
        for (name, want) in [
            ("concurency", Some("concurrency")),
            ("concurrencey", Some("concurrency")),
            ("conucrrency", Some("concurrency")),
            ("CONCURRENCY", Some("concurrency")),
            ("fanout", Some("fan_out")),
            ("fan-out", Some("fan_out")),
            ("Fan-Out", Some("fan_out")),
            ("fan_ot", Some("fan_out")),
            ("concurrency", None),
            ("fan_out", None),
            ("currency", None),
            ("fan_in", None),
            ("timeout", None),
            ("source", None),
            ("", None),
            ("fo", None),
        ] {
            assert_eq!(near_miss(name, &known), want, "{name}");
        }
        // The nearest wins.
        assert_eq!(near_miss("delat", &["delay", "limit"]), Some("delay"));
        assert_eq!(near_miss("kye", &["key", "limit"]), Some("key"));
        // The concurrency table's fields, `max_wait` among them.
        let fields = ["key", "limit", "delay", "retries", "max_wait", "shared"];
        for name in ["max-wait", "maxwait", "max_wiat", "MAX_WAIT", "max_wai"] {
            assert_eq!(near_miss(name, &fields), Some("max_wait"), "{name}");
        }
        assert_eq!(near_miss("wait", &fields), None);
    }
}
