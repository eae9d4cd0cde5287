// Every public method gets every wrong type and value (no silent wrap, no NaN, no booleans as
// numbers, enums by name, shapes checked), then the same instance is used as if nothing happened,
// `unfinished()` included. A trap that happens anyway breaks the instance with
// `InstanceBrokenError`, and every later use of it refuses with that error.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Driver, InstanceBrokenError, Scheduler, SubmitError, Turnstile, TurnstileError } from '../dist/index.js';
import { quiet } from './fixtures/virtual-clock.mjs';

const CONFIG = '[conversation.tools.k]\nconcurrency = 1\n[conversation.tools.f]\nfan_out = true\n';
const MAX = 2n ** 64n - 1n;

/** Wrong numbers for a `u64` parameter: every one must throw TypeError (wrong type) or
 * RangeError (out of range), never reach the component. */
const BAD_U64 = [['1', TypeError], [1, TypeError], [1.9, TypeError], [2 ** 32 + 1, TypeError], [NaN, TypeError], [true, TypeError], [null, TypeError], [{}, TypeError], [-1n, RangeError], [2n ** 64n, RangeError]];
/** Wrong values for a `u32`-ranged number parameter. */
const BAD_U32 = [['1', TypeError], [1n, TypeError], [true, TypeError], [null, TypeError], [NaN, RangeError], [1.9, RangeError], [-1, RangeError], [2 ** 32, RangeError], [2 ** 32 + 1, RangeError], [Infinity, RangeError]];

function throwsNaming(f, Kind, name) {
  assert.throws(f, (e) => {
    assert.ok(e instanceof Kind, `expected ${Kind.name}, got ${e?.constructor?.name}: ${e?.message}`);
    if (name) assert.ok(e.message.includes(name), `message ${JSON.stringify(e.message)} does not name ${name}`);
    return true;
  });
}

async function rejectsNaming(p, Kind, name) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof Kind, `expected ${Kind.name}, got ${e?.constructor?.name}: ${e?.message}`);
    if (name) assert.ok(e.message.includes(name), `message ${JSON.stringify(e.message)} does not name ${name}`);
    return true;
  });
}

