// The LangChain v1 adapter (`@turnstile/scheduler/langchain`) against the pinned `langchain`:
// `createAgent` driven by LangChain's own fake chat model (`FakeListChatModel`, subclassed to
// write several tool calls per response over several turns), with tools that record their start
// and end. First the failure paths (a tool that throws, bad arguments, a call rejected by
// `decide`, the run cancelled), then the race without the middleware, the same run limited
// (limits, written order per key, one batch per response decided before any start, results back
// to the model), and the LangChain behaviour the middleware rests on, tested on LangChain alone.
import { test } from 'node:test';
import assert from 'node:assert/strict';

let lc;
let testing;
try {
  lc = await import('langchain');
  testing = await import('@langchain/core/utils/testing');
} catch (error) {
  // A missing library is a failure, never a skip.
  throw new Error(
    'test/langchain.test.mjs needs LangChain v1: npm install (the package pins langchain and @langchain/core in devDependencies), ' +
      `or npm install --no-save langchain@1.5.14 @langchain/core@1.4.0 (${error.message})`,
  );
}
const { AIMessage, ToolMessage, createAgent, createMiddleware, tool } = lc;
const { FakeListChatModel } = testing;
const { z } = await import('zod');
const { CallSettledError, Gate, Turnstile } = await import('../dist/index.js');
const { turnstileMiddleware } = await import('../dist/langchain.js');

const { CONFIG, tracker } = await import('./fixtures/adapters.mjs');
const LIMITS = { rfd: 1, github: 2 };
const KEY = { rfd_draft: 'rfd', rfd_renumber: 'rfd', github_issues: 'github', read: 'read' };

let turnstile;
async function policy(text = CONFIG) {
  turnstile ??= await Turnstile.load();
  return turnstile.resolve([{ name: 'test', text }]);
}

/** Sleeps `ms`, rejecting with the signal's reason when it aborts. */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      reject(signal.reason);
    }, { once: true });
  });
}

const call = (name, args, id) => ({ name, args, id, type: 'tool_call' });

// Three model turns, each one response with several tool calls, then the answer: two drafts that
// race for a number, a renumber chain, more issues than github's limit.
const TURNS = [
  [call('rfd_draft', { title: 'A' }, 'd1'), call('read', { path: 'x' }, 'x1'), call('rfd_draft', { title: 'B' }, 'd2')],
  [call('rfd_renumber', { old: 2, to: 5 }, 'r1'), call('rfd_renumber', { old: 5, to: 6 }, 'r2'), call('rfd_renumber', { old: 6, to: 7 }, 'r3')],
  [0, 1, 2, 3, 4].map((n) => call('github_issues', { n }, `g${n}`)),
];

/** LangChain's fake chat model, answering turn n with `turns[n]`'s tool calls, then "done";
 * records, per turn, the tool results it received ({ id: [content, status] }). `bindTools` (the
 * agent binds its tools) gives the model itself. */
class ScriptedModel extends FakeListChatModel {
  constructor(turns) {
    super({ responses: ['done'] });
    this.turns = turns;
    this.received = [];
  }

  bindTools() {
    return this;
  }

  async _generate(messages) {
    const answers = {};
    for (let i = messages.length - 1; i >= 0 && ToolMessage.isInstance(messages[i]); i--) {
      answers[messages[i].tool_call_id] = [messages[i].content, messages[i].status];
    }
    this.received.push(answers);
    const turn = this.turns[this.received.length - 1];
    const message = turn ? new AIMessage({ content: '', tool_calls: structuredClone(turn) }) : new AIMessage('done');
    return { generations: [{ text: '', message }] };
  }
}

const contents = (answers) => Object.fromEntries(Object.entries(answers).map(([id, [content]]) => [id, content]));

