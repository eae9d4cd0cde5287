//! What every component test needs: the compiled component, and `Sched`, one instance with one
//! policy and one scheduler whose calls fail the test on a trap. Only this file touches the
//! scheduler's WIT calls, so an interface change touches one place.
#![allow(dead_code)] // each test binary uses its own part

use std::sync::OnceLock;

use host_harness::{
    Harness, Instance, default_component_path, wit_config as wc, wit_scheduler as ws,
};
use wasmtime::component::ResourceAny;

/// Key `f` of limit 2; `f` fans out and stops on error.
pub(crate) const STOP_POLICY: &str =
    "[conversation.tools.f]\nconcurrency = 2\nfan_out = { on_error = \"stop\" }\n";

/// Strings a host could send as ids or names: empty, `#` forms, NUL, newline, BOM, 100 kB.
pub(crate) fn hostile_strings() -> Vec<String> {
    [
        "",
        "#",
        "a#",
        "#0",
        "a#-1",
        "a#4294967296",
        "a#0#0",
        "\u{0}",
        "é#1",
        "a b",
        "\n",
        "a\n",
        "*",
        "'*'",
        "\u{feff}",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain(["x".repeat(100_000)])
    .collect()
}

/// The component, compiled once per test binary.
pub(crate) fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let path = default_component_path();
        Harness::load(&path).unwrap_or_else(|e| {
            panic!(
                "cannot load {}: {e:#}; run `cargo xtask build-guest`",
                path.display()
            )
        })
    })
}

pub(crate) use ws::NotRun as HostSettle;
pub(crate) use ws::RefusalCode as InputErrorCode;

/// Which list of [`Inputs`] a refused input was in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InputKind {
    Approve,
    Settle,
    Granted,
    Denied,
    Ask,
    Answer,
    Ok,
    Failed,
    Retry,
    Cancel,
    Pause,
    Now,
}

/// An entry the host answers without running it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HostSettlement {
    pub(crate) entry: u64,
    pub(crate) how: HostSettle,
}

/// An execution that hit a rate limit, and when it may run again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RetryAfter {
    pub(crate) entry: u64,
    pub(crate) until: u64,
}

/// One round's inputs as lists, for tests written as rounds ([`Sched::step`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Inputs {
    pub(crate) approve: Vec<u64>,
    pub(crate) settle: Vec<HostSettlement>,
    pub(crate) granted: Vec<u64>,
    pub(crate) denied: Vec<u64>,
    pub(crate) ask: Vec<u64>,
    pub(crate) answer: Vec<u64>,
    pub(crate) ok: Vec<u64>,
    pub(crate) failed: Vec<u64>,
    pub(crate) retry: Vec<RetryAfter>,
    pub(crate) cancel: Vec<u64>,
    pub(crate) pause: Vec<ws::KeyPause>,
    pub(crate) now: Option<u64>,
}

/// A refused input: its list, its position there, and the component's refusal.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct InputError {
    pub(crate) input: InputKind,
    pub(crate) index: u32,
    pub(crate) code: InputErrorCode,
    pub(crate) message: String,
    pub(crate) about: ws::About,
}

/// One round's output, by kind, with the actions as the component returned them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outputs {
    pub(crate) abort: Vec<(u64, ws::AbortCause)>,
    pub(crate) start: Vec<u64>,
    pub(crate) settle: Vec<ws::Settlement>,
    pub(crate) acquire: Vec<u64>,
    pub(crate) release: Vec<u64>,
    pub(crate) retired: Vec<u64>,
    pub(crate) errors: Vec<InputError>,
    pub(crate) wake_at: Option<u64>,
    pub(crate) pause_store: Vec<ws::KeyPause>,
}

/// One call as a test writes it; [`pack`] makes the WIT `batch` of several.
#[derive(Clone, Debug, Default)]
pub(crate) struct Call {
    pub(crate) id: String,
    pub(crate) tool: String,
    pub(crate) operations: Option<u32>,
    pub(crate) arguments: Option<String>,
}

/// Calls as `submit-batch` takes them (`host_harness::pack`).
pub(crate) fn pack(calls: &[Call]) -> ws::Batch {
    host_harness::pack(calls.iter().map(|c| {
        (
            c.id.as_str(),
            c.tool.as_str(),
            c.operations,
            c.arguments.as_deref(),
        )
    }))
}

/// A batch without time limits.
pub(crate) const NO_LIMITS: ws::Limits = ws::Limits {
    execution_ms: None,
    abort_grace_ms: None,
};

