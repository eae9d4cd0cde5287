// Seeded randomized runs of the driver: many concurrent batches mixing every `execute` behaviour
// (ok, throw, reject, sync throw, sync value, slow, ignoring its abort, asking a question), random
// decisions (async ones, and decide failures), random cancels. After each run: no key ever over
// its limit, starts in written order per key, exactly one outcome per entry and every entry
// executed at most once, no batch left pending, every slot freed (driver and scheduler empty).
// `TURNSTILE_SEED=N` replays one seed; `TURNSTILE_SEEDS=N` sets how many (default 30).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { VirtualClock } from './fixtures/virtual-clock.mjs';
import { Driver, Scheduler, Turnstile } from '../dist/index.js';
import { rng } from './fixtures/rng.mjs';

// Tools and the key each one counts against (undefined: unbounded).
const TOOLS = {
  a1: { key: 'a', limit: 1 },
  a2: { key: 'a', limit: 1 },
  b: { key: 'b', limit: 2 },
  c: { key: 'c', limit: 3 },
  stop: { key: 'stop', limit: 2, fanOut: true },
  fan: { fanOut: true },
  free: {},
};
const CONFIG = `
[conversation.tools.a1]
concurrency = { key = "a" }
[conversation.tools.a2]
concurrency = { key = "a" }
[conversation.tools.b]
concurrency = 2
[conversation.tools.c]
concurrency = { key = "c", limit = 3 }
[conversation.tools.stop]
concurrency = 2
fan_out = { on_error = "stop" }
[conversation.tools.fan]
fan_out = true
[conversation.tools.free]
`;
const BEHAVIOURS = ['ok', 'throw', 'reject', 'sync-throw', 'sync-value', 'slow', 'ignore-abort', 'honour-abort', 'question'];

