// The Driver on shared keys (SHARED.md, "What the driver does"), on a real SQLite store. Failure
// paths first: no store given, the store unreachable, cancellation and dispose while acquiring,
// a lease lost mid-execution, executions that throw or hit a rate limit; then several processes
// running the Driver on one database file, one of them killed with SIGKILL mid-execution.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CallSettledError, DisposedError, Driver, Gate, RateLimitedError, Scheduler, Turnstile, runBatch } from '../dist/index.js';
import { LeaseLostError, SharedKeys, SqliteStore, StoreUnavailableError } from '../dist/shared/index.js';
import { maxOverlap, records, tempDir, worker } from './fixtures/shared-harness.mjs';

const DRIVER_WORKER = new URL('./fixtures/shared-driver-worker.mjs', import.meta.url).pathname;

const CONFIG = `
[conversation.tools.gh]
concurrency = { key = "github", limit = 2, shared = true }
[conversation.tools.local]
concurrency = 1
`;

async function policyOf(text = CONFIG) {
  const t = await Turnstile.load();
  return t.resolve([{ name: 'test', text }]);
}

/** A store on a fresh file, SharedKeys over it, and a driver with them; all closed at the end. */
async function setup(t, { leaseMs = 3000, text } = {}) {
  const path = join(tempDir(t), 'shared.sqlite');
  const store = await SqliteStore.open({ path });
  const keys = new SharedKeys(store, { leaseMs, owner: 'driver' });
  const driver = new Driver(new Scheduler(await policyOf(text)), { sharedKeys: keys });
  t.after(async () => {
    driver.dispose();
    await keys.close();
    await store.close();
  });
  return { path, store, keys, driver };
}

