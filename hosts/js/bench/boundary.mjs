// What crossing into the component costs, by verb and by unit, on the peers bench's batches
// (bench/peers.mjs) driven through jco's bindings directly (bench/floor.mjs's component loop):
// - per verb: `submit-batch`, `on-events` of the approvals, `on-ended` and `next-releases` of
//   every round, in us per call (each call timed on its own: the figures include a clock read);
// - per unit: one string more per call (a call's `arguments`, on a tool without a key template:
//   an item of the batch's `arguments`, one more `cabi_realloc` from JS, its bytes, the guest's
//   lifting and freeing), one
//   `cabi_realloc` called from JS alone (through `Turnstile.load`'s `instantiateCore`), and an
//   empty round (`on-ended` of nothing and `next-releases` with nothing to do).
// The figures behind the boundary change the README's Performance section weighs.
// `node bench/boundary.mjs [BATCH]` after `npm run build`.
import { Scheduler, Turnstile } from '../dist/index.js';
import { config } from './floor.mjs';

const BATCH = Number(process.argv[2] ?? 1000);
const ROUNDS = Math.max(10, Math.round(300_000 / BATCH));
const KEYS = 10;
const NONE = new BigUint64Array(0);
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

let core;
const t = await Turnstile.load({
  instantiateCore: async (module, imports) => {
    const instance = await WebAssembly.instantiate(module, imports);
    if (WebAssembly.Module.exports(module).some((e) => e.name === 'cabi_realloc')) core = instance.exports;
    return instance;
  },
});
const policy = t.resolve([{ name: 'bench', text: config }]);
/** A batch of `n` calls as `submit-batch` takes it (`args`: every call with arguments `{}`, on
 * tools without a key template). */
function packed(n, args) {
  let ids = '';
  let tools = '';
  const list = [];
  for (let i = 0; i < n; i++) {
    ids += `c${i}\n`;
    tools += `${args || i % 10 !== 9 ? `t${i % KEYS}` : 'free'}\n`;
    if (args) list.push({ call: i, json: '{}' });
  }
  return { ids, tools, fanOuts: [], arguments: list };
}

/** Per verb, in us per call, over `rounds` batches of `n` calls. */
function verbs(raw, n, rounds) {
  const ms = { submit: 0, approve: 0, ended: 0, next: 0 };
  let crossings = 0;
  for (let r = 0; r < rounds; r++) {
    const batch = packed(n, false);
    let t0 = performance.now();
    const { first, count } = raw.submitBatch(batch, {});
    ms.submit += performance.now() - t0;
    const approve = new BigUint64Array(count);
    for (let i = 0; i < count; i++) approve[i] = first + BigInt(i);
    t0 = performance.now();
    raw.onEvents([{ tag: 'approve', val: approve }], 0n);
    ms.approve += performance.now() - t0;
    for (;;) {
      t0 = performance.now();
      const { start, retired } = raw.nextReleases(0n);
      ms.next += performance.now() - t0;
      crossings++;
      if (retired.length) break;
      t0 = performance.now();
      raw.onEnded({ ok: start, failed: NONE, rateLimited: [] }, 0n);
      ms.ended += performance.now() - t0;
    }
  }
  const per = (x) => (x * 1000) / (n * rounds);
  return { submit: per(ms.submit), approve: per(ms.approve), ended: per(ms.ended), next: per(ms.next), rounds: crossings / rounds };
}

/** `submit-batch` of a packed batch of `calls` calls then the batch cancelled, in us per call. */
function submitted(raw, batch, calls, rounds) {
  const start = performance.now();
  for (let r = 0; r < rounds; r++) {
    const { batch: number } = raw.submitBatch(batch, {});
    raw.onEvents([{ tag: 'cancel', val: number }], 0n);
    raw.nextReleases(0n);
  }
  return ((performance.now() - start) * 1000) / (calls * rounds);
}

const scheduler = new Scheduler(policy);
const raw = scheduler.held.get();
verbs(raw, BATCH, 5);
const runs = Array.from({ length: 5 }, () => verbs(raw, BATCH, ROUNDS));
const v = (k) => median(runs.map((r) => r[k])).toFixed(3);
console.log(`batches of ${BATCH}, ${runs[0].rounds} rounds a batch; us per call, median of 5 runs:`);
console.log('| submit-batch | on-events (approvals) | on-ended | next-releases | sum |');
console.log('| ---: | ---: | ---: | ---: | ---: |');
console.log(`| ${v('submit')} | ${v('approve')} | ${v('ended')} | ${v('next')} | ${median(runs.map((r) => r.submit + r.approve + r.ended + r.next)).toFixed(3)} |`);

const plain = packed(BATCH, false);
const withArgs = packed(BATCH, true);
const a = [];
const b = [];
for (let i = 0; i < 15; i++) {
  a.push(submitted(raw, plain, BATCH, Math.max(3, ROUNDS >> 2)));
  b.push(submitted(raw, withArgs, BATCH, Math.max(3, ROUNDS >> 2)));
}
const string = median(b) - median(a);

const N = 300_000;
const reallocs = Array.from({ length: 9 }, () => {
  const start = performance.now();
  for (let i = 0; i < N; i++) core.cabi_realloc(0, 0, 1, 2);
  return ((performance.now() - start) * 1e6) / N;
});
const empty = Array.from({ length: 9 }, () => {
  const start = performance.now();
  for (let i = 0; i < N / 3; i++) {
    raw.onEnded({ ok: NONE, failed: NONE, rateLimited: [] }, 0n);
    raw.nextReleases(0n);
  }
  return ((performance.now() - start) * 1e6) / (N / 3);
});
console.log(`\none string more per call: ${(string * 1000).toFixed(0)} ns; cabi_realloc from JS: ${median(reallocs).toFixed(0)} ns; an empty round: ${median(empty).toFixed(0)} ns`);
scheduler.dispose();
