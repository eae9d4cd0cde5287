//! The store's grant rule, decided here for every store that applies it in the host (the
//! memory and SQLite stores, between their statements; the Redis script and the Postgres
//! functions run the same arithmetic inside the store, and `tests/shared/grant-rule.txt` holds
//! one table all of them are tested against).
//!
//! After a store removed the tickets whose lease ended, it asks [`decide`] about the key's
//! earliest waiting ticket (lowest `seq`), grants it when told [`Decision::Grant`] (writing the
//! arrival times the grant carries), and asks again, until the answer is anything else:
//!
//! ```text
//! while the key's earliest waiting ticket exists,
//!   and fewer than ITS limit tickets of the key are granted,
//!   and now >= max(last grant + ITS delay (when the delay > 0), paused until,
//!                  the time each of ITS rate windows lets ITS weight through):
//!   grant it, and move each of its windows' arrival times past the grant
//! ```
//!
//! A rate window is GCRA, exactly as a local key's (`schedule/rate.rs`, the one owner of the
//! arithmetic): the store keeps, per window (`count` starts per `per_ms`), the theoretical
//! arrival time as whole milliseconds `at_ms` plus `rest / count` of one (`rest < count`), so
//! every number a store holds or computes stays below 2^53 (Redis's Lua numbers are doubles):
//! a window's count and burst are at most [`SHARED_RATE_COUNT_MAX`], and `burst * per_ms`
//! is then below 2^53 for any window a config can name. A store keeps the arrival times of
//! each window its tickets named (by `count` and `per_ms`), and forgets a key once every
//! arrival time is two milliseconds behind its clock (a window then paces a start as a fresh
//! one would: [`Arrival::rested_at`]).

use crate::config::RateWindow;
use crate::limits::{
    RATE_WINDOWS_MAX, SHARED_DELAY_MS_MAX, SHARED_LIMIT_MAX, SHARED_RATE_COUNT_MAX,
};
use crate::schedule::rate::{window_opens_at, window_started};

/// The terms of the key's earliest waiting ticket: its own terms decide its grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// Tickets of the key that may be granted at once (1 ..= [`SHARED_LIMIT_MAX`]).
    pub limit: u32,
    /// The least time between two grants on the key (0 ..= [`SHARED_DELAY_MS_MAX`]).
    pub delay_ms: u32,
    /// The key's rate windows (at most [`RATE_WINDOWS_MAX`], each window at most once; count
    /// and burst 1 ..= [`SHARED_RATE_COUNT_MAX`], `per_ms` at least 1).
    pub rates: Vec<RateWindow>,
    /// The units the ticket's start costs in each rate window (1 ..= the smallest burst; 1
    /// without rate windows).
    pub weight: u32,
}

impl Head {
    /// A head with a limit and a delay only.
    pub fn plain(limit: u32, delay_ms: u32) -> Self {
        Self {
            limit,
            delay_ms,
            rates: Vec::new(),
            weight: 1,
        }
    }
}

/// One rate window's theoretical arrival time at the store: `at_ms + rest / count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// The window's count ...
    pub count: u32,
    /// ... and length: the window this arrival time belongs to.
    pub per_ms: u32,
    /// Whole milliseconds of the arrival time (0: the window never granted).
    pub at_ms: u64,
    /// The fraction past `at_ms`, in `1 / count` of a millisecond (`rest < count`).
    pub rest: u32,
}

impl Arrival {
    fn tat_n(self) -> u128 {
        u128::from(self.at_ms) * u128::from(self.count) + u128::from(self.rest)
    }

    fn from_tat_n(window: RateWindow, tat_n: u128) -> Self {
        let count = u128::from(window.count);
        // The remainder is below `count`, a u32.
        let rest = u32::try_from(tat_n % count).unwrap_or(u32::MAX);
        Self {
            count: window.count,
            per_ms: window.per_ms,
            at_ms: u64::try_from(tat_n / count).unwrap_or(u64::MAX),
            rest,
        }
    }

    /// From this time on the window paces a start as if it had never granted: a store may
    /// forget the arrival time then.
    pub fn rested_at(self) -> u64 {
        self.at_ms.saturating_add(2)
    }
}

/// A key as the store holds it, times on the store's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyState {
    /// Tickets of the key granted now.
    pub held: u32,
    /// The time of the key's last grant (0: none yet).
    pub last_grant_ms: u64,
    /// No grant before this time (0: no pause).
    pub paused_until_ms: u64,
    /// The arrival times the store keeps for the key's windows (a window without one never
    /// granted); those of windows the head does not name are ignored.
    pub arrivals: Vec<Arrival>,
}

/// What the store does with the head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Grant it now, write these arrival times (one per head's rate window, in its order),
    /// then ask again: the next head may be granted too.
    Grant {
        /// The head's windows' arrival times after this grant.
        arrivals: Vec<Arrival>,
        /// From this time on, these windows pace a grant as fresh ones would: a store keeps
        /// the key until then at least (the latest [`Arrival::rested_at`]; 0 without windows).
        rested_ms: u64,
    },
    /// No ticket waits.
    Empty,
    /// The key holds its limit: the head waits for a release (or an expired lease).
    Full,
    /// Only the delay, a rate window or a pause holds the head: it may be granted after
    /// `retry_ms`.
    Wait {
        /// Milliseconds from now until the gate opens (at least 1).
        retry_ms: u64,
    },
}

