//! `Retry-After` (RFC 9110 section 10.2.3) read once, for every host: a pure, total function
//! from the header's value and the host's wall clock to a wait in milliseconds.
//!
//! What it accepts, and what it decided where the RFC leaves room:
//!
//! - **delta-seconds**: `1*DIGIT`, ASCII digits only, leading zeros allowed. A value too large
//!   for the result saturates at `u64::MAX` ms (RFC 9111 section 1.2.2 lets a recipient take
//!   "the greatest positive integer it can conveniently represent"); the scan is linear and
//!   allocates nothing, so a 307-digit value costs 307 steps. The scheduler's per-key maximum
//!   wait then settles such a retry (`time.rs`), so a saturated value never wedges a key.
//! - **HTTP-date**: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), and the obsolete forms a
//!   recipient must still accept: RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`, whose two-digit
//!   year is the latest year with those digits no more than 50 years after the clock's year)
//!   and asctime (`Sun Nov  6 08:49:37 1994`). Names are case-sensitive and separators are
//!   single spaces, exactly as the grammar writes them. The day must exist (no 30 February);
//!   the weekday is redundant and not checked against the date (as mail and browser parsers
//!   do); second 60 (a leap second) is accepted. The wait is the date minus `wall_now_ms`
//!   (milliseconds since the Unix epoch, the host's wall clock), and **0 for a date in the
//!   past** or now.
//! - **Whitespace**: leading and trailing spaces and tabs (the field's optional whitespace)
//!   are ignored; any other whitespace, or space inside a number, is malformed.
//! - **Refused** (a typed error; the host applies its own fallback wait): `""` and
//!   whitespace alone (`empty`); `"3.5"` (a fraction is not delta-seconds, and rounding a
//!   non-conforming value would guess), `"-5"` and `"+5"` (a sign is not delta-seconds),
//!   `"5 s"`, two values (`"5, 10"`), and anything else that is neither form (`malformed`).
//!
//! Before this, the JS host read `"3.5"` and `"-5"` with `Date.parse` (V8 takes both for dates
//! in the past: wait 0, an immediate retry) and the Python host fell back to its default; both
//! now get the refusal and apply their fallback, which is what Python did.

use crate::config::Concurrency;

/// The longest wait a rate limit may ask for on a key whose config sets no `max_wait` (and on
/// an unkeyed entry): 5 minutes. Past
/// it, the scheduler settles the entry `rate-limited` at once (with the wait it asked for) and
/// does not pause its key, so a wrong or hostile `Retry-After` (a date in year 9999, a
/// saturated number) never wedges a key and every later batch. Why 5 minutes: the waits real
/// APIs ask for are seconds to a minute or two (secondary limits, per-minute token buckets);
/// a tool call held longer than a few minutes is one a person or the model should hear about
/// and decide on, rather than a silent stall; and it stays well under the shared store's 24 h
/// cap on a pause, which would otherwise be the only bound.
pub const MAX_WAIT_DEFAULT_MS: u32 = 5 * 60 * 1_000;

/// The maximum wait on a rate limit for entries with this concurrency (`None`: unkeyed), in
/// milliseconds: its `max_wait` (`max_wait = "10m"`, resolved to
/// [`Concurrency::max_wait_ms`], which is [`MAX_WAIT_DEFAULT_MS`] when unset), or
/// [`MAX_WAIT_DEFAULT_MS`] for an unkeyed entry. The scheduler reads it once per key, when the
/// key is made.
pub fn max_wait_ms(concurrency: Option<&Concurrency>) -> u64 {
    u64::from(concurrency.map_or(MAX_WAIT_DEFAULT_MS, |c| c.max_wait_ms))
}

codes! {
    /// Why [`retry_after`] could not read a `Retry-After` value.
    RetryAfterErrorCode {
        /// Nothing but spaces and tabs (or nothing at all).
        Empty => "empty",
        /// Neither delta-seconds nor an HTTP-date (a fraction, a sign, a unit, a date that
        /// names no day, a time out of range, a second value).
        Malformed => "malformed",
    }
}

error_type!(
    /// A `Retry-After` value [`retry_after`] refused; the host uses its own fallback wait.
    RetryAfterError,
    RetryAfterErrorCode
);

/// Characters of a refused value quoted back in the error's message.
const QUOTED_MAX: usize = 40;

