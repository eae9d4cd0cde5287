// The in-memory store against the store contract (SHARED.md), on a virtual clock: nothing
// sleeps. Several `SharedKeys` on one store stand for several processes. Failure paths first;
// the Python package's tests/test_shared_memory.py checks the same promises.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LeaseLostError, MemoryStore, SharedKeys, SharedStoreError, StoreUnavailableError } from '../dist/shared/index.js';
import { VirtualClock } from './fixtures/virtual-clock.mjs';

const DAY = 86_400_000;
const terms = (limit = 1, delayMs = 0, leaseMs = 3000) => ({ limit, delayMs, leaseMs });

async function open(startMs = DAY, clock = new VirtualClock(0)) {
  return { clock, store: await MemoryStore.open({ clock, startMs }) };
}

/** A clock that stops for good when `kill()` is called: a process killed with SIGKILL. */
function mortal(clock) {
  let alive = true;
  return {
    clock: { now: () => clock.now(), setTimer: (at, fire) => clock.setTimer(at, () => alive && fire()) },
    kill: () => { alive = false; },
  };
}

test('memory: a start under 24 h is refused (a last grant of 0 means none)', async () => {
  await assert.rejects(MemoryStore.open({ clock: new VirtualClock(0), startMs: DAY - 1 }), RangeError);
  await assert.rejects(MemoryStore.open({ clock: new VirtualClock(0), startMs: 1.5 + DAY }), RangeError);
  await assert.rejects(MemoryStore.open({ clock: {} }), TypeError);
});

test('memory: a closed store rejects every operation with StoreUnavailableError', async () => {
  const { store } = await open();
  await store.close();
  for (const call of [() => store.request('k', 't-1', terms()), () => store.renew('k', ['t-1']), () => store.release('k', 't-1'),
    () => store.abandon('k', 't-1'), () => store.pause('k', 10), () => store.inspect('k')]) {
    await assert.rejects(call(), (e) => e instanceof StoreUnavailableError && e.store === 'memory' && /closed/.test(e.message));
  }
});

test('memory: a row no client writes is refused by the component\'s rule (SharedStoreError), and never enters the key', async () => {
  const { store } = await open();
  await assert.rejects(store.request('k', 't-1', terms(0)), (e) => e instanceof SharedStoreError && e.code === 'store-failed' && /limit 0/.test(e.message));
  assert.equal((await store.request('k', 't-2', terms(1))).state, 'granted');
});

test('memory: FIFO by arrival across clients, never over the limit; a retried request only renews', async () => {
  const { store } = await open();
  const states = [];
  for (const t of ['a-1', 'b-1', 'a-2', 'c-1']) states.push(await store.request('k', t, terms(2)));
  assert.deepEqual(states.map((s) => [s.ticket, s.state, s.seq]), [['a-1', 'granted', 1], ['b-1', 'granted', 2], ['a-2', 'waiting', 3], ['c-1', 'waiting', 4]]);
  assert.equal((await store.request('k', 'a-2', terms(2))).seq, 3, 'a retried request keeps its place');
  assert.equal(await store.release('k', 'b-1'), 'released');
  const after = await store.renew('k', ['a-2', 'c-1']);
  assert.deepEqual(after.map((s) => [s.ticket, s.state, s.grant ?? null]), [['a-2', 'granted', 3], ['c-1', 'waiting', null]]);
  assert.equal(await store.abandon('k', 'c-1'), 'withdrawn');
  assert.equal(await store.release('k', 'c-1'), 'lost');
  const seen = await store.inspect('k');
  assert.deepEqual(seen.held.map((h) => h.ticket), ['a-1', 'a-2']);
  assert.deepEqual(seen.waiting, []);
});

test('memory: a lease ends at the store when its heartbeat stops, and the next ticket is granted then, woken without polling', async () => {
  const { store, clock } = await open();
  await store.request('k', 'dead-1', terms(1, 0, 3000));
  await store.request('k', 'live-1', terms(1, 0, 3000));
  const woken = [];
  store.watch('k', () => ['live-1'], (w) => woken.push([clock.now(), ...w.states.map((s) => `${s.ticket} ${s.state}`)]));
  for (const at of [1000, 2000, 2999]) {
    await clock.runUntil(at);
    await store.renew('k', ['live-1']); // the waiter's heartbeat only
  }
  await clock.runUntil(5000);
  assert.deepEqual(woken, [[3000, 'live-1 granted']], 'granted when the dead lease ended (3000), not later');
  assert.deepEqual(await store.renew('k', ['dead-1']), [{ ticket: 'dead-1', state: 'lost' }]);
  assert.equal(await store.release('k', 'dead-1'), 'lost');
});

