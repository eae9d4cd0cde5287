//! `SharedKeys` over the memory store, on tokio's paused clock: several clients on one store
//! stand for several processes. Failure paths first: a store down or silent, a killed holder, a
//! lost lease, a dropped wait, `close`; then the grant rule as clients see it (FIFO, the limit,
//! the delay, rate windows, pauses). The JS package's `shared-memory.test.mjs` and
//! `shared-lease.test.mjs` check the same promises.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod shared_util;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use shared_util::{
    DAY, Flaky, Mode, Mortal, keys, memory, now_or_never, run_until, settle, within,
};
use turnstile::clock::Clock;
use turnstile::shared::{
    AcquireTerms, KeyTickets, RateWindow, Removal, SharedError, SharedKeys, SharedKeysError,
    SharedKeysOptions, Store,
};

fn limit(n: u32) -> AcquireTerms {
    AcquireTerms::new(n)
}

#[tokio::test(start_paused = true)]
async fn a_store_that_is_down_fails_the_request_with_store_unavailable() {
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store, clock.clone());
    let a = keys(flaky.clone(), clock.clone(), "a", 3000);
    flaky.set(Mode::Down);
    let e = a.acquire("k", limit(1)).await.unwrap_err();
    assert!(
        matches!(&e, SharedError::StoreUnavailable { store, .. } if store == "flaky"),
        "{e:?}"
    );
    assert_eq!(e.code(), "store-unavailable");
    assert!(
        a.inspect().is_empty(),
        "nothing left locally: {:?}",
        a.inspect()
    );
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_store_that_becomes_unavailable_fails_waiters_and_permits_before_a_lease_could_end() {
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store.clone(), clock.clone());
    let a = keys(flaky.clone(), clock.clone(), "a", 3000);
    let permit = a.acquire("k", limit(1)).await.unwrap();
    let waiting = tokio::spawn({
        let a = a.clone();
        async move { a.acquire("k", limit(1)).await }
    });
    run_until(&clock, 5000).await; // heartbeats keep both
    assert!(permit.lost_error().is_none());
    flaky.set(Mode::Down);
    let down_at = clock.now_ms();
    let lost = within(10_000, permit.lost()).await;
    let lost_at = clock.now_ms();
    let SharedError::StoreUnavailable {
        store: name,
        message,
    } = &lost
    else {
        panic!("not unavailable: {lost:?}");
    };
    assert_eq!(name, "flaky");
    assert!(
        message.contains("its renewals failed") && message.contains("(down)"),
        "{message}"
    );
    // The lease counts from the last confirmed renewal, sent before the store went down: the
    // store still holds the ticket when the permit is given up, so nothing is granted twice.
    assert!(
        lost_at - down_at < 3000,
        "given up {} ms after the store went down",
        lost_at - down_at
    );
    let at_store = store.inspect("k").await.unwrap();
    assert_eq!(
        at_store.held.len(),
        1,
        "the store's lease had not ended yet: {at_store:?}"
    );
    assert!(at_store.held[0].expires_ms > at_store.now_ms);
    let e = within(10_000, waiting).await.unwrap().unwrap_err();
    assert!(matches!(e, SharedError::StoreUnavailable { .. }), "{e:?}");
    assert!(clock.now_ms() - down_at < 3000);
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn renewals_that_never_answer_give_the_permit_up_before_its_lease_could_end() {
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store, clock.clone());
    let a = keys(flaky.clone(), clock.clone(), "o", 300);
    let sent_at = clock.now_ms();
    let permit = a.acquire("k", limit(1)).await.unwrap();
    flaky.set_renew(Some(Mode::Hang));
    let error = within(10_000, permit.lost()).await;
    let after = clock.now_ms() - sent_at;
    assert!(
        matches!(&error, SharedError::StoreUnavailable { message, .. } if message.contains("renewal was not answered in time")),
        "{error:?}"
    );
    assert!(
        (200..300).contains(&after),
        "given up {after} ms after the request (lease 300)"
    );
    assert_eq!(
        permit.try_release().await.unwrap(),
        Removal::Lost,
        "no store call once lost"
    );
    assert!(flaky.calls("release").is_empty());
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn one_failed_renewal_is_survived_the_permit_goes_only_when_they_keep_failing() {
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store, clock.clone());
    let a = keys(flaky.clone(), clock.clone(), "o", 300);
    let permit = a.acquire("k", limit(1)).await.unwrap();
    flaky.fail_renewals.store(1, Ordering::SeqCst);
    run_until(&clock, 600).await;
    assert!(permit.lost_error().is_none(), "{:?}", permit.lost_error());
    assert!(
        flaky.calls("renew").len() >= 3,
        "{:?}",
        flaky.calls("renew")
    );
    assert_eq!(permit.try_release().await.unwrap(), Removal::Released);
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_request_answered_after_its_lease_could_end_is_given_back_and_fails() {
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store.clone(), clock.clone());
    flaky.request_delay_ms.store(320, Ordering::SeqCst);
    // The client's timers are held (a blocked runtime): only the answer tells it the time.
    let blocked = Mortal::new(&clock);
    blocked.stop();
    let a = keys(flaky.clone(), blocked.clone(), "o", 300);
    let e = a.acquire("k", limit(1)).await.unwrap_err();
    assert!(
        matches!(&e, SharedError::StoreUnavailable { message, .. } if message.contains("answered too late")),
        "{e:?}"
    );
    assert_eq!(clock.now_ms(), 320);
    settle().await;
    assert_eq!(flaky.calls("abandon").len(), 1, "given back");
    assert!(store.inspect("k").await.unwrap().held.is_empty());
    blocked.cont();
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_permit_whose_ticket_the_store_dropped_is_lost_with_lease_lost_at_the_next_heartbeat() {
    let (clock, store) = memory(DAY);
    let a = keys(Arc::new(store.clone()), clock.clone(), "a", 3000);
    let permit = a.acquire("k", limit(1)).await.unwrap();
    store.release("k", permit.ticket()).await.unwrap(); // as if its lease had ended at the store
    let error = within(10_000, permit.lost()).await;
    assert!(
        matches!(&error, SharedError::LeaseLost { key, ticket, .. } if key == "k" && ticket == permit.ticket()),
        "{error:?}"
    );
    assert_eq!(error.code(), "lease-lost");
    assert!(
        clock.now_ms() <= 1000,
        "at the first heartbeat ({} ms)",
        clock.now_ms()
    );
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_waiter_whose_ticket_the_store_dropped_fails_with_lease_lost() {
    let (clock, store) = memory(DAY);
    let a = keys(Arc::new(store.clone()), clock.clone(), "a", 3000);
    let held = a.acquire("k", limit(1)).await.unwrap();
    let waiting = tokio::spawn({
        let a = a.clone();
        async move { a.acquire("k", limit(1)).await }
    });
    run_until(&clock, 10).await;
    let ticket = store.inspect("k").await.unwrap().waiting[0].ticket.clone();
    store.abandon("k", &ticket).await.unwrap(); // as if its lease had ended at the store
    let e = within(2000, waiting).await.unwrap().unwrap_err();
    assert!(
        matches!(&e, SharedError::LeaseLost { ticket: t, .. } if *t == ticket),
        "{e:?}"
    );
    assert!(held.lost_error().is_none(), "the holder is not touched");
    held.release().await;
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_store_that_answers_something_unexpected_fails_the_request_with_store_failed() {
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store, clock.clone());
    let a = keys(flaky.clone(), clock.clone(), "a", 3000);
    flaky.set(Mode::Failed);
    let e = a.acquire("k", limit(1)).await.unwrap_err();
    assert_eq!(e.code(), "store-failed");
    assert_eq!(e.to_string(), "flaky: schema 9 is not 3");
    assert!(a.inspect().is_empty());
    flaky.set(Mode::Up);
    a.acquire("k", limit(1)).await.unwrap().release().await;
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_killed_holders_permit_goes_to_the_next_waiter_within_one_lease() {
    let (clock, store) = memory(DAY);
    let store: Arc<dyn Store> = Arc::new(store);
    let mortal = Mortal::new(&clock);
    let a = keys(store.clone(), mortal.clone(), "a", 3000);
    let b = keys(store.clone(), clock.clone(), "b", 3000);
    let held = a.acquire("k", limit(1)).await.unwrap();
    let waiting = tokio::spawn({
        let (b, clock) = (b.clone(), clock.clone());
        async move {
            let permit = b.acquire("k", limit(1)).await;
            (permit, clock.now_ms())
        }
    });
    run_until(&clock, 10_000).await;
    assert!(
        !waiting.is_finished(),
        "the live holder's heartbeat keeps its permit"
    );
    assert!(held.lost_error().is_none());
    let killed_at = clock.now_ms();
    mortal.kill();
    let (permit, granted_at) = within(10_000, waiting).await.unwrap();
    let permit = permit.unwrap();
    assert!(
        granted_at - killed_at <= 3000,
        "granted {} ms after the kill",
        granted_at - killed_at
    );
    assert_eq!(permit.grant(), 2);
    assert_eq!(permit.try_release().await.unwrap(), Removal::Released);
    std::mem::forget(held); // the dead process never gives it back
    b.close().await;
}

#[tokio::test(start_paused = true)]
async fn dropping_a_waiting_acquire_withdraws_its_request() {
    let (clock, store) = memory(DAY);
    let a = keys(Arc::new(store.clone()), clock.clone(), "a", 3000);
    let b = keys(Arc::new(store.clone()), clock.clone(), "b", 3000);
    let held = a.acquire("k", limit(1)).await.unwrap();
    let timed_out =
        tokio::time::timeout(Duration::from_millis(500), b.acquire("k", limit(1))).await;
    assert!(timed_out.is_err());
    settle().await;
    assert!(b.inspect().is_empty(), "{:?}", b.inspect());
    assert!(
        store.inspect("k").await.unwrap().waiting.is_empty(),
        "withdrawn at the store"
    );
    let next = tokio::spawn({
        let b = b.clone();
        async move { b.acquire("k", limit(1)).await }
    });
    settle().await;
    held.release().await;
    let permit = within(10_000, next).await.unwrap().unwrap();
    assert_eq!(
        (permit.seq(), permit.grant()),
        (3, 2),
        "the withdrawn ticket (seq 2) was skipped"
    );
    permit.release().await;
    a.close().await;
    b.close().await;
}

#[tokio::test(start_paused = true)]
async fn dropping_an_acquire_whose_request_is_in_flight_gives_the_ticket_back() {
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store.clone(), clock.clone());
    flaky.request_delay_ms.store(50, Ordering::SeqCst);
    let a = keys(flaky.clone(), clock.clone(), "a", 3000);
    let timed_out = tokio::time::timeout(Duration::from_millis(10), a.acquire("k", limit(1))).await;
    assert!(timed_out.is_err());
    settle().await;
    assert!(a.inspect().is_empty());
    assert_eq!(flaky.calls("abandon").len(), 1);
    assert!(
        store.inspect("k").await.unwrap().held.is_empty(),
        "granted at the store, then given back"
    );
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_dropped_permit_is_given_back() {
    let (clock, store) = memory(DAY);
    let a = keys(Arc::new(store.clone()), clock.clone(), "a", 3000);
    drop(a.acquire("k", limit(1)).await.unwrap());
    settle().await;
    assert!(store.inspect("k").await.unwrap().held.is_empty());
    assert!(a.inspect().is_empty());
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn close_ends_every_wait_loses_every_permit_and_gives_every_ticket_back() {
    let (clock, store) = memory(DAY);
    let a = keys(Arc::new(store.clone()), clock.clone(), "a", 3000);
    let held = a.acquire("k", limit(1)).await.unwrap();
    let lost = held.lost();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let a = a.clone();
            tokio::spawn(async move { a.acquire("k", limit(1)).await })
        })
        .collect();
    run_until(&clock, 100).await;
    assert_eq!(
        a.inspect(),
        [KeyTickets {
            key: "k".to_owned(),
            waiting: 3,
            held: 1
        }]
    );
    a.close().await;
    for w in waiters {
        assert_eq!(
            within(10, w).await.unwrap().unwrap_err(),
            SharedError::Closed
        );
    }
    assert_eq!(within(10, lost).await, SharedError::Closed);
    let at_store = store.inspect("k").await.unwrap();
    assert!(
        at_store.held.is_empty() && at_store.waiting.is_empty(),
        "{at_store:?}"
    );
    assert_eq!(
        a.acquire("k", limit(1)).await.unwrap_err(),
        SharedError::Closed
    );
    assert_eq!(
        held.try_release().await.unwrap(),
        Removal::Lost,
        "given back by close"
    );
}

#[tokio::test(start_paused = true)]
async fn arguments_out_of_range_are_refused_before_the_store() {
    let (clock, store) = memory(DAY);
    let store: Arc<dyn Store> = Arc::new(store);
    let new = |lease_ms, owner: Option<&str>| {
        SharedKeys::new(
            store.clone(),
            SharedKeysOptions {
                lease_ms,
                owner: owner.map(str::to_owned),
                clock: clock.clone(),
            },
        )
        .map(|_| ())
    };
    assert_eq!(
        new(299, None),
        Err(SharedKeysError::LeaseOutOfRange { lease_ms: 299 })
    );
    assert_eq!(
        new(3_600_001, None),
        Err(SharedKeysError::LeaseOutOfRange {
            lease_ms: 3_600_001
        })
    );
    assert_eq!(
        new(300, Some("")),
        Err(SharedKeysError::OwnerLength { len: 0 })
    );
    assert_eq!(
        new(300, Some(&"o".repeat(61))),
        Err(SharedKeysError::OwnerLength { len: 61 })
    );
    let a = keys(store.clone(), clock.clone(), "a", 3000);
    let w = |count, per_ms, burst| RateWindow {
        count,
        per_ms,
        burst,
    };
    let cases = [
        ("", limit(1), "key must be"),
        ("k", limit(0), "terms.limit"),
        ("k", limit(1_000_001), "terms.limit"),
        (
            "k",
            AcquireTerms {
                delay_ms: 86_400_001,
                ..limit(1)
            },
            "terms.delay_ms",
        ),
        (
            "k",
            AcquireTerms {
                rates: vec![w(1_000_001, 1000, 1)],
                ..limit(1)
            },
            "terms.rates[0].count",
        ),
        (
            "k",
            AcquireTerms {
                rates: vec![w(1, 0, 1)],
                ..limit(1)
            },
            "terms.rates[0].per_ms",
        ),
        (
            "k",
            AcquireTerms {
                rates: vec![w(1, 1000, 0)],
                ..limit(1)
            },
            "terms.rates[0].burst",
        ),
        (
            "k",
            AcquireTerms {
                rates: vec![w(1, 1000, 1), w(1, 1000, 2)],
                ..limit(1)
            },
            "a second time",
        ),
        (
            "k",
            AcquireTerms {
                rates: vec![w(1, 1000, 1); 9],
                ..limit(1)
            },
            "at most 8",
        ),
        (
            "k",
            AcquireTerms {
                rates: vec![w(1, 1000, 2)],
                weight: 3,
                ..limit(1)
            },
            "terms.weight",
        ),
        (
            "k",
            AcquireTerms {
                weight: 2,
                ..limit(1)
            },
            "terms.weight",
        ),
    ];
    for (key, terms, pattern) in cases {
        let e = a.acquire(key, terms).await.unwrap_err();
        assert!(
            matches!(&e, SharedError::Invalid { message } if message.contains(pattern)),
            "{pattern}: {e:?}"
        );
    }
    let long = "k".repeat(201);
    assert!(matches!(
        a.acquire(&long, limit(1)).await,
        Err(SharedError::Invalid { .. })
    ));
    assert!(matches!(
        a.pause("k", 86_400_001).await,
        Err(SharedError::Invalid { .. })
    ));
    assert_eq!(
        store.inspect("k").await.unwrap().seq,
        0,
        "nothing reached the store"
    );
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn ticket_ids_are_the_owner_a_tag_of_the_keys_and_a_number() {
    let (clock, store) = memory(DAY);
    let store: Arc<dyn Store> = Arc::new(store);
    let a = keys(store.clone(), clock.clone(), "o", 3000);
    let b = keys(store.clone(), clock.clone(), "o", 3000);
    let pa = a.acquire("k", limit(2)).await.unwrap();
    let pb = b.acquire("k", limit(2)).await.unwrap();
    for (p, n) in [(&pa, 1), (&pb, 1)] {
        let parts: Vec<&str> = p.ticket().split('-').collect();
        assert_eq!(parts.len(), 3, "{}", p.ticket());
        assert_eq!(parts[0], "o");
        assert!(
            parts[1].len() == 12 && parts[1].chars().all(|c| c.is_ascii_hexdigit()),
            "{}",
            p.ticket()
        );
        assert_eq!(parts[2], n.to_string());
    }
    assert_ne!(
        pa.ticket(),
        pb.ticket(),
        "clients given one owner never share a ticket"
    );
    assert_eq!(pb.grant(), 2, "two tickets, two grants");
    pa.release().await;
    pb.release().await;
}

#[tokio::test(start_paused = true)]
async fn fifo_across_two_clients_and_the_limit_is_never_exceeded() {
    let (clock, store) = memory(DAY);
    let store: Arc<dyn Store> = Arc::new(store);
    let clients = [
        keys(store.clone(), clock.clone(), "a", 3000),
        keys(store.clone(), clock.clone(), "b", 3000),
    ];
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..12u64 {
        let keys = clients[(i % 2) as usize].clone();
        let (running, most, order) = (running.clone(), most.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let permit = keys.acquire("k", limit(3)).await.unwrap();
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            order
                .lock()
                .unwrap()
                .push((permit.grant(), permit.seq(), i));
            tokio::time::sleep(Duration::from_millis(100 + 37 * (i % 4))).await;
            running.fetch_sub(1, Ordering::SeqCst);
            permit.release().await;
        }));
        tokio::time::sleep(Duration::from_millis(1)).await; // arrivals in order i
    }
    for t in tasks {
        within(60_000, t).await.unwrap();
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "never over the limit, and it was reached"
    );
    let order = order.lock().unwrap().clone();
    let mut by_grant = order.clone();
    by_grant.sort();
    let seqs: Vec<u64> = by_grant.iter().map(|(_, seq, _)| *seq).collect();
    assert_eq!(
        seqs,
        (1..=12).collect::<Vec<_>>(),
        "grants in arrival order across both clients"
    );
    let arrivals: Vec<u64> = by_grant.iter().map(|(_, _, i)| *i).collect();
    assert_eq!(arrivals, (0..12).collect::<Vec<_>>());
    for c in clients {
        c.close().await;
    }
}

