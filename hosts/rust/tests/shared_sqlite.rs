//! The SQLite store, on real files and real time (CLOCK_MONOTONIC: no virtual clock can move
//! it). Failure paths first (a file deleted or replaced under a live store, a path that cannot
//! be opened, a file locked past the busy timeout, another schema), then the store contract
//! (`shared_util/contract.rs`, the memory store's checks, on real time), then two stores of one file (two processes, as far as the file can tell), then a real second
//! process (`examples/sqlite_holder.rs`) killed with SIGKILL while it holds the permit. The
//! JS package's `shared-sqlite.test.mjs` checks the same promises.
#![cfg(feature = "sqlite")]
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod shared_util;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shared_util::contract::{self, Harness};
use shared_util::{Recorder, terms};
use tokio::time::Instant;
use turnstile::clock::TokioClock;
use turnstile::shared::{
    AcquireTerms, SharedError, SharedKeys, SharedKeysOptions, SqliteStore, SqliteStoreError,
    SqliteStoreOptions, Store, StoreError, TicketState,
};

/// A fresh folder under the system's temp dir, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("turnstile-sqlite-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, SqliteStoreOptions::default())
        .await
        .unwrap()
}

/// A file as the first process after a reboot leaves it (`created_ms` 0): it grants at once,
/// where a file a store creates grants nothing for one lease.
async fn aged(path: &Path) -> SqliteStore {
    open(path).await.close().await.unwrap();
    let db = rusqlite::Connection::open(path).unwrap();
    db.execute(
        "UPDATE turnstile_shared_meta SET value = '0' WHERE name = 'created_ms'",
        [],
    )
    .unwrap();
    drop(db);
    open(path).await
}

fn keys(store: &SqliteStore, owner: &str, lease_ms: u32) -> SharedKeys {
    SharedKeys::new(
        Arc::new(store.clone()),
        SharedKeysOptions {
            lease_ms,
            owner: Some(owner.to_owned()),
            ..SharedKeysOptions::default()
        },
    )
    .unwrap()
}

fn is_split(e: &StoreError, why: &str) -> bool {
    matches!(e, StoreError::Split { store, message, .. } if store == "sqlite" && message.contains(why))
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

#[tokio::test]
async fn a_file_deleted_under_a_live_store_splits_it_loudly_for_every_call_and_every_permit() {
    let dir = Dir::new();
    let path = dir.file("shared.sqlite");
    let store = aged(&path).await;
    let holder = keys(&store, "a", 300);
    let waiter = keys(&store, "b", 300);
    let permit = holder.acquire("k", AcquireTerms::new(1)).await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.acquire("k", AcquireTerms::new(1)).await }
    });
    sleep_ms(50).await;
    std::fs::remove_file(&path).unwrap();
    let started = Instant::now();
    let lost = tokio::time::timeout(Duration::from_secs(2), permit.lost())
        .await
        .expect("the holder learns within a heartbeat");
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "within a lease"
    );
    assert!(
        matches!(&lost, SharedError::StoreSplit { message, .. } if message.contains("deleted")),
        "{lost:?}"
    );
    let waited = waiting.await.unwrap().unwrap_err();
    assert_eq!(waited.code(), "store-split", "{waited:?}");
    // Every later call fails with it, even once the path names a file again.
    let again = open(&path).await;
    let calls = [
        store
            .request("k", "t-1", &terms(1, 0, 3000))
            .await
            .unwrap_err(),
        store.renew("k", &["t-1".to_owned()]).await.unwrap_err(),
        store.release("k", "t-1").await.unwrap_err(),
        store.pause("k", 10).await.unwrap_err(),
        store.inspect("k").await.unwrap_err(),
    ];
    for e in calls {
        assert!(is_split(&e, "deleted"), "{e:?}");
        assert_eq!(e.code(), "store-split");
    }
    // The new file is another store, which grants nothing for a lease after its creation.
    let fresh = again.request("k", "c-1", &terms(1, 0, 300)).await.unwrap();
    assert!(
        matches!(fresh, TicketState::Waiting { retry_ms: Some(ms), .. } if ms > 200),
        "{fresh:?}"
    );
}

#[tokio::test]
async fn a_file_replaced_by_another_splits_the_store() {
    let dir = Dir::new();
    let path = dir.file("shared.sqlite");
    let store = aged(&path).await;
    store.request("k", "a-1", &terms(1, 0, 3000)).await.unwrap();
    let other_path = dir.file("other.sqlite");
    open(&other_path).await.close().await.unwrap();
    std::fs::rename(&other_path, &path).unwrap();
    let e = store.renew("k", &["a-1".to_owned()]).await.unwrap_err();
    assert!(is_split(&e, "replaced"), "{e:?}");
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
}

