// The Vercel AI SDK adapter (`@turnstile/scheduler/ai`) against the pinned `ai` and its own mock
// language model: several tool calls in one response, through `generateText` and `streamText`,
// over several steps, with tools that record their start and end. The same run without the
// wrapper shows the race, and the SDK behaviour the adapter relies on is tested directly.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { VirtualClock } from './fixtures/virtual-clock.mjs';
import { generateText, isStepCount, streamText, tool } from 'ai';
import { MockLanguageModelV4, convertArrayToReadableStream } from 'ai/test';
import { z } from 'zod';
import { Gate, Turnstile } from '../dist/index.js';
import { limitTools } from '../dist/ai.js';
import { CONFIG } from './fixtures/adapters.mjs';

const KEY = { rfd_draft: 'rfd', rfd_renumber: 'rfd', github_issues: 'github', clock: 'none' };

/** The model's responses, one per step, each with several tool calls in written order. */
const STEPS = [
  [
    ['r1', 'rfd_renumber', { from: 1, to: 2 }],
    ['g1', 'github_issues', { n: 1 }],
    ['r2', 'rfd_renumber', { from: 2, to: 3 }],
    ['d1', 'rfd_draft', {}],
    ['g2', 'github_issues', { n: 2 }],
    ['d2', 'rfd_draft', {}],
    ['g3', 'github_issues', { n: 3 }],
    ['g4', 'github_issues', { n: 4 }],
  ],
  [
    ['d3', 'rfd_draft', {}],
    ['g5', 'github_issues', { n: 5 }],
    ['r3', 'rfd_renumber', { from: 3, to: 4 }],
    ['g6', 'github_issues', { n: 6 }],
  ],
];

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
const toolCall = ([id, name, input]) => ({ type: 'tool-call', toolCallId: id, toolName: name, input: JSON.stringify(input) });

/** A mock model answering step `i` with STEPS[i] (then text), by generate or by stream. */
function model({ log = [] } = {}) {
  let step = 0;
  return new MockLanguageModelV4({
    doGenerate: async () => {
      const calls = STEPS[step++];
      if (!calls) return { content: [{ type: 'text', text: 'done' }], finishReason: { unified: 'stop', raw: undefined }, usage, warnings: [] };
      return { content: calls.map(toolCall), finishReason: { unified: 'tool-calls', raw: undefined }, usage, warnings: [] };
    },
    doStream: async () => {
      const calls = STEPS[step++];
      const parts = calls
        ? [{ type: 'stream-start', warnings: [] }, ...calls.map(toolCall), { type: 'finish', finishReason: { unified: 'tool-calls', raw: undefined }, usage }]
        : [{ type: 'stream-start', warnings: [] }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'done' }, { type: 'text-end', id: 't' }, { type: 'finish', finishReason: { unified: 'stop', raw: undefined }, usage }];
      // Parts arrive one per macrotask (as from a socket), each logged when the SDK pulls it.
      let i = 0;
      const stream = new ReadableStream({
        async pull(controller) {
          await new Promise((r) => setImmediate(r));
          if (i === parts.length) return controller.close();
          const part = parts[i++];
          log.push(`emit ${part.type === 'tool-call' ? part.toolCallId : part.type}`);
          controller.enqueue(part);
        },
      });
      return { stream };
    },
  });
}

