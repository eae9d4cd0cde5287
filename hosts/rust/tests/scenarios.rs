//! The scenario corpus (tests/scenarios/*.toml, format in tests/scenarios/README.md): every
//! file runs on the Rust driver on a virtual clock with an in-memory `persist`, and must print
//! exactly its `expect` lines, as the JS and Python runners do (this is a port of
//! hosts/js/test/scenarios.test.mjs).
//!
//! Time: a `VirtualClock` of its own (a heap of timers; nothing sleeps) on a current-thread
//! tokio runtime whose own clock is paused. Waiting 1 ms of tokio time completes only once
//! every task is idle (tokio advances a paused clock only then), which is the JS runner's
//! `quiet()`: time moves to the next virtual timer only when nothing else can run, one timer
//! at a time, in the order they were set.
//!
//! Rust differences, all in how a step is written (the driver's behaviour is the same):
//! `ok-not-json` and `ok nan` return an `ExecError` named `TypeError` (a `serde_json::Value`
//! is always JSON, so the driver cannot be handed one it must refuse); `throw-sync` returns a
//! ready error (`tests/driver_failures.rs` covers a real panic); a `decide` answer that is not
//! a decision is the runner's `RangeError` / `TypeError` (a `Decision` is an enum);
//! `pause KEY -5` fails converting `-5` ms to a `Duration`, before the driver is called.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;
use turnstile::clock::{Clock, Sleep};
use turnstile::shared::{
    KeyInspection, MemoryStore, MemoryStoreOptions, Removal, SharedKeys, SharedKeysOptions, Store,
    StoreFuture, Terms, TicketState, Wake, Watch, Watcher,
};
use turnstile::{
    Call, CancelToken, Decide, Decision, Driver, DriverOptions, EntryOutcome, ExecError, Execute,
    Execution, HostError, OnOutcome, Persist, Policy, ResumeOptions, Run, RunOptions, Started,
    Status,
};

/// Scenarios that need shared keys (`SharedKeys`, crate::shared, another change): run, and
/// expected to fail until it lands (a pending one that passes fails the test, so the list
/// stays true).
const PENDING: &[&str] = &[];

const CAP_MS: u64 = 10_000_000;
/// The store's time base: 24 h ahead of the virtual clock (its offset must not matter).
const STORE_START_MS: u64 = 86_400_000;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios")
}

// --- the virtual clock ----------------------------------------------------------------------

#[derive(Default)]
struct Timers {
    now: u64,
    seq: u64,
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    fire: HashMap<u64, oneshot::Sender<()>>,
}

/// Timers in a heap; time moves only when the runner advances it.
#[derive(Default)]
struct VirtualClock {
    timers: Mutex<Timers>,
}

impl VirtualClock {
    fn now(&self) -> u64 {
        self.timers.lock().unwrap().now
    }

    fn set_timer(&self, at: u64) -> oneshot::Receiver<()> {
        let mut t = self.timers.lock().unwrap();
        let (tx, rx) = oneshot::channel();
        let at = at.max(t.now);
        let seq = t.seq;
        t.seq += 1;
        t.heap.push(Reverse((at, seq)));
        t.fire.insert(seq, tx);
        rx
    }

    /// The next live timer's time (a timer whose waiter went is dead).
    fn next(&self) -> Option<u64> {
        let mut t = self.timers.lock().unwrap();
        while let Some(&Reverse((at, seq))) = t.heap.peek() {
            if t.fire.get(&seq).is_some_and(|tx| !tx.is_closed()) {
                return Some(at);
            }
            t.heap.pop();
            t.fire.remove(&seq);
        }
        None
    }

    /// Fires the next timer if it is due by now.
    fn fire_one(&self) -> bool {
        let Some(at) = self.next() else { return false };
        let mut t = self.timers.lock().unwrap();
        if at > t.now {
            return false;
        }
        let Some(Reverse((_, seq))) = t.heap.pop() else {
            return false;
        };
        if let Some(tx) = t.fire.remove(&seq) {
            let _ = tx.send(());
        }
        true
    }

    async fn advance(&self) -> bool {
        quiet().await;
        let Some(at) = self.next() else { return false };
        {
            let mut t = self.timers.lock().unwrap();
            t.now = t.now.max(at);
        }
        while self.fire_one() {
            quiet().await;
        }
        true
    }