#[tokio::test]
async fn a_path_that_cannot_be_opened_is_a_typed_error_at_open() {
    let dir = Dir::new();
    let missing = dir.file("no-such-folder").join("shared.sqlite");
    let e = SqliteStore::open(&missing, SqliteStoreOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SqliteStoreError::Store(StoreError::Unavailable { message, .. }) if message.contains("open")),
        "{e:?}"
    );
    // A folder that cannot be made: its parent is a file (this holds for root too).
    let file = dir.file("plain");
    std::fs::write(&file, b"not a folder").unwrap();
    let e = SqliteStore::open(file.join("shared.sqlite"), SqliteStoreOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SqliteStoreError::Store(StoreError::Unavailable { .. })),
        "{e:?}"
    );
    // A file that is not a database.
    let e = SqliteStore::open(&file, SqliteStoreOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SqliteStoreError::Store(StoreError::Unavailable { .. })),
        "{e:?}"
    );
    for private in ["", ":memory:", "file::memory:", "file:x?mode=memory"] {
        let e = SqliteStore::open(private, SqliteStoreOptions::default())
            .await
            .unwrap_err();
        assert!(
            matches!(&e, SqliteStoreError::PrivatePath { .. }),
            "{private}: {e:?}"
        );
    }
}

#[tokio::test]
async fn a_file_of_another_schema_version_is_refused_at_open_naming_both() {
    let dir = Dir::new();
    let path = dir.file("shared.sqlite");
    open(&path).await.close().await.unwrap();
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute(
        "UPDATE turnstile_shared_meta SET value = '2' WHERE name = 'schema'",
        [],
    )
    .unwrap();
    drop(db);
    let e = SqliteStore::open(&path, SqliteStoreOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SqliteStoreError::Store(StoreError::Failed { message, .. }) if message.contains("schema 2") && message.contains("schema 3")),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_write_lock_held_past_the_busy_timeout_is_unavailable_without_blocking_the_runtime() {
    let dir = Dir::new();
    let path = dir.file("shared.sqlite");
    aged(&path).await.close().await.unwrap();
    let options = SqliteStoreOptions {
        busy_timeout_ms: 300,
        ..SqliteStoreOptions::default()
    };
    let store = SqliteStore::open(&path, options).await.unwrap();
    // Another process's connection holds the write lock.
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let ticks = Arc::new(AtomicU64::new(0));
    let ticker = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            loop {
                sleep_ms(10).await;
                ticks.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let started = Instant::now();
    let e = store
        .request("k", "a-1", &terms(1, 0, 3000))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    ticker.abort();
    assert!(
        matches!(&e, StoreError::Unavailable { message, .. } if message.contains("locked")),
        "{e:?}"
    );
    assert!(
        waited >= Duration::from_millis(290) && waited < Duration::from_millis(1500),
        "{waited:?}"
    );
    assert!(
        ticks.load(Ordering::Relaxed) >= 15,
        "the runtime ran meanwhile: {} ticks",
        ticks.load(Ordering::Relaxed)
    );
    // Not split, only locked: once the lock goes, the store works.
    other.execute_batch("ROLLBACK").unwrap();
    let granted = store.request("k", "a-1", &terms(1, 0, 3000)).await.unwrap();
    assert!(
        matches!(granted, TicketState::Granted { .. }),
        "{granted:?}"
    );
}

/// The SQLite store on real time: durations divided by 4, a wake-up allowed a poll and a loaded
/// machine late, on a file that grants at once (`aged`).
struct SqliteHarness {
    clock: Arc<TokioClock>,
    base_ms: u64,
    store: SqliteStore,
    _dir: Dir,
}

impl SqliteHarness {
    async fn new() -> Self {
        let dir = Dir::new();
        let store = aged(&dir.file("shared.sqlite")).await;
        let clock = Arc::new(TokioClock::new());
        let base_ms = SqliteStore::now_ms();
        Self {
            clock,
            base_ms,
            store,
            _dir: dir,
        }
    }
}

impl Harness for SqliteHarness {
    fn store(&self) -> &dyn Store {
        &self.store
    }

    fn clock(&self) -> &Arc<TokioClock> {
        &self.clock
    }

    fn base_ms(&self) -> u64 {
        self.base_ms
    }

    fn div(&self) -> u64 {
        4
    }

    fn slack_ms(&self) -> u64 {
        100
    }

    fn skew_ms(&self) -> u64 {
        3
    }

    fn recorder(&self, tickets: &[&str]) -> Arc<Recorder> {
        Recorder::once(&self.clock, tickets)
    }
}

#[tokio::test]
async fn a_closed_store_fails_every_operation_with_store_unavailable() {
    contract::a_closed_store_fails_every_operation_with_store_unavailable(
        &SqliteHarness::new().await,
    )
    .await;
}

#[tokio::test]
async fn terms_no_client_writes_are_refused_by_the_engines_rule_and_never_enter_the_key() {
    contract::terms_no_client_writes_are_refused_by_the_engines_rule_and_never_enter_the_key(
        &SqliteHarness::new().await,
    )
    .await;
}

#[tokio::test]
async fn a_lease_ends_when_its_heartbeat_stops_and_the_next_ticket_is_granted_then() {
    contract::a_lease_ends_when_its_heartbeat_stops_and_the_next_ticket_is_granted_then(
        &SqliteHarness::new().await,
    )
    .await;
}

#[tokio::test]
async fn fifo_by_arrival_across_clients_never_over_the_limit_and_a_retried_request_only_renews() {
    contract::fifo_by_arrival_across_clients_never_over_the_limit_and_a_retried_request_only_renews(&SqliteHarness::new().await).await;
}

#[tokio::test]
async fn a_renewal_extends_a_lease_by_the_tickets_own_lease() {
    contract::a_renewal_extends_a_lease_by_the_tickets_own_lease(&SqliteHarness::new().await).await;
}

#[tokio::test]
async fn the_delay_between_grants_is_kept_by_the_store_the_head_waits_with_retry_ms() {
    contract::the_delay_between_grants_is_kept_by_the_store_the_head_waits_with_retry_ms(
        &SqliteHarness::new().await,
    )
    .await;
}

#[tokio::test]
async fn rate_windows_a_burst_at_once_then_the_pace_a_weight_costs_that_many_forgotten_once_rested()
{
    contract::rate_windows_a_burst_at_once_then_the_pace_a_weight_costs_that_many_forgotten_once_rested(&SqliteHarness::new().await).await;
}

#[tokio::test]
async fn a_pause_only_extends_holds_every_clients_grants_and_ends_on_the_stores_clock() {
    contract::a_pause_only_extends_holds_every_clients_grants_and_ends_on_the_stores_clock(
        &SqliteHarness::new().await,
    )
    .await;
}

#[tokio::test]
async fn a_key_idle_past_its_delay_and_pause_is_forgotten_before_that_it_keeps_its_last_grant() {
    contract::a_key_idle_past_its_delay_and_pause_is_forgotten_before_that_it_keeps_its_last_grant(
        &SqliteHarness::new().await,
    )
    .await;
}

#[tokio::test]
async fn a_watch_dropped_hears_nothing_more() {
    contract::a_watch_dropped_hears_nothing_more(&SqliteHarness::new().await).await;
}

#[tokio::test]
async fn fifo_across_two_stores_of_one_file_and_a_release_wakes_the_next_process_by_polling() {
    let dir = Dir::new();
    let path = dir.file("shared.sqlite");
    let one = aged(&path).await;
    let two = open(&path).await;
    let a = keys(&one, "a", 3000);
    let b = keys(&two, "b", 3000);
    let first = a.acquire("k", AcquireTerms::new(1)).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for (name, client) in [("b1", &b), ("a2", &a), ("b2", &b)] {
        let (client, tx) = (client.clone(), tx.clone());
        waiters.push(tokio::spawn(async move {
            let permit = client.acquire("k", AcquireTerms::new(1)).await.unwrap();
            tx.send(name).unwrap();
            sleep_ms(20).await;
            permit.release().await;
        }));
        // The next one asks only once this one is in the store's queue.
        let queued = waiters.len();
        while one.inspect("k").await.unwrap().waiting.len() < queued {
            sleep_ms(2).await;
        }
    }
    let seqs: Vec<u64> = (one.inspect("k").await.unwrap().waiting.iter())
        .map(|w| w.seq)
        .collect();
    assert_eq!(seqs, [2, 3, 4]);
    let released = Instant::now();
    first.release().await;
    let mut order = Vec::new();
    for _ in 0..3 {
        let name = tokio::time::timeout(Duration::from_secs(2), rx.recv())
            .await
            .unwrap()
            .unwrap();
        order.push(name);
    }
    assert_eq!(order, ["b1", "a2", "b2"], "first come, first served");
    assert!(
        released.elapsed() < Duration::from_millis(1000),
        "handed off by polls, not heartbeats: {:?}",
        released.elapsed()
    );
    for w in waiters {
        w.await.unwrap();
    }
    let gone = two.inspect("k").await.unwrap();
    assert_eq!(
        (gone.seq, gone.grants),
        (0, 0),
        "every permit back: the key left the file"
    );
    assert_eq!(one.key_count().await.unwrap(), 0);
}

/// The example's path: cargo builds the examples of the package before its tests.
fn holder_exe() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    dir.join("examples").join("sqlite_holder")
}

/// Kills the child (SIGKILL) when dropped: a failed test leaves no process behind.
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_holder_process_killed_with_sigkill_hands_its_permit_on_when_its_lease_ends() {
    let dir = Dir::new();
    let path = dir.file("shared.sqlite");
    let lease_ms = 400;
    let mut holder = Holder(
        Command::new(holder_exe())
            .arg(&path)
            .args(["k", &lease_ms.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect(
                "cargo test builds examples/sqlite_holder.rs (not with --test alone: run the \
                 package's tests, `cargo test -p turnstile --features sqlite`)",
            ),
    );
    let line = read_line(&mut holder).await;
    assert!(line.starts_with("held holder-"), "{line:?}");
    let store = open(&path).await;
    let waiter = keys(&store, "waiter", lease_ms);
    let acquiring = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.acquire("k", AcquireTerms::new(1)).await }
    });
    // The holder renews: its permit outlives several leases.
    sleep_ms(u64::from(lease_ms) * 2).await;
    assert!(!acquiring.is_finished(), "the holder still holds");
    assert_eq!(store.inspect("k").await.unwrap().held.len(), 1);
    holder.0.kill().unwrap();
    let killed = Instant::now();
    let permit = tokio::time::timeout(Duration::from_secs(3), acquiring)
        .await
        .expect("granted once the dead lease ended")
        .unwrap()
        .unwrap();
    let after = killed.elapsed();
    assert!(
        after < Duration::from_millis(u64::from(lease_ms) + 300),
        "within the lease (plus a poll): {after:?}"
    );
    assert!(permit.lost_error().is_none());
    permit.release().await;
    waiter.close().await;
}

