//! Plain sentences for every wait and every settlement: what a UI shows and what a host hands
//! back to the model as a call's result. One owner, so every host says the same thing.

use std::fmt::Write as _;

use super::{AbortCause, Reason, Wait};

/// Running labels a sentence names before it says "and N more".
const NAMED_MAX: usize = 5;

/// A duration in milliseconds as a person reads it: `250 ms`, `4.2 s`, `3 min 5 s`.
pub fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => {
            let tenths = ms.div_ceil(100);
            if tenths.is_multiple_of(10) {
                format!("{} s", tenths / 10)
            } else {
                format!("{}.{} s", tenths / 10, tenths % 10)
            }
        }
        _ => {
            let s = ms.div_ceil(1_000);
            match (s / 3_600, s % 3_600 / 60, s % 60) {
                (0, m, 0) => format!("{m} min"),
                (0, m, s) => format!("{m} min {s} s"),
                (h, 0, _) => format!("{h} h"),
                (h, m, _) => format!("{h} h {m} min"),
            }
        }
    }
}

/// Why an approved entry waits, as one sentence starting `waiting: `. `now` is the
/// scheduler's clock (for waits on time).
pub fn wait_sentence(wait: &Wait, now: u64) -> String {
    match wait {
        Wait::BatchNotApproved { pending } => format!(
            "waiting: {pending} {} of this batch still {} a decision (nothing of a batch starts \
             before every call is approved or declined)",
            if *pending == 1 { "call" } else { "calls" },
            if *pending == 1 { "needs" } else { "need" },
        ),
        Wait::KeyFull {
            key,
            limit,
            running,
        } => {
            let mut s = if *limit == u32::MAX {
                format!("waiting: {key} is full ({} running", running.len())
            } else {
                format!(
                    "waiting: {key} is full ({} of {limit} running",
                    running.len()
                )
            };
            if !running.is_empty() {
                s.push_str(": ");
                s.push_str(&running[..running.len().min(NAMED_MAX)].join(", "));
                if running.len() > NAMED_MAX {
                    let _ = write!(s, " and {} more", running.len() - NAMED_MAX);
                }
            }
            s.push(')');
            s
        }
        Wait::Behind { label, key } => {
            format!("waiting: behind {label}, which comes first on {key}")
        }
        Wait::KeyPaused { key, until } => format!(
            "waiting: {key} is paused for {} more (a rate limit or the host asked to wait)",
            duration(until.saturating_sub(now))
        ),
        Wait::KeySpacing { key, until } => format!(
            "waiting: {key} spaces its starts; the next may start in {}",
            duration(until.saturating_sub(now))
        ),
        Wait::RetryAt { until } => format!(
            "waiting: rate limited; runs again in {}",
            duration(until.saturating_sub(now))
        ),
        Wait::PermitRequested { key } => {
            format!("waiting: for a permit on {key} from the store shared with other processes")
        }
        Wait::PermitGranted { key } => format!(
            "waiting: its permit on {key} is granted; it starts after the earlier calls on {key}"
        ),
    }
}

