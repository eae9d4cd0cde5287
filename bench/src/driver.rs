//! `driver`: the Rust crate's tokio `Driver` (`hosts/rust`) on the same workloads as the native
//! engine loop, side by side in one run: what the driver's tasks, channels and outcome
//! bookkeeping cost per execution over the engine's own decisions. Executions return at once;
//! batches run one after another, each to its end, as the engine loop runs them.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock; the engine never does

use std::time::Instant;

use serde_json::Value;
use turnstile::{Call, Driver, DriverOptions, ExecError, Execution, RunOptions, Status};

use crate::drive;
use crate::workload::Workload;

/// Runs the table: one row per workload, the fastest of `runs` for each side.
pub(crate) fn table(executions: usize, runs: usize) -> Result<(), String> {
    println!("## The Rust crate's driver vs the engine loop\n");
    println!(
        "| workload | executions | engine ns/execution | driver ns/execution | driver / engine |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    type Make = fn(usize, usize) -> Workload;
    let rows: [(&str, usize, Make); 3] = [
        ("~1,000-call batches, 10 keys", 10, Workload::large),
        ("4 plain calls, 10 keys", 10, Workload::small),
        ("1,000 plain, key fs:{path}", 100_000, Workload::templated),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    for (label, keys, make) in rows {
        let w = make(executions, keys);
        let mut engine = f64::INFINITY;
        let mut driver = f64::INFINITY;
        for _ in 0..runs {
            engine = engine.min(drive::native(&w, &[], || 0)?.per_execution(&w));
            driver = driver.min(runtime.block_on(drive_driver(&w))?);
        }
        println!(
            "| {label} | {} | {engine:.0} | {driver:.0} | {:.1}x |",
            w.executions,
            driver / engine
        );
    }
    Ok(())
}

/// Nanoseconds per execution through the driver.
async fn drive_driver(w: &Workload) -> Result<f64, String> {
    let policy = turnstile::Policy::from_toml("bench.toml", &w.policy_text)
        .map_err(|e| format!("policy: {e}"))?;
    let batches: Vec<Vec<Call>> = w
        .patterns
        .iter()
        .map(|b| {
            b.calls()
                .iter()
                .map(|c| {
                    let mut call = Call::new(c.id, c.tool);
                    if let Some(n) = c.operations {
                        call = call.with_operations(n);
                    }
                    if let Some(a) = c.arguments {
                        let value: Value = serde_json::from_str(a).unwrap_or(Value::Null);
                        call = call.with_arguments(value);
                    }
                    call
                })
                .collect()
        })
        .collect();
    let start = Instant::now();
    let driver = Driver::new(&policy, DriverOptions::default()).map_err(|e| e.to_string())?;
    let mut ended = 0usize;
    for round in 0..w.rounds {
        let calls = batches[round % batches.len()].clone();
        let outcomes = driver
            .run(
                calls,
                |_: Execution| async { Ok::<Value, ExecError>(Value::Null) },
                RunOptions::default(),
            )
            .await
            .map_err(|e| format!("driver run: {e}"))?;
        for call in outcomes.iter() {
            for entry in &call.entries {
                match &entry.status {
                    Status::Ok(_) => ended += 1,
                    other => return Err(format!("{}: {other}", entry.label)),
                }
            }
        }
        driver.forget(&outcomes);
    }
    let ns = start.elapsed().as_nanos() as f64;
    driver.close();
    if ended != w.executions {
        return Err(format!(
            "the driver ended {ended} of {} executions",
            w.executions
        ));
    }
    Ok(ns / w.executions as f64)
}
