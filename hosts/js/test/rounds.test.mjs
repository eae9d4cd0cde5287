// The step's rounds of one kind (approvals only, ends only: `stepOn`'s fast paths in
// scheduler.ts) give exactly what the general path (`Round`) gives: two schedulers under one
// policy take the same random rounds, one allowed the fast paths and one forced onto the general
// path, and every output of every round must be equal, refusals and their positions included.
// Rounds carry duplicates (adjacent and not), unknown entries, entries already decided or not
// running, out-of-order ends and clocks that go back. `TURNSTILE_SEED=N` replays one seed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Scheduler, Turnstile } from '../dist/index.js';
import { rng } from './fixtures/rng.mjs';

const CONFIG = `
[conversation.tools.a]
concurrency = { key = "ka", limit = 1 }
[conversation.tools.b]
concurrency = { key = "kb", limit = 3 }
[conversation.tools.stop]
concurrency = { key = "kb", limit = 3 }
fan_out = { on_error = "stop" }
[conversation.tools.free]
fan_out = true
`;
const EMPTY = new BigUint64Array(0);
const inputs = (o) => ({ approve: EMPTY, settle: [], ask: EMPTY, answer: EMPTY, ok: EMPTY, failed: EMPTY, cancel: EMPTY, now: undefined, retry: [], pause: [], granted: EMPTY, denied: EMPTY, ...o });

/** Shuffled, sorted, or with duplicates (adjacent or not) and strangers, at random. */
function entryList(r, entries, known) {
  let list = entries.filter(() => r.chance(0.7));
  if (r.chance(0.3)) list.sort(() => r.int(3) - 1);
  else list.sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
  if (list.length && r.chance(0.15)) list.splice(r.int(list.length + 1), 0, r.pick(list));
  if (list.length && r.chance(0.1)) {
    const i = r.int(list.length);
    list.splice(i + 1, 0, list[i]);
  }
  if (r.chance(0.1)) list.splice(r.int(list.length + 1), 0, known + 1000n + BigInt(r.int(5)));
  return BigUint64Array.from(list);
}

/** A fresh scheduler whose entry numbers start at `first` (every other seed past 2^32, so that
 * both 32-bit halves of an entry number cross). */
function scheduler(policy, first) {
  if (first === 0n) return new Scheduler(policy);
  const state = { version: 2, policy: policy.fingerprint(), nextBatch: 1n, nextEntry: first, batches: [] };
  return Scheduler.resume(policy, state, { started: 'run-again' }).scheduler;
}

function runSeed(policy, seed) {
  const r = rng(seed);
  const first = seed % 2 ? 0n : 2n ** 32n * BigInt(seed) + 5n;
  const fast = scheduler(policy, first);
  const general = scheduler(policy, first);
  const pending = [];
  const running = [];
  let next = first;
  let now = 0n;
  const seen = { sole: 0, refused: 0 };
  for (let round = 0; round < 200; round++) {
    if (pending.length + running.length < 8 || r.chance(0.1)) {
      const calls = Array.from({ length: 1 + r.int(6) }, (_, i) => {
        const tool = r.pick(['a', 'b', 'stop', 'free']);
        const call = { id: `c${round}_${i}`, tool };
        if (tool === 'stop' || (tool === 'free' && r.chance(0.5))) call.operations = 1 + r.int(4);
        return call;
      });
      const s1 = fast.submit(calls);
      const s2 = general.submit(calls);
      assert.deepEqual([s1.batch, s1.first, s1.count], [s2.batch, s2.first, s2.count]);
      for (const e of s1.entries()) pending.push(e);
      next = s1.first + BigInt(s1.count);
    }
    now += BigInt(r.int(3));
    const clock = r.chance(0.05) ? now - 5n : now;
    let step;
    if (r.chance(0.5)) step = inputs({ approve: entryList(r, pending, next), now: clock });
    else {
      const ends = entryList(r, running.length ? running : pending, next);
      const split = r.int(ends.length + 1);
      step = inputs({ ok: ends.subarray(0, split), failed: ends.subarray(split), now: clock });
    }
    const one = step.approve.length || step.ok.length || step.failed.length;
    const listed = [...step.approve, ...step.ok, ...step.failed];
    const sole = one && new Set(listed).size === listed.length;
    const a = fast.stepRaw(step);
    const b = general.stepRaw(step, true);
    assert.deepEqual(a, b, `seed ${seed}, round ${round}: ${JSON.stringify(step, (k, v) => (typeof v === 'bigint' ? `${v}` : v))}`);
    if (sole) seen.sole++;
    if (sole && a.errors.length) seen.refused++;
    for (const e of step.approve) if (pending.includes(e)) pending.splice(pending.indexOf(e), 1);
    for (const e of [...step.ok, ...step.failed]) if (running.includes(e)) running.splice(running.indexOf(e), 1);
    for (const e of a.start) running.push(e);
  }
  fast.dispose();
  general.dispose();
  return seen;
}

test('rounds of approvals only and of ends only give what the general path gives', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'rounds', text: CONFIG }]);
  const seeds = process.env.TURNSTILE_SEED ? [Number(process.env.TURNSTILE_SEED)] : Array.from({ length: 20 }, (_, i) => i + 1);
  const total = { sole: 0, refused: 0 };
  for (const seed of seeds) {
    const seen = runSeed(policy, seed);
    total.sole += seen.sole;
    total.refused += seen.refused;
  }
  // The comparison means something only if the fast paths ran, refusals included.
  if (process.env.TURNSTILE_VERBOSE) console.log(total);
  assert.ok(total.sole > 100 * seeds.length / 20, `only ${total.sole} rounds took a fast path`);
  assert.ok(total.refused > 10 * seeds.length / 20, `only ${total.refused} rounds had refusals`);
});

test('rounds of 5,000 inputs give what the general path gives', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'rounds', text: CONFIG }]);
  const fast = new Scheduler(policy);
  const general = new Scheduler(policy);
  const calls = Array.from({ length: 5000 }, (_, i) => ({ id: `c${i}`, tool: i % 100 ? 'free' : 'b' }));
  for (let round = 0; round < 2; round++) {
    const s = fast.submit(calls);
    general.submit(calls);
    const approve = s.entries();
    approve[4500] = approve[10]; // a refusal past the pools: already decided
    let a = fast.stepRaw(inputs({ approve }));
    let b = general.stepRaw(inputs({ approve }), true);
    assert.deepEqual(a, b);
    assert.deepEqual(a.errors.map((e) => [e.input, e.index, e.code]), [['approve', 4500, 'already-decided']]);
    const late = BigUint64Array.of(s.first + 4500n);
    const a2 = fast.stepRaw(inputs({ approve: late }));
    assert.deepEqual(a2, general.stepRaw(inputs({ approve: late }), true));
    a.start = BigUint64Array.from([...a.start, ...a2.start]);
    for (let steps = 0; a.retired.length === 0; steps++) {
      assert.ok(steps < 100, 'the batch retires');
      const started = a.start;
      const ok = started.subarray(0, started.length >> 1);
      const failed = started.subarray(started.length >> 1);
      a = fast.stepRaw(inputs({ ok, failed }));
      b = general.stepRaw(inputs({ ok, failed }), true);
      assert.deepEqual(a, b);
    }
  }
  fast.dispose();
  general.dispose();
});
