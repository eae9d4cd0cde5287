//! Adaptive limits (AIMD): a key declared `limit = { max, min, adapt = "aimd" }` starts at its
//! ceiling, halves (never below its floor) when an execution on it ends rate-limited, and grows
//! by one (never past its ceiling) after as many clean ends (`ok` or `failed`) as its limit then
//! is. Only the ends the host reports move it, so it is deterministic and a replay of the same
//! events gives the same limits.
//!
//! Each halving starts a new generation, and only executions that started in the current one
//! move the limit: a storm of 429s from executions started together halves it once, not once
//! per execution (what they say was said under the old limit), and their clean ends do not
//! count towards growing the new one.
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
    /// The generation: how many times the limit halved.
    generation: u32,
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
            generation: 0,
            last: None,
        }
    }

    /// The current generation, which an execution starting now belongs to.
    pub(crate) fn generation(&self) -> u32 {
        self.generation
    }

    /// The floor and the ceiling.
    pub(crate) fn bounds(&self) -> (u32, u32) {
        (self.min, self.max)
    }

    /// What last moved the limit.
    pub(crate) fn last(&self) -> Option<Moved> {
        self.last
    }

    /// An execution of generation `started` ended rate-limited: the limit halves, not below
    /// the floor, unless the execution started before the last halving.
    pub(crate) fn rate_limited(&mut self, limit: &mut u32, started: u32) {
        if started != self.generation {
            return;
        }
        self.generation += 1;
        *limit = (*limit / 2).max(self.min);
        self.clean = 0;
        self.last = Some(Moved::Halved);
        debug_assert!((self.min..=self.max).contains(limit));
    }

    /// An execution of generation `started` ended clean: after a limit's worth of those of the
    /// current generation, the limit grows by one, not past the ceiling. Whether it grew (the
    /// key may then release more).
    pub(crate) fn clean_end(&mut self, limit: &mut u32, started: u32) -> bool {
        if started != self.generation {
            return false;
        }
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

    /// A 429 from an execution of the current generation.
    fn halve(a: &mut Aimd, limit: &mut u32) {
        let started = a.generation();
        a.rate_limited(limit, started);
    }

    #[test]
    fn halves_to_the_floor_and_grows_by_one_per_window_to_the_ceiling() {
        let (mut a, mut limit) = (Aimd::new(2, 8), 8);
        halve(&mut a, &mut limit);
        assert_eq!((limit, a.last()), (4, Some(Moved::Halved)));
        for want in [2, 2, 2] {
            halve(&mut a, &mut limit);
            assert_eq!(limit, want);
        }
        // Two clean ends grow 2 to 3; three more grow 3 to 4.
        assert!(!a.clean_end(&mut limit, a.generation()));
        assert!(a.clean_end(&mut limit, a.generation()));
        assert_eq!((limit, a.last()), (3, Some(Moved::Grew)));
        assert!(!a.clean_end(&mut limit, a.generation()));
        assert!(!a.clean_end(&mut limit, a.generation()));
        assert!(a.clean_end(&mut limit, a.generation()));
        assert_eq!(limit, 4);
        // A rate limit mid-window starts the count over.
        assert!(!a.clean_end(&mut limit, a.generation()));
        halve(&mut a, &mut limit);
        assert_eq!(limit, 2);
        assert!(!a.clean_end(&mut limit, a.generation()));
        assert!(a.clean_end(&mut limit, a.generation()));
        assert_eq!(limit, 3);
    }

    #[test]
    fn a_storm_from_one_generation_halves_once_and_its_ends_do_not_grow_the_next() {
        let (mut a, mut limit) = (Aimd::new(1, 8), 8);
        let started = a.generation(); // eight executions start together
        for _ in 0..5 {
            a.rate_limited(&mut limit, started);
        }
        assert_eq!(limit, 4);
        for _ in 0..3 {
            assert!(!a.clean_end(&mut limit, started));
        }
        assert_eq!(limit, 4);
        // One started after the halving counts: a second 429 halves again.
        a.rate_limited(&mut limit, a.generation());
        assert_eq!(limit, 2);
    }

    #[test]
    fn never_grows_past_the_ceiling() {
        let (mut a, mut limit) = (Aimd::new(1, 3), 3);
        for _ in 0..20 {
            assert!(!a.clean_end(&mut limit, a.generation()));
        }
        assert_eq!(limit, 3);
        halve(&mut a, &mut limit);
        assert_eq!(limit, 1);
        let grew = (0..20)
            .filter(|_| a.clean_end(&mut limit, a.generation()))
            .count();
        assert_eq!((grew, limit), (2, 3));
    }
}
