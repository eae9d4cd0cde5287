// The OpenAI Agents SDK adapter (`@turnstile/scheduler/openai-agents`) against the pinned
// `@openai/agents`, driven by a fake `Model` (the SDK's own interface) returning several
// function calls per response over several turns, with tools that record their start and end.
// First the failure paths (a tool that throws, a call rejected by `decide`, the run
// cancelled), then the same run limited (limits, written order per key, one batch per
// response, results back to the model), the race without the adapter, and the SDK behaviour
// the adapter rests on, tested on the SDK alone.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { VirtualClock } from './fixtures/virtual-clock.mjs';

let sdk;
try {
  sdk = await import('@openai/agents');
} catch (error) {
  // A missing library is a failure, never a skip.
  throw new Error(
    'test/openai-agents.test.mjs needs the OpenAI Agents SDK: npm install (the package pins @openai/agents in devDependencies), ' +
      `or npm install --no-save @openai/agents@0.20.0 (${error.message})`,
  );
}
const { Agent, Runner, Usage, tool, setTracingDisabled } = sdk;
const { z } = await import('zod');
const { Driver, Scheduler, Turnstile } = await import('../dist/index.js');
const { limited } = await import('../dist/openai-agents.js');

setTracingDisabled(true);

const { CONFIG, tracker } = await import('./fixtures/adapters.mjs');
const KEY = { rfd_draft: 'rfd', rfd_renumber: 'rfd', github_issues: 'github', read: 'read' };

let turnstile;
async function policy() {
  turnstile ??= await Turnstile.load();
  return turnstile.resolve([{ name: 'test', text: CONFIG }]);
}

/** The test's virtual clock, moving on its own whenever nothing else can run. */
let clock = new VirtualClock();
let stopClock = clock.auto();
function freshClock() {
  stopClock();
  clock = new VirtualClock();
  stopClock = clock.auto();
  return clock;
}
const sleep = (ms, signal) => clock.sleep(ms, signal);

const call = (name, args, callId) => ({ type: 'function_call', id: `fc_${callId}`, callId, name, arguments: JSON.stringify(args), status: 'completed' });
const message = (text) => ({ type: 'message', id: 'msg', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text }] });

// Three model turns, each one response with several function calls, then the answer.
const TURNS = [
  [call('rfd_draft', { title: 'A' }, 'd1'), call('read', { path: 'x' }, 'x1'), call('rfd_draft', { title: 'B' }, 'd2')],
  [call('rfd_renumber', { old: 2, to: 5 }, 'r1'), call('rfd_renumber', { old: 5, to: 6 }, 'r2'), call('rfd_renumber', { old: 6, to: 7 }, 'r3')],
  [0, 1, 2, 3, 4].map((n) => call('github_issues', { n }, `g${n}`)),
];

/** A fake `Model`: answers turn n with `turns[n]`, then "done"; records, per turn, the tool
 * outputs it received (new ones only) and, through `onResponse`, when each response left it. */
class ScriptedModel {
  constructor(turns, { onResponse } = {}) {
    this.turns = turns;
    this.received = [];
    this.onResponse = onResponse;
  }

