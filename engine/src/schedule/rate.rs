//! A key's spacing: its `delay` and its rate windows, each kept as GCRA (the generic cell rate
//! algorithm) on the host's clock, in exact integers.
//!
//! A window lets `count` starts through per `per_ms` on average, so one start costs an
//! emission interval of `per_ms / count` milliseconds, and the window remembers a theoretical
//! arrival time (TAT): when the key would have caught up had every start come at the even
//! pace. A start of `weight` units (its tool's; 1 on a delay's lane) is let through at `now`
//! when the TAT lies at most `burst - weight` intervals ahead of `now`, and moves the TAT to
//! `max(TAT, now)` plus `weight` intervals. To stay exact, a lane
//! keeps its TAT multiplied by `count` (`tat_n`), so an interval is `per_ms` and nothing is
//! ever rounded but the time a lane opens, which is rounded up to the next millisecond. A
//! start in the millisecond its lane opened counts from the opening, not from the end of the
//! rounding, so a pace of 3 per second starts at 0, 334, 667, 1000 and never drifts:
//!
//! ```text
//! open at now  <=>  tat_n - (burst - weight) * per_ms <= now * count
//! on a start:       tat_n = (tat_n if tat_n > (now - 1) * count, else now * count)
//!                           + weight * per_ms
//! ```
//!
//! That stays within the terms: each start is recorded less than a millisecond before its
//! time, never after it, so with a burst of 1 the `count`-th start after one at `s` comes at
//! or after `s + per_ms` (the recorded time plus `per_ms`, rounded up to a whole millisecond).
//!
//! `delay = d` is the lane `1 / d` with a burst of 1: `tat_n` is then the last start plus
//! `d`, which is exactly the old rule (each start at least `d` after the last). With a burst
//! of 1, no span of `per_ms` ever holds more than `count` starts; a burst of B lets B through
//! at once after the key was idle, and at most `B + count - 1` in any span of `per_ms`.
//!
//! A key's lanes are written only here: `started` when an entry starts, nothing else.

use crate::config::{Concurrency, RateWindow};

/// One window and its arrival time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lane {
    count: u32,
    per_ms: u32,
    burst: u32,
    /// Whether a start costs its tool's weight here (a rate window) or one (a delay).
    weighs: bool,
    /// The theoretical arrival time times `count` (0: as if the key never started).
    tat_n: u128,
}

impl Lane {
    /// The earliest time this lane lets a start of `weight` units through.
    #[inline]
    fn opens_at(&self, weight: u32) -> u64 {
        let slack = u128::from(self.burst - self.units(weight)) * u128::from(self.per_ms);
        let due = self.tat_n.saturating_sub(slack);
        per_count(due, self.count, 1)
    }

    /// The time from which this lane is as if the key had never started: a start then is
    /// paced from its own time, as on a fresh lane (`tat_n` at most one millisecond's worth
    /// before it, or exactly on it).
    fn rested_at(&self) -> u64 {
        per_count(self.tat_n, self.count, 2)
    }

    /// A start of `weight` units costs that many intervals on a rate window; a delay's lane
    /// (a count of 1 and a burst of 1) counts every start as one.
    fn units(&self, weight: u32) -> u32 {
        if !self.weighs {
            return 1;
        }
        debug_assert!(
            (1..=self.burst).contains(&weight),
            "a weight outside 1 ..= burst resolved"
        );
        weight.clamp(1, self.burst)
    }

    fn started(&mut self, now: u64, weight: u32) {
        debug_assert!(
            self.opens_at(weight) <= now,
            "a start before its rate window opened"
        );
        let weight = self.units(weight);
        let paced = u128::from(now) * u128::from(self.count);
        let base = if self.tat_n + u128::from(self.count) > paced {
            self.tat_n // on the pace, or ahead of it within the burst
        } else {
            paced // late: the key was idle
        };
        self.tat_n = base + u128::from(weight) * u128::from(self.per_ms);
    }
}

/// `n / count` in milliseconds: exact when it divides, else the whole quotient plus `past` (1
/// rounds up; 2 is `rested_at`'s one millisecond further), saturating. A walk asks a lane
/// when it opens for every start, so the common cases (a count of 1, as every delay is, and
/// values within 64 bits) skip the 128-bit division.
#[inline]
fn per_count(n: u128, count: u32, past: u64) -> u64 {
    if count == 1 {
        return u64::try_from(n).unwrap_or(u64::MAX);
    }
    let (whole, rest) = match u64::try_from(n) {
        Ok(n) => (u128::from(n / u64::from(count)), n % u64::from(count) != 0),
        Err(_) => (n / u128::from(count), !n.is_multiple_of(u128::from(count))),
    };
    let at = if rest {
        whole + u128::from(past)
    } else {
        whole
    };
    u64::try_from(at).unwrap_or(u64::MAX)
}

