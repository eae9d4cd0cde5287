// The scenario corpus (tests/scenarios/*.toml, format in tests/scenarios/README.md): every file
// is one test, run by the Driver on a virtual clock with an in-memory `persist`, and must print
// exactly its `expect` lines. Nothing sleeps: timers wait in the clock's heap and time moves to
// the next one only when nothing else can run. `restart` drops the driver without disposing it
// (everything its executions and timers still do is ignored) and resumes the last persisted
// snapshot with `Driver.resume`. On a mismatch the test prints both lists, line by line.
//
// Shared keys run over one `MemoryStore` on the same virtual clock (its own time base 24 h
// ahead, which must not matter). `processes = ["a", "b"]` runs a driver (and a `SharedKeys`)
// per process over that one store; a process that crashes (`restart`, `kill`) stops for good:
// its timers never fire, its store calls never arrive and their answers never come back, so
// the store keeps its tickets until their leases end.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'smol-toml';
import { Driver, RateLimitedError, Scheduler, Turnstile } from '../dist/index.js';
import { MemoryStore, SharedKeys } from '../dist/shared/index.js';
import { VirtualClock } from './fixtures/virtual-clock.mjs';

const DIR = new URL('../../../tests/scenarios/', import.meta.url).pathname;
const FILES = readdirSync(DIR).filter((f) => f.endsWith('.toml')).sort();

const KNOWN = new Set(['about', 'config', 'started', 'processes', 'lease_ms', 'persist_ms', 'batch', 'script', 'at', 'expect']);
const BATCH_KNOWN = new Set(['at', 'process', 'calls', 'operations', 'execution_ms', 'abort_grace_ms', 'decide', 'cancel_at', 'forget']);
/** The store's time base: 24 h ahead of the virtual clock (its offset must not matter). */
const STORE_START_MS = 86_400_000;
/** A run ends by this virtual time (10,000 s); one still due past it fails (both runners). */
export const CAP_MS = 10_000_000;

/** The runner's own error: `fail 'message'`, `throw-sync`, a `decide` that raises. */
class ScenarioError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ScenarioError';
  }
}

/** An error as a line writes it: a ScenarioError's message quoted, else its name. */
const errorText = (e) => (e?.name === 'ScenarioError' ? JSON.stringify(String(e.message)) : String(e?.name ?? typeof e));

/** One outcome as an expected line's text (after `outcome LABEL`). */
function outcomeText(o) {
  switch (o.status) {
    case 'ok':
      return `ok ${JSON.stringify(o.value ?? null)}`;
    case 'failed':
      return `failed ${errorText(o.error)}`;
    case 'cancelled':
      return 'cancelled';
    default:
      return `settled ${o.reason.kind} ${JSON.stringify(o.message)}`;
  }
}

/** Splits lines into parts at `restart`, and sorts each part by time, then as text within one
 * time (what happens in one instant has no order a host can rely on). */
export function normalize(lines) {
  const parts = [[]];
  for (const line of lines) {
    const text = line.trim();
    if (!text) continue;
    if (/^\d+ restart( \S+)?$/.test(text)) parts.push([text], []);
    else parts[parts.length - 1].push(text);
  }
  const out = [];
  for (const part of parts) {
    part.sort((a, b) => {
      const ta = Number(a.split(' ', 1)[0]);
      const tb = Number(b.split(' ', 1)[0]);
      return ta - tb || (a < b ? -1 : a > b ? 1 : 0);
    });
    out.push(...part);
  }
  return out;
}

/** Both lists side by side, marking where they differ. */
function diff(expected, actual) {
  const n = Math.max(expected.length, actual.length);
  const rows = [];
  for (let i = 0; i < n; i++) {
    const e = expected[i] ?? '';
    const a = actual[i] ?? '';
    rows.push(`${e === a ? '  ' : '!!'} ${e.padEnd(60)} | ${a}`);
  }
  return `expected (left) and got (right):\n${rows.join('\n')}`;
}

/** A TOML literal as a script writes it (`'text'`, `3`, `true`). */
const literal = (text) => parse(`v = ${text}`).v;

function checkKeys(value, known, where) {
  for (const key of Object.keys(value)) if (!known.has(key)) throw new Error(`${where}: unknown field ${JSON.stringify(key)}`);
}

/** A process's view of the shared store: once the process crashed (`me.crashed`), its calls
 * never reach the store, answers never come back, and its watches hear nothing (SIGKILL). */