    async fn run_until(&self, until: u64) {
        loop {
            quiet().await;
            match self.next() {
                Some(at) if at <= until => {
                    self.advance().await;
                }
                _ => break,
            }
        }
        {
            let mut t = self.timers.lock().unwrap();
            t.now = t.now.max(until);
        }
        quiet().await;
    }
}

/// Completes once every task is idle: tokio's paused clock moves only then.
async fn quiet() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// One life's view of the clock: once it crashed, its timers never fire.
struct LifeClock {
    clock: Arc<VirtualClock>,
    alive: Arc<AtomicBool>,
}

impl Clock for LifeClock {
    fn now_ms(&self) -> u64 {
        self.clock.now()
    }

    fn sleep_until(&self, at_ms: u64) -> Sleep {
        let rx = self.clock.set_timer(at_ms);
        let alive = self.alive.clone();
        Box::pin(async move {
            let _ = rx.await;
            if !alive.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
        })
    }
}

// --- a process's view of the one store --------------------------------------------------------

/// Once its process crashed, its calls never reach the store, answers never come back, and its
/// watches hear nothing (SIGKILL).
struct MortalStore {
    store: MemoryStore,
    crashed: Arc<AtomicBool>,
}

fn mortal<'a, T: Send + 'a>(
    crashed: Arc<AtomicBool>,
    call: StoreFuture<'a, T>,
) -> StoreFuture<'a, T> {
    Box::pin(async move {
        if crashed.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let answer = call.await;
        if crashed.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        answer
    })
}

struct MortalWatcher {
    watcher: Arc<dyn Watcher>,
    crashed: Arc<AtomicBool>,
}

impl Watcher for MortalWatcher {
    fn tickets(&self) -> Vec<String> {
        if self.crashed.load(Ordering::SeqCst) {
            return Vec::new();
        }
        self.watcher.tickets()
    }

    fn wake(&self, wake: Wake) {
        if !self.crashed.load(Ordering::SeqCst) {
            self.watcher.wake(wake);
        }
    }
}

impl Store for MortalStore {
    fn kind(&self) -> &str {
        self.store.kind()
    }

    fn request<'a>(
        &'a self,
        key: &'a str,
        ticket: &'a str,
        terms: &'a Terms,
    ) -> StoreFuture<'a, TicketState> {
        mortal(self.crashed.clone(), self.store.request(key, ticket, terms))
    }

    fn renew<'a>(
        &'a self,
        key: &'a str,
        tickets: &'a [String],
    ) -> StoreFuture<'a, Vec<TicketState>> {
        mortal(self.crashed.clone(), self.store.renew(key, tickets))
    }

    fn release<'a>(&'a self, key: &'a str, ticket: &'a str) -> StoreFuture<'a, Removal> {
        mortal(self.crashed.clone(), self.store.release(key, ticket))
    }

    fn abandon<'a>(&'a self, key: &'a str, ticket: &'a str) -> StoreFuture<'a, Removal> {
        mortal(self.crashed.clone(), self.store.abandon(key, ticket))
    }

    fn pause<'a>(&'a self, key: &'a str, for_ms: u32) -> StoreFuture<'a, u64> {
        mortal(self.crashed.clone(), self.store.pause(key, for_ms))
    }

    fn watch(&self, key: &str, watcher: Arc<dyn Watcher>) -> Watch {
        let watcher = MortalWatcher {
            watcher,
            crashed: self.crashed.clone(),
        };
        self.store.watch(key, Arc::new(watcher))
    }

    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, KeyInspection> {
        mortal(self.crashed.clone(), self.store.inspect(key))
    }

    fn close(&self) -> StoreFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}

// --- the scenario ---------------------------------------------------------------------------

#[derive(Clone)]
struct BatchSpec {
    at: u64,
    process: Option<String>,
    calls: Vec<Call>,
    execution_ms: Option<u64>,
    abort_grace_ms: Option<u64>,
    decide: Option<toml::Table>,
    cancel_at: Option<u64>,
    forget: bool,
}

struct Spec {
    config: String,
    lease_ms: Option<u64>,
    started: Started,
    persist_ms: Option<u64>,
    batches: Vec<BatchSpec>,
    scripts: HashMap<String, Vec<String>>,
    at: Vec<(u64, Option<String>, String)>,
    names: Vec<String>,
    expect: String,
}

fn int(v: Option<&toml::Value>) -> Option<u64> {
    v.and_then(toml::Value::as_integer)
        .and_then(|n| u64::try_from(n).ok())
}