test('every wrong argument to every method throws TypeError or RangeError; the instance goes on', async () => {
  await rejectsNaming(Turnstile.load('x'), TypeError, 'options');
  await rejectsNaming(Turnstile.load({ bogus: 1 }), TypeError, 'bogus');
  await rejectsNaming(Turnstile.load({ coreModule: 'x' }), TypeError, 'options.coreModule');
  const t = await Turnstile.load();

  // resolve: wrong shapes never resolve to an empty policy.
  for (const bad of [{ user: CONFIG }, CONFIG, 5, null, undefined, [5], [null], [['x']], [{ name: 1, text: '' }], [{ name: 'x', text: 5 }], [{ name: 'x', text: '', extra: 1 }], [{ conversation: { tools: { k: { concurrency: () => 1 } } } }], [{ conversation: { tools: { k: { concurrency: null } } } }], [new Map()]]) {
    assert.throws(() => t.resolve(bad), TypeError, `resolve(${String(bad)})`);
  }
  const policy = t.resolve([{ name: 'test', text: CONFIG }]);

  // admission config
  for (const [v, Kind] of BAD_U32) throwsNaming(() => t.admission({ maxConcurrent: v, allowParallel: false }), Kind, 'config.maxConcurrent');
  throwsNaming(() => t.admission({ maxConcurrent: 1 }), TypeError, 'config.allowParallel');
  throwsNaming(() => t.admission({ maxConcurrent: 1, allowParallel: 1 }), TypeError, 'config.allowParallel');
  throwsNaming(() => t.admission({ maxConcurrent: 1, allowParallel: true, extra: 1 }), TypeError, 'extra');
  throwsNaming(() => t.admission(null), TypeError, 'config');

  // policy
  throwsNaming(() => policy.tool(1), TypeError, 'name');
  throwsNaming(() => new Scheduler('x'), TypeError, 'policy');
  throwsNaming(() => new Scheduler({}), TypeError, 'policy');

  const sched = new Scheduler(policy);
  const b = sched.submit([{ id: 'a', tool: 'k' }]);

  // submit
  throwsNaming(() => sched.submit('a'), TypeError, 'calls');
  throwsNaming(() => sched.submit({ id: 'a', tool: 'k' }), TypeError, 'calls');
  throwsNaming(() => sched.submit([null]), TypeError, 'calls[0]');
  throwsNaming(() => sched.submit([{ id: 1, tool: 'k' }]), TypeError, 'calls[0].id');
  throwsNaming(() => sched.submit([{ id: 'x', tool: undefined }]), TypeError, 'calls[0].tool');
  for (const [v, Kind] of BAD_U32) throwsNaming(() => sched.submit([{ id: 'x', tool: 'f', operations: v }]), Kind, 'calls[0].operations');
  // The arguments pairs; a call's `args` are the model's data and never an error (keys.test.mjs).
  throwsNaming(() => sched.submit([{ id: 'x', tool: 'k' }], 'x'), TypeError, 'options');
  throwsNaming(() => sched.submit([{ id: 'x', tool: 'k' }], { arguments: {} }), TypeError, 'options.arguments');
  for (const [v, Kind] of BAD_U32) throwsNaming(() => sched.submit([{ id: 'x', tool: 'k' }], { arguments: [[v, '{}']] }), Kind, 'options.arguments[0][0]');
  throwsNaming(() => sched.submit([{ id: 'x', tool: 'k' }], { arguments: [[0, null]] }), TypeError, 'options.arguments[0][1]');
  // A batch's time limits (the engine keeps the deadlines): u32 milliseconds, checked before they cross.
  for (const [v, Kind] of BAD_U32) {
    if (v === null) continue;
    throwsNaming(() => sched.submit([{ id: 'x', tool: 'k' }], { executionMs: v }), Kind, 'options.executionMs');
    throwsNaming(() => sched.submit([{ id: 'x', tool: 'k' }], { abortGraceMs: v }), Kind, 'options.abortGraceMs');
  }

  // explain (the instance's and the scheduler's)
  for (const explain of [(l, r) => t.explain(l, r), (l, r) => sched.explain(l, r)]) {
    throwsNaming(() => explain(undefined, { kind: 'rejected' }), TypeError, 'label');
    throwsNaming(() => explain('a', null), TypeError, 'reason');
    throwsNaming(() => explain('a', { kind: 'nope' }), RangeError, 'reason.kind');
    throwsNaming(() => explain('a', { kind: 'cancelled', extra: 1 }), TypeError, 'extra');
    for (const [v, Kind] of BAD_U32) throwsNaming(() => explain('a', { kind: 'rate-limited', retries: v }), Kind, 'reason.retries');
    for (const [v, Kind] of [...BAD_U32, [0, RangeError]]) throwsNaming(() => explain('a', { kind: 'stopped', after: v }), Kind, 'reason.after');
  }

  // step
  throwsNaming(() => sched.step('x'), TypeError, 'inputs');
  throwsNaming(() => sched.step({ approved: [] }), TypeError, 'approved');
  for (const field of ['approve', 'ask', 'answer', 'ok', 'failed', 'cancel', 'granted', 'denied']) {
    for (const [v, Kind] of BAD_U64) throwsNaming(() => sched.step({ [field]: [v] }), Kind, `inputs.${field}[0]`);
    throwsNaming(() => sched.step({ [field]: new Uint32Array([1]) }), TypeError, `inputs.${field}`);
    throwsNaming(() => sched.step({ [field]: b.first }), TypeError, `inputs.${field}`);
  }
  for (const [v, Kind] of BAD_U64) throwsNaming(() => sched.step({ settle: [{ entry: v, how: 'rejected' }] }), Kind, 'inputs.settle[0].entry');
  throwsNaming(() => sched.step({ settle: [{ entry: b.first, how: 'bogus' }] }), RangeError, 'inputs.settle[0].how');
  throwsNaming(() => sched.step({ settle: [{ entry: b.first, how: 1 }] }), TypeError, 'inputs.settle[0].how');
  throwsNaming(() => sched.step({ settle: {} }), TypeError, 'inputs.settle');

  // label, inspect, Submitted
  for (const [v, Kind] of BAD_U64) {
    throwsNaming(() => sched.label(v), Kind, 'entry');
    throwsNaming(() => sched.inspect(v), Kind, 'batch');
    throwsNaming(() => b.label(v), Kind, 'entry');
  }
  throwsNaming(() => b.entry(1), TypeError, 'label');

  // resume
  const good = sched.unfinished();
  const resumeThrows = (state, Kind, name, options = { started: 'run-again' }) => throwsNaming(() => Scheduler.resume(policy, state, options), Kind, name);
  resumeThrows(good, RangeError, 'options.started', { started: 'bogus' });
  resumeThrows(good, TypeError, 'options', null);
  resumeThrows(null, TypeError, 'state');
  resumeThrows({ ...good, version: '2' }, TypeError, 'state.version');
  resumeThrows({ ...good, version: -1 }, RangeError, 'state.version');
  resumeThrows({ ...good, policy: 1 }, TypeError, 'state.policy');
  resumeThrows({ ...good, nextEntry: -1n }, RangeError, 'state.nextEntry');
  resumeThrows({ ...good, batches: {} }, TypeError, 'state.batches');
  const batch0 = good.batches[0];
  resumeThrows({ ...good, batches: [{ ...batch0, cancelled: 0 }] }, TypeError, 'state.batches[0].cancelled');
  resumeThrows({ ...good, batches: [{ ...batch0, calls: [{ id: 'a', tool: 'k', operations: NaN, entries: [] }] }] }, RangeError, 'state.batches[0].calls[0].operations');
  resumeThrows({ ...good, batches: [{ ...batch0, calls: [{ id: 'a', tool: 'k', entries: [{ operation: 0, state: { kind: 'bogus' } }] }] }] }, RangeError, 'state.batches[0].calls[0].entries[0].state.kind');
  resumeThrows({ ...good, batches: [{ ...batch0, calls: [{ id: 'a', tool: 'k', entries: [{ operation: 0, state: { kind: 'settled', reason: { kind: 'stopped' } } }] }] }] }, TypeError, 'reason.after');
  resumeThrows({ ...good, batches: [{ ...batch0, calls: [{ id: 'a', tool: 'k', entries: [{ operation: 0, state: { kind: 'settled', reason: { tag: 'cancelled' } } }] }] }] }, TypeError, 'tag');

  // admission
  const adm = t.admission({ maxConcurrent: 1, allowParallel: false });
  throwsNaming(() => adm.begin(1, 'call'), TypeError, 'id');
  throwsNaming(() => adm.begin('x', 'tool-call'), RangeError, 'cls');
  throwsNaming(() => adm.begin('x', 'call', 1), TypeError, 'parent');
  for (const [v, Kind] of BAD_U64) {
    throwsNaming(() => adm.end(v), Kind, 'ticket');
    throwsNaming(() => adm.abandon(v), Kind, 'ticket');
    throwsNaming(() => adm.begin('x', 'reentrant', v), Kind, 'parent');
  }
  await rejectsNaming(adm.acquire('tool-call'), RangeError, 'cls');
  await rejectsNaming(adm.acquire('call', 'x'), TypeError, 'options');
  await rejectsNaming(adm.acquire('call', { bogus: 1 }), TypeError, 'bogus');
  await rejectsNaming(adm.acquire('call', { signal: {} }), TypeError, 'options.signal');
  await rejectsNaming(adm.acquire('call', { id: 5 }), TypeError, 'options.id');
  await rejectsNaming(adm.acquire('reentrant', { parent: 1 }), TypeError, 'options.parent');
  for (const v of [NaN, -1, 2 ** 31, Infinity]) await rejectsNaming(adm.acquire('call', { timeoutMs: v }), RangeError, 'options.timeoutMs');
  await rejectsNaming(adm.acquire('call', { timeoutMs: '5' }), TypeError, 'options.timeoutMs');

  // driver
  throwsNaming(() => new Driver('x'), TypeError, 'scheduler');
  const other = new Scheduler(policy);
  const driver = new Driver(other);
  throwsNaming(() => new Driver(other), TypeError, 'driver');
  assert.equal(Driver.of(other), driver);
  await rejectsNaming(driver.run([{ id: 'a', tool: 'k' }], 'x'), TypeError, 'execute');
  await rejectsNaming(driver.run([{ id: 'a', tool: 'k' }], () => 1, { decide: 1 }), TypeError, 'options.decide');
  await rejectsNaming(driver.run([{ id: 'a', tool: 'k' }], () => 1, { signal: 'x' }), TypeError, 'options.signal');
  await rejectsNaming(driver.run([{ id: 'a', tool: 'k' }], () => 1, { executionTimeoutMs: -1 }), RangeError, 'options.executionTimeoutMs');
  await rejectsNaming(driver.run([{ id: 'a', tool: 'k' }], () => 1, { abortGraceMs: NaN }), RangeError, 'options.abortGraceMs');
  await rejectsNaming(driver.run([{ id: 'a', tool: 'k', operations: NaN }], () => 1), RangeError, 'operations');
  await rejectsNaming(driver.run([{ id: 'a', tool: 'k' }], () => 1, { bogus: true }), TypeError, 'bogus');
  const saved = new Scheduler(policy).unfinished();
  throwsNaming(() => Driver.resume(policy, saved, { started: 'run-again' }), TypeError, 'options.execute');
  throwsNaming(() => Driver.resume(policy, saved, { started: 'bogus', execute: () => 1 }), RangeError, 'options.started');
  throwsNaming(() => Driver.resume(policy, saved, { started: 'interrupt', execute: () => 1, abortGraceMs: 5 }), TypeError, 'abortGraceMs'); // a restored batch keeps its saved limits
  throwsNaming(() => Driver.resume(policy, { ...saved, nextBatch: 1 }, { started: 'interrupt', execute: () => 1 }), TypeError, 'state.nextBatch');
  throwsNaming(() => Driver.resume('policy', saved, { started: 'interrupt', execute: () => 1 }), TypeError, 'policy');
  throwsNaming(() => Driver.resume(policy, saved, { started: 'interrupt', execute: () => 1, argsOf: {} }), TypeError, 'options.argsOf');
  resumeThrows({ ...good, batches: [{ ...batch0, calls: [{ id: 'a', tool: 'k', entries: [], key: 1 }] }] }, TypeError, 'state.batches[0].calls[0].key');
  throwsNaming(() => b.locate('1'), TypeError, 'entry');
  assert.equal(typeof policy.fingerprint(), 'bigint');
  // A refused run left nothing behind: the same ids go through now.
  const outcomes = await driver.run([{ id: 'a', tool: 'k' }], async () => 'ran');
  assert.equal(outcomes[0].entries[0].value, 'ran');
  assert.equal(driver.liveBatches, 0);

  // Nothing above changed anything: the first batch is still the only one, and it runs.
  assert.deepEqual(sched.unfinished().batches.map((s) => s.batch), [b.batch]);
  assert.deepEqual([...sched.step({ approve: [b.first] }).start], [b.first]);
  assert.deepEqual([...sched.step({ ok: [b.first] }).retired], [b.batch]);
  assert.deepEqual(sched.unfinished().batches, []);
  const c1 = adm.begin('c1', 'call');
  assert.deepEqual([...adm.nextAdmissions()], [c1]);
  adm.end(c1);
  assert.equal(adm.inFlight(), 0);
  assert.equal(policy.tool('k').concurrency[0].limit, 1);
});

