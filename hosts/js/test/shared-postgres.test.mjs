// Shared keys on Postgres: the multi-process scenarios (fixtures/shared-scenarios.mjs) against a
// real Postgres server this file starts (fixtures/postgres-server.mjs: Debian's binaries, a fresh
// data directory, a free loopback port), and the Postgres store's own promises: the grant rule's
// table run against its functions, unique owners, idle keys forgotten, a server that stops
// answering, and one killed and restarted. Without Postgres's binaries (or pg) every test here
// is reported skipped, with the reason; never passed.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { checkCase, checkExact, grantTable } from './fixtures/grant-table.mjs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { PostgresStore, SharedKeys, SharedStoreError, StoreUnavailableError } from '../dist/shared/index.js';
import { pgMissing, startPostgres } from './fixtures/postgres-server.mjs';
import { maxOverlap, records, tempDir, worker } from './fixtures/shared-harness.mjs';
import { scenarios } from './fixtures/shared-scenarios.mjs';

const missing = pgMissing();
if (missing) console.log(`# SKIPPING the Postgres tests: ${missing}`);
const skip = missing ?? false;

// One server for the tests that do not stop it; each test gets a database of its own.
let shared;
let databases = 0;
after(async () => { for (const f of (await shared)?.cleanup ?? []) await f(); });

async function sharedServer() {
  shared ??= (async () => {
    const cleanup = [];
    const server = await startPostgres({ after: (f) => cleanup.unshift(f) });
    return { server, cleanup };
  })();
  return (await shared).server;
}

async function sql(url, text, values) {
  const pg = (await import('pg')).default;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(text, values)).rows;
  } finally {
    await client.end();
  }
}

async function setup() {
  const server = await sharedServer();
  const name = `t${++databases}`;
  await sql(server.url, `CREATE DATABASE ${name}`);
  const url = server.url.replace(/\/postgres$/, `/${name}`);
  return { server, url, spec: { kind: 'postgres', url }, open: (options = {}) => PostgresStore.open({ url, ...options }) };
}

test('postgres: no server on the port is StoreUnavailableError, within the timeout', { skip }, async () => {
  const started = Date.now();
  // Port 1 on loopback: nothing listens there.
  await assert.rejects(PostgresStore.open({ url: 'postgres://postgres@127.0.0.1:1/postgres', opTimeoutMs: 500 }), (e) => e instanceof StoreUnavailableError && e.store === 'postgres');
  assert.ok(Date.now() - started < 3000);
});

test('postgres: a database holding another schema version is refused at open', { skip }, async () => {
  const { url, open } = await setup();
  await (await open()).close();
  await sql(url, "UPDATE turnstile_shared_meta SET value = '2' WHERE name = 'schema'");
  await assert.rejects(open(), (e) => e instanceof SharedStoreError && e.code === 'store-failed' && /schema 2; this package knows schema 1/.test(e.message));
  // Refused before anything was written: the script did not run again over the other schema.
  await sql(url, 'DROP FUNCTION turnstile_shared_now_v2()');
  await assert.rejects(open(), (e) => e instanceof SharedStoreError && e.code === 'store-failed');
  assert.deepEqual(await sql(url, "SELECT proname FROM pg_proc WHERE proname = 'turnstile_shared_now_v2'"), []);
});

test('postgres: the store text runs once per database: a second open changes nothing in the catalog, another text runs again', { skip }, async () => {
  const { url, open } = await setup();
  // Four at once on a new database: each waits for the schema lock, then finds the text run.
  for (const store of await Promise.all([open(), open(), open(), open()])) await store.close();
  const catalog = () => sql(url, "SELECT proname, xmin::text AS x FROM pg_proc WHERE proname LIKE 'turnstile_shared_%' ORDER BY proname");
  const first = await catalog();
  assert.ok(first.length >= 5, JSON.stringify(first));
  await (await open()).close();
  assert.deepEqual(await catalog(), first, 'the functions were not created again');
  // A store text of another package version (another digest): it runs, under the lock.
  await sql(url, "UPDATE turnstile_shared_meta SET value = 'other' WHERE name = 'script'");
  const store = await open();
  assert.notDeepEqual(await catalog(), first, 'the functions were created again');
  const [{ value }] = await sql(url, "SELECT value FROM turnstile_shared_meta WHERE name = 'script'");
  assert.match(value, /^[0-9a-f]{64}$/);
  const keys = new SharedKeys(store, { owner: 'test' });
  const permit = await keys.acquire('k', { limit: 1 });
  assert.equal(await permit.release(), 'released');
  await keys.close();
  await store.close();
});

/** Writes case `c` of the grant table into the tables as key `key`, times from `now`: the key's
 * counters, the tickets it holds, its windows' arrival times, and its head ticket `w` of
 * `owner` (when one waits). */