test('memory: a renewal extends a lease by the ticket\'s own lease', async () => {
  const { store, clock } = await open();
  await store.request('k', 'a-1', terms(1, 0, 1000));
  await clock.runUntil(900);
  await store.renew('k', ['a-1']);
  await clock.runUntil(1899);
  assert.equal((await store.inspect('k')).held[0].expiresMs, DAY + 1900);
  await clock.runUntil(1900);
  assert.deepEqual((await store.inspect('k')).held, []);
});

test('memory: the delay between grants is kept by the store: the head waits with retryMs, and is granted when it ends', async () => {
  const { store, clock } = await open();
  assert.equal((await store.request('k', 'a-1', terms(5, 100))).state, 'granted');
  const b = await store.request('k', 'b-1', terms(5, 100));
  assert.deepEqual([b.state, b.retryMs], ['waiting', 100]);
  assert.deepEqual([(await store.request('k', 'b-2', terms(5, 100))).retryMs], [null], 'only the head has a retry');
  const woken = [];
  store.watch('k', () => ['b-1', 'b-2'], (w) => woken.push([clock.now(), ...w.states.map((s) => `${s.ticket} ${s.grant}`)]));
  await clock.runUntil(1000);
  assert.deepEqual(woken, [[100, 'b-1 2'], [200, 'b-2 3']]);
});

test('memory: rate windows are kept by the store across clients: a burst at once, then the pace; a weight costs that many intervals; forgotten once rested', async () => {
  const { store, clock } = await open();
  const rated = (weight = 1) => ({ ...terms(100), rates: [{ count: 2, perMs: 1000, burst: 2 }], weight });
  const first = [];
  for (const t of ['a-1', 'b-1', 'a-2']) first.push(await store.request('k', t, rated()));
  assert.deepEqual(first.map((s) => [s.ticket, s.state, s.retryMs ?? null]), [['a-1', 'granted', null], ['b-1', 'granted', null], ['a-2', 'waiting', 500]]);
  assert.equal((await store.request('k', 'b-2', rated(2))).state, 'waiting');
  const woken = [];
  store.watch('k', () => ['a-2', 'b-2'], (w) => woken.push([clock.now(), ...w.states.map((s) => s.ticket)]));
  await clock.runUntil(1500);
  assert.deepEqual(woken, [[500, 'a-2'], [1500, 'b-2']], 'b-2 weighs 2: it waits for the window to hold 2 units (a burst of 2, empty)');
  for (const t of ['a-1', 'b-1', 'a-2', 'b-2']) await store.release('k', t);
  await clock.runUntil(2501);
  assert.deepEqual((await store.inspect('k')).arrivals, [{ count: 2, perMs: 1000, atMs: DAY + 2500, rest: 0 }], 'kept until the window rested');
  await clock.runUntil(2502);
  const gone = await store.inspect('k');
  assert.deepEqual([gone.seq, gone.arrivals, clock.next()], [0, [], undefined], 'forgotten, no timer left');
});

test('memory: rate windows no client writes are refused by the component\'s rule; SharedKeys refuses them first', async () => {
  const { store, clock } = await open();
  for (const [rates, weight, pattern] of [
    [[{ count: 0, perMs: 1000, burst: 1 }], 1, /rate window 0\/1000/],
    [[{ count: 1_000_001, perMs: 1000, burst: 1 }], 1, /rate window/],
    [[{ count: 1, perMs: 1000, burst: 2 }], 3, /weight 3/],
  ]) {
    await assert.rejects(store.request(`k-${weight}-${rates[0].count}`, 't-1', { ...terms(), rates, weight }), (e) => e instanceof SharedStoreError && e.code === 'store-failed' && pattern.test(e.message), pattern.source);
  }
  const keys = new SharedKeys(store, { clock });
  for (const [extra, pattern] of [
    [{ rates: [{ count: 1_000_001, perMs: 1000, burst: 1 }] }, /terms\.rates\[0\]\.count/],
    [{ rates: [{ count: 1, perMs: 0, burst: 1 }] }, /terms\.rates\[0\]\.perMs/],
    [{ rates: [{ count: 1, perMs: 1000, burst: 1 }, { count: 1, perMs: 1000, burst: 2 }] }, /a second time/],
    [{ rates: Array(9).fill({ count: 1, perMs: 1000, burst: 1 }) }, /at most 8/],
    [{ rates: [{ count: 1, perMs: 1000, burst: 2 }], weight: 3 }, /terms\.weight/],
    [{ weight: 2 }, /terms\.weight/],
    [{ rates: [{ count: 1, perMs: 1000, burst: 0 }] }, /burst/],
    [{ rates: [{ count: 1, perMs: 1000 }], weight: 2 }, /terms\.weight/],
  ]) {
    await assert.rejects(keys.acquire('k', { limit: 1, ...extra }), (e) => (e instanceof RangeError || e instanceof TypeError) && pattern.test(e.message), pattern.source);
  }
  await keys.close();
});

