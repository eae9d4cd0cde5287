// Telemetry: the driver's `onEvent` (wait, start, end, settled), `Driver.inspect()`, and the
// OpenTelemetry recorder (`@turnstile/scheduler/otel`), on a virtual clock. Failure paths first:
// a throwing hook changes nothing, no hook means no `inspect` call, a cancelled batch tells its
// settlements, a rate limit tells its end and the run again.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SpanKind } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { Driver, Gate, RateLimitedError, Scheduler, Turnstile } from '../dist/index.js';
import { otelEvents } from '../dist/otel.js';
import { VirtualClock } from './fixtures/virtual-clock.mjs';

const CONFIG = `
[conversation.tools.gh]
concurrency = { key = "github", limit = 1, retries = 2 }
[conversation.tools.write]
concurrency = { key = "fs:{path}", limit = 1 }
[conversation.tools.copy]
concurrency = [{ key = "fs:{src}" }, { key = "fs:{dst}", limit = 1 }]
[conversation.tools.free]
`;

let policy;
async function setup(options = {}) {
  policy ??= (await Turnstile.load()).resolve([{ name: 'telemetry', text: CONFIG }]);
  const clock = new VirtualClock();
  const scheduler = new Scheduler(policy);
  const events = [];
  const driver = new Driver(scheduler, { clock, onEvent: (e) => events.push(e), ...options });
  return { clock, scheduler, driver, events, sleep: (ms, signal) => clock.sleep(ms, signal) };
}

/** Each event as a short line: `type label` and what it says. */
function line(e) {
  switch (e.type) {
    case 'wait':
      return `${e.atMs} wait ${e.label} ${e.wait.kind}${e.wait.key ? `:${e.wait.key}` : ''}`;
    case 'start':
      return `${e.atMs} start ${e.label} waited ${e.waitedMs}${e.wait ? ` after ${e.wait.kind}` : ''}`;
    case 'end':
      return `${e.atMs} end ${e.label} ${e.status} ${e.durationMs}${e.retryAfterMs !== undefined ? ` retry ${e.retryAfterMs}` : ''}`;
    case 'settled':
      return `${e.atMs} settled ${e.label} ${e.reason.kind}`;
  }
}

const three = [
  { id: 'a', tool: 'gh' },
  { id: 'b', tool: 'gh' },
  { id: 'c', tool: 'gh' },
];

test('a throwing onEvent changes nothing: same outcomes, same starts, same times', async () => {
  const runWith = async (onEvent) => {
    const { clock, driver, sleep } = await setup(onEvent ? { onEvent } : { onEvent: undefined });
    const starts = [];
    const done = driver.run(three, async ({ label }) => {
      starts.push(`${clock.now()} ${label}`);
      await sleep(10);
      return label;
    });
    await clock.runAll();
    const outcomes = (await done).map((c) => c.entries.map(({ entry, ...o }) => o));
    driver.dispose();
    return { starts, outcomes };
  };
  let calls = 0;
  const thrown = await runWith(() => {
    calls += 1;
    throw new Error('a broken hook');
  });
  assert.ok(calls > 0);
  assert.deepEqual(thrown, await runWith(undefined));
  assert.deepEqual(thrown.starts, ['0 a', '10 b', '20 c']);
});

test('onEvent must be a function, naming the option', async () => {
  const { driver } = await setup();
  driver.dispose();
  await assert.rejects(async () => new Driver(new Scheduler(policy), { onEvent: 'log' }), (e) => e instanceof TypeError && /options\.onEvent/.test(e.message));
});

test('without onEvent the driver makes no inspect call', async () => {
  const count = async (options) => {
    const { clock, scheduler, driver, sleep } = await setup(options);
    let inspected = 0;
    const inspect = scheduler.inspect.bind(scheduler);
    scheduler.inspect = (batch) => {
      inspected += 1;
      return inspect(batch);
    };
    const done = driver.run(three, async () => sleep(5));
    await clock.runAll();
    await done;
    driver.dispose();
    return inspected;
  };
  assert.equal(await count({ onEvent: undefined }), 0);
  assert.ok((await count({})) > 0, 'with onEvent, waits are read from inspect');
});

