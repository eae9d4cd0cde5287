// The MCP adapter (`@turnstile/scheduler/mcp`) against the pinned `@modelcontextprotocol/sdk` and
// a real MCP server over stdio (test/fixtures/mcp-server.mjs, a child process) that records what
// it handles and, serialized, fails when two tool calls overlap. Failure paths first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CreateMessageRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { AdmissionError, AdmissionTimeoutError, ShutdownError, Turnstile } from '../dist/index.js';
import { admitClient, admittedFrom, classOf } from '../dist/mcp.js';

const SERVER = fileURLToPath(new URL('./fixtures/mcp-server.mjs', import.meta.url));
const OVERLAP_SERVER = fileURLToPath(new URL('./fixtures/mcp-overlap-server.mjs', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'turnstile-mcp-'));
test.after(() => rmSync(dir, { recursive: true, force: true }));
let servers = 0;

/** A connected client on a fresh server process; `admission` config, or none for a bare client. */
async function connect({ admission, serial = false, sampling } = {}) {
  const log = join(dir, `server-${++servers}.jsonl`);
  writeFileSync(log, '');
  const client = new Client({ name: 'turnstile-test', version: '1.0.0' }, { capabilities: sampling ? { sampling: {} } : {} });
  let adm;
  if (admission) {
    const t = await Turnstile.load();
    adm = t.admission(admission);
    admitClient(client, adm);
  }
  if (sampling) client.setRequestHandler(CreateMessageRequestSchema, sampling);
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [SERVER],
    env: { PATH: process.env.PATH ?? '', MCP_LOG: log, MCP_SERIAL: serial ? '1' : '0' },
    stderr: 'inherit',
  });
  await client.connect(transport);
  const events = () =>
    readFileSync(log, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
  return { client, admission: adm, events, peak: (kind) => Math.max(0, ...events().filter((e) => e.event === 'start' && (!kind || e.kind === kind)).map((e) => (kind === 'tool' ? e.runningTools : e.inFlight))) };
}

const work = (client, name, ms, options) => client.callTool({ name: 'work', arguments: { name, ms } }, undefined, options);
const text = (result) => result.content[0].text;

test('without admission the serialized server sees overlapping tool calls (the test can fail)', { timeout: 20_000 }, async () => {
  const { client } = await connect({ serial: true });
  try {
    const results = await Promise.all(['a', 'b', 'c'].map((n) => work(client, n, 30)));
    assert.ok(results.some((r) => r.isError && /overlapped/.test(text(r))), 'the server saw no overlap');
  } finally {
    await client.close();
  }
});

test('serialized binding: tool calls never overlap; reads and prompts share the budget', { timeout: 20_000 }, async () => {
  const { client, peak, events } = await connect({ admission: { maxConcurrent: 3, allowParallel: false }, serial: true });
  try {
    const calls = ['a', 'b', 'c', 'd'].map((n) => work(client, n, 20));
    const reads = [1, 2, 3].map(() => client.readResource({ uri: 'test://slow' }));
    const prompt = client.getPrompt({ name: 'greet', arguments: { who: 'x' } });
    const results = await Promise.all(calls);
    assert.deepEqual(results.map(text), ['a done', 'b done', 'c done', 'd done']);
    assert.equal((await reads[0]).contents[0].text, 'slow resource');
    await prompt;
    await Promise.all(reads);
    assert.equal(peak('tool'), 1);
    assert.ok(peak() <= 3, `more than the budget in flight: ${peak()}`);
    // Written order: the tool calls started in the order they were made.
    assert.deepEqual(events().filter((e) => e.event === 'start' && e.kind === 'tool').map((e) => e.name), ['a', 'b', 'c', 'd']);
  } finally {
    await client.close();
  }
});

test('allowParallel with a budget: the server never sees more than the budget', { timeout: 20_000 }, async () => {
  const { client, peak } = await connect({ admission: { maxConcurrent: 3, allowParallel: true } });
  try {
    const names = Array.from({ length: 9 }, (_, i) => `t${i}`);
    const results = await Promise.all([...names.map((n) => work(client, n, 20)), client.readResource({ uri: 'test://slow' }), client.listTools(), client.ping()]);
    assert.equal(results.length, 12);
    assert.equal(peak(), 3);
  } finally {
    await client.close();
  }
});

