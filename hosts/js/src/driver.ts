// The async driver: runs batches on a scheduler, starting each execution when the scheduler
// releases it, reporting every decision, question and end, and resolving each batch with every
// call's outcome in written order.
//
// One `Driver` per scheduler owns its `step` calls: everything the batches report within one
// microtask (approvals, settlements, questions, ends, cancellations) goes in ONE `step`, and the
// outputs are dispatched to the batches they belong to. Each input is judged on its own, so a
// refused input fails only its own batch (with a `RefusedInputError`; the batch is cancelled so
// that it frees its keys) and every other input still applies. A batch's state is dropped when
// `step` reports it retired, so memory follows the live batches. Nothing else may call `step` on
// a driven scheduler: the outputs would be lost to the driver.
//
// Never hangs, never leaks:
// - `decide` that throws, rejects or returns something else: the batch's undecided entries are
//   settled as failed, the batch is cancelled (approved entries never start) and its promise
//   rejects with the error; its keys are free for later batches.
// - `execute` that throws synchronously, or returns something that is not a promise (or
//   thenable): that entry failed (a forgotten `async` or `await` is a bug to report, not a
//   result; the Python package treats a non-awaitable the same way). One entry's or one batch's
//   bad end never affects another.
// - A question still open when its execution ends is closed: its answer is not reported and its
//   promise never raises an unhandled rejection.
// - The abort listener on `RunOptions.signal` is removed when the batch ends.
// - An execution that ignores its abort signal keeps its slot (its tool may still be running):
//   `inspect()` lists it under `aborted`. The driver keeps no timer of its own for that: it
//   hands `executionTimeoutMs` and `abortGraceMs` to the component with the batch, and the
//   component decides when (on the `now` of each step, waking the driver with `wakeAt`). An
//   `abort` action aborts the execution's signal: a `TimeoutError` for its deadline, the
//   batch's reason for a cancellation (or a batch failure). An execution the component gave up
//   on (aborted, and not ended within `abortGraceMs`) is settled `timed-out` with the
//   component's sentence, its slot (and permit) freed; whatever it does later is ignored.
//
// Shared keys (SHARED.md, "What the driver does"): the scheduler lists an entry of a shared key
// in `acquire`; the driver asks `SharedKeys` for a permit (its key's limit and delay), reports
// `granted` when the store grants it (the entry then starts in written order) or `denied` when
// the request fails (the entry is settled failed with the store's error). Every entry the
// scheduler lists in `release` gives its permit back: `release()` when it ran, `abandon()` when
// it never started, or the pending request is withdrawn (its signal aborted). A permit whose
// lease is lost aborts its execution. A `RateLimitedError` on a shared key also pauses the key
// at the store, for every process. `dispose` gives back every permit and withdraws every
// request at once.
import { DisposedError, PersistError, RateLimitedError, RefusedInputError, RestoredError, TurnstileError } from './errors.js';
import type * as ws from './component/interfaces/turnstile-scheduler-scheduler.js';
import * as convert from './convert.js';
import { Scheduler, Submitted, type CallInput, type RawNotRun, type RawOutputs, type RawRetry, type ResumeOptions } from './scheduler.js';
import type { Policy } from './turnstile.js';
import type { EntryStatus, InputKind, Reason, SavedCall, SavedState, Unrestored, Wait } from './types.js';
import { DELAY_MS_MAX, LIMIT_MAX } from './shared/contract.js';
import type { SharedKeys, SharedPermit } from './shared/keys.js';
import { array, clockOption, fail, func, millis, oneOf, record, signal as checkSignal, string as checkString, type Clock } from './validate.js';

/** What `execute` gets: the entry to run and a signal that fires when it should stop. */
export interface Execution<C extends CallInput = CallInput> {
  /** The entry number (unique over the scheduler's life). */
  readonly entry: bigint;
  /** `id`, or `id#i` for an operation. */
  readonly label: string;
  /** The call as it was given to `run` (extra fields included). */
  readonly call: C;
  /** The operation index for a fan-out call. */
  readonly operation: number | undefined;
  /** Aborted when the batch is cancelled or fails, or `executionTimeoutMs` elapsed. */
  readonly signal: AbortSignal;
  /** Runs `answer` while the tool waits on a question (a user prompt); the execution keeps its
   * slot. Closed when the execution ends: a late answer is dropped. */
  question<T>(answer: () => Promise<T>): Promise<T>;
  /** The store's permit when the entry's key is shared (`undefined` otherwise). The driver gives
   * it back; its `signal` aborting (the lease was lost) aborts `signal` too. */
  readonly permit: SharedPermit | undefined;
}

/** How one entry ended. `entry` and `label` name it. */
export type EntryOutcome =
  /** Its execution returned `value`. */
  | { entry: bigint; label: string; status: 'ok'; value: unknown }
  /** Its execution threw or rejected with `error`. */
  | { entry: bigint; label: string; status: 'failed'; error: unknown }
  /** Its execution had started and its batch was cancelled before it ended; what it returned
   * (`value`) or threw (`error`) afterwards is kept. */
  | { entry: bigint; label: string; status: 'cancelled'; value?: unknown; error?: unknown }
  /** It never ran (or stopped being needed): `reason` says why, and `message` is the sentence to
   * show a user or hand back to the model as the call's result (the component's `explain` text,
   * the same in every host: `"not run: the batch was cancelled"`). `error` is set when a shared
   * key's store could not grant its permit (reason `failed`): what `SharedKeys.acquire` rejected
   * with (`StoreUnavailableError`, `LeaseLostError`, ...); and on every entry settled because
   * `decide` failed (reason `failed`, or `cancelled` for those approved before): what it threw
   * (a `Gate` then rejects the call with that error itself). */
  | { entry: bigint; label: string; status: 'settled'; reason: Reason; message: string; error?: unknown };

/** One call's outcome: its entries' outcomes in operation order. */
export interface CallOutcome {
  id: string;
  tool: string;
  entries: EntryOutcome[];
}

/** What the host decided about an entry before the batch runs. */
export type Decision = 'approve' | 'reject' | 'skip' | 'fail';

/** Runs one entry: returns a promise (or thenable) of its result. A synchronous throw or a
 * non-promise result is that entry's failure. */
export type Execute<C extends CallInput = CallInput> = (execution: Execution<C>) => unknown;

export interface RunOptions<C extends CallInput = CallInput> {
  /** Aborting cancels the batch: parked entries are settled, running ones' signals abort. */
  signal?: AbortSignal;
  /** Decides each entry in written order (default: approve all); may be async (a prompt). */
  decide?: (label: string, call: C) => Decision | Promise<Decision>;
  /** Aborts an execution's signal (with a `TimeoutError`) once it has run this long (a question
   * does not stop the clock). The component keeps the deadline; the driver sets no timer of its
   * own. */
  executionTimeoutMs?: number;
  /** Once an execution's signal aborted (its deadline, a cancellation, a batch failure), how long
   * it may still take: past it the component gives up on it, and it is settled `timed-out` with
   * the component's sentence, its slot freed; whatever it does later is ignored. Default: it
   * keeps its slot until it ends. */
  abortGraceMs?: number;
  /** Called once per entry as soon as its outcome is known (an execution's end, a settlement),
   * before the batch resolves, with the call it belongs to: what a host needs to answer each
   * call when it ends rather than when its batch ends (the `Gate` is built on it). Called
   * synchronously from the driver's round: it must not block; what it throws is ignored. */
  onOutcome?: (outcome: EntryOutcome, call: C) => void;
}

/** What the driver tells `DriverOptions.onEvent`, about one entry: `entry`, its `label` (`id`
 * or `id#i`), its call's `tool`, its `batch`, its `keys` (the component's, as `inspect` lists
 * them: empty when unbounded) and `atMs`, when it happened by the driver's clock. Facts only: the
 * wait, its key and its `why` sentence are the component's (`Scheduler.inspect`).
 * - `wait`: an approved entry that did not start in the step that approved it, or whose wait
 *   changed kind or key since its last `wait` event (at most one per entry per step).
 * - `start`: an execution starts (also a run again after a rate limit), just before `execute` is
 *   called; `waitedMs` since the entry was approved (a run again: since its rate-limited end),
 *   `wait` the last wait it had (absent when it never waited).
 * - `end`: an execution ended, `durationMs` after its start: `ok`, `failed`, `cancelled` (its
 *   batch was cancelled while it ran), or `rate-limited` (a `RateLimitedError`: it runs again or
 *   is settled, as the component decides; `retryAfterMs` is the error's).
 * - `settled`: an entry settled without running (a decision, the component, a cancellation), or
 *   given up after its abort grace (`timed-out`); `message` is the component's sentence. */
export type DriverEvent =
  | { type: 'wait'; entry: bigint; label: string; tool: string; batch: bigint; atMs: number; keys: string[]; wait: Wait; why: string }
  | { type: 'start'; entry: bigint; label: string; tool: string; batch: bigint; atMs: number; keys: string[]; waitedMs: number; wait?: Wait }
  | {
      type: 'end';
      entry: bigint;
      label: string;
      tool: string;
      batch: bigint;
      atMs: number;
      keys: string[];
      status: 'ok' | 'failed' | 'rate-limited' | 'cancelled';
      durationMs: number;
      retryAfterMs?: number;
    }
  | { type: 'settled'; entry: bigint; label: string; tool: string; batch: bigint; atMs: number; keys: string[]; reason: Reason; message: string };

