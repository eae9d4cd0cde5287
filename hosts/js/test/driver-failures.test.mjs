// The driver's failure paths: decide that throws, rejects or returns nonsense; execute that throws
// synchronously or returns a plain value; questions left open; abort listeners; cancel then
// abort; disposal; executions that ignore their signal (visible in inspect, bounded by
// abortGraceMs) or run too long (executionTimeoutMs); resume through the driver.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { VirtualClock } from './fixtures/virtual-clock.mjs';
import { DisposedError, Driver, Scheduler, Turnstile, runBatch } from '../dist/index.js';

const CONFIG = `
[conversation.tools.k]
concurrency = 1
[conversation.tools.two]
concurrency = { key = "two", limit = 2 }
[conversation.tools.f]
fan_out = true
[conversation.tools.free]
`;

/** The test's virtual clock, moving on its own whenever nothing else can run (no real sleep):
 * the driver's clock and `sleep`'s. */
let clock = new VirtualClock();
let stopClock = clock.auto();
const sleep = (ms, _value, options) => clock.sleep(ms, options?.signal);

async function setup() {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'test', text: CONFIG }]);
  stopClock();
  clock = new VirtualClock();
  stopClock = clock.auto();
  const sched = new Scheduler(policy);
  return { t, policy, sched, driver: new Driver(sched, { clock }) };
}

/** Nothing left: no live batch in the driver, no batch in the scheduler. */
function assertDrained(driver) {
  assert.deepEqual(driver.inspect(), []);
  assert.equal(driver.liveBatches, 0);
  assert.deepEqual(driver.scheduler.unfinished().batches, []);
}

const calls = (...ids) => ids.map((id) => ({ id, tool: 'k' }));

for (const [name, decide, check] of [
  ['throws', (label) => { if (label === 'a2') throw new Error('prompt closed'); return 'approve'; }, /prompt closed/],
  ['rejects', async (label) => { if (label === 'a2') throw new Error('prompt closed'); return 'approve'; }, /prompt closed/],
  ['returns an unknown decision', (label) => (label === 'a2' ? 'maybe' : 'approve'), (e) => e instanceof RangeError && e.message.includes('"a2"') && e.message.includes('maybe')],
  ['returns nothing', () => undefined, (e) => e instanceof TypeError && e.message.includes('decide')],
  ['resolves to a number', async () => 1, TypeError],
]) {
  test(`a decide that ${name} rejects its batch, runs none of it, and frees its key`, { timeout: 10_000 }, async () => {
    const { driver } = await setup();
    const ran = [];
    const execute = async ({ label }) => ran.push(label);
    const a = driver.run(calls('a1', 'a2', 'a3'), execute, { decide });
    const b = driver.run(calls('b1'), execute);
    await assert.rejects(a, check);
    assert.deepEqual((await b).map((o) => o.entries[0].status), ['ok']);
    assert.deepEqual(ran, ['b1']);
    assertDrained(driver);
    // The ids are free again.
    await driver.run(calls('a1', 'a2', 'a3'), execute);
  });
}

test('a decide failure in one batch leaves a concurrent batch on the same key untouched', { timeout: 10_000 }, async () => {
  const { driver } = await setup();
  const order = [];
  const slow = async ({ label }) => {
    order.push(label);
    await sleep(5);
    return label;
  };
  const first = driver.run(calls('x1', 'x2'), slow);
  const bad = driver.run(calls('y1', 'y2'), slow, { decide: async (label) => { await sleep(2); if (label === 'y2') throw new Error('no'); return 'approve'; } });
  const last = driver.run(calls('z1'), slow);
  await assert.rejects(bad, /no/);
  assert.deepEqual((await first).map((o) => o.entries[0].value), ['x1', 'x2']);
  assert.deepEqual((await last).map((o) => o.entries[0].value), ['z1']);
  assert.deepEqual(order, ['x1', 'x2', 'z1']);
  assertDrained(driver);
});

