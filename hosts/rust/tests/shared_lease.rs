//! `SharedKeys` driving the engine's lease schedule against stores that misbehave on purpose or
//! lack push (the JS package's `shared-lease.test.mjs`): one renewal per key per period, a split
//! store, a store that never wakes anyone, a grant that arrives before its request's answer.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod shared_util;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use shared_util::{DAY, Flaky, Mode, keys, memory, run_until, settle, within};
use turnstile::clock::Clock;
use turnstile::shared::{AcquireTerms, SharedError, Store};

#[tokio::test(start_paused = true)]
async fn a_split_store_gives_every_ticket_up_at_once_and_gives_nothing_back() {
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store, clock.clone());
    let a = keys(flaky.clone(), clock.clone(), "a", 3000);
    let p1 = a.acquire("k", AcquireTerms::new(1)).await.unwrap();
    let p2 = a.acquire("other", AcquireTerms::new(1)).await.unwrap();
    let waiting = tokio::spawn({
        let a = a.clone();
        async move { a.acquire("k", AcquireTerms::new(1)).await }
    });
    run_until(&clock, 100).await;
    flaky.set(Mode::Split);
    let e = within(1000, p1.lost()).await;
    assert!(
        matches!(&e, SharedError::StoreSplit { path, .. } if path == "/tmp/shared.sqlite"),
        "{e:?}"
    );
    assert_eq!(e.code(), "store-split");
    assert!(
        clock.now_ms() <= 1000,
        "at the first heartbeat ({} ms)",
        clock.now_ms()
    );
    assert_eq!(p2.lost_error(), Some(e.clone()), "every key at once");
    assert_eq!(within(10, waiting).await.unwrap().unwrap_err(), e);
    assert!(a.inspect().is_empty());
    settle().await;
    assert!(flaky.calls("abandon").is_empty() && flaky.calls("release").is_empty());
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_request_never_answered_fails_before_its_lease_could_end_and_is_given_back() {
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store, clock.clone());
    flaky.set(Mode::Hang);
    let a = keys(flaky.clone(), clock.clone(), "o", 300);
    let e = within(1000, a.acquire("k", AcquireTerms::new(1)))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SharedError::StoreUnavailable { message, .. } if message.contains("its request was not answered in time")),
        "{e:?}"
    );
    assert_eq!(
        clock.now_ms(),
        250,
        "half a renewal period before the lease (300 ms) could end"
    );
    settle().await;
    assert_eq!(
        flaky.calls("abandon").len(),
        1,
        "given back (the store may have entered it)"
    );
    assert!(a.inspect().is_empty());
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn close_ends_a_request_the_store_has_not_answered() {
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store, clock.clone());
    flaky.set(Mode::Hang);
    let a = keys(flaky.clone(), clock.clone(), "o", 3000);
    let pending = tokio::spawn({
        let a = a.clone();
        async move { a.acquire("k", AcquireTerms::new(1)).await }
    });
    run_until(&clock, 100).await;
    flaky.set(Mode::Up);
    a.close().await;
    assert_eq!(
        within(10, pending).await.unwrap().unwrap_err(),
        SharedError::Closed
    );
}

#[tokio::test(start_paused = true)]
async fn the_schedule_renews_each_key_about_every_lease_over_3_one_renew_per_key() {
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store, clock.clone());
    let a = keys(flaky.clone(), clock.clone(), "o", 300);
    let a1 = a.acquire("a", AcquireTerms::new(2)).await.unwrap();
    let a2 = a.acquire("a", AcquireTerms::new(2)).await.unwrap();
    let b = a.acquire("b", AcquireTerms::new(1)).await.unwrap();
    run_until(&clock, 550).await;
    assert!(a1.lost_error().is_none() && b.lost_error().is_none());
    a1.release().await;
    a2.release().await;
    b.release().await;
    let of_a = flaky.calls("renew a ");
    assert!((3..=7).contains(&of_a.len()), "renews of a: {of_a:?}");
    assert!(
        of_a.iter().all(|c| c == "renew a 2"),
        "one renew names both tickets of a: {of_a:?}"
    );
    assert!(flaky.calls("renew b ").len() >= 3);
    let before = flaky.calls("renew").len();
    run_until(&clock, 800).await;
    assert_eq!(
        flaky.calls("renew").len(),
        before,
        "no renewals once nothing is held"
    );
    a.close().await;
}

#[tokio::test(start_paused = true)]
async fn without_push_a_waiter_is_granted_at_its_retry_and_at_its_heartbeat() {
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store, clock.clone());
    flaky.mute.store(true, Ordering::SeqCst);
    let store: Arc<dyn Store> = flaky.clone();
    let a = keys(store.clone(), clock.clone(), "a", 3000);
    let b = keys(store.clone(), clock.clone(), "b", 3000);
    // The delay: the head's retry, a millisecond after the gate opens.
    let first = a
        .acquire(
            "d",
            AcquireTerms {
                delay_ms: 100,
                ..AcquireTerms::new(5)
            },
        )
        .await
        .unwrap();
    let second = within(
        200,
        b.acquire(
            "d",
            AcquireTerms {
                delay_ms: 100,
                ..AcquireTerms::new(5)
            },
        ),
    )
    .await
    .unwrap();
    assert_eq!(clock.now_ms(), 101);
    first.release().await;
    second.release().await;
    // A release in another client: only the waiter's heartbeat (a third of the lease) sees it.
    let held = a.acquire("k", AcquireTerms::new(1)).await.unwrap();
    let waiting = tokio::spawn({
        let (b, clock) = (b.clone(), clock.clone());
        async move { (b.acquire("k", AcquireTerms::new(1)).await, clock.now_ms()) }
    });
    run_until(&clock, 150).await;
    held.release().await;
    let (permit, at) = within(2000, waiting).await.unwrap();
    permit.unwrap().release().await;
    assert!(
        (1101..=1200).contains(&at),
        "granted at the waiter's heartbeat: {at} ms"
    );
    a.close().await;
    b.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_grant_that_arrives_before_its_requests_answer_is_kept_until_the_answer() {
    let (clock, store) = memory(DAY);
    let flaky = Flaky::new(store, clock.clone());
    let a = keys(flaky.clone(), clock.clone(), "a", 3000);
    let b = keys(flaky.clone(), clock.clone(), "b", 3000);
    let held = a.acquire("k", AcquireTerms::new(1)).await.unwrap();
    // b's first waiter makes b's watch; its permit is given back as soon as it comes.
    let first = tokio::spawn({
        let b = b.clone();
        async move {
            b.acquire("k", AcquireTerms::new(1))
                .await
                .unwrap()
                .release()
                .await
        }
    });
    run_until(&clock, 10).await;
    // b's second request is answered "waiting", 50 ms late; meanwhile both grants happen.
    flaky.request_delay_ms.store(50, Ordering::SeqCst);
    let second = tokio::spawn({
        let (b, clock) = (b.clone(), clock.clone());
        async move { (b.acquire("k", AcquireTerms::new(1)).await, clock.now_ms()) }
    });
    run_until(&clock, 20).await;
    held.release().await;
    within(10, first).await.unwrap();
    let (permit, at) = within(1000, second).await.unwrap();
    assert_eq!(
        at, 60,
        "granted as its answer came, not at the next heartbeat"
    );
    assert_eq!(permit.unwrap().grant(), 3);
    a.close().await;
    b.close().await;
}
