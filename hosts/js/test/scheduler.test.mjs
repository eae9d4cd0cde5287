// The typed API over the WIT: submit and its label helpers, step with per-input errors as data,
// retirement, inspect, export and resume, admission tickets, the typed errors, and hostile
// values from JS that must never trap the instance.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AdmissionError, ConfigError, Driver, ResumeError, Scheduler, SubmitError, Submitted, Turnstile, TurnstileError } from '../dist/index.js';

const CONFIG = `
[conversation.tools.rfd_draft]
concurrency = { key = "rfd" }
[conversation.tools.rfd_renumber]
concurrency = { key = "rfd" }
[conversation.tools.fs_delete_file]
concurrency = 1
fan_out = { on_error = "stop" }
[conversation.tools.read]
fan_out = true
`;
const MAX = 2n ** 64n - 1n;

async function setup(text = CONFIG) {
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: 'test', text }]);
  return { t, policy, sched: new Scheduler(policy) };
}

const throwsCode = (Kind, code) => (e) => e instanceof Kind && e instanceof TurnstileError && e.code === code;

test('submit numbers a batch with bigints and maps labels both ways', async () => {
  const { sched } = await setup();
  const b = sched.submit([
    { id: 'a', tool: 'rfd_draft' },
    { id: 'f', tool: 'read', operations: 3 },
    { id: 'c', tool: 'unconfigured' },
  ]);
  assert.ok(b instanceof Submitted);
  assert.equal(typeof b.batch, 'bigint');
  assert.equal(typeof b.first, 'bigint');
  assert.equal(b.count, 5);
  assert.deepEqual([...b.entries()].map((e) => b.label(e)), ['a', 'f#0', 'f#1', 'f#2', 'c']);
  assert.deepEqual([...b.entries()], [0n, 1n, 2n, 3n, 4n].map((i) => b.first + i));
  assert.equal(b.entry('f#2'), b.first + 3n);
  assert.equal(b.entry('c'), b.first + 4n);
  for (const bad of ['f', 'f#3', 'f#01', 'a#0', 'zz', 'f#-1', '']) assert.equal(b.entry(bad), undefined, bad);
  assert.equal(b.label(b.first - 1n), undefined);
  assert.equal(b.label(b.first + 5n), undefined);
  assert.deepEqual(b.locate(b.first + 2n), { call: b.calls[1], index: 1, operation: 1 });
  // The scheduler's labels agree while the batch is live.
  for (const e of b.entries()) assert.equal(sched.label(e), b.label(e));
  // A second batch gets new numbers.
  const b2 = sched.submit([{ id: 'd', tool: 'rfd_draft' }]);
  assert.ok(b2.batch !== b.batch);
  assert.ok(b2.first >= b.first + 5n);
});

test('step: every input judged on its own, refusals are data, the rest applies', async () => {
  const { sched } = await setup();
  const b = sched.submit(['r1', 'r2', 'r3'].map((id) => ({ id, tool: 'rfd_renumber' })));
  const [r1, r2, r3] = b.entries();
  assert.deepEqual(sched.step(), { abort: [], start: new BigUint64Array(0), settle: [], errors: [], retired: new BigUint64Array(0), acquire: new BigUint64Array(0), requests: [], release: new BigUint64Array(0), pauseStore: [] });
  let out = sched.step({ approve: [r1, MAX, r1] });
  assert.deepEqual(out.errors.map((e) => [e.input, e.index, e.code]), [['approve', 1, 'unknown-entry'], ['approve', 2, 'already-decided']]);
  assert.equal(typeof out.errors[0].message, 'string');
  assert.deepEqual([...out.start], []);
  out = sched.step({ approve: new BigUint64Array([r2, r3]) });
  assert.deepEqual([...out.start], [r1]);
  assert.ok(out.start instanceof BigUint64Array);
  // Ends: r2 is not running (refused), r1's applies and r2 starts.
  out = sched.step({ ok: [r2, r1] });
  assert.deepEqual(out.errors.map((e) => [e.input, e.index, e.code]), [['ok', 0, 'not-running']]);
  assert.deepEqual([...out.start], [r2]);
  // A question keeps the slot; answering it lets the tool run on.
  assert.deepEqual(sched.step({ ask: [r2], answer: [r2] }).errors, []);
  assert.deepEqual(sched.step({ answer: [r2] }).errors.map((e) => e.code), ['not-asking']);
  out = sched.step({ failed: [r2] });
  assert.deepEqual([...out.start], [r3]);
  out = sched.step({ ok: [r3] });
  assert.deepEqual([...out.retired], [b.batch]);
  // Retired: the numbers are unknown forever, and the ids may be used again.
  assert.equal(sched.label(r1), undefined);
  assert.equal(sched.inspect(b.batch), undefined);
  assert.deepEqual(sched.step({ ok: [r3] }).errors.map((e) => e.code), ['unknown-entry']);
  assert.deepEqual(sched.step({ cancel: [b.batch] }).errors.map((e) => [e.input, e.code]), [['cancel', 'unknown-batch']]);
  const again = sched.submit(['r1', 'r2'].map((id) => ({ id, tool: 'rfd_renumber' })));
  assert.ok(again.first > r3);
});