test('closing the client refuses new work and cancels what is in flight', { timeout: 20_000 }, async () => {
  const { client, admission, events } = await connect({ admission: { maxConcurrent: 2, allowParallel: false } });
  const running = work(client, 'long', 10_000);
  const runningEnd = running.then(() => undefined, (e) => e);
  const queued = work(client, 'queued', 10);
  const queuedEnd = queued.then(() => undefined, (e) => e);
  while (!events().some((e) => e.name === 'long')) await new Promise((r) => setTimeout(r, 5));
  await client.close();
  // The SDK rejects the in-flight request with the abort reason (wrapped in its McpError).
  assert.match(String(await runningEnd), /the admission controller shut down/);
  assert.ok((await queuedEnd) instanceof ShutdownError);
  await assert.rejects(client.listTools(), ShutdownError);
  assert.ok(!events().some((e) => e.name === 'queued'), 'a queued call reached the server');
  assert.equal(admission.inFlight(), 0);
});

test('time queued counts against each request\'s timeout', { timeout: 20_000 }, async () => {
  const { client, events } = await connect({ admission: { maxConcurrent: 1, allowParallel: false } });
  try {
    const first = work(client, 'first', 500);
    // Queued 500 ms behind `first`: it times out while queued and never reaches the server.
    const starved = work(client, 'starved', 10, { timeout: 100 });
    // Queued about 500 ms, then runs 600 ms: over its 900 ms although either part is under it.
    const late = work(client, 'late', 600, { timeout: 900 });
    // Timed out while queued: the typed error (its name stays 'TimeoutError'), never sent.
    await assert.rejects(starved, (e) => e instanceof AdmissionTimeoutError && e instanceof AdmissionError && e.name === 'TimeoutError' && e.code === 'timed-out');
    assert.equal(text(await first), 'first done');
    await assert.rejects(late, /timed out|timeout/i);
    assert.ok(!events().some((e) => e.name === 'starved'), 'a request that timed out while queued reached the server');
    assert.ok(events().some((e) => e.name === 'late'), 'late never ran');
  } finally {
    await client.close();
  }
});

test('a nested sampling chain runs re-entrant with its parent and does not deadlock', { timeout: 20_000 }, async () => {
  const parents = [];
  let session;
  const sampling = async (request, extra) => {
    const depth = Number(request.params.messages[0].content.text);
    parents.push(depth);
    const result = await admittedFrom(extra).callTool({ name: 'nest', arguments: { depth } });
    return { model: 'mock', role: 'assistant', content: { type: 'text', text: text(result) } };
  };
  session = await connect({ admission: { maxConcurrent: 3, allowParallel: false }, serial: true, sampling });
  try {
    // nest2 -> sampling -> nest1 (re-entrant, parent nest2) -> sampling -> nest0 (parent nest1).
    const result = await session.client.callTool({ name: 'nest', arguments: { depth: 2 } });
    assert.equal(result.isError, undefined, text(result));
    assert.equal(text(result), '2/1/bottom');
    assert.deepEqual(parents, [1, 0]);
  } finally {
    await session.client.close();
  }
  // With a budget its ancestors fill, the innermost call fails at once (would-deadlock) instead
  // of waiting forever; the error reaches the server as the sampling answer's failure.
  const errors = [];
  session = await connect({
    admission: { maxConcurrent: 2, allowParallel: false },
    serial: true,
    sampling: async (request, extra) => {
      try {
        return await sampling(request, extra);
      } catch (e) {
        errors.push(e);
        throw e;
      }
    },
  });
  try {
    const result = await session.client.callTool({ name: 'nest', arguments: { depth: 2 } });
    // nest1 failed on the server (its sampling answer failed); nest2 got that as nest1's result.
    assert.match(text(result), /^2\/.*would-deadlock/);
    assert.ok(errors.some((e) => e instanceof AdmissionError && e.code === 'would-deadlock'), String(errors));
  } finally {
    await session.client.close();
  }
});