test('a cancelled batch tells its settlements (the component sentence) and the running end', async () => {
  const { clock, driver, events, sleep } = await setup();
  const controller = new AbortController();
  const done = driver.run(three, async ({ signal }) => sleep(10, signal), { signal: controller.signal });
  await clock.runUntil(4);
  controller.abort();
  await clock.runAll();
  const outcomes = (await done).map((c) => c.entries[0]);
  assert.deepEqual(outcomes.map((o) => o.status), ['cancelled', 'settled', 'settled']);
  assert.deepEqual(events.map(line), ['0 start a waited 0', '0 wait b key-full:github', '0 wait c behind:github', '4 settled b cancelled', '4 settled c cancelled', '4 end a cancelled 4']);
  const settled = events.filter((e) => e.type === 'settled');
  for (const [i, e] of settled.entries()) {
    assert.deepEqual(e.keys, ['github']);
    assert.equal(e.tool, 'gh');
    assert.equal(e.message, outcomes[i + 1].message);
    assert.equal(e.batch, events[0].batch);
    assert.equal(typeof e.entry, 'bigint');
  }
  driver.dispose();
});

test('a call settled by decide is told as settled, with its keys', async () => {
  const { clock, driver, events } = await setup();
  const done = driver.run([{ id: 'w', tool: 'write', args: { path: 'x.txt' } }], async () => 1, { decide: () => 'reject' });
  await clock.runAll();
  await done;
  assert.deepEqual(events.map(line), ['0 settled w rejected']);
  assert.deepEqual(events[0].keys, ['fs:x.txt']);
  assert.equal(events[0].message, (await done)[0].entries[0].message);
  driver.dispose();
});

test('a rate-limited run: end rate-limited, a wait on the paused key, then start with waitedMs', async () => {
  const { clock, driver, events, sleep } = await setup();
  let first = true;
  const done = driver.run([{ id: 'a', tool: 'gh' }, { id: 'b', tool: 'gh' }], async ({ label }) => {
    await sleep(3);
    if (label === 'a' && first) {
      first = false;
      throw new RateLimitedError(50);
    }
    return label;
  });
  await clock.runAll();
  assert.deepEqual((await done).map((c) => c.entries[0].status), ['ok', 'ok']);
  assert.deepEqual(events.map(line), [
    '0 start a waited 0',
    '0 wait b key-full:github',
    '3 end a rate-limited 3 retry 50',
    '3 wait a key-paused:github',
    '3 wait b behind:github',
    '53 start a waited 50 after key-paused',
    '53 wait b key-full:github',
    '56 end a ok 3',
    '56 start b waited 56 after key-full',
    '59 end b ok 3',
  ]);
  driver.dispose();
});

test('a limit-1 key with three calls: start, waits, starts in order with their keys and waitedMs', async () => {
  const { clock, driver, events, sleep } = await setup();
  const done = driver.run(three, async () => sleep(10));
  await clock.runAll();
  await done;
  assert.deepEqual(events.map(line), [
    '0 start a waited 0',
    '0 wait b key-full:github',
    '0 wait c behind:github',
    '10 end a ok 10',
    '10 start b waited 10 after key-full',
    '10 wait c key-full:github',
    '20 end b ok 10',
    '20 start c waited 20 after key-full',
    '30 end c ok 10',
  ]);
  for (const e of events) {
    assert.deepEqual(e.keys, ['github']);
    assert.equal(e.tool, 'gh');
  }
  const waits = events.filter((e) => e.type === 'wait');
  assert.equal(waits[0].why, 'waiting: github is full (1 of 1 running: a)');
  assert.deepEqual(waits[0].wait, { kind: 'key-full', key: 'github', limit: 1, running: ['a'] });
  assert.equal(events.find((e) => e.type === 'start' && e.label === 'a').wait, undefined);
  driver.dispose();
});

test('a call that starts at once still tells its keys (a template, a key set, none)', async () => {
  const { clock, driver, events, sleep } = await setup();
  const done = driver.run(
    [
      { id: 'w', tool: 'write', args: { path: 'a.txt' } },
      { id: 'c', tool: 'copy', args: { src: 'b.txt', dst: 'c.txt' } },
      { id: 'f', tool: 'free' },
    ],
    async () => sleep(1),
  );
  await clock.runAll();
  await done;
  const starts = Object.fromEntries(events.filter((e) => e.type === 'start').map((e) => [e.label, e]));
  assert.deepEqual(starts.w.keys, ['fs:a.txt']);
  assert.deepEqual(starts.c.keys, ['fs:b.txt', 'fs:c.txt']);
  assert.deepEqual(starts.f.keys, []);
  for (const s of Object.values(starts)) {
    assert.equal(s.waitedMs, 0);
    assert.equal('wait' in s, false);
  }
  assert.deepEqual(events.filter((e) => e.type === 'end').map((e) => e.keys), [['fs:a.txt'], ['fs:b.txt', 'fs:c.txt'], []]);
  assert.equal(events.filter((e) => e.type === 'wait').length, 0);
  driver.dispose();
});

