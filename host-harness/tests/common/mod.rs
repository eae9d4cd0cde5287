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

/// Inputs with every list empty.
pub(crate) fn none() -> ws::Inputs {
    host_harness::no_inputs()
}

/// A step's refused inputs as (list, index, code); messages are for people.
pub(crate) fn errors(out: &ws::Outputs) -> Vec<(ws::InputKind, u32, ws::InputErrorCode)> {
    out.errors
        .iter()
        .map(|e| (e.input, e.index, e.code))
        .collect()
}

/// A step's settled entries as (entry, reason).
pub(crate) fn settled(out: &ws::Outputs) -> Vec<(u64, ws::Reason)> {
    out.settle.iter().map(|s| (s.entry, s.reason)).collect()
}

/// Asserts a step's four lists exactly.
#[track_caller]
pub(crate) fn assert_out(
    out: &ws::Outputs,
    start: &[u64],
    settle: &[(u64, ws::Reason)],
    errs: &[(ws::InputKind, u32, ws::InputErrorCode)],
    retired: &[u64],
) {
    assert_eq!(out.start, start, "start of {out:?}");
    assert_eq!(settled(out), settle, "settle of {out:?}");
    assert_eq!(errors(out), errs, "errors of {out:?}");
    assert_eq!(out.retired, retired, "retired of {out:?}");
    for e in &out.errors {
        assert!(!e.message.is_empty(), "an error without a message: {e:?}");
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
    };
    match state {
        ws::State::Pending => "pending".to_owned(),
        ws::State::Approved => "approved".to_owned(),
        ws::State::Acquiring => "acquiring".to_owned(),
        ws::State::Granted => "granted".to_owned(),
        ws::State::Running => "running".to_owned(),
        ws::State::Asking => "asking".to_owned(),
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

    /// `submit` with calls' arguments, as (batch, first, count), or the error's code.
    pub(crate) fn submit_with(
        &mut self,
        ids: &str,
        tools: &str,
        operations: &[u32],
        arguments: &[(u32, String)],
    ) -> Result<(u64, u64, u32), ws::SubmitErrorCode> {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        let r = iface
            .call_submit(
                &mut self.inst.store,
                self.s,
                ids,
                tools,
                operations,
                arguments,
            )
            .unwrap_or_else(|e| panic!("submit trapped: {e:#}"));
        match r {
            Ok(b) => Ok((b.batch, b.first, b.count)),
            Err(e) => {
                assert!(!e.message.is_empty(), "an error without a message: {e:?}");
                Err(e.code)
            }
        }
    }

    pub(crate) fn step(&mut self, inputs: &ws::Inputs) -> ws::Outputs {
        let iface = self
            .inst
            .exports
            .turnstile_scheduler_scheduler()
            .scheduler();
        iface
            .call_step(&mut self.inst.store, self.s, inputs)
            .unwrap_or_else(|e| panic!("step trapped: {e:#}"))
    }

    pub(crate) fn approve(&mut self, entries: &[u64]) -> ws::Outputs {
        self.step(&ws::Inputs {
            approve: entries.to_vec(),
            ..none()
        })
    }

    pub(crate) fn ok(&mut self, entries: &[u64]) -> ws::Outputs {
        self.step(&ws::Inputs {
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
        iface
            .call_inspect(&mut self.inst.store, self.s, batch)
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
        iface
            .call_unfinished(&mut self.inst.store, self.s)
            .unwrap_or_else(|e| panic!("unfinished trapped: {e:#}"))
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
