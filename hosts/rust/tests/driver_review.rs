//! Defects a review reproduced in the driver, one test each: a large arguments object keeps its
//! templated key, a dropped `Run` (with the last driver handle) still aborts its executions and
//! keeps their shared permits until they end, a panicking `persist` breaks the driver loudly,
//! and the public API works outside a tokio context.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Notify;
use turnstile::shared::{MemoryStore, MemoryStoreOptions, SharedKeys, SharedKeysOptions, Store};
use turnstile::{
    Call, CancelToken, Decide, Decision, Driver, DriverOptions, ExecError, FlushError, Persist,
    Policy, RunError, RunOptions,
};

const SHARED: &str =
    "[conversation.tools.api]\nconcurrency = { key = \"api\", limit = 1, shared = true }\n";

fn shared_driver(store: &Arc<dyn Store>, owner: &str) -> Driver {
    let policy = Policy::from_toml("p", SHARED).unwrap();
    let options = SharedKeysOptions {
        owner: Some(owner.into()),
        ..Default::default()
    };
    let keys = SharedKeys::new(store.clone(), options).unwrap();
    let options = DriverOptions {
        shared_keys: Some(keys),
        ..Default::default()
    };
    Driver::new(&policy, options).unwrap()
}

fn memory_store() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new(MemoryStoreOptions::default()).unwrap())
}

/// The engine reads only the fields a key template names: a large field it does not name
/// must not push the call off its key (w1 and w2 write the same path, one at a time).
#[tokio::test(start_paused = true)]
async fn a_large_argument_the_template_does_not_name_keeps_the_key() {
    let toml = "[conversation.tools.write]\nconcurrency = { key = \"fs:{path}\", limit = 1 }\n";
    let policy = Policy::from_toml("p", toml).unwrap();
    let driver = Driver::new(&policy, DriverOptions::default()).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let big = json!({ "path": "notes.md", "content": "x".repeat(70_000) });
    let calls = vec![
        Call::new("w1", "write").with_arguments(big),
        Call::new("w2", "write").with_arguments(json!({ "path": "notes.md", "content": "short" })),
    ];
    let execute = move |x: turnstile::Execution| {
        let l = l.clone();
        async move {
            l.lock().unwrap().push(format!("start {}", x.label()));
            tokio::time::sleep(Duration::from_millis(100)).await;
            l.lock().unwrap().push(format!("end {}", x.label()));
            Ok::<Value, ExecError>(Value::Null)
        }
    };
    driver
        .run(calls, execute, RunOptions::default())
        .await
        .unwrap();
    let log = log.lock().unwrap().clone();
    assert_eq!(log, ["start w1", "end w1", "start w2", "end w2"]);
    driver.close();
}

/// Dropping the last driver handle and then the `Run` cancels the batch all the same: the
/// running execution learns of its abort.
#[tokio::test]
async fn a_run_dropped_with_the_last_driver_handle_aborts_its_execution() {
    let driver = Driver::new(
        &Policy::from_toml("p", "").unwrap(),
        DriverOptions::default(),
    )
    .unwrap();
    let started = Arc::new(Notify::new());
    let aborted = Arc::new(Notify::new());
    let (s, a) = (started.clone(), aborted.clone());
    let run = driver.run(
        vec![Call::new("c1", "t")],
        move |x| {
            let (s, a) = (s.clone(), a.clone());
            async move {
                s.notify_one();
                let reason = x.cancelled().await;
                a.notify_one();
                Err::<Value, ExecError>(reason.into())
            }
        },
        RunOptions::default(),
    );
    drop(driver);
    started.notified().await;
    drop(run);
    let r = tokio::time::timeout(Duration::from_secs(2), aborted.notified()).await;
    assert!(r.is_ok(), "the execution never learned of its abort");
}

