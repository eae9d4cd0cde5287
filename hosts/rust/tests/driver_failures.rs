//! The driver's failure paths first (a panicking execution, a failing or panicking `decide`, a
//! failing `persist`, cancellation at every point, a wrong snapshot, close while running, a
//! bad pause, no runtime), then the snapshot fixtures every driver reads
//! (tests/scenarios/snapshots/*.json) read and written back byte for byte, and resumed. On
//! tokio's paused clock: nothing sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use turnstile::{
    Abort, Call, CancelToken, Decide, Decision, Driver, DriverError, DriverOptions, ExecError,
    Execute, Execution, HostError, OnOutcome, PauseError, Persist, Policy, Reason, ResumeError,
    ResumeOptions, RunError, RunOptions, Snapshot, Started, Status,
};

const CONFIG: &str = "[conversation.tools.write]\nconcurrency = 1\n[conversation.tools.read]\n";

fn policy() -> Policy {
    Policy::from_toml("test", CONFIG).unwrap()
}

fn driver() -> Driver {
    Driver::new(&policy(), DriverOptions::default()).unwrap()
}

fn calls(ids: &[&str]) -> Vec<Call> {
    ids.iter().map(|id| Call::new(*id, "write")).collect()
}

async fn ok_after(x: Execution, ms: u64) -> Result<Value, ExecError> {
    tokio::select! {
        reason = x.cancelled() => Err(reason.into()),
        () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(json!(x.label())),
    }
}

fn status(outcomes: &turnstile::Outcomes, call: usize) -> &Status {
    &outcomes[call].entries[0].status
}

#[test]
fn a_driver_outside_a_runtime_is_refused() {
    assert_eq!(
        Driver::new(&policy(), DriverOptions::default()).unwrap_err(),
        DriverError::NoRuntime
    );
}

