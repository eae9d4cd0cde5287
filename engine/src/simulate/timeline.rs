//! The virtual clock: one scheduler, every entry approved at time 0, each execution ending
//! when its duration has passed, and one line per event.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::Error;
use super::calls::Written;
use super::case::{Batch, Timing};
use crate::config::Policy;
use crate::fx::FxHashMap;
use crate::schedule::{
    AbortCause, BatchId, Call, End, EntryId, Input, Limits, Releases, Scheduler,
};

struct Running {
    entry: EntryId,
    ends_at_ms: u64,
    seq: u64,
}

/// One scheduler on a virtual clock, and the timeline so far.
pub(super) struct Timeline {
    sched: Scheduler,
    out: String,
    now_ms: u64,
    /// Entry to (label, `TOOL key K`, `TOOL keys A + B` or `TOOL unkeyed`), read after submit.
    entries: FxHashMap<u64, (String, String)>,
    /// Every label, in entry order.
    labels: Vec<String>,
}

impl Timeline {
    pub(super) fn new(policy: Policy) -> Self {
        Self {
            sched: Scheduler::new(policy),
            out: format!("{:>6}  {:<7} {:<10} detail\n", "t(ms)", "event", "entry"),
            now_ms: 0,
            entries: FxHashMap::default(),
            labels: Vec::new(),
        }
    }

    fn event(&mut self, event: &str, entry: &str, detail: &str) {
        let _ = writeln!(
            self.out,
            "{:>6}  {event:<7} {entry:<10} {detail}",
            self.now_ms
        );
    }

    fn label(&self, entry: EntryId) -> String {
        self.entries
            .get(&entry.0)
            .map_or_else(|| format!("#{}", entry.0), |(l, _)| l.clone())
    }

    /// Submits the `n`-th batch (from 1); its number and entries.
    pub(super) fn submit(
        &mut self,
        n: usize,
        batch: &Batch,
        calls: &[Written],
    ) -> Result<(BatchId, Vec<EntryId>), Error> {
        let engine_calls: Vec<Call<'_>> = calls
            .iter()
            .map(|c| Call {
                id: &c.id,
                tool: &c.tool,
                operations: c.operations,
                arguments: c.arguments.as_deref(),
            })
            .collect();
        let limits = Limits {
            execution_ms: batch.execution_ms,
            abort_grace_ms: batch.abort_grace_ms,
        };
        let submitted = self
            .sched
            .submit_batch_with(&engine_calls, limits)
            .map_err(|e| Error::Input(format!("batch {n}: {}", e.message)))?;
        let detail = match calls.len() {
            1 => "1 call".to_owned(),
            n => format!("{n} calls"),
        };
        self.event("submit", &format!("batch {}", submitted.batch.0), &detail);
        for st in self.sched.inspect(submitted.batch).unwrap_or_default() {
            let key = match st.keys.as_slice() {
                [] => format!("{} unkeyed", st.tool),
                [k] => format!("{} key {k}", st.tool),
                keys => format!("{} keys {}", st.tool, keys.join(" + ")),
            };
            self.labels.push(st.label.clone());
            self.entries.insert(st.entry.0, (st.label, key));
        }
        let first = submitted.first.0;
        let entries = (first..first + u64::from(submitted.count))
            .map(EntryId)
            .collect();
        Ok((submitted.batch, entries))
    }