/// Inputs with every list empty.
pub(crate) fn none() -> Inputs {
    Inputs::default()
}

/// A step's refused inputs as (list, index, code); messages are for people.
pub(crate) fn errors(out: &Outputs) -> Vec<(InputKind, u32, InputErrorCode)> {
    out.errors
        .iter()
        .map(|e| (e.input, e.index, e.code))
        .collect()
}

/// A step's settled entries as (entry, reason).
pub(crate) fn settled(out: &Outputs) -> Vec<(u64, ws::Reason)> {
    out.settle.iter().map(|s| (s.entry, s.reason)).collect()
}

/// What a refusal names for the input `(kind, number)`.
fn about_of(kind: InputKind, number: u64) -> ws::About {
    match kind {
        InputKind::Cancel => ws::About::Batch(number),
        _ => ws::About::Entry(number),
    }
}

/// Asserts a step's four lists exactly.
#[track_caller]
pub(crate) fn assert_out(
    out: &Outputs,
    start: &[u64],
    settle: &[(u64, ws::Reason)],
    errs: &[(InputKind, u32, InputErrorCode)],
    retired: &[u64],
) {
    assert_eq!(out.start, start, "start of {out:?}");
    assert_eq!(settled(out), settle, "settle of {out:?}");
    assert_eq!(errors(out), errs, "errors of {out:?}");
    assert_eq!(out.retired, retired, "retired of {out:?}");
    for e in &out.errors {
        assert!(!e.message.is_empty(), "an error without a message: {e:?}");
    }
    for s in &out.settle {
        assert!(
            !s.message.is_empty(),
            "a settlement without a sentence: {s:?}"
        );
    }
}

/// Why an execution was aborted, as the corpus spells it.
fn cause_name(cause: ws::AbortCause) -> &'static str {
    match cause {
        ws::AbortCause::Deadline => "deadline",
        ws::AbortCause::Cancel => "cancel",
    }
}

/// The name of a state as the corpus spells it (`ended-ok`, `stopped 1`).
pub(crate) fn state_name(state: &ws::State) -> String {
    let reason = |r: &ws::Reason| match r {
        ws::Reason::Rejected => "rejected".to_owned(),
        ws::Reason::Skipped => "skipped".to_owned(),
        ws::Reason::Failed => "failed".to_owned(),
        ws::Reason::Cancelled => "cancelled".to_owned(),
        ws::Reason::Stopped(after) => format!("stopped {after}"),
        ws::Reason::Interrupted => "interrupted".to_owned(),
        ws::Reason::RateLimited(retries) => format!("rate-limited {retries}"),
        ws::Reason::TimedOut(cause) => format!("timed-out {}", cause_name(*cause)),
    };
    match state {
        ws::State::Pending => "pending".to_owned(),
        ws::State::Approved => "approved".to_owned(),
        ws::State::Acquiring => "acquiring".to_owned(),
        ws::State::Granted => "granted".to_owned(),
        ws::State::Running => "running".to_owned(),
        ws::State::Asking => "asking".to_owned(),
        ws::State::Aborted(cause) => format!("aborted {}", cause_name(*cause)),
        ws::State::Ended(ws::Outcome::Ok) => "ended-ok".to_owned(),
        ws::State::Ended(ws::Outcome::Failed) => "ended-failed".to_owned(),
        ws::State::Settled(r) => reason(r),
    }
}

/// Resolves `toml` as one layer in `inst`.
pub(crate) fn resolve_in(inst: &mut Instance, toml: &str) -> ResourceAny {
    let layers = [wc::Layer {
        name: "test".to_owned(),
        text: toml.to_owned(),
    }];
    let config = inst.exports.turnstile_scheduler_config().policy();
    config
        .call_resolve(&mut inst.store, &layers)
        .expect("no trap")
        .unwrap_or_else(|d| panic!("the test config does not resolve: {}", d[0].rendered))
}

/// A new scheduler on `policy` in `inst`.
pub(crate) fn scheduler_in(inst: &mut Instance, policy: ResourceAny) -> ResourceAny {
    let iface = inst.exports.turnstile_scheduler_scheduler().scheduler();
    iface
        .call_constructor(&mut inst.store, policy)
        .expect("no trap")
}

/// One instance, a policy resolved in it, and a scheduler on that policy.
pub(crate) struct Sched {
    pub(crate) inst: Instance,
    pub(crate) policy: ResourceAny,
    pub(crate) s: ResourceAny,
}

