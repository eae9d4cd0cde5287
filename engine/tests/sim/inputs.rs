//! The random events of a round: calls to submit and a step's inputs, legal ones mixed with
//! host mistakes, `now`, rate limits and pauses.

use turnstile_engine::limits::OPERATIONS_PER_CALL_MAX;
use turnstile_engine::schedule::{HostSettle, Limits};

use crate::drive::Sim;
use crate::generate::{ARGUMENTS, KEY_POOL, MADE_KEYS, MAX_WAIT_MS};
use crate::model::{Ins, Model, St, SubCall, ix};

const CALL_IDS: [&str; 6] = ["c0", "c1", "c2", "c3", "c4", "c5"];

impl Sim {
    /// A batch's time limits: often none; an execution limit of a few host steps; an abort
    /// grace (0 included: given up in the round of its abort).
    pub(super) fn random_limits(&mut self) -> Limits {
        let execution_ms = self
            .rng
            .chance(self.w.deadline)
            .then(|| 1 + self.rng.below(80) as u32);
        let abort_grace_ms = self
            .rng
            .chance(self.w.deadline)
            .then(|| self.rng.below(40) as u32);
        Limits {
            execution_ms,
            abort_grace_ms,
        }
    }

    pub(super) fn random_calls(&mut self) -> Vec<SubCall> {
        if self.rng.chance(3) {
            return Vec::new();
        }
        let mut tools: Vec<String> = self
            .model
            .cfg
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect();
        tools.push("ghost".to_owned());
        let mut calls: Vec<SubCall> = Vec::new();
        for _ in 0..1 + self.rng.below(4) {
            let free: Vec<&str> = CALL_IDS
                .iter()
                .copied()
                .filter(|id| !self.model.live_call(id) && !calls.iter().any(|c| c.id == *id))
                .collect();
            let id = match self.rng.below(100) {
                0 => ["", "a#1", "x\ny"][self.rng.below(3)].to_owned(),
                1..=8 => CALL_IDS[self.rng.below(CALL_IDS.len())].to_owned(),
                _ => match self.rng.pick(&free) {
                    Some(id) => id.to_owned(),
                    None => CALL_IDS[self.rng.below(CALL_IDS.len())].to_owned(),
                },
            };
            let tool = if self.rng.chance(1) {
                String::new()
            } else {
                tools[self.rng.below(tools.len())].clone()
            };
            let fans = self.model.cfg.rules(&tool).fan_out;
            let ops = match self.rng.below(100) {
                0 => Some(0),
                1 => Some(OPERATIONS_PER_CALL_MAX + 1),
                2 | 3 => Some(1 + self.rng.below(3) as u32),
                _ if fans && self.rng.chance(70) => Some(1 + self.rng.below(3) as u32),
                _ => None,
            };
            // Arguments: for any tool (a plain one ignores them), mostly ones that make a key.
            let args = match self.rng.below(10) {
                0..=5 => self.rng.below(5),
                _ => self.rng.below(ARGUMENTS.len()),
            };
            calls.push(SubCall {
                id,
                tool,
                ops,
                args,
            });
        }
        calls
    }

    /// A number no live entry has: retired, never handed out, or absurd.
    fn unknown_entry(&mut self) -> u64 {
        let next = self.model.next_entry();
        let retired: Vec<u64> = (1..next).filter(|&n| !self.model.is_live(n)).collect();
        match self.rng.below(5) {
            0 | 1 if !retired.is_empty() => retired[self.rng.below(retired.len())],
            2 => u64::MAX,
            3 => 0,
            _ => next + self.rng.below(3) as u64,
        }
    }

    /// A host mistake: an unknown number, or a live entry in any state.
    pub(super) fn mistaken_entry(&mut self) -> u64 {
        let live: Vec<u64> = self.model.live_entries().collect();
        match self.rng.pick(&live) {
            Some(n) if self.rng.chance(60) => n,
            _ => self.unknown_entry(),
        }
    }

    pub(super) fn random_inputs(&mut self) -> Ins {
        let live: Vec<u64> = self.model.live_entries().collect();
        let with = |m: &Model, f: fn(St) -> bool| -> Vec<u64> {
            live.iter().copied().filter(|&n| f(m.st(n))).collect()
        };
        let pending = with(&self.model, |s| s == St::Pending);
        let running = with(&self.model, St::started);
        let asking = with(&self.model, |s| s == St::Asking);
        let acquiring = with(&self.model, |s| s == St::Acquiring);
        let mut ins = Ins::default();
        // Approvals: a whole batch's pending entries, or a few.
        if let Some(n) = self.rng.pick(&pending) {
            if self.rng.chance(self.w.whole_batch) {
                let b = self.model.entries[ix(n)].batch;
                ins.approve.extend(
                    pending
                        .iter()
                        .filter(|&&m| self.model.entries[ix(m)].batch == b),
                );
            } else {
                for _ in 0..1 + self.rng.below(3) {
                    ins.approve.extend(self.rng.pick(&pending));
                }
            }
        }
        if self.rng.chance(self.w.settle) {
            for _ in 0..1 + self.rng.below(2) {
                let how = [
                    HostSettle::Rejected,
                    HostSettle::Skipped,
                    HostSettle::Failed,
                ][self.rng.below(3)];
                if let Some(n) = self.rng.pick(&pending) {
                    ins.settle.push((n, how));
                }
            }
        }
        // The store's answers: grants in any order (a later entry's first sometimes), and
        // now and then a refusal.
        for _ in 0..self.rng.below(3) {
            if let Some(n) = self.rng.pick(&acquiring) {
                if self.rng.chance(10) {
                    ins.denied.push(n);
                } else {
                    ins.granted.push(n);
                }
            }
        }
        if self.rng.chance(self.w.ask) {
            ins.ask.extend(self.rng.pick(&running));
        }
        if self.rng.chance(50) {
            ins.answer.extend(self.rng.pick(&asking));
        }
        for _ in 0..self.rng.below(4) {
            if let Some(n) = self.rng.pick(&running) {
                if self.rng.chance(self.w.fail) {
                    ins.failed.push(n);
                } else {
                    ins.ok.push(n);
                }
            }
        }
        if self.rng.chance(self.w.cancel) {
            let live_batches: Vec<u64> = self.model.live().map(|b| b as u64 + 1).collect();
            ins.cancel.extend(self.rng.pick(&live_batches));
        }
        self.add_time(&mut ins, &running);
        self.add_mistakes(&mut ins, &running);
        ins
    }

