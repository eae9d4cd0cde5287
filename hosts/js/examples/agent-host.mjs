// What a TypeScript/JavaScript agent host copies: resolve the user's config layers once, make one
// scheduler for the conversation, and run each model response's tool calls through `runBatch`
// (call ids may repeat once an earlier response's batch has finished). Run it with
// `npm run example` after `npm run build`.
import { ConfigError, RefusedInputError, Scheduler, Turnstile, runBatch } from '../dist/index.js';
import { setTimeout as sleep } from 'node:timers/promises';

const layers = [
  {
    name: 'plugin: jp-rfd',
    text: `
[conversation.tools.rfd_draft]
concurrency = { key = "rfd" }
[conversation.tools.rfd_renumber]
concurrency = { key = "rfd" }
`,
  },
  { name: 'user', text: '[conversation.tools.fs_read_file]\nfan_out = true\n' },
];

const turnstile = await Turnstile.load();
let policy;
try {
  policy = turnstile.resolve(layers);
} catch (e) {
  if (e instanceof ConfigError) {
    console.error(e.message); // rustc-style, with the lines; e.diagnostics has the spans
    process.exit(1);
  }
  throw e;
}
const scheduler = new Scheduler(policy);

// The tool calls of one model response, in the order the model wrote them.
const calls = [
  { id: 'toolu_01', tool: 'rfd_renumber' },
  { id: 'toolu_02', tool: 'rfd_renumber' },
  { id: 'toolu_03', tool: 'fs_read_file', operations: 2 },
  { id: 'toolu_04', tool: 'rfd_draft' },
];

// Your tool runner: return the result, throw on failure, honour `signal` on cancellation.
async function execute({ label, call, operation, signal }) {
  console.log(`start ${label} (${call.tool}${operation === undefined ? '' : ` op ${operation}`})`);
  await sleep(20, undefined, { signal }).catch(() => {});
  console.log(`end   ${label}`);
  return { ok: true };
}

const controller = new AbortController(); // wire to Ctrl-C: process.on('SIGINT', () => controller.abort())
try {
  const outcomes = await runBatch(scheduler, calls, execute, { signal: controller.signal });
  for (const call of outcomes) {
    console.log(call.id, call.tool, call.entries.map((e) => e.status).join(','));
  }
} catch (e) {
  // A refused input is a bug in the host's driving; it fails this batch only (it is cancelled).
  if (e instanceof RefusedInputError) console.error(`batch failed: ${e.message}`);
  else throw e;
}

// To survive a crash, persist `scheduler.unfinished()` (plain data; bigints need a replacer in
// JSON) and on restart: `Scheduler.resume(policy, state, { started: 'interrupt' })`.
