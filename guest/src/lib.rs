//! The Turnstile component: `generate!`, `export!`, and resources that hold engine values.
//! Every conversion is in [`convert`]; every decision is the engine's. Nothing here panics on
//! host input: a panic would trap and poison the instance for every caller.
#![allow(unsafe_code)] // the bindings wit-bindgen generates use `unsafe` for the canonical ABI

mod convert;

use std::cell::RefCell;

use turnstile_engine::admission::Admission;
use turnstile_engine::config::{self as engine_config, Policy};
use turnstile_engine::schedule::{BatchId, EntryId, Outcome, Scheduler};

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
}

impl wit_scheduler::GuestScheduler for SchedulerResource {
    fn new(policy: wit_scheduler::PolicyBorrow<'_>) -> Self {
        let policy = policy.get::<PolicyResource>().policy.clone();
        Self {
            inner: RefCell::new(Scheduler::new(policy)),
        }
    }

    fn resume(
        policy: wit_scheduler::PolicyBorrow<'_>,
        state: Vec<wit_scheduler::UnfinishedBatch>,
    ) -> Result<wit_scheduler::Scheduler, wit_scheduler::Error> {
        let policy = policy.get::<PolicyResource>().policy.clone();
        let state: Vec<_> = state
            .into_iter()
            .map(|b| {
                (
                    BatchId(b.batch),
                    b.calls
                        .into_iter()
                        .map(convert::call_in)
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let scheduler = Scheduler::resume(policy, &state).map_err(convert::error)?;
        Ok(wit_scheduler::Scheduler::new(Self {
            inner: RefCell::new(scheduler),
        }))
    }

    fn submit_batch(&self, calls: Vec<wit_scheduler::Call>) -> Result<u32, wit_scheduler::Error> {
        let calls: Vec<_> = calls.into_iter().map(convert::call_in).collect();
        self.inner
            .borrow_mut()
            .submit_batch(&calls)
            .map(|b| b.0)
            .map_err(convert::error)
    }

    fn submit_packed(
        &self,
        ids: String,
        tools: String,
        operations: Vec<u32>,
    ) -> Result<u32, wit_scheduler::Error> {
        self.inner
            .borrow_mut()
            .submit_packed(&ids, &tools, &operations)
            .map(|b| b.0)
            .map_err(convert::error)
    }

    fn approve(&self, entry: String) -> Result<(), wit_scheduler::Error> {
        self.inner
            .borrow_mut()
            .approve(&entry)
            .map_err(convert::error)
    }

    fn approve_many(&self, entries: Vec<String>) -> Result<(), wit_scheduler::Error> {
        self.inner
            .borrow_mut()
            .approve_many(&entries)
            .map_err(convert::error)
    }

    fn on_ended_many(&self, ends: Vec<wit_scheduler::Ended>) -> Result<(), wit_scheduler::Error> {
        let ends: Vec<(String, _)> = ends
            .into_iter()
            .map(|e| (e.entry, convert::outcome(e.outcome)))
            .collect();
        self.inner
            .borrow_mut()
            .on_ended_many(&ends)
            .map_err(convert::error)
    }

    fn settle(
        &self,
        entry: String,
        how: wit_scheduler::HostSettle,
    ) -> Result<(), wit_scheduler::Error> {
        self.inner
            .borrow_mut()
            .settle(&entry, convert::host_settle(how))
            .map_err(convert::error)
    }

    fn begin_question(&self, entry: String) -> Result<(), wit_scheduler::Error> {
        self.inner
            .borrow_mut()
            .begin_question(&entry)
            .map_err(convert::error)
    }

    fn end_question(&self, entry: String) -> Result<(), wit_scheduler::Error> {
        self.inner
            .borrow_mut()
            .end_question(&entry)
            .map_err(convert::error)
    }

    fn on_ended(
        &self,
        entry: String,
        outcome: wit_scheduler::Outcome,
    ) -> Result<(), wit_scheduler::Error> {
        self.inner
            .borrow_mut()
            .on_ended(&entry, convert::outcome(outcome))
            .map_err(convert::error)
    }

    fn cancel_batch(&self, batch: u32) -> Result<(), wit_scheduler::Error> {
        self.inner
            .borrow_mut()
            .cancel_batch(BatchId(batch))
            .map_err(convert::error)
    }

    fn next_releases(&self) -> wit_scheduler::Releases {
        let mut scheduler = self.inner.borrow_mut();
        let releases = scheduler.next_releases();
        convert::releases(&scheduler, releases)
    }

    fn batch_entries(&self, batch: u32) -> Result<wit_scheduler::EntryRange, wit_scheduler::Error> {
        let (first, count) = self
            .inner
            .borrow()
            .batch_entries(BatchId(batch))
            .map_err(convert::error)?;
        Ok(wit_scheduler::EntryRange {
            first: first.0,
            count,
        })
    }

    fn approve_ids(&self, entries: Vec<u32>) -> Result<(), wit_scheduler::Error> {
        let ids: Vec<EntryId> = entries.into_iter().map(EntryId).collect();
        self.inner
            .borrow_mut()
            .approve_ids(&ids)
            .map_err(convert::error)
    }

    fn on_ended_ids(&self, ok: Vec<u32>, failed: Vec<u32>) -> Result<(), wit_scheduler::Error> {
        let ends: Vec<(EntryId, Outcome)> = ok
            .into_iter()
            .map(|e| (EntryId(e), Outcome::Ok))
            .chain(failed.into_iter().map(|e| (EntryId(e), Outcome::Failed)))
            .collect();
        self.inner
            .borrow_mut()
            .on_ended_ids(&ends)
            .map_err(convert::error)
    }

    fn approve_next(
        &self,
        entries: Vec<u32>,
    ) -> Result<wit_scheduler::ReleaseIds, wit_scheduler::Error> {
        self.approve_ids(entries)?;
        Ok(self.next_release_ids())
    }

    fn on_ended_next(
        &self,
        ok: Vec<u32>,
        failed: Vec<u32>,
    ) -> Result<wit_scheduler::ReleaseIds, wit_scheduler::Error> {
        self.on_ended_ids(ok, failed)?;
        Ok(self.next_release_ids())
    }

    fn next_release_ids(&self) -> wit_scheduler::ReleaseIds {
        let releases = self.inner.borrow_mut().next_releases();
        wit_scheduler::ReleaseIds {
            start: releases.start.into_iter().map(|e| e.0).collect(),
            settle: releases
                .settle
                .into_iter()
                .map(|(e, why)| wit_scheduler::SettledId {
                    entry: e.0,
                    reason: convert::reason(why),
                })
                .collect(),
        }
    }

    fn label(&self, entry: u32) -> Result<String, wit_scheduler::Error> {
        let scheduler = self.inner.borrow();
        match scheduler.state(EntryId(entry)) {
            Some(_) => Ok(scheduler.label(EntryId(entry))),
            None => Err(convert::error(
                turnstile_engine::schedule::Error::unknown_entry_id(entry),
            )),
        }
    }

    fn inspect(&self, batch: u32) -> Result<Vec<wit_scheduler::EntryStatus>, wit_scheduler::Error> {
        let statuses = self
            .inner
            .borrow()
            .inspect(BatchId(batch))
            .map_err(convert::error)?;
        Ok(statuses.into_iter().map(convert::entry_status).collect())
    }

    fn unfinished(&self) -> Vec<wit_scheduler::UnfinishedBatch> {
        self.inner
            .borrow()
            .unfinished()
            .into_iter()
            .map(|(batch, calls)| wit_scheduler::UnfinishedBatch {
                batch: batch.0,
                calls: calls.into_iter().map(convert::call_out).collect(),
            })
            .collect()
    }
}

impl wit_admission::Guest for Component {
    type Admission = AdmissionResource;
}

impl wit_admission::GuestAdmission for AdmissionResource {
    fn new(config: wit_admission::AdmissionConfig) -> Self {
        Self {
            inner: RefCell::new(Admission::new(convert::admission_config(config))),
        }
    }

    fn begin(
        &self,
        id: String,
        class: wit_admission::Class,
        parent: Option<String>,
    ) -> Result<(), wit_admission::Error> {
        self.inner
            .borrow_mut()
            .begin(&id, convert::class(class), parent.as_deref())
            .map_err(convert::admission_error)
    }

    fn end(&self, id: String) -> Result<(), wit_admission::Error> {
        self.inner
            .borrow_mut()
            .end(&id)
            .map_err(convert::admission_error)
    }

    fn abandon(&self, id: String) -> Result<(), wit_admission::Error> {
        self.inner
            .borrow_mut()
            .abandon(&id)
            .map_err(convert::admission_error)
    }

    fn shutdown(&self) -> wit_admission::ShutdownReport {
        let report = self.inner.borrow_mut().shutdown();
        wit_admission::ShutdownReport {
            cancel: report.cancel,
            refused: report.refused,
        }
    }

    fn next_admissions(&self) -> Vec<String> {
        self.inner.borrow_mut().next_admissions()
    }

    fn in_flight(&self) -> u32 {
        self.inner.borrow().in_flight()
    }
}

// Exported only for wasm: the export names break the native linker (TOOLCHAIN.md gotcha 3).
#[cfg(target_arch = "wasm32")]
export!(Component);