impl Sched {
    /// A fresh instance with a scheduler on the policy `toml` resolves to.
    pub(crate) fn new(toml: &str) -> Self {
        Self::in_instance(harness().instance().expect("no trap"), toml)
    }

    pub(crate) fn in_instance(mut inst: Instance, toml: &str) -> Self {
        let policy = resolve_in(&mut inst, toml);
        let s = scheduler_in(&mut inst, policy);
        Self { inst, policy, s }
    }

    /// Resolves `toml` as one layer in this instance.
    pub(crate) fn policy(&mut self, toml: &str) -> ResourceAny {
        resolve_in(&mut self.inst, toml)
    }

    /// A new scheduler on `policy` in this instance.
    pub(crate) fn scheduler(&mut self, policy: ResourceAny) -> ResourceAny {
        scheduler_in(&mut self.inst, policy)
    }

    /// `submit` as (batch, first, count), or the error's code.
    pub(crate) fn submit(
        &mut self,
        ids: &str,
        tools: &str,
        operations: &[u32],
    ) -> Result<(u64, u64, u32), ws::SubmitErrorCode> {
        self.submit_with(ids, tools, operations, &[])
    }

    /// `submit` with calls' arguments, as (batch, first, count), or the error's code. Ids and
    /// tools are one per line (an empty `ids` is no calls), `0` operations a plain call.
    pub(crate) fn submit_with(
        &mut self,
        ids: &str,
        tools: &str,
        operations: &[u32],
        arguments: &[(u32, String)],
    ) -> Result<(u64, u64, u32), ws::SubmitErrorCode> {
        let split = |text: &str| -> Vec<String> {
            if operations.is_empty() && text.is_empty() {
                Vec::new()
            } else {
                text.split('\n').map(str::to_owned).collect()
            }
        };
        let (ids, tools) = (split(ids), split(tools));
        assert_eq!(ids.len(), tools.len(), "ids and tools of one length");
        let calls: Vec<Call> = ids
            .into_iter()
            .zip(tools)
            .enumerate()
            .map(|(i, (id, tool))| Call {
                id,
                tool,
                operations: operations.get(i).copied().filter(|&n| n > 0),
                arguments: arguments
                    .iter()
                    .find(|(c, _)| *c as usize == i)
                    .map(|(_, a)| a.clone()),
            })
            .collect();
        self.submit_calls(&calls)
    }

    /// `submit-batch` of calls.
    pub(crate) fn submit_calls(
        &mut self,
        calls: &[Call],
    ) -> Result<(u64, u64, u32), ws::SubmitErrorCode> {
        self.submit_packed(&pack(calls))
    }

    /// `submit-batch` of a packed batch as given, malformed or not.
    pub(crate) fn submit_packed(
        &mut self,
        calls: &ws::Batch,
    ) -> Result<(u64, u64, u32), ws::SubmitErrorCode> {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        let r = iface
            .call_submit_batch(&mut self.inst.store, self.s, calls, NO_LIMITS)
            .unwrap_or_else(|e| panic!("submit-batch trapped: {e:#}"));
        match r {
            Ok(b) => Ok((b.batch, b.first, b.count)),
            Err(e) => {
                assert!(!e.message.is_empty(), "an error without a message: {e:?}");
                Err(e.code)
            }
        }
    }

    /// `on-events`.
    pub(crate) fn on_events(&mut self, events: &[ws::Event]) -> Vec<ws::Refusal> {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        iface
            .call_on_events(&mut self.inst.store, self.s, events, None)
            .unwrap_or_else(|e| panic!("on-events trapped: {e:#}"))
    }

    /// `on-ended`.
    pub(crate) fn on_ended(&mut self, ends: &ws::Ends) -> Vec<ws::Refusal> {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        iface
            .call_on_ended(&mut self.inst.store, self.s, ends, None)
            .unwrap_or_else(|e| panic!("on-ended trapped: {e:#}"))
    }

    /// `next-releases`.
    pub(crate) fn next_releases(&mut self, now: Option<u64>) -> ws::Releases {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        host_harness::next_releases(&iface, &mut self.inst.store, self.s, now)
            .unwrap_or_else(|e| panic!("next-releases trapped: {e:#}"))
    }

