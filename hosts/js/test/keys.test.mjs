// Keys from arguments (`key = "fs:{path}"`) at every entry point: `Scheduler.submit` (calls'
// `args`, and the component's own `arguments` pairs), the driver (`run`, `runBatch`,
// `Driver.resume`), the gate; a call's odd arguments never throw and take the template's own key;
// a tool with a plain key never looks at them. Then a burst of writes to a few files through the
// driver and the gate, a fanned-out batch against a fake HTTP API answering 429 with
// Retry-After, and saved states that carry each call's key. Failure paths first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { setTimeout as realSleep } from 'node:timers/promises';
import { quiet, VirtualClock } from './fixtures/virtual-clock.mjs';
import { Driver, Gate, RateLimitedError, Scheduler, SubmitError, Turnstile, runBatch } from '../dist/index.js';

const CONFIG = `
[conversation.tools.fs_write]
concurrency = { key = "fs:{path}", limit = 1 }
[conversation.tools.fs_read]
concurrency = { key = "fs:{path}", limit = 1 }
[conversation.tools.rfd_draft]
concurrency = { key = "rfd" }
[conversation.tools.get_page]
concurrency = { key = "api:{host}", limit = 2, retries = 3 }
fan_out = true
`;
/** The key a call of `fs_write` takes when its arguments make none. */
const OWN = 'fs:{path}';

/** The test's virtual clock, moving on its own whenever nothing else can run (no real sleep):
 * the scheduler's driver's clock and `sleep`'s. The fake HTTP API's test keeps real time. */
let clock = new VirtualClock();
let stopClock = clock.auto();
const sleep = (ms) => clock.sleep(ms);
function freshClock() {
  stopClock();
  clock = new VirtualClock();
  stopClock = clock.auto();
  return clock;
}

async function setup(text = CONFIG, { virtual = true } = {}) {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'keys', text }]);
  const sched = new Scheduler(policy);
  if (virtual) new Driver(sched, { clock: freshClock() });
  return { t, policy, sched };
}

/** The one key of an entry of a tool with one key (`undefined` when unbounded). */
function only(keys) {
  assert.ok(keys.length <= 1, `one key at most, got ${keys.join(' + ')}`);
  return keys[0];
}

/** The key of each entry of a batch, by label. */
function keys(sched, batch) {
  return Object.fromEntries(sched.inspect(batch).map((s) => [s.label, only(s.keys)]));
}

/** Arguments no JSON writer can write, or that are not a plain object: each must be taken as
 * "no arguments" (the template's own key), never thrown. */
function oddArgs() {
  const cycle = { path: 'a.txt' };
  cycle.self = cycle;
  const deepCycle = { path: {} };
  deepCycle.path.back = deepCycle;
  class Args {
    constructor() {
      this.path = 'a.txt';
    }
  }
  return {
    bigint: { path: 10n },
    'cycle in the named field': deepCycle,
    'throwing getter': { get path() { throw new Error('boom'); } },
    'throwing toJSON': { path: { toJSON() { throw new Error('boom'); } } },
    'hostile proxy': new Proxy({}, { getPrototypeOf() { throw new Error('boom'); }, ownKeys() { throw new Error('boom'); }, get() { throw new Error('boom'); } }),
    'a Map': new Map([['path', 'a.txt']]),
    'a class instance': new Args(),
    'an array': ['a.txt'],
    'a string': '{"path": "a.txt"}',
    'a number': 5,
    'a symbol': Symbol('path'),
    'a function': () => 'a.txt',
    null: null,
    'no named field': { file: 'a.txt' },
    'the named field undefined': { path: undefined },
    'the named field null': { path: null },
    'the named field an object': { path: { name: 'a.txt' } },
    'a path above 64 KiB': { path: 'p'.repeat(70_000) },
    // The cycle is outside the named field: only `path` is written, so this one expands.
    '(expands) a cycle elsewhere': cycle,
  };
}

