// The gate: for frameworks that run tools themselves (the Vercel AI SDK, an MCP client, a
// hand-written `Promise.all`) and give no batch boundary. Each tool invocation calls
// `gate.call(tool, callId, args, run)`; the gate rebuilds the batch from calls that arrive
// together and runs it on a `Driver`, and each call's promise settles when its own entry ends.
//
// What "together" means, exactly. The first call that finds no open batch opens one and
// schedules its close as a macrotask: `setImmediate` where it exists (Node, Bun, Deno), else
// `setTimeout(0)`. Every call made before that task runs joins the batch in arrival order: calls
// made synchronously one after another, and calls made from promise reactions (microtasks) the
// current task queued, however deep their `await` chains, since the event loop drains every
// microtask before it runs the next task. A call that arrives after I/O or a timer (a macrotask)
// opens the next batch. Later batches queue behind earlier ones per key, so a batch boundary in
// the wrong place never breaks a limit or the order per key; it only means that entries of the
// later batch are not decided together with the earlier ones. Arrival order is taken as written
// order: the framework must call its tools in the order the model wrote them (the adapters test
// that their framework does).
//
// Each call's promise:
// - resolves with what `run` returned, or rejects with what it threw, when its entry ends
//   (not when the batch ends); a `run` that throws fails only its own call;
// - rejects with `CallSettledError` (the `Reason`, and as `message` the text the model should
//   read, the component's `explain` sentence) when the scheduler or `decide` settled it without
//   running it;
// - rejects with its signal's reason as soon as its `signal` aborts: a call still queued then
//   never runs (when its turn comes it ends at once, so it holds no key), a running one has the
//   signal given to `run` aborted and keeps its key's slot until `run` ends, or until
//   `abortGraceMs` more passed when that option is set;
// - rejects with the batch's error when the whole batch failed (`SubmitError`, a failed
//   `decide`, a disposed driver).
// `gate.cancel()` cancels every live batch and every call not yet submitted.
//
// A known batch. A framework that sees the model's response before it starts any of its calls
// (a LangChain `afterModel` hook) submits the response with `gate.expect(calls)`: ONE batch now,
// in the order given, decided as a whole before any of it starts. Each call then goes through
// `gate.call(tool, callId, args, run)` as usual, which takes its place in that batch instead of
// arriving (in any turn, in any order). A call released before its `gate.call` came keeps its
// slot until it comes, so a call the framework will not run must be given up with
// `gate.withdraw(callId)`; `gate.expected()` lists the ones not claimed yet.
import { Driver, type Decision, type DriverOptions, type EntryOutcome } from './driver.js';
import { CallSettledError, SubmitError } from './errors.js';
import { SharedStoreError } from './shared/contract.js';
import { Scheduler } from './scheduler.js';
import { Policy } from './turnstile.js';
import { fail, func, millis, record, signal as checkSignal, string } from './validate.js';

/** What `run` gets: the call's arguments and a signal that aborts when the call is cancelled
 * (its own signal, the batch's cancellation, `executionTimeoutMs`). */
export type GateRun<A, R> = (args: A, signal: AbortSignal) => Promise<R>;

/** A call as the gate submits it (what `decide` sees). `id` is the call id, or `ID@N` when an
 * earlier call with that id has settled but its batch is still live. `args` are the arguments
 * given to `gate.call`: for a tool whose key is a template they make the call's key (see
 * `CallInput`; odd values take the template's own key, never an error). */
export interface GateCallInput {
  id: string;
  tool: string;
  args: unknown;
}

export interface GateOptions {
  /** Decides each call of a batch in arrival order (default: approve all); may be async. */
  decide?: (label: string, call: GateCallInput) => Decision | Promise<Decision>;
  /** Aborts a running call's signal (a `TimeoutError`) once it has run this long. */
  executionTimeoutMs?: number;
  /** Once a running call's signal aborted, how long `run` may still take before its slot is
   * freed anyway (its result is then ignored). Default: it keeps its slot until it ends. */
  abortGraceMs?: number;
  /** The store client for the policy's shared keys, when the gate makes its driver (a `Policy`
   * target, or a `Scheduler` that has no driver yet); see `DriverOptions.sharedKeys`. */
  sharedKeys?: DriverOptions['sharedKeys'];
  /** The clock, when the gate makes its driver (see `DriverOptions.clock`); the gate's own
   * `abortGraceMs` wait runs on its driver's clock. */
  clock?: DriverOptions['clock'];
  /** Told every wait, start, end and settlement, when the gate makes its driver (see
   * `DriverOptions.onEvent`; `otelEvents()` from `@turnstile/scheduler/otel` records them as
   * OpenTelemetry spans and metrics). */
  onEvent?: DriverOptions['onEvent'];
}