async function writeCase(url, key, c, now, owner) {
  const far = now + 600_000;
  await sql(url, 'INSERT INTO turnstile_shared_keys (key, seq, grants, last_grant_ms, paused_until_ms, idle_at_ms) VALUES ($1, $2, $3, $4, $5, $6)',
    [key, c.held + 1, c.held, c.since === null ? 0 : now - c.since, c.pause === null ? 0 : now + c.pause, far]);
  for (let h = 1; h <= c.held; h++) {
    await sql(url, 'INSERT INTO turnstile_shared_tickets (key, owner, ticket, seq, limit_n, delay_ms, lease_ms, expires_ms, granted_ms, grant_no) VALUES ($1, $2, $3, $4, 1, 0, 600000, $5, $6, $4)',
      [key, 'someone', `h${h}`, h, far, now]);
  }
  for (const a of c.arrivals) {
    await sql(url, 'INSERT INTO turnstile_shared_arrivals (key, count, per_ms, at_ms, rest) VALUES ($1, $2, $3, $4, $5)', [key, a.count, a.perMs, now + a.ms, a.rest]);
  }
  if (c.limit !== null) {
    await sql(url, 'INSERT INTO turnstile_shared_tickets (key, owner, ticket, seq, limit_n, delay_ms, rates, weight, lease_ms, expires_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 600000, $9)',
      [key, owner, 'w', c.held + 1, c.limit, c.delay, JSON.stringify(c.rates.map((w) => [w.count, w.perMs, w.burst])), c.weight, far]);
  }
}

// The grant rule's table (tests/shared/grant-rule.txt), which the engine's rule and the Redis
// script are tested against too, run against the store's functions: each case is written into
// the tables relative to the server's clock, then one `renew` of the head.
test('postgres: the functions grant as the shared table says', { skip, timeout: 30000 }, async (t) => {
  const { url, open } = await setup();
  const store = await open();
  t.after(() => store.close());
  for (const [i, c] of grantTable().entries()) {
    if (c.exact) continue; // on the millisecond: the next test runs it with `now` given
    const key = `case-${i}`;
    const [{ now: nowText }] = await sql(url, 'SELECT turnstile_shared_now_v2() AS now');
    const now = Number(nowText);
    await writeCase(url, key, c, now, store.owner);
    const states = await store.renew(key, c.limit === null ? [] : ['w']);
    checkCase(c, states, await store.inspect(key), now);
  }
});

// The same table through the grant rule's own function, given `now`: every case exactly,
// those that turn on the millisecond too (the test above runs on the server's clock).
test('postgres: the grant rule\'s function follows the shared table exactly, given now', { skip, timeout: 30000 }, async (t) => {
  const { url, open } = await setup();
  const store = await open(); // runs the store text
  t.after(() => store.close());
  const now = 1_000_000_000_000;
  for (const [i, c] of grantTable().entries()) {
    const key = `exact-${i}`;
    await writeCase(url, key, c, now, 'me');
    const [head] = await sql(url, 'SELECT head_ticket, retry_ms FROM turnstile_shared_promote_v2($1, $2, false, NULL, NULL)', [key, now]);
    const [w] = await sql(url, "SELECT granted_ms FROM turnstile_shared_tickets WHERE key = $1 AND ticket = 'w'", [key]);
    const state = w === undefined ? undefined
      : w.granted_ms !== null ? { state: 'granted', retryMs: null }
      : { state: 'waiting', retryMs: head.head_ticket === 'w' && head.retry_ms !== null ? Number(head.retry_ms) : null };
    const arrivals = (await sql(url, 'SELECT count, per_ms, at_ms, rest FROM turnstile_shared_arrivals WHERE key = $1', [key]))
      .map((r) => ({ count: Number(r.count), perMs: Number(r.per_ms), atMs: Number(r.at_ms), rest: Number(r.rest) }));
    checkExact(c, state, arrivals, now);
  }
});

test('postgres: two clients that chose the same owner never share a ticket', { skip, timeout: 30000 }, async (t) => {
  const { open } = await setup();
  const [a, b] = [await open(), await open()];
  const keysA = new SharedKeys(a, { owner: 'same' });
  const keysB = new SharedKeys(b, { owner: 'same' });
  t.after(async () => { await keysA.close(); await keysB.close(); await a.close(); await b.close(); });
  const first = await keysA.acquire('k', { limit: 1 });
  let secondGranted = false;
  const second = keysB.acquire('k', { limit: 1 }).then((p) => { secondGranted = true; return p; });
  await sleep(200);
  assert.match(first.ticket, /^same-[0-9a-f]{12}-1$/, 'the owner, a random tag, a count');
  assert.equal(secondGranted, false, 'a second client with the same ticket id was granted while the first held it');
  const seen = await a.inspect('k');
  assert.deepEqual([seen.held.length, seen.waiting.length], [1, 1]);
  assert.equal(await first.release(), 'released');
  const permit = await second;
  assert.match(permit.ticket, /^same-[0-9a-f]{12}-1$/);
  assert.notEqual(permit.ticket, first.ticket, 'each SharedKeys tags its tickets');
  assert.equal(await permit.release(), 'released');
});