test('submit: wrong types for the arguments pairs are TypeError / RangeError naming them', async () => {
  const { sched } = await setup();
  const call = [{ id: 'w', tool: 'fs_write' }];
  const throwsNaming = (f, Kind, name) => assert.throws(f, (e) => e instanceof Kind && e.message.includes(name), name);
  throwsNaming(() => sched.submit(call, 'x'), TypeError, 'options');
  throwsNaming(() => sched.submit(call, null), TypeError, 'options');
  throwsNaming(() => sched.submit(call, { args: [] }), TypeError, 'args');
  throwsNaming(() => sched.submit(call, { arguments: '{"path": "a"}' }), TypeError, 'options.arguments');
  throwsNaming(() => sched.submit(call, { arguments: [{ 0: 0, 1: '{}' }] }), TypeError, 'options.arguments[0]');
  throwsNaming(() => sched.submit(call, { arguments: [[0]] }), TypeError, 'options.arguments[0]');
  throwsNaming(() => sched.submit(call, { arguments: [[0, '{}', 1]] }), TypeError, 'options.arguments[0]');
  throwsNaming(() => sched.submit(call, { arguments: [['0', '{}']] }), TypeError, 'options.arguments[0][0]');
  throwsNaming(() => sched.submit(call, { arguments: [[0n, '{}']] }), TypeError, 'options.arguments[0][0]');
  throwsNaming(() => sched.submit(call, { arguments: [[-1, '{}']] }), RangeError, 'options.arguments[0][0]');
  throwsNaming(() => sched.submit(call, { arguments: [[0.5, '{}']] }), RangeError, 'options.arguments[0][0]');
  throwsNaming(() => sched.submit(call, { arguments: [[0, { path: 'a' }]] }), TypeError, 'options.arguments[0][1]');
  throwsNaming(() => sched.submit(call, { arguments: [[0, '{}'], [0, 5]] }), TypeError, 'options.arguments[1][1]');
  // Nothing crossed: the id is free.
  assert.equal(sched.submit(call).count, 1);
});

test('submit: the component refuses pairs of no call, a call named twice, or text above 64 KiB; nothing changes', async () => {
  const { sched } = await setup();
  const calls = [{ id: 'w1', tool: 'fs_write' }, { id: 'w2', tool: 'fs_write', args: { path: 'b.txt' } }];
  const refused = (options, code) => assert.throws(() => sched.submit(calls, options), (e) => e instanceof SubmitError && e.code === code, code);
  refused({ arguments: [[2, '{"path": "a.txt"}']] }, 'invalid-arguments');
  refused({ arguments: [[0, '{}'], [0, '{}']] }, 'invalid-arguments');
  // Named by its `args` and by a pair: twice.
  refused({ arguments: [[1, '{"path": "c.txt"}']] }, 'invalid-arguments');
  // Text given as is crosses whole, even for a tool with a plain key.
  refused({ arguments: [[0, JSON.stringify({ path: 'a.txt', content: 'x'.repeat(70_000) })]] }, 'too-large');
  assert.throws(() => sched.submit([{ id: 'd', tool: 'rfd_draft' }], { arguments: [[0, 'x'.repeat(65_537)]] }), (e) => e.code === 'too-large');
  // All or nothing: the ids are still free, and a good batch goes through.
  const b = sched.submit(calls, { arguments: [[0, '{"path": "a.txt"}']] });
  assert.deepEqual(keys(sched, b.batch), { w1: 'fs:a.txt', w2: 'fs:b.txt' });
});

