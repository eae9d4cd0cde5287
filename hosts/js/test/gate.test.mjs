// The gate: calls of one tick form one batch in arrival order, each call settles when its own
// entry ends, settled calls reject with `CallSettledError` and the model's text, a per-call
// abort never hangs a key, a `run` that throws fails only its call. Failure paths first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { VirtualClock } from './fixtures/virtual-clock.mjs';
import { CallSettledError, Driver, Gate, Scheduler, SubmitError, Turnstile, TurnstileError } from '../dist/index.js';

const CONFIG = `
[conversation.tools.rfd_draft]
concurrency = { key = "rfd" }
[conversation.tools.rfd_renumber]
concurrency = { key = "rfd" }
[conversation.tools.github]
concurrency = { key = "github", limit = 2 }
`;

/** The test's virtual clock, moving on its own whenever nothing else can run (no real sleep):
 * its gate's driver's clock and `sleep`'s. */
let clock = new VirtualClock();
let stopClock = clock.auto();
const sleep = (ms, _value, options) => clock.sleep(ms, options?.signal);
function freshClock() {
  stopClock();
  clock = new VirtualClock();
  stopClock = clock.auto();
  return clock;
}

async function gate(options) {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'test', text: CONFIG }]);
  return new Gate(policy, { ...options, clock: freshClock() });
}

/** Resolves when `log` gets `line` (no timed waits in assertions). */
function when(log, line) {
  return new Promise((resolve) => {
    const poll = () => (log.includes(line) ? resolve() : setImmediate(poll));
    poll();
  });
}

/** A run that records its start and end in `log`, taking `ms`. */
const recorder = (log, ms = 5) => async (args, signal) => {
  log.push(`start ${args.name}`);
  await sleep(ms, undefined, { signal }).catch(() => {});
  log.push(`end ${args.name}`);
  return `${args.name} done`;
};

test('the texts of settled calls come from the component: explain checks its arguments', async () => {
  const t = await Turnstile.load();
  // A few of the component's sentences, as every host gives them to the model.
  assert.equal(t.explain('a', { kind: 'rejected' }), 'not run: the user rejected this call');
  assert.equal(t.explain('a', { kind: 'cancelled' }), 'not run: the batch was cancelled');
  assert.equal(t.explain('del#3', { kind: 'stopped', after: 2 }), "not run: stopped after del#1 failed (this tool stops a call's operations at the first failure)");
  assert.equal(t.explain('g', { kind: 'rate-limited', retries: 1 }), 'not run again: rate limited 2 times (1 retry allowed); the endpoint asked to wait');
  for (const kind of ['skipped', 'failed', 'interrupted']) assert.match(t.explain('a', { kind }), /^not run/);
  // The scheduler's explain is the same function (and works after dispose: it needs no scheduler).
  const sched = new Scheduler(t.resolve([{ name: 'test', text: CONFIG }]));
  sched.dispose();
  assert.equal(sched.explain('a', { kind: 'skipped' }), t.explain('a', { kind: 'skipped' }));
  // Wrong arguments are TypeError / RangeError naming them.
  assert.throws(() => t.explain(1, { kind: 'rejected' }), (e) => e instanceof TypeError && e.message.includes('label'));
  assert.throws(() => t.explain('a', 'rejected'), (e) => e instanceof TypeError && e.message.includes('reason'));
  assert.throws(() => t.explain('a', { kind: 'bogus' }), (e) => e instanceof RangeError && e.message.includes('reason.kind'));
  assert.throws(() => t.explain('a', { kind: 'stopped' }), (e) => e instanceof TypeError && e.message.includes('reason.after'));
  assert.throws(() => t.explain('a', { kind: 'stopped', after: 0 }), (e) => e instanceof RangeError && e.message.includes('reason.after'));
  assert.throws(() => t.explain('a', { kind: 'rejected', after: 1 }), TypeError);
  assert.throws(() => t.explain('a', { kind: 'rate-limited', retries: -1 }), RangeError);
});