/** What the driver keeps per entry for its events (only with `onEvent`): since when it waits
 * (its approval, or its rate-limited end), and its last reported wait. */
interface Track {
  since: number;
  wait: Wait | undefined;
  /** The last wait's kind and key, compared to tell a change. */
  sig: string | undefined;
}

/** A live batch as `Driver.inspect` shows it. */
export interface LiveBatch {
  batch: bigint;
  /** Cancelled (by its signal, or because it failed). */
  cancelled: boolean;
  /** Its promise was rejected (`decide` failed, an input was refused, the driver was disposed). */
  failed: boolean;
  /** The scheduler's view (`Scheduler.inspect`): every entry, and why approved ones wait. */
  entries: EntryStatus[];
  /** Executions still running whose signal aborted `sinceMs` ago (ignoring it, or slow to stop). */
  aborted: { entry: bigint; label: string; sinceMs: number }[];
}

const SETTLE_HOW = { reject: 'rejected', skip: 'skipped', fail: 'failed' } as const;
const DECISIONS = ['approve', 'reject', 'skip', 'fail'] as const;
const TWO_32 = 4294967296;
const EMPTY = new BigUint64Array(0);
/** Steps are queued as promise reactions: Node wraps `queueMicrotask` callbacks in an async
 * resource, which costs more than the step's own bookkeeping. */
const RESOLVED = Promise.resolve();

const NO_PAUSES: ws.KeyPause[] = [];

/** A list of entry numbers, each with the batch it belongs to (for its errors), that grows in
 * place and is written as 32-bit halves (no bigint per item); `view` lends it to one `step`
 * without a copy. Clearing keeps the capacity (truncating would free and regrow every step). */
class NumberList {
  #big = new BigUint64Array(16);
  #words = new Uint32Array(this.#big.buffer);
  readonly owners: (Batch | undefined)[] = [];
  length = 0;

  push(value: number, owner: Batch): void {
    if (this.length === this.#big.length) {
      const grown = new BigUint64Array(this.length * 2);
      grown.set(this.#big);
      this.#big = grown;
      this.#words = new Uint32Array(grown.buffer);
    }
    this.owners[this.length] = owner;
    const at = this.length++ << 1;
    this.#words[at] = value >>> 0;
    this.#words[at + 1] = Math.floor(value / TWO_32);
  }
  at(index: number): number {
    return this.#words[index << 1] + this.#words[(index << 1) + 1] * TWO_32;
  }
  view(): BigUint64Array {
    return this.length ? this.#big.subarray(0, this.length) : EMPTY;
  }
  clear(): void {
    const owners = this.owners;
    for (let i = 0; i < this.length; i++) owners[i] = undefined;
    this.length = 0;
  }
}

/** The inputs of the next `step`. */
class Pending {
  readonly approve = new NumberList();
  readonly settle: RawNotRun[] = [];
  readonly settleOwners: Batch[] = [];
  readonly ask = new NumberList();
  readonly answer = new NumberList();
  readonly ok = new NumberList();
  readonly failed = new NumberList();
  readonly cancel = new NumberList();
  readonly granted = new NumberList();
  readonly denied = new NumberList();
  readonly retry: RawRetry[] = [];
  readonly retryOwners: Batch[] = [];
  readonly pause: ws.KeyPause[] = [];
  /** Settles each `Driver.pause` once its step ran. */
  readonly pauseDone: ((error?: unknown) => void)[] = [];
  readonly liftPause: string[] = [];
  readonly liftDone: ((error?: unknown) => void)[] = [];

  /** The batch whose input this was; none for the driver's own `now` (and it sends no pause). */
  owner(kind: InputKind, index: number): Batch | undefined {
    if (kind === 'retry') return this.retryOwners[index];
    if (kind === 'now' || kind === 'pause' || kind === 'liftPause') return undefined;
    return kind === 'settle' ? this.settleOwners[index] : this[kind].owners[index];
  }

  target(kind: InputKind, index: number): bigint {
    if (kind === 'retry') return this.retry[index].entry;
    if (kind === 'now' || kind === 'pause' || kind === 'liftPause') return 0n;
    return kind === 'settle' ? this.settle[index].entry : BigInt(this[kind].at(index));
  }

  clear(): void {
    this.approve.clear();
    this.ask.clear();
    this.answer.clear();
    this.ok.clear();
    this.failed.clear();
    this.cancel.clear();
    this.granted.clear();
    this.denied.clear();
    if (this.settle.length) this.settle.length = this.settleOwners.length = 0;
    if (this.retry.length) this.retry.length = this.retryOwners.length = 0;
    if (this.pause.length) this.pause.length = this.pauseDone.length = 0;
    if (this.liftPause.length) this.liftPause.length = this.liftDone.length = 0;
  }
}

/** One live batch. */
class Batch {
  readonly driver: Driver;
  /** No call fans out: entry offset = call index. */
  readonly plain: boolean;
  readonly submitted: Submitted;
  /** `submitted.first` as a number (entry numbers stay below 2^53 over any real life). */
  readonly first: number;
  readonly count: number;
  readonly execute: Execute;
  readonly options: RunOptions;
  readonly outcomes: (EntryOutcome | undefined)[];
  /** Started executions by offset. */
  readonly running: (Run | undefined)[];
  /** Each entry's keys by offset, read once from `inspect` (only with `onEvent`). */
  keys: string[][] | undefined;
  cancelled = false;
  /** Its execution limit (`executionTimeoutMs`, or the saved batch's `execution-ms`), for the
   * message of a deadline's abort. */
  executionMs: number | undefined;
  /** The promise was settled (resolved at retirement, or rejected on the first error). */
  done = false;
  failed = false;
  /** Left the driver's live batches. */
  retired = false;
  abortReason: unknown = undefined;
  /** What `decide` threw (or the TypeError / RangeError for what it answered): every entry of
   * the batch settled from then on carries it as its outcome's `error`. */
  decideError: unknown = undefined;
  resolve!: (outcomes: CallOutcome[]) => void;
  reject!: (error: unknown) => void;
  detach: () => void = () => {};
  readonly promise: Promise<CallOutcome[]>;

  constructor(driver: Driver, submitted: Submitted, execute: Execute, options: RunOptions) {
    this.driver = driver;
    this.plain = submitted.callStarts() === null;
    this.submitted = submitted;
    this.first = Number(submitted.first);
    this.count = submitted.count;
    this.execute = execute;
    this.options = options;
    this.executionMs = options.executionTimeoutMs;
    this.outcomes = new Array(submitted.count);
    this.running = new Array(submitted.count);
    this.promise = new Promise<CallOutcome[]>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  label(offset: number): string {
    const { index, operation } = this.submitted.at(offset);
    const id = this.submitted.calls[index].id;
    return operation === undefined ? id : `${id}#${operation}`;
  }

  tool(offset: number): string {
    return this.submitted.calls[this.plain ? offset : this.submitted.at(offset).index].tool;
  }
}

/** One started execution; it is the `Execution` handed to `execute`. */
class Run implements Execution {
  readonly batch: Batch;
  readonly offset: number;
  readonly #index: number;
  readonly operation: number | undefined;
  ended = false;
  /** When it started, by the driver's clock (set with `onEvent` only). */
  startedAt: number | undefined;
  /** The rate limit it ended with (the component decides what becomes of the entry). */
  limited: RateLimitedError | undefined;
  /** Questions open (reported to the component as one wait while above 0). */
  questions = 0;
  /** Made when the execution first reads `signal`. */
  #controller: AbortController | undefined;
  /** Set once its signal aborted: when, and why. */
  aborted: { at: number; reason: unknown } | undefined;
  /** Its shared key's permit, when it has one. */
  hold: Hold | undefined;

