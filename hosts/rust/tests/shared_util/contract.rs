//! The store contract (SHARED.md, "The store contract") as checks generic over a store and its
//! time, so every store runs the same ones: the memory store on tokio's paused clock, where
//! every time is exact (`div` 1, `slack_ms` 0: the checks as first written for it), and the
//! SQLite store on real time (CLOCK_MONOTONIC cannot be paused), its durations divided by `div`
//! and a wake-up or an expiry allowed `slack_ms` late, since it polls.

use std::sync::Arc;

use turnstile::clock::TokioClock;
use turnstile::shared::{
    Arrival, RateWindow, Removal, Store, StoreError, Terms, TicketState, Watcher,
};

use super::{Recorder, run_until, terms};

/// A store under test and the clock its test runs on.
pub trait Harness {
    /// The store.
    fn store(&self) -> &dyn Store;
    /// The test's clock (zero: when the harness was made).
    fn clock(&self) -> &Arc<TokioClock>;
    /// The store's time at the clock's zero.
    fn base_ms(&self) -> u64;
    /// Every duration of a check is divided by this (1: as written).
    fn div(&self) -> u64 {
        1
    }
    /// How late a wake-up or an expiry may be seen, in ms (0: exactly on time).
    fn slack_ms(&self) -> u64 {
        0
    }
    /// How far the store's clock may be off the test's (0: one clock).
    fn skew_ms(&self) -> u64 {
        0
    }
    /// A watcher of `tickets` that records every wake-up (a polling store reports a ticket's
    /// state at every poll while it is watched: it records each state once).
    fn recorder(&self, tickets: &[&str]) -> Arc<Recorder> {
        Recorder::new(self.clock(), tickets)
    }
}

/// `ms` of a check, as this harness runs it.
fn t(h: &impl Harness, ms: u64) -> u64 {
    ms / h.div()
}

fn lease(h: &impl Harness, ms: u64) -> u32 {
    u32::try_from(t(h, ms)).unwrap()
}

async fn at(h: &impl Harness, ms: u64) {
    run_until(h.clock(), ms).await;
}

fn watcher(r: &Arc<Recorder>) -> Arc<dyn Watcher> {
    r.clone()
}

/// `seen` (`(ms, states)` per wake-up) is `expected`, each time at most `slack_ms` late and
/// `skew_ms` early (exactly, on an exact harness).
#[track_caller]
fn assert_seen(h: &impl Harness, seen: &[(u64, String)], expected: &[(u64, &str)]) {
    let what: Vec<&str> = seen.iter().map(|(_, s)| s.as_str()).collect();
    let wanted: Vec<&str> = expected.iter().map(|(_, s)| *s).collect();
    assert_eq!(what, wanted, "{seen:?}");
    for ((got, _), (want, _)) in seen.iter().zip(expected) {
        assert!(
            *got + h.skew_ms() >= *want && *got <= want + h.slack_ms(),
            "seen at {got}, expected at {want} (slack {} ms): {seen:?}",
            h.slack_ms()
        );
    }
}

/// `got` (a time on the store's clock) is `base + want`, within the harness's slack.
#[track_caller]
fn assert_store_time(h: &impl Harness, got: u64, want: u64) {
    let want = h.base_ms() + want;
    assert!(
        got + h.skew_ms() >= want && got <= want + h.slack_ms(),
        "{got} is not {want} (slack {} ms)",
        h.slack_ms()
    );
}

fn state_of(s: &TicketState) -> (String, &'static str, Option<u64>) {
    match s {
        TicketState::Waiting { ticket, seq, .. } => (ticket.clone(), "waiting", Some(*seq)),
        TicketState::Granted { ticket, seq, .. } => (ticket.clone(), "granted", Some(*seq)),
        TicketState::Lost { ticket } => (ticket.clone(), "lost", None),
    }
}

fn retry_ms(s: &TicketState) -> Option<u64> {
    match s {
        TicketState::Waiting { retry_ms, .. } => *retry_ms,
        _ => None,
    }
}

/// A retry of `ms` of a check, as the store's clock may give it.
#[track_caller]
fn assert_retry(h: &impl Harness, s: &TicketState, ms: u64) {
    let got = retry_ms(s).unwrap_or_else(|| panic!("no retry: {s:?}"));
    let want = t(h, ms);
    assert!(
        got <= want + h.skew_ms() && got + h.slack_ms() >= want,
        "retry {got}, expected {want}: {s:?}"
    );
}