test('calls settled by decide reject with CallSettledError carrying the reason and the model\'s text', { timeout: 10_000 }, async () => {
  const decisions = { a: 'reject', b: 'skip', c: 'fail', d: 'approve' };
  const g = await gate({ decide: (label) => decisions[label] });
  const ran = [];
  const run = async (args) => {
    ran.push(args.name);
    return args.name;
  };
  const results = await Promise.allSettled(['a', 'b', 'c', 'd'].map((id) => g.call('rfd_draft', id, { name: id }, run)));
  assert.deepEqual(ran, ['d']);
  const [a, b, c, d] = results;
  for (const [r, kind, text] of [
    [a, 'rejected', 'not run: the user rejected this call'],
    [b, 'skipped', 'not run: this call was skipped'],
    [c, 'failed', 'not run: this call failed before it could start'],
  ]) {
    assert.equal(r.status, 'rejected');
    assert.ok(r.reason instanceof CallSettledError);
    assert.ok(r.reason instanceof TurnstileError);
    assert.equal(r.reason.code, 'call-settled');
    assert.deepEqual(r.reason.reason, { kind });
    assert.equal(r.reason.message, text);
    assert.equal(String(r.reason), text);
    assert.equal(r.reason.tool, 'rfd_draft');
  }
  assert.equal(c.reason.callId, 'c');
  assert.deepEqual(d, { status: 'fulfilled', value: 'd' });
});

test('a decide that throws or answers nonsense fails every call of its batch with that error, not a sentence', { timeout: 10_000 }, async () => {
  for (const answer of ['throw', 'yes']) {
    const broken = new Error('decide is broken');
    const g = await gate({
      decide: (label) => {
        if (label !== 'b') return 'approve';
        if (answer === 'throw') throw broken;
        return answer;
      },
    });
    const ran = [];
    const results = await Promise.allSettled(['a', 'b', 'c'].map((id) => g.call('rfd_draft', id, { name: id }, async (args) => ran.push(args.name))));
    assert.deepEqual(ran, [], 'nothing of the batch runs');
    const errors = results.map((r) => r.reason);
    assert.ok(results.every((r) => r.status === 'rejected'));
    assert.ok(errors.every((e) => e === errors[0]), 'one error, the one decide made');
    if (answer === 'throw') assert.equal(errors[0], broken);
    else assert.ok(errors[0] instanceof RangeError && !(errors[0] instanceof CallSettledError), String(errors[0]));
    g.driver.dispose();
  }
});

test('gate.cancel rejects parked calls as cancelled and aborts running ones; the key is free after', { timeout: 10_000 }, async () => {
  const g = await gate();
  const log = [];
  const first = g.call('rfd_draft', 'a', { name: 'a' }, recorder(log, 10_000));
  const second = g.call('rfd_draft', 'b', { name: 'b' }, recorder(log));
  await when(log, 'start a');
  assert.deepEqual(log, ['start a']);
  g.cancel(new Error('ctrl-c'));
  // `a` honoured its signal and returned: what it returned is the truth.
  assert.equal(await first, 'a done');
  await assert.rejects(second, (e) => e instanceof CallSettledError && e.message === 'not run: the batch was cancelled' && e.reason.kind === 'cancelled');
  assert.deepEqual(log, ['start a', 'end a']);
  assert.equal(await g.call('rfd_draft', 'c', { name: 'c' }, recorder(log)), 'c done');
});

test('a run that throws, throws synchronously, or is not async fails only its own call', { timeout: 10_000 }, async () => {
  const g = await gate();
  const log = [];
  const calls = [
    g.call('rfd_draft', 'a', { name: 'a' }, async () => {
      throw new Error('a broke');
    }),
    g.call('rfd_draft', 'b', { name: 'b' }, () => {
      throw new Error('b broke at once');
    }),
    g.call('rfd_draft', 'c', { name: 'c' }, () => 'not a promise'),
    g.call('rfd_draft', 'd', { name: 'd' }, recorder(log)),
  ];
  const [a, b, c, d] = await Promise.allSettled(calls);
  assert.match(a.reason.message, /a broke/);
  assert.match(b.reason.message, /b broke at once/);
  // A plain value is taken as the result (the gate wraps `run` in a promise).
  assert.deepEqual(c, { status: 'fulfilled', value: 'not a promise' });
  assert.deepEqual(d, { status: 'fulfilled', value: 'd done' });
});

test('a call aborted while queued rejects at once, never runs, and does not hold its key', { timeout: 10_000 }, async () => {
  const g = await gate();
  const log = [];
  const abort = new AbortController();
  const a = g.call('rfd_draft', 'a', { name: 'a' }, recorder(log, 50));
  const b = g.call('rfd_draft', 'b', { name: 'b' }, recorder(log), { signal: abort.signal });
  const c = g.call('rfd_draft', 'c', { name: 'c' }, recorder(log));
  await when(log, 'start a');
  abort.abort(new Error('b no longer needed'));
  await assert.rejects(b, /b no longer needed/);
  assert.deepEqual(log, ['start a']);
  assert.equal(await a, 'a done');
  assert.equal(await c, 'c done');
  assert.deepEqual(log, ['start a', 'end a', 'start c', 'end c']);
});

