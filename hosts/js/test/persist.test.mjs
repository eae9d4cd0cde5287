// Persistence (DRIVERS.md, "Persistence"), failure paths first: a persist that throws or rejects
// breaks the driver loudly (PersistError on every batch, executions aborted, nothing starts);
// onOutcome and a resolved run wait for their snapshot; a malformed snapshot is a TypeError
// naming the field. Then the snapshot's text, byte for byte, as a fixture the Python package
// resumes (tests/scenarios/snapshots/js-basic.json), and the Python package's fixtures resumed
// here. Everything on a virtual clock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { DisposedError, Driver, PersistError, RestoredError, Scheduler, Turnstile } from '../dist/index.js';
import { quiet, VirtualClock } from './fixtures/virtual-clock.mjs';

const SNAPSHOTS = new URL('../../../tests/scenarios/snapshots/', import.meta.url).pathname;

/** The policy of the fixture js-basic.json, kept next to it for the Python package. */
const CONFIG = readFileSync(`${SNAPSHOTS}js-basic.toml`, 'utf8');

async function policy(text = CONFIG) {
  return (await Turnstile.load()).resolve([{ name: 'persist', text }]);
}

test('persist must be a function, naming the option', async () => {
  const p = await policy();
  assert.throws(() => new Driver(new Scheduler(p), { persist: 'file' }), (e) => e instanceof TypeError && /options\.persist/.test(e.message));
});

test('a persist that throws breaks the driver: every batch rejects with PersistError, nothing starts', async () => {
  const clock = new VirtualClock();
  const boom = new Error('disk full');
  const driver = new Driver(new Scheduler(await policy()), { clock, persist: () => { throw boom; } });
  const started = [];
  const run = driver.run([{ id: 'r1', tool: 'read' }], async (x) => started.push(x.label));
  await assert.rejects(run, (e) => e instanceof PersistError && e.cause === boom && e.code === 'persist-failed');
  assert.deepEqual(started, []);
  await assert.rejects(driver.run([{ id: 'r2', tool: 'read' }], async () => 1), DisposedError);
});

test('a persist that rejects later aborts the running executions and rejects every live batch', async () => {
  const clock = new VirtualClock();
  let calls = 0;
  const driver = new Driver(new Scheduler(await policy()), {
    clock,
    // The first snapshot (the starts) is saved; the one after the first end fails.
    persist: () => (++calls >= 2 ? Promise.reject(new Error('gone')) : Promise.resolve()),
  });
  const aborted = [];
  const outcomes = [];
  const execute = (x) => {
    x.signal.addEventListener('abort', () => aborted.push(x.label));
    return x.label === 'r1' ? clock.sleep(10).then(() => 'one') : new Promise(() => {});
  };
  const run = driver.run([{ id: 'r1', tool: 'read' }, { id: 'r2', tool: 'read' }], execute, { onOutcome: (o) => outcomes.push(o.label) });
  const rejected = assert.rejects(run, (e) => e instanceof PersistError && e.cause.message === 'gone');
  await clock.runAll();
  await rejected;
  assert.deepEqual(aborted, ['r2']);
  // r1's end never reached a saved snapshot: it was not handed out.
  assert.deepEqual(outcomes, []);
});

test('onOutcome and a resolved run wait until the snapshot holding the end is persisted', async () => {
  const clock = new VirtualClock();
  const saved = [];
  let release;
  const driver = new Driver(new Scheduler(await policy()), {
    clock,
    persist: (text) => {
      saved.push(text);
      // Holds the snapshot that holds r1's end (its batch retired with it) until the test lets
      // it go.
      if (text.includes('"status":"ok"') && release === undefined) return new Promise((resolve) => (release = resolve));
    },
  });
  const seen = [];
  let resolved = false;
  const run = driver.run([{ id: 'r1', tool: 'read' }], async () => 'v', { onOutcome: (o) => seen.push(`${o.label} ${JSON.parse(saved.at(-1)).retired[0]?.outcomes[0].entries[0].value}`) });
  run.then(() => (resolved = true));
  await quiet();
  assert.equal(typeof release, 'function', 'a snapshot with the end is being persisted');
  assert.deepEqual(seen, []);
  assert.equal(resolved, false);
  release();
  await quiet();
  assert.deepEqual(seen, ['r1 v']);
  assert.equal(resolved, true);
  // The retired batch stays saved until the host forgets it.
  assert.equal(JSON.parse(saved.at(-1)).retired.length, 1);
  driver.forget(await run);
  await quiet();
  assert.deepEqual(JSON.parse(saved.at(-1)).retired, []);
  assert.throws(() => driver.forget('outcomes'), TypeError);
  driver.dispose();
});

