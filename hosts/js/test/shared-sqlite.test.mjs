// Shared keys on SQLite: the multi-process scenarios (fixtures/shared-scenarios.mjs) on one
// database file, and the SQLite store's own failure paths.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { SharedKeys, SqliteStore, StoreUnavailableError } from '../dist/shared/index.js';
import { tempDir } from './fixtures/shared-harness.mjs';
import { scenarios } from './fixtures/shared-scenarios.mjs';

async function setup(t) {
  const path = join(tempDir(t), 'shared.sqlite');
  return { spec: { kind: 'sqlite', path }, open: () => SqliteStore.open({ path }) };
}

test('sqlite: a file that cannot be opened is StoreUnavailableError', async (t) => {
  const path = join(tempDir(t), 'missing-folder', 'shared.sqlite');
  await assert.rejects(SqliteStore.open({ path }), (e) => e instanceof StoreUnavailableError && e.code === 'store-unavailable' && /directory does not exist/.test(e.message));
});

test('sqlite: a database locked past the busy timeout is StoreUnavailableError, and works again after', async (t) => {
  const { spec: { path } } = await setup(t);
  const locker = await SqliteStore.open({ path });
  const store = await SqliteStore.open({ path, busyTimeoutMs: 200 });
  t.after(async () => { await store.close(); await locker.close(); });
  const Database = (await import('better-sqlite3')).default;
  const raw = new Database(path);
  raw.exec('BEGIN IMMEDIATE');
  const keys = new SharedKeys(store, { owner: 'test' });
  const started = Date.now();
  await assert.rejects(keys.acquire('k', { limit: 1 }), (e) => e instanceof StoreUnavailableError && /locked for more than 200 ms/.test(e.message));
  assert.ok(Date.now() - started < 2000);
  raw.exec('COMMIT');
  raw.close();
  const permit = await keys.acquire('k', { limit: 1 });
  assert.equal(await permit.release(), 'released');
  await keys.close();
});

test('sqlite: a permit whose renewals fail past its lease aborts its signal with StoreUnavailableError', async (t) => {
  const { spec } = await setup(t);
  const store = await SqliteStore.open({ path: spec.path, busyTimeoutMs: 50 });
  t.after(() => store.close());
  const keys = new SharedKeys(store, { leaseMs: 600, owner: 'test' });
  const permit = await keys.acquire('k', { limit: 1 });
  const Database = (await import('better-sqlite3')).default;
  const raw = new Database(spec.path);
  raw.exec('BEGIN IMMEDIATE');
  const aborted = await new Promise((resolve) => permit.signal.addEventListener('abort', () => resolve(Date.now() - permit.grantedMs), { once: true }));
  raw.exec('COMMIT');
  raw.close();
  assert.ok(permit.signal.reason instanceof StoreUnavailableError);
  assert.ok(aborted < 600, `given up ${aborted} ms after the grant, before the lease (600 ms) could end`);
  await sleep(10);
  await keys.close();
});

scenarios('sqlite', setup);
