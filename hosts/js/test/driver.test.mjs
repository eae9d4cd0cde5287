// The async driver on a virtual clock (no real sleeps): concurrency, order within a key, a key shared across
// tools, cancellation mid-batch, executions that throw, questions, decisions, batches sharing a
// scheduler, a refused input that fails only its own batch, and bounded state over many batches.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { VirtualClock } from './fixtures/virtual-clock.mjs';
import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import { RefusedInputError, Scheduler, SubmitError, Turnstile, runBatch } from '../dist/index.js';
// The class behind `runBatch`, for the tests that look at its state or wrap its scheduler.
import { Driver } from '../dist/index.js';

/** An outcome without its entry number (compared by label). */
const strip = ({ entry, ...rest }) => {
  assert.equal(typeof entry, 'bigint');
  return rest;
};

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

/** The test's virtual clock: its scheduler's driver (`runBatch` finds it) and `sleep` use it. */
let clock = new VirtualClock();
const sleep = (ms, signal) => clock.sleep(ms, signal);
/** Runs the clock until nothing is left to do, then gives what `promise` settled with. */
async function settle(promise) {
  await clock.runAll();
  return promise;
}

async function setup() {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'test', text: CONFIG }]);
  clock = new VirtualClock();
  const sched = new Scheduler(policy);
  new Driver(sched, { clock });
  return { t, policy, sched };
}

/** An execute that records start order and peak concurrency per key, sleeping `ms(label)`. */
function recorder(ms = () => 5, keyOf = () => 'all') {
  const log = { starts: [], peak: {}, now: {} };
  const execute = async ({ label, call }) => {
    const key = keyOf(call.tool);
    log.starts.push(label);
    log.now[key] = (log.now[key] ?? 0) + 1;
    log.peak[key] = Math.max(log.peak[key] ?? 0, log.now[key]);
    await sleep(ms(label));
    log.now[key] -= 1;
    return `${label} done`;
  };
  return { log, execute };
}

test('unkeyed calls run concurrently', async () => {
  const { sched } = await setup();
  const { log, execute } = recorder(() => 30);
  const calls = [1, 2, 3, 4].map((i) => ({ id: `r${i}`, tool: 'read' }));
  const outcomes = await settle(runBatch(sched, calls, execute));
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
  const outcomes = await settle(runBatch(sched, calls, execute));
  assert.deepEqual(log.starts, ['n1', 'n2', 'n3', 'd1', 'd2']);
  assert.equal(log.peak.all, 1);
  assert.deepEqual(outcomes.map((o) => o.id), ['n1', 'n2', 'n3', 'd1', 'd2']);
});

test('a key shared by two tools caps them together and keeps their order', async () => {
  const { sched } = await setup();
  const { log, execute } = recorder((e) => (e.endsWith('1') ? 20 : 5));
  const calls = ['i1', 'p1', 'i2', 'p2', 'i3', 'p3'].map((id) => ({ id, tool: id.startsWith('i') ? 'github_issues' : 'github_pulls' }));
  await settle(runBatch(sched, calls, execute));
  assert.equal(log.peak.all, 2);
  // Written order within the key: each starts after every earlier one started.
  assert.deepEqual(log.starts, ['i1', 'p1', 'i2', 'p2', 'i3', 'p3']);
});

test('cancelling mid-batch settles parked calls; the running one finishes and is marked', async () => {
  const { sched } = await setup();
  const controller = new AbortController();
  const seen = [];
  const execute = async ({ label, signal }) => {
    seen.push(label);
    clock.setTimer(clock.now() + 5, () => controller.abort());
    await sleep(20);
    return signal.aborted ? 'stopped early' : 'done';
  };
  const calls = ['n1', 'n2', 'n3'].map((id) => ({ id, tool: 'rfd_renumber' }));
  const outcomes = await settle(runBatch(sched, calls, execute, { signal: controller.signal }));
  assert.deepEqual(seen, ['n1']);
  assert.deepEqual(strip(outcomes[0].entries[0]), { label: 'n1', status: 'cancelled', value: 'stopped early' });
  assert.deepEqual(outcomes.slice(1).map((o) => strip(o.entries[0])), [
    { label: 'n2', status: 'settled', reason: { kind: 'cancelled' }, message: 'not run: the batch was cancelled' },
    { label: 'n3', status: 'settled', reason: { kind: 'cancelled' }, message: 'not run: the batch was cancelled' },
  ]);
});