test('a malformed snapshot is a TypeError naming the field; nothing is resumed', async () => {
  const p = await policy();
  const execute = async () => 1;
  const bad = (snapshot, field) => assert.throws(() => Driver.resume(p, snapshot, { execute }), (e) => (e instanceof TypeError || e instanceof RangeError) && e.message.includes(field), field);
  bad('{', 'JSON');
  bad('{"turnstile-snapshot":2,"state":{}}', 'turnstile-snapshot');
  const good = { 'turnstile-snapshot': 1, state: { version: 2, policy: '1', 'next-batch': '0', 'next-entry': '0', batches: [] }, ended: {}, retired: [] };
  bad(JSON.stringify({ ...good, state: { ...good.state, policy: 1 } }), 'snapshot.state.policy');
  bad(JSON.stringify({ ...good, state: { ...good.state, 'next-batch': '-1' } }), 'snapshot.state.next-batch');
  bad(JSON.stringify({ ...good, retired: [{ batch: '1', outcomes: [{ id: 'a', tool: 't', entries: [{ entry: '1', label: 'a', status: 'odd' }] }] }] }), 'snapshot.retired[0].outcomes[0].entries[0].status');
  bad(JSON.stringify({ ...good, extra: 1 }), 'extra');
});

/** The fixture's state: a live batch with an ended value (non-ASCII, nested), an error, a
 * fan-out call with a settled and a started operation, a templated key and limits; and a
 * retired batch not forgotten. */
async function fixtureSnapshot() {
  const clock = new VirtualClock();
  let last;
  const driver = new Driver(new Scheduler(await policy()), { clock, persist: (text) => void (last = text) });
  const retired = driver.run([{ id: 'r1', tool: 'read' }, { id: 'r2', tool: 'read' }], async (x) => {
    if (x.label === 'r2') throw new TypeError('bad input');
    return 3;
  }, { decide: (label) => 'approve' });
  await clock.runAll();
  await retired; // not forgotten: it stays in `retired`
  const execute = (x) => {
    if (x.label === 'w1') return Promise.resolve({ text: 'café ☕', n: [1, 2.5, null], ok: true });
    if (x.label === 'w2') return Promise.reject(new RangeError('boom "quoted"'));
    return new Promise(() => {});
  };
  const live = driver.run(
    [{ id: 'w1', tool: 'write', args: { path: 'a' } }, { id: 'w2', tool: 'write', args: { path: 'b' } }, { id: 'f', tool: 'fan', operations: 2 }],
    execute,
    { executionTimeoutMs: 5000, decide: (label) => (label === 'f#1' ? 'reject' : 'approve') },
  );
  live.catch(() => {}); // disposed at the end of the test
  await clock.runUntil(10);
  return { snapshot: last, driver };
}