test('a running call\'s abort aborts its run\'s signal; a run ignoring it keeps the key until abortGraceMs', { timeout: 10_000 }, async () => {
  const g = await gate({ abortGraceMs: 30 });
  const log = [];
  const abort = new AbortController();
  let seen;
  const stubborn = g.call('rfd_draft', 'a', { name: 'a' }, async (_args, signal) => {
    log.push('start a');
    await sleep(5);
    seen = signal;
    await sleep(10_000, undefined, { ref: false }); // ignores its signal
    return 'late';
  }, { signal: abort.signal });
  const next = g.call('rfd_draft', 'b', { name: 'b' }, recorder(log));
  await when(log, 'start a');
  while (!seen) await sleep(1);
  abort.abort(new Error('stop a'));
  await assert.rejects(stubborn, /stop a/);
  assert.equal(seen.aborted, true);
  // b still waits: a's tool may still be running.
  assert.deepEqual(log, ['start a']);
  assert.equal(await next, 'b done');
  assert.deepEqual(log, ['start a', 'start b', 'end b']);
});

test('an already aborted signal rejects at once and submits nothing', { timeout: 10_000 }, async () => {
  const g = await gate();
  let ran = false;
  await assert.rejects(g.call('rfd_draft', 'a', {}, async () => (ran = true), { signal: AbortSignal.abort(new Error('gone')) }), /gone/);
  await sleep(5);
  assert.equal(ran, false);
  assert.equal(g.driver.liveBatches, 0);
});

test('bad arguments and ids reject only their own call', { timeout: 10_000 }, async () => {
  const g = await gate();
  await assert.rejects(g.call('rfd_draft', 'a#1', {}, async () => 1), (e) => e instanceof SubmitError && e.code === 'invalid-id');
  await assert.rejects(g.call('rfd_draft', '', {}, async () => 1), (e) => e instanceof SubmitError && e.code === 'invalid-id');
  await assert.rejects(g.call('', 'x', {}, async () => 1), (e) => e instanceof SubmitError && e.code === 'invalid-id');
  await assert.rejects(g.call('rfd_draft', 'x', {}, 'run'), TypeError);
  await assert.rejects(g.call('rfd_draft', 1, {}, async () => 1), TypeError);
  const first = g.call('rfd_draft', 'same', {}, async () => 1);
  await assert.rejects(g.call('rfd_draft', 'same', {}, async () => 2), (e) => e instanceof SubmitError && e.code === 'duplicate-id');
  assert.equal(await first, 1);
  // Once the call settled, its id may be used again (even while its batch is still live).
  assert.equal(await g.call('rfd_draft', 'same', {}, async () => 3), 3);
  assert.throws(() => new Gate({}), TypeError);
  assert.throws(() => new Gate(g.driver, { decide: 1 }), TypeError);
});

test('calls of one task form one batch in arrival order, however deep their await chains', { timeout: 10_000 }, async () => {
  const g = await gate();
  let release;
  const held = new Promise((r) => (release = r));
  const order = [];
  const logged = (id) => async () => {
    order.push(id);
    await held;
  };
  // Three calls from microtask chains of different depths, then one in a later task.
  const deep = async (n, id) => {
    for (let i = 0; i < n; i++) await null;
    return g.call('free', id, {}, logged(id));
  };
  const p = [deep(0, 'a'), deep(30, 'b'), deep(3, 'c')];
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
  const later = g.call('free', 'd', {}, logged('d'));
  // The three of the first task are one batch, in arrival order (a, c after 3 awaits, b after
  // 30); d, from a later task, is not in it.
  assert.deepEqual(g.driver.inspect().map((b) => b.entries.map((e) => e.label)), [['a', 'c', 'b']]);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(g.driver.inspect().map((b) => b.entries.map((e) => e.label)), [['a', 'c', 'b'], ['d']]);
  release();
  await Promise.all([...p, later]);
  assert.deepEqual(order, ['a', 'c', 'b', 'd']);
});

test('each call settles when its own entry ends, not when its batch ends', { timeout: 10_000 }, async () => {
  const g = await gate();
  const ended = [];
  const fast = g.call('github', 'fast', {}, async () => 'fast').then((v) => ended.push(v));
  const slow = g.call('github', 'slow', {}, async () => {
    await sleep(100);
    return 'slow';
  }).then((v) => ended.push(v));
  await fast;
  assert.deepEqual(ended, ['fast']);
  await slow;
  assert.deepEqual(ended, ['fast', 'slow']);
});