pub async fn a_closed_store_fails_every_operation_with_store_unavailable(h: &impl Harness) {
    let store = h.store();
    store.close().await.unwrap();
    let t = terms(1, 0, 3000);
    let tickets = vec!["t-1".to_owned()];
    let errors = vec![
        store.request("k", "t-1", &t).await.unwrap_err(),
        store.renew("k", &tickets).await.unwrap_err(),
        store.release("k", "t-1").await.unwrap_err(),
        store.abandon("k", "t-1").await.unwrap_err(),
        store.pause("k", 10).await.unwrap_err(),
        store.inspect("k").await.unwrap_err(),
    ];
    for e in errors {
        let StoreError::Unavailable {
            store: kind,
            message,
        } = &e
        else {
            panic!("not unavailable: {e:?}");
        };
        assert_eq!(kind, store.kind());
        assert!(message.contains("closed"), "{message}");
        assert_eq!(e.code(), "store-unavailable");
    }
}

pub async fn terms_no_client_writes_are_refused_by_the_engines_rule_and_never_enter_the_key(
    h: &impl Harness,
) {
    let store = h.store();
    let e = store
        .request("k", "t-1", &terms(0, 0, 3000))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Failed { message, .. } if message.contains("limit 0")),
        "{e:?}"
    );
    let bad_rates = [
        (
            RateWindow {
                count: 0,
                per_ms: 1000,
                burst: 1,
            },
            1,
            "rate window 0/1000",
        ),
        (
            RateWindow {
                count: 1_000_001,
                per_ms: 1000,
                burst: 1,
            },
            1,
            "rate window",
        ),
        (
            RateWindow {
                count: 1,
                per_ms: 1000,
                burst: 2,
            },
            3,
            "weight 3",
        ),
    ];
    for (w, weight, pattern) in bad_rates {
        let t = Terms {
            rates: vec![w],
            weight,
            ..terms(1, 0, 3000)
        };
        let e = store.request("r", "t-1", &t).await.unwrap_err();
        assert!(
            matches!(&e, StoreError::Failed { message, .. } if message.contains(pattern)),
            "{pattern}: {e:?}"
        );
    }
    let granted = store.request("k", "t-2", &terms(1, 0, 3000)).await.unwrap();
    assert!(
        matches!(
            granted,
            TicketState::Granted {
                seq: 1,
                grant: 1,
                ..
            }
        ),
        "{granted:?}"
    );
}

pub async fn a_lease_ends_when_its_heartbeat_stops_and_the_next_ticket_is_granted_then(
    h: &impl Harness,
) {
    let store = h.store();
    let l = lease(h, 3000);
    store.request("k", "dead-1", &terms(1, 0, l)).await.unwrap();
    store.request("k", "live-1", &terms(1, 0, l)).await.unwrap();
    let seen = h.recorder(&["live-1"]);
    let _watch = store.watch("k", watcher(&seen));
    for ms in [t(h, 1000), t(h, 2000), t(h, 3000) - 1] {
        at(h, ms).await;
        store.renew("k", &["live-1".to_owned()]).await.unwrap(); // the waiter's heartbeat only
    }
    at(h, t(h, 5000)).await;
    assert_seen(h, &seen.seen(), &[(t(h, 3000), "live-1 granted")]);
    let dead = store.renew("k", &["dead-1".to_owned()]).await.unwrap();
    assert_eq!(
        dead,
        vec![TicketState::Lost {
            ticket: "dead-1".to_owned()
        }]
    );
    assert_eq!(store.release("k", "dead-1").await.unwrap(), Removal::Lost);
}