test('a signal aborted before the run settles everything without running it', async () => {
  const { sched } = await setup();
  const outcomes = await runBatch(sched, [{ id: 'a', tool: 'read' }], async () => assert.fail('must not run'), { signal: AbortSignal.abort() });
  assert.deepEqual(outcomes[0].entries.map(strip), [{ label: 'a', status: 'settled', reason: { kind: 'cancelled' }, message: 'not run: the batch was cancelled' }]);
});

test('an execute that throws is a failure: the slot frees, and stop stops the operations behind it', async () => {
  const { sched } = await setup();
  const calls = [{ id: 'd', tool: 'fs_delete_file', operations: 3 }, { id: 'e', tool: 'fs_delete_file' }, { id: 'f', tool: 'rfd_draft' }];
  const outcomes = await runBatch(sched, calls, ({ label }) => {
    if (label === 'd#0') return Promise.reject(new Error('disk full'));
    // A synchronous throw from a non-async execute is a failure too.
    if (label === 'f') throw new TypeError('bad');
    return Promise.resolve('ok');
  });
  const [d, e, f] = outcomes;
  assert.equal(d.entries[0].status, 'failed');
  assert.equal(d.entries[0].error.message, 'disk full');
  assert.deepEqual(d.entries.slice(1).map((x) => [x.label, x.reason]), [['d#1', { kind: 'stopped', after: 1 }], ['d#2', { kind: 'stopped', after: 1 }]]);
  // The text names the operation it was stopped after, by its label.
  assert.equal(d.entries[1].message, "not run: stopped after d#0 failed (this tool stops a call's operations at the first failure)");
  assert.equal(d.entries[1].message, sched.explain('d#1', { kind: 'stopped', after: 1 }));
  assert.equal(e.entries[0].status, 'ok');
  assert.equal(f.entries[0].status, 'failed');
});

test('rejected calls settle and do not block; questions keep the slot, one after another', async () => {
  const { sched } = await setup();
  const order = [];
  const outcomes = await settle(runBatch(
    sched,
    ['n1', 'n2', 'n3'].map((id) => ({ id, tool: 'rfd_renumber' })),
    async (x) => {
      order.push(`start ${x.label}`);
      if (x.label === 'n2') {
        const one = await x.question(async () => {
          await sleep(10);
          return 42;
        });
        // A second question at once: its ask must not overtake the first one's answer.
        const two = await x.question(async () => 43);
        order.push(`answers ${one} ${two}`);
      }
      order.push(`end ${x.label}`);
    },
    { decide: async (label) => (label === 'n1' ? 'reject' : 'approve') },
  ));
  assert.deepEqual(strip(outcomes[0].entries[0]), { label: 'n1', status: 'settled', reason: { kind: 'rejected' }, message: 'not run: the user rejected this call' });
  assert.deepEqual(order, ['start n2', 'answers 42 43', 'end n2', 'start n3', 'end n3']);
});

test('two batches on one scheduler share their keys, in submission order', async () => {
  const { sched } = await setup();
  const { log, execute } = recorder(() => 5);
  const [a, b] = await settle(Promise.all([
    runBatch(sched, [{ id: 'a1', tool: 'rfd_draft' }, { id: 'a2', tool: 'rfd_draft' }], execute),
    runBatch(sched, [{ id: 'b1', tool: 'rfd_renumber' }], execute),
  ]));
  assert.equal(log.peak.all, 1);
  assert.deepEqual(log.starts, ['a1', 'a2', 'b1']);
  assert.equal(a.length + b.length, 3);
});