test('limits and written order hold per key; unkeyed tools run together', { timeout: 10_000 }, async () => {
  const t = await Turnstile.load();
  const driver = new Driver(new Scheduler(t.resolve([{ name: 'test', text: CONFIG }])), { clock: freshClock() });
  const g = new Gate(driver);
  assert.equal(new Gate(driver.scheduler).driver, driver);
  const running = new Map();
  const peak = new Map();
  const order = [];
  const run = (key) => async ({ id }) => {
    order.push(id);
    running.set(key, (running.get(key) ?? 0) + 1);
    peak.set(key, Math.max(peak.get(key) ?? 0, running.get(key)));
    await sleep(5);
    running.set(key, running.get(key) - 1);
    return id;
  };
  const calls = [];
  for (let i = 0; i < 6; i++) calls.push(g.call('github', `g${i}`, { id: `g${i}` }, run('github')));
  for (let i = 0; i < 4; i++) calls.push(g.call(i % 2 ? 'rfd_draft' : 'rfd_renumber', `r${i}`, { id: `r${i}` }, run('rfd')));
  for (let i = 0; i < 3; i++) calls.push(g.call('free', `f${i}`, { id: `f${i}` }, run('free')));
  await Promise.all(calls);
  assert.equal(peak.get('github'), 2);
  assert.equal(peak.get('rfd'), 1);
  assert.equal(peak.get('free'), 3);
  assert.deepEqual(order.filter((id) => id.startsWith('r')), ['r0', 'r1', 'r2', 'r3']);
  assert.deepEqual(order.filter((id) => id.startsWith('g')), ['g0', 'g1', 'g2', 'g3', 'g4', 'g5']);
  driver.dispose();
});

test('a disposed driver rejects every call of the gate with DisposedError', { timeout: 10_000 }, async () => {
  const g = await gate();
  const a = g.call('rfd_draft', 'a', {}, (_args, signal) => sleep(10_000, undefined, { signal }));
  const b = g.call('rfd_draft', 'b', {}, async () => 1);
  await sleep(10);
  g.driver.dispose();
  await assert.rejects(b, (e) => e.code === 'disposed');
  await a.catch(() => {});
});

test('a gate over a persisting driver leaves nothing retired in the snapshot (every call had its answer)', { timeout: 10_000 }, async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'test', text: CONFIG }]);
  const saved = [];
  const driver = new Driver(new Scheduler(policy), { clock: freshClock(), persist: (text) => { saved.push(text); } });
  const g = new Gate(driver);
  for (let n = 0; n < 3; n++) assert.equal(await g.call('rfd_draft', `c${n}`, String(n), async (arg) => { await sleep(10); return arg; }), String(n));
  await sleep(10);
  const last = JSON.parse(driver.snapshot());
  assert.deepEqual([last.retired, last.state.batches], [[], []]);
  assert.ok(saved.length > 0, 'the driver persisted');
  driver.dispose();
});

// -- expect: a batch known before its calls come -------------------------------------------------

test('expect submits a known batch at once: decided whole in written order, run per key in that order however the calls come', { timeout: 10_000 }, async () => {
  const log = [];
  const g = await gate({
    decide: async (label, call) => {
      if (label === 'a') await sleep(20); // a split batch would start the rest meanwhile
      log.push(`decided ${label} ${call.tool}`);
      return 'approve';
    },
  });
  g.expect([
    { id: 'a', tool: 'rfd_draft', args: { name: 'a' } },
    { id: 'g', tool: 'github', args: { name: 'g' } },
    { id: 'b', tool: 'rfd_renumber', args: { name: 'b' } },
  ]);
  assert.deepEqual(g.expected().sort(), ['a', 'b', 'g']);
  // The calls come later, in another task, in reverse order.
  await new Promise((resolve) => setTimeout(resolve, 0));
  const results = ['b', 'g', 'a'].map((id) => g.call(id === 'g' ? 'github' : id === 'a' ? 'rfd_draft' : 'rfd_renumber', id, { name: id }, recorder(log)));
  assert.deepEqual(g.expected(), []);
  assert.deepEqual(await Promise.all(results), ['b done', 'g done', 'a done']);
  const at = (line) => log.indexOf(line);
  assert.deepEqual(log.slice(0, 3), ['decided a rfd_draft', 'decided g github', 'decided b rfd_renumber']);
  assert.ok(at('start b') > at('end a'), 'written order on the key, not arrival order');
  assert.ok(at('start g') < at('end a'), 'another key does not wait');
  assert.deepEqual(g.driver.inspect(), []);
});