/** The tools' shared state, and a record of every start and end. */
function world({ draftMs = 20 } = {}) {
  const state = { rfds: new Map([[1, 'existing']]), events: [], running: {}, peak: {} };
  const { enter, leave } = tracker(state, KEY);
  /** `ms` of work inside a start and an end (no end when the signal aborts it). */
  const work = async (name, label, ms, signal) => {
    enter(name, label);
    try {
      await sleep(ms, signal);
    } catch (error) {
      state.running[KEY[name]] -= 1;
      throw error;
    }
    leave(name, label);
  };
  state.tools = [
    tool(
      async ({ title }, config) => {
        const number = Math.max(...state.rfds.keys()) + 1; // read, think, write: racy by nature
        await work('rfd_draft', title, draftMs, config?.signal);
        state.rfds.set(number, title);
        return String(number);
      },
      { name: 'rfd_draft', description: 'Allocates the next RFD number.', schema: z.object({ title: z.string() }) },
    ),
    tool(
      async ({ old, to }, config) => {
        if (!state.rfds.has(old)) return `no RFD ${old}`;
        if (state.rfds.has(to)) return `RFD ${to} exists`;
        await work('rfd_renumber', `${old}->${to}`, 10, config?.signal);
        state.rfds.set(to, state.rfds.get(old));
        state.rfds.delete(old);
        return `${old} is now ${to}`;
      },
      { name: 'rfd_renumber', description: 'Moves an RFD.', schema: z.object({ old: z.number(), to: z.number() }) },
    ),
    tool(
      async ({ n }, config) => {
        await work('github_issues', String(n), 10, config?.signal);
        return `issue ${n}`;
      },
      { name: 'github_issues', description: 'Reads an issue.', schema: z.object({ n: z.number() }) },
    ),
    tool(
      async ({ path }, config) => {
        await work('read', path, 5, config?.signal);
        return `contents of ${path}`;
      },
      { name: 'read', description: 'Reads a file.', schema: z.object({ path: z.string() }) },
    ),
  ];
  state.starts = (key) => state.events.filter(([kind, name]) => kind === 'start' && KEY[name] === key).map(([, , label]) => label);
  return state;
}

/** Runs the agent over `turns` with `middleware`; returns the model (what it received). */
async function runAgent(w, middleware, turns = TURNS, config = {}) {
  const model = new ScriptedModel(turns);
  const agent = createAgent({ model, tools: w.tools, middleware });
  const result = await agent.invoke({ messages: [{ role: 'user', content: 'go' }] }, config);
  assert.equal(result.messages.at(-1).content, 'done');
  return model;
}

/** Nothing left on the middleware's scheduler: no live batch, no expected call. */
function noLiveBatches(mw) {
  assert.deepEqual(mw.gate.driver.inspect(), []);
  assert.deepEqual(mw.gate.expected(), []);
  return true;
}

/** Resolves when `check()` holds (polled each macrotask; no timed waits in assertions). */
function until(check) {
  return new Promise((resolve) => {
    const poll = () => (check() ? resolve() : setImmediate(poll));
    poll();
  });
}

const has = (events, event) => events.some((e) => e.join(' ') === event.join(' '));

// -- failure paths ------------------------------------------------------------------------------

test('a tool that throws fails the run (LangChain\'s default): nothing is left on the scheduler and its key is free', async () => {
  const mw = turnstileMiddleware(await policy());
  const events = [];
  const boom = tool(
    async ({ title }, config) => {
      events.push(`start ${title}`);
      if (title === 'A') {
        await sleep(1);
        throw new Error('disk full');
      }
      await sleep(50, config.signal);
      events.push(`end ${title}`);
      return 'written';
    },
    { name: 'rfd_draft', description: 'x', schema: z.object({ title: z.string() }) },
  );
  const turns = [[call('rfd_draft', { title: 'A' }, 'a1'), call('rfd_draft', { title: 'B' }, 'a2')]];
  const agent = createAgent({ model: new ScriptedModel(turns), tools: [boom], middleware: [mw] });
  await assert.rejects(agent.invoke({ messages: [{ role: 'user', content: 'go' }] }), /disk full/);
  await until(() => mw.gate.driver.inspect().length === 0);
  // The call after it on the key never overlapped it; LangGraph aborted it with the step (it
  // may have started first: the failure frees the key before LangGraph ends the step).
  assert.equal(events[0], 'start A');
  assert.ok(!events.includes('end B'), 'the step was aborted');
  assert.ok(noLiveBatches(mw));
  // The next run on the key is not held.
  const w = world();
  const model = await runAgent(w, [mw], [[call('rfd_draft', { title: 'C' }, 'c1')]]);
  assert.deepEqual(contents(model.received[1]), { c1: '2' });
  mw.dispose();
});

