// Shared keys on Redis: the multi-process scenarios (fixtures/shared-scenarios.mjs) against a
// real redis-server this file starts on a free loopback port, and the Redis store's failure
// paths (no server, a server that stops answering and comes back). Without redis-server every
// test here is reported skipped, with the reason; never passed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkCase, grantTable } from './fixtures/grant-table.mjs';
import { setTimeout as sleep } from 'node:timers/promises';
import { RedisStore, SharedKeys, StoreUnavailableError } from '../dist/shared/index.js';
import { redisMissing, startRedis, worker } from './fixtures/shared-harness.mjs';
import { scenarios } from './fixtures/shared-scenarios.mjs';

const missing = redisMissing();
if (missing) console.log(`# SKIPPING the Redis tests: ${missing}`);
const skip = missing ?? false;

async function setup(t) {
  const server = await startRedis(t);
  return { server, spec: { kind: 'redis', url: server.url }, open: () => RedisStore.open({ url: server.url }) };
}

test('redis: no server on the port is StoreUnavailableError, within the timeout', async () => {
  const started = Date.now();
  // Port 1 on loopback: nothing listens there.
  await assert.rejects(RedisStore.open({ url: 'redis://127.0.0.1:1', opTimeoutMs: 500 }), (e) => e instanceof StoreUnavailableError && e.store === 'redis');
  assert.ok(Date.now() - started < 3000);
});

test('redis: a server that stops answering: typed errors, no double grant when it comes back', { skip, timeout: 30000 }, async (t) => {
  const { server, spec } = await setup(t);
  const leaseMs = 1500;
  const store = await RedisStore.open({ url: server.url, opTimeoutMs: 200 });
  const keys = new SharedKeys(store, { leaseMs, owner: 'test' });
  t.after(async () => { await keys.close(); await store.close(); });
  const permit = await keys.acquire('k', { limit: 1 });
  const other = worker(t, { store: spec, key: 'k', limit: 1, leaseMs: 3000, name: 'other' });
  await other.waitFor((e) => e.event === 'requested');
  // Unreachable for less than a heartbeat (lease / 3): requests fail with the typed error, the
  // permit holds (one renewal at most failed; the second in a row gives it up).
  server.stop();
  const stoppedAt = Date.now();
  await assert.rejects(keys.acquire('elsewhere', { limit: 1 }), (e) => e instanceof StoreUnavailableError);
  await sleep(leaseMs / 4 - (Date.now() - stoppedAt));
  server.cont();
  await sleep(leaseMs);
  assert.equal(permit.signal.aborted, false, 'the permit survived a short outage');
  assert.equal(other.events.find((e) => e.event === 'granted'), undefined, 'nothing was granted twice');
  // Unreachable for longer: the permit is given up before its lease can end in the store.
  server.stop();
  const lostAt = await new Promise((resolve) => permit.signal.addEventListener('abort', () => resolve(Date.now()), { once: true }));
  assert.ok(permit.signal.reason instanceof StoreUnavailableError);
  server.cont();
  const granted = await other.waitFor((e) => e.event === 'granted', leaseMs + 5000);
  assert.ok(granted.grantedMs >= lostAt, 'the other process was granted only after this one gave up');
  await other.done();
});

// SHARED.md's table: a Redis restarted with no data (no `appendonly`) forgets every ticket. Its
// holders learn at their next renewal; a request made before that may be granted beside them.
test('redis: a server restarted empty: the holder learns at its next heartbeat, a new request is granted', { skip, timeout: 30000 }, async (t) => {
  const { server, spec } = await setup(t);
  const leaseMs = 900;
  const holder = worker(t, { store: spec, key: 'k', limit: 1, leaseMs, name: 'holder', hang: true });
  await holder.waitFor((e) => e.event === 'granted');
  await server.restartEmpty();
  const restartedMs = Date.now();
  const lost = await holder.waitFor((e) => e.event === 'lost', leaseMs + 5000);
  const learnedMs = Date.now() - restartedMs;
  // LeaseLostError when its next renewal finds the ticket gone; StoreUnavailableError when the
  // restart took longer than a renewal period and the holder gave up first (a loaded machine).
  assert.ok(['LeaseLostError', 'StoreUnavailableError'].includes(lost.error), JSON.stringify(lost));
  assert.ok(learnedMs <= leaseMs + 2000, `learned ${learnedMs} ms after the restart (lease ${leaseMs} ms)`);
  const next = worker(t, { store: spec, key: 'k', limit: 1, leaseMs, name: 'next' });
  const granted = await next.waitFor((e) => e.event === 'granted', 5000);
  assert.equal(granted.grant, 1, 'the key starts again: the server has no history');
  await next.done();
});

