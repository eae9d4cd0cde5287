//! The workloads: which batches a drive submits, in both forms the two sides take (engine
//! `Call`s natively, the WIT's packed `batch` through the component), so the native engine and
//! the component always run the same inputs.

use host_harness::wit_scheduler as ws;
use turnstile_engine::config::{self, Layer, Policy};
use turnstile_engine::schedule::Call;

/// One batch, with its calls as owned strings and as the WIT's `submit-batch` takes them.
pub(crate) struct Batch {
    ids: Vec<String>,
    tools: Vec<String>,
    /// `0` for a plain call, `n` for a fan-out call of `n` operations.
    operations: Vec<u32>,
    /// Each call's arguments (JSON), for tools whose key is a template.
    arguments: Vec<Option<String>>,
    /// The same calls as the WIT's packed `batch`.
    pub(crate) wit_calls: ws::Batch,
}

impl Batch {
    fn new() -> Self {
        Self {
            ids: Vec::new(),
            tools: Vec::new(),
            operations: Vec::new(),
            arguments: Vec::new(),
            wit_calls: host_harness::pack([]),
        }
    }

    fn push(&mut self, id: String, tool: String, operations: u32) {
        self.ids.push(id);
        self.tools.push(tool);
        self.operations.push(operations);
        self.arguments.push(None);
    }

    fn pack(mut self) -> Self {
        let calls = self.calls();
        let wit =
            host_harness::pack((calls.iter()).map(|c| (c.id, c.tool, c.operations, c.arguments)));
        self.wit_calls = wit;
        self
    }

    /// The engine's form of this batch.
    pub(crate) fn calls(&self) -> Vec<Call<'_>> {
        self.ids
            .iter()
            .zip(&self.tools)
            .zip(&self.operations)
            .zip(&self.arguments)
            .map(|(((id, tool), &n), arguments)| Call {
                id,
                tool,
                operations: (n > 0).then_some(n),
                arguments: arguments.as_deref(),
            })
            .collect()
    }
}

/// `rounds` batches submitted one after the other, cycling through `patterns`; every batch is
/// approved at once and every execution ends `ok` in the step after the one that started it.
///
/// The policy: tool `t{k}` (plain) and `f{k}` (fans out) share key `k{k}` with limit
/// `1 + k % 4`.
pub(crate) struct Workload {
    /// Executions over the whole drive (plain calls plus operations).
    pub(crate) executions: usize,
    /// How many batches a drive submits.
    pub(crate) rounds: usize,
    pub(crate) policy_text: String,
    pub(crate) patterns: Vec<Batch>,
}

impl Workload {
    /// The workload: N executions over K keys, half plain calls and half fan-out calls
    /// of 8 operations, in batches of about 1,000 executions; every call id is new.
    pub(crate) fn large(executions: usize, keys: usize) -> Self {
        let mut patterns = Vec::new();
        let (mut made, mut id) = (0usize, 0usize);
        while made < executions {
            let mut batch = Batch::new();
            let mut in_batch = 0;
            while in_batch < 1000 && made < executions {
                let k = id % keys;
                let n = if id.is_multiple_of(2) || executions - made < 8 {
                    batch.push(format!("c{id}"), format!("t{k}"), 0);
                    1
                } else {
                    batch.push(format!("c{id}"), format!("f{k}"), 8);
                    8
                };
                made += n;
                in_batch += n;
                id += 1;
            }
            patterns.push(batch.pack());
        }
        Self {
            executions: made,
            rounds: patterns.len(),
            policy_text: policy_text(keys),
            patterns,
        }
    }

    /// Keys from arguments: plain calls of one tool whose key is `fs:{path}` (limit 1), in
    /// batches of 1,000, call `i` writing path `/p{i % keys}`: with more executions than
    /// keys, each expanded key is made, forgotten when idle, and made again.
    pub(crate) fn templated(executions: usize, keys: usize) -> Self {
        let mut patterns = Vec::new();
        let mut id = 0usize;
        while id < executions {
            let mut batch = Batch::new();
            while batch.ids.len() < 1000 && id < executions {
                batch.push(format!("c{id}"), "fs_write".to_owned(), 0);
                if let Some(a) = batch.arguments.last_mut() {
                    *a = Some(format!("{{\"path\":\"/p{}\"}}", id % keys));
                }
                id += 1;
            }
            patterns.push(batch.pack());
        }
        Self {
            executions: id,
            rounds: patterns.len(),
            policy_text: "[conversation.tools.fs_write]\n\
                          concurrency = { key = \"fs:{path}\", limit = 1 }\n"
                .to_owned(),
            patterns,
        }
    }