test('shared keys: acquire and release are outputs, granted and denied are inputs, inspect shows the permit waits', async () => {
  const { policy, sched } = await setup('[conversation.tools.gh]\nconcurrency = { key = "github", limit = 2, shared = true }\n[conversation.tools.local]\nconcurrency = 1\n');
  assert.equal(policy.tool('gh').concurrency[0].shared, true);
  assert.equal(policy.tool('local').concurrency[0].shared, false);
  const b = sched.submit(['g1', 'g2', 'g3'].map((id) => ({ id, tool: 'gh' })));
  const [g1, g2, g3] = b.entries();
  let out = sched.step({ approve: [g1, g2, g3] });
  assert.deepEqual([...out.acquire], [g1, g2]);
  assert.deepEqual(out.requests, [g1, g2].map((entry) => ({ entry, key: 'github', limit: 2, delayMs: 0, rates: [], weight: 1 })));
  assert.deepEqual([...out.start], []);
  out = sched.step({ granted: [g2] });
  assert.deepEqual([...out.start], [], 'g2 waits for g1 (written order)');
  assert.deepEqual(
    sched.inspect(b.batch).map((s) => [s.label, s.state.kind, s.wait]),
    [
      ['g1', 'acquiring', { kind: 'permit-requested', key: 'github' }],
      ['g2', 'granted', { kind: 'permit-granted', key: 'github' }],
      ['g3', 'approved', { kind: 'key-full', key: 'github', limit: 2, running: ['g1', 'g2'] }],
    ],
  );
  out = sched.step({ granted: [g1, g3] });
  assert.deepEqual(out.errors.map((e) => [e.input, e.index, e.code]), [['granted', 1, 'not-acquiring']]);
  assert.deepEqual([...out.start], [g1, g2]);
  out = sched.step({ ok: [g1] });
  assert.deepEqual([...out.release], [g1]);
  assert.deepEqual([...out.acquire], [g3]);
  out = sched.step({ denied: [g3] });
  assert.deepEqual(out.settle, [], 'a denied entry is settled by the host');
  assert.deepEqual(sched.inspect(b.batch)[2].state, { kind: 'settled', reason: { kind: 'failed' } });
  out = sched.step({ ok: [g2] });
  assert.deepEqual([...out.release], [g2]);
  assert.deepEqual([...out.retired], [b.batch]);
});

