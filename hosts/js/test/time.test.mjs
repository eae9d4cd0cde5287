// Time through the driver: a key's `delay` spaces its starts (the driver steps again when the
// scheduler asks to be woken), an execution that throws RateLimitedError runs again in its place
// after the pause, a cap that runs out settles the entry `rate-limited`, and disposal with a
// wake-up armed leaves nothing behind. Failure paths first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as realSleep } from 'node:timers/promises';
import { VirtualClock } from './fixtures/virtual-clock.mjs';
import { Driver, RateLimitedError, Scheduler, Turnstile } from '../dist/index.js';

const CONFIG = `
[conversation.tools.api]
concurrency = { key = "api", limit = 2, retries = 2 }
[conversation.tools.spaced]
concurrency = { key = "spaced", limit = 2, delay = 30 }
`;

/** The test's virtual clock, moving on its own whenever nothing else can run; the two tests of
 * the system clock's own timers (`setup(false)`) use real time. */
let clock = new VirtualClock();
let stopClock = clock.auto();
const sleep = (ms) => clock.sleep(ms);

async function setup(virtual = true) {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'time', text: CONFIG }]);
  stopClock();
  clock = new VirtualClock();
  stopClock = clock.auto();
  return new Driver(new Scheduler(policy), virtual ? { clock } : {});
}

const calls = (tool, ...ids) => ids.map((id) => ({ id, tool }));

function drained(driver) {
  assert.deepEqual(driver.inspect(), []);
  assert.deepEqual(driver.scheduler.unfinished().batches, []);
}

test('RateLimitedError validates its delay, and reads Retry-After with the component: seconds or a date, else the fallback', async () => {
  assert.throws(() => new RateLimitedError(-1), RangeError);
  assert.throws(() => new RateLimitedError(NaN), RangeError);
  assert.throws(() => new RateLimitedError('5'), RangeError);
  assert.equal(new RateLimitedError(5).code, 'rate-limited');
  // The component reads the header: before any Turnstile is loaded in the process, it cannot.
  assert.throws(() => RateLimitedError.fromHeader('3'), (e) => e instanceof TypeError && /Turnstile\.load/.test(e.message));
  await Turnstile.load();
  assert.equal(RateLimitedError.fromHeader('3').retryAfterMs, 3000);
  assert.equal(RateLimitedError.fromHeader(' \t7 ').retryAfterMs, 7000);
  assert.equal(RateLimitedError.fromHeader('0').retryAfterMs, 0);
  // Absent, empty or malformed: the fallback (1000 ms unless given).
  assert.equal(RateLimitedError.fromHeader(null, 250).retryAfterMs, 250);
  assert.equal(RateLimitedError.fromHeader(undefined).retryAfterMs, 1000);
  assert.equal(RateLimitedError.fromHeader(' ', 250).retryAfterMs, 250);
  assert.equal(RateLimitedError.fromHeader('soon', 250).retryAfterMs, 250);
  // A fraction and a sign are malformed (the package's own reader made them a wait of 0).
  assert.equal(RateLimitedError.fromHeader('3.5', 250).retryAfterMs, 250);
  assert.equal(RateLimitedError.fromHeader('-5', 250).retryAfterMs, 250);
  assert.throws(() => RateLimitedError.fromHeader(3), TypeError);
  // An HTTP date: the wait until then by the wall clock; a date in the past is 0.
  const inAMinute = new Date(Date.now() + 60_000).toUTCString();
  const wait = RateLimitedError.fromHeader(inAMinute).retryAfterMs;
  assert.ok(wait > 50_000 && wait <= 60_000, `${wait}`);
  assert.equal(RateLimitedError.fromHeader('Sun, 06 Nov 1994 08:49:37 GMT').retryAfterMs, 0);
  // Huge delta-seconds saturate (the scheduler then settles the entry at once, past 5 minutes).
  assert.ok(RateLimitedError.fromHeader('99999999999999999999999').retryAfterMs >= 2 ** 63);
});