/// A shared limit of 1 across two drivers: driver A's Run and handle are dropped while a1
/// still runs; b1 on driver B starts only once a1 ended (A's permit is kept until then).
#[tokio::test]
async fn a_dropped_driver_keeps_its_shared_permit_until_its_execution_ends() {
    let store = memory_store();
    let a = shared_driver(&store, "a");
    let b = shared_driver(&store, "b");
    let a1_running = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Notify::new());
    let (r, s) = (a1_running.clone(), started.clone());
    let run_a = a.run(
        vec![Call::new("a1", "api")],
        move |x| {
            let (r, s) = (r.clone(), s.clone());
            async move {
                r.store(true, Ordering::SeqCst);
                s.notify_one();
                tokio::select! {
                    _ = x.cancelled() => {}
                    () = tokio::time::sleep(Duration::from_secs(5)) => {}
                }
                // Still busy a moment after its abort.
                tokio::time::sleep(Duration::from_millis(50)).await;
                r.store(false, Ordering::SeqCst);
                Ok::<Value, ExecError>(Value::Null)
            }
        },
        RunOptions::default(),
    );
    started.notified().await;
    drop(a);
    drop(run_a);
    let overlap = Arc::new(AtomicBool::new(false));
    let (o, r) = (overlap.clone(), a1_running.clone());
    let run_b = b.run(
        vec![Call::new("b1", "api")],
        move |_x| {
            let (o, r) = (o.clone(), r.clone());
            async move {
                if r.load(Ordering::SeqCst) {
                    o.store(true, Ordering::SeqCst);
                }
                Ok::<Value, ExecError>(Value::Null)
            }
        },
        RunOptions::default(),
    );
    let outcome = tokio::time::timeout(Duration::from_secs(10), run_b).await;
    assert!(outcome.is_ok(), "b1 never ran");
    assert!(
        !overlap.load(Ordering::SeqCst),
        "b1 ran while a1 still ran: a shared limit of 1 exceeded"
    );
    b.close();
}

/// A `persist` that panics is a failed `persist`: the batch fails with `RunError::Persist`,
/// the driver is closed, `flush` says why.
#[tokio::test]
async fn a_panicking_persist_breaks_the_driver_loudly() {
    let persist = Persist::new(|_text: String| async move {
        if true {
            panic!("disk full");
        }
        Ok::<(), std::io::Error>(())
    });
    let options = DriverOptions {
        persist: Some(persist),
        ..Default::default()
    };
    let driver = Driver::new(&Policy::from_toml("p", "").unwrap(), options).unwrap();
    let run = driver.run(
        vec![Call::new("c", "t")],
        |_x| async { Ok::<Value, ExecError>(json!(1)) },
        RunOptions::default(),
    );
    let result = tokio::time::timeout(Duration::from_secs(3), run).await;
    let Ok(Err(RunError::Persist(e))) = result else {
        panic!("expected RunError::Persist, got {result:?}");
    };
    assert!(e.to_string().contains("disk full"), "{e}");
    assert!(driver.is_closed());
    let flushed = tokio::time::timeout(Duration::from_secs(1), driver.flush()).await;
    assert!(
        matches!(flushed, Ok(Err(FlushError::Persist(_)))),
        "{flushed:?}"
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// `handle.block_on(driver.run(..))` calls `run` before entering the runtime: with a cancel
/// token and with `decide` it must work all the same.
#[test]
fn run_works_outside_the_runtime_context() {
    let rt = runtime();
    let toml = "[conversation.tools.w]\nconcurrency = 1\n";
    let policy = Policy::from_toml("p", toml).unwrap();
    let driver = rt.block_on(async { Driver::new(&policy, DriverOptions::default()).unwrap() });
    let cancel = RunOptions {
        cancel: Some(CancelToken::new()),
        ..Default::default()
    };
    let decide = RunOptions {
        decide: Some(Decide::new(|_l: &str, _c: &Call| async {
            Ok(Decision::Approve)
        })),
        ..Default::default()
    };
    for (id, options) in [("w1", cancel), ("w2", decide)] {
        let run = driver.run(
            vec![Call::new(id, "w")],
            |_x| async { Ok::<Value, ExecError>(json!(1)) },
            options,
        );
        let outcome =
            rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), run).await });
        assert!(matches!(outcome, Ok(Ok(_))), "{id}: {outcome:?}");
    }
    driver.close();
}

/// `close` from a thread outside the runtime, with a shared permit held.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn close_works_outside_the_runtime_context() {
    let driver = shared_driver(&memory_store(), "a");
    let started = Arc::new(Notify::new());
    let s = started.clone();
    let run = driver.run(
        vec![Call::new("a1", "api")],
        move |x| {
            let s = s.clone();
            async move {
                s.notify_one();
                Err::<Value, ExecError>(x.cancelled().await.into())
            }
        },
        RunOptions::default(),
    );
    started.notified().await;
    let d = driver.clone();
    let joined = std::thread::spawn(move || d.close()).join();
    assert!(joined.is_ok(), "close panicked outside the runtime");
    let outcome = tokio::time::timeout(Duration::from_secs(2), run).await;
    assert!(matches!(outcome, Ok(Err(RunError::Closed))), "{outcome:?}");
}
