// What a store holds after many made keys (`api:{host}`-style keys used once each): one process
// acquires and releases a permit on N distinct keys (default 1,000,000) and prints, every N/10
// keys and at the end, the keys the store still holds: SQLite's rows (`turnstile_shared_keys`,
// `turnstile_shared_tickets`) and file size, Redis's key count and used memory, Postgres's rows
// and the tables' size with their indexes (a server of its own, as the tests start it). An idle
// key is forgotten (SHARED.md), so the counts follow the live keys (here: 1), not N.
//
// node bench/shared-size.mjs [N] [--stores sqlite,redis,postgres]   (after `node build.mjs`)
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { PostgresStore, RedisStore, SharedKeys, SqliteStore } from '../dist/shared/index.js';
import { startPostgres } from '../test/fixtures/postgres-server.mjs';

const N = Number(process.argv.slice(2).find((a) => /^\d+$/.test(a)) ?? 1_000_000);
const stores = process.argv.includes('--stores') ? process.argv[process.argv.indexOf('--stores') + 1].split(',') : ['sqlite', 'redis', 'postgres'];
const dir = mkdtempSync(join(tmpdir(), 'turnstile-size-'));

async function run(kind, store, size) {
  const keys = new SharedKeys(store, { leaseMs: 10_000 });
  const live = await keys.acquire('live', { limit: 1 }); // one key stays live throughout
  const started = performance.now();
  for (let i = 1; i <= N; i++) {
    const permit = await keys.acquire(`api:host-${i}`, { limit: 4 });
    await permit.release();
    if (i % (N / 10) === 0) console.log(`${kind}: ${i} made keys, ${((performance.now() - started) / 1000).toFixed(0)} s: ${await size()}`);
  }
  await live.release();
  console.log(`${kind}: all ended: ${await size()}`);
  await keys.close();
}

if (stores.includes('sqlite')) {
  const path = join(dir, 'size.sqlite');
  await (await SqliteStore.open({ path })).close();
  await sleep(10_000); // a new file grants nothing for one lease
  const store = await SqliteStore.open({ path });
  const Database = (await import('better-sqlite3')).default;
  const raw = new Database(path, { readonly: true });
  const bytes = (f) => { try { return statSync(f).size; } catch { return 0; } };
  await run('sqlite', store, async () => {
    const n = (t) => raw.prepare(`SELECT count(*) AS n FROM ${t}`).get().n;
    return `${n('turnstile_shared_keys')} key rows, ${n('turnstile_shared_tickets')} ticket rows, file ${bytes(path)} B + wal ${bytes(`${path}-wal`)} B`;
  });
  raw.close();
  await store.close();
}

if (stores.includes('redis')) {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  const child = spawn(process.env.REDIS_SERVER ?? 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
  await sleep(300);
  const url = `redis://127.0.0.1:${port}`;
  const store = await RedisStore.open({ url });
  const Redis = (await import('ioredis')).default;
  const raw = new Redis(url);
  await run('redis', store, async () => {
    const memory = (await raw.info('memory')).match(/used_memory:(\d+)/)[1];
    return `${await raw.dbsize()} Redis keys, used_memory ${memory} B`;
  });
  raw.disconnect();
  await store.close();
  child.kill('SIGKILL');
}
if (stores.includes('postgres')) {
  const after = [];
  const server = await startPostgres({ after: (f) => after.push(f) });
  const store = await PostgresStore.open({ url: server.url });
  const pg = (await import('pg')).default;
  const raw = new pg.Client({ connectionString: server.url });
  await raw.connect();
  await run('postgres', store, async () => {
    const q = async (text) => (await raw.query(text)).rows[0].n;
    const keys = await q('SELECT count(*)::int AS n FROM turnstile_shared_keys');
    const tickets = await q('SELECT count(*)::int AS n FROM turnstile_shared_tickets');
    const bytes = await q("SELECT (pg_total_relation_size('turnstile_shared_keys') + pg_total_relation_size('turnstile_shared_tickets'))::bigint AS n");
    return `${keys} key rows, ${tickets} ticket rows, tables and indexes ${bytes} B`;
  });
  await raw.end();
  await store.close();
  for (const f of after.reverse()) await f();
}
rmSync(dir, { recursive: true, force: true });