  constructor(batch: Batch, offset: number) {
    this.batch = batch;
    this.offset = offset;
    if (batch.plain) {
      this.#index = offset;
      this.operation = undefined;
    } else {
      const at = batch.submitted.at(offset);
      this.#index = at.index;
      this.operation = at.operation;
    }
  }
  get entry(): bigint {
    return BigInt(this.batch.first + this.offset);
  }
  get call(): CallInput {
    return this.batch.submitted.calls[this.#index];
  }
  get label(): string {
    const id = this.batch.submitted.calls[this.#index].id;
    return this.operation === undefined ? id : `${id}#${this.operation}`;
  }
  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.aborted) this.#controller.abort(this.aborted.reason);
    }
    return this.#controller.signal;
  }
  /** Aborts the signal (once). */
  abort(reason: unknown): void {
    if (this.aborted || this.ended) return;
    this.aborted = { at: this.batch.driver.now(), reason };
    this.#controller?.abort(reason);
  }
  /** Bound to its execution, so `async ({ question }) => question(...)` works. */
  get question(): <T>(answer: () => Promise<T>) => Promise<T> {
    return (this.#question ??= <T>(answer: () => Promise<T>) => this.batch.driver.question(this, answer));
  }
  #question: (<T>(answer: () => Promise<T>) => Promise<T>) | undefined;
  get permit(): SharedPermit | undefined {
    return this.hold?.permit;
  }
}

/** One entry's permit of a shared key: the request until the store answers, then the permit. */
class Hold {
  readonly key: string;
  /** Aborted to withdraw the request. */
  readonly controller = new AbortController();
  permit: SharedPermit | undefined;
  /** Its execution started: the permit is released (else abandoned). */
  started = false;
  /** Given back (the scheduler listed it in `release`, or the driver was disposed): a permit that
   * arrives afterwards is abandoned at once. */
  done = false;
  /** Removes the lease-lost listener of a started execution. */
  detach: (() => void) | undefined;
  constructor(key: string) {
    this.key = key;
  }
}

/** Options of a `Driver`. */
export interface DriverOptions {
  /** The store client for the policy's shared keys (`concurrency = { ..., shared = true }`), from
   * `@turnstile/scheduler/shared`. Required when the policy declares one; the host closes it
   * (`keys.close()`, then `store.close()`) after disposing the driver. */
  sharedKeys?: SharedKeys;
  /** The one clock the driver reads and sets its one timer on (default: `performance.now()` and
   * `setTimeout`); tests give a virtual one. `SharedKeys` takes the same option. */
  clock?: Clock;
  /** Where the driver saves its state (DRIVERS.md, "Persistence"): called with the snapshot's
   * JSON text after a step that starts an execution (before it starts) and after a step that
   * took an end, a settlement or a retirement (before the outcome reaches `onOutcome` or a
   * resolved `run`); one at a time, awaited when it returns a promise. What it throws or rejects
   * with breaks the driver: every live batch rejects with `PersistError`, running executions
   * are aborted, the driver is disposed. Resume with `Driver.resume(policy, text, ...)`. */
  persist?: (snapshot: string) => unknown;
  /** Told every wait, start, end and settlement (see `DriverEvent`), synchronously from the
   * driver's round after the step's actions are applied (a `start` just before `execute` is
   * called): it must not block; what it throws is ignored. Without it the driver keeps no
   * telemetry state and makes no `inspect` call. `@turnstile/scheduler/otel` makes one that
   * records OpenTelemetry spans and metrics. */
  onEvent?: (event: DriverEvent) => void;
}

/** What `Driver.resume` gives back: the driver, every saved batch as a promise (retired ones
 * first, resolving at once with their saved outcomes, then live ones, in the snapshot's order),
 * and the calls the scheduler could not restore. */
export interface Resumed {
  driver: Driver;
  batches: Promise<CallOutcome[]>[];
  unrestored: Unrestored[];
}

/** A retired batch kept in the snapshot until `forget`. */
interface Retired {
  outcomes: CallOutcome[];
  text: string;
}

const drivers = new WeakMap<Scheduler, Driver>();

/** Runs batches on one scheduler (see the module doc). Disposable: `dispose()` rejects every
 * live batch with `DisposedError`, aborts its executions and disposes the scheduler. */
export class Driver {
  readonly scheduler: Scheduler;
  /** The store client for shared keys (`DriverOptions.sharedKeys`). */
  readonly sharedKeys: SharedKeys | undefined;
  /** Entries of shared keys with a permit requested or held, by entry number, until the
   * scheduler lists them in `release` (or a denial, or `dispose`). */
  readonly #holds = new Map<number, Hold>();
  /** Live batches in entry order (an entry's batch is found by binary search). */
  readonly #live: Batch[] = [];
  readonly #byBatch = new Map<bigint, Batch>();
  #pending = new Pending();
  /** The other buffer: the inputs of the step being dispatched, then reused. */
  #spare = new Pending();
  #scheduled = false;
  /** The clock (`DriverOptions.clock`) and the latest `now` given to the scheduler. */
  readonly #clock: Clock;
  /** The driver's clock (`DriverOptions.clock`, or the system's). */
  get clock(): Clock {
    return this.#clock;
  }
  #lastNow = 0;
  /** The one timer that steps again when the scheduler asked to be woken (`wakeAt`), and when. */
  #wake: { cancel(): void } | undefined;
  #wakeAt = -1;
  #disposed = false;
  /** The batch `#find` found last. */
  #last: Batch | undefined;
  /** `DriverOptions.persist`, and whether a call of it is under way (no step meanwhile). */
  readonly #persist: DriverOptions['persist'];
  #persisting = false;
  /** A `forget` changed the snapshot: the next step persists. */
  #dirty = false;
  /** Retired batches the host has not forgotten (kept only with `persist`). */
  #retired: Retired[] = [];
  /** What the step under way hands to the host once its snapshot is persisted: outcomes for
   * `onOutcome` (batch, offset), entries to start, and retired batches to resolve. */
  #reports: (Batch | number)[] = [];
  #starts: (Batch | number)[] = [];
  #retiring: { batch: Batch; outcomes: CallOutcome[] }[] = [];
  /** `DriverOptions.onEvent`; with it, each entry's `Track` until its outcome, and the events the
   * step under way hands out: ends and settlements, then (after the starts) waits. */
  readonly #onEvent: DriverOptions['onEvent'];
  readonly #tracks = new Map<number, Track>();
  #events: DriverEvent[] = [];
  #waits: DriverEvent[] = [];
  readonly #step = () => this.#flush();

  /** A driver for `scheduler`; a scheduler has at most one (`Driver.of` finds it). A policy that
   * declares a shared key needs `options.sharedKeys` (a `TypeError` naming the keys otherwise). */
  constructor(scheduler: Scheduler, options: DriverOptions = {}) {
    if (!(scheduler instanceof Scheduler)) fail('scheduler', 'a Scheduler', scheduler);
    const o = record(options, 'options', ['sharedKeys', 'clock', 'persist', 'onEvent']);
    this.#clock = clockOption(o.clock, 'options.clock');
    if (o.persist !== undefined) func(o.persist, 'options.persist');
    if (o.onEvent !== undefined) func(o.onEvent, 'options.onEvent');
    this.#persist = o.persist as DriverOptions['persist'];
    this.#onEvent = o.onEvent as DriverOptions['onEvent'];
    const keys = o.sharedKeys as SharedKeys | undefined;
    if (keys !== undefined && (typeof keys !== 'object' || keys === null || typeof keys.acquire !== 'function' || typeof keys.pause !== 'function')) {
      fail('options.sharedKeys', 'a SharedKeys (from @turnstile/scheduler/shared)', keys);
    }
    const shared = scheduler.sharedTools;
    if (shared !== undefined && keys === undefined) {
      const names = [...new Set([...shared.values()].map((t) => t.key))].map((k) => JSON.stringify(k)).join(', ');
      throw new TypeError(
        `the policy declares shared keys (${names}) but the driver has no store: pass { sharedKeys: new SharedKeys(store) } (from '@turnstile/scheduler/shared') to new Driver(scheduler, options)`,
      );
    }
    if (drivers.has(scheduler)) throw new TypeError('this scheduler already has a driver: use Driver.of(scheduler)');
    drivers.set(scheduler, this);
    this.scheduler = scheduler;
    this.sharedKeys = keys;
  }

  /** The scheduler's driver, made on first use with `options` (ignored when it exists). */
  static of(scheduler: Scheduler, options?: DriverOptions): Driver {
    return drivers.get(scheduler) ?? new Driver(scheduler, options);
  }