test('no silent wrap: values that jco would wrap or coerce never reach the component', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'test', text: CONFIG }]);
  const sched = new Scheduler(policy);
  const b1 = sched.submit([{ id: 'a', tool: 'k' }]);
  const b2 = sched.submit([{ id: 'b', tool: 'k' }]);
  // 2**32 + 1 and 1.9 would have cancelled batch 1; "1" too. None does; batch 1 is not cancelled.
  for (const v of ['1', 1.9, 2 ** 32 + 1, Number(b1.batch)]) assert.throws(() => sched.step({ cancel: [v] }));
  assert.equal(sched.unfinished().batches.find((s) => s.batch === b1.batch).cancelled, false);
  // maxConcurrent -1 would have admitted everything.
  assert.throws(() => t.admission({ maxConcurrent: -1, allowParallel: true }), RangeError);
  // operations: NaN would have been a plain call.
  assert.throws(() => sched.submit([{ id: 'n', tool: 'f', operations: NaN }]), RangeError);
  assert.throws(() => sched.submit([{ id: 'n', tool: 'f', operations: 0 }]), (e) => e instanceof SubmitError && e.code === 'invalid-operations');
  assert.equal(sched.unfinished().batches.length, 2);
  void b2;
});

/** A Turnstile whose core instance traps in `label` (a stand-in for a bug in the guest). */
async function trapping() {
  return Turnstile.load({
    instantiateCore: async (module, imports) => {
      const instance = await WebAssembly.instantiate(module, imports);
      const name = Object.keys(instance.exports).find((n) => n.endsWith('[method]scheduler.label'));
      if (!name) return instance;
      return {
        exports: {
          ...instance.exports,
          [name]: () => {
            throw new WebAssembly.RuntimeError('unreachable');
          },
        },
      };
    },
  });
}