test('execute: a synchronous throw or a non-promise result fails the entry, a thenable is awaited', { timeout: 10_000 }, async () => {
  const { driver } = await setup();
  const out = await driver.run([{ id: 's', tool: 'free' }, { id: 'v', tool: 'free' }, { id: 't', tool: 'free' }, { id: 'r', tool: 'free' }, { id: 'u', tool: 'free' }], ({ label }) => {
    if (label === 's') throw new TypeError('sync');
    if (label === 'v') return 42;
    if (label === 't') return { then: (ok) => ok('thenable') };
    if (label === 'r') return Promise.reject(new Error('async'));
    return undefined;
  });
  assert.deepEqual(
    out.map((o) => [o.entries[0].status, o.entries[0].value ?? o.entries[0].error?.message]),
    [
      ['failed', 'sync'],
      ['failed', 'execute must return a promise (an async function), not number; v counts as failed'],
      ['ok', 'thenable'],
      ['failed', 'async'],
      ['failed', 'execute must return a promise (an async function), not undefined; u counts as failed'],
    ],
  );
  assert.equal(typeof out[0].entries[0].entry, 'bigint');
  assertDrained(driver);
});

test('a question left open when its execution ends is closed: no unhandled rejection, no refused input', { timeout: 10_000 }, async () => {
  const { driver } = await setup();
  const unhandled = [];
  const onUnhandled = (e) => unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  try {
    let answer;
    let q2Started;
    const q2Gate = new Promise((r) => (q2Started = r));
    const run = driver.run(calls('q1', 'q2'), async (x) => {
      if (x.label === 'q1') {
        // Asks, then ends without waiting for the answer.
        x.question(() => new Promise((_, reject) => (answer = reject)));
        await sleep(1);
        return 'gave up waiting';
      }
      q2Started();
      await sleep(10);
      return 'next';
    });
    // The late answer comes while the batch is still live (q2 runs): it must not be reported.
    await q2Gate;
    answer(new Error('the user closed the prompt late'));
    const out = await run;
    assert.deepEqual(out.map((o) => o.entries[0].status), ['ok', 'ok']);
    await sleep(5);
    assert.deepEqual(unhandled, []);
    assertDrained(driver);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});

test('abort listeners are removed when their batch ends, whatever the end', { timeout: 10_000 }, async () => {
  const { driver } = await setup();
  const shared = new AbortController();
  const runs = [];
  for (let i = 0; i < 50; i++) runs.push(driver.run(calls(`c${i}`), async () => i, { signal: shared.signal }));
  runs.push(driver.run(calls('bad'), async () => 0, { signal: shared.signal, decide: () => 'nonsense' }).catch(() => 'rejected'));
  await Promise.all(runs);
  assert.equal(getEventListeners(shared.signal, 'abort').length, 0);
  // Aborting after the batches ended changes nothing and throws nothing.
  shared.abort();
  assertDrained(driver);
});

test('cancel (abort) twice, abort after the end, and a signal shared by finished batches: no uncaught exception', { timeout: 10_000 }, async () => {
  const { driver } = await setup();
  const uncaught = [];
  const onUncaught = (e) => uncaught.push(e);
  process.on('uncaughtException', onUncaught);
  try {
    const c = new AbortController();
    const run = driver.run(calls('a', 'b'), async ({ signal }) => {
      c.abort();
      c.abort();
      await sleep(2);
      return signal.aborted ? 'stopped' : 'done';
    }, { signal: c.signal });
    const out = await run;
    assert.deepEqual(out.map((o) => [o.entries[0].status, o.entries[0].value ?? o.entries[0].reason?.kind]), [['cancelled', 'stopped'], ['settled', 'cancelled']]);
    c.abort();
    await sleep(2);
    assert.deepEqual(uncaught, []);
    assertDrained(driver);
  } finally {
    process.off('uncaughtException', onUncaught);
  }
});

test('dispose rejects live batches with DisposedError, aborts their executions, and refuses later runs', { timeout: 10_000 }, async () => {
  const { driver, sched } = await setup();
  let seen;
  const run = driver.run(calls('a', 'b'), (x) => {
    seen = x.signal;
    return new Promise(() => {});
  });
  await sleep(2);
  driver.dispose();
  await assert.rejects(run, DisposedError);
  assert.equal(seen.aborted, true);
  assert.ok(seen.reason instanceof DisposedError);
  await assert.rejects(driver.run(calls('c'), () => 1), DisposedError);
  assert.throws(() => sched.unfinished(), DisposedError);
  driver[Symbol.dispose]();
});

test('an execution that ignores its abort: visible in inspect, keeps its slot, until abortGraceMs frees it', { timeout: 10_000 }, async () => {
  const { driver } = await setup();
  const c = new AbortController();
  let finish;
  const ignoring = driver.run(calls('stubborn', 'parked'), ({ label }) => (label === 'stubborn' ? new Promise((r) => (finish = r)) : 'never'), { signal: c.signal, abortGraceMs: 300 });
  await sleep(2);
  c.abort();
  await sleep(5);
  const [live] = driver.inspect();
  assert.equal(live.cancelled, true);
  assert.deepEqual(live.aborted.map((a) => a.label), ['stubborn']);
  assert.ok(live.aborted[0].sinceMs >= 0);
  // The component aborted it (cause cancel) and says so.
  assert.deepEqual(live.entries.map((e) => [e.label, e.state.kind]), [['stubborn', 'aborted'], ['parked', 'settled']]);
  assert.deepEqual(live.entries[0].state, { kind: 'aborted', cause: 'cancel' });
  // Its key is still held: a later batch waits ...
  const later = driver.run(calls('later'), async () => 'later ran');
  await sleep(5);
  assert.equal(driver.liveBatches, 2);
  // ... until the grace runs out: the component gives up on it (settled timed-out, with its
  // sentence) and frees the slot.
  const out = await ignoring;
  assert.equal(out[0].entries[0].status, 'settled');
  assert.deepEqual(out[0].entries[0].reason, { kind: 'timed-out', cause: 'cancel' });
  assert.match(out[0].entries[0].message, /cancelled/);
  assert.equal((await later)[0].entries[0].value, 'later ran');
  // What it returns afterwards is ignored.
  finish('too late');
  await sleep(2);
  assertDrained(driver);
});

test('executionTimeoutMs aborts an execution\'s signal with a TimeoutError; one that honours it fails with it', { timeout: 10_000 }, async () => {
  const { driver } = await setup();
  const out = await driver.run(calls('slow', 'quick'), ({ label, signal }) => {
    if (label === 'quick') return Promise.resolve('quick');
    return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }));
  }, { executionTimeoutMs: 10 });
  assert.equal(out[0].entries[0].status, 'failed');
  assert.equal(out[0].entries[0].error.name, 'TimeoutError');
  assert.equal(out[1].entries[0].value, 'quick');
  assertDrained(driver);
});