/** Polls `check` (async) until it returns true, failing after `ms`. */
async function until(check, what, ms = 5000) {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

const counts = async (store, key = 'github') => {
  const k = await store.inspect(key);
  return { held: k.held.length, waiting: k.waiting.length };
};

test('a policy with a shared key needs sharedKeys: a TypeError at construction naming the keys', async () => {
  const policy = await policyOf();
  const sched = new Scheduler(policy);
  assert.throws(() => new Driver(sched), (e) => e instanceof TypeError && e.message.includes('"github"') && e.message.includes('sharedKeys'));
  assert.throws(() => Driver.of(sched), TypeError);
  await assert.rejects(runBatch(sched, [{ id: 'g', tool: 'gh' }], async () => 1), TypeError);
  assert.throws(() => new Driver(sched, { sharedKeys: {} }), (e) => e instanceof TypeError && e.message.includes('options.sharedKeys'));
  assert.throws(() => new Driver(sched, { shared: 1 }), TypeError);
  // Local keys need no store.
  const local = new Driver(new Scheduler(await policyOf('[conversation.tools.local]\nconcurrency = 1\n')));
  local.dispose();
  sched.dispose();
});

test('the store unreachable fails only the shared entries, with the typed error; local keys keep working', async (t) => {
  const { store, driver } = await setup(t);
  await store.close();
  const ran = [];
  const outcomes = await driver.run(
    [{ id: 'g1', tool: 'gh' }, { id: 'l1', tool: 'local' }, { id: 'g2', tool: 'gh' }, { id: 'l2', tool: 'local' }],
    async ({ label }) => {
      ran.push(label);
      return label;
    },
  );
  assert.deepEqual(ran, ['l1', 'l2']);
  const byId = Object.fromEntries(outcomes.map((c) => [c.id, c.entries[0]]));
  for (const id of ['g1', 'g2']) {
    const o = byId[id];
    assert.equal(o.status, 'settled');
    assert.deepEqual(o.reason, { kind: 'failed' });
    assert.equal(typeof o.message, 'string');
    assert.ok(o.error instanceof StoreUnavailableError, `${id}: ${o.error}`);
    assert.equal(o.error.code, 'store-unavailable');
  }
  assert.deepEqual([byId.l1.status, byId.l2.status], ['ok', 'ok']);
  assert.equal(driver.liveBatches, 0);
});

test('cancelling a batch while it waits for a permit withdraws the request: no ticket is left at the store', async (t) => {
  const { path, store, driver } = await setup(t);
  // Another process holds both permits of the key.
  const other = await SqliteStore.open({ path });
  const otherKeys = new SharedKeys(other, { owner: 'other' });
  t.after(async () => { await otherKeys.close(); await other.close(); });
  const held = [await otherKeys.acquire('github', { limit: 2 }), await otherKeys.acquire('github', { limit: 2 })];
  const controller = new AbortController();
  let ran = 0;
  const batch = driver.run([{ id: 'g1', tool: 'gh' }, { id: 'g2', tool: 'gh' }], async () => ran++, { signal: controller.signal });
  await until(async () => (await counts(store)).waiting === 2, 'two waiting requests');
  const statuses = driver.inspect()[0].entries.map((e) => [e.label, e.state.kind, e.wait?.kind]);
  assert.deepEqual(statuses, [['g1', 'acquiring', 'permit-requested'], ['g2', 'acquiring', 'permit-requested']]);
  controller.abort();
  const outcomes = await batch;
  assert.deepEqual(outcomes.map((c) => [c.entries[0].status, c.entries[0].reason?.kind]), [['settled', 'cancelled'], ['settled', 'cancelled']]);
  await until(async () => (await counts(store)).waiting === 0, 'the requests withdrawn');
  assert.equal(ran, 0);
  // The other process's permits are untouched, and the next grant goes to nobody of ours.
  assert.deepEqual(await counts(store), { held: 2, waiting: 0 });
  for (const p of held) await p.release();
  assert.deepEqual(await counts(store), { held: 0, waiting: 0 });
});

test('permits granted to entries that never start are abandoned, never released', async (t) => {
  const path = join(tempDir(t), 'shared.sqlite');
  const store = await SqliteStore.open({ path });
  const real = new SharedKeys(store, { owner: 'driver', leaseMs: 600 });
  const ends = [];
  let openGate;
  const gate = new Promise((resolve) => { openGate = resolve; });
  let calls = 0;
  // g1's grant reaches the driver only when the test opens the gate; g2's at once.
  const keys = {
    acquire: async (key, terms) => {
      const first = calls++ === 0;
      const permit = await real.acquire(key, terms);
      for (const how of ['abandon', 'release']) {
        const original = permit[how].bind(permit);
        permit[how] = () => { ends.push(`${first ? 'g1' : 'g2'} ${how}`); return original(); };
      }
      if (first) await gate;
      return permit;
    },
    pause: (key, ms) => real.pause(key, ms),
  };
  const driver = new Driver(new Scheduler(await policyOf()), { sharedKeys: keys });
  t.after(async () => { driver.dispose(); await real.close(); await store.close(); });
  const controller = new AbortController();
  let ran = 0;
  const batch = driver.run([{ id: 'g1', tool: 'gh' }, { id: 'g2', tool: 'gh' }], async () => ran++, { signal: controller.signal });
  await until(() => driver.inspect()[0]?.entries[1].state.kind === 'granted', 'g2 granted, waiting for g1');
  assert.deepEqual(driver.inspect()[0].entries.map((e) => [e.state.kind, e.wait?.kind]), [['acquiring', 'permit-requested'], ['granted', 'permit-granted']]);
  controller.abort();
  const outcomes = await batch;
  assert.deepEqual(outcomes.map((c) => c.entries[0].reason?.kind), ['cancelled', 'cancelled']);
  // g2 was granted and never started; g1's grant arrives after its request was given back.
  openGate();
  await until(async () => ends.length === 2 && (await counts(store)).held === 0, 'both permits given back');
  assert.deepEqual(ends.sort(), ['g1 abandon', 'g2 abandon']);
  assert.equal(ran, 0);
});

test('dispose while acquiring withdraws every request, and while running gives every permit back', async (t) => {
  const { path, store, keys, driver } = await setup(t);
  const other = await SqliteStore.open({ path });
  const otherKeys = new SharedKeys(other, { owner: 'other' });
  t.after(async () => { await otherKeys.close(); await other.close(); });
  const held = await otherKeys.acquire('github', { limit: 2 });
  let signal;
  const batch = driver.run([{ id: 'g1', tool: 'gh' }, { id: 'g2', tool: 'gh' }], (run) => {
    signal = run.signal;
    assert.ok(run.permit, 'the execution sees its permit');
    return new Promise(() => {}); // never ends by itself
  });
  await until(async () => { const c = await counts(store); return c.held === 2 && c.waiting === 1; }, 'g1 running, g2 waiting');
  assert.deepEqual(keys.inspect(), [{ key: 'github', waiting: 1, held: 1 }]);
  driver.dispose();
  await assert.rejects(batch, DisposedError);
  assert.ok(signal.aborted);
  await until(async () => { const c = await counts(store); return c.held === 1 && c.waiting === 0; }, 'g1 released and g2 withdrawn');
  assert.deepEqual(keys.inspect(), []);
  await held.release();
});

test('a lost lease aborts the execution with LeaseLostError; the entry fails and nothing stays held', async (t) => {
  const { path, store, driver } = await setup(t, { leaseMs: 300 });
  const outcome = driver.run([{ id: 'g1', tool: 'gh' }], ({ signal }) => new Promise((resolve, reject) => {
    signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  }));
  await until(async () => (await counts(store)).held === 1, 'g1 holding its permit');
  // The store forgets the ticket (as a store restarted empty would): the next heartbeat learns it.
  const Database = (await import('better-sqlite3')).default;
  const raw = new Database(path);
  raw.exec("DELETE FROM turnstile_shared_tickets WHERE key = 'github'");
  raw.close();
  const [call] = await outcome;
  assert.equal(call.entries[0].status, 'failed');
  assert.ok(call.entries[0].error instanceof LeaseLostError, String(call.entries[0].error));
  assert.deepEqual(await counts(store), { held: 0, waiting: 0 });
});

test('an execution that throws gives its permit back; a rate limit pauses the key at the store and runs again', async (t) => {
  const { store, driver } = await setup(t);
  // The store forgets the key once it is idle, so what reached it is counted on the way.
  const pauses = [];
  const requests = [];
  const [pause, request] = [store.pause.bind(store), store.request.bind(store)];
  store.pause = (key, ms) => { pauses.push([key, ms]); return pause(key, ms); };
  store.request = (key, ticket, terms) => { requests.push(key); return request(key, ticket, terms); };
  let tries = 0;
  const outcomes = await driver.run([{ id: 'bad', tool: 'gh' }, { id: 'limited', tool: 'gh' }], ({ label }) => {
    if (label === 'bad') throw new Error('boom');
    if (tries++ === 0) return Promise.reject(new RateLimitedError(200));
    return Promise.resolve('second try');
  });
  assert.equal(outcomes[0].entries[0].status, 'failed');
  assert.deepEqual([outcomes[1].entries[0].status, outcomes[1].entries[0].value], ['ok', 'second try']);
  assert.equal(pauses.length, 1, 'the 429 paused the key at the store');
  assert.equal(pauses[0][0], 'github');
  assert.ok(requests.length >= 3, `requests ${requests.length}: bad, limited, limited again`);
  await until(async () => { const c = await counts(store); return c.held === 0 && c.waiting === 0; }, 'every permit given back');
});

test('three processes run the Driver on one SQLite file, limit 2: never more than 2 at once, written order in each; one killed mid-execution', { timeout: 60000 }, async (t) => {
  const path = join(tempDir(t), 'shared.sqlite');
  const dir = tempDir(t);
  const leaseMs = 1200;
  const startAt = Date.now() + 2500;
  const base = { store: { kind: 'sqlite', path }, limit: 2, leaseMs, calls: 5, holdMs: 40, startAt };
  const victim = worker(t, { ...base, name: 'v', log: join(dir, 'v.jsonl'), hang: 'v-0' }, DRIVER_WORKER);
  const others = ['a', 'b'].map((name) => worker(t, { ...base, name, log: join(dir, `${name}.jsonl`) }, DRIVER_WORKER));
  await victim.waitFor((e) => e.event === 'started' && e.label === 'v-0', 20000);
  const killedMs = Date.now();
  victim.child.kill('SIGKILL');
  await victim.exited;
  for (const w of others) await w.done(40000);
  for (const w of others) assert.deepEqual(w.events.find((e) => e.event === 'outcomes').statuses, ['ok', 'ok', 'ok', 'ok', 'ok']);
  const recs = records(dir);
  // The victim's executions stop when it dies; its permit stays held at the store until its lease ends.
  const open = recs.filter((r) => r.name === 'v' && r.event === 'start' && !recs.some((e) => e.event === 'end' && e.label === r.label));
  const all = [...recs, ...open.map((r) => ({ ...r, event: 'end', t: killedMs }))];
  assert.ok(maxOverlap(all) <= 2, `at most 2 running at once across processes, got ${maxOverlap(all)}`);
  for (const name of ['a', 'b']) {
    const starts = recs.filter((r) => r.name === name && r.event === 'start').map((r) => r.label);
    assert.deepEqual(starts, [0, 1, 2, 3, 4].map((i) => `${name}-${i}`), `${name} starts in written order`);
  }
  // While the victim's lease held one permit, the others shared the other one.
  const afterKill = recs.filter((r) => r.event === 'start' && r.name !== 'v' && r.t > killedMs).map((r) => r.t);
  assert.ok(afterKill.length > 0);
  const store = await SqliteStore.open({ path });
  t.after(() => store.close());
  // Its tickets' leases end (an expired row stays until the next operation on the key purges
  // it, and the others may have finished before the lease ended: count live tickets only).
  const live = async () => { const k = await store.inspect('github'); return [...k.held, ...k.waiting].filter((x) => x.expiresMs > k.nowMs).length; };
  await until(async () => (await live()) === 0, 'the victim\'s lease ended', leaseMs + 5000);
});

test('a shared key template asks the store for the key each call made from its arguments', async (t) => {
  const { store, driver } = await setup(t, { text: '[conversation.tools.write]\nconcurrency = { key = "fs:{path}", limit = 1, shared = true }\n' });
  const requests = [];
  const request = store.request.bind(store);
  store.request = (key, ticket, terms) => { requests.push(key); return request(key, ticket, terms); };
  let running = 0;
  let most = 0;
  const outcomes = await driver.run(
    [{ id: 'a1', tool: 'write', args: { path: 'a' } }, { id: 'b1', tool: 'write', args: { path: 'b' } }, { id: 'a2', tool: 'write', args: { path: 'a' } }],
    async () => {
      most = Math.max(most, ++running);
      await sleep(20);
      running--;
    },
  );
  assert.deepEqual(outcomes.map((c) => c.entries[0].status), ['ok', 'ok', 'ok']);
  assert.equal(most, 2, 'fs:a and fs:b overlap');
  assert.deepEqual(requests.sort(), ['fs:a', 'fs:a', 'fs:b']);
});

test('the Gate takes sharedKeys for its own driver; a denied permit rejects with CallSettledError caused by the store error', async (t) => {
  const path = join(tempDir(t), 'shared.sqlite');
  const store = await SqliteStore.open({ path });
  const keys = new SharedKeys(store, { owner: 'gate' });
  const policy = await policyOf();
  assert.throws(() => new Gate(policy), (e) => e instanceof TypeError && e.message.includes('"github"'));
  const gate = new Gate(policy, { sharedKeys: keys });
  t.after(async () => { gate.driver.dispose(); await keys.close(); });
  assert.equal(await gate.call('gh', 'c1', {}, async () => 'ran'), 'ran');
  await store.close();
  await assert.rejects(gate.call('gh', 'c2', {}, async () => 'ran'), (e) => e instanceof CallSettledError && e.reason.kind === 'failed' && e.cause instanceof StoreUnavailableError);
});

test('Driver.resume needs sharedKeys for a shared policy too, and disposes what it made when it throws', async (t) => {
  const { keys, driver } = await setup(t);
  const policy = await policyOf();
  const state = driver.scheduler.unfinished();
  assert.throws(() => Driver.resume(policy, state, { started: 'interrupt', execute: async () => 1 }), (e) => e instanceof TypeError && e.message.includes('"github"'));
  const resumed = Driver.resume(policy, state, { started: 'interrupt', execute: async () => 1, sharedKeys: keys });
  assert.equal(resumed.driver.sharedKeys, keys);
  resumed.driver.dispose();
});

test('Driver.pause on a shared key pauses it at the store too, for every process', async (t) => {
  const { store, driver } = await setup(t);
  await driver.pause('github', 5000);
  const k = await store.inspect('github');
  assert.ok(k.pausedUntilMs >= k.nowMs + 4000, `paused until ${k.pausedUntilMs - k.nowMs} ms from now`);
  await driver.pause('local', 10); // a local key: the store is not asked
  assert.equal((await store.inspect('local')).pausedUntilMs, 0);
});

test('the component decides the store pause: a 429 past max_wait pauses nothing at the store; a pause of a template-made shared key does', async (t) => {
  const { store, driver } = await setup(t, { text: '[conversation.tools.gh]\nconcurrency = { key = "github", limit = 2, shared = true }\n\n[conversation.tools.write]\nconcurrency = { key = "fs:{path}", limit = 1, shared = true }\n' });
  // Ten minutes is past the default max_wait (5 minutes): settled at once, no pause anywhere.
  const [limited] = await driver.run([{ id: 'far', tool: 'gh' }], () => Promise.reject(new RateLimitedError(600_000)));
  assert.deepEqual([limited.entries[0].status, limited.entries[0].reason?.kind], ['settled', 'rate-limited']);
  assert.equal((await store.inspect('github')).pausedUntilMs, 0, 'a wait the component refused does not pause the store');
  // A key made from a shared template pauses at the store like a configured one.
  const outcomes = await driver.run([{ id: 'w', tool: 'write', args: { path: 'a' } }], async () => {
    await driver.pause('fs:a', 5000);
  });
  assert.equal(outcomes[0].entries[0].status, 'ok');
  await until(async () => { const k = await store.inspect('fs:a'); return k.pausedUntilMs >= k.nowMs + 4000; }, 'fs:a paused at the store');
});
