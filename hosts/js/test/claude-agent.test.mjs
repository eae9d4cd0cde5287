// The Claude Agent SDK adapter (`@turnstile/scheduler/claude-agent`), offline: the SDK's own
// bundled Claude Code CLI runs against a fake Anthropic Messages API (a local HTTP server
// streaming SSE, several `tool_use` blocks per response over several turns, then a text), with
// in-process SDK MCP tools that record their start and end. Failure paths first (a tool that
// throws, a rejected call, a conversation given up mid-run), then the race without the adapter,
// the same run limited (limits, written order per key, one batch per response decided before any
// start, results back to the model), and the CLI behaviour the adapter rests on, tested against
// the SDK directly. The port of hosts/python/tests/test_claude_agent.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';

let sdk;
try {
  sdk = await import('@anthropic-ai/claude-agent-sdk');
} catch (error) {
  // A missing library is a failure, never a skip.
  throw new Error(
    'test/claude-agent.test.mjs needs @anthropic-ai/claude-agent-sdk 0.3.337 and its bundled Claude Code: npm install ' +
      `(the package pins it in devDependencies), or npm install --no-save @anthropic-ai/claude-agent-sdk@0.3.337 (${error.message})`,
  );
}
const { createSdkMcpServer, query, tool } = sdk;
const { z } = await import('zod');
const { Gate, Turnstile } = await import('../dist/index.js');
const { claudeAgent } = await import('../dist/claude-agent.js');

// The CLI names an SDK MCP tool `mcp__<server>__<tool>`; the policy uses the CLI's names.
const P = 'mcp__t__';
const CONFIG = `
[conversation.tools.${P}rfd_draft]
concurrency = { key = "rfd" }
[conversation.tools.${P}rfd_renumber]
concurrency = { key = "rfd" }
[conversation.tools.${P}github_issues]
concurrency = { key = "github", limit = 2 }
`;
const LIMITS = { rfd: 1, github: 2 };
const KEY = { rfd_draft: 'rfd', rfd_renumber: 'rfd', github_issues: 'github', read: 'read' };

// Three model turns, each one response with several tool calls (tool, arguments, call id), then
// the answer: two drafts that race for a number, a renumber chain, more issues than github's limit.
const TURNS = [
  [['rfd_draft', { title: 'A' }, 'd1'], ['read', { path: 'x' }, 'x1'], ['rfd_draft', { title: 'B' }, 'd2']],
  [['rfd_renumber', { old: 2, new: 5 }, 'r1'], ['rfd_renumber', { old: 5, new: 6 }, 'r2'], ['rfd_renumber', { old: 6, new: 7 }, 'r3']],
  [0, 1, 2, 3, 4].map((n) => ['github_issues', { n }, `g${n}`]),
].map((turn) => turn.map(([name, args, id]) => [P + name, args, id]));