codes! {
    /// Why [`decide`] refused its input (a store row no client should have written).
    GrantErrorCode {
        /// The head's limit is 0 or above [`SHARED_LIMIT_MAX`].
        LimitOutOfRange => "limit-out-of-range",
        /// The head's delay is above [`SHARED_DELAY_MS_MAX`].
        DelayOutOfRange => "delay-out-of-range",
        /// A rate window's count, burst or length is out of range, a window is named twice,
        /// or there are more than [`RATE_WINDOWS_MAX`].
        RateOutOfRange => "rate-out-of-range",
        /// The weight is 0, above the smallest burst, or above 1 without rate windows.
        WeightOutOfRange => "weight-out-of-range",
        /// An arrival time's `rest` is not below its count.
        ArrivalOutOfRange => "arrival-out-of-range",
    }
}

error_type!(
    /// A refused [`decide`].
    GrantError,
    GrantErrorCode
);

/// The grant rule for the key's earliest waiting ticket `head` (`None`: none waits) at the
/// store's `now_ms`.
pub fn decide(head: Option<&Head>, key: &KeyState, now_ms: u64) -> Result<Decision, GrantError> {
    let Some(head) = head else {
        return Ok(Decision::Empty);
    };
    check(head, key)?;
    if key.held >= head.limit {
        return Ok(Decision::Full);
    }
    let mut gate_ms = key.paused_until_ms;
    if head.delay_ms > 0 {
        gate_ms = gate_ms.max(key.last_grant_ms.saturating_add(u64::from(head.delay_ms)));
    }
    for &w in &head.rates {
        gate_ms = gate_ms.max(window_opens_at(w, tat_n(key, w), head.weight));
    }
    if now_ms < gate_ms {
        return Ok(Decision::Wait {
            retry_ms: gate_ms - now_ms,
        });
    }
    let arrivals: Vec<Arrival> = head
        .rates
        .iter()
        .map(|&w| Arrival::from_tat_n(w, window_started(w, tat_n(key, w), now_ms, head.weight)))
        .collect();
    let rested_ms = arrivals.iter().map(|a| a.rested_at()).max().unwrap_or(0);
    Ok(Decision::Grant {
        arrivals,
        rested_ms,
    })
}

/// The arrival time the store keeps for window `w` (0: none).
fn tat_n(key: &KeyState, w: RateWindow) -> u128 {
    key.arrivals
        .iter()
        .find(|a| a.count == w.count && a.per_ms == w.per_ms)
        .map_or(0, |a| a.tat_n())
}

fn check(head: &Head, key: &KeyState) -> Result<(), GrantError> {
    let refuse = |code, message: String| Err(GrantError::new(code, message));
    if head.limit == 0 || head.limit > SHARED_LIMIT_MAX {
        return refuse(
            GrantErrorCode::LimitOutOfRange,
            format!("limit {} is not in 1 ..= {SHARED_LIMIT_MAX}", head.limit),
        );
    }
    if head.delay_ms > SHARED_DELAY_MS_MAX {
        return refuse(
            GrantErrorCode::DelayOutOfRange,
            format!("delay {} ms is above {SHARED_DELAY_MS_MAX}", head.delay_ms),
        );
    }
    if head.rates.len() > RATE_WINDOWS_MAX {
        return refuse(
            GrantErrorCode::RateOutOfRange,
            format!(
                "{} rate windows, above {RATE_WINDOWS_MAX}",
                head.rates.len()
            ),
        );
    }
    for (i, w) in head.rates.iter().enumerate() {
        let range = 1..=SHARED_RATE_COUNT_MAX;
        if !range.contains(&w.count) || !range.contains(&w.burst) || w.per_ms == 0 {
            return refuse(
                GrantErrorCode::RateOutOfRange,
                format!(
                    "rate window {}/{} ms with burst {} is not a count and burst in 1 ..= \
                     {SHARED_RATE_COUNT_MAX} per at least 1 ms",
                    w.count, w.per_ms, w.burst
                ),
            );
        }
        if head.rates[..i]
            .iter()
            .any(|o| o.count == w.count && o.per_ms == w.per_ms)
        {
            return refuse(
                GrantErrorCode::RateOutOfRange,
                format!("rate window {}/{} ms is named twice", w.count, w.per_ms),
            );
        }
    }
    let heaviest = head.rates.iter().map(|w| w.burst).min().unwrap_or(1);
    if head.weight == 0 || head.weight > heaviest {
        return refuse(
            GrantErrorCode::WeightOutOfRange,
            format!(
                "weight {} is not in 1 ..= {heaviest} (the smallest burst, or 1 without rate \
                 windows)",
                head.weight
            ),
        );
    }
    if let Some(a) = key
        .arrivals
        .iter()
        .find(|a| a.count == 0 || a.rest >= a.count)
    {
        return refuse(
            GrantErrorCode::ArrivalOutOfRange,
            format!(
                "arrival time {} ms + {}/{} is not a whole time and a fraction below 1",
                a.at_ms, a.rest, a.count
            ),
        );
    }
    Ok(())
}