test('a cap that runs out settles the entry rate-limited, with the text the model reads', { timeout: 10_000 }, async () => {
  const driver = await setup();
  let runs = 0;
  const out = await driver.run(calls('api', 'always'), async () => {
    runs += 1;
    throw new RateLimitedError(5);
  });
  // One run and two retries (retries = 2), then the scheduler gives up.
  assert.equal(runs, 3);
  const e = out[0].entries[0];
  assert.equal(e.status, 'settled');
  assert.deepEqual(e.reason, { kind: 'rate-limited', retries: 2 });
  assert.equal(e.message, 'not run again: rate limited 3 times (2 retries allowed); the endpoint asked to wait');
  assert.equal(e.message, driver.scheduler.explain(e.label, e.reason));
  drained(driver);
});

test('a 429 storm: every call is rate limited once, runs again in its place, the limit holds', { timeout: 10_000 }, async () => {
  const driver = await setup();
  const seen = new Set();
  let running = 0;
  let peak = 0;
  const starts = [];
  const out = await driver.run(calls('api', 'a', 'b', 'c', 'd', 'e'), async ({ label }) => {
    running += 1;
    peak = Math.max(peak, running);
    starts.push(label);
    try {
      await sleep(2);
      if (!seen.has(label)) {
        seen.add(label);
        throw new RateLimitedError(15);
      }
      return `${label} done`;
    } finally {
      running -= 1;
    }
  });
  assert.deepEqual(out.map((o) => o.entries[0].value), ['a done', 'b done', 'c done', 'd done', 'e done']);
  assert.ok(peak <= 2, `peak ${peak}`);
  // First starts in written order, and every entry ran twice.
  const first = starts.filter((l, i) => starts.indexOf(l) === i);
  assert.deepEqual(first, ['a', 'b', 'c', 'd', 'e']);
  assert.equal(starts.length, 10);
  drained(driver);
});

test('rate windows and an adaptive limit through the driver: a burst, then the pace; a 429 storm halves the limit once', { timeout: 10_000 }, async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'rates', text: `
[conversation.tools.paced]
concurrency = { key = "paced", limit = 0, rate = "2/100ms", burst = 3 }
[conversation.tools.llm]
concurrency = { key = "llm", limit = { max = 4, adapt = "aimd" }, retries = 3 }
` }]);
  stopClock();
  clock = new VirtualClock();
  stopClock = clock.auto();
  const driver = new Driver(new Scheduler(policy), { clock });
  const at = [];
  await driver.run(calls('paced', 'p1', 'p2', 'p3', 'p4', 'p5'), async () => {
    at.push(clock.now());
    return 'ok';
  });
  // Three at once (the burst), then one per 50 ms (2 per 100 ms).
  assert.deepEqual(at.map((x) => x - at[0]), [0, 0, 0, 50, 100]);
  // Four start together; three of them get a 429: they started together, so the limit halves
  // once, to 2, and the reruns start two at a time.
  const seen = new Set();
  let running = 0;
  const starts = [];
  const out = await driver.run(calls('llm', 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'), async ({ label }) => {
    running += 1;
    starts.push([label, running, clock.now()]);
    try {
      await sleep(10);
      if (['a', 'b', 'c'].includes(label) && !seen.has(label)) {
        seen.add(label);
        throw new RateLimitedError(20);
      }
      return 'ok';
    } finally {
      running -= 1;
    }
  });
  assert.deepEqual(out.map((o) => o.entries[0].status), Array(8).fill('ok'));
  assert.deepEqual(starts.slice(0, 4).map(([l, r]) => [l, r]), [['a', 1], ['b', 2], ['c', 3], ['d', 4]]);
  assert.deepEqual(starts.slice(4, 6).map(([l, r]) => [l, r]), [['a', 1], ['b', 2]]);
  assert.ok(starts[6][2] >= starts[4][2] + 10, `c waited for a slot under the halved limit: ${JSON.stringify(starts)}`);
  drained(driver);
  driver.dispose();
});