async function runSeed(policy, seed) {
  const r = rng(seed);
  const sched = new Scheduler(policy);
  // Virtual time, moving on its own whenever nothing else can run: every wait below is on it.
  const clock = new VirtualClock();
  const stopClock = clock.auto();
  const sleep = (ms) => clock.sleep(ms);
  const driver = new Driver(sched, { clock });
  const running = new Map();
  const peak = new Map();
  const startsPerKey = new Map();
  const executed = new Set();
  const problems = [];
  const behaviour = new Map();
  // For the stop rule: the step each entry started in and the step that reported its failure
  // (starts computed by a step come after the failures it carries).
  let stepNo = 0;
  const startAt = new Map();
  const failAt = new Map();
  const stepRaw = sched.stepRaw.bind(sched);
  sched.stepRaw = (inputs) => {
    stepNo += 1;
    return stepRaw(inputs);
  };

  // The step during which the driver learns of a failure: a handler attached before the
  // driver's runs just before it.
  const execute = (x) => {
    let result;
    try {
      result = behave(x);
    } catch (error) {
      failAt.set(x.entry, stepNo);
      throw error;
    }
    if (result instanceof Promise) result.catch(() => failAt.set(x.entry, stepNo));
    return result;
  };
  const behave = (x) => {
    const entry = x.entry;
    if (executed.has(entry)) problems.push(`entry ${entry} executed twice`);
    executed.add(entry);
    startAt.set(entry, stepNo);
    const { key, limit } = TOOLS[x.call.tool];
    if (key) {
      const now = (running.get(key) ?? 0) + 1;
      running.set(key, now);
      peak.set(key, Math.max(peak.get(key) ?? 0, now));
      if (now > limit) problems.push(`key ${key}: ${now} running, limit ${limit}`);
      const starts = startsPerKey.get(key) ?? [];
      if (starts.length && starts[starts.length - 1] > entry) problems.push(`key ${key}: ${entry} started after ${starts[starts.length - 1]}`);
      starts.push(entry);
      startsPerKey.set(key, starts);
    }
    const done = () => key && running.set(key, running.get(key) - 1);
    const kind = r.pick(BEHAVIOURS);
    behaviour.set(entry, kind);
    const later = (ms, f) => sleep(ms).then(f);
    switch (kind) {
      case 'ok':
        return Promise.resolve(x.label).finally(done);
      case 'throw':
        return (async () => {
          done();
          throw new Error(`${x.label} threw`);
        })();
      case 'reject':
        return later(r.int(3), () => {
          done();
          throw new Error('rejected');
        });
      case 'sync-throw':
        done();
        throw new TypeError('sync');
      case 'sync-value':
        done();
        return x.label;
      case 'slow':
        return later(1 + r.int(6), () => {
          done();
          return 'slow';
        });
      case 'ignore-abort':
        // Reads its signal and ignores it; ends on its own after a while.
        void x.signal;
        return later(3 + r.int(8), () => {
          done();
          return 'ignored';
        });
      case 'honour-abort':
        return new Promise((resolve, reject) => {
          const timer = clock.setTimer(clock.now() + 2 + r.int(8), () => {
            done();
            resolve('finished');
          });
          x.signal.addEventListener('abort', () => {
            timer.cancel();
            done();
              reject(x.signal.reason);
          }, { once: true });
        });
      case 'question':
        return x
          .question(() => sleep(r.int(4)).then(() => 'yes'))
          .then((a) => a)
          .finally(done);
    }
    throw new Error('unreachable');
  };

  let serial = 0;
  const batches = [];
  const rounds = 4 + r.int(8);
  for (let round = 0; round < rounds; round++) {
    const concurrent = 1 + r.int(5);
    for (let k = 0; k < concurrent; k++) {
      const n = 1 + r.int(8);
      const calls = Array.from({ length: n }, () => {
        const tool = r.pick(Object.keys(TOOLS));
        const call = { id: `c${serial++}`, tool };
        if (TOOLS[tool].fanOut && r.chance(0.7)) call.operations = 1 + r.int(4);
        return call;
      });
      const controller = new AbortController();
      const decideMode = r.pick(['none', 'sync', 'async', 'failing']);
      const decideFailsAt = r.int(n + 2);
      let decided = 0;
      const decide =
        decideMode === 'none'
          ? undefined
          : (label) => {
              if (decideMode === 'failing' && decided++ === decideFailsAt) throw new Error('decide failed');
              const d = r.chance(0.8) ? 'approve' : r.pick(['reject', 'skip', 'fail']);
              return decideMode === 'async' ? sleep(r.int(2)).then(() => d) : d;
            };
      const options = { signal: controller.signal, decide };
      const promise = driver.run(calls, execute, options);
      // Handled now (it is inspected at the end): a rejection is expected for failing decides.
      promise.catch(() => {});
      batches.push({ calls, promise, decideMode });
      if (r.chance(0.25)) clock.setTimer(clock.now() + r.int(10), () => controller.abort());
      if (r.chance(0.1)) controller.abort();
    }
    await sleep(r.int(4));
  }

  // No batch left pending: every promise settles (with a watchdog instead of a hang).
  let watchdog;
  const settled = await Promise.race([
    Promise.allSettled(batches.map((b) => b.promise)),
    new Promise((_, reject) => (watchdog = setTimeout(() => reject(new Error(`seed ${seed}: batches still pending after 10 s: ${JSON.stringify(driver.inspect(), (k, v) => (typeof v === 'bigint' ? `${v}` : v))}`)), 10_000))),
  ]);
  clearTimeout(watchdog);
  // Executions that ignored their abort may still be running: let them end.
  await sleep(20);
  stopClock();

  settled.forEach((s, i) => {
    const { calls, decideMode } = batches[i];
    if (s.status === 'rejected') {
      if (!(decideMode === 'failing' && /decide failed/.test(s.reason?.message))) problems.push(`batch ${i} rejected: ${s.reason}`);
      return;
    }
    const outcomes = s.value;
    if (outcomes.length !== calls.length) problems.push(`batch ${i}: ${outcomes.length} outcomes for ${calls.length} calls`);
    outcomes.forEach((o, c) => {
      if (o.id !== calls[c].id) problems.push(`batch ${i}: outcome ${c} is ${o.id}, not ${calls[c].id}`);
      if (o.entries.length !== (calls[c].operations ?? 1)) problems.push(`call ${o.id}: ${o.entries.length} entries`);
      // on_error = "stop": nothing of the call starts after one of its operations failed.
      if (calls[c].tool === 'stop') {
        const firstFail = Math.min(...o.entries.map((e) => failAt.get(e.entry) ?? Infinity));
        for (const e of o.entries) if ((startAt.get(e.entry) ?? -1) > firstFail) problems.push(`${e.label} started after an earlier operation of its call failed`);
      }
      for (const e of o.entries) {
        const ran = executed.has(e.entry);
        if (e.status === 'settled' ? ran && e.reason.kind !== 'cancelled' : !ran) problems.push(`${e.label}: status ${e.status} but executed=${ran}`);
        const kind = behaviour.get(e.entry);
        if (e.status === 'ok' && ['throw', 'reject', 'sync-throw', 'sync-value'].includes(kind)) problems.push(`${e.label}: ok after ${kind}`);
        if (e.status === 'failed' && ['ok', 'slow', 'ignore-abort', 'question'].includes(kind)) problems.push(`${e.label}: failed after ${kind}`);
      }
    });
  });
  for (const [key, n] of running) if (n !== 0) problems.push(`key ${key}: ${n} still counted running`);
  if (driver.inspect().length) problems.push(`driver still has ${driver.inspect().length} live batches`);
  if (sched.unfinished().batches.length) problems.push(`scheduler still has ${sched.unfinished().batches.length} live batches`);
  driver.dispose();
  return { problems, batches: batches.length, executed: executed.size, peak };
}

test('seeded random runs: limits, order, one outcome per entry, nothing pending, every slot freed', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'random', text: CONFIG }]);
  const seeds = process.env.TURNSTILE_SEED ? [Number(process.env.TURNSTILE_SEED)] : Array.from({ length: Number(process.env.TURNSTILE_SEEDS ?? 30) }, (_, i) => i + 1);
  let batches = 0;
  let executed = 0;
  for (const seed of seeds) {
    const run = await runSeed(policy, seed);
    if (run.problems.length) assert.fail(`TURNSTILE_SEED=${seed}:\n  ${run.problems.slice(0, 10).join('\n  ')}`);
    batches += run.batches;
    executed += run.executed;
  }
  assert.ok(executed > seeds.length * 5, `only ${executed} executions over ${batches} batches`);
});