test('bad arguments fail only their call: the model reads LangChain\'s error, the key moves on', async () => {
  const mw = turnstileMiddleware(await policy());
  const w = world();
  const turns = [[call('rfd_draft', { title: 7 }, 'bad'), call('rfd_draft', { title: 'A' }, 'good')]];
  const model = await runAgent(w, [mw], turns);
  const [badText, badStatus] = model.received[1].bad;
  assert.equal(badStatus, 'error');
  assert.match(badText, /title/);
  assert.deepEqual(model.received[1].good, ['2', 'success']);
  assert.deepEqual(w.starts('rfd'), ['A']);
  assert.ok(noLiveBatches(mw));
  mw.dispose();
});

test('a call rejected by decide never runs: the model gets the component\'s sentence, the rest runs', async () => {
  const w = world();
  const decide = (label) => (label === 'd2' ? 'reject' : 'approve');
  const mw = turnstileMiddleware(await policy(), { decide });
  const model = await runAgent(w, [mw], TURNS.slice(0, 1));
  assert.deepEqual(model.received[1].d2, ['not run: the user rejected this call', 'error']);
  assert.deepEqual(model.received[1].d1, ['2', 'success']);
  assert.ok(!has(w.events, ['start', 'rfd_draft', 'B']));
  mw.dispose();
});

test('settled: "throw" throws CallSettledError from the tool node instead', async () => {
  const w = world();
  const decide = (label) => (label === 'd2' ? 'reject' : 'approve');
  const mw = turnstileMiddleware(await policy(), { decide, settled: 'throw' });
  await assert.rejects(runAgent(w, [mw], TURNS.slice(0, 1)), (error) => {
    // LangChain wraps what a middleware throws in a MiddlewareError, the CallSettledError its cause.
    assert.ok(lc.MiddlewareError.isInstance(error));
    return error.cause instanceof CallSettledError && error.cause.reason.kind === 'rejected' && error.cause.callId === 'd2';
  });
  assert.ok(!has(w.events, ['start', 'rfd_draft', 'B']));
  await until(() => mw.gate.driver.inspect().length === 0);
  assert.ok(noLiveBatches(mw));
  mw.dispose();
});

test('cancelling the run (its AbortSignal) withdraws queued calls and aborts running ones', async () => {
  const w = world({ draftMs: 60_000 }); // A runs until the run is cancelled
  const mw = turnstileMiddleware(await policy());
  const controller = new AbortController();
  const running = runAgent(w, [mw], TURNS.slice(0, 1), { signal: controller.signal });
  await until(() => has(w.events, ['start', 'rfd_draft', 'A']));
  controller.abort(new Error('the user left'));
  await assert.rejects(running);
  await until(() => mw.gate.driver.inspect().length === 0);
  await sleep(30);
  assert.ok(!has(w.events, ['start', 'rfd_draft', 'B']), 'a queued call never runs');
  assert.ok(!has(w.events, ['end', 'rfd_draft', 'A']), 'the running call was aborted');
  assert.ok(noLiveBatches(mw));
  // The key is free for the next run.
  const model = await runAgent(world(), [mw], [[call('rfd_draft', { title: 'C' }, 'c1')]]);
  assert.deepEqual(contents(model.received[1]), { c1: '2' });
  mw.dispose();
});

test('executionTimeoutMs aborts the tool\'s own signal', async () => {
  const mw = turnstileMiddleware(await policy(), { executionTimeoutMs: 5 });
  let seen;
  const slow = tool(
    async (_input, config) => {
      seen = config.signal;
      await sleep(1000, config.signal);
      return 'finished';
    },
    { name: 'read', description: 'x', schema: z.object({ path: z.string() }) },
  );
  const agent = createAgent({ model: new ScriptedModel([[call('read', { path: 'x' }, 'x1')]]), tools: [slow], middleware: [mw] });
  await assert.rejects(agent.invoke({ messages: [{ role: 'user', content: 'go' }] }), (error) => error?.name === 'TimeoutError');
  assert.ok(seen?.aborted, 'the tool saw the timeout');
  await until(() => mw.gate.driver.inspect().length === 0);
  assert.ok(noLiveBatches(mw));
  mw.dispose();
});

