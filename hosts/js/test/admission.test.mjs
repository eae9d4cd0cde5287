// `Admission.acquire`: failure paths first (abort and timeout while queued abandon and consume
// nothing, time queued counts against timeoutMs, shutdown rejects waiters and aborts permits,
// would-deadlock, double release), then the happy path and the synchronous API next to it.
// Nothing sleeps on real time: `quiet()` lets every ready promise settle, and the timeout test
// runs on node:test's mock timers.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AdmissionError, AdmissionTimeoutError, Permit, ShutdownError, Turnstile } from '../dist/index.js';
import { quiet } from './fixtures/virtual-clock.mjs';

async function controller(config = { maxConcurrent: 1, allowParallel: false }) {
  const t = await Turnstile.load();
  return t.admission(config);
}

test('an abort while queued rejects with the signal\'s reason, abandons the request and consumes nothing', { timeout: 10_000 }, async () => {
  const adm = await controller();
  const holder = await adm.acquire('call');
  const c = new AbortController();
  const waiting = adm.acquire('call', { signal: c.signal, id: 'waiter' });
  const behind = adm.acquire('call', { id: 'behind' });
  await quiet();
  c.abort(new Error('user pressed stop'));
  await assert.rejects(waiting, /user pressed stop/);
  holder.release();
  // The abandoned request took nothing: the next in line gets the slot.
  const next = await behind;
  assert.equal(next.id, 'behind');
  assert.equal(adm.inFlight(), 1);
  next.release();
  assert.equal(adm.inFlight(), 0);
  // The abandoned id is free again.
  (await adm.acquire('call', { id: 'waiter' })).release();
});

test('an already aborted signal rejects at once without a request', { timeout: 10_000 }, async () => {
  const adm = await controller();
  await assert.rejects(adm.acquire('call', { signal: AbortSignal.abort(new Error('gone')) }), /gone/);
  assert.equal(adm.inFlight(), 0);
  (await adm.acquire('call')).release();
});

test('time queued counts against timeoutMs: AdmissionTimeoutError (an AdmissionError named TimeoutError), the request abandoned', { timeout: 10_000 }, async (t) => {
  const adm = await controller();
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const holder = await adm.acquire('call');
  const behind = adm.acquire('call', { id: 'behind' });
  const late = adm.acquire('call', { timeoutMs: 20, id: 'late' });
  let settled = false;
  late.then(() => (settled = true), () => (settled = true));
  t.mock.timers.tick(19);
  await quiet();
  assert.equal(settled, false, 'still queued 1 ms before its timeout');
  t.mock.timers.tick(1);
  await assert.rejects(late, (e) => {
    assert.ok(e instanceof AdmissionTimeoutError && e instanceof AdmissionError && !(e instanceof DOMException));
    assert.equal(e.name, 'TimeoutError');
    assert.equal(e.code, 'timed-out');
    assert.equal(e.id, 'late');
    assert.equal(e.timeoutMs, 20);
    assert.match(e.message, /^timed-out: late was not admitted within 20 ms$/);
    return true;
  });
  // It consumed nothing: the request behind it is next.
  holder.release();
  (await behind).release();
  assert.equal(adm.inFlight(), 0);
  // Admitted in time: the timer is cleared, the permit lives on past the deadline.
  const quick = await adm.acquire('call', { timeoutMs: 20 });
  t.mock.timers.tick(30);
  await quiet();
  assert.equal(quick.signal.aborted, false);
  quick.release();
});

test('shutdown rejects every waiter with ShutdownError and aborts the permits in flight', { timeout: 10_000 }, async () => {
  const adm = await controller({ maxConcurrent: 2, allowParallel: false });
  const call = await adm.acquire('call');
  const request = await adm.acquire('request');
  const queuedCall = adm.acquire('call');
  const queuedRequest = adm.acquire('request');
  await quiet();
  const report = adm.shutdown();
  await assert.rejects(queuedCall, (e) => e instanceof ShutdownError && e instanceof AdmissionError && e.code === 'shutdown');
  await assert.rejects(queuedRequest, ShutdownError);
  assert.equal(call.signal.aborted, true);
  assert.ok(call.signal.reason instanceof ShutdownError);
  assert.equal(request.signal.aborted, true);
  assert.deepEqual([...report.cancel].sort(), [call.ticket, request.ticket].sort());
  assert.equal(report.refused.length, 2);
  // In-flight permits still release; later acquires reject at once.
  call.release();
  request.release();
  assert.equal(adm.inFlight(), 0);
  await assert.rejects(adm.acquire('call'), ShutdownError);
  assert.throws(() => adm.begin('late', 'call'), ShutdownError);
});

test('refusals: would-deadlock, invalid parent, duplicate id; double release is harmless', { timeout: 10_000 }, async () => {
  const adm = await controller({ maxConcurrent: 1, allowParallel: false });
  const outer = await adm.acquire('call', { id: 'outer' });
  await assert.rejects(adm.acquire('reentrant', { parent: outer }), (e) => e instanceof AdmissionError && e.code === 'would-deadlock');
  await assert.rejects(adm.acquire('reentrant'), (e) => e.code === 'invalid-parent');
  await assert.rejects(adm.acquire('request', { id: 'outer' }), (e) => e.code === 'duplicate-request');
  outer.release();
  outer.release();
  outer[Symbol.dispose]();
  assert.equal(outer.released, true);
  assert.equal(adm.inFlight(), 0);
});

