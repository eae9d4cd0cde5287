//! The store's grant rule, decided here for every store that applies it in the host (SQLite's
//! loop between statements; Redis runs the same lines inside its script, and
//! `tests/shared/grant-rule.txt` holds one table both are tested against).
//!
//! After a store removed the tickets whose lease ended, it asks [`decide`] about the key's
//! earliest waiting ticket (lowest `seq`), grants it when told [`Decision::Grant`], and asks
//! again, until the answer is anything else:
//!
//! ```text
//! while the key's earliest waiting ticket exists,
//!   and fewer than ITS limit tickets of the key are granted,
//!   and now >= max(last grant + ITS delay (when the delay > 0), paused until):
//!   grant it
//! ```

use crate::limits::{SHARED_DELAY_MS_MAX, SHARED_LIMIT_MAX};

/// The terms of the key's earliest waiting ticket: its own terms decide its grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// Tickets of the key that may be granted at once (1 ..= [`SHARED_LIMIT_MAX`]).
    pub limit: u32,
    /// The least time between two grants on the key (0 ..= [`SHARED_DELAY_MS_MAX`]).
    pub delay_ms: u32,
}

/// A key as the store holds it, times on the store's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyState {
    /// Tickets of the key granted now.
    pub held: u32,
    /// The time of the key's last grant (0: none yet).
    pub last_grant_ms: u64,
    /// No grant before this time (0: no pause).
    pub paused_until_ms: u64,
}

/// What the store does with the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Grant it now (then ask again: the next head may be granted too).
    Grant,
    /// No ticket waits.
    Empty,
    /// The key holds its limit: the head waits for a release (or an expired lease).
    Full,
    /// Only the delay or a pause holds the head: it may be granted after `retry_ms`.
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
    }
}

error_type!(
    /// A refused [`decide`].
    GrantError,
    GrantErrorCode
);

/// The grant rule for the key's earliest waiting ticket `head` (`None`: none waits) at the
/// store's `now_ms`.
pub fn decide(head: Option<Head>, key: KeyState, now_ms: u64) -> Result<Decision, GrantError> {
    let Some(head) = head else {
        return Ok(Decision::Empty);
    };
    if head.limit == 0 || head.limit > SHARED_LIMIT_MAX {
        return Err(GrantError::new(
            GrantErrorCode::LimitOutOfRange,
            format!("limit {} is not in 1 ..= {SHARED_LIMIT_MAX}", head.limit),
        ));
    }
    if head.delay_ms > SHARED_DELAY_MS_MAX {
        return Err(GrantError::new(
            GrantErrorCode::DelayOutOfRange,
            format!("delay {} ms is above {SHARED_DELAY_MS_MAX}", head.delay_ms),
        ));
    }
    if key.held >= head.limit {
        return Ok(Decision::Full);
    }
    let gate_ms = gate_ms(head.delay_ms, key.last_grant_ms, key.paused_until_ms);
    if now_ms < gate_ms {
        return Ok(Decision::Wait {
            retry_ms: gate_ms - now_ms,
        });
    }
    Ok(Decision::Grant)
}

/// The time from which the head may be granted: the pause's end, and, with a delay, the last
/// grant plus the delay.
fn gate_ms(delay_ms: u32, last_grant_ms: u64, paused_until_ms: u64) -> u64 {
    if delay_ms == 0 {
        return paused_until_ms;
    }
    paused_until_ms.max(last_grant_ms.saturating_add(u64::from(delay_ms)))
}
