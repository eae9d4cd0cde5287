// Turnstile's async driver against what a JS host would write instead: p-limit per key, calls
// queued in written order (p-limit is FIFO, so that keeps written order within a key), unkeyed
// calls run at once. Same batches, same instant executions, so only scheduling costs are
// measured; both are timed side by side in one run and reported as a ratio.
// `node bench/peers.mjs` after `npm run build`.
import pLimit from 'p-limit';
import { Scheduler, Turnstile, runBatch } from '../dist/index.js';

const KEYS = 10;
const config = Array.from({ length: KEYS }, (_, k) => `[conversation.tools.t${k}]\nconcurrency = { key = "k${k}", limit = ${1 + (k % 4)} }\n`).join('') + '[conversation.tools.free]\n';

function batch(n) {
  // Nine in ten calls keyed (over 10 keys with limits 1-4), one in ten unkeyed. The same ids
  // every round: a batch's ids are free again once it retired.
  return Array.from({ length: n }, (_, i) => ({ id: `c${i}`, tool: i % 10 === 9 ? 'free' : `t${i % KEYS}` }));
}

const execute = async () => 'ok';

async function turnstile(policy, n, rounds) {
  // One scheduler for every round, as a conversation has.
  const sched = new Scheduler(policy);
  const start = performance.now();
  for (let r = 0; r < rounds; r++) await runBatch(sched, batch(n), execute);
  return performance.now() - start;
}

async function plimit(n, rounds) {
  const start = performance.now();
  for (let r = 0; r < rounds; r++) {
    const limiters = Array.from({ length: KEYS }, (_, k) => pLimit(1 + (k % 4)));
    await Promise.all(
      batch(n).map((c) => (c.tool === 'free' ? execute(c) : limiters[Number(c.tool.slice(1))](() => execute(c)))),
    );
  }
  return performance.now() - start;
}

const t = await Turnstile.load();
const policy = t.resolve([{ name: 'bench', text: config }]);
console.log('| batch size | rounds | Turnstile driver (us/call) | p-limit per key (us/call) | Turnstile / p-limit |');
console.log('| ---: | ---: | ---: | ---: | ---: |');
for (const [n, rounds] of [[10, 2000], [100, 300], [1000, 30], [10000, 3]]) {
  await turnstile(policy, n, 2);
  await plimit(n, 2);
  const best = async (f) => Math.min(await f(), await f(), await f());
  const a = await best(() => turnstile(policy, n, rounds));
  const b = await best(() => plimit(n, rounds));
  const per = (ms) => ((ms * 1000) / (n * rounds)).toFixed(2);
  console.log(`| ${n} | ${rounds} | ${per(a)} | ${per(b)} | ${(a / b).toFixed(2)}x |`);
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