test('host settlements, cancellation and stop are reported with their reasons', async () => {
  const { sched } = await setup();
  const b = sched.submit([{ id: 'd', tool: 'fs_delete_file', operations: 3 }, { id: 'x', tool: 'rfd_draft' }, { id: 'y', tool: 'rfd_draft' }]);
  const [d0, d1, d2, x, y] = b.entries();
  let out = sched.step({ approve: [d0, d1, d2, x], settle: [{ entry: y, how: 'rejected' }] });
  assert.deepEqual([...out.start], [d0, x]);
  out = sched.step({ failed: [d0] });
  assert.deepEqual(out.settle.map(({ entry, reason }) => ({ entry, reason })), [{ entry: d1, reason: { kind: 'stopped', after: 1 } }, { entry: d2, reason: { kind: 'stopped', after: 1 } }]);
  // Each settlement carries the component's sentence, the one `explain` gives.
  assert.deepEqual(out.settle.map((s) => s.message), [sched.explain('d#1', out.settle[0].reason), sched.explain('d#2', out.settle[1].reason)]);
  out = sched.step({ cancel: [b.batch] });
  assert.deepEqual(out.settle, []);
  assert.deepEqual(sched.step({ cancel: [b.batch] }).errors.map((e) => e.code), ['batch-cancelled']);
  out = sched.step({ ok: [x] });
  assert.deepEqual([...out.retired], [b.batch]);
});

test('inspect says why each approved entry waits', async () => {
  const { sched } = await setup();
  const b = sched.submit(['n1', 'n2', 'n3'].map((id) => ({ id, tool: 'rfd_renumber' })));
  const [n1, n2] = b.entries();
  sched.step({ approve: [n1, n2] });
  assert.deepEqual(sched.inspect(b.batch).map((s) => [s.label, s.state.kind, s.wait]), [
    ['n1', 'approved', { kind: 'batch-not-approved', pending: 1 }],
    ['n2', 'approved', { kind: 'batch-not-approved', pending: 1 }],
    ['n3', 'pending', undefined],
  ]);
  sched.step({ approve: [b.first + 2n] });
  const st = sched.inspect(b.batch);
  assert.equal(st[0].state.kind, 'running');
  assert.equal(st[0].entry, n1);
  assert.deepEqual(st[0].keys, ['rfd']);
  assert.deepEqual(st[1].wait, { kind: 'key-full', key: 'rfd', limit: 1, running: ['n1'] });
  assert.deepEqual(st[2].wait, { kind: 'behind', label: 'n2', key: 'rfd' });
  assert.equal(sched.inspect(MAX), undefined);
});

test('submit errors are thrown as SubmitError and change nothing', async () => {
  const { sched } = await setup();
  sched.submit([{ id: 'a', tool: 'rfd_draft' }]);
  assert.throws(() => sched.submit([]), throwsCode(SubmitError, 'empty-batch'));
  assert.throws(() => sched.submit([{ id: 'a', tool: 'rfd_draft' }]), throwsCode(SubmitError, 'duplicate-id'));
  assert.throws(() => sched.submit([{ id: 'b', tool: 't' }, { id: 'b', tool: 't' }]), throwsCode(SubmitError, 'duplicate-id'));
  assert.throws(() => sched.submit([{ id: 'x#1', tool: 't' }]), throwsCode(SubmitError, 'invalid-id'));
  assert.throws(() => sched.submit([{ id: 'two\nlines', tool: 't' }]), throwsCode(SubmitError, 'invalid-id'));
  assert.throws(() => sched.submit([{ id: 'x', tool: 'tool\n' }]), throwsCode(SubmitError, 'invalid-id'));
  assert.throws(() => sched.submit([{ id: '', tool: 't' }]), throwsCode(SubmitError, 'invalid-id'));
  assert.throws(() => sched.submit([{ id: 'x', tool: 'rfd_draft', operations: 2 }]), throwsCode(SubmitError, 'not-fan-out'));
  assert.throws(() => sched.submit([{ id: 'x', tool: 'read', operations: 0 }]), throwsCode(SubmitError, 'invalid-operations'));
  assert.throws(() => sched.submit([{ id: 'x', tool: 'read', operations: 1.5 }]), RangeError);
  assert.throws(() => sched.submit([{ id: 'x', tool: 'read', operations: 100001 }]), throwsCode(SubmitError, 'too-large'));
  const b = sched.submit([{ id: 'x', tool: 'read', operations: 2 }]);
  assert.equal(b.count, 2);
});