  async getResponse(request) {
    const items = Array.isArray(request.input) ? request.input : [];
    const seen = new Set(this.received.flatMap((r) => Object.keys(r)));
    const outputs = {};
    for (const item of items) {
      if (item.type === 'function_call_result' && !seen.has(item.callId)) outputs[item.callId] = item.output?.text ?? item.output;
    }
    this.received.push(outputs);
    const turn = this.received.length - 1;
    const output = this.turns[turn] ?? [message('done')];
    this.onResponse?.(turn);
    return { usage: new Usage(), output: structuredClone(output), responseId: `resp_${turn}` };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse() {
    throw new Error('ScriptedModel does not stream');
  }
}

/** The tools' shared state, and a record of every start and end. */
function world() {
  const state = { rfds: new Map([[1, 'existing']]), events: [], running: {}, peak: {}, signals: [] };
  const { enter, leave } = tracker(state, KEY);
  const tools = [
    tool({
      name: 'rfd_draft',
      description: 'Allocates the next RFD number (read, think, write: racy by nature).',
      parameters: z.object({ title: z.string() }),
      execute: async ({ title }) => {
        const number = Math.max(...state.rfds.keys()) + 1;
        enter('rfd_draft', title);
        await sleep(20);
        state.rfds.set(number, title);
        leave('rfd_draft', title);
        return String(number);
      },
    }),
    tool({
      name: 'rfd_renumber',
      description: 'Moves RFD `old` to `to`.',
      parameters: z.object({ old: z.number(), to: z.number() }),
      execute: async ({ old, to }) => {
        if (!state.rfds.has(old)) return `no RFD ${old}`;
        if (state.rfds.has(to)) return `RFD ${to} exists`;
        enter('rfd_renumber', `${old}->${to}`);
        await sleep(10);
        state.rfds.set(to, state.rfds.get(old));
        state.rfds.delete(old);
        leave('rfd_renumber', `${old}->${to}`);
        return `${old} is now ${to}`;
      },
    }),
    tool({
      name: 'github_issues',
      description: 'Reads issue n.',
      parameters: z.object({ n: z.number() }),
      // The model reads the error itself (the SDK's default text hides it).
      errorFunction: (_context, error) => `failed: ${error.message}`,
      execute: async ({ n }, _context, details) => {
        state.signals.push(details?.signal);
        enter('github_issues', String(n));
        try {
          await sleep(10, n === 4 ? details?.signal : undefined);
        } finally {
          leave('github_issues', String(n));
        }
        if (n === 99) throw new Error('github is down');
        return `issue ${n}`;
      },
    }),
    tool({
      name: 'read',
      description: 'Reads a file.',
      parameters: z.object({ path: z.string() }),
      execute: async ({ path }) => {
        enter('read', path);
        await sleep(5);
        leave('read', path);
        return `contents of ${path}`;
      },
    }),
  ];
  const starts = (key) => state.events.filter(([kind, name]) => kind === 'start' && KEY[name] === key).map(([, , label]) => label);
  return { state, tools, starts };
}

function agentWith(w, turns = TURNS, modelOptions) {
  const model = new ScriptedModel(turns, modelOptions);
  return { agent: new Agent({ name: 'rfd', instructions: 'manage RFDs', model, tools: w.tools }), model };
}

/** A driver that records each batch (its call labels) and each decision, in order. */
class Counting extends Driver {
  constructor(scheduler, log) {
    super(scheduler, { clock });
    this.batches = [];
    this.log = log;
  }