/// Grant times (ms on the clock) of `n` acquires alternating between two clients on `terms`,
/// each released at once.
async fn grant_times(n: usize, terms: AcquireTerms, pause_ms: u64) -> Vec<u64> {
    let (clock, store) = memory(DAY);
    let store: Arc<dyn Store> = Arc::new(store);
    let clients = [
        keys(store.clone(), clock.clone(), "a", 3000),
        keys(store.clone(), clock.clone(), "b", 3000),
    ];
    if pause_ms > 0 {
        clients[1].pause("k", pause_ms).await.unwrap();
    }
    let mut tasks = Vec::new();
    for i in 0..n {
        let (keys, terms, clock) = (clients[i % 2].clone(), terms.clone(), clock.clone());
        tasks.push(tokio::spawn(async move {
            let permit = keys.acquire("k", terms).await.unwrap();
            let at = clock.now_ms();
            permit.release().await;
            at
        }));
    }
    let mut times = Vec::new();
    for t in tasks {
        times.push(within(60_000, t).await.unwrap());
    }
    times.sort_unstable();
    for c in clients {
        c.close().await;
    }
    times
}

#[tokio::test(start_paused = true)]
async fn the_delay_holds_between_grants_across_clients() {
    let times = grant_times(
        4,
        AcquireTerms {
            delay_ms: 100,
            ..limit(5)
        },
        0,
    )
    .await;
    // The store's time runs with the clients' (the retry is a millisecond late, the grant is
    // made by the store's own timer exactly at its time).
    assert_eq!(times, [0, 100, 200, 300]);
}