test('cancelling a batch while its entry waits to run again settles it; nothing runs after', { timeout: 10_000 }, async () => {
  const driver = await setup();
  const controller = new AbortController();
  let runs = 0;
  const run = driver.run(calls('api', 'x'), async () => {
    runs += 1;
    clock.setTimer(clock.now() + 5, () => controller.abort());
    throw new RateLimitedError(200);
  }, { signal: controller.signal });
  const out = await run;
  assert.equal(runs, 1);
  assert.equal(out[0].entries[0].status, 'settled');
  assert.deepEqual(out[0].entries[0].reason, { kind: 'cancelled' });
  drained(driver);
});

test('delay spaces starts on a key: the driver wakes the scheduler when it asked', { timeout: 10_000 }, async () => {
  const driver = await setup();
  const at = [];
  const out = await driver.run(calls('spaced', 's1', 's2', 's3'), async () => {
    at.push(clock.now());
    return 'ok';
  });
  assert.deepEqual(out.map((o) => o.entries[0].status), ['ok', 'ok', 'ok']);
  assert.deepEqual(at, [0, 30, 60]);
  drained(driver);
});

test('disposing a driver with a wake-up armed leaves no timer behind (the system clock)', { timeout: 10_000 }, async () => {
  const driver = await setup(false);
  const pending = driver.run(calls('spaced', 'w1', 'w2'), async () => 'ok');
  pending.catch(() => {});
  await realSleep(5);
  // The test runner keeps its own timers; count the driver's as the difference.
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
  const armed = timers();
  assert.ok(driver.inspect().length === 1, 'w2 waits on the delay');
  driver.dispose();
  await assert.rejects(pending);
  assert.equal(timers(), armed - 1, 'the wake-up for w2 was cleared');
});

test('Driver.pause holds a key from the host; an unknown key or a disposed driver rejects', { timeout: 10_000 }, async () => {
  const driver = await setup();
  await assert.rejects(driver.pause('nope', 10), (e) => e.code === 'unknown-key');
  assert.throws(() => driver.pause('api', -1), RangeError);
  assert.throws(() => driver.pause(5, 1), TypeError);
  const t0 = clock.now();
  await driver.pause('api', 40);
  let at;
  await driver.run(calls('api', 'p'), async () => {
    at = clock.now();
    return 'ok';
  });
  assert.equal(at - t0, 40);
  const pause = driver.pause('api', 10);
  driver.dispose();
  await assert.rejects(pause, (e) => e.code === 'disposed');
});

test('a wait longer than a timer can hold is capped and re-armed, a huge Retry-After never wraps (the system clock)', { timeout: 10_000 }, async () => {
  const driver = await setup(false);
  const warnings = [];
  const onWarning = (w) => warnings.push(w.name);
  process.on('warning', onWarning);
  try {
    // A Retry-After past the key's longest wait (the component's bound, 5 minutes): the entry is
    // settled rate-limited at once, after one run (no wrap into the past and a run again).
    let runs = 0;
    const out = await driver.run(calls('api', 'far'), async () => {
      runs += 1;
      throw new RateLimitedError(2 ** 64);
    });
    assert.equal(runs, 1);
    assert.equal(out[0].entries[0].status, 'settled');
    assert.equal(out[0].entries[0].reason.kind, 'rate-limited');
    // A pause longer than a timer can hold (2^31 - 1 ms): the entry waits, and no
    // TimeoutOverflowWarning is printed.
    await driver.pause('api', 2 ** 40);
    let ran = 0;
    const run = driver.run(calls('api', 'paused'), async () => {
      ran += 1;
    });
    run.catch(() => {});
    await realSleep(30);
    assert.equal(ran, 0);
    assert.equal(driver.inspect().length, 1);
    assert.deepEqual(warnings.filter((n) => n === 'TimeoutOverflowWarning'), []);
  } finally {
    process.off('warning', onWarning);
    driver.dispose();
  }
});