/** The tools: shared state that races when run in parallel, each recording start and end. */
function tools(record) {
  const state = { rfds: new Set([1]), nextDraft: 1, running: {}, peak: {}, starts: { rfd: [], github: [] }, log: [] };
  const enter = (name, id) => {
    const key = KEY[name];
    state.running[key] = (state.running[key] ?? 0) + 1;
    state.peak[key] = Math.max(state.peak[key] ?? 0, state.running[key]);
    state.starts[key]?.push(id);
    state.log.push(`start ${id}`);
    record?.(name, id);
  };
  const leave = (name, id) => {
    state.running[KEY[name]] -= 1;
    state.log.push(`end ${id}`);
  };
  const set = {
    rfd_renumber: tool({
      description: 'renumber an RFD',
      inputSchema: z.object({ from: z.number(), to: z.number() }),
      execute: async ({ from, to }, { toolCallId }) => {
        enter('rfd_renumber', toolCallId);
        try {
          if (!state.rfds.has(from)) throw new Error(`there is no RFD ${from}`);
          await sleep(5);
          state.rfds.delete(from);
          state.rfds.add(to);
          return `renumbered ${from} -> ${to}`;
        } finally {
          leave('rfd_renumber', toolCallId);
        }
      },
    }),
    rfd_draft: tool({
      description: 'draft an RFD',
      inputSchema: z.object({}),
      execute: async (_input, { toolCallId }) => {
        enter('rfd_draft', toolCallId);
        const id = state.nextDraft;
        await sleep(5);
        state.nextDraft = id + 1;
        leave('rfd_draft', toolCallId);
        return `draft ${id}`;
      },
    }),
    github_issues: tool({
      description: 'read an issue',
      inputSchema: z.object({ n: z.number() }),
      execute: async ({ n }, { toolCallId }) => {
        enter('github_issues', toolCallId);
        await sleep(5);
        leave('github_issues', toolCallId);
        return `issue ${n}`;
      },
    }),
  };
  return { state, set };
}

/** The test's virtual clock, moving on its own whenever nothing else can run (no real sleep):
 * every gate's driver's clock and the tools' `sleep`. */
let clock = new VirtualClock();
let stopClock = clock.auto();
const sleep = (ms, _value, options) => clock.sleep(ms, options?.signal);
function freshClock() {
  stopClock();
  clock = new VirtualClock();
  stopClock = clock.auto();
  return clock;
}

async function policy() {
  const t = await Turnstile.load();
  return t.resolve([{ name: 'test', text: CONFIG }]);
}

/** What the model was sent as tool results before step `i` (by generate or stream calls). */
function resultsSent(m, i, streamed) {
  const call = (streamed ? m.doStreamCalls : m.doGenerateCalls)[i];
  const out = {};
  for (const message of call.prompt) {
    if (message.role !== 'tool') continue;
    for (const part of message.content) if (part.type === 'tool-result') out[part.toolCallId] = part.output;
  }
  return out;
}

async function run(mode, set) {
  const m = model();
  const options = { model: m, tools: set, prompt: 'go', stopWhen: isStepCount(5) };
  if (mode === 'generateText') {
    const result = await generateText(options);
    return { m, text: result.text, steps: result.steps.length };
  }
  const result = streamText({ ...options, onError: () => {} });
  const text = await result.text;
  return { m, text, steps: (await result.steps).length };
}

const written = (step, key) => STEPS[step].filter(([, name]) => KEY[name] === key).map(([id]) => id);

