//! Adaptive limits (AIMD): a key declared `limit = { max, min, adapt = "aimd" }` starts at its
//! ceiling, halves (never below its floor) each time an execution on it ends rate-limited, and
//! grows by one (never past its ceiling) after as many clean ends (`ok` or `failed`) as its
//! limit then is. Only the ends the host reports move it, so it is deterministic and a replay
//! of the same events gives the same limits.
//!
//! A limit that drops below the executions already running takes no slot back: those run to
//! their end, and nothing more starts until the key is below its new limit.

/// A key's adaptation: its floor, its ceiling, and the clean ends since its limit last moved.
/// Only the methods below write it; the key's limit is theirs to move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Aimd {
    min: u32,
    max: u32,
    clean: u32,
    /// What last moved the limit (`None`: it never moved).
    last: Option<Moved>,
}

/// Why an adaptive limit is where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Moved {
    /// An execution ended rate-limited: the limit halved.
    Halved,
    /// A limit's worth of clean ends: the limit grew by one.
    Grew,
}

impl Aimd {
    pub(crate) fn new(min: u32, max: u32) -> Self {
        debug_assert!(
            1 <= min && min <= max,
            "an adaptive limit out of its bounds"
        );
        Self {
            min,
            max,
            clean: 0,
            last: None,
        }
    }

    /// The floor and the ceiling.
    pub(crate) fn bounds(&self) -> (u32, u32) {
        (self.min, self.max)
    }

    /// What last moved the limit.
    pub(crate) fn last(&self) -> Option<Moved> {
        self.last
    }

    /// An execution ended rate-limited: the limit halves, not below the floor.
    pub(crate) fn rate_limited(&mut self, limit: &mut u32) {
        *limit = (*limit / 2).max(self.min);
        self.clean = 0;
        self.last = Some(Moved::Halved);
        debug_assert!((self.min..=self.max).contains(limit));
    }

    /// An execution ended clean: after a limit's worth, the limit grows by one, not past the
    /// ceiling. Whether it grew (the key may then release more).
    pub(crate) fn clean_end(&mut self, limit: &mut u32) -> bool {
        if *limit >= self.max {
            self.clean = 0;
            return false;
        }
        self.clean += 1;
        if self.clean < *limit {
            return false;
        }
        *limit += 1;
        self.clean = 0;
        self.last = Some(Moved::Grew);
        debug_assert!((self.min..=self.max).contains(limit));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_to_the_floor_and_grows_by_one_per_window_to_the_ceiling() {
        let (mut a, mut limit) = (Aimd::new(2, 8), 8);
        a.rate_limited(&mut limit);
        assert_eq!((limit, a.last()), (4, Some(Moved::Halved)));
        for want in [2, 2, 2] {
            a.rate_limited(&mut limit);
            assert_eq!(limit, want);
        }
        // Two clean ends grow 2 to 3; three more grow 3 to 4.
        assert!(!a.clean_end(&mut limit));
        assert!(a.clean_end(&mut limit));
        assert_eq!((limit, a.last()), (3, Some(Moved::Grew)));
        assert!(!a.clean_end(&mut limit));
        assert!(!a.clean_end(&mut limit));
        assert!(a.clean_end(&mut limit));
        assert_eq!(limit, 4);
        // A rate limit mid-window starts the count over.
        assert!(!a.clean_end(&mut limit));
        a.rate_limited(&mut limit);
        assert_eq!(limit, 2);
        assert!(!a.clean_end(&mut limit));
        assert!(a.clean_end(&mut limit));
        assert_eq!(limit, 3);
    }

    #[test]
    fn never_grows_past_the_ceiling() {
        let (mut a, mut limit) = (Aimd::new(1, 3), 3);
        for _ in 0..20 {
            assert!(!a.clean_end(&mut limit));
        }
        assert_eq!(limit, 3);
        a.rate_limited(&mut limit);
        assert_eq!(limit, 1);
        let grew = (0..20).filter(|_| a.clean_end(&mut limit)).count();
        assert_eq!((grew, limit), (2, 3));
    }
}