pub async fn fifo_by_arrival_across_clients_never_over_the_limit_and_a_retried_request_only_renews(
    h: &impl Harness,
) {
    let store = h.store();
    let mut states = Vec::new();
    for t in ["a-1", "b-1", "a-2", "c-1"] {
        states.push(state_of(
            &store.request("k", t, &terms(2, 0, 3000)).await.unwrap(),
        ));
    }
    let expected = [
        ("a-1", "granted", 1),
        ("b-1", "granted", 2),
        ("a-2", "waiting", 3),
        ("c-1", "waiting", 4),
    ];
    let expected: Vec<_> = expected
        .iter()
        .map(|(t, s, q)| ((*t).to_owned(), *s, Some(*q)))
        .collect();
    assert_eq!(states, expected);
    let again = store.request("k", "a-2", &terms(2, 0, 3000)).await.unwrap();
    assert_eq!(
        state_of(&again).2,
        Some(3),
        "a retried request keeps its place"
    );
    assert_eq!(store.release("k", "b-1").await.unwrap(), Removal::Released);
    let after = store
        .renew("k", &["a-2".to_owned(), "c-1".to_owned()])
        .await
        .unwrap();
    assert!(
        matches!(after[0], TicketState::Granted { grant: 3, .. }),
        "{after:?}"
    );
    assert!(matches!(after[1], TicketState::Waiting { .. }), "{after:?}");
    assert_eq!(store.abandon("k", "c-1").await.unwrap(), Removal::Withdrawn);
    assert_eq!(store.release("k", "c-1").await.unwrap(), Removal::Lost);
    let seen = store.inspect("k").await.unwrap();
    let held: Vec<&str> = seen.held.iter().map(|h| h.ticket.as_str()).collect();
    assert_eq!(held, ["a-1", "a-2"]);
    assert!(seen.waiting.is_empty());
}

pub async fn a_renewal_extends_a_lease_by_the_tickets_own_lease(h: &impl Harness) {
    let store = h.store();
    store
        .request("k", "a-1", &terms(1, 0, lease(h, 1000)))
        .await
        .unwrap();
    // Renewed 100 ms before its lease ends (or, on real time, a slack before).
    let renew_at = t(h, 1000) - t(h, 100).max(h.slack_ms());
    let expiry = renew_at + t(h, 1000);
    at(h, renew_at).await;
    store.renew("k", &["a-1".to_owned()]).await.unwrap();
    at(h, expiry - 1).await;
    let expires_ms = store.inspect("k").await.unwrap().held[0].expires_ms;
    assert_store_time(h, expires_ms, expiry);
    at(h, expiry + h.slack_ms()).await;
    let tickets = ["a-1".to_owned()];
    if h.slack_ms() > 0 {
        // A store that purges only in its writes: a renewal that comes too late finds nothing.
        let late = store.renew("k", &tickets).await.unwrap();
        assert!(matches!(late[0], TicketState::Lost { .. }), "{late:?}");
    }
    assert!(store.inspect("k").await.unwrap().held.is_empty());
}

pub async fn the_delay_between_grants_is_kept_by_the_store_the_head_waits_with_retry_ms(
    h: &impl Harness,
) {
    let store = h.store();
    let delay = lease(h, 100);
    let a = store
        .request("k", "a-1", &terms(5, delay, 3000))
        .await
        .unwrap();
    assert!(matches!(a, TicketState::Granted { .. }));
    let b = store
        .request("k", "b-1", &terms(5, delay, 3000))
        .await
        .unwrap();
    assert_eq!(state_of(&b).1, "waiting");
    assert_retry(h, &b, 100);
    let b2 = store
        .request("k", "b-2", &terms(5, delay, 3000))
        .await
        .unwrap();
    assert_eq!(retry_ms(&b2), None, "only the head has a retry");
    let seen = h.recorder(&["b-1", "b-2"]);
    let _watch = store.watch("k", watcher(&seen));
    at(h, t(h, 1000)).await;
    assert_seen(
        h,
        &seen.seen(),
        &[(t(h, 100), "b-1 granted"), (t(h, 200), "b-2 granted")],
    );
}