for (const mode of ['generateText', 'streamText']) {
  test(`${mode} without the wrapper races: the renumber chain fails and two drafts take the same id`, { timeout: 20_000 }, async () => {
    const { state, set } = tools();
    const { m } = await run(mode, set);
    const sent = resultsSent(m, 1, mode === 'streamText');
    // The SDK hands the model `String(error)`.
    assert.deepEqual(sent.r2, { type: 'error-text', value: 'Error: there is no RFD 2' });
    assert.equal(sent.d1.value, sent.d2.value, 'both drafts took the same id');
    assert.ok(state.peak.rfd > 1);
    assert.ok(state.peak.github > 2);
  });

  test(`${mode} with limitTools: no key over its limit, written order per key, every result delivered to the model`, { timeout: 20_000 }, async () => {
    const gate = new Gate(await policy(), { clock: freshClock() });
    const batches = [];
    // Each tool records the batch it runs in: the calls of one step are one batch, in written order.
    const { state, set } = tools(() => batches.push(gate.driver.inspect().map((b) => b.entries.map((e) => e.label))));
    const limited = limitTools(set, gate);
    assert.deepEqual(Object.keys(limited), Object.keys(set));
    const { m, text, steps } = await run(mode, limited);
    assert.equal(text, 'done');
    assert.equal(steps, 3);
    assert.deepEqual(state.peak, { rfd: 1, github: 2 });
    assert.deepEqual(state.starts.rfd, [...written(0, 'rfd'), ...written(1, 'rfd')]);
    assert.deepEqual(state.starts.github, [...written(0, 'github'), ...written(1, 'github')]);
    const stepIds = STEPS.map((calls) => calls.map(([id]) => id));
    for (const seen of batches) assert.ok(seen.length === 1 && stepIds.some((ids) => ids.join() === seen[0].join()), `one batch per step in written order, got ${JSON.stringify(seen)}`);
    const streamed = mode === 'streamText';
    assert.deepEqual(resultsSent(m, 1, streamed), {
      r1: { type: 'text', value: 'renumbered 1 -> 2' },
      g1: { type: 'text', value: 'issue 1' },
      r2: { type: 'text', value: 'renumbered 2 -> 3' },
      d1: { type: 'text', value: 'draft 1' },
      g2: { type: 'text', value: 'issue 2' },
      d2: { type: 'text', value: 'draft 2' },
      g3: { type: 'text', value: 'issue 3' },
      g4: { type: 'text', value: 'issue 4' },
    });
    const second = resultsSent(m, 2, streamed);
    assert.deepEqual([second.d3, second.r3, second.g6], [
      { type: 'text', value: 'draft 3' },
      { type: 'text', value: 'renumbered 3 -> 4' },
      { type: 'text', value: 'issue 6' },
    ]);
  });

  test(`${mode}: a call Turnstile settles reaches the model as its truthful text`, { timeout: 20_000 }, async () => {
    const { set } = tools();
    const limited = limitTools(set, await policy(), { decide: (label) => (label === 'd2' ? 'reject' : 'approve'), clock: freshClock() });
    const { m } = await run(mode, limited);
    const sent = resultsSent(m, 1, mode === 'streamText');
    assert.deepEqual(sent.d2, { type: 'error-text', value: 'not run: the user rejected this call' });
    assert.deepEqual(sent.d1, { type: 'text', value: 'draft 1' });
    assert.deepEqual(sent.r2, { type: 'text', value: 'renumbered 2 -> 3' });
  });
}

// What the adapter relies on, tested on the SDK alone (no gate), so that an upgrade that changes
// it fails here: every execute of one step is called in written order within one macrotask, and
// streamText starts tools only after the step's model stream ended.
for (const mode of ['generateText', 'streamText']) {
  test(`${mode} calls every execute of a step in written order within one macrotask`, { timeout: 20_000 }, async () => {
    const log = [];
    let task = 0;
    let stepTask;
    const calls = [];
    const { set } = tools((_name, id) => {
      const first = STEPS.some((s) => s[0][0] === id);
      if (first) {
        stepTask = ++task;
        // The gate closes its batch in the next macrotask: nothing of the step may come after.
        setImmediate(() => (task += 100));
      }
      calls.push([id, task === stepTask]);
    });
    const m = model({ log });
    const options = { model: m, tools: set, prompt: 'go', stopWhen: isStepCount(5) };
    if (mode === 'generateText') await generateText(options);
    else {
      const r = streamText({ ...options, onError: () => {} });
      await r.text;
    }
    const ids = STEPS.flat().map(([id]) => id);
    // Started in written order (the starts are synchronous at the top of each execute).
    assert.deepEqual(calls.map(([id]) => id), ids);
    for (const [id, sameTask] of calls) assert.ok(sameTask, `${id} was called in a later macrotask than its step's first call`);
  });
}

test('streamText starts a step\'s tools only after the model stream of that step ended', { timeout: 20_000 }, async () => {
  const log = [];
  const { set } = tools((_name, id) => log.push(`execute ${id}`));
  const r = streamText({ model: model({ log }), tools: set, prompt: 'go', stopWhen: isStepCount(5), onError: () => {} });
  await r.text;
  const firstExecute = log.findIndex((l) => l.startsWith('execute'));
  const lastToolCall = log.lastIndexOf(`emit ${STEPS[0].at(-1)[0]}`);
  assert.ok(lastToolCall >= 0 && firstExecute > lastToolCall, `tools started before the stream ended: ${log.join(', ')}`);
  assert.ok(log.indexOf('emit finish') < firstExecute, `tools started before the step's finish part: ${log.join(', ')}`);
});

