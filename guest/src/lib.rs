//! The Turnstile component: `generate!`, `export!`, and resources that hold engine values.
//! Every conversion is in [`convert`]; every decision is the engine's. Nothing here panics on
//! host input: a panic would trap and poison the instance for every caller.
#![allow(unsafe_code)] // the bindings wit-bindgen generates use `unsafe` for the canonical ABI

mod convert;
mod shared;
mod simulate;

use std::cell::{Cell, RefCell};

use turnstile_engine::admission::{Admission, Ticket};
use turnstile_engine::config::{self as engine_config, Policy};
use turnstile_engine::schedule::{BatchId, End, EntryId, Releases, SavedState, Scheduler};

wit_bindgen::generate!({ path: "../wit", world: "turnstile" });

use exports::turnstile::scheduler::admission as wit_admission;
use exports::turnstile::scheduler::config as wit_config;
use exports::turnstile::scheduler::scheduler as wit_scheduler;

/// The component.
pub struct Component;

/// The `policy` resource.
pub struct PolicyResource {
    policy: Policy,
}

/// The `scheduler` resource.
pub struct SchedulerResource {
    inner: RefCell<Scheduler>,
    /// The output `next-releases` reuses, so that a round allocates only what crosses the
    /// boundary.
    out: RefCell<Releases>,
    /// How much of `out` has crossed, while a round crosses in parts.
    sent: Cell<Option<convert::Sent>>,
    /// The parts of the export `unfinished(0)` took, until the scheduler changes.
    export: RefCell<Option<Vec<SavedState>>>,
}

impl SchedulerResource {
    fn wrap(scheduler: Scheduler) -> Self {
        Self {
            inner: RefCell::new(scheduler),
            out: RefCell::new(Releases::default()),
            sent: Cell::new(None),
            export: RefCell::new(None),
        }
    }

    /// The scheduler is about to change: an export's later parts would not be of one state.
    fn changing(&self) -> std::cell::RefMut<'_, Scheduler> {
        self.export.borrow_mut().take();
        if let Some(mut sent) = self.sent.get() {
            sent.changed = true; // the round's last part wakes the host at once
            self.sent.set(Some(sent));
        }
        self.inner.borrow_mut()
    }
}

/// The `admission` resource.
pub struct AdmissionResource {
    inner: RefCell<Admission>,
}

impl wit_config::Guest for Component {
    type Policy = PolicyResource;
}

impl wit_config::GuestPolicy for PolicyResource {
    fn resolve(
        layers: Vec<wit_config::Layer>,
    ) -> Result<wit_config::Policy, Vec<wit_config::Diagnostic>> {
        let layers: Vec<engine_config::Layer> = layers
            .into_iter()
            .map(|l| engine_config::Layer {
                name: l.name,
                text: l.text,
            })
            .collect();
        match engine_config::resolve(&layers) {
            Ok(policy) => Ok(wit_config::Policy::new(Self { policy })),
            Err(diags) => Err(diags.into_iter().map(convert::diagnostic).collect()),
        }
    }

    fn tool(&self, name: String) -> wit_config::ToolPolicy {
        match self.policy.tool(&name) {
            Some(tool) => convert::tool_policy(tool),
            None => convert::tool_policy(&engine_config::ToolPolicy::unconfigured(&name)),
        }
    }

    fn warnings(&self) -> Vec<wit_config::Diagnostic> {
        self.policy
            .warnings()
            .iter()
            .cloned()
            .map(convert::diagnostic)
            .collect()
    }

    fn fingerprint(&self) -> u64 {
        turnstile_engine::schedule::fingerprint(&self.policy)
    }

    fn tools(&self) -> Vec<wit_config::ToolPolicy> {
        self.policy
            .tools()
            .iter()
            .map(convert::tool_policy)
            .collect()
    }
}

impl wit_scheduler::Guest for Component {
    type Scheduler = SchedulerResource;