fn json_of(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => json!(s),
        toml::Value::Integer(n) => json!(n),
        toml::Value::Float(f) => {
            serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
        }
        toml::Value::Boolean(b) => json!(b),
        toml::Value::Datetime(d) => json!(d.to_string()),
        toml::Value::Array(items) => Value::Array(items.iter().map(json_of).collect()),
        toml::Value::Table(t) => {
            Value::Object(t.iter().map(|(k, v)| (k.clone(), json_of(v))).collect())
        }
    }
}

fn check_keys(t: &toml::Table, known: &[&str], at: &str) -> Result<(), String> {
    match t.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!("{at}: unknown field {k:?}")),
        None => Ok(()),
    }
}

fn spec_of(file: &str, text: &str) -> Result<Spec, String> {
    let t: toml::Table = toml::from_str(text).map_err(|e| format!("{file}: {e}"))?;
    check_keys(
        &t,
        &[
            "about",
            "config",
            "started",
            "processes",
            "lease_ms",
            "persist_ms",
            "batch",
            "script",
            "at",
            "expect",
        ],
        file,
    )?;
    let mut batches = Vec::new();
    for (i, b) in t
        .get("batch")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let b = b.as_table().ok_or("batch must be a table")?;
        check_keys(
            b,
            &[
                "at",
                "process",
                "calls",
                "operations",
                "execution_ms",
                "abort_grace_ms",
                "decide",
                "cancel_at",
                "forget",
            ],
            &format!("{file}: batch {i}"),
        )?;
        let ops = b.get("operations").and_then(toml::Value::as_table);
        let calls = b
            .get("calls")
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let id = c
                    .get("id")
                    .and_then(toml::Value::as_str)
                    .unwrap_or_default();
                let tool = c
                    .get("tool")
                    .and_then(toml::Value::as_str)
                    .unwrap_or_default();
                let mut call = Call::new(id, tool);
                if let Some(args) = c.get("arguments") {
                    call.arguments = json_of(args);
                }
                call.operations = ops.and_then(|o| int(o.get(id))).map(|n| n as u32);
                call
            })
            .collect();
        batches.push(BatchSpec {
            at: int(b.get("at")).unwrap_or(0),
            process: b
                .get("process")
                .and_then(toml::Value::as_str)
                .map(str::to_owned),
            calls,
            execution_ms: int(b.get("execution_ms")),
            abort_grace_ms: int(b.get("abort_grace_ms")),
            decide: b.get("decide").and_then(toml::Value::as_table).cloned(),
            cancel_at: int(b.get("cancel_at")),
            forget: b
                .get("forget")
                .and_then(toml::Value::as_bool)
                .unwrap_or(true),
        });
    }
    let scripts = t
        .get("script")
        .and_then(toml::Value::as_table)
        .map(|s| {
            s.iter()
                .map(|(k, v)| {
                    let steps = v
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect();
                    (k.clone(), steps)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut at = Vec::new();
    for (i, a) in t
        .get("at")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let a = a.as_table().ok_or("at must be a table")?;
        check_keys(
            a,
            &["t", "do", "process"],
            &format!(
                "{file}: at {i} (a key after [[at]] belongs to it: put expect before the tables)"
            ),
        )?;
        at.push((
            int(a.get("t")).unwrap_or(0),
            a.get("process")
                .and_then(toml::Value::as_str)
                .map(str::to_owned),
            a.get("do")
                .and_then(toml::Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        ));
    }
    let names: Vec<String> = match t.get("processes").and_then(toml::Value::as_array) {
        Some(list) => list
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        None => vec![String::new()],
    };
    Ok(Spec {
        config: t
            .get("config")
            .and_then(toml::Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        started: match t.get("started").and_then(toml::Value::as_str) {
            Some("run-again") => Started::RunAgain,
            _ => Started::Interrupt,
        },
        persist_ms: int(t.get("persist_ms")),
        lease_ms: int(t.get("lease_ms")),
        batches,
        scripts,
        at,
        names,
        expect: t
            .get("expect")
            .and_then(toml::Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    })
}

/// A TOML literal as a script writes it (`'text'`, `3`, `true`).
fn literal(text: &str) -> toml::Value {
    let t: toml::Table = toml::from_str(&format!("v = {text}")).unwrap_or_default();
    t.get("v")
        .cloned()
        .unwrap_or(toml::Value::String(text.to_owned()))
}

fn scenario_error(message: &str) -> HostError {
    HostError::new("ScenarioError", message)
}

// --- processes and their lives --------------------------------------------------------------

type Lines = Arc<Mutex<Vec<String>>>;

struct Life {
    alive: Arc<AtomicBool>,
    crashed: Arc<AtomicBool>,
    keys: Option<SharedKeys>,
    clock: Arc<VirtualClock>,
    lines: Lines,
    resume_at: Mutex<HashMap<String, usize>>,
    driver: Mutex<Option<Driver>>,
}

impl Life {
    fn log(&self, text: String) {
        if self.alive.load(Ordering::SeqCst) {
            let now = self.clock.now();
            self.lines.lock().unwrap().push(format!("{now} {text}"));
        }
    }

    fn clock(&self) -> Arc<dyn Clock> {
        Arc::new(LifeClock {
            clock: self.clock.clone(),
            alive: self.alive.clone(),
        })
    }

    fn sleep(&self, ms: u64) -> Sleep {
        self.clock().sleep_until(self.clock.now() + ms)
    }

    fn driver(&self) -> Driver {
        self.driver
            .lock()
            .unwrap()
            .clone()
            .expect("a life has a driver")
    }
}

struct Proc {
    name: String,
    lives: u32,
    life: Arc<Life>,
    snapshot: Arc<Mutex<Option<String>>>,
    fail_persist: Arc<AtomicBool>,
    numbers: HashMap<u64, usize>,
}

struct Runner {
    spec: Arc<Spec>,
    policy: Policy,
    clock: Arc<VirtualClock>,
    lines: Lines,
    procs: Vec<Proc>,
    tokens: HashMap<usize, CancelToken>,
    store: Option<MemoryStore>,
}

fn outcome_text(o: &EntryOutcome) -> String {
    match &o.status {
        Status::Ok(v) => format!("ok {}", serde_json::to_string(v).unwrap()),
        Status::Failed(e) if e.name() == "ScenarioError" => {
            format!("failed {}", serde_json::to_string(&e.message()).unwrap())
        }
        Status::Failed(e) => format!("failed {}", e.name()),
        Status::Cancelled(_) => "cancelled".to_owned(),
        Status::Settled {
            reason, message, ..
        } => format!(
            "settled {} {}",
            reason.name(),
            serde_json::to_string(message).unwrap()
        ),
    }
}

impl Runner {
    /// A new life of process `name` (its `lives`-th): its own clock view, and its own
    /// `SharedKeys` over the one store when the policy has shared keys.
    fn new_life(&self, name: &str, lives: u32) -> Arc<Life> {
        let alive = Arc::new(AtomicBool::new(true));
        let crashed = Arc::new(AtomicBool::new(false));
        let keys = self.store.as_ref().map(|store| {
            let mortal = MortalStore {
                store: store.clone(),
                crashed: crashed.clone(),
            };
            let options = SharedKeysOptions {
                lease_ms: self.spec.lease_ms.map_or(10_000, |ms| ms as u32),
                owner: Some(format!(
                    "{}{lives}",
                    if name.is_empty() { "p" } else { name }
                )),
                clock: Arc::new(LifeClock {
                    clock: self.clock.clone(),
                    alive: alive.clone(),
                }),
            };
            SharedKeys::new(Arc::new(mortal), options).expect("shared keys")
        });
        Arc::new(Life {
            alive,
            crashed,
            keys,
            clock: self.clock.clone(),
            lines: self.lines.clone(),
            resume_at: Mutex::new(HashMap::new()),
            driver: Mutex::new(None),
        })
    }

    fn options(&self, p: usize, life: &Arc<Life>) -> DriverOptions {
        let proc = &self.procs[p];
        let snapshot = proc.snapshot.clone();
        let fail = proc.fail_persist.clone();
        let persist_ms = self.spec.persist_ms;
        let me = life.clone();
        DriverOptions {
            shared_keys: life.keys.clone(),
            clock: Some(life.clock()),
            persist: Some(Persist::new(move |text: String| {
                let failing = fail.load(Ordering::SeqCst);
                let snapshot = snapshot.clone();
                let me = me.clone();
                let slow = persist_ms.map(|ms| me.sleep(ms));
                async move {
                    if failing {
                        return Err(scenario_error("disk full"));
                    }
                    if let Some(sleep) = slow {
                        sleep.await;
                    }
                    if me.alive.load(Ordering::SeqCst) {
                        *snapshot.lock().unwrap() = Some(text);
                    }
                    Ok(())
                }
            })),
        }
    }

    fn execute(&self, life: &Arc<Life>) -> Execute {
        let life = life.clone();
        let scripts = Arc::new(self.spec.scripts.clone());
        Execute::new(move |x: Execution| {
            life.log(format!("start {}", x.label()));
            let cancelled = x.cancelled();
            let watcher = life.clone();
            let label = x.label().to_owned();
            tokio::spawn(async move {
                cancelled.await;
                watcher.log(format!("abort {label}"));
            });
            let steps = scripts.get(x.label()).cloned().unwrap_or_default();
            let life = life.clone();
            async move {
                if steps.first().map(String::as_str) == Some("throw-sync") {
                    return Err(ExecError::Failed(scenario_error("sync")));
                }
                run_steps(life, x, steps).await
            }
        })
    }

    fn decide(&self, life: &Arc<Life>) -> Decide {
        let batches = self.spec.batches.clone();
        let life = life.clone();
        Decide::new(move |label: &str, _call: &Call| {
            let d = batches
                .iter()
                .find_map(|b| b.decide.as_ref().and_then(|d| d.get(label)).cloned());
            let life = life.clone();
            async move {
                match d {
                    None => Ok(Decision::Approve),
                    Some(toml::Value::Table(t)) => {
                        let after = int(t.get("after")).unwrap_or(0);
                        life.sleep(after).await;
                        decision(
                            t.get("then")
                                .unwrap_or(&toml::Value::String("approve".into())),
                        )
                    }
                    Some(d) => decision(&d),
                }
            }
        })
    }

    fn on_outcome(life: &Arc<Life>) -> OnOutcome {
        let life = life.clone();
        OnOutcome::new(move |o: &EntryOutcome, _call: &Call| {
            life.log(format!("outcome {} {}", o.label, outcome_text(o)));
        })
    }

    fn process(&self, name: Option<&str>) -> usize {
        name.and_then(|n| self.procs.iter().position(|p| p.name == n))
            .unwrap_or(0)
    }

    fn watch(&self, life: &Arc<Life>, index: usize, run: Run, forget: bool, restored: bool) {
        let token = if restored {
            None
        } else {
            self.tokens.get(&index).cloned()
        };
        let life = life.clone();
        tokio::spawn(async move {
            let result = run.await;
            match result {
                Ok(outcomes) => {
                    if !life.alive.load(Ordering::SeqCst) {
                        return;
                    }
                    let cancelled = token.is_some_and(|t| t.is_cancelled());
                    life.log(format!(
                        "batch {index} {}",
                        if cancelled { "cancelled" } else { "resolved" }
                    ));
                    if forget {
                        life.driver().forget(&outcomes);
                    }
                }
                Err(e) => life.log(format!("batch {index} rejected {}", e.name())),
            }
        });
    }

    fn submit(&mut self, index: usize) {
        let b = self.spec.batches[index].clone();
        let p = self.process(b.process.as_deref());
        let life = self.procs[p].life.clone();
        if !life.alive.load(Ordering::SeqCst) {
            return;
        }
        let token = CancelToken::new();
        self.tokens.insert(index, token.clone());
        let options = RunOptions {
            decide: b.decide.as_ref().map(|_| self.decide(&life)),
            execution_timeout: b.execution_ms.map(Duration::from_millis),
            abort_grace: b.abort_grace_ms.map(Duration::from_millis),
            on_outcome: Some(Self::on_outcome(&life)),
            cancel: Some(token),
        };
        let run = life
            .driver()
            .run_with(b.calls.clone(), self.execute(&life), options);
        if let Some(batch) = run.batch() {
            self.procs[p].numbers.insert(batch, index);
        }
        self.watch(&life, index, run, b.forget, false);
    }

    fn crash(life: &Life) {
        life.alive.store(false, Ordering::SeqCst);
        life.crashed.store(true, Ordering::SeqCst);
    }

    fn restart(&mut self, p: usize) -> Result<(), String> {
        Self::crash(&self.procs[p].life);
        let name = self.procs[p].name.clone();
        let now = self.clock.now();
        self.lines.lock().unwrap().push(if name.is_empty() {
            format!("{now} restart")
        } else {
            format!("{now} restart {name}")
        });
        self.procs[p].lives += 1;
        let life = self.new_life(&name, self.procs[p].lives);
        self.procs[p].life = life.clone();
        let options = self.options(p, &life);
        let snapshot = self.procs[p].snapshot.lock().unwrap().clone();
        let Some(snapshot) = snapshot else {
            let driver = Driver::new(&self.policy, options).map_err(|e| e.to_string())?;
            *life.driver.lock().unwrap() = Some(driver);
            return Ok(());
        };
        let saved: Value = serde_json::from_str(&snapshot).map_err(|e| e.to_string())?;
        let mut order: Vec<u64> = Vec::new();
        for r in saved["retired"].as_array().into_iter().flatten() {
            order.push(r["batch"].as_str().unwrap_or("0").parse().unwrap_or(0));
        }
        for b in saved["state"]["batches"].as_array().into_iter().flatten() {
            order.push(b["batch"].as_str().unwrap_or("0").parse().unwrap_or(0));
        }
        let mut resume = ResumeOptions::new(self.execute(&life));
        resume.started = self.spec.started;
        resume.decide = Some(self.decide(&life));
        resume.on_outcome = Some(Self::on_outcome(&life));
        resume.driver = options;
        let resumed = Driver::resume(&self.policy, &snapshot, resume).map_err(|e| e.to_string())?;
        *life.driver.lock().unwrap() = Some(resumed.driver);
        for (i, run) in resumed.batches.into_iter().enumerate() {
            let Some(&index) = order.get(i).and_then(|b| self.procs[p].numbers.get(b)) else {
                continue;
            };
            let forget = self.spec.batches.get(index).is_none_or(|b| b.forget);
            self.watch(&life, index, run, forget, true);
        }
        Ok(())
    }

    fn act(&mut self, p: usize, what: &str) -> Result<(), String> {
        let life = self.procs[p].life.clone();
        if !life.alive.load(Ordering::SeqCst) {
            return Ok(());
        }
        let words: Vec<&str> = what.split(' ').collect();
        match words.as_slice() {
            ["restart"] => self.restart(p)?,
            ["kill"] => {
                Self::crash(&life);
                let now = self.clock.now();
                self.lines
                    .lock()
                    .unwrap()
                    .push(format!("{now} kill {}", self.procs[p].name));
            }
            ["dispose"] => life.driver().close(),
            ["fail-persist"] => self.procs[p].fail_persist.store(true, Ordering::SeqCst),
            ["cancel", i] => {
                if let Some(t) = i.parse().ok().and_then(|i: usize| self.tokens.get(&i)) {
                    t.cancel();
                }
            }
            ["pause", key, ms] => {
                let what = format!("pause {key}");
                match ms
                    .parse::<f64>()
                    .ok()
                    .and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok())
                {
                    // A negative or non-finite duration is no `Duration`: refused at the call.
                    None => life.log(format!("{what} threw RangeError")),
                    Some(d) => settle_of(&life, what, life.driver().pause(key, d)),
                }
            }
            ["lift-pause", key] => settle_of(
                &life,
                format!("lift-pause {key}"),
                life.driver().lift_pause(key),
            ),
            ["step-ahead", ms] => {
                let ms: u64 = ms.parse().map_err(|_| format!("bad step-ahead {ms}"))?;
                life.driver()
                    .step_scheduler_for_tests(self.clock.now() + ms);
            }
            _ => return Err(format!("unknown action {what:?}")),
        }
        Ok(())
    }
}

fn settle_of(
    life: &Arc<Life>,
    what: String,
    done: impl Future<Output = Result<(), turnstile::PauseError>> + Send + 'static,
) {
    let life = life.clone();
    tokio::spawn(async move {
        if let Err(e) = done.await {
            life.log(format!("{what} rejected {}", e.name()));
        }
    });
}

fn decision(d: &toml::Value) -> Result<Decision, HostError> {
    match d {
        toml::Value::String(s) if s == "raise" => Err(scenario_error("decide raised")),
        toml::Value::String(s) => s.parse(),
        other => Err(HostError::new(
            "TypeError",
            format!("a decision must be a string, got {other:?}"),
        )),
    }
}

async fn run_steps(life: Arc<Life>, x: Execution, steps: Vec<String>) -> Result<Value, ExecError> {
    let label = x.label().to_owned();
    let from = life
        .resume_at
        .lock()
        .unwrap()
        .get(&label)
        .copied()
        .unwrap_or(0);
    for (at, step) in steps.iter().enumerate().skip(from) {
        let (word, arg) = step.split_once(' ').unwrap_or((step.as_str(), ""));
        match word {
            "sleep" => {
                let (ms, ignore) = arg
                    .split_once(' ')
                    .map_or((arg, false), |(ms, rest)| (ms, rest == "ignore-abort"));
                let ms: u64 = ms.parse().unwrap_or(0);
                if ignore {
                    life.sleep(ms).await;
                } else {
                    tokio::select! {
                        biased;
                        reason = x.cancelled() => return Err(reason.into()),
                        () = life.sleep(ms) => {}
                    }
                }
            }
            "hang" => std::future::pending::<()>().await,
            "ask" => {
                let ms: u64 = arg.parse().unwrap_or(0);
                ask(&life, &x, ms).await?;
            }
            "ask-twice" => {
                let ms: u64 = arg.parse().unwrap_or(0);
                let (a, b) = tokio::join!(ask(&life, &x, ms), ask(&life, &x, ms));
                a?;
                b?;
            }
            "ok" => {
                let v = literal(arg);
                if matches!(v, toml::Value::Float(f) if !f.is_finite()) {
                    return Err(not_json(&label));
                }
                return Ok(json_of(&v));
            }
            "ok-nothing" => return Ok(Value::Null),
            "ok-not-json" => return Err(not_json(&label)),
            "fail" => {
                let message = literal(arg);
                return Err(ExecError::Failed(scenario_error(
                    message.as_str().unwrap_or(arg),
                )));
            }
            "rate-limited" => {
                life.resume_at.lock().unwrap().insert(label.clone(), at + 1);
                let header = literal(arg);
                return Err(ExecError::rate_limited_from_header(header.as_str(), 1000));
            }
            other => {
                return Err(ExecError::failed(
                    "Error",
                    format!("unknown script step {other:?}"),
                ));
            }
        }
    }
    Ok(json!(format!("v:{label}")))
}

fn not_json(label: &str) -> ExecError {
    ExecError::failed(
        "TypeError",
        format!("{label} returned what the snapshot cannot hold as JSON"),
    )
}

async fn ask(life: &Arc<Life>, x: &Execution, ms: u64) -> Result<(), ExecError> {
    let sleep = life.sleep(ms);
    let cancelled = x.cancelled();
    x.question(async move {
        tokio::select! {
            biased;
            reason = cancelled => Err(reason.into()),
            () = sleep => Ok(()),
        }
    })
    .await
}

/// Lines split at `restart`, each part sorted by time, then as text.
fn normalize(text: &[String]) -> Vec<String> {
    let mut parts: Vec<Vec<String>> = vec![Vec::new()];
    for line in text {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split(' ').collect();
        let is_restart = words.get(1) == Some(&"restart") && words.len() <= 3;
        if is_restart {
            parts.push(vec![line.to_owned()]);
            parts.push(Vec::new());
        } else if let Some(last) = parts.last_mut() {
            last.push(line.to_owned());
        }
    }
    let mut out = Vec::new();
    for mut part in parts {
        part.sort_by(|a, b| {
            let ta: u64 = a
                .split(' ')
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            let tb: u64 = b
                .split(' ')
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            ta.cmp(&tb).then_with(|| a.cmp(b))
        });
        out.extend(part);
    }
    out
}

fn diff(expected: &[String], actual: &[String]) -> String {
    let n = expected.len().max(actual.len());
    let mut rows = String::from("expected (left) and got (right):\n");
    for i in 0..n {
        let e = expected.get(i).map_or("", String::as_str);
        let a = actual.get(i).map_or("", String::as_str);
        rows.push_str(&format!(
            "{} {e:<60} | {a}\n",
            if e == a { "  " } else { "!!" }
        ));
    }
    rows
}

async fn run_scenario(file: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(dir().join(file)).map_err(|e| format!("{file}: {e}"))?;
    let spec = Arc::new(spec_of(file, &text)?);
    let policy = Policy::from_toml(file, &spec.config).map_err(|e| format!("{file}: {e}"))?;
    let clock = Arc::new(VirtualClock::default());
    let lines: Lines = Arc::new(Mutex::new(Vec::new()));
    let mut runner = Runner {
        spec: spec.clone(),
        policy,
        clock: clock.clone(),
        lines: lines.clone(),
        procs: Vec::new(),
        tokens: HashMap::new(),
        store: None,
    };
    if !runner.policy.shared_keys().is_empty() {
        let options = MemoryStoreOptions {
            clock: Arc::new(LifeClock {
                clock: clock.clone(),
                alive: Arc::new(AtomicBool::new(true)),
            }),
            start_ms: STORE_START_MS,
        };
        runner.store = Some(MemoryStore::new(options).map_err(|e| format!("{file}: {e}"))?);
    }
    for name in &spec.names {
        let life = runner.new_life(name, 1);
        runner.procs.push(Proc {
            lives: 1,
            name: name.clone(),
            life,
            snapshot: Arc::new(Mutex::new(None)),
            fail_persist: Arc::new(AtomicBool::new(false)),
            numbers: HashMap::new(),
        });
    }
    for p in 0..runner.procs.len() {
        let life = runner.procs[p].life.clone();
        let options = runner.options(p, &life);
        let driver = Driver::new(&runner.policy, options).map_err(|e| format!("{file}: {e}"))?;
        *life.driver.lock().unwrap() = Some(driver);
    }
    // The host's doings by time: batches first (file order), then cancellations and actions.
    enum Act {
        Submit(usize),
        Cancel(usize),
        Do(usize, String),
    }
    let mut host: Vec<(u64, u8, usize, Act)> = Vec::new();
    for (i, b) in spec.batches.iter().enumerate() {
        host.push((b.at, 0, host.len(), Act::Submit(i)));
    }
    for (i, b) in spec.batches.iter().enumerate() {
        if let Some(t) = b.cancel_at {
            host.push((t, 1, host.len(), Act::Cancel(i)));
        }
    }
    for (t, process, what) in &spec.at {
        let p = runner.process(process.as_deref());
        host.push((*t, 1, host.len(), Act::Do(p, what.clone())));
    }
    host.sort_by_key(|h| (h.0, h.1, h.2));
    for (t, _, _, act) in host {
        clock.run_until(t).await;
        match act {
            Act::Submit(i) => runner.submit(i),
            Act::Cancel(i) => {
                if let Some(token) = runner.tokens.get(&i) {
                    token.cancel();
                }
            }
            Act::Do(p, what) => runner.act(p, &what).map_err(|e| format!("{file}: {e}"))?,
        }
        clock.run_until(t).await;
    }
    clock.run_until(CAP_MS).await;
    if let Some(late) = clock.next() {
        return Err(format!(
            "{file}: still running at {CAP_MS} ms (a timer is due at {late} ms): a scenario must end by then"
        ));
    }
    for proc in &runner.procs {
        // What closing the keys makes the driver report is not a line.
        proc.life.alive.store(false, Ordering::SeqCst);
        if !proc.life.crashed.load(Ordering::SeqCst)
            && let Some(keys) = &proc.life.keys
        {
            keys.close().await;
        }
    }
    if let Some(store) = &runner.store {
        let _ = store.close().await;
    }
    let expected = normalize(&spec.expect.lines().map(str::to_owned).collect::<Vec<_>>());
    let actual = normalize(&lines.lock().unwrap());
    if expected == actual {
        Ok(())
    } else {
        Err(format!("{file}\n{}", diff(&expected, &actual)))
    }
}

fn run_file(file: &str) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(run_scenario(file))
}

#[test]
fn every_scenario_prints_its_expected_lines() {
    let only = std::env::var("SCENARIO").ok();
    let mut files: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|f| f.ends_with(".toml"))
        .filter(|f| only.as_ref().is_none_or(|o| f.contains(o.as_str())))
        .collect();
    files.sort();
    let mut failures = Vec::new();
    let mut passed = 0;
    let mut pending = Vec::new();
    for file in &files {
        let result = run_file(file);
        let is_pending = PENDING.contains(&file.as_str());
        match (result, is_pending) {
            (Ok(()), false) => passed += 1,
            (Err(e), false) => failures.push(e),
            (Ok(()), true) => failures.push(format!(
                "{file} passes: remove it from PENDING in tests/scenarios.rs"
            )),
            (Err(_), true) => pending.push(file.clone()),
        }
    }
    println!("{passed} scenarios pass; pending: [{}]", pending.join(", "));
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_scenario_still_running_at_the_cap_fails() {
    assert_eq!(
        run_file("runner/runs-past-the-cap.toml"),
        Err("runner/runs-past-the-cap.toml: still running at 10000000 ms (a timer is due at 10000001 ms): a scenario must end by then".to_owned())
    );
}