test('memory: a pause only extends, holds every client\'s grants, and its end is on the store\'s clock', async () => {
  const { store, clock } = await open();
  assert.equal(await store.pause('k', 500), DAY + 500);
  assert.equal(await store.pause('k', 100), DAY + 500);
  const b = await store.request('k', 'b-1', terms());
  assert.deepEqual([b.state, b.retryMs], ['waiting', 500]);
  const woken = [];
  store.watch('k', () => ['b-1'], (w) => woken.push(clock.now()));
  await clock.runUntil(2000);
  assert.deepEqual(woken, [500]);
});

test('memory: a key idle past its delay and pause is forgotten; before that it keeps its last grant', async () => {
  const { store, clock } = await open();
  await store.request('k', 'a-1', terms(1, 300));
  await store.release('k', 'a-1');
  assert.equal((await store.inspect('k')).grants, 1);
  assert.equal((await store.request('k', 'a-2', terms(1, 300))).state, 'waiting', 'the delay outlives the release');
  await store.abandon('k', 'a-2');
  await clock.runUntil(300);
  assert.deepEqual([(await store.inspect('k')).seq, clock.next()], [0, undefined], 'forgotten, no timer left');
});

test('memory: the store\'s time base does not matter (+24 h and +31 years give the same story)', async () => {
  const story = async (startMs) => {
    const { store, clock } = await open(startMs);
    const log = [];
    store.watch('k', () => ['b-1', 'c-1'], (w) => log.push(`${clock.now()} ${w.states.map((s) => `${s.ticket} ${s.state}`).join()}`));
    await store.request('k', 'a-1', terms(1, 50, 1000));
    await store.request('k', 'b-1', terms(1, 50, 1000));
    await store.request('k', 'c-1', terms(1, 50, 1000));
    await clock.runUntil(10);
    await store.release('k', 'a-1');
    await store.pause('k', 200);
    await clock.runUntil(900);
    await store.renew('k', ['c-1']);
    await clock.runUntil(3000);
    return log;
  };
  const base = await story(DAY);
  // b-1's lease (granted at 210, never renewed) ends at 1210 and c-1 moves up; c-1's, renewed by
  // its grant, at 2210.
  assert.deepEqual(base, ['210 b-1 granted', '1210 b-1 lost,c-1 granted', '2210 c-1 lost']);
  assert.deepEqual(await story(1_000_000_000_000 + 7), base);
});

test('memory: two SharedKeys on one store are two processes: FIFO across them, and a killed holder\'s permit comes back within one lease', { timeout: 10_000 }, async () => {
  const clock = new VirtualClock(0);
  const stop = clock.auto();
  try {
    const store = await MemoryStore.open({ clock, startMs: DAY });
    const a = mortal(clock);
    const keysA = new SharedKeys(store, { clock: a.clock, leaseMs: 3000, owner: 'a' });
    const keysB = new SharedKeys(store, { clock, leaseMs: 3000, owner: 'b' });
    const held = await keysA.acquire('k', { limit: 1 });
    let grantedAt;
    const waiting = keysB.acquire('k', { limit: 1 }).then((p) => { grantedAt = clock.now(); return p; });
    await clock.sleep(10_000);
    assert.equal(grantedAt, undefined, 'the live holder\'s heartbeat keeps its permit');
    assert.equal(held.signal.aborted, false);
    const killedAt = clock.now();
    a.kill();
    const permit = await waiting;
    assert.ok(grantedAt - killedAt <= 3000, `granted ${grantedAt - killedAt} ms after the kill (lease 3000 ms)`);
    assert.equal(permit.grant, 2);
    assert.equal(await permit.release(), 'released');
    await keysB.close();
    await store.close();
  } finally {
    stop();
  }
});

test('memory: a permit whose ticket the store dropped aborts with LeaseLostError at the next heartbeat', { timeout: 10_000 }, async () => {
  const clock = new VirtualClock(0);
  const stop = clock.auto();
  try {
    const store = await MemoryStore.open({ clock, startMs: DAY });
    const keys = new SharedKeys(store, { clock, leaseMs: 3000, owner: 'a' });
    const permit = await keys.acquire('k', { limit: 1 });
    await store.release('k', permit.ticket); // as if its lease had ended at the store
    const error = await new Promise((resolve) => permit.signal.addEventListener('abort', () => resolve(permit.signal.reason), { once: true }));
    assert.ok(error instanceof LeaseLostError);
    await keys.close();
    await store.close();
  } finally {
    stop();
  }
});