#[tokio::test(start_paused = true)]
async fn rate_windows_hold_across_clients_a_burst_then_the_pace() {
    let terms = AcquireTerms {
        rates: vec![RateWindow {
            count: 2,
            per_ms: 1000,
            burst: 2,
        }],
        ..limit(100)
    };
    let times = grant_times(5, terms, 0).await;
    assert_eq!(times, [0, 0, 500, 1000, 1500]);
}

#[tokio::test(start_paused = true)]
async fn a_pause_from_one_client_holds_every_clients_grants() {
    let times = grant_times(3, limit(5), 500).await;
    assert_eq!(times, [500, 500, 500]);
}

#[tokio::test(start_paused = true)]
async fn a_permit_released_hears_nothing_more_and_its_lost_never_completes() {
    let (clock, store) = memory(DAY);
    let a = keys(Arc::new(store.clone()), clock.clone(), "a", 3000);
    let permit = a.acquire("k", limit(1)).await.unwrap();
    let lost = permit.lost();
    permit.release().await;
    run_until(&clock, 10_000).await;
    assert!(now_or_never(lost).is_none());
    let renews_after = store.inspect("k").await.unwrap();
    assert_eq!(
        renews_after.seq, 0,
        "forgotten at the store: nothing renewed it"
    );
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn the_api_is_send_and_sync_so_a_driver_can_spawn_it() {
    fn send<T: Send>(_: &T) {}
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<SharedKeys>();
    send_sync::<turnstile::shared::SharedPermit>();
    send_sync::<Arc<dyn Store>>();
    let (clock, store) = memory(DAY);
    let a = keys(Arc::new(store), clock.clone(), "a", 3000);
    let acquire = a.acquire("k", limit(1));
    send(&acquire);
    let permit = acquire.await.unwrap();
    let lost = permit.lost();
    send(&lost);
    let release = permit.release();
    send(&release);
    release.await;
    let close = a.close();
    send(&close);
    close.await;
}

#[tokio::test(start_paused = true)]
async fn a_holder_stopped_past_its_lease_learns_it_lost_the_permit_as_soon_as_it_runs_again() {
    let (clock, store) = memory(DAY);
    let store: Arc<dyn Store> = Arc::new(store);
    let stoppable = Mortal::new(&clock);
    let a = keys(store.clone(), stoppable.clone(), "a", 3000);
    let b = keys(store.clone(), clock.clone(), "b", 3000);
    let held = a.acquire("k", limit(1)).await.unwrap();
    let waiting = tokio::spawn({
        let (b, clock) = (b.clone(), clock.clone());
        async move { (b.acquire("k", limit(1)).await, clock.now_ms()) }
    });
    run_until(&clock, 2000).await;
    stoppable.stop();
    let (permit, granted_at) = within(10_000, waiting).await.unwrap();
    assert!(
        granted_at <= 2000 + 3000,
        "granted once the stopped holder's lease ended: {granted_at}"
    );
    assert!(held.lost_error().is_none(), "stopped: it does not know yet");
    run_until(&clock, 8000).await;
    stoppable.cont();
    let lost = within(10, held.lost()).await;
    assert!(
        matches!(&lost, SharedError::StoreUnavailable { message, .. } if message.contains("not renewed in time")),
        "{lost:?}"
    );
    permit.unwrap().release().await;
    a.close().await;
    b.close().await;
}
