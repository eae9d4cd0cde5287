// The async driver with real timers: concurrency, order within a key, a key shared across
// tools, cancellation mid-batch, executions that throw, and independent instances.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError, Turnstile, TurnstileError, runBatch } from '../dist/index.js';

const CONFIG = `
[conversation.tools.rfd_draft]
concurrency = { key = "rfd" }
[conversation.tools.rfd_renumber]
concurrency = { key = "rfd" }
[conversation.tools.github_issues]
concurrency = { key = "github", limit = 2 }
[conversation.tools.github_pulls]
concurrency = { key = "github", limit = 2 }
[conversation.tools.fs_delete_file]
concurrency = 1
fan_out = { on_error = "stop" }
[conversation.tools.read]
fan_out = true
`;

async function setup() {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'test', text: CONFIG }]);
  return { t, policy, sched: t.scheduler(policy) };
}

/** An execute that records start order and peak concurrency per key, sleeping `ms(entry)`. */
function recorder(ms = () => 5, keyOf = () => 'all') {
  const log = { starts: [], peak: {}, now: {} };
  const execute = async ({ entry, call }) => {
    const key = keyOf(call.tool);
    log.starts.push(entry);
    log.now[key] = (log.now[key] ?? 0) + 1;
    log.peak[key] = Math.max(log.peak[key] ?? 0, log.now[key]);
    await sleep(ms(entry));
    log.now[key] -= 1;
    return `${entry} done`;
  };
  return { log, execute };
}

test('unkeyed calls run concurrently', async () => {
  const { sched } = await setup();
  const { log, execute } = recorder(() => 30);
  const calls = [1, 2, 3, 4].map((i) => ({ id: `r${i}`, tool: 'read' }));
  const outcomes = await runBatch(sched, calls, execute);
  assert.equal(log.peak.all, 4);
  assert.deepEqual(outcomes.map((o) => o.entries[0].status), ['ok', 'ok', 'ok', 'ok']);
  assert.equal(outcomes[2].entries[0].value, 'r3 done');
});

test('a key runs one at a time in written order, whatever the durations', async () => {
  const { sched } = await setup();
  const durations = { n1: 25, n2: 1, n3: 15, d1: 1, d2: 10 };
  const { log, execute } = recorder((e) => durations[e]);
  const calls = [
    { id: 'n1', tool: 'rfd_renumber' },
    { id: 'n2', tool: 'rfd_renumber' },
    { id: 'n3', tool: 'rfd_renumber' },
    { id: 'd1', tool: 'rfd_draft' },
    { id: 'd2', tool: 'rfd_draft' },
  ];
  const outcomes = await runBatch(sched, calls, execute);
  assert.deepEqual(log.starts, ['n1', 'n2', 'n3', 'd1', 'd2']);
  assert.equal(log.peak.all, 1);
  assert.deepEqual(outcomes.map((o) => o.id), ['n1', 'n2', 'n3', 'd1', 'd2']);
});

test('a key shared by two tools caps them together and keeps their order', async () => {
  const { sched } = await setup();
  const { log, execute } = recorder((e) => (e.endsWith('1') ? 20 : 5));
  const calls = ['i1', 'p1', 'i2', 'p2', 'i3', 'p3'].map((id) => ({ id, tool: id.startsWith('i') ? 'github_issues' : 'github_pulls' }));
  await runBatch(sched, calls, execute);
  assert.equal(log.peak.all, 2);
  assert.deepEqual(log.starts.slice(0, 2), ['i1', 'p1']);
  assert.deepEqual([...log.starts].sort(), ['i1', 'i2', 'i3', 'p1', 'p2', 'p3']);
  // Written order within the key: each starts after every earlier one started.
  assert.deepEqual(log.starts, ['i1', 'p1', 'i2', 'p2', 'i3', 'p3']);
});

test('cancelling mid-batch settles parked calls; the running one finishes and is marked', async () => {
  const { sched } = await setup();
  const controller = new AbortController();
  const seen = [];
  const execute = async ({ entry, signal }) => {
    seen.push(entry);
    setTimeout(() => controller.abort(), 5);
    await sleep(20);
    return signal.aborted ? 'stopped early' : 'done';
  };
  const calls = ['n1', 'n2', 'n3'].map((id) => ({ id, tool: 'rfd_renumber' }));
  const outcomes = await runBatch(sched, calls, execute, { signal: controller.signal });
  assert.deepEqual(seen, ['n1']);
  assert.deepEqual(outcomes[0].entries[0], { entry: 'n1', status: 'ok', value: 'stopped early', cancelled: true });
  assert.deepEqual(outcomes.slice(1).map((o) => o.entries[0]), [
    { entry: 'n2', status: 'settled', reason: { tag: 'cancelled' } },
    { entry: 'n3', status: 'settled', reason: { tag: 'cancelled' } },
  ]);
});