pub async fn rate_windows_a_burst_at_once_then_the_pace_a_weight_costs_that_many_forgotten_once_rested(
    h: &impl Harness,
) {
    let store = h.store();
    let per_ms = lease(h, 1000);
    let rated = |weight| Terms {
        rates: vec![RateWindow {
            count: 2,
            per_ms,
            burst: 2,
        }],
        weight,
        ..terms(100, 0, 3000)
    };
    let mut first = Vec::new();
    for t in ["a-1", "b-1", "a-2"] {
        let s = store.request("k", t, &rated(1)).await.unwrap();
        first.push(s);
    }
    let states: Vec<&str> = first.iter().map(|s| state_of(s).1).collect();
    assert_eq!(states, ["granted", "granted", "waiting"]);
    assert_eq!((retry_ms(&first[0]), retry_ms(&first[1])), (None, None));
    assert_retry(h, &first[2], 500);
    let b2 = store.request("k", "b-2", &rated(2)).await.unwrap();
    assert_eq!(state_of(&b2).1, "waiting");
    let seen = h.recorder(&["a-2", "b-2"]);
    let _watch = store.watch("k", watcher(&seen));
    at(h, t(h, 1500) + h.slack_ms()).await;
    assert_seen(
        h,
        &seen.seen(),
        &[(t(h, 500), "a-2 granted"), (t(h, 1500), "b-2 granted")],
    );
    for t in ["a-1", "b-1", "a-2", "b-2"] {
        store.release("k", t).await.unwrap();
    }
    // Kept until the window rested (2 ms after its arrival time).
    at(h, t(h, 2500) + 1).await;
    let arrivals = store.inspect("k").await.unwrap().arrivals;
    assert_eq!(
        arrivals.len(),
        1,
        "kept until the window rested: {arrivals:?}"
    );
    let Arrival {
        count,
        per_ms: window,
        at_ms,
        rest,
    } = arrivals[0];
    assert_eq!((count, window, rest), (2, per_ms, 0));
    assert_store_time(h, at_ms, t(h, 2500));
    at(h, t(h, 2500) + 2 + 2 * h.slack_ms()).await;
    // A store that forgets in its writes forgets then (a write on another key sweeps it).
    store.pause("elsewhere", 0).await.unwrap();
    let gone = store.inspect("k").await.unwrap();
    assert_eq!((gone.seq, gone.arrivals), (0, Vec::new()), "forgotten");
}

pub async fn a_pause_only_extends_holds_every_clients_grants_and_ends_on_the_stores_clock(
    h: &impl Harness,
) {
    let store = h.store();
    let pause = lease(h, 500);
    let until = store.pause("k", pause).await.unwrap();
    assert_store_time(h, until, t(h, 500));
    assert_eq!(store.pause("k", lease(h, 100)).await.unwrap(), until);
    let b = store.request("k", "b-1", &terms(1, 0, 3000)).await.unwrap();
    assert_eq!(state_of(&b).1, "waiting");
    assert_retry(h, &b, 500);
    let seen = h.recorder(&["b-1"]);
    let _watch = store.watch("k", watcher(&seen));
    at(h, t(h, 2000)).await;
    assert_seen(h, &seen.seen(), &[(t(h, 500), "b-1 granted")]);
}

pub async fn a_key_idle_past_its_delay_and_pause_is_forgotten_before_that_it_keeps_its_last_grant(
    h: &impl Harness,
) {
    let store = h.store();
    let delay = lease(h, 300);
    store
        .request("k", "a-1", &terms(1, delay, 3000))
        .await
        .unwrap();
    store.release("k", "a-1").await.unwrap();
    assert_eq!(store.inspect("k").await.unwrap().grants, 1);
    let a2 = store
        .request("k", "a-2", &terms(1, delay, 3000))
        .await
        .unwrap();
    assert_eq!(state_of(&a2).1, "waiting", "the delay outlives the release");
    store.abandon("k", "a-2").await.unwrap();
    at(h, t(h, 300) + 1 + h.slack_ms()).await;
    // A store that forgets in its writes forgets then (a write on another key sweeps it).
    store.pause("elsewhere", 0).await.unwrap();
    assert_eq!(store.inspect("k").await.unwrap().seq, 0, "forgotten");
}

pub async fn a_watch_dropped_hears_nothing_more(h: &impl Harness) {
    let store = h.store();
    store
        .request("k", "a-1", &terms(1, 0, lease(h, 1000)))
        .await
        .unwrap();
    store
        .request("k", "b-1", &terms(1, 0, lease(h, 5000)))
        .await
        .unwrap();
    let seen = h.recorder(&["b-1"]);
    drop(store.watch("k", watcher(&seen)));
    at(h, t(h, 2000)).await;
    assert!(seen.seen().is_empty());
    let b = store.renew("k", &["b-1".to_owned()]).await.unwrap();
    assert!(
        matches!(b[0], TicketState::Granted { .. }),
        "granted all the same: {b:?}"
    );
}