    /// `now` (mostly forward, sometimes to the last `wake_at`, sometimes back), rate limits of
    /// running entries, and pauses of keys (some unknown).
    fn add_time(&mut self, ins: &mut Ins, running: &[u64]) {
        if self.rng.chance(self.w.clock) {
            let clock = self.model.time.now;
            ins.now = Some(if clock > 0 && self.rng.chance(self.w.backwards) {
                clock - 1 - self.rng.below(clock.min(30) as usize) as u64
            } else {
                match self.out.wake_at {
                    Some(t) if self.rng.chance(self.w.jump) => {
                        self.host_now = self.host_now.max(t + self.rng.below(3) as u64);
                    }
                    _ => self.host_now += [0, 1, 5, 20, 60][self.rng.below(5)],
                }
                self.host_now
            });
        }
        let base = ins.now.unwrap_or(self.host_now).max(self.model.time.now);
        if self.rng.chance(self.w.retry) {
            for _ in 0..1 + self.rng.below(2) {
                if let Some(n) = self.rng.pick(running) {
                    let max_wait = self.model.rule(n).map_or(MAX_WAIT_MS, |k| k.max_wait);
                    let until = match self.rng.below(6) {
                        0 => base.saturating_sub(self.rng.below(10) as u64),
                        1 => base,
                        // Rarely, a wait at the maximum, just past it, or absurd (year 9999).
                        _ if self.rng.chance(4) => match self.rng.below(3) {
                            0 => base + max_wait,
                            1 => base + max_wait + 1,
                            _ => u64::MAX,
                        },
                        _ => base + 1 + self.rng.below(80) as u64,
                    };
                    ins.retry.push((n, until));
                }
            }
        }
        if self.rng.chance(self.w.pause) {
            let tools = self.model.cfg.tools.len();
            let known: Vec<String> = KEY_POOL
                .iter()
                .map(|k| (*k).to_owned())
                .chain((0..tools).map(|t| format!("t{t}")))
                .filter(|k| self.model.cfg.knows_key(k))
                .collect();
            let key = match self.rng.below(7) {
                0 => "zz".to_owned(),
                1 => format!("t{}", self.rng.below(tools)),
                2 => KEY_POOL[self.rng.below(KEY_POOL.len())].to_owned(),
                3 => MADE_KEYS[self.rng.below(MADE_KEYS.len())].to_owned(),
                _ => match self.rng.below(known.len().max(1)) {
                    i if i < known.len() => known[i].clone(),
                    _ => "zz".to_owned(),
                },
            };
            let until = match self.rng.below(4) {
                0 => base.saturating_sub(self.rng.below(10) as u64),
                _ => base + self.rng.below(100) as u64,
            };
            ins.pause.push((key, until));
        }
    }

    /// Host mistakes mixed in: unknown and stale numbers, double decisions, ends of entries not
    /// running, ask and answer misuse, cancelling twice.
    fn add_mistakes(&mut self, ins: &mut Ins, running: &[u64]) {
        while self.rng.chance(self.w.mistake) {
            let n = self.mistaken_entry();
            match self.rng.below(10) {
                8 => ins
                    .retry
                    .push((n, self.host_now + self.rng.below(50) as u64)),
                9 => {
                    // A rate limit twice in one step: the second finds it not running.
                    if let Some(m) = self.rng.pick(running) {
                        ins.retry.push((m, self.host_now + 10));
                        ins.retry.push((m, self.host_now + 20));
                    }
                }
                0 if self.rng.chance(50) => ins.approve.push(n),
                0 => {
                    // A grant or refusal of an entry that asked for no permit (or twice).
                    ins.granted.push(n);
                    if self.rng.chance(30) {
                        ins.denied.push(n);
                    }
                }
                1 => ins.settle.push((n, HostSettle::Skipped)),
                2 => ins.ask.push(n),
                3 => ins.answer.push(n),
                4 => ins.ok.push(n),
                5 => ins.failed.push(n),
                6 => {
                    // The same input twice, or an end in both lists.
                    if let Some(&m) = ins.approve.first() {
                        ins.settle.push((m, HostSettle::Rejected));
                    }
                    if let Some(m) = self.rng.pick(running) {
                        ins.ok.push(m);
                        ins.failed.push(m);
                    }
                }
                _ => {
                    let next = self.model.next_batch();
                    let b = match self.rng.below(4) {
                        0 => 0,
                        1 => next + self.rng.below(2) as u64,
                        _ => 1 + self.rng.below(next as usize) as u64,
                    };
                    ins.cancel.push(b);
                    if self.rng.chance(30) {
                        ins.cancel.push(b);
                    }
                }
            }
        }
        self.rng.shuffle(&mut ins.approve);
        self.rng.shuffle(&mut ins.ok);
        self.rng.shuffle(&mut ins.cancel);
        self.rng.shuffle(&mut ins.retry);
    }
}
