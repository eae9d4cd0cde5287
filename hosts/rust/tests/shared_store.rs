//! The memory store against the store contract (SHARED.md), on tokio's paused clock: nothing
//! sleeps for real, and every time is exact. The contract's checks are
//! `shared_util/contract.rs`, which the SQLite store runs too (`shared_sqlite.rs`); the memory
//! store's own promises (its time base) are here. Failure paths first; the JS package's
//! `shared-memory.test.mjs` checks the same promises.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod shared_util;

use std::sync::Arc;

use shared_util::contract;
use shared_util::{DAY, MemoryHarness, Recorder, memory, run_until, short, terms};
use turnstile::clock::Clock;
use turnstile::shared::{MemoryStore, MemoryStoreError, MemoryStoreOptions, Store};

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
    contract::a_closed_store_fails_every_operation_with_store_unavailable(&MemoryHarness::new())
        .await;
}

#[tokio::test(start_paused = true)]
async fn terms_no_client_writes_are_refused_by_the_engines_rule_and_never_enter_the_key() {
    contract::terms_no_client_writes_are_refused_by_the_engines_rule_and_never_enter_the_key(
        &MemoryHarness::new(),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_ends_when_its_heartbeat_stops_and_the_next_ticket_is_granted_then_without_polling()
{
    contract::a_lease_ends_when_its_heartbeat_stops_and_the_next_ticket_is_granted_then(
        &MemoryHarness::new(),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn fifo_by_arrival_across_clients_never_over_the_limit_and_a_retried_request_only_renews() {
    contract::fifo_by_arrival_across_clients_never_over_the_limit_and_a_retried_request_only_renews(&MemoryHarness::new()).await;
}

#[tokio::test(start_paused = true)]
async fn a_renewal_extends_a_lease_by_the_tickets_own_lease() {
    contract::a_renewal_extends_a_lease_by_the_tickets_own_lease(&MemoryHarness::new()).await;
}

#[tokio::test(start_paused = true)]
async fn the_delay_between_grants_is_kept_by_the_store_the_head_waits_with_retry_ms() {
    contract::the_delay_between_grants_is_kept_by_the_store_the_head_waits_with_retry_ms(
        &MemoryHarness::new(),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn rate_windows_a_burst_at_once_then_the_pace_a_weight_costs_that_many_forgotten_once_rested()
{
    contract::rate_windows_a_burst_at_once_then_the_pace_a_weight_costs_that_many_forgotten_once_rested(&MemoryHarness::new()).await;
}

#[tokio::test(start_paused = true)]
async fn a_pause_only_extends_holds_every_clients_grants_and_ends_on_the_stores_clock() {
    contract::a_pause_only_extends_holds_every_clients_grants_and_ends_on_the_stores_clock(
        &MemoryHarness::new(),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_key_idle_past_its_delay_and_pause_is_forgotten_before_that_it_keeps_its_last_grant() {
    contract::a_key_idle_past_its_delay_and_pause_is_forgotten_before_that_it_keeps_its_last_grant(
        &MemoryHarness::new(),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_watch_dropped_hears_nothing_more() {
    contract::a_watch_dropped_hears_nothing_more(&MemoryHarness::new()).await;
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