test('odd arguments never throw: each takes the template\'s own key, at every entry point', { timeout: 20_000 }, async () => {
  const { sched, policy } = await setup();
  const odd = oddArgs();
  const names = Object.keys(odd);
  // Scheduler.submit
  const calls = names.map((name, i) => ({ id: `c${i}`, tool: 'fs_write', args: odd[name] }));
  const b = sched.submit(calls);
  const got = keys(sched, b.batch);
  for (const [i, name] of names.entries()) assert.equal(got[`c${i}`], name.startsWith('(expands)') ? 'fs:a.txt' : OWN, name);

  // Driver.run and runBatch: the batch runs; on the template's own key, one at a time.
  for (const via of ['run', 'runBatch']) {
    const driver = new Driver(new Scheduler(policy));
    const seen = [];
    const calls = names.filter((n) => !n.startsWith('(expands)')).map((name, i) => ({ id: `c${i}`, tool: 'fs_write', args: odd[name] }));
    const execute = async ({ label }) => {
      seen.push(only(driver.inspect()[0].entries.find((e) => e.label === label).keys));
      return label;
    };
    const out = via === 'run' ? await driver.run(calls, execute) : await runBatch(driver.scheduler, calls, execute);
    assert.deepEqual(out.map((o) => o.entries[0].status), calls.map(() => 'ok'), via);
    assert.deepEqual(seen, calls.map(() => OWN), via);
    driver.dispose();
  }

  // The gate: each call resolves.
  const gate = new Gate(policy);
  const results = await Promise.all(names.map((name, i) => gate.call('fs_write', `g${i}`, odd[name], async () => name)));
  assert.deepEqual(results, names);
});

test('a tool with a plain key, or none, never looks at its arguments', async () => {
  const { sched } = await setup();
  let reads = 0;
  const spy = { get path() {
    reads += 1;
    return 'a.txt';
  } };
  const b = sched.submit([
    { id: 'd', tool: 'rfd_draft', args: spy },
    { id: 'u', tool: 'unconfigured', args: spy },
    { id: 'x', tool: 'rfd_draft', args: { path: 1n } },
  ]);
  assert.equal(reads, 0);
  assert.deepEqual(keys(sched, b.batch), { d: 'rfd', u: undefined, x: 'rfd' });
  // Text given as is for such a call is not judged (not even as JSON).
  const b2 = sched.submit([{ id: 'e', tool: 'rfd_draft' }], { arguments: [[0, 'not json']] });
  assert.deepEqual(keys(sched, b2.batch), { e: 'rfd' });

  // A policy with no template at all: nothing is read, through the driver either.
  const t = await Turnstile.load();
  const driver = new Driver(new Scheduler(t.resolve([{ name: 'plain', text: '[conversation.tools.w]\nconcurrency = 1\n' }])));
  await driver.run([{ id: 'w', tool: 'w', args: spy }], async () => 'ok');
  assert.equal(reads, 0);
  driver.dispose();
});

test('only the fields a template names cross: a large body does not make a call too large', async () => {
  const { sched } = await setup();
  const b = sched.submit([
    { id: 'big', tool: 'fs_write', args: { content: 'x'.repeat(200_000), path: 'big.txt' } },
    { id: 'text', tool: 'fs_write', args: { path: 'text.txt', content: 'y' } },
    { id: 'n', tool: 'fs_write', args: { path: 7 } },
  ]);
  assert.deepEqual(keys(sched, b.batch), { big: 'fs:big.txt', text: 'fs:text.txt', n: 'fs:7' });
});

/** Runs `writes` ([id, path] in written order) through `start(calls, write)`, where `write(args)`
 * is the tool: records how many run on each file and in all, and each file's written content. */
async function burst(writes, start) {
  const running = new Map();
  const files = new Map();
  const starts = new Map();
  let all = 0;
  let peak = 0;
  const overlaps = [];
  const write = async ({ id, path }, ms) => {
    const now = (running.get(path) ?? 0) + 1;
    running.set(path, now);
    if (now > 1) overlaps.push(`${id} started while ${path} had ${now - 1} running`);
    all += 1;
    peak = Math.max(peak, all);
    starts.set(path, [...(starts.get(path) ?? []), id]);
    // The write is read-modify-write: two at once on one file would lose one.
    const before = files.get(path) ?? '';
    await sleep(ms);
    files.set(path, `${before}${id};`);
    running.set(path, running.get(path) - 1);
    all -= 1;
    return id;
  };
  const results = await start(writes, write);
  return { results, files, starts, peak, overlaps };
}