  run(calls, execute, options) {
    this.batches.push(calls.map((c) => c.id));
    this.log?.push(['batch', calls.map((c) => c.id).join(',')]);
    return super.run(calls, execute, options);
  }
}

const runner = () => new Runner({ tracingDisabled: true });

// --- failure paths ---------------------------------------------------------------------------

test('a tool that throws fails only its own call: the model reads its error, its siblings run', { timeout: 20_000 }, async () => {
  const w = world();
  const turns = [[call('github_issues', { n: 99 }, 'g99'), call('github_issues', { n: 1 }, 'g1'), call('github_issues', { n: 2 }, 'g2')]];
  const { agent, model } = agentWith(w, turns);
  const result = await runner().run(limited(agent, await policy(), { clock: freshClock() }), 'go');
  assert.equal(result.finalOutput, 'done');
  const sent = model.received[1];
  assert.equal(sent.g99, 'failed: github is down');
  assert.equal(sent.g1, 'issue 1');
  assert.equal(sent.g2, 'issue 2');
  assert.equal(w.state.peak.github, 2);
});

test('a call rejected by decide never runs: the model gets the component\'s sentence, the rest of the response runs', { timeout: 20_000 }, async () => {
  const w = world();
  const { agent, model } = agentWith(w);
  const t = await Turnstile.load();
  const decide = (label) => (label === 'd2' ? 'reject' : 'approve');
  const result = await runner().run(limited(agent, await policy(), { decide, clock: freshClock() }), 'go');
  assert.equal(result.finalOutput, 'done');
  const sent = model.received[1];
  assert.equal(sent.d2, t.explain('d2', { kind: 'rejected' }));
  assert.equal(sent.d2, 'not run: the user rejected this call');
  assert.equal(sent.d1, '2');
  assert.equal(sent.x1, 'contents of x');
  assert.deepEqual(w.starts('rfd').slice(0, 1), ['A']);
  assert.ok(!w.starts('rfd').includes('B'));
});

test('settled: "throw" throws CallSettledError from the tool', { timeout: 20_000 }, async () => {
  const w = world();
  const { agent } = agentWith(w);
  const decide = (label) => (label === 'd2' ? 'reject' : 'approve');
  await assert.rejects(runner().run(limited(agent, await policy(), { decide, settled: 'throw', clock: freshClock() }), 'go'), (error) => {
    assert.match(String(error?.message ?? error), /not run: the user rejected this call/);
    return true;
  });
});

test('cancelling the run (its AbortSignal) cancels the response\'s batch: queued calls never run, the running ones see the abort, no key is left held', { timeout: 20_000 }, async () => {
  const w = world();
  const turns = [[0, 1, 2, 3, 4].map((n) => call('github_issues', { n: n === 1 ? 4 : n + 10 }, `g${n}`))];
  const { agent } = agentWith(w, turns);
  const scheduler = new Scheduler(await policy());
  const driver = new Driver(scheduler, { clock: freshClock() });
  const controller = new AbortController();
  const limitedAgent = limited(agent, driver);
  const run = runner().run(limitedAgent, 'go', { signal: controller.signal });
  // Abort once the first two are running (issue 10 and issue 4, which honours its signal).
  while ((w.state.running.github ?? 0) < 2) await new Promise((r) => setImmediate(r));
  controller.abort(new Error('user pressed stop'));
  await run.catch(() => {});
  // Let the driver retire what was running.
  for (let i = 0; i < 50 && driver.liveBatches > 0; i++) await sleep(5);
  assert.deepEqual(w.starts('github'), ['10', '4'], 'the queued calls never started');
  assert.equal(driver.liveBatches, 0, 'the batch retired: no key is held');
  assert.ok(w.state.signals[1]?.aborted, 'the running call saw the abort');
  // The key is free: a new run on the same driver runs at once.
  const w2 = world();
  const { agent: again } = agentWith(w2, [[call('github_issues', { n: 7 }, 'h7')]]);
  const result = await runner().run(limited(again, driver), 'go');
  assert.equal(result.finalOutput, 'done');
  driver.dispose();
});

// --- limits, order, batches, results --------------------------------------------------------

test('without the adapter the calls race: two drafts take the same number, the renumber chain breaks, keys go over their limits', { timeout: 20_000 }, async () => {
  freshClock();
  const w = world();
  const { agent, model } = agentWith(w);
  const result = await runner().run(agent, 'go');
  assert.equal(result.finalOutput, 'done');
  const drafts = model.received[1];
  assert.equal(drafts.d1, drafts.d2, 'two drafts took the same number');
  const renumbered = model.received[2];
  assert.equal(renumbered.r1, '2 is now 5');
  assert.deepEqual([renumbered.r2, renumbered.r3], ['no RFD 5', 'no RFD 6']);
  assert.ok(w.state.peak.rfd > 1 && w.state.peak.github > 2);
});

test('limited: no key over its limit, written order per key, one batch per response decided before any call starts, every result back to the model', { timeout: 20_000 }, async () => {
  const w = world();
  const log = [];
  const { agent, model } = agentWith(w, TURNS, { onResponse: (turn) => log.push(['response', String(turn)]) });
  const driver = new Counting(new Scheduler(await policy()), log);
  freshClock();
  const decide = (label) => {
    log.push(['decide', label]);
    return 'approve';
  };
  const limitedAgent = limited(agent, driver, { decide });
  assert.notEqual(limitedAgent, agent);
  const result = await runner().run(limitedAgent, 'go');
  assert.equal(result.finalOutput, 'done');
  assert.deepEqual(w.state.peak, { rfd: 1, github: 2, read: 1 });
  assert.deepEqual(w.starts('rfd'), ['A', 'B', '2->5', '5->6', '6->7']);
  assert.deepEqual(w.starts('github'), ['0', '1', '2', '3', '4']);
  // One batch per response, in written order.
  assert.deepEqual(driver.batches, TURNS.map((calls) => calls.map((c) => c.callId)));
  // Every call of a response is decided before any of it starts (starts are logged by the
  // tools: merge the two logs by position in time through the shared event list).
  const decided = log.filter(([kind]) => kind === 'decide').map(([, label]) => label);
  assert.deepEqual(decided, TURNS.flat().map((c) => c.callId));
  // Results went back to the model: the drafts got distinct numbers, the chain worked.
  assert.deepEqual(model.received[1], { d1: '2', x1: 'contents of x', d2: '3' });
  assert.deepEqual(model.received[2], { r1: '2 is now 5', r2: '5 is now 6', r3: '6 is now 7' });
  assert.deepEqual(model.received[3], { g0: 'issue 0', g1: 'issue 1', g2: 'issue 2', g3: 'issue 3', g4: 'issue 4' });
  // Each batch was submitted after its response and its calls decided before any started.
  assert.deepEqual(log.slice(0, 5), [['response', '0'], ['batch', 'd1,x1,d2'], ['decide', 'd1'], ['decide', 'x1'], ['decide', 'd2']]);
  driver.dispose();
});

test('decide runs before any call of the response starts, even when it is slow (a prompt)', { timeout: 20_000 }, async () => {
  const w = world();
  const { agent } = agentWith(w, [TURNS[0]]);
  let startsWhenDecided;
  const decide = async (label) => {
    await sleep(30);
    if (label === 'd2') startsWhenDecided = w.state.events.filter(([kind]) => kind === 'start').length;
    return 'approve';
  };
  const result = await runner().run(limited(agent, await policy(), { decide, clock: freshClock() }), 'go');
  assert.equal(result.finalOutput, 'done');
  assert.equal(startsWhenDecided, 0, 'no call started before the last call of its response was decided');
});

test('a policy gives each run its own scheduler: two runs of one limited agent at once each keep their own limits', { timeout: 20_000 }, async () => {
  freshClock();
  const w = world();
  const turns = [[0, 1, 2].map((n) => call('github_issues', { n }, `g${n}`))];
  // One limited agent, two runs at once: its one model answers each run's first request with
  // three calls (ids made distinct per run), then "done".
  const shared = new ScriptedModel([]);
  let n = 0;
  shared.getResponse = async () => ({ usage: new Usage(), output: n++ < 2 ? structuredClone(turns[0]).map((c) => ({ ...c, callId: `${c.callId}-${n}` })) : [message('done')], responseId: `r${n}` });
  const a2 = limited(new Agent({ name: 'gh', model: shared, tools: w.tools }), await policy());
  const [r1, r2] = await Promise.all([runner().run(a2, 'one'), runner().run(a2, 'two')]);
  assert.equal(r1.finalOutput, 'done');
  assert.equal(r2.finalOutput, 'done');
  // Per run limit 2; two runs: up to 4 at once, never more.
  assert.ok(w.state.peak.github <= 4 && w.state.peak.github > 2, `peak ${w.state.peak.github}`);
});

test('limited refuses what it cannot limit', async () => {
  const p = await policy();
  const w = world();
  assert.throws(() => limited({}, p), TypeError);
  assert.throws(() => limited(new Agent({ name: 'x', model: new ScriptedModel([]), tools: w.tools }), {}), TypeError);
  assert.throws(() => limited(new Agent({ name: 'x', model: 'gpt-5', tools: w.tools }), p), /Model object/);
  const once = limited(new Agent({ name: 'x', model: new ScriptedModel([]), tools: w.tools }), p);
  assert.throws(() => limited(once, p), /limited already/);
  assert.throws(() => limited(new Agent({ name: 'x', model: new ScriptedModel([]), tools: w.tools }), p, { settled: 'raise' }), RangeError);
});

// --- what the adapter relies on in the SDK ---------------------------------------------------

test('SDK probe: the model\'s response is awaited before any of its tools is invoked, every call invoked with its call id, one run context per run', { timeout: 20_000 }, async () => {
  freshClock();
  const log = [];
  const contexts = new Set();
  const tools = ['a', 'b', 'c'].map((name) =>
    tool({
      name,
      description: name,
      parameters: z.object({ i: z.number() }),
      execute: async ({ i }, context, details) => {
        contexts.add(context);
        log.push(`invoke ${name} ${details?.toolCall?.callId} ${i} ${details?.signal instanceof AbortSignal}`);
        await sleep(1);
        return `${name}${i}`;
      },
    }),
  );
  const turns = [
    [call('a', { i: 1 }, 'c1'), call('b', { i: 2 }, 'c2'), call('a', { i: 3 }, 'c3')],
    [call('c', { i: 4 }, 'c4'), call('b', { i: 5 }, 'c5')],
  ];
  const model = new ScriptedModel(turns, { onResponse: (turn) => log.push(`response ${turn}`) });
  // The SDK itself, not the adapter: a copy `{ ...tool, invoke }` is invoked as the adapter wraps.
  const copies = tools.map((t) => ({ ...t, invoke: (ctx, input, details) => {
    log.push(`copy ${t.name} ${details?.toolCall?.callId} ${input}`);
    return sdk.invokeFunctionTool({ tool: t, runContext: ctx, input, details });
  }, timeoutMs: undefined }));
  const result = await runner().run(new Agent({ name: 'probe', model, tools: copies }), 'go');
  assert.equal(result.finalOutput, 'done');
  const at = (line) => log.indexOf(line);
  assert.ok(at('response 0') < at('copy a c1 {"i":1}'));
  // Each response's calls reach their tools only after the response, and all of them do.
  for (const [turn, calls] of turns.entries()) {
    for (const c of calls) {
      const i = at(`copy ${c.name} ${c.callId} ${c.arguments}`);
      assert.ok(i > at(`response ${turn}`), `${c.callId} invoked before its response: ${log.join(' | ')}`);
      if (turns[turn + 1]) assert.ok(i < at(`response ${turn + 1}`));
      assert.ok(log.includes(`invoke ${c.name} ${c.callId} ${JSON.parse(c.arguments).i} true`), `${c.callId} ran with its call id and a signal`);
    }
  }
  assert.equal(contexts.size, 1, 'one run context for the whole run');
  assert.deepEqual(model.received[1], { c1: 'a1', c2: 'b2', c3: 'a3' });
  // The static policies the adapter reads are functions of no parameter.
  assert.equal(tools[0].needsApproval.length, 0);
  assert.equal(await tools[0].needsApproval(), false);
  assert.equal(tools[0].isEnabled.length, 0);
  const dynamic = tool({ name: 'd', description: 'd', parameters: z.object({}), execute: async () => '', needsApproval: async (_ctx, _input) => true, isEnabled: ({ runContext }) => !!runContext });
  assert.ok(dynamic.needsApproval.length > 0);
  assert.ok(dynamic.isEnabled.length > 0);
  // The function_call output item is what the adapter reads.
  assert.deepEqual(Object.keys(model.received), ['0', '1', '2']);
  // agent.on('agent_end', (context, output)) fires at the final output.
  const ended = [];
  const agent = new Agent({ name: 'end', model: new ScriptedModel([]), tools: [] });
  agent.on('agent_end', (context, output) => ended.push([typeof context, output]));
  await runner().run(agent, 'go');
  assert.deepEqual(ended, [['object', 'done']]);
});

test('SDK probe: the run\'s signal aborting reaches each invoked tool\'s details.signal', { timeout: 20_000 }, async () => {
  freshClock();
  const signals = [];
  const t = tool({
    name: 'slow',
    description: 'slow',
    parameters: z.object({}),
    execute: async (_i, _c, details) => {
      signals.push(details.signal);
      await sleep(50, details.signal);
      return 'x';
    },
  });
  const controller = new AbortController();
  const model = new ScriptedModel([[call('slow', {}, 's1'), call('slow', {}, 's2')]]);
  const run = runner().run(new Agent({ name: 'p', model, tools: [t] }), 'go', { signal: controller.signal });
  while (signals.length < 2) await new Promise((r) => setImmediate(r));
  controller.abort(new Error('stop'));
  await run.catch(() => {});
  assert.ok(signals.every((s) => s.aborted));
});
