// The driver's one clock (DRIVERS.md, "Time"): an injected `clock` is the only time the driver
// reads and the only timer it sets (one at a time, for the latest wake-at); a `now` that goes
// back is clamped, never refused. Nothing sleeps: the clock is virtual.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Driver, Scheduler, Turnstile } from '../dist/index.js';
import { MemoryStore, SharedKeys } from '../dist/shared/index.js';
import { VirtualClock } from './fixtures/virtual-clock.mjs';

const CONFIG = `
[conversation.tools.spaced]
concurrency = { key = "spaced", limit = 1, delay = 100 }
`;

async function policy(text = CONFIG) {
  const t = await Turnstile.load();
  return t.resolve([{ name: 'clock', text }]);
}

test('a bad clock is refused, naming the option', async () => {
  const p = await policy();
  assert.throws(() => new Driver(new Scheduler(p), { clock: 5 }), (e) => e instanceof TypeError && /options\.clock/.test(e.message));
  assert.throws(() => new Driver(new Scheduler(p), { clock: { now: () => 0 } }), (e) => e instanceof TypeError && /options\.clock/.test(e.message));
});

test('a key delay waits on the injected clock, with one timer at a time', async () => {
  const clock = new VirtualClock(1000);
  const driver = new Driver(new Scheduler(await policy()), { clock });
  const starts = [];
  const done = driver.run(['a', 'b', 'c'].map((id) => ({ id, tool: 'spaced' })), async (x) => {
    starts.push(`${clock.now()} ${x.label}`);
    return x.label;
  });
  await clock.runAll();
  const out = await done;
  assert.deepEqual(starts, ['1000 a', '1100 b', '1200 c']);
  assert.deepEqual(out.map((c) => c.entries[0].status), ['ok', 'ok', 'ok']);
  assert.equal(clock.peak, 1, 'the driver keeps one timer');
  assert.equal(clock.armed, 0);
  driver.dispose();
});

test('a clock that goes back is clamped: the driver never gives a lower now, nothing is refused', async () => {
  const clock = new VirtualClock(5000);
  let back = 0;
  const skewed = { now: () => clock.now() - back, setTimer: (at, fire) => clock.setTimer(at + back, fire) };
  const scheduler = new Scheduler(await policy());
  // Every `now` the driver gives the component, in order.
  const nows = [];
  const step = scheduler.stepRaw.bind(scheduler);
  scheduler.stepRaw = (inputs) => {
    nows.push(Number(inputs.now));
    return step(inputs);
  };
  const driver = new Driver(scheduler, { clock: skewed });
  const starts = [];
  const done = driver.run(['a', 'b'].map((id) => ({ id, tool: 'spaced' })), async (x) => {
    starts.push(x.label);
    // The clock jumps back 4 s after the first start: b still waits its 100 ms, from 5000.
    back = 4000;
    return x.label;
  });
  await clock.runAll();
  const out = await done;
  assert.deepEqual(out.map((c) => c.entries[0].status), ['ok', 'ok']);
  assert.deepEqual(starts, ['a', 'b']);
  assert.ok(nows.length > 1 && nows.every((n, i) => n >= 5000 && (i === 0 || n >= nows[i - 1])), `${nows}`);
  driver.dispose();
});

test('SharedKeys takes the same clock: its lease timers are virtual', async () => {
  const clock = new VirtualClock(0);
  const store = await MemoryStore.open(); // on the real clock: only SharedKeys runs on the virtual one
  const keys = new SharedKeys(store, { clock, leaseMs: 1000 });
  const permit = await keys.acquire('k', { limit: 1, delayMs: 0 });
  // The lease is renewed on the virtual clock: a timer is armed there, none on the real one.
  assert.ok(clock.armed >= 1, 'the lease schedule set its timer on the injected clock');
  await clock.runUntil(5000);
  assert.equal(permit.signal.aborted, false, 'renewed on time');
  await permit.release();
  await keys.close();
  assert.throws(() => new SharedKeys(store, { clock: {} }), (e) => e instanceof TypeError && /options\.clock/.test(e.message));
  await store.close();
});
