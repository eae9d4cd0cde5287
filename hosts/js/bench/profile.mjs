// Where the driver's time goes: the peers bench's batches of 1,000 (or `--batch N`) through the
// driver under `--cpu-prof`, then the profile of the measured window (no start-up, no warm-up)
// summed by function (self time), by file and by layer (the component, jco's glue, the package,
// the driver, the garbage collector). `--floor` profiles bench/floor.mjs's component loop (jco's
// bindings alone) instead, `--package` its package loop (`Scheduler.submit` and `stepRaw`). `node bench/profile.mjs [--batch 1000] [--rounds 300] [--top 30]
// [--limit N] [--floor | --package] [--keep DIR]` after `npm run build`. The profile itself is written to a temporary directory
// (kept with `--keep DIR`, to open in Chrome's DevTools).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = fileURLToPath(import.meta.url);
const arg = (name, fallback) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : fallback);
const BATCH = Number(arg('--batch', 1000));
const ROUNDS = Number(arg('--rounds', Math.max(20, Math.round(300_000 / BATCH))));
const TOP = Number(arg('--top', 30));

if (process.argv.includes('--child')) {
  const { Driver, Scheduler, Turnstile } = await import('../dist/index.js');
  const KEYS = 10;
  // `--limit N`: every key of limit N instead of 1 to 4 (N = 1000: two rounds a batch, to see
  // what the rounds themselves cost).
  const limit = (k) => Number(arg('--limit', 0)) || 1 + (k % 4);
  const config = Array.from({ length: KEYS }, (_, k) => `[conversation.tools.t${k}]\nconcurrency = { key = "k${k}", limit = ${limit(k)} }\n`).join('') + '[conversation.tools.free]\n';
  const batch = (n) => Array.from({ length: n }, (_, i) => ({ id: `c${i}`, tool: i % 10 === 9 ? 'free' : `t${i % KEYS}` }));
  const execute = async () => 'ok';
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'bench', text: config }]);
  let from;
  let to;
  let ms;
  if (process.argv.includes('--floor') || process.argv.includes('--package')) {
    const floor = await import('./floor.mjs');
    const loop = process.argv.includes('--floor') ? floor.component : floor.pkg;
    loop(policy, BATCH, 20); // warm up
    from = process.hrtime.bigint() / 1000n;
    ms = loop(policy, BATCH, ROUNDS);
    to = process.hrtime.bigint() / 1000n;
  } else {
    const driver = new Driver(new Scheduler(policy));
    for (let r = 0; r < 20; r++) await driver.run(batch(BATCH), execute); // warm up
    from = process.hrtime.bigint() / 1000n;
    const start = performance.now();
    for (let r = 0; r < ROUNDS; r++) await driver.run(batch(BATCH), execute);
    ms = performance.now() - start;
    to = process.hrtime.bigint() / 1000n;
    driver.dispose();
  }
  // The measured window on the profile's clock (microseconds, monotonic), for the parent.
  console.log(`${BATCH} x ${ROUNDS}: ${((ms * 1000) / (BATCH * ROUNDS)).toFixed(2)} us/call\nwindow ${from} ${to}`);
  process.exit(0);
}