/// Why an entry was settled without (or after losing) its execution, as one sentence a host
/// can hand back to the model as the call's result. `label` is the entry's (`call` or
/// `call#i`), which names the operation a `stopped` one followed.
pub fn settled_sentence(reason: Reason, label: &str) -> String {
    match reason {
        Reason::Rejected => "not run: the user rejected this call".to_owned(),
        Reason::Skipped => "not run: this call was skipped".to_owned(),
        Reason::Failed => "not run: this call failed before it could start".to_owned(),
        // The host or the user: the scheduler cannot tell which.
        Reason::Cancelled => "not run: the batch was cancelled".to_owned(),
        Reason::Stopped { after } => {
            let call = label.split_once('#').map_or(label, |(call, _)| call);
            format!(
                "not run: stopped after {call}#{} failed (this tool stops a call's operations \
                 at the first failure)",
                after.saturating_sub(1)
            )
        }
        Reason::TimedOut {
            cause: AbortCause::Deadline,
        } => "no result: it ran longer than its time limit, was told to stop, and did not stop \
              in time; it may have had effects"
            .to_owned(),
        Reason::TimedOut {
            cause: AbortCause::Cancel,
        } => "no result: its batch was cancelled while it ran, and it did not stop in time; it \
              may have had effects"
            .to_owned(),
        Reason::Interrupted => {
            "not run again: it was running when the host stopped, and its result is unknown"
                .to_owned()
        }
        Reason::RateLimited {
            asked_s: Some(s), ..
        } => format!(
            "not run again: rate limited, and the endpoint asked to wait {}{}, longer than the \
             scheduler waits on this key",
            if s.get() == u32::MAX { "at least " } else { "" },
            duration(u64::from(s.get()) * 1_000),
        ),
        Reason::RateLimited {
            retries: 0,
            asked_s: None,
        } => "not run again: rate limited (no retries allowed); the endpoint asked to wait"
            .to_owned(),
        Reason::RateLimited {
            retries,
            asked_s: None,
        } => format!(
            "not run again: rate limited {} times ({retries} {} allowed); the endpoint asked \
             to wait",
            u64::from(retries) + 1,
            if retries == 1 { "retry" } else { "retries" },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test; // `#[test]` under wasm-bindgen-test

    #[test]
    fn durations_read_well() {
        for (ms, text) in [
            (0, "0 ms"),
            (999, "999 ms"),
            (1_000, "1 s"),
            (4_150, "4.2 s"),
            (59_999, "60 s"),
            (60_000, "1 min"),
            (185_000, "3 min 5 s"),
            (3_600_000, "1 h"),
            (5_400_000, "1 h 30 min"),
        ] {
            assert_eq!(duration(ms), text, "{ms}");
        }
    }

    #[test]
    fn sentences() {
        let full = Wait::KeyFull {
            key: "github".into(),
            limit: 2,
            running: vec!["g1".into(), "g2".into()],
        };
        assert_eq!(
            wait_sentence(&full, 0),
            "waiting: github is full (2 of 2 running: g1, g2)"
        );
        let many = Wait::KeyFull {
            key: "k".into(),
            limit: 7,
            running: (1..=7).map(|i| format!("c{i}")).collect(),
        };
        assert_eq!(
            wait_sentence(&many, 0),
            "waiting: k is full (7 of 7 running: c1, c2, c3, c4, c5 and 2 more)"
        );
        let paused = Wait::KeyPaused {
            key: "github".into(),
            until: 5_000,
        };
        assert_eq!(
            wait_sentence(&paused, 800),
            "waiting: github is paused for 4.2 s more (a rate limit or the host asked to wait)"
        );
        assert_eq!(
            settled_sentence(Reason::Stopped { after: 2 }, "del#3"),
            "not run: stopped after del#1 failed (this tool stops a call's operations at the \
             first failure)"
        );
        assert_eq!(
            settled_sentence(
                Reason::RateLimited {
                    retries: 1,
                    asked_s: None
                },
                "g"
            ),
            "not run again: rate limited 2 times (1 retry allowed); the endpoint asked to wait"
        );
        assert_eq!(
            settled_sentence(
                Reason::RateLimited {
                    retries: 0,
                    asked_s: None
                },
                "g"
            ),
            "not run again: rate limited (no retries allowed); the endpoint asked to wait"
        );
        let asked = |s| Reason::RateLimited {
            retries: 2,
            asked_s: std::num::NonZeroU32::new(s),
        };
        assert_eq!(
            settled_sentence(asked(7_200), "g"),
            "not run again: rate limited, and the endpoint asked to wait 2 h, longer than the \
             scheduler waits on this key"
        );
        assert_eq!(
            settled_sentence(asked(u32::MAX), "g"),
            "not run again: rate limited, and the endpoint asked to wait at least 1193046 h 28 \
             min, longer than the scheduler waits on this key"
        );
    }
}