let turnstile;
async function policy() {
  turnstile ??= await Turnstile.load();
  return turnstile.resolve([{ name: 'test', text: CONFIG }]);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The CLI must run here: fail with a clear message, never skip.
const CLI_CHECK = await new Promise((resolve) => {
  let cli;
  try {
    cli = join(new URL('.', import.meta.resolve('@anthropic-ai/claude-agent-sdk')).pathname, '..', `claude-agent-sdk-${process.platform}-${process.arch}`, 'claude');
  } catch (error) {
    return resolve(`cannot locate the bundled CLI: ${error.message}`);
  }
  const child = spawn(cli, ['--version'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.on('error', (error) => resolve(`the bundled Claude Code CLI (${cli}) cannot run here: ${error.message}`));
  child.on('exit', (code) => resolve(code === 0 ? undefined : `the bundled Claude Code CLI (${cli}) exited ${code} on --version: ${out}`));
});
if (CLI_CHECK !== undefined) throw new Error(`test/claude-agent.test.mjs: ${CLI_CHECK}`);

const CONFIG_DIR = mkdtempSync(join(tmpdir(), 'turnstile-claude-'));
process.on('exit', () => rmSync(CONFIG_DIR, { recursive: true, force: true }));

/** The Anthropic Messages API, scripted: each request that offers tools gets the next response of
 * `turns` (its tool_use blocks, streamed one by one `gap` ms apart), then `final` as text.
 * Records every request (the tool results the model received). */
async function fakeAPI(turns, { final = 'done', gap = 20 } = {}) {
  const left = [...turns];
  const requests = [];
  const server = createServer(async (req, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    let request = {};
    try {
      request = JSON.parse(body || '{}');
    } catch {}
    if (req.method !== 'POST' || !req.url.startsWith('/v1/messages') || req.url.includes('count_tokens') || !request.stream) {
      const data = JSON.stringify(req.url.includes('count_tokens') ? { input_tokens: 1 } : {
        id: 'msg_side', type: 'message', role: 'assistant', model: request.model,
        content: [{ type: 'text', text: 'ok' }], stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 },
      });
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) });
      res.end(data);
      return;
    }
    requests.push(request);
    const blocks = request.tools?.length && left.length
      ? left.shift().map(([name, input, id]) => ({ type: 'tool_use', id, name, input }))
      : [{ type: 'text', text: final }];
    res.writeHead(200, { 'Content-Type': 'text/event-stream', Connection: 'close' });
    const event = (name, data) => res.write(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
    event('message_start', { type: 'message_start', message: {
      id: `msg_${requests.length}`, type: 'message', role: 'assistant', model: request.model,
      content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 } } });
    for (const [index, b] of blocks.entries()) {
      if (b.type === 'text') {
        event('content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
        event('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text: b.text } });
      } else {
        event('content_block_start', { type: 'content_block_start', index, content_block: { type: 'tool_use', id: b.id, name: b.name, input: {} } });
        event('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(b.input) } });
      }
      event('content_block_stop', { type: 'content_block_stop', index });
      await sleep(gap);
    }
    const stop = blocks[0].type === 'tool_use' ? 'tool_use' : 'end_turn';
    event('message_delta', { type: 'message_delta', delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: 1 } });
    event('message_stop', { type: 'message_stop' });
    res.end();
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    requests,
    env: () => ({
      ...process.env,
      ANTHROPIC_BASE_URL: `http://127.0.0.1:${server.address().port}`,
      ANTHROPIC_API_KEY: 'test',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      CLAUDE_CONFIG_DIR: CONFIG_DIR,
    }),
    /** Every tool result the model received: call id -> [text, isError]. */
    results() {
      const out = {};
      for (const r of requests) {
        for (const m of r.messages ?? []) {
          for (const b of Array.isArray(m.content) ? m.content : []) {
            if (b.type !== 'tool_result') continue;
            const text = Array.isArray(b.content) ? b.content.map((x) => x.text ?? '').join('') : String(b.content);
            out[b.tool_use_id] = [text, Boolean(b.is_error)];
          }
        }
      }
      return out;
    },
    close: () => {
      server.closeAllConnections?.();
      server.close();
    },
  };
}

/** The tools' shared state, as SDK MCP tools; `fail` names draft titles that throw. Read-only
 * (concurrency-safe) by default: the CLI runs such calls at the same time, as a model's parallel
 * calls of such tools are (it runs other tools one at a time on its own). */
function world({ fail = [], draftMs = 50, safe = true } = {}) {
  const state = { rfds: new Map([[1, 'existing']]), events: [], running: {}, peak: {} };
  const start = (name, label) => {
    const key = KEY[name];
    state.events.push(['start', name, label]);
    state.running[key] = (state.running[key] ?? 0) + 1;
    state.peak[key] = Math.max(state.peak[key] ?? 0, state.running[key]);
  };
  const end = (name, label) => {
    state.running[KEY[name]] -= 1;
    state.events.push(['end', name, label]);
  };
  const text = (s) => ({ content: [{ type: 'text', text: s }] });
  const extras = safe ? { annotations: { readOnlyHint: true } } : undefined;
  const tools = [
    tool('rfd_draft', 'Allocates the next RFD number.', { title: z.string() }, async ({ title }) => {
      if (fail.includes(title)) {
        state.events.push(['start', 'rfd_draft', title]);
        throw new Error(`draft ${title} failed`);
      }
      const number = Math.max(...state.rfds.keys()) + 1; // read, think, write: racy by nature
      start('rfd_draft', title);
      await sleep(draftMs);
      state.rfds.set(number, title);
      end('rfd_draft', title);
      return text(String(number));
    }, extras),
    tool('rfd_renumber', 'Moves an RFD.', { old: z.number(), new: z.number() }, async (args) => {
      const { old } = args;
      const to = args.new;
      if (!state.rfds.has(old) || state.rfds.has(to)) return { content: [{ type: 'text', text: `cannot move ${old} to ${to}` }], isError: true };
      start('rfd_renumber', `${old}->${to}`);
      await sleep(30);
      state.rfds.set(to, state.rfds.get(old));
      state.rfds.delete(old);
      end('rfd_renumber', `${old}->${to}`);
      return text(`${old} is now ${to}`);
    }, extras),
    tool('github_issues', 'Reads an issue.', { n: z.number() }, async ({ n }) => {
      start('github_issues', String(n));
      await sleep(50);
      end('github_issues', String(n));
      return text(`issue ${n}`);
    }, extras),
    tool('read', 'Reads a file.', { path: z.string() }, async ({ path }) => {
      start('read', path);
      await sleep(10);
      end('read', path);
      return text(`contents of ${path}`);
    }, extras),
  ];
  state.options = (fake, more = {}) => ({
    mcpServers: { t: createSdkMcpServer({ name: 't', tools }) },
    allowedTools: ['rfd_draft', 'rfd_renumber', 'github_issues', 'read'].map((n) => P + n),
    env: fake.env(),
    settingSources: [],
    cwd: CONFIG_DIR,
    ...more,
  });
  state.starts = (key) => state.events.filter(([kind, name]) => kind === 'start' && KEY[name] === key).map(([, , label]) => label);
  return state;
}

async function conversation(messages) {
  const out = [];
  for await (const m of messages) out.push(m);
  return out;
}

function result(messages) {
  const last = messages.at(-1);
  assert.equal(last?.type, 'result', JSON.stringify(last));
  return last;
}

/** Nothing left on the adapter's scheduler: no live batch, no expected call. */
function noLiveBatches(ts) {
  assert.deepEqual(ts.gate.driver.inspect(), []);
  assert.deepEqual(ts.gate.expected(), []);
  return true;
}

const T = { timeout: 90_000 };

test('options: gate options go to a Gate given, and bad values are refused', async () => {
  const p = await policy();
  const gate = new Gate(p);
  assert.throws(() => claudeAgent(gate, { decide: () => 'approve' }), /belongs to the gate/);
  assert.throws(() => claudeAgent(p, { hookTimeoutSeconds: 0 }), TypeError);
  assert.throws(() => claudeAgent(p, { nope: 1 }), TypeError);
  assert.throws(() => claudeAgent({}), TypeError);
  const ts = claudeAgent(gate);
  assert.equal(ts.gate, gate);
  ts.dispose();
  ts.dispose();
  assert.throws(() => ts.query({ prompt: 'go' }), /disposed/);
  gate.driver.dispose();
});

// -- failure paths ------------------------------------------------------------------------------

test('a tool that throws fails only its call, and its key moves on', T, async () => {
  const w = world({ fail: ['A'] });
  const fake = await fakeAPI([[[P + 'rfd_draft', { title: 'A' }, 'd1'], [P + 'rfd_draft', { title: 'B' }, 'd2']]]);
  const ts = claudeAgent(await policy());
  try {
    const messages = await conversation(ts.query({ prompt: 'go', options: w.options(fake) }));
    assert.equal(result(messages).subtype, 'success');
    const got = fake.results();
    assert.ok(got.d1[1] && got.d1[0].includes('draft A failed'), JSON.stringify(got.d1));
    assert.deepEqual(got.d2, ['2', false]);
    assert.deepEqual(w.starts('rfd'), ['A', 'B']); // in written order, the second after the first's end
    assert.equal(w.peak.rfd, 1);
    noLiveBatches(ts);
  } finally {
    ts.dispose();
    fake.close();
  }
});

test("a rejected call is denied with the component's sentence", T, async () => {
  const w = world();
  const fake = await fakeAPI([TURNS[2]]);
  const ts = claudeAgent(await policy(), { decide: (label, call) => (call.id === 'g3' ? 'reject' : 'approve') });
  try {
    const messages = await conversation(ts.query({ prompt: 'go', options: w.options(fake) }));
    assert.equal(result(messages).subtype, 'success');
    const got = fake.results();
    assert.ok(got.g3[1] && got.g3[0].includes('not run: the user rejected this call'), JSON.stringify(got.g3));
    assert.deepEqual(w.starts('github').sort(), ['0', '1', '2', '4']);
    for (const i of [0, 1, 2, 4]) assert.deepEqual(got[`g${i}`], [`issue ${i}`, false]);
    noLiveBatches(ts);
  } finally {
    ts.dispose();
    fake.close();
  }
});

test('a conversation given up mid-run frees its keys for the next one', T, async () => {
  // The caller stops reading while a call runs and others wait: the CLI is stopped, the waiting
  // calls are withdrawn, the running one's slot is freed, and the next conversation on the same
  // scheduler gets the key.
  const ts = claudeAgent(await policy());
  try {
    const w = world({ draftMs: 500 });
    const fake = await fakeAPI([TURNS[0]]);
    const q = ts.query({ prompt: 'go', options: w.options(fake) });
    for await (const _ of q) if (w.starts('rfd').length > 0) break;
    fake.close();
    assert.deepEqual(w.starts('rfd'), ['A']);
    const deadline = Date.now() + 10_000;
    while ((ts.gate.driver.inspect().length > 0 || ts.gate.expected().length > 0) && Date.now() < deadline) await sleep(20);
    noLiveBatches(ts);
    const w2 = world();
    const fake2 = await fakeAPI([[[P + 'rfd_draft', { title: 'C' }, 'c1']]]);
    const messages2 = await conversation(ts.query({ prompt: 'go', options: w2.options(fake2) }));
    fake2.close();
    assert.equal(result(messages2).subtype, 'success');
    assert.deepEqual(w2.starts('rfd'), ['C']);
  } finally {
    ts.dispose();
  }
});

test('past executionTimeoutMs a call keeps its slot until the CLI reports its end', T, async () => {
  const w = world({ draftMs: 400 });
  const fake = await fakeAPI([[[P + 'rfd_draft', { title: 'A' }, 'd1'], [P + 'rfd_draft', { title: 'B' }, 'd2']]]);
  const ts = claudeAgent(await policy(), { executionTimeoutMs: 100 });
  try {
    const messages = await conversation(ts.query({ prompt: 'go', options: w.options(fake) }));
    assert.equal(result(messages).subtype, 'success');
    assert.deepEqual(w.starts('rfd'), ['A', 'B']);
    assert.equal(w.peak.rfd, 1);
    const at = (e) => w.events.findIndex((x) => x.join(' ') === e);
    assert.ok(at('end rfd_draft A') < at('start rfd_draft B'), JSON.stringify(w.events));
  } finally {
    ts.dispose();
    fake.close();
  }
});

// -- the race, and the same run limited ------------------------------------------------------------

test('without the adapter the CLI races', T, async () => {
  const w = world();
  const fake = await fakeAPI(TURNS);
  try {
    const messages = await conversation(query({ prompt: 'go', options: w.options(fake) }));
    assert.equal(result(messages).subtype, 'success');
    // The drafts race for a number, whatever the machine's load (both take 2). How many of the
    // five github calls overlap depends on how fast the CLI streams them (2 on a loaded
    // machine, CI run 35), so github's peak is not asserted here.
    assert.equal(w.peak.rfd, 2, JSON.stringify(w.peak));
    const got = fake.results();
    assert.deepEqual(got.d1, ['2', false]); // both drafts took number 2
    assert.deepEqual(got.d2, ['2', false]);
  } finally {
    fake.close();
  }
});

test('limits, written order per key, one batch per response decided before any start, results back to the model', T, async () => {
  const w = world();
  const fake = await fakeAPI(TURNS);
  const turnOf = Object.fromEntries(TURNS.flatMap((turn, t) => turn.map(([, , id]) => [id, t])));
  const decided = []; // [turn, call id, starts so far]
  const decide = (label, call) => {
    decided.push([turnOf[call.id], call.id, w.events.filter(([kind]) => kind === 'start').length]);
    return 'approve';
  };
  const ts = claudeAgent(await policy(), { decide });
  try {
    // A caller that reads slowly: the batches must not wait for it.
    const messages = [];
    for await (const m of ts.query({ prompt: 'go', options: w.options(fake) })) {
      messages.push(m);
      await sleep(5);
    }
    assert.equal(result(messages).subtype, 'success');
    assert.equal(result(messages).result, 'done');
    assert.ok(w.peak.rfd <= LIMITS.rfd && w.peak.github <= LIMITS.github, JSON.stringify(w.peak));
    assert.equal(w.peak.github, 2);
    // Per key, in the order the model wrote them: the drafts take 2 and 3, the chain of renumbers
    // moves 2 to 7.
    assert.deepEqual(w.starts('rfd'), ['A', 'B', '2->5', '5->6', '6->7']);
    assert.deepEqual([...w.rfds.entries()].sort((a, b) => a[0] - b[0]), [[1, 'existing'], [3, 'B'], [7, 'A']]);
    assert.deepEqual(w.starts('github'), ['0', '1', '2', '3', '4']);
    // Every call of a response decided, in written order, before any of it started (the starts
    // seen at each decision are exactly the earlier responses' calls).
    for (const [t, turn] of TURNS.entries()) {
      const rows = decided.filter((d) => d[0] === t);
      assert.deepEqual(rows.map((d) => d[1]), turn.map(([, , id]) => id));
      const before = TURNS.slice(0, t).reduce((n, x) => n + x.length, 0);
      assert.deepEqual([...new Set(rows.map((d) => d[2]))], [before], JSON.stringify(rows));
    }
    // Results went back to the model.
    const got = fake.results();
    assert.deepEqual(got.x1, ['contents of x', false]);
    assert.deepEqual(got.g4, ['issue 4', false]);
    assert.deepEqual([got.d1[0], got.d2[0]], ['2', '3']);
    // Stream events stay hidden unless asked for.
    assert.ok(!messages.some((m) => m.type === 'stream_event'));
    noLiveBatches(ts);
  } finally {
    ts.dispose();
    fake.close();
  }
});

test('a streaming-input conversation (an async iterable prompt) is scheduled too, and asked-for stream events come through', T, async () => {
  const w = world();
  const fake = await fakeAPI([TURNS[2]]);
  const ts = claudeAgent(await policy());
  try {
    let done;
    const finished = new Promise((resolve) => (done = resolve));
    async function* prompt() {
      yield { type: 'user', message: { role: 'user', content: 'go' }, parent_tool_use_id: null };
      await finished;
    }
    const messages = [];
    for await (const m of ts.query({ prompt: prompt(), options: w.options(fake, { includePartialMessages: true }) })) {
      messages.push(m);
      if (m.type === 'result') {
        done();
        break;
      }
    }
    assert.equal(result(messages).subtype, 'success');
    assert.equal(w.peak.github, 2);
    assert.ok(messages.some((m) => m.type === 'stream_event' && m.event.type === 'message_stop'));
  } finally {
    ts.dispose();
    fake.close();
  }
});

// -- what the adapter relies on, against the SDK directly -------------------------------------------

for (const safe of [true, false]) {
  test(`probe (${safe ? 'read-only' : 'unsafe'} tools): the CLI starts tools before the response ends and streams on past a held hook`, T, async () => {
    // The CLI calls a tool's PreToolUse hook as soon as its block is streamed (before the
    // response's other blocks): the batch cannot come from the hooks alone. A held hook does not
    // stop the stream (message_stop arrives), and on the CLI's stdout (what
    // `spawnClaudeCodeProcess` hands the SDK) each tool_use line precedes its hook's request.
    const w = world({ safe });
    const fake = await fakeAPI([TURNS[0]], { gap: 200 });
    const seen = [];
    let held = false;
    const pre = async (input, callId) => {
      if (callId === 'd1') {
        while (!seen.some((x) => x[0] === 'message_stop')) await sleep(10);
        held = true;
      }
      return {};
    };
    const record = (line) => {
      let m;
      try {
        m = JSON.parse(line);
      } catch {
        return;
      }
      if (m.type === 'assistant') {
        for (const b of m.message.content) if (b.type === 'tool_use') seen.push(['tool_use', b.id]);
      } else if (m.type === 'stream_event' && m.event.type === 'message_stop') seen.push(['message_stop', '']);
      else if (m.type === 'control_request' && m.request.subtype === 'hook_callback') seen.push(['hook', m.request.tool_use_id ?? '']);
    };
    const spawnClaudeCodeProcess = (o) => {
      const child = spawn(o.command, o.args, { cwd: o.cwd, env: o.env, stdio: ['pipe', 'pipe', 'ignore'], signal: o.signal });
      let rest = '';
      child.stdout.on('data', (chunk) => {
        rest += chunk;
        let i;
        while ((i = rest.indexOf('\n')) >= 0) {
          record(rest.slice(0, i));
          rest = rest.slice(i + 1);
        }
      });
      return child;
    };
    try {
      const options = w.options(fake, { includePartialMessages: true, hooks: { PreToolUse: [{ hooks: [pre] }] }, spawnClaudeCodeProcess });
      const messages = await conversation(query({ prompt: 'go', options }));
      assert.equal(result(messages).subtype, 'success');
      assert.ok(held);
      const at = (kind, id = '') => seen.findIndex((x) => x[0] === kind && x[1] === id);
      const stop = at('message_stop');
      assert.ok(at('tool_use', 'd1') < at('hook', 'd1') && at('hook', 'd1') < at('tool_use', 'd2') && at('tool_use', 'd2') < stop, JSON.stringify(seen));
      for (const id of ['d1', 'x1', 'd2']) assert.ok(at('tool_use', id) < at('hook', id), JSON.stringify(seen));
      if (safe) assert.ok(at('hook', 'x1') < stop, JSON.stringify(seen)); // the other calls' hooks come while the first is held
      else assert.ok(at('hook', 'x1') > stop, JSON.stringify(seen)); // unsafe tools run one at a time
    } finally {
      fake.close();
    }
  });
}