/// One rate window's GCRA as a shared key's store keeps it (`crate::shared::grant`): the
/// same arithmetic as a local key's lane, on the arrival time the store holds (`tat_n`, the
/// theoretical arrival time times `count`). The earliest time a start of `weight` units is let
/// through ...
pub(crate) fn window_opens_at(window: RateWindow, tat_n: u128, weight: u32) -> u64 {
    Lane::window(window, tat_n).opens_at(weight)
}

/// ... and the arrival time after such a start at `now` (at or after the time it opened).
pub(crate) fn window_started(window: RateWindow, tat_n: u128, now: u64, weight: u32) -> u128 {
    let mut lane = Lane::window(window, tat_n);
    lane.started(now, weight);
    lane.tat_n
}

impl Lane {
    fn window(w: RateWindow, tat_n: u128) -> Self {
        Self {
            count: w.count,
            per_ms: w.per_ms,
            burst: w.burst,
            weighs: true,
            tat_n,
        }
    }
}

/// A key's lanes: its delay's, then one per rate window. Most keys have none, and cost no
/// allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Spacing {
    lanes: Box<[Lane]>,
    /// Whether a start's weight matters here (some lane is a rate window with a burst past
    /// 1): only then does a walk look the weight up.
    weighs: bool,
}

impl Spacing {
    /// The spacing this process keeps for a key with terms `c`: none for a shared key, whose
    /// store keeps its delay and rate windows for every process.
    pub(crate) fn new(c: &Concurrency) -> Self {
        if c.shared {
            return Self::default();
        }
        let delay = (c.delay_ms > 0).then_some(Lane {
            count: 1,
            per_ms: c.delay_ms,
            burst: 1,
            weighs: false,
            tat_n: 0,
        });
        let rates = c.rates.iter().map(|&w| Lane::window(w, 0));
        let lanes: Box<[Lane]> = delay.into_iter().chain(rates).collect();
        debug_assert!(
            lanes
                .iter()
                .all(|l| l.count > 0 && l.per_ms > 0 && l.burst > 0)
        );
        let weighs = lanes.iter().any(|l| l.weighs && l.burst > 1);
        Self { lanes, weighs }
    }

    /// Whether a start's weight changes anything here (else any weight may be given as 1).
    pub(crate) fn weighs(&self) -> bool {
        self.weighs
    }

    /// The earliest time every lane lets the next start, of `weight` units, through (0 with
    /// no lanes).
    pub(crate) fn opens_at(&self, weight: u32) -> u64 {
        self.lanes
            .iter()
            .map(|l| l.opens_at(weight))
            .max()
            .unwrap_or(0)
    }

    /// The time from which the key's spacing is as if it had never started: a key made from
    /// a template may be forgotten then and made afresh with the same starts to come.
    pub(crate) fn rested_at(&self) -> u64 {
        self.lanes.iter().map(Lane::rested_at).max().unwrap_or(0)
    }