    /// Path keys: plain calls of one tool whose key is the tree `fs` with `path = "{path}"`, in
    /// batches of 1,000, call `i` writing `src/d{i % 10}/f{i % keys}.rs`: with more keys than
    /// calls per batch every path is apart and all start at once; with fewer, calls on one path
    /// wait behind each other, and each end walks the tree's queue.
    pub(crate) fn pathed(executions: usize, keys: usize) -> Self {
        let mut w = Self::templated(executions, keys);
        w.policy_text = "[conversation.tools.fs_write]\n\
                         concurrency = { key = \"fs\", path = \"{path}\" }\n"
            .to_owned();
        let mut id = 0usize;
        for pattern in &mut w.patterns {
            let mut batch = Batch::new();
            while batch.ids.len() < 1000 && id < executions {
                batch.push(format!("c{id}"), "fs_write".to_owned(), 0);
                if let Some(a) = batch.arguments.last_mut() {
                    *a = Some(format!(
                        "{{\"path\":\"src/d{}/f{}.rs\"}}",
                        id % 10,
                        id % keys
                    ));
                }
                id += 1;
            }
            *pattern = batch.pack();
        }
        w
    }

    /// What agent hosts do: batches of `CALLS_PER_SMALL_BATCH` plain calls named `call_0` ..
    /// `call_3` in every batch (ids are reused once a batch retires); batch b's call i uses key
    /// `(4b + i) % K`. At least `executions`, rounded up to whole batches.
    pub(crate) fn small(executions: usize, keys: usize) -> Self {
        let patterns = (0..keys)
            .map(|b| {
                let mut batch = Batch::new();
                for i in 0..CALLS_PER_SMALL_BATCH {
                    let k = (CALLS_PER_SMALL_BATCH * b + i) % keys;
                    batch.push(format!("call_{i}"), format!("t{k}"), 0);
                }
                batch.pack()
            })
            .collect();
        let rounds = executions.div_ceil(CALLS_PER_SMALL_BATCH).max(1);
        Self {
            executions: rounds * CALLS_PER_SMALL_BATCH,
            rounds,
            policy_text: policy_text(keys),
            patterns,
        }
    }

    /// The same drive with every key spacing its starts 1 ms apart (issue 12's `delay`).
    pub(crate) fn spaced(mut self) -> Self {
        self.policy_text = self.policy_text.replace(" }\n", ", delay = 1 }\n");
        self
    }

    /// The same drive with every key under two rate windows and a burst (issue 21): 4 per ms
    /// and 1,000 per second, a burst of 4, so the host steps at each wake-up.
    pub(crate) fn rated(mut self) -> Self {
        self.policy_text = self
            .policy_text
            .replace(" }\n", ", rate = [\"4/ms\", \"1000/s\"], burst = 4 }\n");
        self
    }

    /// The same drive with every key's limit adaptive (AIMD, ceiling the fixed limit): every
    /// execution ends `ok`, so this is the cost of counting clean ends.
    pub(crate) fn adaptive(mut self) -> Self {
        for limit in 1..=4 {
            self.policy_text = self.policy_text.replace(
                &format!("limit = {limit} }}"),
                &format!("limit = {{ max = {limit}, adapt = \"aimd\" }} }}"),
            );
        }
        self
    }

    /// The same drive with every tool taking a key set of `size` keys: its own key and the
    /// next `size - 1` (wrapping), each with that key's limit, so calls of neighbouring tools
    /// contend on the keys they share.
    pub(crate) fn sets(mut self, keys: usize, size: usize) -> Self {
        let mut text = String::new();
        for k in 0..keys {
            let members: Vec<String> = (0..size)
                .map(|i| {
                    let j = (k + i) % keys;
                    format!("{{ key = \"k{j}\", limit = {} }}", 1 + j % 4)
                })
                .collect();
            let set = members.join(", ");
            text.push_str(&format!(
                "[conversation.tools.t{k}]\nconcurrency = [{set}]\n\
                 [conversation.tools.f{k}]\nconcurrency = [{set}]\nfan_out = true\n"
            ));
        }
        self.policy_text = text;
        self
    }

    pub(crate) fn batch(&self, round: usize) -> &Batch {
        &self.patterns[round % self.patterns.len()]
    }

    pub(crate) fn policy(&self) -> Result<Policy, String> {
        config::resolve(&[Layer::new("bench", self.policy_text.clone())])
            .map_err(|d| format!("the bench policy has {} diagnostics", d.len()))
    }
}

/// Plain calls per batch in [`Workload::small`].
pub(crate) const CALLS_PER_SMALL_BATCH: usize = 4;

fn policy_text(keys: usize) -> String {
    let mut text = String::new();
    for k in 0..keys {
        let limit = 1 + k % 4;
        text.push_str(&format!(
            "[conversation.tools.t{k}]\nconcurrency = {{ key = \"k{k}\", limit = {limit} }}\n\
             [conversation.tools.f{k}]\nconcurrency = {{ key = \"k{k}\", limit = {limit} }}\n\
             fan_out = true\n"
        ));
    }
    text
}