test('a newline in a call id or tool name is refused before the batch is packed: invalid-id, never malformed-batch or other calls', async () => {
  const { sched } = await setup();
  const driver = new Driver(sched);
  // Packed as they are, these would cross as a well-formed batch of other calls ("a" and "b"
  // on tool "read"), or as a malformed one.
  const bad = [
    [{ id: 'a\nb', tool: 'read\nread' }],
    [{ id: 'a\nb', tool: 'read' }],
    [{ id: 'ok', tool: 'read' }, { id: 'c', tool: 'read\n' }],
    [{ id: 'a\n', tool: 'read' }],
    [{ id: '\n', tool: '\n' }],
  ];
  for (const calls of bad) {
    let error;
    assert.throws(() => sched.submit(calls), (e) => (error = e) instanceof SubmitError);
    assert.equal(error.code, 'invalid-id', JSON.stringify(calls));
    assert.match(error.message, /call \d+: call ids and tool names are 1 to 256 bytes without a newline/);
    await assert.rejects(driver.run(calls, async () => 'ran'), (e) => e instanceof SubmitError && e.code === 'invalid-id');
  }
  // Nothing was submitted (no call "a", "b" or "ok" is live) and nothing trapped: the same ids
  // go through now.
  const out = await driver.run(['a', 'b', 'ok', 'c'].map((id) => ({ id, tool: 'read' })), async ({ label }) => label);
  assert.deepEqual(out.map((c) => c.entries[0].status), ['ok', 'ok', 'ok', 'ok']);
  driver.dispose();
});

test('a malformed batch (only a package bug could pack one) is an Error that says so, not a SubmitError, and changes nothing', async () => {
  const { sched } = await setup();
  const raw = sched.held.get();
  const submitBatch = raw.submitBatch;
  // A packing bug, stood in for: the tools text loses its last newline.
  raw.submitBatch = (batch, limits) => submitBatch.call(raw, { ...batch, tools: batch.tools.slice(0, -1) }, limits);
  assert.throws(() => sched.submit([{ id: 'a', tool: 'read' }]), (e) => !(e instanceof SubmitError) && /malformed batch .*a bug/.test(e.message));
  delete raw.submitBatch;
  const b = sched.submit([{ id: 'a', tool: 'read' }]);
  assert.deepEqual([...sched.step({ approve: b.entries() }).start], [b.first]);
});

test('lists go in as BigUint64Array or bigint[]; other typed arrays are refused', async () => {
  const { sched } = await setup();
  const b = sched.submit([{ id: 'a', tool: 'read' }]);
  assert.throws(() => sched.step({ approve: new Uint32Array([Number(b.first)]) }), TypeError);
  assert.throws(() => sched.step({ approve: [Number(b.first)] }), TypeError);
  assert.deepEqual([...sched.step({ approve: [b.first] }).start], [b.first]);
});

test('unfinished and resume: numbers survive; started entries run again or are interrupted', async () => {
  const { policy, sched } = await setup();
  const b = sched.submit([{ id: 'n1', tool: 'rfd_renumber' }, { id: 'n2', tool: 'rfd_renumber' }, { id: 'r', tool: 'read', operations: 2 }]);
  const [n1, n2, r0, r1] = b.entries();
  sched.step({ approve: b.entries() });
  sched.step({ ok: [r0] });
  const state = sched.unfinished();
  assert.equal(state.version, 2);
  assert.equal(typeof state.nextEntry, 'bigint');
  assert.deepEqual(state.batches.map((s) => [s.batch, s.first, s.calls.length]), [[b.batch, b.first, 3]]);
  // A saved state is plain data: it survives a JSON round trip with bigints as strings.
  const text = JSON.stringify(state, (_, v) => (typeof v === 'bigint' ? `${v}n` : v));
  const back = JSON.parse(text, (_, v) => (typeof v === 'string' && /^\d+n$/.test(v) ? BigInt(v.slice(0, -1)) : v));

  const again = Scheduler.resume(policy, back, { started: 'run-again' });
  assert.deepEqual(again.unrestored, []);
  assert.deepEqual(again.scheduler.inspect(b.batch).map((s) => [s.label, s.state.kind]), [['n1', 'pending'], ['n2', 'pending'], ['r#0', 'ended'], ['r#1', 'pending']]);
  assert.equal(again.scheduler.label(r1), 'r#1');
  assert.deepEqual([...again.scheduler.step({ approve: [n1, n2, r1] }).start], [n1, r1]);

  const interrupted = Scheduler.resume(policy, state, { started: 'interrupt' });
  const out = interrupted.scheduler.step();
  assert.deepEqual(out.settle.map(({ entry, reason }) => ({ entry, reason })), [{ entry: n1, reason: { kind: 'interrupted' } }, { entry: r1, reason: { kind: 'interrupted' } }]);
  assert.deepEqual(out.settle.map((s) => s.message), [interrupted.scheduler.explain('n1', { kind: 'interrupted' }), interrupted.scheduler.explain('r#1', { kind: 'interrupted' })]);
  // A fresh batch on a resumed scheduler never reuses a number.
  const later = interrupted.scheduler.submit([{ id: 'z', tool: 'read' }]);
  assert.ok(later.first >= state.nextEntry && later.batch >= state.nextBatch);

  assert.throws(() => Scheduler.resume(policy, { ...state, version: 99 }, { started: 'run-again' }), throwsCode(ResumeError, 'unsupported-version'));
});

