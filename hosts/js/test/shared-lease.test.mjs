// The component's shared-key rules through the package: the lease schedule as the WIT exports
// it (every bad input a typed error, never a trap), and `SharedKeys` driving it against stores
// that misbehave on purpose (renewals that fail or never answer, a request answered too late).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { SharedKeys, StoreUnavailableError } from '../dist/shared/index.js';
import { sharedInstance } from '../dist/shared/component.js';

/** The raw lease-schedule resource; a refusal is thrown with the WIT error as `payload`. */
async function schedule(leaseMs) {
  const instance = await sharedInstance();
  return { instance, raw: instance.root.shared.LeaseSchedule.create(leaseMs) };
}

const code = (f) => {
  try {
    f();
  } catch (e) {
    return e.payload?.code ?? `not a WIT error: ${e}`;
  }
  return 'accepted';
};

test('lease schedule: renewals a period after the send, one per key; give-up before the lease', async () => {
  const { raw } = await schedule(3000);
  raw.requested('a', 1n, 0n);
  raw.answered(1n);
  raw.requested('a', 2n, 400n);
  raw.answered(2n);
  let poll = raw.poll(1000n);
  assert.deepEqual(poll.renewals.map((r) => [r.key, [...r.tickets]]), [['a', [1n, 2n]]]);
  assert.equal(poll.wakeAt, 2500n);
  raw.renewFailed(poll.renewals[0].id);
  poll = raw.poll(2000n);
  assert.equal(poll.renewals.length, 1);
  poll = raw.poll(2500n);
  assert.deepEqual(poll.givenUp.map((g) => [g.ticket, g.reason]), [[1n, 'renewal-unanswered']]);
});

test('lease schedule: every bad input is a typed error and the instance keeps working', async () => {
  const instance = await sharedInstance();
  const create = (ms) => code(() => instance.root.shared.LeaseSchedule.create(ms));
  assert.equal(create(299), 'lease-out-of-range');
  assert.equal(create(3_600_001), 'lease-out-of-range');
  const { raw } = await schedule(300);
  assert.equal(code(() => raw.requested('', 1n, 0n)), 'invalid-key');
  assert.equal(code(() => raw.requested('k'.repeat(201), 1n, 0n)), 'invalid-key');
  assert.equal(code(() => raw.requested('k', 5n, 10n)), 'accepted');
  assert.equal(code(() => raw.requested('k', 5n, 10n)), 'ticket-not-new');
  assert.equal(code(() => raw.requested('k', 6n, 9n)), 'clock-went-back');
  assert.equal(code(() => raw.poll(9n)), 'clock-went-back');
  assert.equal(code(() => raw.answered(7n)), 'unknown-ticket');
  assert.equal(code(() => raw.remove(7n)), 'unknown-ticket');
  assert.equal(code(() => raw.renewed(1n)), 'unknown-renewal');
  assert.equal(code(() => raw.renewFailed(1n)), 'unknown-renewal');
  assert.equal(code(() => raw.answered(5n)), 'accepted');
  assert.equal(code(() => raw.answered(5n)), 'already-answered');
  const key = { held: 0, lastGrantMs: 0n, pausedUntilMs: 0n, arrivals: [] };
  const decide = (head, k = key) => code(() => instance.root.shared.decide({ rates: [], weight: 1, ...head }, k, 1n));
  assert.equal(decide({ limit: 0, delayMs: 0 }), 'limit-out-of-range');
  assert.equal(decide({ limit: 1, delayMs: 86_400_001 }), 'delay-out-of-range');
  assert.equal(decide({ limit: 1, delayMs: 0, rates: [{ count: 1_000_001, perMs: 1, burst: 1 }] }), 'rate-out-of-range');
  assert.equal(decide({ limit: 1, delayMs: 0, weight: 2 }), 'weight-out-of-range');
  assert.equal(decide({ limit: 1, delayMs: 0, rates: [{ count: 2, perMs: 1, burst: 1 }] }, { ...key, arrivals: [{ count: 2, perMs: 1, atMs: 0n, rest: 2 }] }), 'arrival-out-of-range');
  assert.equal(instance.broken, undefined);
});

