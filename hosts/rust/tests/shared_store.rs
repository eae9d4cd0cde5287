//! The memory store against the store contract (SHARED.md), on tokio's paused clock: nothing
//! sleeps for real. Failure paths first; the JS package's `shared-memory.test.mjs` checks the
//! same promises.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod shared_util;

use std::sync::Arc;

use shared_util::{DAY, Recorder, memory, run_until, short, terms};
use turnstile::clock::Clock;
use turnstile::shared::{
    Arrival, MemoryStore, MemoryStoreError, MemoryStoreOptions, RateWindow, Removal, Store,
    StoreError, Terms, TicketState,
};

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

#[tokio::test(start_paused = true)]
async fn a_start_under_24_h_is_refused() {
    let (clock, _) = memory(DAY);
    let refused = MemoryStore::new(MemoryStoreOptions {
        clock,
        start_ms: DAY - 1,
    });
    assert_eq!(
        refused.unwrap_err(),
        MemoryStoreError::StartTooEarly { start_ms: DAY - 1 }
    );
}

#[tokio::test(start_paused = true)]
async fn a_closed_store_fails_every_operation_with_store_unavailable() {
    let (_, store) = memory(DAY);
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
        let StoreError::Unavailable { store, message } = &e else {
            panic!("not unavailable: {e:?}");
        };
        assert_eq!(store, "memory");
        assert!(message.contains("closed"), "{message}");
        assert_eq!(e.code(), "store-unavailable");
    }
}