test('limitTools keeps tools without execute and refuses what is not a tool set', async () => {
  const gate = new Gate(await policy(), { clock: freshClock() });
  const noExecute = { description: 'client-side tool' };
  const limited = limitTools({ ask: noExecute }, gate);
  assert.equal(limited.ask, noExecute);
  assert.throws(() => limitTools(null, gate), TypeError);
  assert.throws(() => limitTools({}, {}), TypeError);
});

test('the abort signal the SDK passes cancels a queued call and never hangs its key', { timeout: 20_000 }, async () => {
  const gate = new Gate(await policy(), { clock: freshClock() });
  const ran = [];
  const limited = limitTools(
    {
      rfd_draft: tool({
        inputSchema: z.object({}),
        execute: async (_i, { toolCallId, abortSignal }) => {
          ran.push(toolCallId);
          await sleep(toolCallId === 'a' ? 50 : 1, undefined, { signal: abortSignal }).catch(() => {});
          return toolCallId;
        },
      }),
    },
    gate,
  );
  const controller = new AbortController();
  const a = limited.rfd_draft.execute({}, { toolCallId: 'a', messages: [] });
  const b = limited.rfd_draft.execute({}, { toolCallId: 'b', messages: [], abortSignal: controller.signal });
  const c = limited.rfd_draft.execute({}, { toolCallId: 'c', messages: [] });
  while (!ran.includes('a')) await sleep(1);
  controller.abort(new Error('generation aborted'));
  await assert.rejects(b, /generation aborted/);
  assert.deepEqual([await a, await c], ['a', 'c']);
  assert.deepEqual(ran, ['a', 'c']);
});

test('limitTools makes a templated key from each call\'s input: writes to one file one at a time, in written order; files overlap', { timeout: 20_000 }, async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'fs', text: '[conversation.tools.fs_write]\nconcurrency = { key = "fs:{path}", limit = 1 }\n' }]);
  const writes = ['a', 'b', 'a', 'c', 'a', 'b'].map((file, i) => [`w${i + 1}`, 'fs_write', { path: `${file}.txt`, content: `line ${i + 1}` }]);
  let step = 0;
  const m = new MockLanguageModelV4({
    doGenerate: async () =>
      step++ === 0
        ? { content: writes.map(toolCall), finishReason: { unified: 'tool-calls', raw: undefined }, usage, warnings: [] }
        : { content: [{ type: 'text', text: 'done' }], finishReason: { unified: 'stop', raw: undefined }, usage, warnings: [] },
  });
  const running = new Map();
  const starts = new Map();
  let all = 0;
  let peak = 0;
  const overlaps = [];
  const set = {
    fs_write: tool({
      inputSchema: z.object({ path: z.string(), content: z.string() }),
      execute: async ({ path }, { toolCallId }) => {
        if ((running.get(path) ?? 0) > 0) overlaps.push(toolCallId);
        running.set(path, (running.get(path) ?? 0) + 1);
        starts.set(path, [...(starts.get(path) ?? []), toolCallId]);
        peak = Math.max(peak, ++all);
        await sleep(5);
        running.set(path, running.get(path) - 1);
        all -= 1;
        return `wrote ${path}`;
      },
    }),
  };
  const decide = (label) => (label === 'w6' ? 'reject' : 'approve');
  const result = await generateText({ model: m, tools: limitTools(set, policy, { decide, clock: freshClock() }), prompt: 'go', stopWhen: isStepCount(3) });
  assert.equal(result.text, 'done');
  assert.deepEqual(overlaps, []);
  assert.deepEqual(Object.fromEntries(starts), { 'a.txt': ['w1', 'w3', 'w5'], 'b.txt': ['w2'], 'c.txt': ['w4'] });
  assert.ok(peak >= 2, `different files ran together (peak ${peak})`);
  // The rejected call's text is the component's, as in every host.
  assert.deepEqual(resultsSent(m, 1, false).w6, { type: 'error-text', value: t.explain('w6', { kind: 'rejected' }) });
});