/** A store that grants at once and answers the rest as told: `renew` by `onRenew`. */
function fakeStore({ onRenew = async (key, tickets) => tickets.map((ticket) => ({ ticket, state: 'granted', seq: 1, grant: 1, grantedMs: Date.now() })), requestDelayMs = 0 } = {}) {
  const calls = [];
  let seq = 0;
  return {
    calls,
    kind: 'fake',
    async request(key, ticket) {
      calls.push({ op: 'request', key, ticket, at: Date.now() });
      if (requestDelayMs) await sleep(requestDelayMs);
      return { ticket, state: 'granted', seq: ++seq, grant: seq, grantedMs: Date.now() };
    },
    async renew(key, tickets) {
      calls.push({ op: 'renew', key, tickets: [...tickets], at: Date.now() });
      return onRenew(key, tickets);
    },
    async release(key, ticket) { calls.push({ op: 'release', key, ticket }); return 'released'; },
    async abandon(key, ticket) { calls.push({ op: 'abandon', key, ticket }); return 'released'; },
    async pause() { return 0; },
    watch() { return { ready: Promise.resolve(), stop() {} }; },
    async inspect() { throw new Error('unused'); },
    async close() {},
  };
}

test('SharedKeys: the schedule renews each key about every lease / 3, one renew per key', async () => {
  const store = fakeStore();
  const keys = new SharedKeys(store, { leaseMs: 300, owner: 'o' });
  const a1 = await keys.acquire('a', { limit: 2 });
  const a2 = await keys.acquire('a', { limit: 2 });
  const b = await keys.acquire('b', { limit: 1 });
  await sleep(550);
  await Promise.all([a1.release(), a2.release(), b.release()]);
  const renews = store.calls.filter((c) => c.op === 'renew');
  const perKey = (key) => renews.filter((c) => c.key === key);
  assert.ok(perKey('a').length >= 3 && perKey('a').length <= 7, `renews of a: ${perKey('a').length}`);
  assert.ok(perKey('a').every((c) => c.tickets.length === 2), 'one renew names both tickets of a');
  assert.ok(perKey('b').length >= 3);
  assert.ok(!a1.signal.aborted && !b.signal.aborted);
  await sleep(250);
  assert.equal(store.calls.filter((c) => c.op === 'renew').length, renews.length, 'no renewals once nothing is held');
  await keys.close();
});

test('SharedKeys: renewals that never answer give the permit up before its lease could end', async () => {
  const store = fakeStore({ onRenew: () => new Promise(() => {}) });
  const keys = new SharedKeys(store, { leaseMs: 300, owner: 'o' });
  const permit = await keys.acquire('k', { limit: 1 });
  const sentAt = store.calls[0].at;
  const abortedAt = await new Promise((resolve) => permit.signal.addEventListener('abort', () => resolve(Date.now()), { once: true }));
  assert.ok(permit.signal.reason instanceof StoreUnavailableError);
  assert.match(permit.signal.reason.message, /renewal was not answered in time/);
  assert.ok(abortedAt - sentAt < 300, `given up ${abortedAt - sentAt} ms after the request was sent (lease 300)`);
  assert.ok(abortedAt - sentAt >= 200, `not given up early (${abortedAt - sentAt} ms)`);
  await keys.close();
});

test('SharedKeys: a failed renewal is survived once; the permit goes only when they keep failing', async () => {
  let fail = true;
  const store = fakeStore({ onRenew: async (key, tickets) => {
    if (fail) { fail = false; throw new StoreUnavailableError('fake', 'down'); }
    return tickets.map((ticket) => ({ ticket, state: 'granted', seq: 1, grant: 1, grantedMs: Date.now() }));
  } });
  const keys = new SharedKeys(store, { leaseMs: 300, owner: 'o' });
  const permit = await keys.acquire('k', { limit: 1 });
  await sleep(600);
  assert.equal(permit.signal.aborted, false);
  await permit.release();
  await keys.close();
});

test('SharedKeys: a request answered after its lease could end is given back and rejects', async () => {
  const store = fakeStore({ requestDelayMs: 320 });
  const keys = new SharedKeys(store, { leaseMs: 300, owner: 'o' });
  await assert.rejects(keys.acquire('k', { limit: 1 }), (e) => e instanceof StoreUnavailableError && /answered too late/.test(e.message));
  await sleep(10);
  const abandoned = store.calls.filter((c) => c.op === 'abandon').map((c) => c.ticket);
  assert.equal(abandoned.length, 1);
  assert.match(abandoned[0], /^o-[0-9a-f]{12}-1$/, 'the owner, the keys\' random tag, the number');
  await keys.close();
});
