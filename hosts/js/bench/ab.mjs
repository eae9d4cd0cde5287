// Two builds of the package side by side: the driver on the peers batches (bench/peers.mjs),
// build A and build B interleaved in pairs (which goes first alternates), reported as the median
// of the paired ratios B / A per batch size. How a change to the package is measured on a loaded
// machine: build the old version somewhere else (`git archive <commit> hosts/js shared | tar -x
// -C /tmp/old`, link node_modules, `node build.mjs` there), then
// `node bench/ab.mjs /tmp/old/hosts/js . [PAIRS]`. The same directory twice shows the noise.
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [dirA, dirB] = process.argv.slice(2, 4);
if (!dirA || !dirB) {
  console.error('usage: node bench/ab.mjs DIR_A DIR_B [PAIRS]');
  process.exit(2);
}
const PAIRS = Number(process.argv[4] ?? 15);
const [A, B] = await Promise.all([dirA, dirB].map((d) => import(pathToFileURL(resolve(d, 'dist/index.js')).href)));
const KEYS = 10;
const config = Array.from({ length: KEYS }, (_, k) => `[conversation.tools.t${k}]\nconcurrency = { key = "k${k}", limit = ${1 + (k % 4)} }\n`).join('') + '[conversation.tools.free]\n';
const batch = (n) => Array.from({ length: n }, (_, i) => ({ id: `c${i}`, tool: i % 10 === 9 ? 'free' : `t${i % KEYS}` }));
const execute = async () => 'ok';

async function setup(M) {
  const t = await M.Turnstile.load();
  return { M, policy: t.resolve([{ name: 'bench', text: config }]) };
}

async function run({ M, policy }, n, rounds) {
  const driver = new M.Driver(new M.Scheduler(policy));
  const start = performance.now();
  for (let r = 0; r < rounds; r++) await driver.run(batch(n), execute);
  const ms = performance.now() - start;
  driver.dispose();
  return ms;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const a = await setup(A);
const b = await setup(B);
console.log(`| batch size | rounds | B / A, median of ${PAIRS} paired ratios |`);
console.log('| ---: | ---: | ---: |');
for (const [n, rounds] of [[10, 2000], [100, 500], [1000, 100], [10000, 10]]) {
  await run(a, n, rounds);
  await run(b, n, rounds);
  const ratios = [];
  for (let i = 0; i < PAIRS; i++) {
    let ta;
    let tb;
    if (i % 2) {
      tb = await run(b, n, rounds);
      ta = await run(a, n, rounds);
    } else {
      ta = await run(a, n, rounds);
      tb = await run(b, n, rounds);
    }
    ratios.push(tb / ta);
  }
  console.log(`| ${n} | ${rounds} | ${median(ratios).toFixed(3)} |`);
}