test('a trap breaks the instance: InstanceBrokenError now and for every later use, never a RuntimeError', async () => {
  const t = await trapping();
  const policy = t.resolve([{ name: 'test', text: CONFIG }]);
  const sched = new Scheduler(policy);
  const adm = t.admission({ maxConcurrent: 1, allowParallel: false });
  const driver = new Driver(new Scheduler(policy));
  let release;
  const running = driver.run([{ id: 'x', tool: 'k' }, { id: 'y', tool: 'k' }], () => new Promise((r) => (release = r)));
  await quiet();
  const b = sched.submit([{ id: 'a', tool: 'k' }]);
  let broken;
  assert.throws(
    () => sched.label(b.first),
    (e) => {
      broken = e;
      return e instanceof InstanceBrokenError && e instanceof TurnstileError && e.code === 'instance-broken' && e.cause instanceof WebAssembly.RuntimeError;
    },
  );
  assert.equal(t.broken, true);
  for (const use of [() => sched.unfinished(), () => sched.step(), () => sched.submit([{ id: 'z', tool: 'k' }]), () => policy.tools(), () => t.resolve([CONFIG]), () => adm.begin('c', 'call'), () => adm.inFlight(), () => new Scheduler(policy)]) {
    assert.throws(use, (e) => e === broken);
  }
  await assert.rejects(adm.acquire('call'), (e) => e === broken);
  // The driver's batch on the broken instance fails with it when its execution ends.
  release('done');
  await assert.rejects(running, (e) => e === broken);
  await assert.rejects(driver.run([{ id: 'n', tool: 'k' }], () => 1), (e) => e === broken);
  // Disposal of anything on a broken instance is quiet.
  sched.dispose();
  adm.dispose();
  driver.dispose();
  // A fresh instance works.
  const fresh = await Turnstile.load();
  assert.equal(fresh.resolve([CONFIG]).tools().length, 2);
});