test('a round of more than 65536 actions and an export of more than one part cross in parts, joined', async () => {
  // 100000 operations on one key of limit 1: a cancel aborts one and settles the rest in one
  // round; 3 x 100000 started operations export in 3 parts.
  const { policy, sched } = await setup('[conversation.tools.one]\nconcurrency = 1\nfan_out = true\n[conversation.tools.all]\nfan_out = true\n');
  const one = sched.submit([{ id: 'one', tool: 'one', operations: 100_000 }]);
  assert.deepEqual([...sched.step({ approve: one.entries() }).start], [one.first]);
  const cancelled = sched.step({ cancel: [one.batch] });
  assert.deepEqual(cancelled.abort.map((a) => a.entry), [one.first]);
  assert.equal(cancelled.settle.length, 99_999);
  assert.equal(cancelled.settle[99_998].entry, one.first + 99_999n);
  assert.deepEqual([...sched.step({ failed: [one.first] }).retired], [one.batch]);

  const all = [0, 1, 2].map((k) => sched.submit([{ id: `all${k}`, tool: 'all', operations: 100_000 }]));
  for (const b of all) assert.equal(sched.step({ approve: b.entries() }).start.length, 100_000);
  const state = sched.unfinished();
  assert.deepEqual(state.batches.map((b) => [b.batch, b.calls.length, b.calls[0].entries.length]), all.map((b) => [b.batch, 1, 100_000]));
  const { scheduler, unrestored } = Scheduler.resume(policy, state, { started: 'interrupt' });
  assert.deepEqual(unrestored, []);
  const out = scheduler.step();
  assert.equal(out.settle.length, 300_000);
  assert.deepEqual([...out.retired], all.map((b) => b.batch));
});

test('resume under a changed policy leaves out what it no longer allows', async () => {
  const { t, sched } = await setup();
  const b = sched.submit([{ id: 'f', tool: 'read', operations: 2 }, { id: 'a', tool: 'rfd_draft' }]);
  sched.step({ approve: b.entries() });
  const narrower = t.resolve([{ name: 'changed', text: '[conversation.tools.rfd_draft]\nconcurrency = 1\n' }]);
  // The fingerprint says, before resuming, that the policy changed.
  assert.notEqual(sched.unfinished().policy, narrower.fingerprint());
  assert.equal(typeof narrower.fingerprint(), 'bigint');
  const { scheduler, unrestored } = Scheduler.resume(narrower, sched.unfinished(), { started: 'run-again' });
  assert.deepEqual(unrestored.map((u) => [u.batch, u.call, u.code]), [[b.batch, 'f', 'invalid-operations']]);
  // Everything else is restored: `a` had started, and is pending again.
  assert.deepEqual(scheduler.inspect(b.batch).filter((s) => s.label === 'a').map((s) => s.state.kind), ['pending']);
});