    /// An entry of `weight` units started at `now` (the caller asserted `opens_at(weight) <=
    /// now`).
    pub(crate) fn started(&mut self, now: u64, weight: u32) {
        for lane in &mut self.lanes {
            lane.started(now, weight);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConcurrencyKey, RateWindow};
    use std::num::NonZeroU32;

    fn terms(delay_ms: u32, rates: &[(u32, u32)], burst: u32) -> Spacing {
        Spacing::new(&Concurrency {
            key: ConcurrencyKey::tool_name("k".to_owned()),
            limit: NonZeroU32::MAX,
            delay_ms,
            rates: rates
                .iter()
                .map(|&(count, per_ms)| RateWindow {
                    count,
                    per_ms,
                    burst,
                })
                .collect(),
            burst,
            weight: 1,
            retries: 3,
            max_wait_ms: 300_000,
            shared: false,
            adapt_min: None,
            path: None,
        })
    }

    /// Starts every entry as soon as the spacing lets it, from `from`: the start times.
    fn greedy(s: &mut Spacing, from: u64, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let at = s.opens_at(1).max(from);
                s.started(at, 1);
                at
            })
            .collect()
    }

    #[test]
    fn a_delay_is_the_last_start_plus_the_delay() {
        let mut s = terms(250, &[], 1);
        assert_eq!(s.opens_at(1), 0);
        s.started(1_000, 1);
        assert_eq!(s.opens_at(1), 1_250);
        s.started(5_000, 1); // long after: the gate counts from the last start only
        assert_eq!(s.opens_at(1), 5_250);
        assert_eq!(s.rested_at(), 5_250);
    }

    #[test]
    fn a_rate_of_one_per_window_is_a_delay() {
        let (mut d, mut r) = (terms(300, &[], 1), terms(0, &[(1, 300)], 1));
        for now in [0, 10, 300, 301, 900, 1_000, 1_300, 5_000] {
            assert_eq!(d.opens_at(1), r.opens_at(1));
            let at = d.opens_at(1).max(now);
            d.started(at, 1);
            r.started(at, 1);
        }
    }

    #[test]
    fn a_burst_goes_at_once_then_the_pace_holds() {
        let mut s = terms(0, &[(2, 1_000)], 3);
        // 3 at once, then one per 500 ms.
        assert_eq!(greedy(&mut s, 0, 6), [0, 0, 0, 500, 1_000, 1_500]);
    }

    #[test]
    fn several_windows_each_hold() {
        // 1/s and 3 per 10 s, burst 1: the slower window's pace wins.
        let mut s = terms(0, &[(1, 1_000), (3, 10_000)], 1);
        assert_eq!(greedy(&mut s, 0, 4), [0, 3_334, 6_667, 10_000]);
        // Idle in between: the pace restarts from the late start.
        assert_eq!(greedy(&mut s, 20_001, 2), [20_001, 23_335]);
    }

    #[test]
    fn fractional_intervals_round_the_opening_up_and_never_drift() {
        // 3 per 1000 ms: intervals of 333.3 ms open at 334, 667, 1000, 1334 ...
        let mut s = terms(0, &[(3, 1_000)], 1);
        let starts = greedy(&mut s, 0, 7);
        assert_eq!(starts, [0, 334, 667, 1_000, 1_334, 1_667, 2_000]);
        // No span of 1000 ms holds more than 3.
        for (i, &t) in starts.iter().enumerate() {
            assert!(starts[i..].iter().filter(|&&u| u < t + 1_000).count() <= 3);
        }
    }

    /// Starts at random times, each as soon as allowed: no span of `per_ms` ever holds more
    /// than `burst + count - 1` starts (`count` with a burst of 1), whatever the pace.
    #[test]
    fn no_window_ever_holds_more_than_its_terms() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % n
        };
        for _ in 0..300 {
            let (count, per_ms, burst) =
                (1 + next(7) as u32, 1 + next(400) as u32, 1 + next(4) as u32);
            let mut s = terms(0, &[(count, per_ms)], burst);
            let mut now = 0;
            let mut starts = Vec::new();
            for _ in 0..60 {
                now = s
                    .opens_at(1)
                    .max(now + next(3) * next(per_ms as u64 / 2 + 1));
                s.started(now, 1);
                starts.push(now);
            }
            let most = (burst + count - 1) as usize;
            for (i, &t) in starts.iter().enumerate() {
                let within = starts[i..]
                    .iter()
                    .filter(|&&u| u < t + u64::from(per_ms))
                    .count();
                assert!(
                    within <= most,
                    "{count}/{per_ms}ms burst {burst}: {starts:?}"
                );
            }
        }
    }

    #[test]
    fn a_heavy_start_costs_its_weight_on_rate_windows_and_one_on_a_delay() {
        // 10 per second, burst 10: a call of weight 5 and then one of weight 6 waits for one
        // unit to refill (100 ms); the delay of 20 ms counts each start once.
        let mut s = terms(20, &[(10, 1_000)], 10);
        assert_eq!(s.opens_at(5), 0);
        s.started(0, 5);
        assert_eq!(s.opens_at(5), 20);
        assert_eq!(s.opens_at(6), 100);
        s.started(100, 6);
        // Burst spent: one unit refills every 100 ms.
        assert_eq!(s.opens_at(1), 200);
        assert_eq!(s.opens_at(10), 1_100);
        assert_eq!(s.rested_at(), 1_100);
    }

    #[test]
    fn an_idle_key_rests_and_a_burst_refills() {
        let mut s = terms(0, &[(1, 100)], 2);
        assert_eq!(greedy(&mut s, 0, 2), [0, 0]);
        assert_eq!(s.rested_at(), 200);
        assert_eq!(greedy(&mut s, 1_000, 3), [1_000, 1_000, 1_100]);
    }

    #[test]
    fn extremes_saturate() {
        let mut s = terms(
            u32::MAX,
            &[(1_000_000_000, 1), (1, u32::MAX)],
            1_000_000_000,
        );
        s.started(u64::MAX - 1, 1);
        assert_eq!(s.opens_at(1), u64::MAX);
        assert_eq!(s.rested_at(), u64::MAX);
    }

    #[test]
    fn a_shared_key_keeps_no_lanes() {
        let mut c = terms(500, &[], 1);
        assert_ne!(c, Spacing::default());
        c = Spacing::new(&Concurrency {
            shared: true,
            ..Concurrency {
                key: ConcurrencyKey::tool_name("k".to_owned()),
                limit: NonZeroU32::MAX,
                delay_ms: 500,
                rates: Vec::new(),
                burst: 1,
                weight: 1,
                retries: 3,
                max_wait_ms: 300_000,
                shared: false,
                adapt_min: None,
                path: None,
            }
        });
        assert_eq!(c, Spacing::default());
    }
}