test('an expected call released before its call came keeps its slot; withdraw frees it, queued or released', { timeout: 10_000 }, async () => {
  const g = await gate();
  const log = [];
  g.expect([
    { id: 'a', tool: 'rfd_draft', args: { name: 'a' } },
    { id: 'b', tool: 'rfd_draft', args: { name: 'b' } },
    { id: 'c', tool: 'rfd_draft', args: { name: 'c' } },
  ]);
  // `a` is released and waits for its call: `b` and `c` stay queued behind it.
  await sleep(20);
  assert.deepEqual(log, []);
  assert.equal(g.withdraw('b'), true, 'queued: it will end without running');
  assert.equal(g.withdraw('b'), false);
  assert.equal(g.withdraw('nobody'), false);
  assert.deepEqual(g.expected().sort(), ['a', 'c']);
  assert.equal(g.withdraw('a'), true, 'released: it ends now, the key moves on');
  assert.equal(await g.call('rfd_draft', 'c', { name: 'c' }, recorder(log)), 'c done');
  assert.deepEqual(log, ['start c', 'end c']);
  assert.deepEqual(g.expected(), []);
  assert.deepEqual(g.driver.inspect(), []);
  // The withdrawn ids are free again.
  assert.equal(await g.call('rfd_draft', 'a', { name: 'a' }, recorder(log)), 'a done');
});

test('expect: a settled call answers its claim, a refused batch submits nothing, another tool under the id is a call of its own', { timeout: 10_000 }, async () => {
  const g = await gate({ decide: (label) => (label === 'r' ? 'reject' : 'approve') });
  const log = [];
  g.expect([{ id: 'r', tool: 'rfd_draft', args: { name: 'r' } }]);
  await sleep(5);
  await assert.rejects(g.call('rfd_draft', 'r', { name: 'r' }, recorder(log)), (e) => e instanceof CallSettledError && e.message === 'not run: the user rejected this call');
  // Refused whole: a repeated id, an id in flight, an invalid id.
  assert.throws(() => g.expect([{ id: 'x', tool: 'github', args: {} }, { id: 'x', tool: 'github', args: {} }]), (e) => e instanceof SubmitError && e.code === 'duplicate-id');
  g.expect([{ id: 'y', tool: 'github', args: { name: 'y' } }]);
  assert.throws(() => g.expect([{ id: 'z', tool: 'github', args: {} }, { id: 'y', tool: 'github', args: {} }]), (e) => e instanceof SubmitError && e.code === 'duplicate-id');
  assert.throws(() => g.expect([{ id: 'a#1', tool: 'github', args: {} }]), (e) => e instanceof SubmitError && e.code === 'invalid-id');
  assert.throws(() => g.expect('nope'), TypeError);
  assert.deepEqual(g.expected(), ['y']);
  g.expect([]); // nothing to submit
  // `y` claimed by another tool: the expected call is withdrawn, this one runs on its own.
  assert.equal(await g.call('rfd_draft', 'y', { name: 'y' }, recorder(log)), 'y done');
  assert.deepEqual(g.expected(), []);
  // A claim whose own signal aborts before its release: it never runs.
  g.expect([{ id: 'p', tool: 'rfd_draft', args: { name: 'p' } }, { id: 'q', tool: 'rfd_draft', args: { name: 'q' } }]);
  const p = g.call('rfd_draft', 'p', { name: 'p' }, recorder(log, 20));
  const controller = new AbortController();
  const q = g.call('rfd_draft', 'q', { name: 'q' }, recorder(log), { signal: controller.signal });
  controller.abort(new Error('left'));
  await assert.rejects(q, /left/);
  assert.equal(await p, 'p done');
  assert.ok(!log.includes('start q'));
  // gate.cancel ends an expected call that waits for its claim: the claim gets the sentence.
  g.expect([{ id: 'w', tool: 'github', args: { name: 'w' } }]);
  await sleep(5);
  g.cancel();
  await sleep(5);
  await assert.rejects(g.call('github', 'w', { name: 'w' }, recorder(log)), (e) => e instanceof CallSettledError && e.reason.kind === 'cancelled');
  await sleep(5);
  assert.deepEqual(g.driver.inspect(), []);
});