#[tokio::test(start_paused = true)]
async fn terms_no_client_writes_are_refused_by_the_engines_rule_and_never_enter_the_key() {
    let (_, store) = memory(DAY);
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

#[tokio::test(start_paused = true)]
async fn a_lease_ends_when_its_heartbeat_stops_and_the_next_ticket_is_granted_then_without_polling()
{
    let (clock, store) = memory(DAY);
    store
        .request("k", "dead-1", &terms(1, 0, 3000))
        .await
        .unwrap();
    store
        .request("k", "live-1", &terms(1, 0, 3000))
        .await
        .unwrap();
    let seen = Recorder::new(&clock, &["live-1"]);
    let _watch = store.watch("k", seen.clone());
    for at in [1000, 2000, 2999] {
        run_until(&clock, at).await;
        store.renew("k", &["live-1".to_owned()]).await.unwrap(); // the waiter's heartbeat only
    }
    run_until(&clock, 5000).await;
    assert_eq!(
        seen.seen(),
        vec![(3000, "live-1 granted".to_owned())],
        "granted when the dead lease ended"
    );
    let dead = store.renew("k", &["dead-1".to_owned()]).await.unwrap();
    assert_eq!(
        dead,
        vec![TicketState::Lost {
            ticket: "dead-1".to_owned()
        }]
    );
    assert_eq!(store.release("k", "dead-1").await.unwrap(), Removal::Lost);
}

#[tokio::test(start_paused = true)]
async fn fifo_by_arrival_across_clients_never_over_the_limit_and_a_retried_request_only_renews() {
    let (_, store) = memory(DAY);
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

#[tokio::test(start_paused = true)]
async fn a_renewal_extends_a_lease_by_the_tickets_own_lease() {
    let (clock, store) = memory(DAY);
    store.request("k", "a-1", &terms(1, 0, 1000)).await.unwrap();
    run_until(&clock, 900).await;
    store.renew("k", &["a-1".to_owned()]).await.unwrap();
    run_until(&clock, 1899).await;
    assert_eq!(
        store.inspect("k").await.unwrap().held[0].expires_ms,
        DAY + 1900
    );
    run_until(&clock, 1900).await;
    assert!(store.inspect("k").await.unwrap().held.is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_delay_between_grants_is_kept_by_the_store_the_head_waits_with_retry_ms() {
    let (clock, store) = memory(DAY);
    let a = store
        .request("k", "a-1", &terms(5, 100, 3000))
        .await
        .unwrap();
    assert!(matches!(a, TicketState::Granted { .. }));
    let b = store
        .request("k", "b-1", &terms(5, 100, 3000))
        .await
        .unwrap();
    assert_eq!((state_of(&b).1, retry_ms(&b)), ("waiting", Some(100)));
    let b2 = store
        .request("k", "b-2", &terms(5, 100, 3000))
        .await
        .unwrap();
    assert_eq!(retry_ms(&b2), None, "only the head has a retry");
    let seen = Recorder::new(&clock, &["b-1", "b-2"]);
    let _watch = store.watch("k", seen.clone());
    run_until(&clock, 1000).await;
    assert_eq!(
        seen.seen(),
        vec![
            (100, "b-1 granted".to_owned()),
            (200, "b-2 granted".to_owned())
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn rate_windows_a_burst_at_once_then_the_pace_a_weight_costs_that_many_forgotten_once_rested()
{
    let (clock, store) = memory(DAY);
    let rated = |weight| Terms {
        rates: vec![RateWindow {
            count: 2,
            per_ms: 1000,
            burst: 2,
        }],
        weight,
        ..terms(100, 0, 3000)
    };
    let mut first = Vec::new();
    for t in ["a-1", "b-1", "a-2"] {
        let s = store.request("k", t, &rated(1)).await.unwrap();
        first.push((state_of(&s).1, retry_ms(&s)));
    }
    assert_eq!(
        first,
        [("granted", None), ("granted", None), ("waiting", Some(500))]
    );
    let b2 = store.request("k", "b-2", &rated(2)).await.unwrap();
    assert_eq!(state_of(&b2).1, "waiting");
    let seen = Recorder::new(&clock, &["a-2", "b-2"]);
    let _watch = store.watch("k", seen.clone());
    run_until(&clock, 1500).await;
    let expected = vec![
        (500, "a-2 granted".to_owned()),
        (1500, "b-2 granted".to_owned()),
    ];
    assert_eq!(
        seen.seen(),
        expected,
        "b-2 weighs 2: it waits for the window to hold 2 units"
    );
    for t in ["a-1", "b-1", "a-2", "b-2"] {
        store.release("k", t).await.unwrap();
    }
    run_until(&clock, 2501).await;
    let arrivals = store.inspect("k").await.unwrap().arrivals;
    let kept = Arrival {
        count: 2,
        per_ms: 1000,
        at_ms: DAY + 2500,
        rest: 0,
    };
    assert_eq!(arrivals, [kept], "kept until the window rested");
    run_until(&clock, 2502).await;
    let gone = store.inspect("k").await.unwrap();
    assert_eq!((gone.seq, gone.arrivals), (0, Vec::new()), "forgotten");
}

#[tokio::test(start_paused = true)]
async fn a_pause_only_extends_holds_every_clients_grants_and_ends_on_the_stores_clock() {
    let (clock, store) = memory(DAY);
    assert_eq!(store.pause("k", 500).await.unwrap(), DAY + 500);
    assert_eq!(store.pause("k", 100).await.unwrap(), DAY + 500);
    let b = store.request("k", "b-1", &terms(1, 0, 3000)).await.unwrap();
    assert_eq!((state_of(&b).1, retry_ms(&b)), ("waiting", Some(500)));
    let seen = Recorder::new(&clock, &["b-1"]);
    let _watch = store.watch("k", seen.clone());
    run_until(&clock, 2000).await;
    assert_eq!(seen.seen(), vec![(500, "b-1 granted".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn a_key_idle_past_its_delay_and_pause_is_forgotten_before_that_it_keeps_its_last_grant() {
    let (clock, store) = memory(DAY);
    store
        .request("k", "a-1", &terms(1, 300, 3000))
        .await
        .unwrap();
    store.release("k", "a-1").await.unwrap();
    assert_eq!(store.inspect("k").await.unwrap().grants, 1);
    let a2 = store
        .request("k", "a-2", &terms(1, 300, 3000))
        .await
        .unwrap();
    assert_eq!(state_of(&a2).1, "waiting", "the delay outlives the release");
    store.abandon("k", "a-2").await.unwrap();
    run_until(&clock, 301).await;
    assert_eq!(store.inspect("k").await.unwrap().seq, 0, "forgotten");
}

#[tokio::test(start_paused = true)]
async fn a_watch_dropped_hears_nothing_more() {
    let (clock, store) = memory(DAY);
    store.request("k", "a-1", &terms(1, 0, 1000)).await.unwrap();
    store.request("k", "b-1", &terms(1, 0, 5000)).await.unwrap();
    let seen = Recorder::new(&clock, &["b-1"]);
    drop(store.watch("k", seen.clone()));
    run_until(&clock, 2000).await;
    assert!(seen.seen().is_empty());
    let b = store.renew("k", &["b-1".to_owned()]).await.unwrap();
    assert!(
        matches!(b[0], TicketState::Granted { .. }),
        "granted all the same: {b:?}"
    );
}

/// The same story from two time bases: the store's offset from the clients' clock never shows.
async fn story(start_ms: u64) -> Vec<(u64, String)> {
    let (clock, store) = memory(start_ms);
    let seen = Recorder::new(&clock, &["b-1", "c-1"]);
    let _watch = store.watch("k", seen.clone());
    for t in ["a-1", "b-1", "c-1"] {
        store.request("k", t, &terms(1, 50, 1000)).await.unwrap();
    }
    run_until(&clock, 10).await;
    store.release("k", "a-1").await.unwrap();
    store.pause("k", 200).await.unwrap();
    run_until(&clock, 900).await;
    store.renew("k", &["c-1".to_owned()]).await.unwrap();
    run_until(&clock, 3000).await;
    seen.seen()
}

#[tokio::test(start_paused = true)]
async fn the_stores_time_base_does_not_matter() {
    let base = story(DAY).await;
    // b-1's lease (granted at 210, never renewed) ends at 1210 and c-1 moves up; c-1's, renewed
    // by its grant, at 2210.
    let expected = [
        (210, "b-1 granted"),
        (1210, "b-1 lost,c-1 granted"),
        (2210, "c-1 lost"),
    ];
    let expected: Vec<(u64, String)> = expected
        .iter()
        .map(|(t, s)| (*t, (*s).to_owned()))
        .collect();
    assert_eq!(base, expected);
    assert_eq!(story(1_000_000_000_000 + 7).await, base);
    let _ = short;
    let _: Arc<dyn Clock>;
}