function checkBurst(writes, { results, files, starts, peak, overlaps }) {
  assert.deepEqual(overlaps, []);
  assert.deepEqual(results, writes.map(([id]) => id));
  for (const path of new Set(writes.map(([, path]) => path))) {
    const order = writes.filter(([, p]) => p === path).map(([id]) => id);
    assert.deepEqual(starts.get(path), order, `${path}: started in written order`);
    assert.equal(files.get(path), order.map((id) => `${id};`).join(''), `${path}: every write kept, in written order`);
  }
  assert.ok(peak >= 2, `writes to different files ran together (peak ${peak})`);
}

test('a burst of 30 writes over 4 files through the driver: one at a time per file, in written order; files overlap', { timeout: 20_000 }, async () => {
  const { sched } = await setup();
  const paths = ['a.txt', 'b.txt', 'c.txt', 'd.txt'];
  // Uneven: a.txt gets most of them.
  const writes = Array.from({ length: 30 }, (_, i) => [`w${i + 1}`, paths[(i * 7) % 11 < 5 ? 0 : (i % 3) + 1]]);
  const outcome = await burst(writes, async (writes, write) => {
    const calls = writes.map(([id, path]) => ({ id, tool: 'fs_write', args: { path, content: `from ${id}` } }));
    const out = await Driver.of(sched).run(calls, ({ call }) => write({ id: call.id, path: call.args.path }, 1 + (Number(call.id.slice(1)) % 4)));
    return out.map((o) => o.entries[0].value);
  });
  checkBurst(writes, outcome);
  assert.deepEqual(sched.unfinished().batches, []);
});

test('the same burst through the gate (calls arriving together, each with its args)', { timeout: 20_000 }, async () => {
  const { policy } = await setup();
  const gate = new Gate(policy, { clock });
  const paths = ['a.txt', 'b.txt', 'c.txt', 'd.txt'];
  const writes = Array.from({ length: 16 }, (_, i) => [`w${i + 1}`, paths[i % 4]]);
  const outcome = await burst(writes, (writes, write) => Promise.all(writes.map(([id, path]) => gate.call('fs_write', id, { path }, (args) => write({ id, path: args.path }, 2)))));
  checkBurst(writes, outcome);
});

/** A fake HTTP API limited per host: `allowance` requests per 1-second window, then 429 with
 * `Retry-After` (seconds to the window's end). Logs every request with its time and status. */
