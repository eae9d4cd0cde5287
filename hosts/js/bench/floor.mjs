// The floor under the driver: the peers bench's batches (bench/peers.mjs) scheduled without the
// driver, against p-limit per key, side by side in one process, interleaved in pairs:
// - component: jco's bindings called directly (`submit-batch`, `on-events` with the approvals,
//   then per round `on-ended` of everything the previous round started and `next-releases`),
//   executions "run" synchronously: the component and jco's glue, and nothing else;
// - package:   the same rounds through `Scheduler.submit` and the driver's `stepRaw` (the
//   package's checks and its round over the component's verbs), still without the driver.
// What the driver adds on top is promises, executions, outcomes and its bookkeeping. Reported per
// size: us per call (best run) and the median of the paired ratios to p-limit.
// `node bench/floor.mjs [PAIRS]` after `npm run build`; bench/profile.mjs --floor profiles the
// component's loop (`component`, exported), --package the package's (`pkg`).
import pLimit from 'p-limit';
import { pathToFileURL } from 'node:url';
import { Scheduler, Turnstile } from '../dist/index.js';

const KEYS = 10;
const PAIRS = Number(process.argv[2] ?? 9);
export const config = Array.from({ length: KEYS }, (_, k) => `[conversation.tools.t${k}]\nconcurrency = { key = "k${k}", limit = ${1 + (k % 4)} }\n`).join('') + '[conversation.tools.free]\n';
const batch = (n) => Array.from({ length: n }, (_, i) => ({ id: `c${i}`, tool: i % 10 === 9 ? 'free' : `t${i % KEYS}` }));
const execute = async () => 'ok';
const EMPTY = new BigUint64Array(0);

/** jco's bindings alone. */
export function component(policy, n, rounds) {
  const scheduler = new Scheduler(policy);
  const raw = scheduler.held.get();
  let now = 0n;
  const start = performance.now();
  for (let r = 0; r < rounds; r++) {
    const calls = batch(n);
    let ids = '';
    let tools = '';
    for (const c of calls) {
      ids += c.id + '\n';
      tools += c.tool + '\n';
    }
    const { first, count } = raw.submitBatch({ ids, tools, fanOuts: [], arguments: [] }, {});
    const approve = new BigUint64Array(count);
    for (let i = 0; i < count; i++) approve[i] = first + BigInt(i);
    raw.onEvents([{ tag: 'approve', val: approve }], now);
    for (;;) {
      const { start: started, retired } = raw.nextReleases(now);
      if (retired.length) break;
      raw.onEnded({ ok: started, failed: EMPTY, rateLimited: [] }, now);
    }
  }
  const ms = performance.now() - start;
  scheduler.dispose();
  return ms;
}

/** `Scheduler.submit` and `stepRaw`, as the driver calls them. */
export function pkg(policy, n, rounds) {
  const scheduler = new Scheduler(policy);
  const inputs = (o) => ({ approve: EMPTY, settle: [], ask: EMPTY, answer: EMPTY, ok: EMPTY, failed: EMPTY, cancel: EMPTY, now: 0n, retry: [], pause: [], granted: EMPTY, denied: EMPTY, ...o });
  const start = performance.now();
  for (let r = 0; r < rounds; r++) {
    const submitted = scheduler.submit(batch(n));
    let out = scheduler.stepRaw(inputs({ approve: submitted.entries() }));
    while (!out.retired.length) out = scheduler.stepRaw(inputs({ ok: out.start }));
  }
  const ms = performance.now() - start;
  scheduler.dispose();
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
if (import.meta.url === pathToFileURL(process.argv[1]).href) await main();

async function main() {
const t = await Turnstile.load();
const policy = t.resolve([{ name: 'bench', text: config }]);
console.log(`| batch size | rounds | component (us/call, best) | package, no driver (us/call, best) | p-limit per key (us/call, best) | component / p-limit, median of ${PAIRS} | package / p-limit, median of ${PAIRS} |`);
console.log('| ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
for (const [n, rounds] of [[10, 2000], [100, 500], [1000, 100], [10000, 10]]) {
  component(policy, n, rounds);
  pkg(policy, n, rounds);
  await plimit(n, rounds);
  const a = [];
  const b = [];
  const c = [];
  for (let i = 0; i < PAIRS; i++) {
    if (i % 2) {
      c.push(await plimit(n, rounds));
      a.push(component(policy, n, rounds));
      b.push(pkg(policy, n, rounds));
    } else {
      a.push(component(policy, n, rounds));
      b.push(pkg(policy, n, rounds));
      c.push(await plimit(n, rounds));
    }
  }
  const per = (ms) => ((ms * 1000) / (n * rounds)).toFixed(2);
  const ratio = (xs) => median(xs.map((x, i) => x / c[i])).toFixed(2);
  console.log(`| ${n} | ${rounds} | ${per(Math.min(...a))} | ${per(Math.min(...b))} | ${per(Math.min(...c))} | ${ratio(a)}x | ${ratio(b)}x |`);
}
}