/// The wait a `Retry-After` header value asks for, in milliseconds, at wall-clock time
/// `wall_now_ms` (milliseconds since the Unix epoch; read only for HTTP-dates). Total: never
/// panics, never overflows (delta-seconds saturate), linear in the value's length. See the
/// [module docs](self) for what is accepted.
pub fn retry_after(header: &str, wall_now_ms: u64) -> Result<u64, RetryAfterError> {
    let value = header.trim_matches([' ', '\t']);
    if value.is_empty() {
        return Err(RetryAfterError::new(
            RetryAfterErrorCode::Empty,
            "the retry-after value is empty".to_owned(),
        ));
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        let seconds = value.bytes().fold(0u64, |acc, b| {
            acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
        });
        return Ok(seconds.saturating_mul(1_000));
    }
    match http_date(value.as_bytes(), wall_now_ms) {
        Some(date_ms) => Ok(date_ms.saturating_sub(wall_now_ms)),
        None => Err(malformed(value)),
    }
}

fn malformed(value: &str) -> RetryAfterError {
    let mut quoted: String = value.chars().take(QUOTED_MAX).collect();
    if quoted.len() < value.len() {
        quoted.push_str("...");
    }
    let mut message = format!("the retry-after value {quoted:?} is ");
    let why = match value.as_bytes()[0] {
        b'-' => "a negative number, not delta-seconds (digits only)",
        b'+' => "a signed number, not delta-seconds (digits only)",
        b'0'..=b'9' if value.contains(['.', ',']) && !value.contains(' ') => {
            "not a whole number of seconds (delta-seconds are digits only)"
        }
        _ => "neither delta-seconds (digits only) nor an HTTP-date",
    };
    message.push_str(why);
    RetryAfterError::new(RetryAfterErrorCode::Malformed, message)
}

const DAYS: [&[u8]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];
const DAYS_LONG: [&[u8]; 7] = [
    b"Monday",
    b"Tuesday",
    b"Wednesday",
    b"Thursday",
    b"Friday",
    b"Saturday",
    b"Sunday",
];
const MONTHS: [&[u8]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// An HTTP-date in any of its three forms, as milliseconds since the Unix epoch (0 for a date
/// before it: only the wait matters, and that is then 0).
fn http_date(s: &[u8], wall_now_ms: u64) -> Option<u64> {
    let (year, month, day, time) = match s.iter().position(|&b| b == b',') {
        // IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
        Some(3) => {
            let rest = s.get(4..)?;
            if !DAYS.contains(&&s[..3]) || rest.len() != 25 || !rest.ends_with(b" GMT") {
                return None;
            }
            expect(rest, &[(0, b' '), (3, b' '), (7, b' '), (12, b' ')])?;
            let day = digits(&rest[1..3])?;
            let month = month(&rest[4..7])?;
            let year = digits(&rest[8..12])?;
            (year, month, day, &rest[13..21])
        }
        // RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT`.
        Some(at) => {
            let rest = s.get(at + 1..)?;
            if !DAYS_LONG.contains(&&s[..at]) || rest.len() != 23 || !rest.ends_with(b" GMT") {
                return None;
            }
            expect(rest, &[(0, b' '), (3, b'-'), (7, b'-'), (10, b' ')])?;
            let day = digits(&rest[1..3])?;
            let month = month(&rest[4..7])?;
            let year = two_digit_year(digits(&rest[8..10])?, wall_now_ms);
            (year, month, day, &rest[11..19])
        }
        // asctime: `Sun Nov  6 08:49:37 1994` (the day is two digits, or a space and one).
        None => {
            if s.len() != 24 || !DAYS.contains(&&s[..3]) {
                return None;
            }
            expect(s, &[(3, b' '), (7, b' '), (10, b' '), (19, b' ')])?;
            let month = month(&s[4..7])?;
            let day = match s[8] {
                b' ' => digits(&s[9..10])?,
                _ => digits(&s[8..10])?,
            };
            let year = digits(&s[20..24])?;
            (year, month, day, &s[11..19])
        }
    };
    expect(time, &[(2, b':'), (5, b':')])?;
    let (hour, minute, second) = (
        digits(&time[0..2])?,
        digits(&time[3..5])?,
        digits(&time[6..8])?,
    );
    if !(1..=days_in_month(year, month)).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second;
    // Years are 0 to 9999, so this is far inside `i64` and non-negative values fit `u64`.
    Some(u64::try_from(seconds.max(0)).unwrap_or(0) * 1_000)
}

/// Whether `s` has byte `b` at each position.
fn expect(s: &[u8], at: &[(usize, u8)]) -> Option<()> {
    at.iter().all(|&(i, b)| s.get(i) == Some(&b)).then_some(())
}

/// A short run of ASCII digits (at most 4: no overflow).
fn digits(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 4 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |acc, &b| acc * 10 + i64::from(b - b'0')))
}

fn month(s: &[u8]) -> Option<i64> {
    MONTHS.iter().position(|&m| m == s).map(|i| i as i64 + 1)
}

