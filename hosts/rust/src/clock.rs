//! The one clock a [`Driver`](crate::driver) and [`SharedKeys`](crate::shared) read: whole
//! milliseconds, monotonic, and a way to wait until a time on it.
//!
//! The default, [`TokioClock`], is tokio's clock, so `tokio::time::pause()` (tokio's
//! `test-util`) makes it virtual. A test that needs finer control (the scenario runner) brings
//! its own.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A future that completes at a time on a [`Clock`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A monotonic clock in whole milliseconds.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since some fixed start; never goes backwards.
    fn now_ms(&self) -> u64;
    /// Completes once [`now_ms`](Clock::now_ms) has reached `at_ms` (at once when it has).
    fn sleep_until(&self, at_ms: u64) -> Sleep;
}

/// tokio's clock, counted from when this value was made.
#[derive(Clone, Debug)]
pub struct TokioClock {
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose zero is now.
    pub fn new() -> Self {
        Self {
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn sleep_until(&self, at_ms: u64) -> Sleep {
        // A time past what an Instant holds is never reached: a year on is as good.
        let at = self
            .start
            .checked_add(Duration::from_millis(at_ms))
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(365 * 86_400));
        Box::pin(tokio::time::sleep_until(at))
    }
}