  /** Resumes a snapshot under a new driver (DRIVERS.md, "Persistence"). `snapshot` is the text
   * `persist` was given (or, without values, a `SavedState` from `Scheduler.unfinished()`).
   * Retired batches not forgotten come back as batches that resolve at once with their saved
   * outcomes (and stay saved until `forget`); each live batch runs again next to new ones, its
   * ended entries keeping their saved values (errors as `RestoredError`), its pending entries
   * decided and executed with `execute` like a new batch's; `started` says what becomes of an
   * entry that was running (`'run-again'`, or `'interrupt'`: settled `interrupted`). A call keeps
   * the keys its arguments made; its arguments are not saved: `argsOf` gives each restored call's
   * `args` back, called once per saved call (with its `keys`, also for a state saved by 0.2 with
   * `key`) before anything is resumed (what it throws, `resume` throws). A malformed snapshot is
   * a `TypeError` naming the field. */
  static resume(
    policy: Policy,
    snapshot: string | SavedState,
    options: ResumeOptions & Pick<RunOptions, 'signal' | 'decide' | 'onOutcome'> & DriverOptions & { execute: Execute; argsOf?: (call: SavedCall) => unknown },
  ): Resumed {
    // No `executionTimeoutMs` or `abortGraceMs`: a restored batch keeps the limits it was saved
    // with (the component's), as in Python.
    const o = record(options, 'options', ['started', 'execute', 'signal', 'decide', 'onOutcome', 'argsOf', 'sharedKeys', 'clock', 'persist', 'onEvent']);
    func(o.execute, 'options.execute');
    if (o.argsOf !== undefined) func(o.argsOf, 'options.argsOf');
    const runOptions = checkRunOptions({ signal: o.signal, decide: o.decide, onOutcome: o.onOutcome });
    const execute = o.execute as Execute;
    const argsOf = o.argsOf as ((call: SavedCall) => unknown) | undefined;
    let state: SavedState;
    let ended = new Map<string, unknown>();
    let retired: { batch: bigint; outcomes: CallOutcome[] }[] = [];
    if (typeof snapshot === 'string') {
      let parsed: unknown;
      try {
        parsed = JSON.parse(snapshot);
      } catch (error) {
        throw new TypeError(`snapshot must be the JSON text persist was given: ${(error as Error).message}`);
      }
      const top = record(parsed, 'snapshot', ['turnstile-snapshot', 'state', 'ended', 'retired']);
      if (top['turnstile-snapshot'] !== 1) throw new TypeError(`snapshot["turnstile-snapshot"] must be 1, got ${JSON.stringify(top['turnstile-snapshot'])}`);
      state = convert.stateFromJson(top.state);
      const values = top.ended === undefined ? {} : record(top.ended, 'snapshot.ended', Object.keys(top.ended as object));
      ended = new Map(Object.entries(values));
      retired = array(top.retired ?? [], 'snapshot.retired').map((r, i) => convert.retiredFromJson(r, `snapshot.retired[${i}]`));
    } else state = snapshot;
    // The state is checked in full (`Scheduler.resume`) before `argsOf` sees any of it.
    const { scheduler, unrestored } = Scheduler.resume(policy, state, { started: o.started as ResumeOptions['started'] });
    let args: unknown[][] | undefined;
    let driver: Driver;
    try {
      if (argsOf) args = state.batches.map((b) => b.calls.map((c) => argsOf(convert.savedCall(c))));
      const driverOptions: DriverOptions = {};
      if (o.sharedKeys !== undefined) driverOptions.sharedKeys = o.sharedKeys as SharedKeys;
      if (o.clock !== undefined) driverOptions.clock = o.clock as Clock;
      if (o.persist !== undefined) driverOptions.persist = o.persist as DriverOptions['persist'];
      if (o.onEvent !== undefined) driverOptions.onEvent = o.onEvent as DriverOptions['onEvent'];
      driver = new Driver(scheduler, driverOptions);
    } catch (error) {
      scheduler.dispose();
      throw error;
    }
    const batches: Promise<CallOutcome[]>[] = [];
    const hook = runOptions.onOutcome;
    for (const r of retired) {
      if (driver.#persist !== undefined) driver.#retired.push({ outcomes: r.outcomes, text: convert.retiredJson(r.batch, r.outcomes) });
      // Its outcomes are reported again (the host cannot know which it saw before the crash),
      // then it resolves.
      batches.push(
        RESOLVED.then(() => {
          if (hook !== undefined && !driver.#disposed) {
            for (const call of r.outcomes) {
              for (const outcome of call.entries) {
                try {
                  hook(outcome, { id: call.id, tool: call.tool });
                } catch {
                  // A host's hook must not break the driver.
                }
              }
            }
          }
          return r.outcomes;
        }),
      );
    }
    state.batches.forEach((saved, i) => batches.push(driver.#restore(saved, execute, runOptions, args?.[i], ended)));
    return { driver, batches, unrestored };
  }

  /** Batches submitted and not yet retired. */
  get liveBatches(): number {
    return this.#live.length;
  }

  /** Submits `calls` as a batch, decides every entry, runs what is released, and resolves with
   * every call's outcome in written order once the batch retires. Rejects with `SubmitError` when
   * the batch is refused, with `RefusedInputError` when one of its inputs is refused, with what
   * `decide` threw when it failed. */
  run<C extends CallInput>(calls: readonly C[], execute: Execute<C>, options: RunOptions<C> = {}): Promise<CallOutcome[]> {
    let batch: Batch;
    try {
      if (this.#disposed) throw new DisposedError('this driver');
      func(execute, 'execute');
      const checked = checkRunOptions(options);
      const limits = { executionMs: checked.executionTimeoutMs, abortGraceMs: checked.abortGraceMs };
      batch = new Batch(this, this.scheduler.submit(calls, limits), execute as Execute, checked as RunOptions);
    } catch (error) {
      return Promise.reject(error);
    }
    this.#insert(batch);
    // Its keys, made at submission, for its events (even once it retired).
    if (this.#onEvent !== undefined) batch.keys = keysOf(this.scheduler.inspect(batch.submitted.batch), batch.count);
    if (this.#persist !== undefined) {
      // Saved from its first step on, even while `decide` is still out.
      this.#dirty = true;
      this.#schedule();
    }
    this.#begin(batch, null);
    return batch.promise;
  }

  /** Every live batch: the scheduler's view of every entry (`Scheduler.inspect`: its `keys`, its
   * state, and for an approved one that waits its `wait` and the component's `why` sentence; a
   * running entry lists its keys too), and executions that ignore their abort signal. A snapshot
   * for a UI or a probe; `DriverOptions.onEvent` tells every wait, start and end as it happens. */
  inspect(): LiveBatch[] {
    const now = this.now();
    return this.#live.map((b) => {
      const aborted: LiveBatch['aborted'] = [];
      for (const run of b.running) if (run && !run.ended && run.aborted) aborted.push({ entry: run.entry, label: run.label, sinceMs: now - run.aborted.at });
      return { batch: b.submitted.batch, cancelled: b.cancelled, failed: b.failed, entries: this.scheduler.inspect(b.submitted.batch) ?? [], aborted };
    });
  }

  /** Pauses a key for `forMs` milliseconds from now (a pause only ever extends), for example
   * after a 429 the host saw outside an execution. Resolves once the scheduler applied it;
   * rejects with `RefusedInputError` (code `unknown-key`) when no configured tool declares the
   * key, and with `DisposedError` after `dispose`. */
  pause(key: string, forMs: number): Promise<void> {
    if (this.#disposed) return Promise.reject(new DisposedError('the driver'));
    checkString(key, 'key');
    if (typeof forMs !== 'number') fail('forMs', 'a number of milliseconds', forMs);
    if (!Number.isFinite(forMs) || forMs < 0) throw new RangeError(`forMs must be a finite number of milliseconds >= 0, got ${forMs}`);
    const until = BigInt(Math.min(this.now() + Math.ceil(forMs), Number.MAX_SAFE_INTEGER));
    // A shared key's pause reaches its store when the scheduler says so (`pauseStore`).
    return new Promise<void>((resolve, reject) => {
      this.#pending.pause.push({ key, until });
      this.#pending.pauseDone.push((error) => (error === undefined ? resolve() : reject(error)));
      this.#schedule();
    });
  }

  /** Lifts a key's pause now (the local pause only: a shared key's store keeps its own, the
   * host's to lift there). Resolves once the scheduler applied it; rejects with
   * `RefusedInputError` (code `unknown-key`) for a key no configured tool declares, and with
   * `DisposedError` after `dispose`. */
  liftPause(key: string): Promise<void> {
    if (this.#disposed) return Promise.reject(new DisposedError('the driver'));
    checkString(key, 'key');
    return new Promise<void>((resolve, reject) => {
      this.#pending.liftPause.push(key);
      this.#pending.liftDone.push((error) => (error === undefined ? resolve() : reject(error)));
      this.#schedule();
    });
  }

  /** Rejects every live batch with `DisposedError`, aborts its executions, disposes the scheduler. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    const error = new DisposedError('the driver');
    this.#last = undefined;
    for (const batch of this.#live.splice(0)) {
      this.#reject(batch, error);
      this.#abortRunning(batch, error);
    }
    this.#byBatch.clear();
    this.#dropHolds(error);
    for (const done of this.#pending.pauseDone) done(error);
    for (const done of this.#pending.liftDone) done(error);
    this.#pending.clear();
    this.#wake?.cancel();
    this.#wake = undefined;
    this.#tracks.clear();
    this.#events = [];
    this.#waits = [];
    drivers.delete(this.scheduler);
    this.scheduler.dispose();
  }
  [Symbol.dispose](): void {
    this.dispose();
  }

  // --- batches ----------------------------------------------------------------------------

  /** Wires the signal and decides the batch (`pending`: offsets to decide, null for all). */
  #begin(batch: Batch, pending: number[] | null): void {
    const signal = batch.options.signal;
    if (signal?.aborted) {
      this.#cancel(batch, signal.reason);
      return;
    }
    if (signal) {
      const onAbort = () => {
        try {
          this.#cancel(batch, signal.reason);
        } catch {
          // Cancelling never throws; nothing may escape an abort listener.
        }
      };
      signal.addEventListener('abort', onAbort, { once: true });
      batch.detach = () => signal.removeEventListener('abort', onAbort);
    }
    if (batch.options.decide) {
      this.#decideAll(batch, batch.options.decide, pending).catch((error) => this.#decideFailed(batch, error, pending));
    } else if (pending === null) {
      const approve = this.#pending.approve;
      for (let i = 0; i < batch.count; i++) approve.push(batch.first + i, batch);
      this.#schedule();
    } else {
      for (const i of pending) this.#push('approve', batch.first + i, batch);
    }
  }

  #decided = new WeakMap<Batch, number>();

  async #decideAll(batch: Batch, decide: NonNullable<RunOptions['decide']>, pending: number[] | null): Promise<void> {
    const n = pending === null ? batch.count : pending.length;
    for (let k = 0; k < n; k++) {
      const i = pending === null ? k : pending[k];
      this.#decided.set(batch, k);
      const { index } = batch.submitted.at(i);
      let decision = decide(batch.label(i), batch.submitted.calls[index]) as unknown;
      if (decision !== null && typeof decision === 'object' && typeof (decision as PromiseLike<unknown>).then === 'function') decision = await decision;
      if (batch.cancelled || batch.done) return;
      const d = oneOf(decision, `decide(${JSON.stringify(batch.label(i))}) result`, DECISIONS);
      if (d === 'approve') this.#push('approve', batch.first + i, batch);
      else this.#settle(batch, i, SETTLE_HOW[d]);
    }
    this.#decided.delete(batch);
  }

  /** `decide` threw, rejected or returned something else: the undecided entries are settled as
   * failed, the batch is cancelled and rejects with the error. */
  #decideFailed(batch: Batch, error: unknown, pending: number[] | null): void {
    batch.decideError ??= error;
    if (!batch.done && !batch.cancelled) {
      const from = this.#decided.get(batch) ?? 0;
      const n = pending === null ? batch.count : pending.length;
      for (let k = from; k < n; k++) this.#settle(batch, pending === null ? k : pending[k], 'failed');
    }
    this.#decided.delete(batch);
    this.#fail(batch, error);
  }

  #settle(batch: Batch, offset: number, how: ws.NotRun): void {
    this.#record(batch, offset, this.#settled(BigInt(batch.first + offset), batch.label(offset), { kind: how }, { tag: how }));
    if (this.#disposed) return;
    this.#pending.settle.push({ entry: BigInt(batch.first + offset), how });
    this.#pending.settleOwners.push(batch);
    this.#schedule();
  }

  /** A settled outcome, with the component's sentence for it (never throws). */
  #settled(entry: bigint, label: string, reason: Reason, wit: ws.Reason): Extract<EntryOutcome, { status: 'settled' }> {
    return { entry, label, status: 'settled', reason, message: this.scheduler.held.instance.explainOrKind(label, wit) };
  }

  /** The one place an entry's outcome is recorded. The first one recorded goes to `onOutcome`
   * after the step that takes it (and its snapshot, with `persist`): the input that reports it
   * is queued with it, so the next step takes both. */
  #record(batch: Batch, offset: number, outcome: EntryOutcome, report = true): void {
    // An entry settled because `decide` failed carries the host's error, not only a sentence.
    if (outcome.status === 'settled' && batch.decideError !== undefined && outcome.error === undefined) outcome = { ...outcome, error: batch.decideError };
    const first = batch.outcomes[offset] === undefined;
    batch.outcomes[offset] = outcome;
    if (first && report && batch.options.onOutcome !== undefined) this.#reports.push(batch, offset);
    if (first && report && this.#onEvent !== undefined) {
      this.#tracks.delete(batch.first + offset);
      // Handed out with the step that takes it, like `onOutcome`.
      if (outcome.status === 'settled') {
        this.#events.push({ type: 'settled', ...this.#about(batch, offset), atMs: this.now(), reason: outcome.reason, message: outcome.message });
      }
    }
  }