test('an execute that throws is a failure: the slot frees, and stop stops the operations behind it', async () => {
  const { sched } = await setup();
  const calls = [{ id: 'd', tool: 'fs_delete_file', operations: 3 }, { id: 'e', tool: 'fs_delete_file' }, { id: 'f', tool: 'rfd_draft' }];
  const outcomes = await runBatch(sched, calls, async ({ entry }) => {
    if (entry === 'd#0') throw new Error('disk full');
    if (entry === 'f') {
      // A synchronous throw from a non-async execute is a failure too.
      return (() => {
        throw new TypeError('bad');
      })();
    }
    return 'ok';
  });
  const [d, e, f] = outcomes;
  assert.equal(d.entries[0].status, 'failed');
  assert.equal(d.entries[0].error.message, 'disk full');
  assert.deepEqual(d.entries.slice(1).map((x) => x.reason), [{ tag: 'stopped', val: 1 }, { tag: 'stopped', val: 1 }]);
  assert.equal(e.entries[0].status, 'ok');
  assert.equal(f.entries[0].status, 'failed');
});

test('rejected calls settle and do not block; questions keep the slot', async () => {
  const { sched } = await setup();
  const order = [];
  const outcomes = await runBatch(
    sched,
    ['n1', 'n2', 'n3'].map((id) => ({ id, tool: 'rfd_renumber' })),
    async (x) => {
      order.push(`start ${x.entry}`);
      if (x.entry === 'n2') {
        const answer = await x.question(async () => {
          await sleep(10);
          return 42;
        });
        order.push(`answer ${answer}`);
      }
      order.push(`end ${x.entry}`);
    },
    { decide: async (entry) => (entry === 'n1' ? 'reject' : 'approve') },
  );
  assert.deepEqual(outcomes[0].entries[0], { entry: 'n1', status: 'settled', reason: { tag: 'rejected' } });
  assert.deepEqual(order, ['start n2', 'answer 42', 'end n2', 'start n3', 'end n3']);
});

test('two batches on one scheduler share their keys', async () => {
  const { sched } = await setup();
  const { log, execute } = recorder(() => 5);
  const [a, b] = await Promise.all([
    runBatch(sched, [{ id: 'a1', tool: 'rfd_draft' }, { id: 'a2', tool: 'rfd_draft' }], execute),
    runBatch(sched, [{ id: 'b1', tool: 'rfd_renumber' }], execute),
  ]);
  assert.equal(log.peak.all, 1);
  assert.deepEqual(log.starts, ['a1', 'a2', 'b1']);
  assert.equal(a.length + b.length, 3);
});

test('independent instances share nothing', async () => {
  const one = await setup();
  const two = await setup();
  one.sched.submitBatch([{ id: 'x', tool: 'rfd_draft' }]);
  assert.equal(two.sched.submitBatch([{ id: 'x', tool: 'rfd_draft' }]), 1);
  assert.throws(() => one.sched.submitBatch([{ id: 'x', tool: 'rfd_draft' }]), (e) => e instanceof TurnstileError && e.code === 'duplicate-id');
});

test('bad config throws ConfigError with typed diagnostics and rendered text', async () => {
  const t = await Turnstile.load();
  assert.throws(
    () => t.resolve([{ name: 'bad.toml', text: '[conversation.tools.t]\nconcurrency = "2"\n' }]),
    (e) => e instanceof ConfigError && e.diagnostics[0].code === 'concurrency-type' && e.diagnostics[0].labels[0].span.line === 2 && e.message.includes('bad.toml:2'),
  );
});

test('hostile strings from JS (lone surrogates, NUL, huge) never trap the instance', async () => {
  const { t, sched } = await setup();
  const hostile = ['\ud800', '\udfff#0', '\u0000', 'x'.repeat(1 << 20), '#', ''];
  for (const s of hostile) {
    for (const f of [() => sched.approve(s), () => sched.onEnded(s, 'ok'), () => sched.submitBatch([{ id: s, tool: s }])]) {
      try {
        f();
      } catch (e) {
        assert.ok(e instanceof TurnstileError, `${e}`);
      }
    }
    assert.throws(() => t.resolve([{ name: s, text: '[' + s + '\ud800' }]), (e) => e instanceof ConfigError);
  }
  assert.equal(typeof sched.submitBatch([{ id: 'after', tool: 'read' }]), 'number');
});
