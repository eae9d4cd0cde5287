//! The grammar of a rate window (`rate = "5000/h"`, `rate = ["1/s", "2000/30d"]`): a count
//! of starts, a slash, and the window, either a unit alone (`ms`, `s`, `m` or `min`, `h`,
//! `d`: one of it) or a duration in the grammar of `delay` (`"10/1.5s"`, `"2000/30d"`).
//! `raw.rs` reads a value's form (a string, or an array of strings) and reports what this
//! grammar refuses.

use super::duration::parse_duration;
use super::policy::RateWindow;
use crate::limits::RATE_COUNT_MAX;

/// `"5000/h"` as 5000 starts per 3,600,000 ms.
pub(crate) fn parse_rate(text: &str) -> Result<RateWindow, &'static str> {
    let (count, window) = text
        .split_once('/')
        .ok_or("it has no `/` between the count and the window")?;
    let count = count.trim();
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return Err("the count before `/` is not a whole number");
    }
    let count: u32 = match count.trim_start_matches('0') {
        "" => return Err("the count is 0: a rate lets at least 1 start through per window"),
        digits if digits.len() > 10 => return Err("the count is above 1000000000"),
        digits => digits
            .parse::<u64>()
            .ok()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n <= RATE_COUNT_MAX)
            .ok_or("the count is above 1000000000")?,
    };
    let window = window.trim();
    // `min` for minutes reads naturally in a rate ("900/min", "10/2min").
    let minutes;
    let window = match window.strip_suffix("min") {
        Some(n) if !n.is_empty() => {
            minutes = format!("{n}m");
            minutes.as_str()
        }
        _ => window,
    };
    let per_ms = match window {
        "ms" => 1,
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "" => return Err("it has no window after `/` (ms, s, m, h, d, or a duration)"),
        duration => parse_duration(duration)?,
    };
    if per_ms == 0 {
        return Err("the window is 0 ms long");
    }
    // The key's burst is filled in once the layers are merged (`validate.rs`).
    Ok(RateWindow {
        count,
        per_ms,
        burst: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_read_as_counts_per_milliseconds() {
        for (text, count, per_ms) in [
            ("5000/h", 5000, 3_600_000),
            ("1/s", 1, 1_000),
            ("900/min", 900, 60_000),
            ("80/m", 80, 60_000),
            ("2000/30d", 2000, 2_592_000_000),
            ("10/1.5s", 10, 1_500),
            ("10/2min", 10, 120_000),
            ("3/250ms", 3, 250),
            (" 7 / d ", 7, 86_400_000),
            ("007/s", 7, 1_000),
        ] {
            let want = RateWindow {
                count,
                per_ms,
                burst: 0,
            };
            assert_eq!(parse_rate(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn what_is_not_a_window_says_why() {
        for (text, why) in [
            ("5000", "no `/`"),
            ("/s", "not a whole number"),
            ("-1/s", "not a whole number"),
            ("1.5/s", "not a whole number"),
            ("0/s", "the count is 0"),
            ("1000000001/s", "above 1000000000"),
            ("99999999999999999999/s", "above 1000000000"),
            ("1/", "no window"),
            ("1/week", "not ms, s, m, h or d"),
            ("1/0s", "0 ms long"),
            ("1/50d", "longer than about 49 days"),
        ] {
            let err = parse_rate(text).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
    }
}
