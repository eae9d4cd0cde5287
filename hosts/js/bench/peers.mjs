// Turnstile's async driver against what a JS host would write instead: p-limit per key, calls
// queued in written order (p-limit is FIFO, so that keeps written order within a key), unkeyed
// calls run at once. Same batches, same instant executions, so only scheduling costs are
// measured. Both run side by side in one process, interleaved in pairs (which one goes first
// alternates) so that a load change on the machine hits both; reported: the best run of each,
// and the median of the per-pair ratios. Each Turnstile run has its own scheduler and driver, disposed
// at its end. `node bench/peers.mjs [PAIRS]` after `npm run build`.
import pLimit from 'p-limit';
import { Driver, Scheduler, Turnstile } from '../dist/index.js';

const KEYS = 10;
const PAIRS = Number(process.argv[2] ?? 9);
const config = Array.from({ length: KEYS }, (_, k) => `[conversation.tools.t${k}]\nconcurrency = { key = "k${k}", limit = ${1 + (k % 4)} }\n`).join('') + '[conversation.tools.free]\n';

function batch(n) {
  // Nine in ten calls keyed (over 10 keys with limits 1-4), one in ten unkeyed. The same ids
  // every round: a batch's ids are free again once it retired.
  return Array.from({ length: n }, (_, i) => ({ id: `c${i}`, tool: i % 10 === 9 ? 'free' : `t${i % KEYS}` }));
}

const execute = async () => 'ok';

async function turnstile(policy, n, rounds) {
  // One scheduler for every round, as a conversation has.
  const driver = new Driver(new Scheduler(policy));
  const start = performance.now();
  for (let r = 0; r < rounds; r++) await driver.run(batch(n), execute);
  const ms = performance.now() - start;
  driver.dispose();
  return ms;
}

async function plimit(n, rounds) {
  const start = performance.now();
  for (let r = 0; r < rounds; r++) {
    const limiters = Array.from({ length: KEYS }, (_, k) => pLimit(1 + (k % 4)));
    await Promise.all(batch(n).map((c) => (c.tool === 'free' ? execute(c) : limiters[Number(c.tool.slice(1))](() => execute(c)))));
  }
  return performance.now() - start;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

const t = await Turnstile.load();
const policy = t.resolve([{ name: 'bench', text: config }]);
console.log(`| batch size | rounds | Turnstile driver (us/call, best) | p-limit per key (us/call, best) | best / best | median of ${PAIRS} paired ratios |`);
console.log('| ---: | ---: | ---: | ---: | ---: | ---: |');
for (const [n, rounds] of [[10, 2000], [100, 500], [1000, 100], [10000, 10]]) {
  await turnstile(policy, n, rounds);
  await plimit(n, rounds);
  const a = [];
  const b = [];
  const ratios = [];
  for (let i = 0; i < PAIRS; i++) {
    // Which goes first alternates: the second of a pair pays for the first one's garbage.
    if (i % 2) {
      b.push(await plimit(n, rounds));
      a.push(await turnstile(policy, n, rounds));
    } else {
      a.push(await turnstile(policy, n, rounds));
      b.push(await plimit(n, rounds));
    }
    ratios.push(a[i] / b[i]);
  }
  const per = (ms) => ((ms * 1000) / (n * rounds)).toFixed(2);
  console.log(`| ${n} | ${rounds} | ${per(Math.min(...a))} | ${per(Math.min(...b))} | ${(Math.min(...a) / Math.min(...b)).toFixed(2)}x | ${median(ratios).toFixed(2)}x |`);
}
const load = [];
for (let i = 0; i < 5; i++) {
  const s = performance.now();
  await Turnstile.load({ coreModule: async (p) => WebAssembly.compile(await (await import('node:fs/promises')).readFile(new URL(`../dist/component/${p}`, import.meta.url))) });
  load.push(performance.now() - s);
}
console.log(`\ncompile + instantiate in Node (uncached): best ${Math.min(...load).toFixed(1)} ms; instantiate (cached modules): ${await (async () => {
  const s = performance.now();
  for (let i = 0; i < 20; i++) await Turnstile.load();
  return ((performance.now() - s) / 20).toFixed(2);
})()} ms`);