test('the middleware checks its arguments', async () => {
  const p = await policy();
  assert.throws(() => turnstileMiddleware(p, { settled: 'ignore' }), RangeError);
  assert.throws(() => turnstileMiddleware(p, { nope: 1 }), TypeError);
  assert.throws(() => turnstileMiddleware({}), TypeError);
  const gate = new Gate(p);
  assert.equal(turnstileMiddleware(gate).gate, gate);
  assert.throws(() => turnstileMiddleware(gate, { decide: () => 'approve' }), TypeError);
  gate.driver.dispose();
});

// -- the race, and the same run limited ---------------------------------------------------------

test('without the middleware the calls race', async () => {
  const w = world();
  const model = await runAgent(w, []);
  const drafts = contents(model.received[1]);
  assert.equal(drafts.d1, '2');
  assert.equal(drafts.d2, '2', 'two drafts took the same number');
  const renumbered = contents(model.received[2]);
  assert.equal(renumbered.r1, '2 is now 5');
  assert.deepEqual([renumbered.r2, renumbered.r3], ['no RFD 5', 'no RFD 6']);
  assert.ok(w.peak.rfd > 1 && w.peak.github > 2);
});

function checkLimitedRun(w, model) {
  assert.deepEqual(contents(model.received[1]), { d1: '2', x1: 'contents of x', d2: '3' });
  assert.deepEqual(contents(model.received[2]), { r1: '2 is now 5', r2: '5 is now 6', r3: '6 is now 7' });
  assert.deepEqual(contents(model.received[3]), Object.fromEntries([0, 1, 2, 3, 4].map((n) => [`g${n}`, `issue ${n}`])));
  assert.deepEqual([...w.rfds.entries()].sort(), [[1, 'existing'], [3, 'B'], [7, 'A']]);
  for (const [key, limit] of Object.entries(LIMITS)) assert.ok(w.peak[key] <= limit, key);
  assert.equal(w.peak.github, 2, 'the limit is used, not serialized');
  assert.deepEqual(w.starts('rfd'), ['A', 'B', '2->5', '5->6', '6->7']);
  assert.deepEqual(w.starts('github'), ['0', '1', '2', '3', '4']);
  // An unrelated tool does not wait for the key.
  const at = (event) => w.events.findIndex((e) => e.join(' ') === event.join(' '));
  assert.ok(at(['start', 'read', 'x']) < at(['end', 'rfd_draft', 'A']));
}

test('limited: every key within its limit, in written order, results back to the model', async () => {
  const w = world();
  const mw = turnstileMiddleware(await policy());
  checkLimitedRun(w, await runAgent(w, [mw]));
  assert.ok(noLiveBatches(mw));
  // The same middleware (one scheduler) serves the next run.
  const w2 = world();
  checkLimitedRun(w2, await runAgent(w2, [mw]));
  mw.dispose();
});

test('each response is one batch, decided in written order before any of it starts', async () => {
  const w = world();
  const log = [];
  const decide = async (label) => {
    if (['d1', 'r1', 'g0'].includes(label)) await sleep(30); // split batches would start meanwhile
    log.push(`decided ${label}`);
    return 'approve';
  };
  const starts = createMiddleware({
    name: 'Starts', // records each tool's start, inside Turnstile's slot
    wrapToolCall: async (request, handler) => {
      log.push(`start ${request.toolCall.id}`);
      return handler(request);
    },
  });
  const mw = turnstileMiddleware(await policy(), { decide });
  await runAgent(w, [mw, starts]);
  for (const turn of TURNS) {
    const decided = turn.map((c) => log.indexOf(`decided ${c.id}`));
    const started = turn.map((c) => log.indexOf(`start ${c.id}`));
    assert.ok(decided.every((i) => i >= 0) && started.every((i) => i >= 0), JSON.stringify(log));
    assert.deepEqual(decided, [...decided].sort((a, b) => a - b), 'written order');
    assert.ok(Math.max(...decided) < Math.min(...started), `a call of ${turn.map((c) => c.id)} started before all were decided: ${log}`);
  }
  mw.dispose();
});