// The grant rule's table (tests/shared/grant-rule.txt), which the engine's rule (and so the
// SQLite stores) is tested against too, run against the Redis script: each case is written into
// Redis as the script keeps it, relative to the server's clock, then one `renew` of the head.
test('redis: the script grants as the shared table says', { skip, timeout: 30000 }, async (t) => {
  const { server } = await setup(t);
  const store = await RedisStore.open({ url: server.url, prefix: 'table' });
  const Redis = (await import('ioredis')).default;
  const raw = new Redis(server.url);
  t.after(async () => { raw.disconnect(); await store.close(); });
  for (const [i, c] of grantTable().entries()) {
    if (c.exact) continue; // on the millisecond: Redis's TIME cannot be set
    const key = `case-${i}`;
    const base = `table:{${key}}`;
    const [secs, micros] = await raw.time();
    const now = Number(secs) * 1000 + Math.floor(Number(micros) / 1000);
    const far = now + 600_000;
    await raw.hset(`${base}:state`, 'seq', c.held + 1, 'grants', c.held, 'last_grant_ms', c.since === null ? 0 : now - c.since, 'paused_until_ms', c.pause === null ? 0 : now + c.pause);
    for (const a of c.arrivals) await raw.hset(`${base}:state`, `r:${a.count}/${a.perMs}`, `${now + a.ms} ${a.rest}`);
    for (let h = 1; h <= c.held; h++) {
      await raw.hset(`${base}:tickets`, `h${h}`, `${h} 1 0 600000 ${now} ${h} chan`);
      await raw.zadd(`${base}:held`, h, `h${h}`);
      await raw.zadd(`${base}:leases`, far, `h${h}`);
    }
    if (c.limit !== null) {
      const rates = c.rates.length ? c.rates.map((w) => `${w.count}/${w.perMs}/${w.burst}`).join(',') : '-';
      await raw.hset(`${base}:tickets`, 'w', `${c.held + 1} ${c.limit} ${c.delay} 600000 0 0 chan ${c.weight} ${rates}`);
      await raw.zadd(`${base}:queue`, c.held + 1, 'w');
      await raw.zadd(`${base}:leases`, far, 'w');
    }
    const states = await store.renew(key, c.limit === null ? [] : ['w']);
    checkCase(c, states, await store.inspect(key), now);
  }
});

test('redis: idle keys leave the server: 5,000 made keys, all ended, leave Redis keys only for the live ones', { skip, timeout: 120000 }, async (t) => {
  const { server } = await setup(t);
  const store = await RedisStore.open({ url: server.url, prefix: 'idle' });
  const keys = new SharedKeys(store, { leaseMs: 300, owner: 'test' });
  const Redis = (await import('ioredis')).default;
  const raw = new Redis(server.url);
  t.after(async () => { raw.disconnect(); await keys.close(); await store.close(); });
  const live = await Promise.all(['live:1', 'live:2', 'live:3'].map((key) => keys.acquire(key, { limit: 1 })));
  for (let i = 0; i < 5000; i++) {
    const permit = await keys.acquire(`api:host-${i}`, { limit: 2, delayMs: i % 2 ? 0 : 1 });
    await permit.release();
  }
  await keys.pause('paused', 400);
  // A process that died holding a ticket: nobody touches its key again.
  await store.request('dead', 'gone-1', { limit: 1, delayMs: 0, leaseMs: 300 });
  await sleep(600); // the pause, the last delays and the dead lease end: their keys expire
  const tags = async () => [...new Set((await raw.keys('idle:*')).map((k) => k.match(/\{(.*)\}/)[1]))].sort();
  assert.deepEqual(await tags(), ['live:1', 'live:2', 'live:3']);
  assert.equal(await raw.dbsize(), 3 * 4, 'state, leases, tickets and held of each live key (no queue: nothing waits)');
  for (const permit of live) await permit.release();
  assert.deepEqual(await tags(), []);
  assert.equal(await raw.dbsize(), 0);
});

scenarios('redis', setup, skip);