async function fakeApi(allowance) {
  const log = [];
  const windows = new Map();
  const server = createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    const host = url.searchParams.get('host');
    const now = performance.now();
    let w = windows.get(host);
    if (!w || now - w.start >= 1000) windows.set(host, (w = { start: now, count: 0 }));
    if (w.count >= (allowance[host] ?? Infinity)) {
      log.push({ host, page: url.searchParams.get('page'), at: now, status: 429 });
      res.writeHead(429, { 'retry-after': String(Math.ceil((w.start + 1000 - now) / 1000)) }).end();
      return;
    }
    w.count += 1;
    log.push({ host, page: url.searchParams.get('page'), at: now, status: 200 });
    setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ host, page: Number(url.searchParams.get('page')) })), 3);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${server.address().port}/`;
  const close = () => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  };
  return { base, log, close };
}

test('a fanned-out batch against an API that answers 429 with Retry-After: the host\'s key pauses, the other host runs on, all pages arrive', { timeout: 20_000 }, async () => {
  const { sched } = await setup(CONFIG, { virtual: false });
  const api = await fakeApi({ 'a.example': 3 });
  const driver = Driver.of(sched);
  const running = {};
  const peak = {};
  try {
    const calls = [
      { id: 'a', tool: 'get_page', operations: 6, args: { host: 'a.example', query: 'x' } },
      { id: 'b', tool: 'get_page', operations: 6, args: { host: 'b.example', query: 'y' } },
    ];
    // While a.example is paused, its waiting pages say so in a sentence.
    const whys = new Set();
    let done = false;
    const watching = (async () => {
      while (!done && whys.size === 0) {
        for (const b of driver.inspect()) for (const e of b.entries) if (e.wait?.kind === 'key-paused') whys.add(e.why);
        await realSleep(5);
      }
    })();
    const out = await driver.run(calls, async ({ call, operation, signal }) => {
      const host = call.args.host;
      running[host] = (running[host] ?? 0) + 1;
      peak[host] = Math.max(peak[host] ?? 0, running[host]);
      try {
        const res = await fetch(`${api.base}?host=${host}&page=${operation}`, { signal });
        if (res.status === 429) throw RateLimitedError.fromHeader(res.headers.get('retry-after'));
        return await res.json();
      } finally {
        running[host] -= 1;
      }
    });
    done = true;
    await watching;
    assert.ok(whys.size > 0, 'a paused page was seen waiting');
    assert.deepEqual(out.map((c) => c.entries.map((e) => e.value?.page)), [[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5]]);
    assert.deepEqual(peak, { 'a.example': 2, 'b.example': 2 });
    const a = api.log.filter((r) => r.host === 'a.example');
    const b = api.log.filter((r) => r.host === 'b.example');
    const first429 = a.find((r) => r.status === 429);
    assert.ok(first429, 'a.example answered 429');
    assert.ok(b.every((r) => r.status === 200), 'b.example was never limited');
    // Nothing was sent to a.example before its Retry-After (1 s) ran out but what was on its
    // way when the 429 came; b.example's pages all went meanwhile, on their own key.
    const early = a.filter((r) => r.at > first429.at + 200 && r.at < first429.at + 950);
    assert.deepEqual(early, []);
    const resumed = a.find((r) => r.at > first429.at && r.status === 200);
    assert.ok(resumed.at >= first429.at + 950, `a.example answered again ${resumed.at - first429.at} ms after its 429`);
    assert.ok(b.every((r) => r.at < first429.at + 950), 'b.example did not wait for a.example\'s pause');
    assert.ok([...whys].every((why) => /^waiting: api:a\.example is paused for .+ more/.test(why)), [...whys].join(' | '));
  } finally {
    driver.dispose();
    await api.close();
  }
});

test('settled outcomes carry the component\'s explain text as message, in the driver and the gate', { timeout: 20_000 }, async () => {
  const { t, policy } = await setup(`${CONFIG}