#[test]
fn a_bad_policy_renders_the_engine_diagnostics() {
    let e = Policy::from_toml("bad.toml", "[conversation.tools.write]\nconcurrency = -1\n")
        .unwrap_err();
    let text = e.to_string();
    assert!(!e.diagnostics.is_empty());
    assert!(text.contains("bad.toml"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_execution_fails_its_entry_and_frees_its_key() {
    let d = driver();
    let out = d
        .run(
            calls(&["w1", "w2"]),
            |x: Execution| async move {
                if x.label() == "w1" {
                    panic!("boom");
                }
                Ok(json!("fine"))
            },
            RunOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        status(&out, 0),
        &Status::Failed(ExecError::Panicked("boom".into()))
    );
    assert_eq!(status(&out, 1), &Status::Ok(json!("fine")));
}

#[tokio::test(start_paused = true)]
async fn execute_panicking_before_its_future_fails_its_entry() {
    let d = driver();
    let execute = Execute::new(|x: Execution| {
        assert_ne!(x.label(), "w1", "sync");
        async { Ok(Value::Null) }
    });
    let out = d
        .run_with(calls(&["w1", "w2"]), execute, RunOptions::default())
        .await
        .unwrap();
    assert!(matches!(
        status(&out, 0),
        Status::Failed(ExecError::Panicked(_))
    ));
    assert_eq!(status(&out, 1), &Status::Ok(Value::Null));
}

#[tokio::test(start_paused = true)]
async fn decide_failing_settles_the_undecided_and_fails_the_batch() {
    let d = driver();
    let decide = Decide::new(|label: &str, _: &Call| {
        let label = label.to_owned();
        async move {
            match label.as_str() {
                "w2" => Err(HostError::new("PromptError", "the user went away")),
                _ => Ok(Decision::Approve),
            }
        }
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let options = RunOptions {
        decide: Some(decide),
        on_outcome: Some(OnOutcome::new(move |o, _| {
            log.lock().unwrap().push(o.clone())
        })),
        ..RunOptions::default()
    };
    let e = d
        .run(calls(&["w1", "w2", "w3"]), |x| ok_after(x, 1), options)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, RunError::Decide(h) if h.name == "PromptError"),
        "{e}"
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    let reasons: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|o| match &o.status {
            Status::Settled { reason, error, .. } => (o.label.clone(), *reason, error.is_some()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(reasons.contains(&("w1".into(), Reason::Cancelled, true)));
    assert!(reasons.contains(&("w2".into(), Reason::Failed, true)));
    assert!(reasons.contains(&("w3".into(), Reason::Failed, true)));
    // The key is free for the next batch.
    let out = d
        .run(calls(&["w4"]), |x| ok_after(x, 1), RunOptions::default())
        .await
        .unwrap();
    assert_eq!(status(&out, 0), &Status::Ok(json!("w4")));
}

#[tokio::test(start_paused = true)]
async fn decide_panicking_fails_the_batch() {
    let d = driver();
    let decide = Decide::new(
        |_: &str, _: &Call| -> std::future::Ready<Result<Decision, HostError>> {
            panic!("no prompt")
        },
    );
    let options = RunOptions {
        decide: Some(decide),
        ..RunOptions::default()
    };
    let e = d
        .run(calls(&["w1"]), |x| ok_after(x, 1), options)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, RunError::Decide(h) if h.name == "Panic"),
        "{e}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_persist_breaks_the_driver() {
    let options = DriverOptions {
        persist: Some(Persist::new(|_text: String| async {
            Err::<(), _>(HostError::msg("disk full"))
        })),
        ..DriverOptions::default()
    };
    let d = Driver::new(&policy(), options).unwrap();
    let started = Arc::new(Mutex::new(0));
    let count = started.clone();
    let e = d
        .run(
            calls(&["w1"]),
            move |_x| {
                *count.lock().unwrap() += 1;
                async { Ok(Value::Null) }
            },
            RunOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, RunError::Persist(_)), "{e}");
    assert_eq!(
        *started.lock().unwrap(),
        0,
        "nothing starts after a failed persist"
    );
    assert!(d.is_closed());
    let e = d
        .run(calls(&["w2"]), |x| ok_after(x, 1), RunOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, RunError::Closed));
}

#[tokio::test(start_paused = true)]
async fn a_batch_cancelled_before_it_starts_settles_every_entry() {
    let d = driver();
    let token = CancelToken::new();
    token.cancel();
    let options = RunOptions {
        cancel: Some(token),
        ..RunOptions::default()
    };
    let out = d
        .run(calls(&["w1", "w2"]), |x| ok_after(x, 1), options)
        .await
        .unwrap();
    for i in 0..2 {
        assert!(matches!(
            status(&out, i),
            Status::Settled {
                reason: Reason::Cancelled,
                ..
            }
        ));
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_cancelled_while_running_aborts_and_keeps_what_it_returned() {
    let d = driver();
    let token = CancelToken::new();
    let options = RunOptions {
        cancel: Some(token.clone()),
        ..RunOptions::default()
    };
    let run = d.run(calls(&["w1", "w2"]), |x| ok_after(x, 100), options);
    tokio::time::sleep(Duration::from_millis(10)).await;
    token.cancel();
    let out = run.await.unwrap();
    assert_eq!(
        status(&out, 0),
        &Status::Cancelled(Err(ExecError::Aborted(Abort::Cancelled)))
    );
    assert!(matches!(
        status(&out, 1),
        Status::Settled {
            reason: Reason::Cancelled,
            ..
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn dropping_a_run_cancels_its_batch_and_frees_its_key() {
    let d = driver();
    let aborted = Arc::new(Mutex::new(None));
    let seen = aborted.clone();
    let run = d.run(
        calls(&["w1"]),
        move |x: Execution| {
            let seen = seen.clone();
            async move {
                let reason = x.cancelled().await;
                *seen.lock().unwrap() = Some(reason.clone());
                Err(reason.into())
            }
        },
        RunOptions::default(),
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(run);
    let out = d
        .run(calls(&["w2"]), |x| ok_after(x, 1), RunOptions::default())
        .await
        .unwrap();
    assert_eq!(status(&out, 0), &Status::Ok(json!("w2")));
    assert_eq!(*aborted.lock().unwrap(), Some(Abort::Cancelled));
    assert!(d.inspect().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_deadline_aborts_with_a_timeout_and_a_grace_gives_up_on_a_hang() {
    let d = driver();
    let options = RunOptions {
        execution_timeout: Some(Duration::from_millis(50)),
        abort_grace: Some(Duration::from_millis(20)),
        ..RunOptions::default()
    };
    let out = d
        .run(
            calls(&["w1", "w2"]),
            |x: Execution| async move {
                if x.label() == "w1" {
                    return ok_after(x, 1000).await;
                }
                std::future::pending().await
            },
            options,
        )
        .await
        .unwrap();
    assert!(matches!(status(&out, 0), Status::Failed(e) if e.name() == "TimeoutError"));
    assert!(matches!(
        status(&out, 1),
        Status::Settled {
            reason: Reason::TimedOut { .. },
            ..
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn close_while_running_fails_every_batch_and_aborts_its_executions() {
    let d = driver();
    let aborted = Arc::new(Mutex::new(None));
    let seen = aborted.clone();
    let run = d.run(
        calls(&["w1"]),
        move |x: Execution| {
            let seen = seen.clone();
            async move {
                *seen.lock().unwrap() = Some(x.cancelled().await);
                Ok(Value::Null)
            }
        },
        RunOptions::default(),
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    d.close();
    assert!(matches!(run.await, Err(RunError::Closed)));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(*aborted.lock().unwrap(), Some(Abort::Closed));
    assert!(matches!(
        d.pause("write", Duration::from_secs(1)).await,
        Err(PauseError::Closed)
    ));
}

#[tokio::test(start_paused = true)]
async fn pausing_an_unknown_key_is_refused_and_a_known_one_holds_its_calls() {
    let d = driver();
    let e = d.pause("nope", Duration::from_secs(1)).await.unwrap_err();
    assert!(
        matches!(&e, PauseError::Refused(r) if r.code.as_str() == "unknown-key"),
        "{e}"
    );
    assert_eq!(e.name(), "RefusedInputError");
    d.pause("write", Duration::from_millis(100)).await.unwrap();
    let start = tokio::time::Instant::now();
    d.run(calls(&["w1"]), |x| ok_after(x, 1), RunOptions::default())
        .await
        .unwrap();
    assert!(start.elapsed() >= Duration::from_millis(100));
    d.lift_pause("write").await.unwrap();
    assert!(d.lift_pause("nope").await.is_err());
}

#[tokio::test(start_paused = true)]
async fn refused_batches_and_arguments_submit_nothing() {
    let d = driver();
    let e = d
        .run(Vec::new(), |x| ok_after(x, 1), RunOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.name(), "SubmitError");
    let e = d
        .run(
            calls(&["w1", "w1"]),
            |x| ok_after(x, 1),
            RunOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.name(), "SubmitError");
    let options = RunOptions {
        execution_timeout: Some(Duration::from_secs(u64::MAX / 4)),
        ..RunOptions::default()
    };
    let e = d
        .run(calls(&["w1"]), |x| ok_after(x, 1), options)
        .await
        .unwrap_err();
    assert!(matches!(e, RunError::InvalidArgument(_)), "{e}");
    assert!(d.inspect().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_runs_the_entry_again_after_the_header() {
    let d = driver();
    let tries = Arc::new(Mutex::new(0));
    let count = tries.clone();
    let start = tokio::time::Instant::now();
    let out = d
        .run(
            calls(&["w1"]),
            move |_x| {
                let count = count.clone();
                async move {
                    let mut n = count.lock().unwrap();
                    *n += 1;
                    if *n == 1 {
                        return Err(ExecError::rate_limited_from_header(Some("2"), 1000));
                    }
                    Ok(json!("again"))
                }
            },
            RunOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(status(&out, 0), &Status::Ok(json!("again")));
    assert!(start.elapsed() >= Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_question_holds_the_slot() {
    let d = driver();
    let order = Arc::new(Mutex::new(Vec::new()));
    let log = order.clone();
    d.run(
        calls(&["w1", "w2"]),
        move |x: Execution| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(format!("start {}", x.label()));
                if x.label() == "w1" {
                    x.question(tokio::time::sleep(Duration::from_millis(50)))
                        .await;
                }
                log.lock().unwrap().push(format!("end {}", x.label()));
                Ok(Value::Null)
            }
        },
        RunOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        ["start w1", "end w1", "start w2", "end w2"]
    );
}

// --- snapshots ---------------------------------------------------------------------------------

fn snapshots() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios/snapshots")
}

#[test]
fn every_fixture_is_read_and_written_back_byte_for_byte() {
    let mut n = 0;
    for entry in std::fs::read_dir(snapshots()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let snapshot = Snapshot::parse(&text).unwrap();
        assert_eq!(snapshot.to_json(), text.trim_end(), "{}", path.display());
        n += 1;
    }
    assert!(n >= 2, "the fixtures are read");
}

#[tokio::test(start_paused = true)]
async fn every_fixture_resumes_with_its_values_and_retired_outcomes() {
    for file in ["js-basic.json", "py-basic.json"] {
        let text = std::fs::read_to_string(snapshots().join(file)).unwrap();
        let toml = snapshots().join(file.replace(".json", ".toml"));
        let config = std::fs::read_to_string(if toml.exists() {
            toml
        } else {
            snapshots().join("js-basic.toml")
        })
        .unwrap();
        let policy = Policy::from_toml(file, &config).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let mut options =
            ResumeOptions::new(Execute::new(
                |x: Execution| async move { Ok(json!(x.label())) },
            ));
        options.started = Started::Interrupt;
        options.on_outcome = Some(OnOutcome::new(move |o, _| {
            log.lock().unwrap().push(o.clone())
        }));
        let resumed = Driver::resume(&policy, &text, options).unwrap();
        assert!(resumed.unrestored.is_empty());
        let mut batches = Vec::new();
        for run in resumed.batches {
            batches.push(run.await.unwrap());
        }
        assert_eq!(
            batches.len(),
            2,
            "{file}: the retired batch, then the live one"
        );
        assert_eq!(batches[0][0].entries[0].status, Status::Ok(json!(3)));
        assert_eq!(
            batches[0][1].entries[0].status,
            Status::Failed(ExecError::failed("TypeError", "bad input"))
        );
        let live = &batches[1];
        assert_eq!(live[0].id, "w1");
        assert!(matches!(
            &live[1].entries[0].status,
            Status::Failed(ExecError::Failed(_))
        ));
        assert!(matches!(
            &live[2].entries[0].status,
            Status::Settled {
                reason: Reason::Interrupted,
                ..
            }
        ));
        assert!(
            seen.lock().unwrap().len() >= 5,
            "{file}: every outcome is reported again"
        );
        resumed.driver.close();
    }
}

#[tokio::test(start_paused = true)]
async fn a_wrong_snapshot_is_refused_naming_the_field() {
    let p = policy();
    let options = || ResumeOptions::new(Execute::new(|_x: Execution| async { Ok(Value::Null) }));
    for (text, needle) in [
        ("not json", "must be the JSON text"),
        ("{\"turnstile-snapshot\":2}", "turnstile-snapshot"),
        (
            "{\"turnstile-snapshot\":1,\"state\":{\"version\":2,\"policy\":\"1\",\"next-batch\":\"x\",\"next-entry\":\"1\",\"batches\":[]}}",
            "snapshot.state.next-batch",
        ),
        (
            "{\"turnstile-snapshot\":1,\"state\":{},\"bogus\":1}",
            "bogus",
        ),
    ] {
        let e = Driver::resume(&p, text, options()).unwrap_err();
        assert!(
            matches!(&e, ResumeError::Snapshot(m) if m.contains(needle)),
            "{text}: {e}"
        );
    }
    let text = "{\"turnstile-snapshot\":1,\"state\":{\"version\":9,\"policy\":\"1\",\"next-batch\":\"1\",\"next-entry\":\"1\",\"batches\":[]},\"ended\":{},\"retired\":[]}";
    assert!(matches!(
        Driver::resume(&p, text, options()),
        Err(ResumeError::State(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn the_snapshot_after_a_run_is_the_drivers_format() {
    let saved = Arc::new(Mutex::new(Vec::<String>::new()));
    let keep = saved.clone();
    let options = DriverOptions {
        persist: Some(Persist::new(move |text: String| {
            keep.lock().unwrap().push(text);
            async { Ok::<(), HostError>(()) }
        })),
        ..DriverOptions::default()
    };
    let d = Driver::new(&policy(), options).unwrap();
    let out = d
        .run(
            vec![Call::new("r1", "read")],
            |_x| async { Ok(json!({"text": "café ☕"})) },
            RunOptions::default(),
        )
        .await
        .unwrap();
    let last = saved.lock().unwrap().last().cloned().unwrap();
    assert!(
        last.ends_with("\"retired\":[{\"batch\":\"1\",\"outcomes\":[{\"id\":\"r1\",\"tool\":\"read\",\"entries\":[{\"entry\":\"1\",\"label\":\"r1\",\"status\":\"ok\",\"value\":{\"text\":\"caf\\u00e9 \\u2615\"}}]}]}]}"),
        "{last}"
    );
    d.forget(&out);
    tokio::time::sleep(Duration::from_millis(1)).await;
    let last = saved.lock().unwrap().last().cloned().unwrap();
    assert!(last.ends_with("\"retired\":[]}"), "{last}");
}