function mortalStore(store, me) {
  const never = new Promise(() => {});
  const call = (name) => (...args) => {
    if (me.crashed) return never;
    return store[name](...args).then((v) => (me.crashed ? never : v), (e) => (me.crashed ? never : Promise.reject(e)));
  };
  return {
    kind: store.kind,
    request: call('request'), renew: call('renew'), release: call('release'), abandon: call('abandon'), pause: call('pause'), inspect: call('inspect'),
    watch: (key, tickets, wake) => store.watch(key, () => (me.crashed ? [] : tickets()), (w) => me.crashed || wake(w)),
    close: () => Promise.resolve(),
  };
}

export async function runScenario(file) {
  const spec = parse(readFileSync(join(DIR, file), 'utf8'));
  checkKeys(spec, KNOWN, file);
  const t = await Turnstile.load();
  const policy = t.resolve([{ name: file, text: spec.config ?? '' }]);
  const shared = policy.tools().some((tool) => tool.concurrency.some((c) => c.shared));
  const clock = new VirtualClock(0);
  const lines = [];
  const batches = spec.batch ?? [];
  const scripts = spec.script ?? {};
  batches.forEach((b, i) => checkKeys(b, BATCH_KNOWN, `${file}: batch ${i}`));
  // The processes by name; one unnamed process unless `processes` names them (the first is the
  // default of a batch's or an action's `process`).
  const names = spec.processes ?? [''];
  if (!Array.isArray(names) || names.length === 0 || new Set(names).size !== names.length) throw new Error(`${file}: processes must be distinct names`);
  const processOf = (what, name) => {
    if (name === undefined) return names[0];
    if (!names.includes(name)) throw new Error(`${file}: ${what}: process ${JSON.stringify(name)} is not in processes`);
    return name;
  };
  const store = shared ? await MemoryStore.open({ clock, startMs: STORE_START_MS }) : undefined;

  // One process: its current life, its last persisted snapshot, whether persist fails, and the
  // batch numbers of its driver (batch number -> index).
  const procs = new Map(names.map((name) => [name, { name, life: undefined, lives: 0, snapshot: undefined, failPersist: false, numbers: new Map() }]));

  // One life of a process: its driver, its clock (dead once restarted: its timers never
  // fire), and everything its executions report (ignored once dead).
  const newLife = (proc) => {
    // `alive`: its lines count; `crashed`: it died (restart, kill) and does nothing more.
    const me = { alive: true, crashed: false, resumeAt: new Map() };
    proc.lives += 1;
    me.clock = { now: () => clock.now(), setTimer: (at, fire) => clock.setTimer(at, () => me.alive && fire()) };
    me.log = (text) => {
      if (me.alive) lines.push(`${clock.now()} ${text}`);
    };
    me.persist = (text) => {
      if (proc.failPersist) throw new ScenarioError('disk full');
      if (spec.persist_ms === undefined) {
        if (me.alive) proc.snapshot = text;
        return undefined;
      }
      // A slow disk: the snapshot is saved when the write ends (a crash before loses it).
      return me.sleep(spec.persist_ms).then(() => {
        if (me.alive) proc.snapshot = text;
      });
    };
    me.sleep = (ms, signal) =>
      new Promise((resolve, reject) => {
        if (signal?.aborted) return reject(signal.reason);
        const onAbort = () => {
          timer.cancel();
          reject(signal.reason);
        };
        const timer = me.clock.setTimer(clock.now() + ms, () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        });
        signal?.addEventListener('abort', onAbort, { once: true });
      });
    me.keys = shared
      ? new SharedKeys(mortalStore(store, me), { clock: me.clock, owner: `${proc.name || 'p'}${proc.lives}`, ...(spec.lease_ms !== undefined ? { leaseMs: spec.lease_ms } : {}) })
      : undefined;
    me.execute = (x) => {
      me.log(`start ${x.label}`);
      x.signal.addEventListener('abort', () => me.log(`abort ${x.label}`), { once: true });
      const steps = scripts[x.label] ?? [];
      if (steps[0] === 'throw-sync') throw new ScenarioError('sync');
      return runSteps(me, x, steps);
    };
    me.decide = (label) => {
      for (const b of batches) if (b.decide?.[label] !== undefined) return decision(me, b.decide[label]);
      return 'approve';
    };
    me.onOutcome = (o) => me.log(`outcome ${o.label} ${outcomeText(o)}`);
    me.options = () => ({ clock: me.clock, persist: me.persist, ...(me.keys ? { sharedKeys: me.keys } : {}) });
    proc.life = me;
    return me;
  };

  async function runSteps(me, x, steps) {
    // After a rate limit a label runs again from the step after it (per life: a restart runs
    // the script from its first step).
    const from = me.resumeAt.get(x.label) ?? 0;
    for (let at = from; at < steps.length; at++) {
      const step = steps[at];
      const [word, ...rest] = step.split(' ');
      const arg = rest.join(' ');
      switch (word) {
        case 'sleep':
          if (rest[1] === 'ignore-abort') await me.sleep(Number(rest[0]));
          else await me.sleep(Number(rest[0]), x.signal);
          break;
        case 'hang':
          await new Promise(() => {});
          break;
        case 'ask':
          await x.question(() => me.sleep(Number(arg), x.signal));
          break;
        case 'ask-twice':
          await Promise.all([x.question(() => me.sleep(Number(arg), x.signal)), x.question(() => me.sleep(Number(arg), x.signal))]);
          break;
        case 'ok':
          return literal(arg);
        case 'ok-nothing':
          return undefined;
        case 'ok-not-json':
          return new Map([['k', 1]]);
        case 'fail':
          throw new ScenarioError(literal(arg));
        case 'rate-limited':
          me.resumeAt.set(x.label, at + 1);
          throw RateLimitedError.fromHeader(literal(arg));
        default:
          throw new Error(`unknown script step ${JSON.stringify(step)}`);
      }
    }
    return `v:${x.label}`;
  }

  function decision(me, d) {
    if (d === 'raise') throw new ScenarioError('decide raised');
    // A string, or a value no decision is (a number): given back as it is.
    if (typeof d !== 'object') return d;
    return me.sleep(d.after).then(() => {
      if (d.then === 'raise') throw new ScenarioError('decide raised');
      return d.then;
    });
  }

  // Batch index -> its AbortController.
  const controllers = new Map();
  // A restored batch has no signal of its own (`restored`): it prints `resolved` or `rejected`
  // even when its batch was cancelled before the crash.
  const watch = (me, index, promise, forget, restored = false) => {
    const signal = restored ? undefined : controllers.get(index)?.signal;
    promise.then(
      (outcomes) => {
        if (!me.alive) return;
        me.log(`batch ${index} ${signal?.aborted ? 'cancelled' : 'resolved'}`);
        if (forget) me.driver.forget(outcomes);
      },
      (error) => me.log(`batch ${index} ${signal?.aborted && error === signal.reason ? 'cancelled' : `rejected ${error?.name ?? typeof error}`}`),
    );
  };

  for (const proc of procs.values()) newLife(proc).driver = new Driver(new Scheduler(policy), proc.life.options());

  const submit = (index) => {
    const b = batches[index];
    const proc = procs.get(processOf(`batch ${index}`, b.process));
    const me = proc.life;
    if (!me.alive) return; // a killed process submits nothing
    const controller = new AbortController();
    controllers.set(index, controller);
    const calls = b.calls.map((c) => {
      const call = { id: c.id, tool: c.tool };
      if (c.arguments !== undefined) call.args = c.arguments;
      if (b.operations?.[c.id] !== undefined) call.operations = b.operations[c.id];
      return call;
    });
    const options = { signal: controller.signal, onOutcome: me.onOutcome };
    if (b.decide) options.decide = me.decide;
    if (b.execution_ms !== undefined) options.executionTimeoutMs = b.execution_ms;
    if (b.abort_grace_ms !== undefined) options.abortGraceMs = b.abort_grace_ms;
    const before = me.driver.inspect().length;
    const promise = me.driver.run(calls, me.execute, options);
    const live = me.driver.inspect();
    if (live.length > before) proc.numbers.set(live[live.length - 1].batch, index);
    watch(me, index, promise, b.forget ?? true);
  };

  const crash = (me) => {
    me.alive = false;
    me.crashed = true;
  };

  /** `restart`: the process crashes and comes back from its last persisted snapshot. */
  const restart = (proc) => {
    crash(proc.life);
    lines.push(`${clock.now()} restart${proc.name ? ` ${proc.name}` : ''}`);
    const me = newLife(proc);
    if (proc.snapshot === undefined) {
      me.driver = new Driver(new Scheduler(policy), me.options());
      return;
    }
    const saved = JSON.parse(proc.snapshot);
    const order = [...saved.retired.map((r) => BigInt(r.batch)), ...saved.state.batches.map((b) => BigInt(b.batch))];
    const resumed = Driver.resume(policy, proc.snapshot, {
      execute: me.execute,
      started: spec.started ?? 'interrupt',
      decide: me.decide,
      onOutcome: me.onOutcome,
      ...me.options(),
    });
    me.driver = resumed.driver;
    resumed.batches.forEach((promise, i) => {
      const index = proc.numbers.get(order[i]);
      watch(me, index, promise, batches[index]?.forget ?? true, true);
    });
  };

  /** `kill`: the process crashes for good (its tickets stay at the store until their leases
   * end). */
  const kill = (proc) => {
    crash(proc.life);
    lines.push(`${clock.now()} kill ${proc.name}`);
  };

  const actions = {
    restart,
    kill,
    dispose: (proc) => proc.life.driver.dispose(),
    'fail-persist': (proc) => {
      proc.failPersist = true;
    },
    cancel: (_proc, i) => controllers.get(Number(i))?.abort(),
    pause: (proc, key, ms) => settleOf(proc, `pause ${key}`, () => proc.life.driver.pause(key, Number(ms))),
    'lift-pause': (proc, key) => settleOf(proc, `lift-pause ${key}`, () => proc.life.driver.liftPause(key)),
    // The host steps the driver's scheduler itself (what the contract forbids: one stepper),
    // with a `now` MS ahead of the clock: the driver's next `now` is below it.
    'step-ahead': (proc, ms) => {
      proc.life.driver.scheduler.step({ now: clock.now() + Number(ms) });
    },
  };

  /** A host call that returns a promise: `threw` when it throws at the call, `rejected` when its
   * promise rejects (both with the error's name). */
  const settleOf = (proc, what, call) => {
    let promise;
    try {
      promise = call();
    } catch (e) {
      proc.life.log(`${what} threw ${e?.name}`);
      return;
    }
    promise.catch((e) => proc.life.log(`${what} rejected ${e?.name}`));
  };

  // The host's doings by time: at each time, first everything else due then happens, then the
  // batches are submitted (file order), then the cancellations and actions (file order).
  const host = [];
  batches.forEach((b, i) => host.push({ t: b.at ?? 0, rank: 0, seq: host.length, act: () => submit(i) }));
  batches.forEach((b, i) => {
    if (b.cancel_at !== undefined) host.push({ t: b.cancel_at, rank: 1, seq: host.length, act: () => controllers.get(i)?.abort() });
  });
  for (const [i, a] of (spec.at ?? []).entries()) {
    checkKeys(a, new Set(['t', 'do', 'process']), `${file}: at ${i} (a key after [[at]] belongs to it: put expect before the tables)`);
    const [word, ...args] = a.do.split(' ');
    if (!actions[word]) throw new Error(`${file}: unknown action ${JSON.stringify(a.do)}`);
    const proc = procs.get(processOf(`at ${i}`, a.process));
    host.push({ t: a.t, rank: 1, seq: host.length, act: () => proc.life.alive && actions[word](proc, ...args) });
  }
  host.sort((a, b) => a.t - b.t || a.rank - b.rank || a.seq - b.seq);
  for (const h of host) {
    await clock.runUntil(h.t);
    h.act();
    await clock.runUntil(h.t);
  }
  await clock.runUntil(CAP_MS);
  const late = clock.next();
  if (late !== undefined) throw new Error(`${file}: still running at ${CAP_MS} ms (a timer is due at ${late} ms): a scenario must end by then`);
  for (const proc of procs.values()) {
    proc.life.alive = false; // what closing the keys makes the driver report is not a line
    if (!proc.life.crashed) await proc.life.keys?.close();
  }
  await store?.close();

  const expected = normalize((spec.expect ?? '').split('\n'));
  const actual = normalize(lines);
  assert.deepEqual(actual, expected, `${file}: ${spec.about ?? ''}\n${diff(expected, actual)}`);
}

// A scenario that cannot end (a timer re-armed at one instant forever) fails instead of hanging.
for (const file of FILES) test(file, { timeout: 60_000 }, () => runScenario(file));

// The runners' own rule (README, "Time"): a run still due past the cap fails, with the same
// sentence as the Python runner's, instead of stopping quietly or running on.
test('runner: a scenario still running at the cap fails', () =>
  assert.rejects(runScenario('runner/runs-past-the-cap.toml'), {
    message: 'runner/runs-past-the-cap.toml: still running at 10000000 ms (a timer is due at 10000001 ms): a scenario must end by then',
  }));
