//! `Driver::flush`: waiting for what the driver took so far to be saved. A `forget` followed by
//! a flush leaves no retired batch in the saved text; a failing `persist` is flush's error; a
//! driver without `persist`, or with nothing unsaved, flushes at once; a driver closed with a
//! change not saved says so. On tokio's paused clock: nothing sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use turnstile::{
    Call, Driver, DriverOptions, ExecError, FlushError, HostError, Persist, Policy, RunError,
    RunOptions,
};

fn policy() -> Policy {
    Policy::from_toml("test", "[conversation.tools.write]\nconcurrency = 1\n").unwrap()
}

/// A driver whose `persist` keeps every text it is given.
fn saving_driver() -> (Driver, Arc<Mutex<Vec<String>>>) {
    let saved = Arc::new(Mutex::new(Vec::<String>::new()));
    let keep = saved.clone();
    let options = DriverOptions {
        persist: Some(Persist::new(move |text: String| {
            keep.lock().unwrap().push(text);
            async { Ok::<(), HostError>(()) }
        })),
        ..DriverOptions::default()
    };
    (Driver::new(&policy(), options).unwrap(), saved)
}

async fn one_batch(d: &Driver) -> turnstile::Outcomes {
    d.run(
        vec![Call::new("w1", "write")],
        |_x| async { Ok::<Value, ExecError>(json!("done")) },
        RunOptions::default(),
    )
    .await
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn forget_then_flush_saves_a_snapshot_without_the_batch() {
    let (d, saved) = saving_driver();
    let out = one_batch(&d).await;
    let last = saved.lock().unwrap().last().cloned().unwrap();
    assert!(last.contains("\"retired\":[{\"batch\":\"1\""), "{last}");

    d.forget(&out);
    d.flush().await.unwrap();
    let last = saved.lock().unwrap().last().cloned().unwrap();
    assert!(last.ends_with("\"retired\":[]}"), "{last}");

    // Nothing changed since: the next flush resolves without another save.
    let count = saved.lock().unwrap().len();
    d.flush().await.unwrap();
    assert_eq!(saved.lock().unwrap().len(), count);
    d.close();
    d.flush().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn flush_waits_for_a_submission_to_be_saved() {
    let (d, saved) = saving_driver();
    let run = d.run(
        vec![Call::new("w1", "write")],
        |x| async move {
            x.cancelled().await;
            Ok::<Value, ExecError>(Value::Null)
        },
        RunOptions::default(),
    );
    d.flush().await.unwrap();
    let last = saved.lock().unwrap().last().cloned().unwrap();
    assert!(last.contains("{\"id\":\"w1\",\"tool\":\"write\""), "{last}");
    drop(run);
    d.close();
}

#[tokio::test(start_paused = true)]
async fn a_failing_persist_is_the_flush_error() {
    let options = DriverOptions {
        persist: Some(Persist::new(|_text: String| async {
            Err::<(), _>(HostError::msg("disk full"))
        })),
        ..DriverOptions::default()
    };
    let d = Driver::new(&policy(), options).unwrap();
    let run = d.run(
        vec![Call::new("w1", "write")],
        |_x| async { Ok::<Value, ExecError>(Value::Null) },
        RunOptions::default(),
    );
    let e = d.flush().await.unwrap_err();
    assert!(
        matches!(&e, FlushError::Persist(p) if p.cause.to_string().contains("disk full")),
        "{e}"
    );
    assert_eq!(e.name(), "PersistError");
    assert!(matches!(run.await, Err(RunError::Persist(_))));
    // The driver broke: every later flush says why.
    assert!(matches!(d.flush().await, Err(FlushError::Persist(_))));
}

#[tokio::test(start_paused = true)]
async fn without_persist_flush_resolves_at_once() {
    let d = Driver::new(&policy(), DriverOptions::default()).unwrap();
    let out = one_batch(&d).await;
    d.forget(&out);
    d.flush().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_forget_after_close_is_never_saved_and_flush_says_so() {
    let (d, saved) = saving_driver();
    let out = one_batch(&d).await;
    d.close();
    let count = saved.lock().unwrap().len();
    d.forget(&out);
    let e = d.flush().await.unwrap_err();
    assert!(matches!(e, FlushError::Closed), "{e}");
    assert_eq!(e.name(), "DisposedError");
    assert_eq!(saved.lock().unwrap().len(), count);
}
