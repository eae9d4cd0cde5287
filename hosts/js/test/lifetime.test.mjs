// Lifetimes: schedulers, controllers and policies dropped without `dispose` are freed by the
// FinalizationRegistry backstop (the component's memory stops growing), and disposed ones free
// their memory at once for the next ones to reuse.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { setImmediate as tick } from 'node:timers/promises';
import { Scheduler, Turnstile } from '../dist/index.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc');

/** A Turnstile with its linear memory caught as jco instantiates the core modules. */
async function load() {
  const memories = [];
  const t = await Turnstile.load({
    instantiateCore: async (module, imports) => {
      const instance = await WebAssembly.instantiate(module, imports);
      for (const value of Object.values(instance.exports)) if (value instanceof WebAssembly.Memory) memories.push(value);
      return instance;
    },
  });
  assert.equal(memories.length, 1);
  return { t, bytes: () => memories[0].buffer.byteLength };
}

const calls = Array.from({ length: 100 }, (_, i) => ({ id: `call-${i}`, tool: 'k' }));

async function collect() {
  for (let i = 0; i < 3; i++) {
    gc();
    await tick();
  }
}

test('schedulers dropped undisposed are freed by the backstop: memory stops growing', async () => {
  const { t, bytes } = await load();
  const policy = t.resolve(['[conversation.tools.k]\nconcurrency = 1\n']);
  const round = () => {
    for (let i = 0; i < 300; i++) {
      const s = new Scheduler(policy);
      s.submit(calls);
      t.admission({ maxConcurrent: 1, allowParallel: false }).begin('x', 'call');
    }
  };
  round();
  await collect();
  round();
  await collect();
  const settled = bytes();
  for (let r = 0; r < 5; r++) {
    round();
    await collect();
  }
  assert.equal(bytes(), settled, `the component's memory grew from ${settled} to ${bytes()} bytes over 1,500 dropped schedulers`);
});

test('disposed schedulers give their memory back at once', async () => {
  const { t, bytes } = await load();
  const policy = t.resolve(['[conversation.tools.k]\nconcurrency = 1\n']);
  for (let i = 0; i < 50; i++) {
    const s = new Scheduler(policy);
    s.submit(calls);
    s.dispose();
  }
  const after50 = bytes();
  for (let i = 0; i < 2000; i++) {
    const s = new Scheduler(policy);
    s.submit(calls);
    s.dispose();
  }
  assert.equal(bytes(), after50);
});