test('a live batch\'s call ids cannot be reused; a retired batch\'s can', async () => {
  const { sched } = await setup();
  let release;
  const gate = new Promise((r) => (release = r));
  const first = runBatch(sched, [{ id: 'x', tool: 'read' }], () => gate);
  await assert.rejects(runBatch(sched, [{ id: 'x', tool: 'read' }], async () => {}), (e) => e instanceof SubmitError && e.code === 'duplicate-id');
  release('done');
  await first;
  const again = await runBatch(sched, [{ id: 'x', tool: 'read' }], async () => 'again');
  assert.equal(again[0].entries[0].value, 'again');
});

test('an illegal end for batch A, sent in the same step as batch B\'s end, fails only A; B\'s key of limit 1 goes on', async () => {
  const { sched } = await setup();
  let a = null;
  let b = null;
  let injected = 0;
  // A scheduler whose step corrupts batch A's end the first time it travels with one of B's: a
  // stand-in for any driver mistake. Each input is judged on its own, so B's end still applies.
  const faulty = new Proxy(sched, {
    get(target, name) {
      if (name === 'submit') {
        return (calls) => {
          const submitted = target.submit(calls);
          if (calls[0].id === 'a1') a = submitted;
          if (calls[0].id === 'b1') b = submitted;
          return submitted;
        };
      }
      if (name === 'stepRaw') {
        return (inputs) => {
          const ok = inputs.ok ?? [];
          const at = [...ok].findIndex((e) => a?.locate(e));
          if (at >= 0 && [...ok].some((e) => b?.locate(e)) && !injected) {
            injected += 1;
            ok[at] = 2n ** 64n - 1n;
          }
          return target.stepRaw(inputs);
        };
      }
      const value = Reflect.get(target, name);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  const driver = new Driver(faulty);
  const starts = [];
  const execute = async ({ label }) => {
    starts.push(label);
    return label;
  };
  const runA = driver.run([{ id: 'a1', tool: 'read' }, { id: 'a2', tool: 'github_issues' }], execute);
  const runB = driver.run(['b1', 'b2', 'b3'].map((id) => ({ id, tool: 'rfd_renumber' })), execute);
  const refusedA = await runA.then(
    () => assert.fail('batch A must fail'),
    (e) => e,
  );
  assert.equal(injected, 1);
  assert.ok(refusedA instanceof RefusedInputError, `${refusedA}`);
  assert.equal(refusedA.code, 'unknown-entry');
  assert.equal(refusedA.input, 'ok');
  const outcomesB = await runB;
  assert.deepEqual(outcomesB.map((o) => [o.id, o.entries[0].status]), [['b1', 'ok'], ['b2', 'ok'], ['b3', 'ok']]);
  assert.deepEqual(starts.filter((s) => s.startsWith('b')), ['b1', 'b2', 'b3']);
});

test('a question asked after its execution ended is refused to the asker; other batches go on', async () => {
  const { sched } = await setup();
  let late;
  const runA = runBatch(sched, [{ id: 'a1', tool: 'read' }, { id: 'a2', tool: 'rfd_draft' }, { id: 'a3', tool: 'rfd_draft' }], async (x) => {
    if (x.label === 'a1') late = x;
    if (x.label === 'a2') {
      // A misbehaving tool: asks on behalf of an execution that already ended.
      await sleep(5);
      await late.question(async () => 'too late');
    }
    return x.label;
  });
  const runB = runBatch(sched, [{ id: 'b1', tool: 'rfd_renumber' }, { id: 'b2', tool: 'rfd_renumber' }], async (x) => {
    await sleep(5);
    return x.label;
  });
  // The question is closed: asking rejects in the caller (here a2, which fails with it).
  const outcomesA = await settle(runA);
  assert.equal(outcomesA[1].entries[0].status, 'failed');
  assert.equal(outcomesA[1].entries[0].error.code, 'not-running');
  assert.deepEqual(outcomesA.map((o) => o.entries[0].status), ['ok', 'failed', 'ok']);
  const outcomesB = await runB;
  assert.deepEqual(outcomesB.map((o) => o.entries[0].status), ['ok', 'ok']);
});

test('a decide that throws fails its batch and frees its key for later batches', async () => {
  const { sched } = await setup();
  const runA = runBatch(sched, [{ id: 'a1', tool: 'rfd_draft' }, { id: 'a2', tool: 'rfd_draft' }], async () => 'a', {
    decide: (label) => {
      if (label === 'a2') throw new Error('prompt closed');
      return 'approve';
    },
  });
  const runB = runBatch(sched, [{ id: 'b1', tool: 'rfd_draft' }], async () => 'b');
  await assert.rejects(runA, /prompt closed/);
  assert.deepEqual(strip((await runB)[0].entries[0]), { label: 'b1', status: 'ok', value: 'b' });
});

test('20,000 sequential batches reusing the same call ids: state is dropped as batches retire', async () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc');
  // The component's linear memory, caught as jco instantiates its core modules.
  const memories = [];
  const instantiate = WebAssembly.instantiate;
  WebAssembly.instantiate = async (...args) => {
    const result = await instantiate(...args);
    for (const value of Object.values((result.instance ?? result).exports)) if (value instanceof WebAssembly.Memory) memories.push(value);
    return result;
  };
  let sched;
  try {
    ({ sched } = await setup());
  } finally {
    WebAssembly.instantiate = instantiate;
  }
  assert.equal(memories.length, 1);
  const wasmBytes = () => memories[0].buffer.byteLength;
  const driver = Driver.of(sched);
  const calls = [
    { id: 'call_0', tool: 'rfd_draft' },
    { id: 'call_1', tool: 'rfd_renumber' },
    { id: 'call_2', tool: 'read', operations: 2 },
    { id: 'call_3', tool: 'github_issues' },
  ];
  const execute = async ({ label }) => label;
  let heapAt2000 = 0;
  let wasmAt2000 = 0;
  let first = null;
  for (let i = 0; i < 20_000; i++) {
    const outcomes = await driver.run(calls, execute);
    if (outcomes.length !== 4 || outcomes[2].entries.length !== 2) assert.fail(`batch ${i}: ${JSON.stringify(outcomes)}`);
    if (driver.liveBatches !== 0) assert.fail(`batch ${i}: ${driver.liveBatches} batches still tracked`);
    if (i === 0) first = sched.unfinished();
    if (i === 1999) {
      gc();
      heapAt2000 = process.memoryUsage().heapUsed;
      wasmAt2000 = wasmBytes();
    }
  }
  gc();
  const growth = process.memoryUsage().heapUsed - heapAt2000;
  const state = sched.unfinished();
  assert.deepEqual(state.batches, []);
  assert.ok(state.nextEntry >= first.nextEntry + 19_999n * 5n);
  assert.ok(growth < 1_000_000, `JS heap grew ${growth} bytes over 18,000 batches`);
  // A wasm memory never shrinks, so any growth would stay: there must be none.
  assert.equal(wasmBytes(), wasmAt2000, 'the component\'s memory grew');
});

test('the README example: execute destructures question (bound to its execution), a question keeps the slot', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'readme', text: CONFIG }]);
  const driver = new Driver(new Scheduler(policy));
  const outcomes = await driver.run(
    [{ id: 'a', tool: 'rfd_draft' }],
    async ({ label, signal, question }) => {
      const ok = await question(async () => true);
      return ok ? `${label} done ${signal.aborted}` : 'declined';
    },
    { decide: async () => 'approve' },
  );
  assert.equal(outcomes[0].entries[0].status, 'ok');
  assert.equal(outcomes[0].entries[0].value, 'a done false');
  driver.dispose();
});