test('disposed objects refuse use with DisposedError; disposal is idempotent', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([CONFIG]);
  const sched = new Scheduler(policy);
  const s = new Scheduler(policy);
  s.submit([{ id: 'a', tool: 'k' }]);
  s[Symbol.dispose]();
  assert.throws(() => s.step(), (e) => e.code === 'disposed');
  sched.dispose();
  sched.dispose();
  assert.throws(() => sched.unfinished(), (e) => e.code === 'disposed');
  const adm = t.admission({ maxConcurrent: 1, allowParallel: true });
  adm[Symbol.dispose]();
  assert.throws(() => adm.begin('x', 'call'), (e) => e.code === 'disposed');
  policy.dispose();
  assert.throws(() => policy.tools(), (e) => e.code === 'disposed');
});

test('step and the driver read own fields only: an inherited cancel cancels nothing, an inherited option is not an option', async () => {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'v', text: CONFIG }]);
  const sched = new Scheduler(policy);
  const b = sched.submit([{ id: 'a', tool: 'k' }]);
  sched.step(Object.create({ cancel: [b.batch] }));
  assert.equal(sched.unfinished().batches[0].cancelled, false);
  // Given as its own field, the same cancel retires the batch at once (nothing of it ran).
  const out0 = sched.step({ cancel: [b.batch] });
  assert.deepEqual([...out0.retired], [b.batch]);
  sched.dispose();
  // An inherited `decide` that rejects everything is no decide.
  const driver = new Driver(new Scheduler(policy));
  const out = await driver.run([{ id: 'x', tool: 'k' }], async () => 'ran', Object.create({ decide: () => 'reject' }));
  assert.equal(out[0].entries[0].status, 'ok');
  driver.dispose();
});