const dir = arg('--keep', undefined) ?? mkdtempSync(join(tmpdir(), 'turnstile-prof-'));
const child = spawnSync(process.execPath, ['--cpu-prof', '--cpu-prof-dir', dir, HERE, '--child', '--batch', String(BATCH), '--rounds', String(ROUNDS), '--limit', arg('--limit', '0'), ...['--floor', '--package'].filter((f) => process.argv.includes(f))], { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' });
if (child.status !== 0) process.exit(child.status ?? 1);
const [, from, to] = child.stdout.match(/window (\d+) (\d+)/).map(Number);
console.log(child.stdout.split('\n')[0]);
const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
const profile = JSON.parse(readFileSync(join(dir, file), 'utf8'));

/** The core module's exported functions by index (its export section), so that a profile's
 * `wasm-function[N]` that is an export (the canonical ABI's entry points, `cabi_realloc`) gets
 * its name; the rest of the component has no names. */
function exportNames(bytes) {
  let at = 8;
  const leb = () => {
    let value = 0;
    let shift = 0;
    let byte;
    do {
      byte = bytes[at++];
      value += (byte & 0x7f) * 2 ** shift;
      shift += 7;
    } while (byte & 0x80);
    return value;
  };
  const names = new Map();
  while (at < bytes.length) {
    const id = bytes[at++];
    const size = leb();
    const end = at + size;
    if (id === 7) {
      for (let n = leb(); n > 0; n--) {
        const length = leb();
        const name = new TextDecoder().decode(bytes.subarray(at, at + length));
        at += length;
        const kind = bytes[at++];
        const index = leb();
        if (kind === 0) names.set(index, name.replace(/^turnstile:scheduler\/|@0\.\d+\.\d+/g, ''));
      }
    }
    at = end;
  }
  return names;
}
const wasmNames = exportNames(readFileSync(new URL('../dist/component/turnstile.core.wasm', import.meta.url)));

// Self time per node: the samples' time deltas within the measured window (start-up and
// warm-up left out), attributed to the sampled node.
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const self = new Map();
let at = profile.startTime;
for (let i = 0; i < profile.samples.length; i++) {
  at += profile.timeDeltas[i] ?? 0;
  if (at >= from && at <= to) self.set(profile.samples[i], (self.get(profile.samples[i]) ?? 0) + (profile.timeDeltas[i] ?? 0));
}
if (self.size === 0) throw new Error(`no sample in the window ${from}..${to} (profile ${profile.startTime}..${profile.endTime}): the clocks differ`);
const total = [...self.values()].reduce((a, b) => a + b, 0);
const byFunction = new Map();
const byFile = new Map();
const byLayer = new Map();
// The layers a batch crosses: the component's own code, jco's glue (lifting and lowering),
// the package's step and submit, the driver, the garbage collector (whose garbage is mostly the
// glue's and the driver's objects), and the rest (the bench loop, promises, Node).
const layerOf = (url, file) => (url.startsWith('wasm://') ? 'component (wasm)' : file === 'turnstile.js' ? "jco's glue (turnstile.js)" : ['scheduler.js', 'convert.js', 'validate.js', 'instance.js'].includes(file) ? 'package (scheduler.js, convert.js, validate.js, instance.js)' : file === 'driver.js' ? 'driver (driver.js)' : file === '(garbage collector)' ? 'garbage collector' : 'other (bench loop, promises, Node)');
for (const [id, us] of self) {
  const { functionName, url, lineNumber } = byId.get(id).callFrame;
  const where = url ? basename(url) : '';
  const wasm = /^wasm-function\[(\d+)\]$/.exec(functionName);
  const exported = wasm ? wasmNames.get(Number(wasm[1])) : undefined;
  const name = exported ? `${functionName} (export ${exported})` : `${functionName || '(anonymous)'} ${where}${where ? `:${lineNumber + 1}` : ''}`;
  byFunction.set(name, (byFunction.get(name) ?? 0) + us);
  const f = where || functionName;
  byFile.set(f, (byFile.get(f) ?? 0) + us);
  const layer = layerOf(url, f);
  byLayer.set(layer, (byLayer.get(layer) ?? 0) + us);
}
const show = (title, map, top) => {
  console.log(`\n${title}`);
  for (const [name, us] of [...map].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${((100 * us) / total).toFixed(1).padStart(5)} %  ${(us / 1000).toFixed(0).padStart(6)} ms  ${name}`);
};
show('self time by function', byFunction, TOP);
show('self time by file (wasm-function[...] entries are the component)', byFile, 15);
show('self time by layer', byLayer, 10);
if (!process.argv.includes('--keep')) rmSync(dir, { recursive: true, force: true });