test('the snapshot text is DRIVERS.md\'s, byte for byte, and the fixture the Python package resumes is this text', async () => {
  const { snapshot, driver } = await fixtureSnapshot();
  const path = `${SNAPSHOTS}js-basic.json`;
  if (process.env.TURNSTILE_WRITE_SNAPSHOTS) writeFileSync(path, snapshot);
  assert.equal(snapshot, readFileSync(path, 'utf8'));
  // The text is what the spec says: fields in order, no spaces, u64 as strings, ASCII only.
  assert.match(snapshot, /^\{"turnstile-snapshot":1,"state":\{"version":2,"policy":"\d+","next-batch":"3","next-entry":"7","batches":\[\{"batch":"2","first":"3","cancelled":false,"limits":\{"execution-ms":5000\},"calls":\[\{"id":"w1","tool":"write","key":"fs:a","entries":\[\{"operation":0,"state":\{"ended":"ok"\}\}\]\}/);
  assert.ok(snapshot.includes('"ended":{"3":{"value":{"text":"caf\\u00e9 \\u2615","n":[1,2.5,null],"ok":true}},"4":{"error":{"name":"RangeError","message":"boom \\"quoted\\""}}}'), snapshot);
  assert.ok(snapshot.includes('{"id":"f","tool":"fan","operations":2,"entries":[{"operation":0,"state":"started"},{"operation":1,"state":{"settled":"rejected"}}]}'), snapshot);
  assert.ok(snapshot.includes('"retired":[{"batch":"1","outcomes":[{"id":"r1","tool":"read","entries":[{"entry":"1","label":"r1","status":"ok","value":3}]},{"id":"r2","tool":"read","entries":[{"entry":"2","label":"r2","status":"failed","error":{"name":"TypeError","message":"bad input"}}]}]}]'), snapshot);
  assert.ok(!/[^\x20-\x7e]/.test(snapshot) && !/[,:] /.test(snapshot));
  driver.dispose();
});

/** Resumes a fixture and returns what comes back (interrupting what had started). */
async function resumeFixture(text) {
  const clock = new VirtualClock();
  const reported = [];
  const resumed = Driver.resume(await policy(), text, { execute: async () => 'again', started: 'interrupt', clock, onOutcome: (o) => reported.push(o.label) });
  await clock.runAll();
  const batches = await Promise.all(resumed.batches);
  resumed.driver.dispose();
  return { batches, reported };
}

test('js-basic.json resumes: ended values and errors come back, the retired batch resolves with its outcomes', async () => {
  const { batches, reported } = await resumeFixture(readFileSync(`${SNAPSHOTS}js-basic.json`, 'utf8'));
  const [retired, live] = batches;
  assert.equal(retired[0].entries[0].value, 3);
  assert.ok(retired[1].entries[0].error instanceof RestoredError);
  assert.equal(retired[1].entries[0].error.name, 'TypeError');
  assert.equal(retired[1].entries[0].error.message, 'bad input');
  assert.deepEqual(live[0].entries[0].value, { text: 'café ☕', n: [1, 2.5, null], ok: true });
  assert.equal(live[1].entries[0].error.name, 'RangeError');
  assert.equal(live[1].entries[0].error.message, 'boom "quoted"');
  assert.deepEqual(live[2].entries.map((e) => e.status === 'settled' ? e.reason.kind : e.status), ['interrupted', 'rejected']);
  assert.deepEqual(reported.sort(), ['f#0', 'f#1', 'r1', 'r2', 'w1', 'w2']);
});

test('a key set\'s call is saved with "keys", one key with "key" as 0.2 wrote it; 0.2\'s "key" resumes, both is a TypeError', async () => {
  const p = await policy(`${CONFIG}[conversation.tools.mv]\nconcurrency = [{ key = "fs:{src}" }, { key = "fs:{dst}" }]\n`);
  const clock = new VirtualClock();
  let last;
  const driver = new Driver(new Scheduler(p), { clock, persist: (text) => void (last = text) });
  const live = driver.run([{ id: 'm', tool: 'mv', args: { src: 'a', dst: 'b' } }, { id: 'w', tool: 'write', args: { path: 'c' } }, { id: 'r', tool: 'read' }], () => new Promise(() => {}));
  live.catch(() => {});
  await clock.runUntil(10);
  const started = '"entries":[{"operation":0,"state":"started"}]';
  assert.ok(last.includes(`"calls":[{"id":"m","tool":"mv","keys":["fs:a","fs:b"],${started}},{"id":"w","tool":"write","key":"fs:c",${started}},{"id":"r","tool":"read",${started}}]`), last);
  driver.dispose();

  /** Each live entry's keys once `text` is resumed. */
  const keysAfter = (text) => {
    const resumed = Driver.resume(p, text, { execute: () => new Promise(() => {}), started: 'run-again', clock: new VirtualClock() });
    for (const b of resumed.batches) b.catch(() => {});
    const keys = resumed.driver.inspect().flatMap((b) => b.entries.map((e) => [e.label, e.keys]));
    resumed.driver.dispose();
    return keys;
  };
  assert.deepEqual(keysAfter(last), [['m', ['fs:a', 'fs:b']], ['w', ['fs:c']], ['r', ['read']]]);
  // What 0.2 wrote: "key" (here another file's), and no keys at all for a call of a template
  // whose arguments made none (it takes the template's own key).
  const snap = JSON.parse(last);
  const calls = snap.state.batches[0].calls;
  calls[1].key = 'fs:z';
  assert.deepEqual(keysAfter(JSON.stringify(snap)), [['m', ['fs:a', 'fs:b']], ['w', ['fs:z']], ['r', ['read']]]);
  delete calls[1].key;
  assert.deepEqual(keysAfter(JSON.stringify(snap)), [['m', ['fs:a', 'fs:b']], ['w', ['fs:{path}']], ['r', ['read']]]);
  // Both, or keys that are not a list of strings: a TypeError naming the call; nothing resumes.
  const bad = (change, field) => {
    const copy = structuredClone(snap);
    change(copy.state.batches[0].calls);
    assert.throws(() => Driver.resume(p, JSON.stringify(copy), { execute: async () => 1 }), (e) => e instanceof TypeError && e.message.includes(field), field);
  };
  bad((c) => (c[1].key = 'fs:c') && (c[1].keys = ['fs:c']), 'snapshot.state.batches[0].calls[1] has both keys and key');
  bad((c) => (c[0].key = 'fs:a'), 'snapshot.state.batches[0].calls[0] has both keys and key');
  bad((c) => (c[0].keys = 'fs:a'), 'snapshot.state.batches[0].calls[0].keys');
  bad((c) => (c[0].keys = ['fs:a', null]), 'snapshot.state.batches[0].calls[0].keys[1]');
  bad((c) => (c[1].key = ['fs:c']), 'snapshot.state.batches[0].calls[1].key');
});

test('every Python fixture (py-*.json) resumes here: its ended values and retired outcomes come back', async () => {
  const files = existsSync(SNAPSHOTS) ? readdirSync(SNAPSHOTS).filter((f) => /^py-.*\.json$/.test(f)) : [];
  for (const file of files) {
    const text = readFileSync(`${SNAPSHOTS}${file}`, 'utf8');
    // Its policy: a sibling `py-NAME.toml` when there is one, else this file's CONFIG.
    const toml = `${SNAPSHOTS}${file.replace(/\.json$/, '.toml')}`;
    const p = await policy(existsSync(toml) ? readFileSync(toml, 'utf8') : CONFIG);
    const saved = JSON.parse(text);
    const clock = new VirtualClock();
    const resumed = Driver.resume(p, text, { execute: () => new Promise(() => {}), started: 'interrupt', clock });
    assert.equal(resumed.batches.length, saved.retired.length + saved.state.batches.length, file);
    const retired = await Promise.all(resumed.batches.slice(0, saved.retired.length));
    retired.forEach((outcomes, i) => assert.deepEqual(outcomes.map((c) => c.entries.map((e) => e.label)), saved.retired[i].outcomes.map((c) => c.entries.map((e) => e.label)), file));
    resumed.driver.dispose();
  }
});

test('without persist too, onOutcome runs only once the end reached the scheduler (the batch\'s state says ended)', async () => {
  const clock = new VirtualClock();
  const driver = new Driver(new Scheduler(await policy()), { clock });
  const seen = [];
  const run = driver.run([{ id: 'r1', tool: 'read' }, { id: 'r2', tool: 'read' }], (x) => (x.label === 'r1' ? Promise.resolve('one') : clock.sleep(10).then(() => 'two')), {
    onOutcome: (o) => {
      // The scheduler already holds the end: an export taken here (a host saving its state in
      // the hook) says ended, never started.
      const saved = driver.scheduler.unfinished().batches[0];
      const entry = saved?.calls.find((c) => c.id === o.label)?.entries[0];
      seen.push(`${o.label} ${entry === undefined ? 'retired' : entry.state.kind}`);
    },
  });
  await clock.runAll();
  await run;
  assert.deepEqual(seen, ['r1 ended', 'r2 retired']);
  driver.dispose();
});

test('values come back the same after a restart, and what JSON cannot carry fails at its end', async () => {
  // DRIVERS.md, "Persistence": nothing returned comes back undefined (not the string
  // "undefined"); a value JSON cannot carry (a Map, NaN, a bigint, a class instance, a cycle)
  // fails at its end with a TypeError naming the label and what it returned, live and after a
  // restart alike (scenario 68 runs the same in both packages; the Python test of the same name
  // holds floats, tuples and sets to it).
  const clock = new VirtualClock();
  const texts = [];
  const driver = new Driver(new Scheduler(await policy('[conversation.tools.read]\n')), { clock, persist: (t) => texts.push(t) });
  const cycle = [];
  cycle.push(cycle);
  const values = { f: 1.5, u: undefined, o: { a: 1, b: undefined }, m: new Map(), n: NaN, b: 10n, d: new Date(0), c: cycle };
  const live = new Map();
  const calls = [...Object.keys(values), 'w'].map((id) => ({ id, tool: 'read' }));
  void driver.run(calls, (x) => (x.label === 'w' ? new Promise(() => {}) : Promise.resolve(values[x.label])), { onOutcome: (o) => live.set(o.label, o) }).catch(() => {});
  await quiet();
  assert.equal(live.get('f').value, 1.5);
  assert.equal(live.get('u').status, 'ok');
  assert.equal(live.get('u').value, undefined);
  for (const [label, what] of [['m', 'a Map'], ['n', 'the number NaN'], ['b', 'a bigint'], ['d', 'a Date'], ['c', 'a cycle']]) {
    const o = live.get(label);
    assert.equal(o.status, 'failed', label);
    assert.ok(o.error instanceof TypeError && o.error.message.startsWith(`${label} returned ${what}, which the snapshot cannot hold as JSON`), o.error.message);
  }
  const resumed = Driver.resume(await policy('[conversation.tools.read]\n'), texts.at(-1), { execute: async () => 'again', started: 'interrupt', clock });
  const [outcomes] = await Promise.all(resumed.batches);
  const after = Object.fromEntries(outcomes.map((c) => [c.id, c.entries[0]]));
  assert.equal(after.f.value, 1.5);
  assert.equal(after.u.status, 'ok');
  assert.equal(after.u.value, undefined);
  assert.deepEqual(after.o.value, { a: 1 });
  for (const label of ['m', 'n', 'b', 'd', 'c']) {
    assert.equal(after[label].status, 'failed', label);
    assert.ok(after[label].error instanceof RestoredError && after[label].error.name === 'TypeError', label);
  }
  resumed.driver.dispose();
  driver.dispose();
});

test('Driver.resume takes the options Python takes: no executionTimeoutMs or abortGraceMs (the saved limits hold), and a deadline names its limit', async () => {
  // The Python test of the same name: resume(execution_timeout=) is a TypeError there, and a
  // restored batch's deadline says "w1 ran past execution_timeout (0.1 s)".
  const clock = new VirtualClock();
  const texts = [];
  const p = await policy('[conversation.tools.write]\n');
  const driver = new Driver(new Scheduler(p), { clock, persist: (t) => texts.push(t) });
  void driver.run([{ id: 'w1', tool: 'write' }], () => new Promise(() => {}), { executionTimeoutMs: 100 }).catch(() => {});
  await quiet();
  const text = texts.at(-1);
  driver.dispose();
  for (const field of ['executionTimeoutMs', 'abortGraceMs']) {
    assert.throws(() => Driver.resume(p, text, { execute: async () => 1, started: 'run-again', clock, [field]: 5 }), (e) => e instanceof TypeError && e.message.includes(`unknown field "${field}"`), field);
  }
  const execute = (x) => new Promise((_, reject) => x.signal.addEventListener('abort', () => reject(x.signal.reason)));
  const resumed = Driver.resume(p, text, { execute, started: 'run-again', clock });
  await clock.runAll();
  const [outcomes] = await Promise.all(resumed.batches);
  const o = outcomes[0].entries[0];
  assert.equal(o.status, 'failed');
  assert.equal(o.error.name, 'TimeoutError');
  assert.equal(o.error.message, 'w1 ran past executionTimeoutMs (100 ms)');
  resumed.driver.dispose();
});