test('a key template is made from the call\'s arguments', async () => {
  const events = [];
  const write = tool(
    async ({ path, text }) => {
      events.push(`start ${text}`);
      await sleep(10);
      events.push(`end ${text}`);
      return `wrote ${path}`;
    },
    { name: 'write', description: 'x', schema: z.object({ path: z.string(), text: z.string() }) },
  );
  const turn = [['a', 'w1'], ['b', 'w2'], ['a', 'w3'], ['b', 'w4']].map(([path, text]) => call('write', { path, text }, text));
  const mw = turnstileMiddleware(await policy('[conversation.tools.write]\nconcurrency = { key = "fs:{path}", limit = 1 }\n'));
  const agent = createAgent({ model: new ScriptedModel([turn]), tools: [write], middleware: [mw] });
  await agent.invoke({ messages: [{ role: 'user', content: 'go' }] });
  assert.deepEqual(events.filter((e) => e.startsWith('start')).slice(0, 2), ['start w1', 'start w2'], 'the two files ran together');
  assert.ok(events.indexOf('start w3') > events.indexOf('end w1'));
  assert.ok(events.indexOf('start w4') > events.indexOf('end w2'));
  mw.dispose();
});

// -- what the middleware relies on in LangChain ----------------------------------------------------

test('LangChain shows the response to afterModel before any tool of it starts, and gives each call its id, tool and signal', async () => {
  // The assumptions of the module doc, on LangChain alone: if a release changes one, this fails
  // instead of the middleware racing.
  const log = [];
  const requests = [];
  const probe = createMiddleware({
    name: 'Probe',
    afterModel: (state) => {
      const last = state.messages.at(-1);
      assert.ok(AIMessage.isInstance(last));
      log.push(['afterModel', (last.tool_calls ?? []).map((c) => c.id)]);
      return undefined;
    },
    wrapToolCall: async (request, handler) => {
      const c = request.toolCall;
      log.push(['tool', [c.id, c.name, c.args]]);
      requests.push(request);
      // 3: the handler invokes the tool given in the request (the middleware's signal wrapper).
      let invoked = false;
      const original = request.tool;
      const given = { ...request, tool: new Proxy(original, { get: (t, p) => (p === 'invoke' ? (...a) => ((invoked = true), t.invoke(...a)) : Reflect.get(t, p, t)) }) };
      const result = await handler(given);
      assert.ok(invoked, 'the handler invoked request.tool');
      assert.ok(ToolMessage.isInstance(result));
      return result;
    },
  });
  const w = world();
  const controller = new AbortController();
  await runAgent(w, [probe], TURNS, { signal: controller.signal });
  let i = 0;
  for (const turn of TURNS) {
    assert.deepEqual(log[i], ['afterModel', turn.map((c) => c.id)]);
    const tools = log.slice(i + 1, i + 1 + turn.length).map(([kind, t]) => (assert.equal(kind, 'tool'), t));
    assert.deepEqual(tools.sort(), turn.map((c) => [c.id, c.name, c.args]).sort());
    i += 1 + turn.length;
  }
  assert.deepEqual(log[i], ['afterModel', []]);
  for (const request of requests) {
    assert.ok(Array.isArray(request.state.messages) && request.state.messages.some((m) => AIMessage.isInstance(m) && m.tool_calls?.some((c) => c.id === request.toolCall.id)));
    assert.ok(request.runtime.signal instanceof AbortSignal, 'request.runtime.signal is the run\'s signal');
    assert.equal(typeof request.tool?.invoke, 'function');
  }

  // The handler throws what the tool threw; LangChain then fails the run (any wrapToolCall
  // middleware's error does), and answers the model when it is a ToolInvocationError.
  const thrown = new Error('disk full');
  let caught;
  const pass = createMiddleware({
    name: 'Pass',
    wrapToolCall: async (request, handler) => {
      try {
        return await handler(request);
      } catch (error) {
        caught = error;
        throw error;
      }
    },
  });
  const boom = tool(async () => { throw thrown; }, { name: 'read', description: 'x', schema: z.object({ path: z.string() }) });
  const agent = createAgent({ model: new ScriptedModel([[call('read', { path: 'x' }, 'x1')]]), tools: [boom], middleware: [pass] });
  await assert.rejects(agent.invoke({ messages: [{ role: 'user', content: 'go' }] }), (error) => error === thrown);
  assert.equal(caught, thrown);
});