    fn explain(label: String, reason: wit_scheduler::Reason) -> String {
        turnstile_engine::schedule::explain::settled_sentence(convert::reason_in(reason), &label)
    }

    fn retry_after(
        header: String,
        wall_now_ms: u64,
    ) -> Result<u64, wit_scheduler::RetryAfterError> {
        turnstile_engine::retry_after::retry_after(&header, wall_now_ms)
            .map_err(convert::retry_after_error)
    }
}

impl wit_scheduler::GuestScheduler for SchedulerResource {
    fn new(policy: wit_scheduler::PolicyBorrow<'_>) -> Self {
        let policy = policy.get::<PolicyResource>().policy.clone();
        Self::wrap(Scheduler::new(policy))
    }

    fn resume(
        policy: wit_scheduler::PolicyBorrow<'_>,
        state: wit_scheduler::SavedState,
        started: wit_scheduler::Started,
    ) -> Result<
        (wit_scheduler::Scheduler, Vec<wit_scheduler::Unrestored>),
        wit_scheduler::ResumeError,
    > {
        let policy = policy.get::<PolicyResource>().policy.clone();
        let state = convert::saved_state_in(state);
        let (scheduler, unrestored) = Scheduler::resume(policy, &state, convert::started(started))
            .map_err(convert::resume_error)?;
        Ok((
            wit_scheduler::Scheduler::new(Self::wrap(scheduler)),
            unrestored.into_iter().map(convert::unrestored).collect(),
        ))
    }

    fn submit_batch(
        &self,
        calls: wit_scheduler::Batch,
        limits: wit_scheduler::Limits,
    ) -> Result<wit_scheduler::Submitted, wit_scheduler::SubmitError> {
        let calls = turnstile_engine::schedule::unpack(
            &calls.ids,
            &calls.tools,
            calls.fan_outs.iter().map(|f| (f.call, f.operations)),
            calls.arguments.iter().map(|a| (a.call, a.json.as_str())),
        )
        .map_err(convert::submit_error)?;
        self.changing()
            .submit_batch_with(&calls, convert::limits_in(limits))
            .map(|s| wit_scheduler::Submitted {
                batch: s.batch.0,
                first: s.first.0,
                count: s.count,
            })
            .map_err(convert::submit_error)
    }

    fn on_ended(&self, ends: wit_scheduler::Ends, now: Option<u64>) -> Vec<wit_scheduler::Refusal> {
        let mut sched = self.changing();
        let clock = now.and_then(|now| sched.observe_clock(now).err());
        let ok = ends.ok.iter().map(|&e| (e, End::Ok));
        let failed = ends.failed.iter().map(|&e| (e, End::Failed));
        let limited = ends
            .rate_limited
            .iter()
            .map(|r| (r.entry, End::RateLimited(r.until)));
        clock
            .into_iter()
            .chain(
                ok.chain(failed)
                    .chain(limited)
                    .filter_map(|(e, end)| sched.on_ended(EntryId(e), end).err()),
            )
            .map(convert::refusal)
            .collect()
    }

    fn on_events(
        &self,
        events: Vec<wit_scheduler::Event>,
        now: Option<u64>,
    ) -> Vec<wit_scheduler::Refusal> {
        let mut sched = self.changing();
        let mut refused: Vec<_> = now
            .and_then(|now| sched.observe_clock(now).err())
            .into_iter()
            .collect();
        for event in &events {
            convert::for_each_input(event, |input| refused.extend(sched.on_event(input).err()));
        }
        refused.into_iter().map(convert::refusal).collect()
    }

    fn next_releases(&self, now: Option<u64>) -> wit_scheduler::Releases {
        let mut out = self.out.borrow_mut();
        let mut sent = match self.sent.take() {
            // The rest of a round that crosses in parts; this call's `now` is not read.
            Some(sent) => sent,
            None => {
                self.changing().next_releases(now, &mut out);
                convert::Sent::default()
            }
        };
        let part = convert::releases_part(&out, &mut sent, self.inner.borrow().now());
        if part.more {
            self.sent.set(Some(sent));
        }
        part
    }