[conversation.tools.del]
concurrency = 1
fan_out = { on_error = "stop" }
[conversation.tools.quota]
concurrency = { key = "quota", retries = 0 }
`);
  const driver = new Driver(new Scheduler(policy));
  const decisions = { r: 'reject', s: 'skip', f: 'fail' };
  const out = await driver.run(
    [{ id: 'r', tool: 'rfd_draft' }, { id: 's', tool: 'rfd_draft' }, { id: 'f', tool: 'rfd_draft' }, { id: 'del', tool: 'del', operations: 3 }, { id: 'q', tool: 'quota' }],
    async ({ label }) => {
      if (label === 'del#0') throw new Error('disk full');
      if (label === 'q') throw new RateLimitedError(1);
      return label;
    },
    { decide: (label) => decisions[label] ?? 'approve' },
  );
  const settled = out.flatMap((c) => c.entries).filter((e) => e.status === 'settled');
  assert.deepEqual(settled.map((e) => [e.label, e.reason.kind]), [['r', 'rejected'], ['s', 'skipped'], ['f', 'failed'], ['del#1', 'stopped'], ['del#2', 'stopped'], ['q', 'rate-limited']]);
  for (const e of settled) assert.equal(e.message, t.explain(e.label, e.reason), e.label);
  assert.equal(settled[0].message, 'not run: the user rejected this call');

  // Cancelled, and interrupted after a restart.
  const cancelled = await driver.run([{ id: 'c', tool: 'rfd_draft' }], async () => 'never', { signal: AbortSignal.abort() });
  assert.equal(cancelled[0].entries[0].message, t.explain('c', { kind: 'cancelled' }));
  const hanging = driver.run([{ id: 'h', tool: 'rfd_draft' }], () => new Promise(() => {}));
  hanging.catch(() => {});
  await quiet();
  const state = driver.scheduler.unfinished();
  const resumed = Driver.resume(policy, state, { started: 'interrupt', execute: async () => 'again' });
  const [restored] = await Promise.all(resumed.batches);
  assert.deepEqual(restored[0].entries[0].reason, { kind: 'interrupted' });
  assert.equal(restored[0].entries[0].message, t.explain('h', { kind: 'interrupted' }));
  driver.dispose();
  resumed.driver.dispose();

  // The gate's CallSettledError has the same text, whether the driver settled the call or the
  // gate cancelled it before it was submitted.
  const gate = new Gate(policy, { decide: (label) => (label === 'no' ? 'reject' : 'approve') });
  await assert.rejects(gate.call('rfd_draft', 'no', {}, async () => 'x'), (e) => e.message === t.explain('no', { kind: 'rejected' }) && String(e) === e.message);
  const open = gate.call('rfd_draft', 'open', {}, async () => 'x');
  gate.cancel();
  await assert.rejects(open, (e) => e.message === t.explain('open', { kind: 'cancelled' }));
});

test('inspect says why each approved entry waits, in a sentence; running ones have none', async () => {
  const { sched } = await setup();
  const b = sched.submit([
    { id: 'w1', tool: 'fs_write', args: { path: 'a.txt' } },
    { id: 'w2', tool: 'fs_write', args: { path: 'a.txt' } },
    { id: 'r1', tool: 'fs_read', args: { path: 'a.txt' } },
    { id: 'w3', tool: 'fs_write', args: { path: 'b.txt' } },
  ]);
  const [w1] = b.entries();
  sched.step({ approve: [w1] });
  const pending = sched.inspect(b.batch);
  assert.equal(pending[0].why, 'waiting: 3 calls of this batch still need a decision (nothing of a batch starts before every call is approved or declined)');
  assert.equal(pending[1].why, undefined, 'a pending entry does not wait: it is not approved');
  sched.step({ approve: b.entries().subarray(1) });
  const st = sched.inspect(b.batch);
  assert.deepEqual(st.map((s) => [s.label, s.state.kind, only(s.keys)]), [['w1', 'running', 'fs:a.txt'], ['w2', 'approved', 'fs:a.txt'], ['r1', 'approved', 'fs:a.txt'], ['w3', 'running', 'fs:b.txt']]);
  assert.equal(st[0].why, undefined);
  assert.equal(st[1].why, 'waiting: fs:a.txt is full (1 of 1 running: w1)');
  assert.equal(st[2].why, 'waiting: behind w2, which comes first on fs:a.txt');
  // The driver's view is the scheduler's.
  assert.equal(st[3].why, undefined);
});

test('a saved state carries each call\'s keys: JSON round trip, resume, older states without them or with 0.2\'s key', async () => {
  const { policy, sched } = await setup();
  const b = sched.submit([
    { id: 'w1', tool: 'fs_write', args: { path: 'a.txt' } },
    { id: 'w2', tool: 'fs_write', args: { path: 'a.txt' } },
    { id: 'w3', tool: 'fs_write', args: 5 },
    { id: 'd', tool: 'rfd_draft', args: { path: 'a.txt' } },
  ]);
  sched.step({ approve: b.entries() });
  const state = sched.unfinished();
  // A template call whose arguments made no key saves the template's own text; a plain key's
  // call saves none.
  assert.deepEqual(state.batches[0].calls.map((c) => c.keys), [['fs:a.txt'], ['fs:a.txt'], [OWN], []]);
  assert.deepEqual(state.batches[0].calls.map((c) => 'key' in c), [false, false, false, false]);
  const text = JSON.stringify(state, (_, v) => (typeof v === 'bigint' ? `${v}n` : v));
  const back = JSON.parse(text, (_, v) => (typeof v === 'string' && /^\d+n$/.test(v) ? BigInt(v.slice(0, -1)) : v));
  const again = Scheduler.resume(policy, back, { started: 'run-again' });
  assert.deepEqual(again.unrestored, []);
  assert.deepEqual(keys(again.scheduler, b.batch), { w1: 'fs:a.txt', w2: 'fs:a.txt', w3: OWN, d: 'rfd' });

  // A state saved before keys from arguments has no keys: it resumes, the call on the
  // template's own key.
  const older = structuredClone(back);
  for (const c of older.batches[0].calls) delete c.keys;
  const old = Scheduler.resume(policy, older, { started: 'run-again' });
  assert.deepEqual(keys(old.scheduler, b.batch), { w1: OWN, w2: OWN, w3: OWN, d: 'rfd' });

  // A state saved by 0.2 has `key` (an optional string): taken as `keys: [key]`.
  const v02 = structuredClone(back);
  for (const c of v02.batches[0].calls) {
    if (c.keys.length) c.key = c.keys[0];
    delete c.keys;
  }
  v02.batches[0].calls[0].key = 'fs:c.txt';
  const fromV02 = Scheduler.resume(policy, v02, { started: 'run-again' });
  assert.deepEqual(fromV02.unrestored, []);
  assert.deepEqual(keys(fromV02.scheduler, b.batch), { w1: 'fs:c.txt', w2: 'fs:a.txt', w3: OWN, d: 'rfd' });
  assert.deepEqual(fromV02.scheduler.unfinished().batches[0].calls.map((c) => c.keys), [['fs:c.txt'], ['fs:a.txt'], [OWN], []]);

  // Keys of the wrong type, or both `key` and `keys`, are a TypeError naming the field; nothing
  // is resumed.
  for (const [change, field] of [
    [(c) => (c.keys = 5), 'state.batches[0].calls[0].keys'],
    [(c) => (c.keys = 'fs:a.txt'), 'state.batches[0].calls[0].keys'],
    [(c) => (c.keys = ['fs:a.txt', 5]), 'state.batches[0].calls[0].keys[1]'],
    [(c) => {
      delete c.keys;
      c.key = 5;
    }, 'state.batches[0].calls[0].key'],
    [(c) => (c.key = 'fs:a.txt'), 'state.batches[0].calls[0] has both keys and key'],
  ]) {
    const bad = structuredClone(back);
    change(bad.batches[0].calls[0]);
    assert.throws(() => Scheduler.resume(policy, bad, { started: 'run-again' }), (e) => e instanceof TypeError && e.message.includes(field), field);
  }
});

test('Driver.resume gives restored calls their args back with argsOf, and checks it', { timeout: 20_000 }, async () => {
  const { policy, sched } = await setup();
  const args = { w1: { path: 'a.txt', content: 'one' }, w2: { path: 'a.txt', content: 'two' } };
  const driver = Driver.of(sched);
  const first = driver.run(Object.entries(args).map(([id, a]) => ({ id, tool: 'fs_write', args: a })), () => new Promise(() => {}));
  first.catch(() => {});
  await quiet();
  const state = sched.unfinished();
  driver.dispose();
  const execute = async ({ call }) => `${call.id}: ${call.args?.content}`;
  assert.throws(() => Driver.resume(policy, state, { started: 'run-again', execute, argsOf: 5 }), (e) => e instanceof TypeError && e.message.includes('options.argsOf'));
  assert.throws(() => Driver.resume(policy, state, { started: 'run-again', execute, argsOf: () => { throw new RangeError('lost'); } }), /lost/);
  const seen = [];
  const resumed = Driver.resume(policy, state, {
    started: 'run-again',
    execute,
    argsOf: (call) => {
      seen.push([call.id, call.keys]);
      return args[call.id];
    },
    decide: (_label, call) => (call.args.path === 'a.txt' ? 'approve' : 'reject'),
  });
  assert.deepEqual(seen, [['w1', ['fs:a.txt']], ['w2', ['fs:a.txt']]]);
  const [out] = await Promise.all(resumed.batches);
  assert.deepEqual(out.map((c) => c.entries[0].value), ['w1: one', 'w2: two']);
  resumed.driver.dispose();

  // A state saved by 0.2 (`key`): argsOf sees the call with its `keys`, as this version saves it.
  const v02 = structuredClone(state);
  for (const c of v02.batches[0].calls) {
    c.key = c.keys[0];
    delete c.keys;
  }
  const calls = [];
  const again = Driver.resume(policy, v02, { started: 'run-again', execute, argsOf: (call) => (calls.push(call), args[call.id]) });
  assert.deepEqual(calls.map((c) => [c.id, c.keys, 'key' in c]), [['w1', ['fs:a.txt'], false], ['w2', ['fs:a.txt'], false]]);
  assert.deepEqual((await Promise.all(again.batches))[0].map((c) => c.entries[0].value), ['w1: one', 'w2: two']);
  again.driver.dispose();
});

test('a key set: the tool lists every key; a call takes them all, so moves sharing a file run one after the other', { timeout: 20_000 }, async () => {
  const KEY_SET = '[conversation.tools.mv]\nconcurrency = [{ key = "fs:{src}" }, { key = "fs:{dst}" }]\n';
  const { policy, sched } = await setup(KEY_SET);
  assert.deepEqual(policy.tool('mv').concurrency.map((c) => [c.key, c.limit, c.arguments]), [['fs:{src}', 1, ['src']], ['fs:{dst}', 1, ['dst']]]);

  const driver = Driver.of(sched);
  const log = [];
  const execute = async ({ label, call }) => {
    log.push(`${clock.now()} start ${label}`);
    if (label === 'ab') {
      // While ab holds fs:a and fs:b: bc waits behind it on fs:b, xy runs.
      const entries = driver.inspect()[0].entries;
      assert.deepEqual(entries.map((e) => [e.label, e.keys, e.state.kind]), [['ab', ['fs:a', 'fs:b'], 'running'], ['bc', ['fs:b', 'fs:c'], 'approved'], ['xy', ['fs:x', 'fs:y'], 'running']]);
      assert.deepEqual(entries[1].wait, { kind: 'key-full', key: 'fs:b', limit: 1, running: ['ab'] });
    }
    await sleep(label === 'xy' ? 5 : 10);
    log.push(`${clock.now()} end ${label}`);
    return `${call.args.src}->${call.args.dst}`;
  };
  const out = await driver.run(
    [
      { id: 'ab', tool: 'mv', args: { src: 'a', dst: 'b' } },
      { id: 'bc', tool: 'mv', args: { src: 'b', dst: 'c' } },
      { id: 'xy', tool: 'mv', args: { src: 'x', dst: 'y' } },
    ],
    execute,
  );
  assert.deepEqual(out.map((c) => c.entries[0].value), ['a->b', 'b->c', 'x->y']);
  const t0 = Number(log[0].split(' ')[0]);
  assert.deepEqual(log.map((l) => l.replace(/^\d+/, (n) => `${Number(n) - t0}`)), ['0 start ab', '0 start xy', '5 end xy', '10 end ab', '10 start bc', '20 end bc']);
  driver.dispose();
});