export interface GateCallOptions {
  /** Aborting cancels this call only (see the module doc). */
  signal?: AbortSignal;
}

/** One call, from `gate.call` to its end. */
class Pending {
  readonly id: string;
  readonly tool: string;
  readonly args: unknown;
  run: GateRun<unknown, unknown> | undefined;
  signal: AbortSignal | undefined;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
  done = false;
  /** Set when its own signal aborted. */
  aborted = false;
  detach: () => void = () => {};
  onSettle: () => void = () => {};
  /** An `expect`ed call released before its `gate.call` came: starts it (`claim`) or ends its
   * execution without running (`withdraw`, its batch cancelled). */
  waiting: { start: () => void; end: (error: unknown) => void } | undefined;
  /** The promise `gate.call` returns, for an `expect`ed call. */
  promise: Promise<unknown> | undefined;

  constructor(id: string, tool: string, args: unknown, run: GateRun<unknown, unknown> | undefined, signal: AbortSignal | undefined, resolve: (value: unknown) => void, reject: (error: unknown) => void) {
    this.id = id;
    this.tool = tool;
    this.args = args;
    this.run = run;
    this.signal = signal;
    this.resolve = resolve;
    this.reject = reject;
  }

  settle(ok: boolean, value: unknown): void {
    if (this.done) return;
    this.done = true;
    this.detach();
    this.onSettle();
    if (ok) this.resolve(value);
    else this.reject(value);
  }
}

/** What the driver carries per call. */
interface Submitted extends GateCallInput {
  readonly pending: Pending;
}

const nextTask: (f: () => void) => void =
  typeof setImmediate === 'function' ? (f) => void setImmediate(f) : (f) => void setTimeout(f, 0);
const encoder = new TextEncoder();

/** Batches calls that arrive together (see the module doc) and runs them on a driver. */
export class Gate {
  readonly driver: Driver;
  readonly #options: GateOptions;
  /** Calls of the open batch, in arrival order. */
  #open: Pending[] = [];
  /** Ids of calls not yet settled: a second call with one of them is refused. */
  readonly #ids = new Set<string>();
  /** Ids submitted in live batches: the scheduler frees an id when its batch retires, which may
   * be after the call settled, so a call reusing it then is submitted as `ID@N`. */
  readonly #held = new Set<string>();
  /** Cancels each live batch. */
  readonly #batches = new Set<AbortController>();
  /** Calls of `expect`ed batches whose `gate.call` has not come yet, by call id. */
  readonly #expected = new Map<string, Pending>();

  /** A gate over a driver, a scheduler (its driver, `Driver.of`) or a policy (a new scheduler:
   * one gate per conversation). */
  constructor(target: Driver | Scheduler | Policy, options: GateOptions = {}) {
    const o = record(options, 'options', ['decide', 'executionTimeoutMs', 'abortGraceMs', 'sharedKeys', 'clock', 'onEvent']);
    // Checked before a driver is made, so a wrong option leaves no scheduler behind.
    if (o.decide !== undefined) func(o.decide, 'options.decide');
    if (o.executionTimeoutMs !== undefined) millis(o.executionTimeoutMs, 'options.executionTimeoutMs');
    if (o.abortGraceMs !== undefined) millis(o.abortGraceMs, 'options.abortGraceMs');
    const driverOptions: DriverOptions = {};
    if (o.sharedKeys !== undefined) driverOptions.sharedKeys = o.sharedKeys as DriverOptions['sharedKeys'];
    if (o.clock !== undefined) driverOptions.clock = o.clock as DriverOptions['clock'];
    if (o.onEvent !== undefined) driverOptions.onEvent = o.onEvent as DriverOptions['onEvent'];
    if (target instanceof Driver) this.driver = target;
    else if (target instanceof Scheduler) this.driver = Driver.of(target, driverOptions);
    else if (target instanceof Policy) {
      const scheduler = new Scheduler(target);
      try {
        this.driver = new Driver(scheduler, driverOptions);
      } catch (error) {
        scheduler.dispose();
        throw error;
      }
    } else fail('target', 'a Driver, Scheduler or Policy', target);
    this.#options = o as GateOptions;
  }

