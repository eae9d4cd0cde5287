// Shared keys on Redis: the multi-process scenarios (fixtures/shared-scenarios.mjs) against a
// real redis-server this file starts on a free loopback port, and the Redis store's failure
// paths (no server, a server that stops answering and comes back). Without redis-server every
// test here is reported skipped, with the reason; never passed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
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

scenarios('redis', setup, skip);
