// What a TypeScript/JavaScript agent host copies: resolve the user's config layers once, make one
// scheduler and driver for the conversation, and run each model response's tool calls through
// `driver.run` (call ids may repeat once an earlier response's batch has finished). It ships with
// the package: in a project that installed it, `node node_modules/@turnstile/scheduler/examples/agent-host.mjs`
// runs it (it imports the package by name, so a copy runs unchanged too); in the repository,
// `npm run example` after `npm run build`.
import { ConfigError, Driver, RefusedInputError, Scheduler, Turnstile } from '@turnstile/scheduler';
import { setTimeout as sleep } from 'node:timers/promises';

const layers = [
  {
    name: 'plugin: rfd-tools',
    text: `
[conversation.tools.rfd_draft]
concurrency = { key = "rfd" }
[conversation.tools.rfd_renumber]
concurrency = { key = "rfd" }
# A key from the call's arguments: one write at a time per file, files in parallel.
[conversation.tools.fs_write_file]
concurrency = { key = "fs:{path}", limit = 1 }
`,
  },
  // A layer may also be a plain object of the same shape.
  { name: 'user', value: { conversation: { tools: { fs_read_file: { fan_out: true } } } } },
];

const turnstile = await Turnstile.load();
let policy;
try {
  policy = turnstile.resolve(layers);
} catch (e) {
  if (e instanceof ConfigError) {
    console.error(e.message); // rustc-style, with the lines; e.diagnostics has codes, paths, spans
    process.exit(1);
  }
  throw e;
}
const driver = new Driver(new Scheduler(policy));

// The tool calls of one model response, in the order the model wrote them, each with its
// arguments (`args`: the parsed JSON; a templated key is made from them).
const calls = [
  { id: 'toolu_01', tool: 'rfd_renumber', args: { from: 1, to: 2 } },
  { id: 'toolu_02', tool: 'rfd_renumber', args: { from: 2, to: 3 } },
  { id: 'toolu_03', tool: 'fs_read_file', operations: 2 },
  { id: 'toolu_04', tool: 'rfd_draft' },
  { id: 'toolu_05', tool: 'fs_write_file', args: { path: 'a.md', content: 'one' } },
  { id: 'toolu_06', tool: 'fs_write_file', args: { path: 'b.md', content: 'two' } }, // next to toolu_05
  { id: 'toolu_07', tool: 'fs_write_file', args: { path: 'a.md', content: 'three' } }, // after toolu_05
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
  const outcomes = await driver.run(calls, execute, {
    signal: controller.signal,
    // Ask the user (or a remembered rule) before anything of the batch runs.
    decide: (label, call) => (call.tool === 'fs_delete_file' ? 'reject' : 'approve'),
    // A tool that ignores its signal frees its key 5 s after a cancel.
    abortGraceMs: 5000,
  });
  for (const call of outcomes) {
    // A settled entry's `message` is the text to hand back to the model ("not run: ...").
    console.log(call.id, call.tool, call.entries.map((e) => (e.status === 'settled' ? e.message : e.status)).join(','));
  }
} catch (e) {
  // A refused input is a bug in the host's driving; it fails this batch only (it is cancelled).
  if (e instanceof RefusedInputError) console.error(`batch failed: ${e.message}`);
  else throw e;
}

// To survive a crash, give the driver a place to save: `new Driver(scheduler, { persist: async
// (snapshot) => { await writeFile(tmp, snapshot); await rename(tmp, path); } })`; it saves before
// anything starts and before any outcome reaches you. Keep the calls' arguments too, and after
// `run` resolved and you kept its outcomes, `driver.forget(outcomes)`. On restart:
// `Driver.resume(policy, await readFile(path, 'utf8'), { started: 'interrupt', execute, persist,
// argsOf: (call) => args[call.id] })`.
driver.dispose();
