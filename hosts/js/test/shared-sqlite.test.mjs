// Shared keys on SQLite: the multi-process scenarios (fixtures/shared-scenarios.mjs) on one
// database file, and the SQLite store's own failure paths.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { SharedKeys, SharedStoreError, SqliteStore, StoreSplitError, StoreUnavailableError } from '../dist/shared/index.js';
import { sqliteNowMs } from '../dist/shared/sqlite.js';
import { tempDir, worker } from './fixtures/shared-harness.mjs';
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
  const keys = new SharedKeys(store, { owner: 'test', leaseMs: 600 });
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
  const aborted = await new Promise((resolve) => permit.signal.addEventListener('abort', () => resolve(sqliteNowMs() - permit.grantedMs), { once: true }));
  raw.exec('COMMIT');
  raw.close();
  assert.ok(permit.signal.reason instanceof StoreUnavailableError);
  assert.ok(aborted < 600, `given up ${aborted} ms after the grant, before the lease (600 ms) could end`);
  await sleep(10);
  await keys.close();
});

test('sqlite: a path that opens a private database is refused', async () => {
  for (const path of ['', ':memory:']) {
    await assert.rejects(SqliteStore.open({ path }), (e) => e instanceof RangeError && /private database/.test(e.message) && /nothing would be shared/.test(e.message), JSON.stringify(path));
  }
});

test('sqlite: a file of schema 1 (before 0.3, on the wall clock) is refused, naming both versions', async (t) => {
  const path = join(tempDir(t), 'old.sqlite');
  const Database = (await import('better-sqlite3')).default;
  const raw = new Database(path);
  raw.exec("CREATE TABLE turnstile_shared_meta (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL); INSERT INTO turnstile_shared_meta VALUES ('schema', '1'); CREATE TABLE turnstile_shared_keys (key TEXT PRIMARY KEY NOT NULL, seq INTEGER NOT NULL DEFAULT 0)");
  raw.close();
  await assert.rejects(SqliteStore.open({ path }), (e) => e instanceof SharedStoreError && e.code === 'store-failed' && /schema 1; this package knows schema 3/.test(e.message));
});

// The file deleted, replaced or moved while a process holds a permit and another waits: both
// learn it with StoreSplitError (the holder at its next heartbeat), and a process opening the
// path afterwards (a new file) is granted only after both gave up.
for (const fault of ['deleted', 'replaced', 'moved']) {
  test(`sqlite: the file ${fault} under a holder and a waiter: StoreSplitError in both, no grant from the new file before`, { timeout: 30000 }, async (t) => {
    const dir = tempDir(t);
    const path = join(dir, 'shared.sqlite');
    const leaseMs = 900;
    const base = { store: { kind: 'sqlite', path }, key: 'k', limit: 1, leaseMs };
    const holder = worker(t, { ...base, name: 'holder', hang: true });
    await holder.waitFor((e) => e.event === 'granted');
    const waiter = worker(t, { ...base, name: 'waiter' });
    await waiter.waitFor((e) => e.event === 'requested');
    const files = ['', '-wal', '-shm'].map((s) => path + s);
    if (fault === 'deleted') for (const f of files) rmSync(f, { force: true });
    if (fault === 'moved') for (const f of files) renameSync(f, join(dir, `elsewhere${f.slice(path.length)}`));
    if (fault === 'replaced') {
      writeFileSync(join(dir, 'new.sqlite'), '');
      renameSync(join(dir, 'new.sqlite'), path);
      rmSync(path + '-wal', { force: true });
      rmSync(path + '-shm', { force: true });
    }
    const newcomer = worker(t, { ...base, name: 'newcomer' });
    const lost = await holder.waitFor((e) => e.event === 'lost', 5000);
    const failed = await waiter.waitFor((e) => e.event === 'error', 5000);
    for (const e of [lost, failed]) assert.deepEqual([e.error, e.code], ['StoreSplitError', 'store-split'], e.message);
    const granted = await newcomer.waitFor((e) => e.event === 'granted', 10000);
    assert.ok(granted.at >= lost.at && granted.at >= failed.at, `granted at ${granted.at}, the holder gave up at ${lost.at}, the waiter at ${failed.at}`);
    await newcomer.done();
  });
}

test('sqlite: a split store refuses every later call and gives nothing back', async (t) => {
  const path = join(tempDir(t), 'shared.sqlite');
  const store = await SqliteStore.open({ path });
  t.after(() => store.close());
  const keys = new SharedKeys(store, { leaseMs: 300, owner: 'test' });
  const permit = await keys.acquire('k', { limit: 1 });
  rmSync(path);
  const reason = await new Promise((resolve) => permit.signal.addEventListener('abort', () => resolve(permit.signal.reason), { once: true }));
  assert.ok(reason instanceof StoreSplitError && reason.path === path, String(reason));
  assert.equal(await permit.release(), 'lost', 'nothing is given back');
  await assert.rejects(keys.acquire('other', { limit: 1 }), StoreSplitError);
  await assert.rejects(store.inspect('k'), StoreSplitError);
  await keys.close();
});

