//! An agent host in one file: a model's response of five tool calls runs under a policy
//! (writes to one file one at a time, at most two searches at once), with a user's decision,
//! a question that holds its slot, an outcome per call as it ends, a snapshot after every
//! round, and a restart from the last snapshot.
//!
//! Run with `cargo run -p turnstile --example agent_host`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use turnstile::{
    Call, Decide, Decision, Driver, DriverOptions, ExecError, Execute, Execution, HostError,
    OnOutcome, Persist, Policy, ResumeOptions, RunOptions, Started, Status,
};

const POLICY: &str = r#"
[conversation.tools.write_file]
concurrency = { key = "fs:{path}", limit = 1 }

[conversation.tools.search]
concurrency = 2
"#;

/// The tools: each sleeps a little and answers; `write_file` asks the user first.
async fn execute(x: Execution) -> Result<Value, ExecError> {
    let work = async {
        if x.tool() == "write_file" {
            let answer = x
                .question(async {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    "yes"
                })
                .await;
            println!("  {} asked the user: {answer}", x.label());
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        Ok(json!(format!("{} done with {}", x.label(), x.arguments())))
    };
    tokio::select! {
        reason = x.cancelled() => Err(reason.into()),
        result = work => result,
    }
}

fn describe(status: &Status) -> String {
    match status {
        Status::Ok(v) => format!("ok {v}"),
        Status::Failed(e) => format!("failed: {e}"),
        Status::Cancelled(_) => "cancelled".to_owned(),
        Status::Settled { message, .. } => format!("settled: {message}"),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let policy = Policy::from_toml("policy.toml", POLICY)?;
    // The last snapshot, as a disk would keep it.
    let disk = Arc::new(Mutex::new(String::new()));
    let saved = disk.clone();
    let persist = Persist::new(move |text: String| {
        *saved.lock().unwrap_or_else(PoisonError::into_inner) = text;
        async { Ok::<(), HostError>(()) }
    });
    let driver = Driver::new(
        &policy,
        DriverOptions {
            persist: Some(persist.clone()),
            ..DriverOptions::default()
        },
    )?;

    let calls = vec![
        Call::new("w1", "write_file").with_arguments(json!({ "path": "notes.md" })),
        Call::new("s1", "search").with_arguments(json!({ "q": "turnstile" })),
        Call::new("w2", "write_file").with_arguments(json!({ "path": "notes.md" })),
        Call::new("s2", "search").with_arguments(json!({ "q": "rfd 129" })),
        Call::new("rm", "delete").with_arguments(json!({ "path": "/" })),
    ];
    // The user declines the delete; everything else runs.
    let decide = Decide::new(|label: &str, _call: &Call| {
        let decision = if label == "rm" {
            Decision::Reject
        } else {
            Decision::Approve
        };
        async move { Ok::<_, HostError>(decision) }
    });
    let on_outcome = OnOutcome::new(|o, _call| println!("{} -> {}", o.label, describe(&o.status)));
    println!("batch 1:");
    let outcomes = driver
        .run(
            calls,
            execute,
            RunOptions {
                decide: Some(decide),
                on_outcome: Some(on_outcome.clone()),
                execution_timeout: Some(Duration::from_secs(5)),
                ..RunOptions::default()
            },
        )
        .await?;
    // Kept by the host: the snapshot no longer needs it.
    driver.forget(&outcomes);

    // A second batch, "crashed" while it runs: the process restarts from the last snapshot.
    println!("batch 2 (the process restarts while it runs):");
    let run = driver.run(
        vec![Call::new("s3", "search").with_arguments(json!({ "q": "tokio" }))],
        execute,
        RunOptions::default(),
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    // What the disk holds when the process dies: s3 saved as started.
    let snapshot = disk.lock().unwrap_or_else(PoisonError::into_inner).clone();
    driver.close();
    println!(
        "  the old run ended: {}",
        run.await.map_or_else(|e| e.to_string(), |_| "ok".into())
    );
    let mut options = ResumeOptions::new(Execute::new(execute));
    // Arguments are not in the snapshot: the host gives them back (here, from the model's
    // transcript).
    options.arguments_of = Some(Arc::new(|_batch, call: &Call| match call.id.as_str() {
        "s3" => json!({ "q": "tokio" }),
        _ => Value::Null,
    }));
    options.started = Started::RunAgain;
    options.on_outcome = Some(on_outcome);
    options.driver = DriverOptions {
        persist: Some(persist),
        ..DriverOptions::default()
    };
    let resumed = Driver::resume(&policy, &snapshot, options)?;
    for run in resumed.batches {
        let outcomes = run.await?;
        println!("restored batch {} resolved", outcomes.batch());
        resumed.driver.forget(&outcomes);
    }
    // Before exiting: the snapshot without the forgotten batches is saved, so the next start
    // does not hand their outcomes back again.
    resumed.driver.flush().await?;
    resumed.driver.close();
    Ok(())
}