test('the method table (the component\'s), and every Client method goes through Client.request (what the adapter relies on)', { timeout: 20_000 }, async () => {
  await Turnstile.load();
  assert.equal(classOf('tools/call'), 'call');
  for (const m of ['resources/read', 'prompts/get', 'completion/complete', 'something/new']) assert.equal(classOf(m), 'request');
  for (const m of ['initialize', 'ping', 'tools/list', 'prompts/list', 'resources/list', 'resources/templates/list', 'resources/subscribe', 'resources/unsubscribe', 'logging/setLevel']) assert.equal(classOf(m), 'control');
  assert.throws(() => classOf(5), TypeError);
  const t = await Turnstile.load();
  const adm = t.admission({ maxConcurrent: 4, allowParallel: false });
  const seen = [];
  const acquire = adm.acquire.bind(adm);
  adm.acquire = (cls, options) => {
    seen.push(`${options.id.split(' ')[0]} ${cls}`);
    return acquire(cls, options);
  };
  const client = admitClient(new Client({ name: 't', version: '1' }), adm);
  assert.throws(() => admitClient(client, adm), TypeError);
  assert.throws(() => admitClient({}, adm), TypeError);
  assert.throws(() => admittedFrom({ signal: null }), TypeError);
  const log = join(dir, 'table.jsonl');
  writeFileSync(log, '');
  await client.connect(new StdioClientTransport({ command: process.execPath, args: [SERVER], env: { PATH: process.env.PATH ?? '', MCP_LOG: log } }));
  try {
    await client.ping();
    await client.listTools();
    await client.listPrompts();
    await client.listResources();
    await client.readResource({ uri: 'test://slow' });
    await client.getPrompt({ name: 'greet', arguments: { who: 'y' } });
    await work(client, 'w', 1);
    assert.deepEqual(seen, ['initialize control', 'ping control', 'tools/list control', 'prompts/list control', 'resources/list control', 'resources/read request', 'prompts/get request', 'tools/call call']);
  } finally {
    await client.close();
  }
});

// Slot holding (issue 19 point 5) against test/fixtures/mcp-overlap-server.mjs: a server that
// exits with "FATAL: <call> overlapped <call>" when a tool call arrives while another runs.

/** A client admitted under `admission` (and `options`) on a fresh overlap server whose
 * `notifications/cancelled` handling is `cancel` ('ignore' or 'honour'). */
async function overlapServer({ cancel, admission, options }) {
  const client = new Client({ name: 'turnstile-test', version: '1.0.0' });
  const adm = (await Turnstile.load()).admission(admission);
  admitClient(client, adm, options);
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [OVERLAP_SERVER],
    env: { PATH: process.env.PATH ?? '', MCP_CANCEL: cancel },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr.on('data', (chunk) => (stderr += chunk));
  await client.connect(transport);
  const log = async () => JSON.parse((await client.readResource({ uri: 'test://log' })).contents[0].text);
  return { client, admission: adm, stderr: () => stderr, log };
}

const call = (client, tool, label, options) => client.callTool({ name: tool, arguments: { label } }, undefined, options);
const release = (client, label) => client.readResource({ uri: `test://release/${label}` });

for (const how of ['timed out', 'was aborted']) {
  test(`serialized: a tool call that ${how} after it was sent keeps its slot until the server answers it (the server never sees an overlap)`, { timeout: 20_000 }, async () => {
    // The server cannot stop a call: `a` runs on after its cancellation, and answers late.
    const { client, admission, stderr, log } = await overlapServer({ cancel: 'ignore', admission: { maxConcurrent: 3, allowParallel: false } });
    try {
      if (how === 'timed out') {
        await assert.rejects(call(client, 'block', 'a', { timeout: 100 }), /timed out/i);
      } else {
        const abort = new AbortController();
        const a = call(client, 'block', 'a', { signal: abort.signal });
        while (!(await log()).includes('start a')); // the server runs it: it was sent
        abort.abort(new Error('the user stopped a'));
        await assert.rejects(a, /the user stopped a/);
      }
      const b = call(client, 'work', 'b');
      // Reads are class `request`: they flow. This one lets `a` end; its late answer frees the slot.
      const released = release(client, 'a');
      released.catch(() => {}); // awaited below, after b's failure (if any) is reported
      const done = await b.catch((e) => assert.fail(`b failed: ${e.message}; the server said: ${stderr().trim()}`));
      assert.equal(text(done), 'b done');
      assert.equal((await released).contents[0].text, 'released');
      assert.deepEqual(await log(), ['start a', 'end a', 'start b', 'end b']);
      assert.equal(admission.inFlight(), 0);
    } finally {
      await client.close();
    }
    assert.doesNotMatch(stderr(), /FATAL/);
  });
}