  /** The fields every event about an entry has (but `atMs`). */
  #about(batch: Batch, offset: number): { entry: bigint; label: string; tool: string; batch: bigint; keys: string[] } {
    return { entry: BigInt(batch.first + offset), label: batch.label(offset), tool: batch.tool(offset), batch: batch.submitted.batch, keys: batch.keys?.[offset] ?? [] };
  }

  /** Gives the host an event; what its hook throws is ignored. */
  #emit(event: DriverEvent): void {
    try {
      this.#onEvent!(event);
    } catch {
      // A host's hook must not break the driver's round.
    }
  }

  #cancel(batch: Batch, reason: unknown): void {
    if (batch.cancelled || !this.#byBatch.has(batch.submitted.batch)) return;
    batch.cancelled = true;
    batch.abortReason = reason ?? new DOMException('the batch was cancelled', 'AbortError');
    // Its running executions are aborted when the component says so (`abort`, cause `cancel`).
    this.#push('cancel', Number(batch.submitted.batch), batch);
  }

  #abortRunning(batch: Batch, reason: unknown): void {
    batch.abortReason ??= reason;
    for (const run of batch.running) if (run && !run.ended) run.abort(reason);
  }

  /** Rejects the batch's promise with its first error and cancels the batch, so that its parked
   * entries free their keys; its running executions still report their ends. */
  #fail(batch: Batch, error: unknown): void {
    if (batch.done) return;
    batch.failed = true;
    this.#reject(batch, error);
    this.#cancel(batch, error);
  }

  #reject(batch: Batch, error: unknown): void {
    if (batch.done) return;
    batch.done = true;
    batch.detach();
    batch.reject(error);
  }

  #restore(saved: SavedState['batches'][number], execute: Execute, options: RunOptions, args: unknown[] | undefined, ended: Map<string, unknown>): Promise<CallOutcome[]> {
    const calls: CallInput[] = saved.calls.map((c, i) => {
      const call: CallInput = c.operations === undefined ? { id: c.id, tool: c.tool } : { id: c.id, tool: c.tool, operations: c.operations };
      if (args !== undefined && args[i] !== undefined) call.args = args[i];
      return call;
    });
    const count = calls.reduce((n, c) => n + (c.operations ?? 1), 0);
    const batch = new Batch(this, new Submitted(saved.batch, saved.first, count, calls), execute, options);
    batch.cancelled = saved.cancelled;
    batch.executionMs = saved.limits?.executionMs;
    const statuses = this.scheduler.inspect(saved.batch);
    if (this.#onEvent !== undefined && statuses) batch.keys = keysOf(statuses, count);
    const states = savedEntries(saved);
    const pending: number[] = [];
    for (let i = 0; i < count; i++) {
      const status = statuses?.[i];
      const entry = BigInt(batch.first + i);
      const label = batch.label(i);
      const fromSave = savedEntry(states, batch.submitted, i);
      if (fromSave?.kind === 'ended') {
        // Ended before the crash: its saved value (or error) is its outcome, reported again
        // (the host cannot know which outcomes it saw before the crash).
        const kept = ended.get(String(entry));
        const k = kept !== null && typeof kept === 'object' ? (kept as { value?: unknown; error?: unknown }) : {};
        const error = k.error !== undefined ? convert.restoredError(k.error, `snapshot.ended["${entry}"].error`) : undefined;
        const outcome: EntryOutcome = batch.cancelled
          ? error !== undefined
            ? { entry, label, status: 'cancelled', error }
            : { entry, label, status: 'cancelled', value: k.value }
          : fromSave.outcome === 'ok'
            ? { entry, label, status: 'ok', value: k.value }
            : { entry, label, status: 'failed', error: error ?? new RestoredError('Error', 'no error was saved') };
        this.#record(batch, i, outcome);
      } else if (fromSave?.kind === 'settled') {
        this.#record(batch, i, this.#settled(entry, label, fromSave.reason, convert.witReason(fromSave.reason)));
      } else if (!statuses) {
        // Nothing of the batch is live (every call unrestored): what had started is interrupted.
        this.#record(batch, i, this.#settled(entry, label, { kind: 'interrupted' }, { tag: 'interrupted' }), false);
      } else if (status && status.state.kind !== 'settled' && status.state.kind !== 'ended') pending.push(i);
      // Else settled by the resume itself (interrupted): the first step reports it.
    }
    if (!statuses) {
      batch.done = true;
      batch.resolve(callOutcomes(batch) ?? []);
      return batch.promise;
    }
    this.#insert(batch);
    if (pending.length) this.#begin(batch, pending);
    // The first step reports the resume's own settlements, and hands out the saved outcomes.
    this.#schedule();
    return batch.promise;
  }

  // --- executions -------------------------------------------------------------------------

  #start(batch: Batch, offset: number): void {
    if (batch.cancelled || batch.done || this.#disposed) {
      // Cancelled (or failed) after the step that released it and before this hand-out: it
      // never runs. It is settled cancelled with the component's sentence, and its slot is
      // handed back (the component took it as started: `failed` is its end).
      this.#record(batch, offset, this.#settled(BigInt(batch.first + offset), batch.label(offset), { kind: 'cancelled' }, { tag: 'cancelled' }));
      this.#push('failed', batch.first + offset, batch);
      return;
    }
    const run = new Run(batch, offset);
    batch.running[offset] = run;
    if (this.#onEvent !== undefined) {
      const now = this.now();
      const entry = batch.first + offset;
      let track = this.#tracks.get(entry);
      if (track === undefined) this.#tracks.set(entry, (track = { since: now, wait: undefined, sig: undefined }));
      run.startedAt = now;
      const event: DriverEvent = { type: 'start', ...this.#about(batch, offset), atMs: now, waitedMs: now - track.since };
      if (track.wait !== undefined) event.wait = track.wait;
      // A run again after a rate limit reports the waits it has from then on.
      track.wait = track.sig = undefined;
      this.#emit(event);
    }
    const hold = this.sharedKeys === undefined ? undefined : this.#holds.get(batch.first + offset);
    if (hold?.permit) {
      const permit = hold.permit;
      run.hold = hold;
      if (permit.signal.aborted) {
        // The lease was lost while it waited for earlier entries: it must not run.
        this.end(run, false, permit.signal.reason);
        return;
      }
      hold.started = true;
      const onLost = () => run.abort(permit.signal.reason);
      permit.signal.addEventListener('abort', onLost, { once: true });
      hold.detach = () => permit.signal.removeEventListener('abort', onLost);
    }
    let result: unknown;
    try {
      result = batch.execute(run);
    } catch (error) {
      this.end(run, false, error);
      return;
    }
    if (result instanceof Promise) void this.#settleWhen(run, result);
    else if (result !== null && (typeof result === 'object' || typeof result === 'function') && typeof (result as PromiseLike<unknown>).then === 'function') {
      Promise.resolve(result).then(
        (value) => this.end(run, true, value),
        (error) => this.end(run, false, error),
      );
    } else {
      const got = result === null ? 'null' : typeof result;
      this.end(run, false, new TypeError(`execute must return a promise (an async function), not ${got}; ${run.label} counts as failed`));
    }
  }

  /** Reports the execution's end when its promise settles (an async method allocates less than
   * `then` with two closures). */
  async #settleWhen(run: Run, result: Promise<unknown>): Promise<void> {
    let value: unknown;
    try {
      value = await result;
    } catch (error) {
      this.end(run, false, error);
      return;
    }
    this.end(run, true, value);
  }

  // --- shared keys ------------------------------------------------------------------------

  /** Asks the store for the entry's permit (the scheduler listed it in `acquire`, with the key
   * its arguments made and the terms the store keeps: the key's limit, delay and rate windows,
   * and the entry's weight). */
  #acquire(batch: Batch, offset: number, terms: ws.PermitRequest): void {
    const entry = batch.first + offset;
    const key = terms.key;
    const hold = new Hold(key);
    this.#holds.set(entry, hold);
    let request: Promise<SharedPermit>;
    try {
      if (!this.sharedKeys) throw new TypeError(`turnstile driver: ${batch.label(offset)} has no shared key to acquire (a bug)`);
      // A key written `limit = 0` with a delay is unbounded but spaced (no limit): the store's
      // largest limit.
      request = this.sharedKeys.acquire(key, {
        limit: Math.min(terms.limit ?? LIMIT_MAX, LIMIT_MAX), delayMs: Math.min(terms.delayMs, DELAY_MS_MAX),
        rates: terms.rates, weight: terms.weight, signal: hold.controller.signal,
      });
    } catch (error) {
      request = Promise.reject(error);
    }
    request.then(
      (permit) => {
        if (hold.done || this.#disposed) {
          // Withdrawn (or the driver went) while the grant was on its way: given back unused.
          permit.abandon().catch(() => {});
          return;
        }
        hold.permit = permit;
        this.#push('granted', entry, batch);
      },
      (error) => {
        // The withdrawal's own abort is no denial.
        if (hold.done || this.#holds.get(entry) !== hold) return;
        this.#holds.delete(entry);
        hold.done = true;
        if (this.#disposed) return;
        this.#record(batch, offset, { ...this.#settled(BigInt(entry), batch.label(offset), { kind: 'failed' }, { tag: 'failed' }), error });
        this.#push('denied', entry, batch);
      },
    );
  }

  /** Gives back the entry's permit (the scheduler listed it in `release`): released when it ran,
   * abandoned when it never started, or the request withdrawn. */
  #release(entry: number): void {
    const hold = this.#holds.get(entry);
    if (hold === undefined) return;
    this.#holds.delete(entry);
    giveBack(hold, undefined);
  }

  /** Every permit given back and every request withdrawn (dispose, a trap). */
  #dropHolds(reason: unknown): void {
    for (const hold of this.#holds.values()) giveBack(hold, reason);
    this.#holds.clear();
  }

  /** @internal An execution ended. */
  end(run: Run, ok: boolean, value: unknown): void {
    if (run.ended) return;
    run.ended = true;
    if (run.hold?.detach) {
      run.hold.detach();
      run.hold.detach = undefined;
    }
    const batch = run.batch;
    if (!ok && value instanceof RateLimitedError && !this.#disposed) {
      if (run.startedAt !== undefined) {
        const now = this.now();
        const entry = batch.first + run.offset;
        const track = this.#tracks.get(entry);
        // A run again waits from here.
        if (track !== undefined) track.since = now;
        else this.#tracks.set(entry, { since: now, wait: undefined, sig: undefined });
        this.#events.push({ type: 'end', ...this.#about(batch, run.offset), atMs: now, status: 'rate-limited', durationMs: now - run.startedAt, retryAfterMs: value.retryAfterMs });
      }
      // Not an end: the component decides. The entry goes back in line and runs again after the
      // pause, or is settled (rate-limited past its key's retries; cancelled in a cancelled
      // batch, which the outcome reports as `cancelled` with this error), and its key pauses.
      run.limited = value;
      const p = this.#pending;
      // A time past 2^53 - 1 ms (a Retry-After of centuries) is capped, never wrapped.
      p.retry.push({ entry: BigInt(batch.first + run.offset), until: BigInt(Math.min(this.now() + value.retryAfterMs, Number.MAX_SAFE_INTEGER)) });
      p.retryOwners.push(batch);
      this.#schedule();
      return;
    }
    const entry = BigInt(batch.first + run.offset);
    const label = run.label;
    const bad = ok && this.#persist !== undefined ? convert.notJson(value) : undefined;
    if (bad !== undefined) {
      // A value the snapshot cannot hold would come back another after a restart: refused at
      // its end, live (DRIVERS.md, "Persistence").
      ok = false;
      value = new TypeError(
        `${label} returned ${bad}, which the snapshot cannot hold as JSON: with persist, an execution returns JSON data (null, booleans, finite numbers, strings, arrays, plain objects) or nothing`,
      );
    }
    let outcome: EntryOutcome;
    // A batch that failed was cancelled by its failure: what had started is `cancelled` (what a
    // restart gives back for it too), its value or error kept.
    if (batch.cancelled) outcome = ok ? { entry, label, status: 'cancelled', value } : { entry, label, status: 'cancelled', error: value };
    else outcome = ok ? { entry, label, status: 'ok', value } : { entry, label, status: 'failed', error: value };
    this.#record(batch, run.offset, outcome);
    if (this.#disposed) return;
    if (run.startedAt !== undefined) {
      const now = this.now();
      this.#events.push({ type: 'end', ...this.#about(batch, run.offset), atMs: now, status: outcome.status as 'ok' | 'failed' | 'cancelled', durationMs: now - run.startedAt });
    }
    const p = this.#pending;
    if (ok) p.ok.push(batch.first + run.offset, batch);
    else p.failed.push(batch.first + run.offset, batch);
    this.#schedule();
  }

  /** @internal */
  question<T>(run: Run, answer: () => Promise<T>): Promise<T> {
    const asked = (async () => {
      if (run.ended) throw new TurnstileError('not-running', `${run.label} asked a question after its execution ended`);
      // An aborted execution asks nothing more as far as the component is concerned: its abort
      // closed any question (the question still runs for the tool, unreported).
      // Overlapping questions are one wait for the component: asked at the first (0 -> 1),
      // answered at the last (1 -> 0).
      const reported = !run.aborted;
      if (reported && run.questions++ === 0) this.#push('ask', run.batch.first + run.offset, run.batch);
      try {
        return await answer();
      } finally {
        // Closed when the execution ended or was aborted: the answer is not reported.
        if (reported && --run.questions === 0 && !run.ended && !run.aborted) this.#push('answer', run.batch.first + run.offset, run.batch);
      }
    })();
    // The execution may have ended without awaiting its question: never an unhandled rejection.
    asked.catch(() => {});
    return asked;
  }

  // --- the step ---------------------------------------------------------------------------

  /** @internal The clock in whole milliseconds, never below a `now` given before (clamped). */
  now(): number {
    const t = Math.floor(this.#clock.now());
    if (t > this.#lastNow) this.#lastNow = t;
    return this.#lastNow;
  }

  /** Keeps the one timer for the scheduler's latest `wakeAt` (none: no timer). */
  #arm(wakeAt: bigint | undefined): void {
    const at = wakeAt === undefined ? -1 : Number(wakeAt);
    if (at === this.#wakeAt && this.#wake !== undefined) return;
    this.#wake?.cancel();
    this.#wake = undefined;
    this.#wakeAt = at;
    if (at < 0) return;
    // A timer that fires early (a system timer caps its wait) steps with the same `wakeAt`
    // still ahead: the scheduler says it again and the timer is armed again.
    this.#wake = this.#clock.setTimer(at, () => {
      this.#wake = undefined;
      this.#wakeAt = -1;
      this.#schedule();
    });
  }

  #push(kind: Exclude<InputKind, 'settle' | 'now' | 'retry' | 'pause' | 'liftPause'>, value: number, batch: Batch): void {
    if (this.#disposed) return;
    this.#pending[kind].push(value, batch);
    this.#schedule();
  }

  #schedule(): void {
    if (this.#scheduled || this.#disposed) return;
    this.#scheduled = true;
    // While a snapshot is being persisted, inputs wait for the next step (queued when it is).
    if (!this.#persisting) void RESOLVED.then(this.#step);
  }

  /** Sends every input queued since the last step in one `step`, dispatches the outputs, and
   * hands the host what the step decided once its snapshot is persisted. */
  #flush(): void {
    if (!this.#scheduled || this.#persisting) return;
    this.#scheduled = false;
    if (this.#disposed) return;
    const p = this.#pending;
    this.#pending = this.#spare;
    this.#spare = p;
    // The saved state changes with every input but a question's and a pause: such a step is
    // persisted even when it starts and ends nothing (a 429 puts a started entry back in line).
    const changed = p.approve.length + p.settle.length + p.ok.length + p.failed.length + p.retry.length + p.cancel.length + p.granted.length + p.denied.length > 0;
    try {
      this.#dispatch(p);
    } finally {
      p.clear();
    }
    if (this.#disposed) return;
    const reports = this.#reports;
    const starts = this.#starts;
    const retiring = this.#retiring;
    const events = this.#events;
    const waits = this.#waits;
    if (events.length !== 0 || waits.length !== 0) {
      this.#events = [];
      this.#waits = [];
    }
    if (reports.length === 0 && starts.length === 0 && retiring.length === 0 && !this.#dirty && !(changed && this.#persist !== undefined)) {
      // Nothing to save or hand out but events: told now.
      if (events.length !== 0 || waits.length !== 0) this.#handOut(reports, starts, retiring, events, waits);
      return;
    }
    this.#reports = [];
    this.#starts = [];
    this.#retiring = [];
    if (this.#persist === undefined) {
      this.#handOut(reports, starts, retiring, events, waits);
      return;
    }
    this.#dirty = false;
    this.#persisting = true;
    let saved: unknown;
    try {
      saved = this.#persist(this.snapshot());
    } catch (error) {
      this.#persistFailed(error, retiring);
      return;
    }
    if (saved !== null && (typeof saved === 'object' || typeof saved === 'function') && typeof (saved as PromiseLike<unknown>).then === 'function') {
      Promise.resolve(saved).then(
        () => this.#persisted(reports, starts, retiring, events, waits),
        (error) => this.#persistFailed(error, retiring),
      );
    } else this.#persisted(reports, starts, retiring, events, waits);
  }

  #persisted(reports: (Batch | number)[], starts: (Batch | number)[], retiring: { batch: Batch; outcomes: CallOutcome[] }[], events: DriverEvent[], waits: DriverEvent[]): void {
    this.#persisting = false;
    if (this.#disposed) {
      // Disposed meanwhile: nothing starts, but retired batches are done and saved.
      for (const r of retiring) r.batch.resolve(r.outcomes);
      return;
    }
    this.#handOut(reports, starts, retiring, events, waits);
    if (this.#scheduled) void RESOLVED.then(this.#step);
  }

  /** A failed `persist` breaks the driver loudly: every batch rejects with `PersistError`,
   * running executions are aborted, nothing starts, the driver is disposed. */
  #persistFailed(cause: unknown, retiring: { batch: Batch; outcomes: CallOutcome[] }[]): void {
    this.#persisting = false;
    const error = new PersistError(cause);
    for (const r of retiring) r.batch.reject(error);
    for (const batch of this.#live) {
      this.#reject(batch, error);
      this.#abortRunning(batch, error);
    }
    this.dispose();
  }

  /** What a step decided, to the host: outcomes to `onOutcome`, ends and settlements to
   * `onEvent`, executions started (each told as it starts), waits to `onEvent`, retired batches
   * resolved. */
  #handOut(reports: (Batch | number)[], starts: (Batch | number)[], retiring: { batch: Batch; outcomes: CallOutcome[] }[], events?: DriverEvent[], waits?: DriverEvent[]): void {
    for (let i = 0; i < reports.length; i += 2) {
      const batch = reports[i] as Batch;
      const offset = reports[i + 1] as number;
      try {
        batch.options.onOutcome!(batch.outcomes[offset]!, batch.submitted.calls[batch.plain ? offset : batch.submitted.at(offset).index]);
      } catch {
        // A host's hook must not break the driver's round.
      }
    }
    if (events) for (const event of events) this.#emit(event);
    for (let i = 0; i < starts.length; i += 2) this.#start(starts[i] as Batch, starts[i + 1] as number);
    if (waits) for (const event of waits) this.#emit(event);
    for (const r of retiring) r.batch.resolve(r.outcomes);
  }

  #dispatch(p: Pending): void {
    let out: RawOutputs;
    // The inputs cross with the clock: the component judges each at the time it happened (a
    // 429's wait from the 429, an abort's grace from the cancel).
    const now = this.now();
    try {
      out = this.scheduler.stepRaw({
        approve: p.approve.view(),
        settle: p.settle,
        ask: p.ask.view(),
        answer: p.answer.view(),
        ok: p.ok.view(),
        failed: p.failed.view(),
        cancel: p.cancel.view(),
        now: BigInt(now),
        retry: p.retry,
        pause: p.pause.length ? p.pause : NO_PAUSES,
        liftPause: p.liftPause.length ? p.liftPause : undefined,
        granted: p.granted.view(),
        denied: p.denied.view(),
      });
    } catch (error) {
      // A trap (InstanceBrokenError) or a disposed scheduler: every batch on it goes with it.
      this.#byBatch.clear();
      this.#last = undefined;
      this.#tracks.clear();
      this.#dropHolds(error);
      for (const batch of this.#live.splice(0)) {
        this.#reject(batch, error);
        this.#abortRunning(batch, error);
      }
      return;
    }
    // Something waits on time (a key's delay or pause): step again then, with a later `now`.
    this.#arm(out.wakeAt);
    for (const a of out.abort) {
      const entry = Number(a.entry);
      const batch = this.#find(entry);
      const run = batch?.running[entry - batch.first];
      if (!batch || !run || run.ended) continue;
      run.abort(a.cause === 'cancel' ? batch.abortReason : new DOMException(`${run.label} ran past executionTimeoutMs (${batch.executionMs} ms)`, 'TimeoutError'));
    }
    // The entries this step reported a rate limit for, made once if a settlement needs them
    // (linear in the step, however many settlements and retries it has).
    let limited: Set<bigint> | undefined;
    for (const s of out.settled) {
      const offset = Number(s.entry);
      const batch = this.#find(offset);
      // Given up after its abort grace: whatever the execution does later is ignored.
      if (batch && s.reason.tag === 'timed-out') this.#giveUp(batch, offset - batch.first);
      const run = batch?.running[offset - batch.first];
      // A cancelled batch's execution that ended with a 429 (this step's): it ran, its error is
      // its outcome.
      if (batch && run?.limited !== undefined && s.reason.tag === 'cancelled' && (limited ??= new Set(p.retry.map((r) => r.entry))).has(s.entry)) {
        this.#record(batch, offset - batch.first, { entry: s.entry, label: run.label, status: 'cancelled', error: run.limited });
        continue;
      }
      // The scheduler's settlement carries its sentence: no `explain` crossing.
      if (batch) this.#record(batch, offset - batch.first, { entry: s.entry, label: batch.label(offset - batch.first), status: 'settled', reason: convert.reason(s.reason), message: s.message });
    }
    // A shared key's pause goes to its store, for every process, before any permit goes back
    // (the pause only extends; a store error changes nothing here).
    if (this.sharedKeys) {
      for (const p of out.pauseStore) this.sharedKeys.pause(p.key, storeMs(Math.max(0, Number(p.until) - this.now()))).catch(() => {});
    }
    const release = out.release;
    for (let i = 0; i < release.length; i++) this.#release(Number(release[i].entry));
    for (const e of out.errors) {
      if (e.input === 'granted' || e.input === 'denied') {
        // A permit's answer that raced a cancellation or a stop (the entry was settled and
        // released first) changes nothing; a permit still held is given back.
        if (e.input === 'granted') this.#release(Number(p.target(e.input, e.index)));
        continue;
      }
      if (e.input === 'pause' || e.input === 'liftPause') {
        const done = e.input === 'pause' ? p.pauseDone : p.liftDone;
        done[e.index]?.(new RefusedInputError(e, 0n));
        done[e.index] = () => {};
        continue;
      }
      if (e.input === 'now') {
        // The component's clock is ahead of the driver's: something else stepped the scheduler
        // (one driver owns its steps). Every live batch fails with the typed refusal, as in
        // Python; the step's other inputs applied.
        for (const batch of this.#live.slice()) this.#fail(batch, new RefusedInputError(e, 0n));
        continue;
      }
      const batch = p.owner(e.input, e.index);
      // A cancellation that came too late (the batch retired) or twice changes nothing.
      if (!batch || (e.input === 'cancel' && (e.code === 'batch-cancelled' || e.code === 'unknown-batch'))) continue;
      this.#fail(batch, new RefusedInputError(e, p.target(e.input, e.index)));
    }
    for (const done of p.pauseDone) done();
    for (const done of p.liftDone) done();
    const requests = out.acquire;
    for (let i = 0; i < requests.length; i++) {
      const entry = Number(requests[i].entry);
      const batch = this.#find(entry);
      if (batch) this.#acquire(batch, entry - batch.first, requests[i]);
    }
    const start = out.start;
    if (start.length) {
      // Read as 32-bit halves: one view, no bigint per start.
      const halves = new Uint32Array(start.buffer, start.byteOffset, start.length * 2);
      for (let i = 0; i < halves.length; i += 2) {
        const entry = halves[i] + halves[i + 1] * TWO_32;
        const batch = this.#find(entry);
        if (batch) this.#starts.push(batch, entry - batch.first);
      }
    }
    const retired = out.retired;
    for (let i = 0; i < retired.length; i++) this.#retire(retired[i]);
    if (this.#onEvent !== undefined) this.#observe(p, out, now);
  }

  /** With `onEvent`: the step's approvals start their wait, and every entry of a batch the step
   * touched (an input or an output of it) that waits is compared, once, with its last `wait`
   * event: a new wait, or one of another kind or key, is told (the component's wait, keys and
   * sentence, from `inspect`). */
  #observe(p: Pending, out: RawOutputs, now: number): void {
    const touched = new Set<Batch>();
    const approve = p.approve;
    for (let i = 0; i < approve.length; i++) {
      const entry = approve.at(i);
      const track = this.#tracks.get(entry);
      if (track === undefined) this.#tracks.set(entry, { since: now, wait: undefined, sig: undefined });
      else track.since = now;
    }
    for (const list of [approve, p.ask, p.answer, p.ok, p.failed, p.cancel, p.granted, p.denied]) {
      for (let i = 0; i < list.length; i++) touched.add(list.owners[i]!);
    }
    for (const b of p.settleOwners) touched.add(b);
    for (const b of p.retryOwners) touched.add(b);
    const byEntry = (entry: bigint) => {
      const b = this.#find(Number(entry));
      if (b) touched.add(b);
    };
    for (let i = 0; i < out.start.length; i++) byEntry(out.start[i]);
    for (const s of out.settled) byEntry(s.entry);
    for (const a of out.abort) byEntry(a.entry);
    for (const a of out.acquire) byEntry(a.entry);
    for (const batch of touched) {
      if (batch.retired) continue;
      const statuses = this.scheduler.inspect(batch.submitted.batch);
      if (!statuses) continue;
      for (const s of statuses) {
        const wait = s.wait;
        if (wait === undefined) continue;
        const entry = Number(s.entry);
        let track = this.#tracks.get(entry);
        if (track === undefined) this.#tracks.set(entry, (track = { since: now, wait: undefined, sig: undefined }));
        const sig = 'key' in wait ? `${wait.kind}\u0000${wait.key}` : wait.kind;
        if (track.sig === sig) continue;
        track.sig = sig;
        track.wait = wait;
        this.#waits.push({ type: 'wait', entry: s.entry, label: s.label, tool: s.tool, batch: batch.submitted.batch, atMs: now, keys: s.keys, wait, why: s.why ?? '' });
      }
    }
  }

  /** The component gave up on a running execution (its abort grace passed): it counts as ended
   * for the driver, its permit comes back with the `release` of the same step. */
  #giveUp(batch: Batch, offset: number): void {
    const run = batch.running[offset];
    if (!run || run.ended) return;
    run.ended = true;
    if (run.hold?.detach) {
      run.hold.detach();
      run.hold.detach = undefined;
    }
  }

  /** A batch left the scheduler: it resolves once the step's snapshot (which keeps it under
   * `retired` until `forget`) is persisted. */
  #retire(number: bigint): void {
    const batch = this.#byBatch.get(number);
    if (!batch) return;
    this.#byBatch.delete(number);
    this.#live.splice(this.#index(batch.first), 1);
    batch.retired = true;
    if (this.#last === batch) this.#last = undefined;
    batch.detach();
    if (batch.done) return;
    batch.done = true;
    const outcomes = callOutcomes(batch);
    if (!outcomes) {
      batch.reject(new Error(`turnstile driver: batch ${number} retired with an entry unanswered (a bug)`));
      return;
    }
    if (this.#persist !== undefined) this.#retired.push({ outcomes, text: convert.retiredJson(number, outcomes) });
    this.#retiring.push({ batch, outcomes });
  }

  /** The snapshot's JSON text (DRIVERS.md, "Persistence"): the scheduler's `unfinished()`, the
   * values of ended entries of live batches, and retired batches not forgotten. */
  snapshot(): string {
    const state = this.scheduler.unfinished();
    const ended: string[] = [];
    for (const saved of state.batches) {
      const batch = this.#byBatch.get(saved.batch);
      if (!batch) continue;
      const starts = batch.submitted.callStarts();
      for (let c = 0; c < saved.calls.length; c++) {
        for (const e of saved.calls[c].entries) {
          if (e.state.kind !== 'ended') continue;
          const offset = (starts === null ? c : starts[c]) + e.operation;
          const o = batch.outcomes[offset];
          if (o === undefined) continue;
          const kept = o.status === 'settled' ? `{"error":${convert.errorJson({ name: 'Error', message: o.message })}}` : 'error' in o ? `{"error":${convert.errorJson(o.error)}}` : `{${convert.valueField(o.value).slice(1)}}`;
          ended.push(`"${batch.first + offset}":${kept}`);
        }
      }
    }
    return `{"turnstile-snapshot":1,"state":${convert.stateJson(state)},"ended":{${ended.join(',')}},"retired":[${this.#retired.map((r) => r.text).join(',')}]}`;
  }

  /** Drops a retired batch from the snapshot (the next step persists without it): `outcomes` is
   * the array its `run` resolved with, once the host kept them itself. An array of no retired
   * batch (forgotten already, or never retired here) changes nothing. */
  forget(outcomes: CallOutcome[]): void {
    if (!Array.isArray(outcomes)) fail('outcomes', 'the array a run resolved with', outcomes);
    const i = this.#retired.findIndex((r) => r.outcomes === outcomes);
    if (i < 0 || this.#disposed) return;
    this.#retired.splice(i, 1);
    this.#dirty = true;
    this.#schedule();
  }

  #insert(batch: Batch): void {
    this.#byBatch.set(batch.submitted.batch, batch);
    this.#live.splice(this.#index(batch.first), 0, batch);
  }

  /** The position of the first live batch whose `first` is not below `first`. */
  #index(first: number): number {
    let lo = 0;
    let hi = this.#live.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#live[mid].first < first) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** The live batch holding an entry. */
  #find(entry: number): Batch | undefined {
    // Outputs come in batch order: the batch of the previous entry is the likely one.
    const last = this.#last;
    if (last !== undefined && entry >= last.first && entry - last.first < last.count && !last.retired) return last;
    const live = this.#live;
    let lo = 0;
    let hi = live.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (live[mid].first <= entry) lo = mid;
      else hi = mid - 1;
    }
    const batch = live[lo];
    if (batch && entry >= batch.first && entry - batch.first < batch.count) {
      this.#last = batch;
      return batch;
    }
    return undefined;
  }
}