test('fan-out entries are told by their own label', async () => {
  const p = (await Turnstile.load()).resolve([{ name: 'fan', text: '[conversation.tools.read]\nconcurrency = { key = "disk", limit = 1 }\nfan_out = true\n' }]);
  const clock = new VirtualClock();
  const events = [];
  const driver = new Driver(new Scheduler(p), { clock, onEvent: (e) => events.push(e) });
  const done = driver.run([{ id: 'r', tool: 'read', operations: 2 }], async () => clock.sleep(5));
  await clock.runAll();
  await done;
  assert.deepEqual(events.map(line), ['0 start r#0 waited 0', '0 wait r#1 key-full:disk', '5 end r#0 ok 5', '5 start r#1 waited 5 after key-full', '10 end r#1 ok 5']);
  driver.dispose();
});

test('driver.inspect() lists a running entry with its keys, and a waiting one with its wait and why', async () => {
  const { clock, driver, sleep } = await setup({ onEvent: undefined });
  const done = driver.run([{ id: 'w', tool: 'write', args: { path: 'a.txt' } }, { id: 'v', tool: 'write', args: { path: 'a.txt' } }], async () => sleep(10));
  await clock.runUntil(1);
  const [live] = driver.inspect();
  const [w, v] = live.entries;
  assert.equal(w.state.kind, 'running');
  assert.deepEqual(w.keys, ['fs:a.txt']);
  assert.equal(w.wait, undefined);
  assert.equal(v.state.kind, 'approved');
  assert.deepEqual(v.keys, ['fs:a.txt']);
  assert.deepEqual(v.wait, { kind: 'key-full', key: 'fs:a.txt', limit: 1, running: ['w'] });
  assert.equal(typeof v.why, 'string');
  await clock.runAll();
  await done;
  driver.dispose();
});

test('with persist, events come after the snapshot is saved, and the saves are not more', async () => {
  const count = async (onEvent) => {
    const { clock, driver, sleep } = await setup({ onEvent, persist: () => saves.push(order.length) });
    const done = driver.run(three, async () => sleep(10));
    await clock.runAll();
    await done;
    driver.dispose();
  };
  let saves = [];
  let order = [];
  await count(undefined);
  const without = saves.length;
  saves = [];
  order = [];
  await count((e) => order.push(e.type));
  assert.equal(saves.length, without);
  assert.deepEqual(order, ['start', 'wait', 'wait', 'end', 'start', 'wait', 'end', 'start', 'end']);
  // Saved before the step's events: the start of a after the first save, each end after its own.
  assert.equal(saves[0], 0);
  assert.deepEqual(saves, [...saves].sort((x, y) => x - y));
  for (const at of [3, 6, 8]) assert.ok(saves.includes(at), `a save right before event ${at} (${order[at]}): ${saves}`);
});

test('a Gate passes onEvent to the driver it makes', async () => {
  const clock = new VirtualClock();
  const events = [];
  const gate = new Gate(policy, { clock, onEvent: (e) => events.push(e) });
  const stop = clock.auto();
  const results = await Promise.all(['a', 'b'].map((id) => gate.call('gh', id, {}, async () => (await clock.sleep(2), id))));
  stop();
  assert.deepEqual(results, ['a', 'b']);
  assert.deepEqual(events.map((e) => `${e.type} ${e.label}`), ['start a', 'wait b', 'end a', 'start b', 'end b']);
  gate.driver.dispose();
});

// --- OpenTelemetry ------------------------------------------------------------------------

function otel() {
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  /** Every metric's data points as `name {attributes} value` (a histogram: its count and sum). */
  const points = async () => {
    await reader.forceFlush();
    const last = exporter.getMetrics().at(-1);
    const out = {};
    for (const scope of last?.scopeMetrics ?? []) {
      for (const metric of scope.metrics) {
        out[metric.descriptor.name] = metric.dataPoints.map((p) => ({ attributes: p.attributes, value: typeof p.value === 'number' ? p.value : { count: p.value.count, sum: p.value.sum } }));
      }
    }
    return out;
  };
  return { spans, tracerProvider, meterProvider, points, shutdown: () => Promise.all([tracerProvider.shutdown(), meterProvider.shutdown()]) };
}