    /// Every label `fail` and `durations` name is an entry's.
    pub(super) fn check_labels(&self, timing: &Timing) -> Result<(), Error> {
        let named = timing.fail.iter().map(|l| ("fail", "--fail", l));
        let durations = timing.durations.keys();
        let named = named.chain(durations.map(|l| ("durations", "--duration", l)));
        for (field, flag, label) in named {
            if !self.labels.contains(label) {
                let shown: Vec<&str> = self.labels.iter().take(20).map(String::as_str).collect();
                let more = if self.labels.len() > 20 { ", ..." } else { "" };
                return Err(Error::Input(format!(
                    "no entry is labelled {label} (named by {flag} or the file's {field}); the \
                     labels are {}{more}",
                    shown.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Approves `approve` at time 0, then ends executions as their durations pass and wakes
    /// the scheduler when it asked to be, until nothing runs; the timeline.
    pub(super) fn run(
        mut self,
        mut batches: Vec<BatchId>,
        approve: Vec<EntryId>,
        timing: &Timing,
    ) -> Result<String, Error> {
        let duration_ms = |label: &str| {
            timing
                .durations
                .get(label)
                .copied()
                .or(timing.duration_ms)
                .unwrap_or(10)
        };
        let mut running: Vec<Running> = Vec::new();
        let mut seq = 0u64;
        let mut shown: BTreeMap<String, String> = BTreeMap::new();
        let mut ended: Vec<(EntryId, End)> = Vec::new();
        let mut round = Releases::default();
        let mut first = true;
        loop {
            let mut refused = Vec::new();
            refused.extend(self.sched.observe_clock(self.now_ms).err());
            if first {
                first = false;
                for &e in &approve {
                    refused.extend(self.sched.on_event(Input::Approve(e)).err());
                }
            }
            for (e, end) in ended.drain(..) {
                refused.extend(self.sched.on_ended(e, end).err());
            }
            self.sched.next_releases(Some(self.now_ms), &mut round);
            refused.extend(round.refused.take());
            for a in &round.abort {
                // A simulated execution stops at once when told to: it ends failed now.
                running.retain(|r| r.entry != a.entry);
                ended.push((a.entry, End::Failed));
                let label = self.label(a.entry);
                let cause = match a.cause {
                    AbortCause::Deadline => "its execution limit passed; it ended failed",
                    AbortCause::Cancel => "its batch was cancelled; it ended failed",
                };
                self.event("abort", &label, cause);
            }
            // The policy has no shared key here (`Policy::into_one_process`), so no permit is
            // asked for, given back or paused at a store.
            if let Some(p) = round.acquire.first() {
                let why = format!("a permit was asked for {} with no store (a bug)", p.key);
                return Err(Error::Input(why));
            }
            for st in &round.settled {
                let label = self.label(st.entry);
                self.event("settle", &label, &st.message);
            }
            for &e in &round.start {
                let label = self.label(e);
                let key = self.entries.get(&e.0).map_or("", |(_, k)| k.as_str());
                let key = key.to_owned();
                self.event("start", &label, &key);
                running.push(Running {
                    entry: e,
                    ends_at_ms: self.now_ms.saturating_add(duration_ms(&label)),
                    seq,
                });
                seq += 1;
            }
            batches.retain(|x| !round.retired.contains(x));
            if let Some(r) = refused.first() {
                let why = format!("the scheduler refused an input: {}", r.message);
                return Err(Error::Input(why));
            }
            self.show_waits(&batches, &mut shown);
            if !ended.is_empty() {
                continue;
            }
            let next = running
                .iter()
                .enumerate()
                .min_by_key(|(_, r)| (r.ends_at_ms, r.seq))
                .map(|(i, r)| (i, r.ends_at_ms));
            // Something waits on time (a key's delay) and nothing ends before it: wake then.
            if let Some(wake) = round
                .wake_at
                .filter(|&w| next.is_none_or(|(_, end)| w < end))
            {
                self.now_ms = wake.max(self.now_ms);
                continue;
            }
            let Some((next, _)) = next else {
                break;
            };
            let done = running.swap_remove(next);
            self.now_ms = done.ends_at_ms;
            let label = self.label(done.entry);
            let failed = timing.fail.contains(&label);
            ended.push((done.entry, if failed { End::Failed } else { End::Ok }));
            self.event("end", &label, if failed { "failed" } else { "ok" });
        }
        self.event("done", "", "every entry ended or settled");
        Ok(self.out)
    }

    /// A `wait` line for each waiting entry of the live batches whose reason changed.
    fn show_waits(&mut self, batches: &[BatchId], shown: &mut BTreeMap<String, String>) {
        for &b in batches {
            for st in self.sched.inspect(b).unwrap_or_default() {
                let Some(why) = st.why.as_deref() else {
                    continue;
                };
                let why = why.strip_prefix("waiting: ").unwrap_or(why);
                if shown.get(&st.label).is_some_and(|w| w == why) {
                    continue;
                }
                shown.insert(st.label.clone(), why.to_owned());
                self.event("wait", &st.label, why);
            }
        }
    }
}
