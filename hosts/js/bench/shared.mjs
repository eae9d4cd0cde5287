// Shared keys, side by side in one run: acquire + release on a key of limit 4, by 1, 8 and 64
// contenders, each in a loop (acquire, release at once, acquire again) for a fixed window:
// - local:  an in-process FIFO semaphore, the contenders being async tasks of this process (the
//           baseline: what a local key costs the host);
// - sqlite: one SqliteStore file, each contender its own process;
// - redis:  a redis-server this bench starts on a free loopback port, each contender its own
//           process (skipped, and said so, without redis-server).
// Reported per row: grants per second over all contenders, and p50 / p99 of the acquire
// latency (call to permit, queueing included: with 8 or 64 contenders on limit 4 most of it is
// waiting for a turn) and of the release latency. `node bench/shared.mjs [WINDOW_MS]` after
// `node build.mjs`; `--rows sqlite:8,redis:64` runs only those.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { RedisStore, SharedKeys, SqliteStore } from '../dist/shared/index.js';

const LIMIT = 4;
const HERE = fileURLToPath(import.meta.url);

if (process.argv[2] === '--worker') {
  await contender(JSON.parse(process.argv[3]));
  process.exit(0);
}

const WINDOW_MS = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 3000);
const only = process.argv.includes('--rows') ? process.argv[process.argv.indexOf('--rows') + 1].split(',') : undefined;
const COUNTS = [1, 8, 64];

/** One contender process: opens the store, says `ready`, reads the window (`startAt endAt`)
 * from stdin, loops acquire/release within it, prints its samples. */
async function contender({ store: spec, leaseMs }) {
  const store = spec.kind === 'sqlite' ? await SqliteStore.open({ path: spec.path }) : await RedisStore.open({ url: spec.url });
  const keys = new SharedKeys(store, { leaseMs });
  process.stdout.write('ready\n');
  const [startAt, endAt] = await new Promise((resolve) => {
    let line = '';
    process.stdin.on('data', (d) => {
      line += d;
      if (line.includes('\n')) { process.stdin.pause(); resolve(line.trim().split(' ').map(Number)); }
    });
  });
  const out = await loop(() => keys.acquire('bench', { limit: LIMIT }), (p) => p.release(), startAt, endAt);
  await keys.close();
  await store.close();
  process.stdout.write(JSON.stringify(out));
}

async function loop(acquire, release, startAt, endAt) {
  await sleep(Math.max(0, startAt - Date.now()));
  const acquireUs = [];
  const releaseUs = [];
  let grants = 0;
  while (Date.now() < endAt) {
    const t0 = performance.now();
    const permit = await acquire();
    const t1 = performance.now();
    await release(permit);
    const t2 = performance.now();
    if (Date.now() <= endAt) {
      grants++;
      acquireUs.push(Math.round((t1 - t0) * 1000));
      releaseUs.push(Math.round((t2 - t1) * 1000));
    }
  }
  return { grants, acquireUs, releaseUs };
}

/** A FIFO semaphore: the local baseline. */
class Semaphore {
  #free;
  #queue = [];
  constructor(limit) { this.#free = limit; }
  acquire() {
    if (this.#free > 0 && this.#queue.length === 0) { this.#free--; return Promise.resolve(); }
    return new Promise((resolve) => this.#queue.push(resolve));
  }
  release() {
    const next = this.#queue.shift();
    if (next) next(); else this.#free++;
  }
}

async function local(n) {
  const sem = new Semaphore(LIMIT);
  const startAt = Date.now() + 100;
  const endAt = startAt + WINDOW_MS;
  // A yield per cycle, as a store's await has: without it one task would never let another in.
  return Promise.all(Array.from({ length: n }, () => loop(() => sem.acquire(), async () => { sem.release(); await null; }, startAt, endAt)));
}

/** `n` contender processes; the window opens once every one of them has started and opened
 * the store (starting 64 processes takes seconds on 2 cores, and must not eat the window). */
async function processes(spec, n) {
  const leaseMs = 10000;
  const arg = JSON.stringify({ store: spec, leaseMs });
  if (spec.kind === 'sqlite') {
    // A new file grants nothing for one lease (SHARED.md): create it, and let that pass first.
    await (await SqliteStore.open({ path: spec.path })).close();
    await sleep(leaseMs);
  }
  const children = Array.from({ length: n }, () => {
    const child = spawn(process.execPath, [HERE, '--worker', arg], { stdio: ['pipe', 'pipe', 'inherit'] });
    let text = '';
    let markReady;
    const ready = new Promise((resolve) => { markReady = resolve; });
    child.stdout.on('data', (d) => {
      text += d;
      if (text.startsWith('ready\n')) { markReady(); }
    });
    const done = new Promise((resolve, reject) => child.on('close', (code) => (code === 0 ? resolve(JSON.parse(text.slice('ready\n'.length))) : reject(new Error(`contender exited with ${code}`)))));
    return { child, ready, done };
  });
  await Promise.all(children.map((c) => c.ready));
  const startAt = Date.now() + 200;
  for (const { child } of children) child.stdin.end(`${startAt} ${startAt + WINDOW_MS}\n`);
  return Promise.all(children.map((c) => c.done));
}

function summary(results) {
  const pct = (xs, p) => (xs.length ? xs[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))] : NaN);
  const acquire = results.flatMap((r) => r.acquireUs).sort((a, b) => a - b);
  const release = results.flatMap((r) => r.releaseUs).sort((a, b) => a - b);
  const grants = results.reduce((s, r) => s + r.grants, 0);
  const ms = (us) => (us / 1000).toFixed(us < 10_000 ? 3 : 1);
  return { perSecond: Math.round((grants * 1000) / WINDOW_MS), acquireP50: ms(pct(acquire, 50)), acquireP99: ms(pct(acquire, 99)), releaseP50: ms(pct(release, 50)), releaseP99: ms(pct(release, 99)) };
}

async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function startRedis(dir) {
  if (spawnSync('redis-server', ['--version']).error) return undefined;
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  for (let i = 0; i < 100; i++) {
    try {
      const store = await RedisStore.open({ url: `redis://127.0.0.1:${port}`, opTimeoutMs: 200 });
      await store.close();
      return { child, url: `redis://127.0.0.1:${port}` };
    } catch {
      await sleep(50);
    }
  }
  child.kill('SIGKILL');
  throw new Error('redis-server did not start');
}

const dir = mkdtempSync(join(tmpdir(), 'turnstile-bench-'));
const redis = await startRedis(dir);
const rows = [];
try {
  console.log(`shared keys, limit ${LIMIT}, window ${WINDOW_MS} ms, ${cpus().length} cores, node ${process.version}`);
  console.log('| store | contenders | grants/s | acquire p50 ms | acquire p99 ms | release p50 ms | release p99 ms |');
  console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const n of COUNTS) {
    for (const kind of ['local', 'sqlite', 'redis']) {
      if (only && !only.includes(`${kind}:${n}`)) continue;
      let results;
      if (kind === 'local') results = await local(n);
      else if (kind === 'sqlite') results = await processes({ kind, path: join(dir, `bench-${n}.sqlite`) }, n);
      else if (redis) results = await processes({ kind, url: redis.url }, n);
      if (!results) {
        console.log(`| redis | ${n} | skipped: redis-server is not installed | | | | |`);
        continue;
      }
      const s = summary(results);
      rows.push({ kind, n, ...s });
      console.log(`| ${kind} | ${n} | ${s.perSecond} | ${s.acquireP50} | ${s.acquireP99} | ${s.releaseP50} | ${s.releaseP99} |`);
    }
  }
} finally {
  redis?.child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
}
