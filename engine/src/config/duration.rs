//! The duration grammar of `delay`, `max_wait` and a rate's window: digits with an optional
//! fraction and a unit (`ms`, `s`, `m`, `h`, `d`), in whole milliseconds up to `u32::MAX`. `raw.rs` reads a value's form
//! (an integer is milliseconds) and reports what this grammar refuses.

/// `"250ms"`, `"1.5s"`, `"2m"`, `"1h"`, `"30d"` in milliseconds: any number of digits, and any fraction
/// that comes to whole milliseconds (`"1.0001h"` is 3,600,360 ms; `"1.5000s"` is 1,500).
pub(crate) fn parse_duration(text: &str) -> Result<u32, &'static str> {
    const LONG: &str = "it is longer than about 49 days";
    if text.is_empty() {
        return Err("it is empty");
    }
    if text.starts_with('-') {
        return Err("it is negative");
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or("it has no unit (ms, s, m, h or d)")?;
    let (number, unit) = text.split_at(split);
    let scale: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err("the unit is not ms, s, m, h or d"),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || number.ends_with('.') || fraction.contains('.') {
        return Err("the number is not digits with an optional fraction");
    }
    // Leading zeros of the whole part and trailing zeros of the fraction say nothing. Past 12
    // digits a whole part is over 49 days and a fraction finer than a millisecond, and every
    // product below fits in 64 bits.
    let digits = |d: &str, long: &'static str| -> Result<u64, &'static str> {
        match d {
            "" => Ok(0),
            d if d.len() > 12 => Err(long),
            d => d.parse().map_err(|_| "the number is not digits"),
        }
    };
    let whole = digits(whole.trim_start_matches('0'), LONG)?;
    let fraction = fraction.trim_end_matches('0');
    let below = digits(fraction, "it is finer than a millisecond")? * scale;
    let per = 10u64.pow(fraction.len() as u32);
    if !below.is_multiple_of(per) {
        return Err("it is finer than a millisecond");
    }
    whole
        .checked_mul(scale)
        .and_then(|ms| ms.checked_add(below / per))
        .and_then(|ms| u32::try_from(ms).ok())
        .ok_or(LONG)
}