test('sqlite: a file opened by another machine (another boot id) splits this store; the next open empties it', async (t) => {
  const path = join(tempDir(t), 'shared.sqlite');
  const store = await SqliteStore.open({ path });
  t.after(() => store.close());
  const keys = new SharedKeys(store, { leaseMs: 300, owner: 'test' });
  const permit = await keys.acquire('k', { limit: 1 });
  const Database = (await import('better-sqlite3')).default;
  const raw = new Database(path);
  raw.prepare("UPDATE turnstile_shared_meta SET value = 'another-boot' WHERE name = 'boot'").run();
  raw.close();
  const reason = await new Promise((resolve) => permit.signal.addEventListener('abort', () => resolve(permit.signal.reason), { once: true }));
  assert.ok(reason instanceof StoreSplitError && /another machine/.test(reason.message), String(reason));
  await keys.close();
  // A process of this boot opening the file now: the other boot's tickets are gone.
  const fresh = await SqliteStore.open({ path });
  t.after(() => fresh.close());
  assert.deepEqual((await fresh.inspect('k')).held, []);
  assert.equal(await fresh.keyCount(), 0);
});

test('sqlite: a store call waiting for another process\'s write lock does not block the event loop', { timeout: 30000 }, async (t) => {
  const path = join(tempDir(t), 'shared.sqlite');
  const store = await SqliteStore.open({ path, busyTimeoutMs: 1000 });
  t.after(() => store.close());
  const locker = spawn(process.execPath, ['-e', `const db = new (require('better-sqlite3'))(${JSON.stringify(path)}); db.exec('BEGIN IMMEDIATE'); console.log('locked'); setInterval(() => {}, 1000);`], { cwd: new URL('..', import.meta.url).pathname, stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => locker.kill('SIGKILL'));
  await new Promise((resolve) => locker.stdout.once('data', resolve));
  const keys = new SharedKeys(store, { leaseMs: 300, owner: 'test' });
  let ticks = 0;
  const interval = setInterval(() => { ticks++; }, 10);
  const started = Date.now();
  await assert.rejects(keys.acquire('k', { limit: 1 }), (e) => e instanceof StoreUnavailableError && /locked for more than 1000 ms/.test(e.message));
  const elapsed = Date.now() - started;
  clearInterval(interval);
  // About elapsed / 10 ticks when the loop runs; none at all when a busy_timeout blocks it.
  assert.ok(ticks >= elapsed / 100, `${ticks} ticks of a 10 ms interval in ${elapsed} ms`);
  locker.kill('SIGKILL');
  await new Promise((resolve) => locker.once('exit', resolve));
  const permit = await keys.acquire('k', { limit: 1 });
  assert.equal(await permit.release(), 'released');
  await keys.close();
});

test('sqlite: idle keys leave the file: 5,000 made keys, all ended, leave rows only for the live ones', { timeout: 120000 }, async (t) => {
  const path = join(tempDir(t), 'shared.sqlite');
  const store = await SqliteStore.open({ path });
  t.after(() => store.close());
  const keys = new SharedKeys(store, { leaseMs: 300, owner: 'test' });
  const live = await Promise.all(['live:1', 'live:2', 'live:3'].map((key) => keys.acquire(key, { limit: 1 })));
  for (let i = 0; i < 5000; i++) {
    const permit = await keys.acquire(`api:host-${i}`, { limit: 2, delayMs: i % 2 ? 0 : 1 });
    await permit.release();
  }
  await keys.pause('paused', 400);
  // A process that died holding a ticket: nobody touches its key again.
  await store.request('dead', 'gone-1', { limit: 1, delayMs: 0, leaseMs: 300 });
  const Database = (await import('better-sqlite3')).default;
  const raw = new Database(path, { readonly: true });
  t.after(() => raw.close());
  const count = (table) => raw.prepare(`SELECT count(*) AS n FROM ${table}`).get().n;
  // At most the last keys with a delay still running, the pause and the dead ticket's key.
  assert.ok(count('turnstile_shared_keys') <= 3 + 2 + 16, `${count('turnstile_shared_keys')} key rows`);
  await sleep(450);
  // The next writes sweep what became idle meanwhile (the pause ended, the dead lease expired).
  for (const permit of live) await store.renew(permit.key, [permit.ticket]);
  assert.deepEqual(raw.prepare('SELECT key FROM turnstile_shared_keys ORDER BY key').all().map((r) => r.key), ['live:1', 'live:2', 'live:3']);
  assert.equal(count('turnstile_shared_tickets'), 3);
  assert.equal(await store.keyCount(), 3);
  for (const permit of live) await permit.release();
  assert.equal(await store.keyCount(), 0);
  await keys.close();
});

scenarios('sqlite', setup);