test('the component decides the deadline and the grace: an execution ignoring its TimeoutError is given up (settled timed-out), its slot frees, its late result is ignored', { timeout: 10_000 }, async () => {
  const { driver, sched } = await setup();
  let finish;
  let signal;
  const started = [];
  const out = await driver.run(calls('slow', 'next'), (run) => {
    started.push(run.label);
    if (run.label === 'next') return Promise.resolve('next ran');
    signal = run.signal;
    return new Promise((r) => (finish = r)); // ignores its signal
  }, { executionTimeoutMs: 20, abortGraceMs: 20 });
  assert.equal(signal.aborted, true);
  assert.equal(signal.reason.name, 'TimeoutError');
  assert.equal(out[0].entries[0].status, 'settled');
  assert.deepEqual(out[0].entries[0].reason, { kind: 'timed-out', cause: 'deadline' });
  assert.match(out[0].entries[0].message, /time limit/);
  assert.equal(out[1].entries[0].value, 'next ran');
  assert.deepEqual(started, ['slow', 'next']);
  finish('too late');
  await sleep(2);
  assertDrained(driver);
  assert.equal(sched.step().errors.length, 0);
});

test('resume through the driver: restored batches run next to new ones, in written order per key', { timeout: 10_000 }, async () => {
  const { policy, sched, driver } = await setup();
  const started = [];
  // A batch mid-flight: k1 running, k2 and k3 waiting on the key, f fanned out with #0 done.
  const gate = [];
  const live = driver.run([{ id: 'k1', tool: 'k' }, { id: 'k2', tool: 'k' }, { id: 'f', tool: 'f', operations: 2 }, { id: 'k3', tool: 'k' }], ({ label }) => {
    started.push(label);
    return label === 'f#0' ? Promise.resolve('f0 done') : new Promise((r) => gate.push(r));
  });
  await sleep(5);
  const state = sched.unfinished();
  assert.deepEqual(started, ['k1', 'f#0', 'f#1']);
  // The process "crashes" here; a new one resumes the saved state.
  driver.dispose();
  await assert.rejects(live, DisposedError);

  const ran = [];
  const execute = async ({ label }) => {
    ran.push(label);
    await sleep(1);
    return `again ${label}`;
  };
  const resumed = Driver.resume(policy, state, { started: 'run-again', execute });
  assert.deepEqual(resumed.unrestored, []);
  const fresh = resumed.driver.run(calls('n1'), execute);
  const [restored] = await Promise.all(resumed.batches);
  assert.deepEqual(restored.map((o) => o.entries.map((e) => [e.label, e.status])), [[['k1', 'ok']], [['k2', 'ok']], [['f#0', 'ok'], ['f#1', 'ok']], [['k3', 'ok']]]);
  assert.equal(restored[2].entries[0].value, undefined, 'ended before the save: no value');
  assert.equal(restored[0].entries[0].value, 'again k1');
  await fresh;
  // Written order per key across the restored batch and the new one.
  assert.deepEqual(ran.filter((l) => !l.startsWith('f')), ['k1', 'k2', 'k3', 'n1']);
  assertDrained(resumed.driver);

  // Interrupt instead: started entries are settled interrupted, the rest runs.
  const again = Driver.resume(policy, state, { started: 'interrupt', execute: async ({ label }) => label });
  const [interrupted] = await Promise.all(again.batches);
  assert.deepEqual(interrupted.map((o) => o.entries.map((e) => e.status === 'settled' ? e.reason.kind : e.status)), [['interrupted'], ['ok'], ['ok', 'interrupted'], ['ok']]);
  assertDrained(again.driver);
});