    /// One round: the inputs in the order of [`Inputs`]' fields, each list in one crossing
    /// (each input of a list on its own when a number repeats, so every refusal is known to be
    /// its input's), then `next-releases`. Checks that refusals name their input and that the
    /// actions come in the WIT's order.
    pub(crate) fn step(&mut self, inputs: &Inputs) -> Outputs {
        let mut out = Outputs::default();
        let ev = |v: &[u64], f: fn(u64) -> ws::Event| v.iter().map(|&n| (n, f(n))).collect();
        let events: [(InputKind, Vec<(u64, ws::Event)>); 6] = [
            (
                InputKind::Approve,
                ev(&inputs.approve, |n| ws::Event::Approve(vec![n])),
            ),
            (
                InputKind::Settle,
                inputs
                    .settle
                    .iter()
                    .map(|s| (s.entry, ws::Event::NotRun((s.entry, s.how))))
                    .collect(),
            ),
            (InputKind::Granted, ev(&inputs.granted, ws::Event::Granted)),
            (InputKind::Denied, ev(&inputs.denied, ws::Event::Denied)),
            (InputKind::Ask, ev(&inputs.ask, ws::Event::Ask)),
            (InputKind::Answer, ev(&inputs.answer, ws::Event::Answer)),
        ];
        for (kind, list) in events {
            self.cross(kind, &list, &mut out, |s, items| {
                // Approvals of one list travel as one `approve` event, in order.
                let mut merged: Vec<ws::Event> = Vec::with_capacity(items.len());
                for item in items {
                    match (item, merged.last_mut()) {
                        (ws::Event::Approve(v), Some(ws::Event::Approve(run))) => run.extend(v),
                        _ => merged.push(item.clone()),
                    }
                }
                s.on_events(&merged)
            });
        }
        // Each kind of end in a crossing of its own, in the order the component applies them.
        let ends_of =
            |ok: Vec<u64>, failed: Vec<u64>, rate_limited: Vec<ws::RateLimited>| ws::Ends {
                ok,
                failed,
                rate_limited,
            };
        let ok: Vec<(u64, ws::Ends)> = (inputs.ok.iter())
            .map(|&e| (e, ends_of(vec![e], vec![], vec![])))
            .collect();
        let failed: Vec<(u64, ws::Ends)> = (inputs.failed.iter())
            .map(|&e| (e, ends_of(vec![], vec![e], vec![])))
            .collect();
        let retry: Vec<(u64, ws::Ends)> = (inputs.retry.iter())
            .map(|r| {
                let limited = ws::RateLimited {
                    entry: r.entry,
                    until: r.until,
                };
                (r.entry, ends_of(vec![], vec![], vec![limited]))
            })
            .collect();
        for (kind, list) in [
            (InputKind::Ok, ok),
            (InputKind::Failed, failed),
            (InputKind::Retry, retry),
        ] {
            self.cross(kind, &list, &mut out, |s, items| {
                // Merged into one crossing: ok, failed and rate-limited lists concatenated.
                let mut all = ends_of(vec![], vec![], vec![]);
                for e in items {
                    all.ok.extend(&e.ok);
                    all.failed.extend(&e.failed);
                    all.rate_limited.extend(e.rate_limited.iter().cloned());
                }
                s.on_ended(&all)
            });
        }
        let cancel: Vec<(u64, ws::Event)> = ev(&inputs.cancel, ws::Event::Cancel);
        self.cross(InputKind::Cancel, &cancel, &mut out, |s, items| {
            s.on_events(items)
        });
        for (i, p) in inputs.pause.iter().enumerate() {
            for r in self.on_events(&[ws::Event::Pause(p.clone())]) {
                assert_eq!(r.about, ws::About::Key(p.key.clone()), "{r:?}");
                out.errors.push(InputError {
                    input: InputKind::Pause,
                    index: i as u32,
                    code: r.code,
                    message: r.message,
                    about: r.about,
                });
            }
        }
        let releases = self.next_releases(inputs.now);
        // Within each list, (batch, written) order: entry (or batch) numbers ascend.
        let ascending = |v: &[u64], what: &str| {
            assert!(
                v.windows(2).all(|w| w[0] < w[1]),
                "{what} out of (batch, written) order: {v:?}"
            );
        };
        let v: Vec<u64> = releases.abort.iter().map(|a| a.entry).collect();
        ascending(&v, "abort");
        let v: Vec<u64> = releases.release.iter().map(|p| p.entry).collect();
        ascending(&v, "release");
        let v: Vec<u64> = releases.settled.iter().map(|s| s.entry).collect();
        ascending(&v, "settled");
        let v: Vec<u64> = releases.acquire.iter().map(|p| p.entry).collect();
        ascending(&v, "acquire");
        ascending(&releases.start, "start");
        ascending(&releases.retired, "retired");
        if let Some(r) = &releases.refused {
            out.errors.insert(
                0,
                InputError {
                    input: InputKind::Now,
                    index: 0,
                    code: r.code,
                    message: r.message.clone(),
                    about: r.about.clone(),
                },
            );
        }
        out.abort = releases.abort.iter().map(|a| (a.entry, a.cause)).collect();
        out.release = releases.release.iter().map(|p| p.entry).collect();
        out.settle = releases.settled.clone();
        out.acquire = releases.acquire.iter().map(|p| p.entry).collect();
        out.start = releases.start.clone();
        out.retired = releases.retired.clone();
        out.pause_store = releases.pause_store.clone();
        out.wake_at = releases.wake_at;
        out
    }