test('a re-entrant call descends from its parent permit; permits are disposable', { timeout: 10_000 }, async () => {
  const adm = await controller({ maxConcurrent: 2, allowParallel: false });
  const outer = await adm.acquire('call');
  const inner = await adm.acquire('reentrant', { parent: outer });
  assert.ok(inner instanceof Permit);
  assert.equal(inner.class, 'reentrant');
  assert.equal(adm.inFlight(), 2);
  inner[Symbol.dispose]();
  outer[Symbol.dispose]();
  assert.equal(adm.inFlight(), 0);
});

test('two controllers\' tickets are not interchangeable: another controller\'s ticket or permit is unknown', { timeout: 10_000 }, async () => {
  const t = await Turnstile.load();
  const a = t.admission({ maxConcurrent: 2, allowParallel: false });
  const b = t.admission({ maxConcurrent: 2, allowParallel: false });
  // The same requests in the same order on both: each controller numbers its own tickets.
  const ta = a.begin('x', 'request');
  const tb = b.begin('x', 'request');
  assert.notEqual(ta, tb);
  assert.deepEqual([...a.nextAdmissions()], [ta]);
  assert.deepEqual([...b.nextAdmissions()], [tb]);
  assert.throws(() => b.end(ta), (e) => e instanceof AdmissionError && e.code === 'unknown-request');
  assert.throws(() => b.abandon(ta), (e) => e instanceof AdmissionError && e.code === 'unknown-request');
  assert.throws(() => a.end(tb), (e) => e instanceof AdmissionError && e.code === 'unknown-request');
  // Another controller's permit as a parent is no in-flight call of this one.
  const pa = await a.acquire('call', { id: 'pa' });
  b.end(tb);
  await assert.rejects(b.acquire('reentrant', { parent: pa }), (e) => e instanceof AdmissionError && e.code === 'invalid-parent');
  assert.throws(() => b.begin('r', 'reentrant', ta), (e) => e instanceof AdmissionError && e.code === 'invalid-parent');
  // Nothing was touched: a's requests are still in flight, b's budget is whole.
  assert.equal(a.inFlight(), 2);
  assert.equal(b.inFlight(), 0);
  a.end(ta);
  pa.release();
  assert.equal(a.inFlight(), 0);
  // Across instances too.
  const c = (await Turnstile.load()).admission({ maxConcurrent: 1, allowParallel: false });
  const tc = c.begin('x', 'call');
  assert.throws(() => a.end(tc), (e) => e.code === 'unknown-request');
  c.end(tc);
});

test('sibling re-entrant calls of one in-flight call run together within the budget, without the serializer', { timeout: 10_000 }, async () => {
  const adm = await controller({ maxConcurrent: 3, allowParallel: false });
  const outer = await adm.acquire('call', { id: 'outer' });
  const ra = await adm.acquire('reentrant', { parent: outer, id: 'ra' });
  const rb = await adm.acquire('reentrant', { parent: outer, id: 'rb' });
  assert.equal(adm.inFlight(), 3);
  // The budget is full: a third sibling waits for a place.
  const rc = adm.acquire('reentrant', { parent: outer, id: 'rc' });
  let admitted = false;
  rc.then(() => (admitted = true));
  await quiet();
  assert.equal(admitted, false);
  ra.release();
  const third = await rc;
  assert.equal(third.id, 'rc');
  for (const p of [third, rb, outer]) p.release();
  assert.equal(adm.inFlight(), 0);
});

test('waiters are admitted first come, first served, each as a slot frees', { timeout: 10_000 }, async () => {
  const adm = await controller({ maxConcurrent: 1, allowParallel: true });
  const order = [];
  const work = async (id) => {
    const permit = await adm.acquire('request', { id });
    order.push(`start ${id}`);
    await quiet();
    order.push(`end ${id}`);
    permit.release();
  };
  await Promise.all(['a', 'b', 'c'].map(work));
  assert.deepEqual(order, ['start a', 'end a', 'start b', 'end b', 'start c', 'end c']);
});

test('the synchronous API next to acquire: nextAdmissions returns only begin\'s tickets', { timeout: 10_000 }, async () => {
  const adm = await controller({ maxConcurrent: 1, allowParallel: true });
  const t1 = adm.begin('sync-1', 'request');
  const waiting = adm.acquire('request', { id: 'async-1' });
  const t2 = adm.begin('sync-2', 'request');
  assert.deepEqual([...adm.nextAdmissions()], [t1]);
  adm.end(t1);
  const permit = await waiting;
  assert.equal(permit.id, 'async-1');
  assert.deepEqual([...adm.nextAdmissions()], []);
  // A permit's ticket is not the synchronous API's to end.
  assert.throws(() => adm.end(permit.ticket), AdmissionError);
  permit.release();
  assert.deepEqual([...adm.nextAdmissions()], [t2]);
  adm.end(t2);
  assert.equal(adm.inFlight(), 0);
});

test('dispose shuts the controller down: waiters reject, permits abort', { timeout: 10_000 }, async () => {
  const adm = await controller();
  const held = await adm.acquire('call');
  const waiting = adm.acquire('call');
  adm.dispose();
  await assert.rejects(waiting, ShutdownError);
  assert.equal(held.signal.aborted, true);
  held.release();
  adm.dispose();
});