  /** Runs `run(args, signal)` when the scheduler releases call `callId` of `tool`; resolves or
   * rejects when that call ends (see the module doc). `args` also make the call's key when the
   * tool's key is a template (`"fs:{path}"`): any value is accepted. */
  call<A, R>(tool: string, callId: string, args: A, run: GateRun<A, R>, options: GateCallOptions = {}): Promise<R> {
    let signal: AbortSignal | undefined;
    try {
      string(tool, 'tool');
      string(callId, 'callId');
      func(run, 'run');
      signal = checkSignal(record(options, 'options', ['signal']).signal, 'options.signal');
      checkName(tool, 'tool');
      checkName(callId, 'callId');
      if (callId.includes('#')) throw new SubmitError('invalid-id', `call id ${JSON.stringify(callId)} contains '#'`);
    } catch (error) {
      return Promise.reject(error);
    }
    const expected = this.#expected.get(callId);
    if (expected !== undefined) {
      this.#expected.delete(callId);
      if (expected.tool === tool) return this.#claim(expected, run as GateRun<unknown, unknown>, signal) as Promise<R>;
      this.#withdraw(expected); // another tool's call under that id: a call of its own
    }
    if (this.#ids.has(callId)) return Promise.reject(new SubmitError('duplicate-id', `call id ${JSON.stringify(callId)} is used by a call that has not settled`));
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<R>((resolve, reject) => {
      const pending = new Pending(callId, tool, args, run as GateRun<unknown, unknown>, signal, resolve as (value: unknown) => void, reject);
      pending.onSettle = () => this.#ids.delete(callId);
      if (signal) {
        const onAbort = () => {
          pending.aborted = true;
          pending.settle(false, signal!.reason);
        };
        signal.addEventListener('abort', onAbort, { once: true });
        pending.detach = () => signal!.removeEventListener('abort', onAbort);
      }
      this.#ids.add(callId);
      if (this.#open.length === 0) nextTask(() => this.#close());
      this.#open.push(pending);
    });
  }

  /** Submits `calls` (in written order) as ONE batch now, for a framework that sees a model
   * response before it starts any of its calls: `decide` is asked about every call of it, and
   * none starts before every one is decided. Each call then runs through `gate.call(tool, id,
   * args, run)`, which takes its place in this batch (in any turn, in any order) and settles as
   * any call does. A call released before its `gate.call` came keeps its slot (and its
   * `executionTimeoutMs` runs) until it comes, so give up a call the framework will not run
   * with `withdraw(id)`. Throws `SubmitError` (and submits nothing) when an id is invalid,
   * repeated, or used by a call that has not settled. */
  expect(calls: readonly GateCallInput[]): void {
    if (!Array.isArray(calls)) fail('calls', 'an array of { id, tool, args }', calls);
    const seen = new Set<string>();
    const checked = calls.map((c, i) => {
      const o = record(c, `calls[${i}]`, ['id', 'tool', 'args']);
      const id = string(o.id, `calls[${i}].id`);
      const tool = string(o.tool, `calls[${i}].tool`);
      checkName(tool, 'tool');
      checkName(id, 'callId');
      if (id.includes('#')) throw new SubmitError('invalid-id', `call id ${JSON.stringify(id)} contains '#'`);
      if (seen.has(id) || this.#ids.has(id)) throw new SubmitError('duplicate-id', `call id ${JSON.stringify(id)} is used by a call that has not settled`);
      seen.add(id);
      return { id, tool, args: o.args };
    });
    if (checked.length === 0) return;
    const pending = checked.map(({ id, tool, args }) => {
      let resolve!: (value: unknown) => void;
      let reject!: (error: unknown) => void;
      const promise = new Promise<unknown>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      promise.catch(() => {}); // answered when claimed; nobody may claim it
      const p = new Pending(id, tool, args, undefined, undefined, resolve, reject);
      p.promise = promise;
      p.onSettle = () => this.#ids.delete(id);
      this.#ids.add(id);
      return p;
    });
    for (const p of pending) {
      const old = this.#expected.get(p.id);
      if (old !== undefined) this.#withdraw(old); // settled, never claimed
      this.#expected.set(p.id, p);
    }
    this.#submit(pending);
  }

  /** Gives up an `expect`ed call whose `gate.call` never came: queued, it ends without running
   * when released (its key moves on); released, it ends now. False when no such call waits. */
  withdraw(callId: string): boolean {
    const p = this.#expected.get(callId);
    if (p === undefined) return false;
    this.#expected.delete(callId);
    this.#withdraw(p);
    return true;
  }

  /** The ids of `expect`ed calls not claimed by `gate.call` nor withdrawn yet. */
  expected(): string[] {
    return [...this.#expected.keys()];
  }

  #withdraw(p: Pending): void {
    const error = new Error(`${p.id} was withdrawn: its call never came`);
    p.settle(false, error);
    p.waiting?.end(error);
  }

  /** `gate.call` for an `expect`ed call: runs `run` when released (now, if it was). */
  #claim(p: Pending, run: GateRun<unknown, unknown>, signal: AbortSignal | undefined): Promise<unknown> {
    p.run = run;
    p.signal = signal;
    if (!p.done && signal) {
      const onAbort = () => {
        p.aborted = true;
        p.settle(false, signal.reason);
        p.waiting?.end(signal.reason);
      };
      if (signal.aborted) onAbort();
      else {
        signal.addEventListener('abort', onAbort, { once: true });
        p.detach = () => signal.removeEventListener('abort', onAbort);
      }
    }
    p.waiting?.start();
    return p.promise!;
  }

  /** Cancels every live batch (parked calls reject with `CallSettledError` `cancelled`, running
   * ones have their signal aborted) and every call not yet submitted. */
  cancel(reason?: unknown): void {
    const instance = this.driver.scheduler.held.instance;
    for (const pending of this.#open) pending.settle(false, new CallSettledError({ kind: 'cancelled' }, pending.id, pending.tool, instance.explainOrKind(pending.id, { tag: 'cancelled' })));
    this.#open = [];
    for (const controller of this.#batches) controller.abort(reason);
  }

  /** Submits the open batch. */
  #close(): void {
    const open = this.#open;
    this.#open = [];
    this.#submit(open.filter((pending) => !pending.done));
  }

  /** Submits `open` as one batch. */
  #submit(open: Pending[]): void {
    const calls: Submitted[] = [];
    for (const pending of open) {
      let id = pending.id;
      for (let n = 2; this.#held.has(id); n++) id = `${pending.id}@${n}`;
      this.#held.add(id);
      calls.push({ id, tool: pending.tool, args: pending.args, pending });
    }
    if (calls.length === 0) return;
    const controller = new AbortController();
    this.#batches.add(controller);
    const { decide, executionTimeoutMs, abortGraceMs } = this.#options;
    const done = this.driver.run(calls, (execution) => this.#execute(execution.call, execution.signal), {
      signal: controller.signal,
      ...(decide && { decide }),
      ...(executionTimeoutMs !== undefined && { executionTimeoutMs }),
      ...(abortGraceMs !== undefined && { abortGraceMs }),
      onOutcome: (outcome, call) => answer(call.pending, outcome),
    });
    const end = (error: unknown, failed: boolean) => {
      this.#batches.delete(controller);
      for (const call of calls) {
        this.#held.delete(call.id);
        // Every entry is answered when a batch resolves; a failed batch answers the rest.
        if (failed) call.pending.settle(false, error);
      }
    };
    done.then(
      (outcomes) => {
        // Every call had its answer through onOutcome: the batch leaves the snapshot (a
        // persisting driver would otherwise keep and give back every past gate batch).
        this.driver.forget(outcomes);
        end(undefined, false);
      },
      (error) => end(error, true),
    );
  }

  /** Runs one released call. */
  #execute(call: Submitted, batchSignal: AbortSignal): Promise<unknown> {
    const pending = call.pending;
    // Cancelled by its own signal while queued: it ends at once and holds no slot.
    if (pending.done) return Promise.reject(new Error(`${pending.id} was cancelled before it started`));
    if (pending.run === undefined) {
      // Released before its `gate.call` came: it keeps its slot until the call comes, is
      // withdrawn, or its batch is cancelled.
      return new Promise((resolve, reject) => {
        const onAbort = () => {
          // Stopped before its call came: past `executionTimeoutMs`, the timeout; its batch
          // cancelled, it ends without running, as a queued call would.
          pending.waiting = undefined;
          const reason = batchSignal.reason;
          if (reason instanceof DOMException && reason.name === 'TimeoutError') return reject(reason);
          const instance = this.driver.scheduler.held.instance;
          reject(new CallSettledError({ kind: 'cancelled' }, pending.id, pending.tool, instance.explainOrKind(pending.id, { tag: 'cancelled' })));
        };
        if (batchSignal.aborted) return onAbort();
        batchSignal.addEventListener('abort', onAbort, { once: true });
        pending.waiting = {
          start: () => {
            pending.waiting = undefined;
            batchSignal.removeEventListener('abort', onAbort);
            resolve(pending.done ? Promise.reject(new Error(`${pending.id} was cancelled before it started`)) : this.#execute(call, batchSignal));
          },
          end: (error) => {
            pending.waiting = undefined;
            batchSignal.removeEventListener('abort', onAbort);
            reject(error);
          },
        };
      });
    }
    const signal = pending.signal ? AbortSignal.any([batchSignal, pending.signal]) : batchSignal;
    let result: Promise<unknown>;
    try {
      result = Promise.resolve(pending.run(pending.args, signal));
    } catch (error) {
      result = Promise.reject(error);
    }
    const grace = this.#options.abortGraceMs;
    if (grace === undefined || !pending.signal) return result;
    // Its own signal aborts: it keeps its slot for at most `abortGraceMs` more.
    return new Promise((resolve, reject) => {
      let timer: { cancel(): void } | undefined;
      const clock = this.driver.clock;
      const onAbort = () => {
        timer = clock.setTimer(clock.now() + grace, () => reject(new DOMException(`${pending.id} ignored its abort signal for ${grace} ms; its slot was freed`, 'TimeoutError')));
      };
      if (pending.signal!.aborted) onAbort();
      else pending.signal!.addEventListener('abort', onAbort, { once: true });
      const finish = () => {
        timer?.cancel();
        pending.signal!.removeEventListener('abort', onAbort);
      };
      result.then(
        (value) => {
          finish();
          resolve(value);
        },
        (error) => {
          finish();
          reject(error);
        },
      );
    });
  }
}

/** @internal The gate options an adapter takes and hands to the gate it makes. */
export const GATE_OPTIONS = ['decide', 'executionTimeoutMs', 'abortGraceMs', 'sharedKeys', 'clock', 'onEvent'] as const;

/** @internal An adapter's gate, and what the adapter owns of it: a `Gate` given is used as it is
 * (its options are the gate's: an adapter option among `GATE_OPTIONS` is refused), anything else
 * gets a gate made here with the adapter's `GATE_OPTIONS`, checked under `options.NAME`. */
export function adapterGate(target: unknown, o: GateOptions): { gate: Gate; owns: 'nothing' | 'gate' | 'driver' } {
  if (target instanceof Gate) {
    for (const name of GATE_OPTIONS) {
      if (o[name] !== undefined) throw new TypeError(`options.${name} belongs to the gate: pass it to new Gate(...)`);
    }
    return { gate: target, owns: 'nothing' };
  }
  if (!(target instanceof Policy || target instanceof Scheduler || target instanceof Driver)) fail('target', 'a Policy, Scheduler, Driver or Gate', target);
  const gateOptions: GateOptions = {};
  for (const name of GATE_OPTIONS) if (o[name] !== undefined) (gateOptions as Record<string, unknown>)[name] = o[name];
  return { gate: new Gate(target, gateOptions), owns: target instanceof Policy ? 'driver' : 'gate' };
}

/** @internal Gives back what an adapter owns of its gate (`adapterGate`): cancels the calls in
 * flight on a gate it made, and disposes the driver it made with it. */
export function releaseAdapterGate(gate: Gate, owns: 'nothing' | 'gate' | 'driver'): void {
  if (owns !== 'nothing') gate.cancel();
  if (owns === 'driver') gate.driver.dispose();
}

/** Settles a call with its entry's outcome. */
function answer(pending: Pending, outcome: EntryOutcome): void {
  switch (outcome.status) {
    case 'ok':
      pending.settle(true, outcome.value);
      return;
    case 'failed':
      pending.settle(false, outcome.error);
      return;
    case 'cancelled':
      // It ran: what it returned or threw is the truth.
      if ('error' in outcome) pending.settle(false, outcome.error);
      else pending.settle(true, outcome.value);
      return;
    case 'settled':
      // `decide` failed (the host's bug): that error itself, not a sentence that would hide it.
      if (outcome.error !== undefined && (outcome.reason.kind === 'failed' || outcome.reason.kind === 'cancelled') && !(outcome.error instanceof SharedStoreError)) {
        pending.settle(false, outcome.error);
        return;
      }
      // A shared key's store could not grant it: its error is the `cause`.
      pending.settle(false, new CallSettledError(outcome.reason, pending.id, pending.tool, outcome.message, outcome.error));
  }
}

function checkName(name: string, what: string): void {
  if (name.length === 0 || name.includes('\n') || encoder.encode(name).length > 256) {
    throw new SubmitError('invalid-id', `${what} ${JSON.stringify(name.slice(0, 40))} must be 1 to 256 bytes without a newline`);
  }
}