    fn label(&self, entry: u64) -> Option<String> {
        self.inner.borrow().label(EntryId(entry))
    }

    fn inspect(&self, batch: u64, offset: u32) -> Option<Vec<wit_scheduler::EntryStatus>> {
        let statuses = self.inner.borrow().inspect_part(
            BatchId(batch),
            offset as usize,
            convert::INSPECT_PART_MAX,
        )?;
        Some(statuses.into_iter().map(convert::entry_status).collect())
    }

    fn unfinished(
        &self,
        part: u32,
    ) -> Result<wit_scheduler::SavedPart, wit_scheduler::UnfinishedError> {
        let mut export = self.export.borrow_mut();
        if part == 0 {
            *export = Some(self.inner.borrow().unfinished().into_parts());
        }
        let Some(parts) = export.as_ref() else {
            return Err(convert::unfinished_stale(part));
        };
        let state = parts
            .get(part as usize)
            .ok_or_else(|| convert::unfinished_out_of_range(part, parts.len()))?;
        Ok(wit_scheduler::SavedPart {
            state: convert::saved_state_out(state.clone()),
            parts: u32::try_from(parts.len()).unwrap_or(u32::MAX),
        })
    }
}

impl wit_admission::Guest for Component {
    type Admission = AdmissionResource;

    fn class_of_method(method: String) -> wit_admission::Class {
        convert::class_out(turnstile_engine::admission::class_of_method(&method))
    }
}

impl wit_admission::GuestAdmission for AdmissionResource {
    fn new(config: wit_admission::AdmissionConfig) -> Self {
        Self {
            inner: RefCell::new(Admission::with_tag(
                convert::admission_config(&config),
                config.tag,
            )),
        }
    }

    fn begin(
        &self,
        id: String,
        class: wit_admission::Class,
        parent: Option<u64>,
    ) -> Result<u64, wit_admission::Error> {
        self.inner
            .borrow_mut()
            .begin(&id, convert::class(class), parent.map(Ticket))
            .map(|t| t.0)
            .map_err(|e| convert::admission_error(convert::begin_code(e.code), e.message))
    }

    fn end(&self, ticket: u64) -> Result<(), wit_admission::Error> {
        self.inner
            .borrow_mut()
            .end(Ticket(ticket))
            .map_err(|e| convert::admission_error(convert::end_code(e.code), e.message))
    }

    fn abandon(&self, ticket: u64) -> Result<(), wit_admission::Error> {
        self.inner
            .borrow_mut()
            .abandon(Ticket(ticket))
            .map_err(|e| convert::admission_error(convert::abandon_code(e.code), e.message))
    }

    fn shutdown(&self) -> wit_admission::ShutdownReport {
        let report = self.inner.borrow_mut().shutdown();
        wit_admission::ShutdownReport {
            cancel: report.cancel.into_iter().map(|t| t.0).collect(),
            refused: report.refused.into_iter().map(|t| t.0).collect(),
        }
    }

    fn next_admissions(&self) -> Vec<u64> {
        self.inner
            .borrow_mut()
            .next_admissions()
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    fn in_flight(&self) -> u32 {
        self.inner.borrow().in_flight()
    }
}

// Exported only for wasm: the export names break the native linker (TOOLCHAIN.md gotcha 3).
#[cfg(target_arch = "wasm32")]
export!(Component);

/// The component's allocator: talc, which takes about 4 KB less than std's dlmalloc. It grows
/// linear memory with `memory.grow` when it runs out, like dlmalloc; a host's cap on memory
/// makes an allocation fail, which aborts the call as before (a trap the host sees).
#[cfg(target_arch = "wasm32")]
#[global_allocator]
// SAFETY: a component instance is single-threaded wasm, and nothing else manages its heap.
static ALLOCATOR: talc::TalckWasm = unsafe { talc::TalckWasm::new_global() };