test('admission: tickets are bigints never reused; mistakes throw AdmissionError', async () => {
  const t = await Turnstile.load();
  const adm = t.admission({ maxConcurrent: 1, allowParallel: false });
  const c1 = adm.begin('c1', 'call');
  assert.equal(typeof c1, 'bigint');
  assert.deepEqual([...adm.nextAdmissions()], [c1]);
  const c2 = adm.begin('c2', 'call');
  assert.deepEqual([...adm.nextAdmissions()], []);
  assert.throws(() => adm.begin('c1', 'request'), throwsCode(AdmissionError, 'duplicate-request'));
  assert.throws(() => adm.end(c2), throwsCode(AdmissionError, 'not-admitted'));
  assert.throws(() => adm.abandon(c1), throwsCode(AdmissionError, 'not-queued'));
  assert.throws(() => adm.begin('r', 'reentrant'), throwsCode(AdmissionError, 'invalid-parent'));
  assert.throws(() => adm.begin('r', 'reentrant', MAX), throwsCode(AdmissionError, 'invalid-parent'));
  assert.equal(adm.inFlight(), 1);
  adm.end(c1);
  assert.deepEqual([...adm.nextAdmissions()], [c2]);
  // The id is free again, with a new ticket; the stale one touches nothing.
  const c1again = adm.begin('c1', 'call');
  assert.ok(c1again !== c1);
  assert.throws(() => adm.end(c1), throwsCode(AdmissionError, 'unknown-request'));
  const report = adm.shutdown();
  assert.deepEqual([...report.cancel], [c2]);
  assert.deepEqual([...report.refused], [c1again]);
  assert.throws(() => adm.begin('late', 'call'), throwsCode(AdmissionError, 'shutdown'));
});

test('bad config throws ConfigError with typed diagnostics and rendered text', async () => {
  const t = await Turnstile.load();
  assert.throws(
    () => t.resolve([{ name: 'bad.toml', text: '[conversation.tools.t]\nconcurrency = "2"\n' }]),
    (e) => e instanceof ConfigError && e.diagnostics[0].code === 'concurrency-type' && e.diagnostics[0].labels[0].span.line === 2 && e.message.includes('bad.toml:2'),
  );
});

test('independent instances share nothing', async () => {
  const one = await setup();
  const two = await setup();
  const a = one.sched.submit([{ id: 'x', tool: 'rfd_draft' }]);
  const b = two.sched.submit([{ id: 'x', tool: 'rfd_draft' }]);
  assert.equal(a.batch, b.batch);
  assert.throws(() => one.sched.submit([{ id: 'x', tool: 'rfd_draft' }]), throwsCode(SubmitError, 'duplicate-id'));
});

test('hostile values from JS (lone surrogates, NUL, huge strings and numbers) never trap the instance', async () => {
  const { t, sched } = await setup();
  const hostile = ['\ud800', '\udfff#0', '\u0000', 'x'.repeat(1 << 20), '#', ' '];
  for (const s of hostile) {
    try {
      sched.submit([{ id: s, tool: s }]);
    } catch (e) {
      assert.ok(e instanceof SubmitError, `${e}`);
    }
    assert.throws(() => t.resolve([{ name: s, text: '[' + s + '\ud800' }]), (e) => e instanceof ConfigError);
    const adm = t.admission({ maxConcurrent: 0, allowParallel: true });
    try {
      adm.end(adm.begin(s, 'request'));
    } catch (e) {
      assert.ok(e instanceof AdmissionError, `${e}`);
    }
  }
  const numbers = [0n, 1n, MAX, MAX - 1n, 2n ** 53n + 1n];
  const out = sched.step({ approve: numbers, settle: numbers.map((entry) => ({ entry, how: 'skipped' })), ask: numbers, answer: numbers, ok: numbers, failed: numbers, cancel: numbers });
  assert.ok(out.errors.length >= 7 * 3, `${out.errors.length} refused`);
  for (const n of numbers) {
    sched.label(n);
    sched.inspect(n);
  }
  const many = new BigUint64Array(200_000).fill(MAX);
  assert.equal(sched.step({ ok: many }).errors.length, 200_000);
  const b = sched.submit([{ id: 'after', tool: 'read' }]);
  assert.deepEqual([...sched.step({ approve: [b.first] }).start], [b.first]);
});