test('postgres: idle keys leave the store; 5,000 made keys leave no row', { skip, timeout: 60000 }, async (t) => {
  const { url, open } = await setup();
  const store = await open();
  const keys = new SharedKeys(store, { owner: 'made' });
  t.after(async () => { await keys.close(); await store.close(); });
  const count = async () => {
    const [{ k, t: tickets }] = await sql(url, 'SELECT (SELECT count(*) FROM turnstile_shared_keys)::int AS k, (SELECT count(*) FROM turnstile_shared_tickets)::int AS t');
    return [k, tickets];
  };
  const made = 5000;
  for (let i = 0; i < made; i += 50) {
    await Promise.all(Array.from({ length: 50 }, async (_, j) => {
      const permit = await keys.acquire(`api:${i + j}`, { limit: 1 });
      assert.equal(await permit.release(), 'released');
    }));
  }
  assert.deepEqual(await count(), [0, 0], 'every ended key was forgotten');
  // A key is kept while its delay or pause lies ahead, and while a ticket's lease runs (a
  // client that died holding it); the next request elsewhere sweeps it once they are over.
  const slow = await keys.acquire('slow', { limit: 1, delayMs: 300 });
  await slow.release();
  await keys.pause('paused', 300);
  await store.request('orphan', 'dead-1', { limit: 1, delayMs: 0, leaseMs: 300 });
  assert.deepEqual(await count(), [3, 1]);
  await sleep(350);
  const permit = await keys.acquire('sweeper', { limit: 1 });
  await permit.release();
  assert.deepEqual(await count(), [0, 0], 'keys idle since their delay, pause or last lease ended were swept');
});

test('postgres: a server that stops answering: typed errors, no double grant when it comes back', { skip, timeout: 30000 }, async (t) => {
  const { server, spec, open } = await setup();
  const leaseMs = 1500;
  const store = await open({ opTimeoutMs: 200 });
  const keys = new SharedKeys(store, { leaseMs, owner: 'test' });
  t.after(async () => { server.cont(); await keys.close(); await store.close(); });
  const permit = await keys.acquire('k', { limit: 1 });
  const other = worker(t, { store: spec, key: 'k', limit: 1, leaseMs: 3000, name: 'other' });
  await other.waitFor((e) => e.event === 'requested');
  // Unreachable for less than a heartbeat (lease / 3): requests fail with the typed error, the
  // permit holds.
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

test('postgres: a server killed and restarted: typed errors, then recovery; nothing granted twice', { skip, timeout: 60000 }, async (t) => {
  const server = await startPostgres(t);
  const spec = { kind: 'postgres', url: server.url };
  const leaseMs = 1500;
  const store = await PostgresStore.open({ url: server.url, opTimeoutMs: 300 });
  const keys = new SharedKeys(store, { leaseMs, owner: 'test' });
  t.after(async () => { await keys.close(); await store.close(); });
  const permit = await keys.acquire('k', { limit: 1 });
  const dir = tempDir(t);
  const other = worker(t, { store: spec, key: 'k', limit: 1, leaseMs: 8000, name: 'other', log: join(dir, 'other.jsonl') });
  await other.waitFor((e) => e.event === 'requested');
  await server.kill();
  const killedAt = Date.now();
  await assert.rejects(keys.acquire('elsewhere', { limit: 1 }), (e) => e instanceof StoreUnavailableError);
  const lostAt = await new Promise((resolve) => permit.signal.addEventListener('abort', () => resolve(Date.now()), { once: true }));
  assert.ok(permit.signal.reason instanceof StoreUnavailableError);
  // Given up at its last confirmed renewal + lease - lease / 6: within a lease of the crash.
  assert.ok(lostAt - killedAt < leaseMs, `given up ${lostAt - killedAt} ms after the crash`);
  await server.start();
  // The store persisted the tickets: the other process is granted only once this one's lease
  // ended at the store (it was never renewed after the crash), never while it held it.
  const granted = await other.waitFor((e) => e.event === 'granted', 15000);
  assert.ok(granted.grantedMs >= lostAt, 'granted only after the holder gave up');
  assert.equal(granted.grant, 2);
  await other.done();
  // And this process works again.
  const again = await keys.acquire('k', { limit: 1 });
  assert.equal(await again.release(), 'released');
});

test('postgres: four JS processes, one key of limit 1 for 2 s: grants per second, never two at once', { skip, timeout: 60000 }, async (t) => {
  const { spec } = await setup();
  const dir = tempDir(t);
  const startAt = Date.now() + 2000;
  const workers = Array.from({ length: 4 }, (_, i) => worker(t, {
    store: spec, key: 'hot', limit: 1, leaseMs: 5000, rounds: 100000, untilMs: startAt + 2000, holdMs: 0,
    name: `p${i}`, startAt, log: join(dir, `p${i}.jsonl`),
  }));
  await Promise.all(workers.map((w) => w.done(40000)));
  const recs = records(dir);
  const starts = recs.filter((r) => r.event === 'start');
  assert.equal(maxOverlap(recs), 1);
  console.log(`# postgres: ${starts.length} grants in 2 s on one key of limit 1 across 4 processes (${Math.round(starts.length / 2)}/s)`);
  assert.ok(starts.length > 20);
});

scenarios('postgres', setup, skip);