/// A Python process of the Python package (`hosts/python`) holding a permit on the file: the
/// same schema, statements, clock and ticket format, so one store.
const PYTHON_HOLDER: &str = r#"
import asyncio, sys
from turnstile_scheduler.shared import SharedKeys, SqliteStore

async def main():
    store = await SqliteStore.open(sys.argv[1])
    keys = SharedKeys(store, lease_ms=int(sys.argv[3]), owner="python")
    permit = await keys.acquire(sys.argv[2], limit=1)
    print("held", permit.ticket, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"#;

/// Needs the Python package installed: `cargo xtask test` runs it (`--ignored`) once it has
/// built target/py-venv; `TURNSTILE_PYTHON` names another interpreter that has the package.
#[tokio::test]
#[ignore = "needs the Python package: cargo xtask test runs it after building target/py-venv"]
async fn a_python_process_and_this_one_share_one_store_on_one_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = std::env::var_os("TURNSTILE_PYTHON")
        .map_or_else(|| root.join("target/py-venv/bin/python"), PathBuf::from);
    assert!(
        python.exists(),
        "no Python at {} (set TURNSTILE_PYTHON to one with turnstile-scheduler installed)",
        python.display()
    );
    let dir = Dir::new();
    let path = dir.file("shared.sqlite");
    let lease_ms = 400;
    let mut holder = Holder(
        Command::new(&python)
            .args(["-c", PYTHON_HOLDER])
            .arg(&path)
            .args(["k", &lease_ms.to_string()])
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let line = read_line(&mut holder).await;
    assert!(line.starts_with("held python-"), "{line:?}");
    let store = open(&path).await;
    let held = store.inspect("k").await.unwrap().held;
    assert_eq!(
        held.iter()
            .map(|h| format!("held {}\n", h.ticket))
            .collect::<Vec<_>>(),
        [line],
        "this store reads the Python process's ticket"
    );
    let waiter = keys(&store, "rust", lease_ms);
    let acquiring = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.acquire("k", AcquireTerms::new(1)).await }
    });
    sleep_ms(u64::from(lease_ms) * 2).await;
    assert!(!acquiring.is_finished(), "the Python process still holds");
    let waiting = store.inspect("k").await.unwrap().waiting;
    assert!(waiting[0].ticket.starts_with("rust-"), "{waiting:?}");
    holder.0.kill().unwrap();
    let permit = tokio::time::timeout(Duration::from_secs(3), acquiring)
        .await
        .expect("granted once the Python process's lease ended")
        .unwrap()
        .unwrap();
    let seen = store.inspect("k").await.unwrap();
    assert_eq!((seen.grants, seen.held.len()), (2, 1), "{seen:?}");
    permit.release().await;
    waiter.close().await;
}

/// The first line the child prints (within 5 s).
async fn read_line(holder: &mut Holder) -> String {
    let stdout = holder.0.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    });
    tokio::time::timeout(Duration::from_secs(5), line)
        .await
        .expect("the holder holds within a lease of the file's creation")
        .unwrap()
}