    /// Sends one list of inputs and files its refusals under `kind` by position.
    fn cross<T: Clone>(
        &mut self,
        kind: InputKind,
        list: &[(u64, T)],
        out: &mut Outputs,
        send: impl Fn(&mut Self, &[T]) -> Vec<ws::Refusal>,
    ) {
        let mut seen = std::collections::HashSet::new();
        let distinct = list.iter().all(|(n, _)| seen.insert(*n));
        let mut file = |index: usize, r: ws::Refusal| {
            out.errors.push(InputError {
                input: kind,
                index: index as u32,
                code: r.code,
                message: r.message,
                about: r.about,
            });
        };
        if distinct {
            let items: Vec<T> = list.iter().map(|(_, t)| t.clone()).collect();
            let mut at = 0;
            for r in send(self, &items) {
                let i = (at..list.len())
                    .find(|&i| about_of(kind, list[i].0) == r.about)
                    .unwrap_or_else(|| panic!("a refusal about no input of the list: {r:?}"));
                at = i + 1;
                file(i, r);
            }
        } else {
            for (i, (n, t)) in list.iter().enumerate() {
                for r in send(self, std::slice::from_ref(t)) {
                    assert_eq!(r.about, about_of(kind, *n), "{r:?}");
                    file(i, r);
                }
            }
        }
    }

    pub(crate) fn approve(&mut self, entries: &[u64]) -> Outputs {
        self.step(&Inputs {
            approve: entries.to_vec(),
            ..none()
        })
    }

    pub(crate) fn ok(&mut self, entries: &[u64]) -> Outputs {
        self.step(&Inputs {
            ok: entries.to_vec(),
            ..none()
        })
    }

    pub(crate) fn label(&mut self, entry: u64) -> Option<String> {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        iface
            .call_label(&mut self.inst.store, self.s, entry)
            .unwrap_or_else(|e| panic!("label trapped: {e:#}"))
    }

    pub(crate) fn inspect(&mut self, batch: u64) -> Option<Vec<ws::EntryStatus>> {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        host_harness::inspect(&iface, &mut self.inst.store, self.s, batch)
            .unwrap_or_else(|e| panic!("inspect trapped: {e:#}"))
    }

    /// `inspect` rendered as `LABEL STATE` lines.
    pub(crate) fn states(&mut self, batch: u64) -> Option<Vec<String>> {
        let statuses = self.inspect(batch)?;
        Some(
            statuses
                .iter()
                .map(|st| format!("{} {}", st.label, state_name(&st.state)))
                .collect(),
        )
    }

    pub(crate) fn unfinished(&mut self) -> ws::SavedState {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        host_harness::unfinished(&iface, &mut self.inst.store, self.s)
            .unwrap_or_else(|e| panic!("unfinished trapped: {e:#}"))
            .unwrap_or_else(|e| panic!("unfinished failed: {}", e.message))
    }

    /// `resume` under `policy`; on success the new scheduler replaces `self.s` (the old one is
    /// kept alive, so a test can compare).
    pub(crate) fn resume(
        &mut self,
        policy: ResourceAny,
        state: &ws::SavedState,
        started: ws::Started,
    ) -> Result<Vec<ws::Unrestored>, ws::ResumeErrorCode> {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        let r = iface
            .call_resume(&mut self.inst.store, policy, state, started)
            .unwrap_or_else(|e| panic!("resume trapped: {e:#}"));
        match r {
            Ok((s, unrestored)) => {
                self.s = s;
                Ok(unrestored)
            }
            Err(e) => {
                assert!(!e.message.is_empty(), "an error without a message: {e:?}");
                Err(e.code)
            }
        }
    }
}