/** Each entry's keys by offset, from a batch's `inspect` (empty for none). */
function keysOf(statuses: EntryStatus[] | undefined, count: number): string[][] {
  const keys: string[][] = new Array(count);
  for (let i = 0; i < count; i++) keys[i] = statuses?.[i]?.keys ?? [];
  return keys;
}

/** A duration for the store: whole milliseconds within its largest delay. */
function storeMs(ms: number): number {
  return Math.min(Math.ceil(ms), DELAY_MS_MAX);
}

function giveBack(hold: Hold, reason: unknown): void {
  hold.done = true;
  if (hold.detach) {
    hold.detach();
    hold.detach = undefined;
  }
  const permit = hold.permit;
  // A store that cannot be reached now: the lease ends on its own.
  if (permit) (hold.started ? permit.release() : permit.abandon()).catch(() => {});
  else hold.controller.abort(reason ?? new DOMException('the permit request was withdrawn', 'AbortError'));
}


function callOutcomes(batch: Batch): CallOutcome[] | undefined {
  const { calls } = batch.submitted;
  const out: CallOutcome[] = new Array(calls.length);
  let at = 0;
  const outcomes = batch.outcomes;
  for (let c = 0; c < calls.length; c++) {
    const call = calls[c];
    let entries: EntryOutcome[];
    if (call.operations === undefined) {
      const e = outcomes[at++];
      if (e === undefined) return undefined;
      entries = [e];
    } else {
      const n = call.operations;
      const slice = outcomes.slice(at, at + n);
      at += n;
      for (const e of slice) if (e === undefined) return undefined;
      entries = slice as EntryOutcome[];
    }
    out[c] = { id: call.id, tool: call.tool, entries };
  }
  return out;
}