/// RFC 9110 section 5.6.7: a two-digit year "that appears to be more than 50 years in the
/// future" is the most recent past year with the same last two digits.
fn two_digit_year(yy: i64, wall_now_ms: u64) -> i64 {
    let now_year = civil_year(i64::try_from(wall_now_ms / 86_400_000).unwrap_or(i64::MAX));
    let year = now_year - now_year.rem_euclid(100) + yy;
    if year > now_year + 50 {
        year - 100
    } else {
        year
    }
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The year of a day counted from 1970-01-01 (the inverse of [`days_from_civil`], year only).
fn civil_year(days: i64) -> i64 {
    let z = days.saturating_add(719_468);
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let year = yoe + era * 400;
    if mp >= 10 { year + 1 } else { year }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1994-11-06 08:49:37 UTC, the RFC's example date.
    const EXAMPLE_MS: u64 = 784_111_777_000;

    fn code(header: &str) -> &'static str {
        retry_after(header, EXAMPLE_MS).unwrap_err().code.as_str()
    }

    #[test]
    fn refuses_empty_and_whitespace_alone() {
        for header in ["", " ", "\t", " \t  "] {
            assert_eq!(code(header), "empty", "{header:?}");
        }
    }

    #[test]
    fn refuses_fractions_signs_units_and_lists() {
        for header in [
            "3.5", "-5", "+5", "5s", "5 s", "5, 10", "0x10", "1e3", "٣", "five", "3,5", "- 5",
        ] {
            assert_eq!(code(header), "malformed", "{header:?}");
        }
        let fraction = retry_after("3.5", 0).unwrap_err();
        assert_eq!(
            fraction.message,
            "the retry-after value \"3.5\" is not a whole number of seconds (delta-seconds are \
             digits only)"
        );
        let negative = retry_after("-5", 0).unwrap_err();
        assert_eq!(
            negative.message,
            "the retry-after value \"-5\" is a negative number, not delta-seconds (digits only)"
        );
    }

    #[test]
    fn refuses_other_whitespace_and_inner_space() {
        for header in ["5\n", "\r5", "\u{a0}5", "1 0", "5\u{b}"] {
            assert_eq!(code(header), "malformed", "{header:?}");
        }
    }

    #[test]
    fn refuses_dates_that_name_no_moment() {
        for header in [
            "Sun, 30 Feb 2024 08:49:37 GMT", // no such day
            "Sun, 29 Feb 2023 08:49:37 GMT", // not a leap year
            "Sun, 00 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:60:00 GMT",
            "Sun, 06 Nov 1994 08:49:61 GMT",
            "Sun, 06 Nov 1994 08:49:37 UTC", // the grammar says GMT
            "sun, 06 nov 1994 08:49:37 gmt", // names are case-sensitive
            "Sun, 6 Nov 1994 08:49:37 GMT",  // IMF-fixdate days are two digits
            "Sun,  06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 94 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sun, 06-Nov-94 08:49:37 GMT", // RFC 850 takes the long day name
            "Funday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov 6 08:49:37 1994", // asctime pads the day to two places
            "Sun Nov  6 08:49:37 94",
            "Sun, 06 Nov 1994 08:49:37 GMT extra",
            ",",
            "Mon,",
        ] {
            assert_eq!(code(header), "malformed", "{header:?}");
        }
    }

    #[test]
    fn quotes_a_long_value_briefly() {
        let long = format!("x{}", "9".repeat(400));
        let err = retry_after(&long, 0).unwrap_err();
        assert!(err.message.len() < 150, "{}", err.message);
        assert!(err.message.contains("...\""), "{}", err.message);
        // Multibyte characters are cut at a character, never inside one.
        let wide = "é".repeat(100);
        assert_eq!(
            retry_after(&wide, 0).unwrap_err().code.as_str(),
            "malformed"
        );
    }

    #[test]
    fn delta_seconds() {
        assert_eq!(retry_after("0", 0), Ok(0));
        assert_eq!(retry_after("5", 0), Ok(5_000));
        assert_eq!(retry_after("007", 0), Ok(7_000));
        assert_eq!(retry_after(" \t120\t ", 0), Ok(120_000));
        // The wall clock plays no part.
        assert_eq!(retry_after("5", u64::MAX), Ok(5_000));
    }

    #[test]
    fn huge_delta_seconds_saturate() {
        // The largest seconds that still fit in milliseconds, and one more.
        let fits = u64::MAX / 1_000;
        assert_eq!(retry_after(&fits.to_string(), 0), Ok(fits * 1_000));
        assert_eq!(retry_after(&(fits + 1).to_string(), 0), Ok(u64::MAX));
        assert_eq!(retry_after(&u64::MAX.to_string(), 0), Ok(u64::MAX));
        assert_eq!(retry_after(&"9".repeat(307), 0), Ok(u64::MAX));
        assert_eq!(retry_after(&"9".repeat(100_000), 0), Ok(u64::MAX));
        // Leading zeros do not count towards the size.
        assert_eq!(retry_after(&format!("{}1", "0".repeat(400)), 0), Ok(1_000));
    }

    #[test]
    fn the_three_date_forms_agree() {
        for header in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun Nov 06 08:49:37 1994",
            "  Sun, 06 Nov 1994 08:49:37 GMT\t",
        ] {
            assert_eq!(
                retry_after(header, EXAMPLE_MS - 3_500),
                Ok(3_500),
                "{header:?}"
            );
        }
    }

    #[test]
    fn a_date_in_the_past_or_now_waits_zero() {
        let imf = "Sun, 06 Nov 1994 08:49:37 GMT";
        assert_eq!(retry_after(imf, EXAMPLE_MS), Ok(0));
        assert_eq!(retry_after(imf, EXAMPLE_MS + 1), Ok(0));
        assert_eq!(retry_after(imf, u64::MAX), Ok(0));
        // Before the epoch.
        assert_eq!(retry_after("Thu, 01 Jan 1920 00:00:00 GMT", 0), Ok(0));
        assert_eq!(retry_after("Sat, 01 Jan 0000 00:00:00 GMT", 0), Ok(0));
    }

    #[test]
    fn the_weekday_is_not_checked() {
        // 1994-11-06 was a Sunday; a wrong weekday still names the date.
        assert_eq!(
            retry_after("Mon, 06 Nov 1994 08:49:38 GMT", EXAMPLE_MS),
            Ok(1_000)
        );
    }

    #[test]
    fn far_dates_and_leap_days() {
        // Year 9999: the largest date there is, no overflow.
        let end = retry_after("Fri, 31 Dec 9999 23:59:59 GMT", 0).unwrap();
        assert_eq!(end, 253_402_300_799_000);
        assert_eq!(
            retry_after("Thu, 29 Feb 2024 00:00:00 GMT", 0),
            Ok(1_709_164_800_000)
        );
        assert_eq!(
            retry_after("Tue, 29 Feb 2000 00:00:00 GMT", 0),
            Ok(951_782_400_000)
        );
        // A leap second counts as the next minute's first.
        assert_eq!(
            retry_after("Sat, 31 Dec 2016 23:59:60 GMT", 0),
            Ok(1_483_228_800_000)
        );
        assert_eq!(retry_after("Thu, 01 Jan 1970 00:00:01 GMT", 0), Ok(1_000));
    }

    #[test]
    fn rfc850_years_are_at_most_50_years_ahead() {
        // With the clock in 2026, `76` is 2076 (50 years ahead) and `77` is 1977.
        let now = retry_after("Thu, 01 Jan 2026 00:00:00 GMT", 0).unwrap();
        let y2076 = retry_after("Wed, 01 Jan 2076 00:00:00 GMT", 0).unwrap();
        assert_eq!(
            retry_after("Wednesday, 01-Jan-76 00:00:00 GMT", now),
            Ok(y2076 - now)
        );
        assert_eq!(retry_after("Friday, 01-Jan-77 00:00:00 GMT", now), Ok(0));
        let y2030 = retry_after("Tue, 01 Jan 2030 00:00:00 GMT", 0).unwrap();
        assert_eq!(
            retry_after("Tuesday, 01-Jan-30 00:00:00 GMT", now),
            Ok(y2030 - now)
        );
    }

    #[test]
    fn civil_year_inverts_days_from_civil() {
        for year in [0, 1, 1969, 1970, 1999, 2000, 2024, 2100, 9999] {
            for (month, day) in [(1, 1), (2, 28), (3, 1), (12, 31)] {
                assert_eq!(civil_year(days_from_civil(year, month, day)), year);
            }
        }
        // The clock at its end still names a year.
        assert!(two_digit_year(0, u64::MAX) > 9999);
    }

    #[test]
    fn total_on_arbitrary_bytes() {
        // Every short ASCII string shaped around the date forms: no panic, an answer each.
        let seeds = [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ];
        for seed in seeds {
            for cut in 0..=seed.len() {
                let _ = retry_after(&seed[..cut], EXAMPLE_MS);
                for b in [b' ', b',', b'-', b':', b'9', b'A', b'\t'] {
                    let mut s = seed.as_bytes().to_vec();
                    if cut < s.len() {
                        s[cut] = b;
                    }
                    let _ = retry_after(std::str::from_utf8(&s).unwrap(), EXAMPLE_MS);
                }
            }
        }
    }
}