test('runBatch is the one-line form of the scheduler\'s driver', { timeout: 10_000 }, async () => {
  const { sched, driver } = await setup();
  assert.equal(Driver.of(sched), driver);
  const out = await runBatch(sched, calls('one'), async () => 1);
  assert.equal(out[0].entries[0].value, 1);
  await assert.rejects(runBatch(sched, 'x', () => 1), TypeError);
});

test('a fan-out call of one operation is labelled id#0; plain calls next to it are id', { timeout: 10_000 }, async () => {
  const { driver } = await setup();
  const out = await driver.run([{ id: 'a', tool: 'f', operations: 1 }, { id: 'b', tool: 'free' }], async ({ label, operation }) => `${label}/${operation}`);
  assert.deepEqual(out.map((o) => o.entries.map((e) => [e.label, e.value])), [[['a#0', 'a#0/0']], [['b', 'b/undefined']]]);
  assertDrained(driver);
});

test('pause refuses a bad argument at the call, before anything is queued', async () => {
  // The Python test of the same name holds its driver to the same: ValueError / TypeError at the
  // call (RangeError / TypeError here), nothing queued, DisposedError from a closed driver's
  // pause when awaited (a rejected promise here).
  const { driver } = await setup();
  assert.throws(() => driver.pause('k', -5), { name: 'RangeError', message: 'forMs must be a finite number of milliseconds >= 0, got -5' });
  assert.throws(() => driver.pause('k', NaN), (e) => e instanceof RangeError && e.message.endsWith('got NaN'));
  assert.throws(() => driver.pause('k', '5'), (e) => e instanceof TypeError && e.message.includes('forMs'));
  assert.throws(() => driver.liftPause(3), (e) => e instanceof TypeError && e.message.includes('key'));
  assert.deepEqual(driver.inspect(), []);
  await driver.pause('k', 5); // a good one still works
  driver.dispose();
  await assert.rejects(driver.pause('k', 1), DisposedError);
});