test('serialized, abortGraceMs: a call cancelled after it was sent keeps its slot for the grace, then frees it', { timeout: 20_000 }, async () => {
  // The SDK's server stops a cancelled call and never answers it: only the grace frees its slot.
  const { client, stderr, log } = await overlapServer({ cancel: 'honour', admission: { maxConcurrent: 3, allowParallel: false }, options: { abortGraceMs: 50 } });
  try {
    await assert.rejects(call(client, 'block', 'a', { timeout: 100 }), /timed out/i);
    // Queued until the grace passes (its own timeout only bounds a broken grace).
    assert.equal(text(await call(client, 'work', 'b', { timeout: 10_000 })), 'b done');
    assert.deepEqual(await log(), ['start a', 'cancel a', 'start b', 'end b']);
  } finally {
    await client.close();
  }
  assert.doesNotMatch(stderr(), /FATAL/);
});

test('serialized, default: a server that acknowledges the cancellation (an error answer) frees the slot then', { timeout: 20_000 }, async () => {
  const { client, admission, stderr, log } = await overlapServer({ cancel: 'ack', admission: { maxConcurrent: 3, allowParallel: false } });
  try {
    await assert.rejects(call(client, 'block', 'a', { timeout: 100 }), /timed out/i);
    // Without the acknowledgement seen, b would wait behind a's slot and time out queued.
    assert.equal(text(await call(client, 'work', 'b', { timeout: 10_000 })), 'b done');
    assert.deepEqual(await log(), ['start a', 'cancel a', 'start b', 'end b']);
    assert.equal(admission.inFlight(), 0);
  } finally {
    await client.close();
  }
  assert.doesNotMatch(stderr(), /FATAL/);
});

test('serialized, default: a server that never answers a cancelled call keeps that one slot; the other classes flow within the budget', { timeout: 20_000 }, async () => {
  const { client, admission, stderr, log } = await overlapServer({ cancel: 'honour', admission: { maxConcurrent: 3, allowParallel: false } });
  try {
    await assert.rejects(call(client, 'block', 'a', { timeout: 100 }), /timed out/i);
    // The next tool call waits behind the held slot and times out queued: it is never sent.
    await assert.rejects(call(client, 'work', 'b', { timeout: 200 }), AdmissionTimeoutError);
    // Two reads in flight together (the barrier answers only then): the budget less the held slot.
    const reads = await Promise.all([1, 2].map(() => client.readResource({ uri: 'test://barrier/2' })));
    assert.deepEqual(reads.map((r) => r.contents[0].text), ['met', 'met']);
    await client.listTools();
    assert.equal(admission.inFlight(), 1);
    assert.deepEqual((await log()).filter((e) => !e.startsWith('barrier')), ['start a', 'cancel a']);
  } finally {
    await client.close();
  }
  assert.equal(admission.inFlight(), 0, 'closing frees the held slot');
  assert.doesNotMatch(stderr(), /FATAL/);
});

test('a call aborted while still queued leaves at once: it consumed nothing and never reaches the server', { timeout: 20_000 }, async () => {
  const { client, admission, log } = await overlapServer({ cancel: 'ignore', admission: { maxConcurrent: 3, allowParallel: false } });
  try {
    const a = call(client, 'block', 'a');
    while (!(await log()).includes('start a'));
    const abort = new AbortController();
    const b = call(client, 'work', 'b', { signal: abort.signal });
    const c = call(client, 'work', 'c');
    abort.abort(new Error('never mind b'));
    await assert.rejects(b, /never mind b/);
    assert.equal(admission.inFlight(), 1);
    await release(client, 'a');
    assert.equal(text(await a), 'a done');
    assert.equal(text(await c), 'c done');
    assert.deepEqual(await log(), ['start a', 'end a', 'start c', 'end c']);
  } finally {
    await client.close();
  }
});

test('admitClient options are checked', async () => {
  const adm = (await Turnstile.load()).admission({ maxConcurrent: 1, allowParallel: false });
  assert.throws(() => admitClient(new Client({ name: 't', version: '1' }), adm, { abortGraceMs: -1 }), RangeError);
  assert.throws(() => admitClient(new Client({ name: 't', version: '1' }), adm, { cancelGraceMs: 5 }), /unknown field "cancelGraceMs"/);
  adm.dispose();
});