test('otelEvents: wait_for spans for starts after a wait, from approval to start', async () => {
  const o = otel();
  const { clock, driver, sleep } = await setup({ onEvent: otelEvents({ tracerProvider: o.tracerProvider, meterProvider: o.meterProvider }) });
  const done = driver.run(three, async () => sleep(10));
  await clock.runAll();
  await done;
  const spans = o.spans.getFinishedSpans();
  assert.deepEqual(spans.map((s) => s.name), ['wait_for gh', 'wait_for gh'], 'a started at once: no span');
  const ms = (hr) => hr[0] * 1000 + hr[1] / 1e6;
  assert.deepEqual(spans.map((s) => ms(s.endTime) - ms(s.startTime)), [10, 20]);
  assert.equal(spans[0].kind, SpanKind.INTERNAL);
  assert.deepEqual(spans[0].attributes, {
    'gen_ai.operation.name': 'wait_for',
    'gen_ai.tool.name': 'gh',
    'gen_ai.tool.call.id': 'b',
    'turnstile.key': 'github',
    'turnstile.keys': ['github'],
    'turnstile.wait.reason': 'key-full',
    'turnstile.wait.ms': 10,
  });
  assert.ok(Math.abs(ms(spans[1].endTime) - Date.now()) < 60_000, 'spans are on the wall clock');
  driver.dispose();
  await o.shutdown();
});

test('otelEvents: metrics per key (waits, running, rate limits, retries, settlements)', async () => {
  const o = otel();
  const { clock, driver, sleep } = await setup({ onEvent: otelEvents({ tracerProvider: o.tracerProvider, meterProvider: o.meterProvider }) });
  let first = true;
  const controller = new AbortController();
  const done = driver.run(
    [
      { id: 'a', tool: 'gh' },
      { id: 'b', tool: 'gh' },
      { id: 'c', tool: 'copy', args: { src: 'x', dst: 'y' } },
      { id: 'd', tool: 'copy', args: { src: 'z', dst: 'y' } },
    ],
    async ({ label, signal }) => {
      await sleep(3, signal);
      if (label === 'a' && first) {
        first = false;
        throw new RateLimitedError(5);
      }
    },
    { signal: controller.signal },
  );
  await clock.runUntil(1);
  let m = await o.points();
  const value = (name, attributes) => m[name]?.find((p) => JSON.stringify(p.attributes) === JSON.stringify(attributes))?.value;
  assert.equal(value('turnstile.running', { 'turnstile.key': 'github' }), 1);
  assert.equal(value('turnstile.running', { 'turnstile.key': 'fs:x' }), 1);
  assert.equal(value('turnstile.waiting', { 'turnstile.key': 'github' }), 1);
  assert.equal(value('turnstile.waiting', { 'turnstile.key': 'fs:y' }), 1);
  assert.equal(value('turnstile.waiting', { 'turnstile.key': 'fs:z' }), 1);
  await clock.runUntil(9);
  m = await o.points();
  // a: rate-limited at 3, ran again at 8 (running); b waits; d started at 3, ended at 6.
  assert.equal(value('turnstile.rate_limited', { 'turnstile.key': 'github' }), 1);
  assert.equal(value('turnstile.retries', { 'turnstile.key': 'github' }), 1);
  assert.equal(value('turnstile.running', { 'turnstile.key': 'github' }), 1);
  assert.equal(value('turnstile.running', { 'turnstile.key': 'fs:y' }), 0);
  assert.equal(value('turnstile.waiting', { 'turnstile.key': 'fs:y' }), 0);
  controller.abort();
  await clock.runAll();
  await done;
  m = await o.points();
  assert.equal(value('turnstile.settlements', { 'turnstile.key': 'github', 'turnstile.settle.reason': 'cancelled' }), 1);
  assert.equal(value('turnstile.running', { 'turnstile.key': 'github' }), 0);
  assert.equal(value('turnstile.waiting', { 'turnstile.key': 'github' }), 0);
  assert.deepEqual(value('turnstile.wait.duration', { 'turnstile.key': 'github' }), { count: 1, sum: 0 }, 'a started at once');
  assert.deepEqual(value('turnstile.wait.duration', { 'turnstile.key': 'github', 'turnstile.wait.reason': 'key-paused' }), { count: 1, sum: 5 });
  assert.deepEqual(value('turnstile.wait.duration', { 'turnstile.key': 'fs:y', 'turnstile.wait.reason': 'key-full' }), { count: 1, sum: 3 });
  driver.dispose();
  await o.shutdown();
});

test('otelEvents refuses an unknown option', () => {
  assert.throws(() => otelEvents({ trace: {} }), (e) => e instanceof TypeError && /unknown field "trace"/.test(e.message));
});