/** A saved batch's entry states by call and operation (the first one saved for each), so that
 * restoring a batch is linear in it however many operations a call has. */
function savedEntries(saved: SavedState['batches'][number]): (import('./types.js').SavedEntryState | undefined)[][] {
  return saved.calls.map((c) => {
    const states: (import('./types.js').SavedEntryState | undefined)[] = [];
    for (const e of c.entries) if (states[e.operation] === undefined) states[e.operation] = e.state;
    return states;
  });
}

function savedEntry(states: (import('./types.js').SavedEntryState | undefined)[][], submitted: Submitted, offset: number): import('./types.js').SavedEntryState | undefined {
  const { index, operation } = submitted.at(offset);
  return states[index][operation ?? 0];
}

function checkRunOptions(options: unknown): RunOptions {
  const o = record(options, 'options', ['signal', 'decide', 'executionTimeoutMs', 'abortGraceMs', 'onOutcome']);
  checkSignal(o.signal, 'options.signal');
  if (o.decide !== undefined) func(o.decide, 'options.decide');
  if (o.onOutcome !== undefined) func(o.onOutcome, 'options.onOutcome');
  if (o.executionTimeoutMs !== undefined) millis(o.executionTimeoutMs, 'options.executionTimeoutMs');
  if (o.abortGraceMs !== undefined) millis(o.abortGraceMs, 'options.abortGraceMs');
  return o as RunOptions;
}

/** Runs one batch on the scheduler's driver (`Driver.of(scheduler).run(...)`). */
export function runBatch<C extends CallInput>(scheduler: Scheduler, calls: readonly C[], execute: Execute<C>, options: RunOptions<C> = {}): Promise<CallOutcome[]> {
  try {
    return Driver.of(scheduler).run(calls, execute, options);
  } catch (error) {
    return Promise.reject(error);
  }
}
