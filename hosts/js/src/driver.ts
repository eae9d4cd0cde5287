// The async driver: runs batches on a scheduler, starting each execution when the scheduler
// releases it, reporting every decision, question and end, and resolving each batch with every
// call's outcome in written order.
//
// One `Driver` per scheduler (`runBatch` keeps one; the package exports only `runBatch`) owns
// its `step` calls: everything the batches report within one microtask (approvals, settlements,
// questions, ends, cancellations) is sent in ONE `step`, and the outputs are dispatched to the
// batches they belong to. Each input is judged on its own, so a refused input fails only its own
// batch (with a `RefusedInputError`; the batch is then cancelled so that it frees its keys) and
// every other input still applies. A batch's state is dropped when `step` reports it `retired`,
// so memory is bounded by the live batches. Nothing else may call `step` on a scheduler that
// `runBatch` drives: the outputs would be lost to the driver.
import { RefusedInputError, type CallInput, type HostSettlement, type InputKind, type Reason, type Scheduler, type StepOutputs, type Submitted } from './index.js';

/** What `execute` gets: the entry to run and a signal that fires when its batch is cancelled. */
export interface Execution {
  /** The entry number (unique over the scheduler's life). */
  entry: bigint;
  /** `id`, or `id#i` for an operation. */
  label: string;
  call: CallInput;
  /** The operation index for a fan-out call. */
  operation?: number;
  /** Aborted when the batch is cancelled or fails; the execution should stop soon. */
  signal: AbortSignal;
  /** Runs `answer` while the tool waits on a question; the execution keeps its slot. */
  question<T>(answer: () => Promise<T>): Promise<T>;
}

/** How one entry ended. */
export type EntryOutcome =
  | { label: string; status: 'ok'; value: unknown; cancelled: boolean }
  | { label: string; status: 'failed'; error: unknown; cancelled: boolean }
  | { label: string; status: 'settled'; reason: Reason };

/** One call's outcome: its entries' outcomes in operation order. */
export interface CallOutcome {
  id: string;
  tool: string;
  entries: EntryOutcome[];
}

/** What the host decided about an entry before the batch runs. */
export type Decision = 'approve' | 'reject' | 'skip' | 'fail';

export interface RunOptions {
  /** Aborting cancels the batch: parked entries are settled, running ones are told to stop. */
  signal?: AbortSignal;
  /** Decides each entry in written order (default: approve all); may be async (a prompt). */
  decide?: (label: string, call: CallInput) => Decision | Promise<Decision>;
}

type Execute = (execution: Execution) => unknown;

interface BatchRun {
  submitted: Submitted;
  execute: Execute;
  /** By offset from `submitted.first`. */
  outcomes: (EntryOutcome | undefined)[];
  /** Made when an execution first reads its `signal` (an AbortController costs microseconds). */
  controller: AbortController | undefined;
  /** A cancellation was sent. */
  cancelled: boolean;
  /** The promise was settled (resolved at retirement, or rejected on the first error). */
  done: boolean;
  resolve: (outcomes: CallOutcome[]) => void;
  reject: (error: unknown) => void;
  /** Removes the listener on the caller's signal. */
  detach: () => void;
}

const labelOf = (call: CallInput, operation: number | undefined): string => (operation === undefined ? call.id : `${call.id}#${operation}`);

const SETTLE_HOW = { reject: 'rejected', skip: 'skipped', fail: 'failed' } as const;

const EMPTY = new BigUint64Array(0);

/** A list of numbers that grows in place; `view` lends it to one `step` without a copy (jco
 * copies it into the component's memory before `step` returns). */
class NumberList {
  #buffer = new BigUint64Array(16);
  length = 0;

  push(value: bigint): void {
    if (this.length === this.#buffer.length) {
      const grown = new BigUint64Array(this.length * 2);
      grown.set(this.#buffer);
      this.#buffer = grown;
    }
    this.#buffer[this.length++] = value;
  }
  at(index: number): bigint {
    return this.#buffer[index];
  }
  view(): BigUint64Array {
    return this.length ? this.#buffer.subarray(0, this.length) : EMPTY;
  }
}

/** The inputs of the next `step`, each with the batch it belongs to (for its errors). */
class Pending {
  readonly approve = new NumberList();
  readonly settle: HostSettlement[] = [];
  readonly ask = new NumberList();
  readonly answer = new NumberList();
  readonly ok = new NumberList();
  readonly failed = new NumberList();
  readonly cancel = new NumberList();
  readonly owners: Record<InputKind, BatchRun[]> = { approve: [], settle: [], ask: [], answer: [], ok: [], failed: [], cancel: [] };

  target(kind: InputKind, index: number): bigint {
    return kind === 'settle' ? this.settle[index].entry : this[kind].at(index);
  }

  clear(): void {
    const o = this.owners;
    this.approve.length = this.ask.length = this.answer.length = this.ok.length = this.failed.length = this.cancel.length = 0;
    this.settle.length = o.approve.length = o.settle.length = o.ask.length = o.answer.length = o.ok.length = o.failed.length = o.cancel.length = 0;
  }
}

export class Driver {
  readonly scheduler: Scheduler;
  /** Live batches in entry order (an entry's batch is found by binary search). */
  readonly #live: BatchRun[] = [];
  readonly #byBatch = new Map<bigint, BatchRun>();
  #pending = new Pending();
  /** The other buffer: the inputs of the step being dispatched, then reused. */
  #spare = new Pending();
  #scheduled = false;

  constructor(scheduler: Scheduler) {
    this.scheduler = scheduler;
  }

  /** Batches submitted and not yet retired (for diagnostics). */
  get liveBatches(): number {
    return this.#live.length;
  }

  /** Submits `calls` as a batch, decides every entry, runs what is released, and resolves with
   * every call's outcome in written order once the batch retires. Rejects with `SubmitError` when
   * the batch is refused, and with `RefusedInputError` when one of its inputs is refused. */
  run(calls: readonly CallInput[], execute: Execute, options: RunOptions = {}): Promise<CallOutcome[]> {
    let submitted: Submitted;
    try {
      submitted = this.scheduler.submit(calls);
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise<CallOutcome[]>((resolve, reject) => {
      const run: BatchRun = {
        submitted,
        execute,
        outcomes: new Array(submitted.count),
        controller: undefined,
        cancelled: false,
        done: false,
        resolve,
        reject,
        detach: () => {},
      };
      this.#insert(run);
      const signal = options.signal;
      if (signal?.aborted) this.#cancel(run);
      else if (signal) {
        const cancel = () => this.#cancel(run);
        signal.addEventListener('abort', cancel, { once: true });
        run.detach = () => signal.removeEventListener('abort', cancel);
      }
      if (run.cancelled) return;
      if (options.decide) this.#decideAll(run, options.decide).catch((error) => this.#fail(run, error));
      else {
        let entry = submitted.first;
        for (let i = 0; i < submitted.count; i++, entry += 1n) this.#push('approve', entry, run);
      }
    });
  }

  async #decideAll(run: BatchRun, decide: NonNullable<RunOptions['decide']>): Promise<void> {
    const { submitted } = run;
    for (let i = 0; i < submitted.count; i++) {
      const entry = submitted.first + BigInt(i);
      const { call, operation } = submitted.locate(entry)!;
      const label = labelOf(call, operation);
      const decision = await decide(label, call);
      if (run.cancelled || run.done) return;
      if (decision === 'approve') this.#push('approve', entry, run);
      else {
        const how = SETTLE_HOW[decision];
        if (!how) throw new TypeError(`decide returned ${JSON.stringify(decision)}: approve, reject, skip or fail`);
        run.outcomes[i] = { label, status: 'settled', reason: { tag: how } };
        this.#pushSettle(entry, how, run);
      }
    }
  }

  #pushSettle(entry: bigint, how: HostSettlement['how'], run: BatchRun): void {
    this.#pending.settle.push({ entry, how });
    this.#pending.owners.settle.push(run);
    this.#schedule();
  }

  #push(kind: Exclude<InputKind, 'settle'>, value: bigint, run: BatchRun): void {
    this.#pending[kind].push(value);
    this.#pending.owners[kind].push(run);
    this.#schedule();
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    queueMicrotask(() => this.#step());
  }

  /** Sends every input queued since the last step in one `step`, and dispatches the outputs. */
  #step(): void {
    this.#scheduled = false;
    const p = this.#pending;
    this.#pending = this.#spare;
    this.#spare = p;
    try {
      this.#dispatch(p);
    } finally {
      p.clear();
    }
  }

  #dispatch(p: Pending): void {
    let out: StepOutputs;
    try {
      out = this.scheduler.step({
        approve: p.approve.view(),
        settle: p.settle,
        ask: p.ask.view(),
        answer: p.answer.view(),
        ok: p.ok.view(),
        failed: p.failed.view(),
        cancel: p.cancel.view(),
      });
    } catch (error) {
      // A trap: the instance is gone, and every batch on it with it.
      this.#byBatch.clear();
      for (const run of this.#live.splice(0)) {
        run.detach();
        this.#fail(run, error);
      }
      return;
    }
    for (const s of out.settle) {
      const run = this.#find(s.entry);
      if (run) run.outcomes[Number(s.entry - run.submitted.first)] = { label: run.submitted.label(s.entry)!, status: 'settled', reason: s.reason };
    }
    for (const e of out.errors) {
      const run = p.owners[e.input][e.index];
      if (run) this.#fail(run, new RefusedInputError(e, p.target(e.input, e.index)));
    }
    for (const entry of out.start) {
      const run = this.#find(entry);
      if (run) this.#start(run, entry);
    }
    for (const batch of out.retired) this.#retire(batch);
  }

  #start(run: BatchRun, entry: bigint): void {
    if (run.done) {
      // The batch failed: its promise is settled, so nothing runs; the slot is handed back.
      this.#push('failed', entry, run);
      return;
    }
    const { call, operation } = run.submitted.locate(entry)!;
    const label = labelOf(call, operation);
    const execution: Execution = {
      entry,
      label,
      call,
      operation,
      get signal() {
        run.controller ??= new AbortController();
        if (run.cancelled || run.done) run.controller.abort();
        return run.controller.signal;
      },
      // A step applies `ask` before `answer`, yet a question asked after an answer never shares
      // its step: the answer's push queues the step's microtask (or finds it queued), and the
      // code that asks next resumes in a later microtask.
      question: async <T>(answer: () => Promise<T>): Promise<T> => {
        this.#push('ask', entry, run);
        try {
          return await answer();
        } finally {
          this.#push('answer', entry, run);
        }
      },
    };
    let promise: Promise<unknown>;
    try {
      promise = Promise.resolve(run.execute(execution));
    } catch (error) {
      promise = Promise.reject(error);
    }
    const offset = Number(entry - run.submitted.first);
    promise.then(
      (value) => {
        run.outcomes[offset] = { label, status: 'ok', value, cancelled: run.cancelled };
        this.#push('ok', entry, run);
      },
      (error) => {
        run.outcomes[offset] = { label, status: 'failed', error, cancelled: run.cancelled };
        this.#push('failed', entry, run);
      },
    );
  }

  #cancel(run: BatchRun): void {
    if (run.cancelled || !this.#byBatch.has(run.submitted.batch)) return;
    run.cancelled = true;
    run.controller?.abort();
    this.#push('cancel', run.submitted.batch, run);
  }

  /** Rejects the batch's promise with its first error and cancels the batch, so that its parked
   * entries free their keys for later batches; its running executions still report their ends. */
  #fail(run: BatchRun, error: unknown): void {
    if (run.done) return;
    run.done = true;
    run.reject(error);
    this.#cancel(run);
  }

  #retire(batch: bigint): void {
    const run = this.#byBatch.get(batch);
    if (!run) return;
    this.#byBatch.delete(batch);
    this.#live.splice(this.#index(run.submitted.first), 1);
    run.detach();
    if (run.done) return;
    run.done = true;
    const { calls } = run.submitted;
    const outcomes: CallOutcome[] = [];
    let at = 0;
    for (const c of calls) {
      const n = c.operations ?? 1;
      const entries = run.outcomes.slice(at, at + n);
      at += n;
      if (entries.some((e) => e === undefined)) {
        run.reject(new Error(`turnstile driver: batch ${batch} retired with call ${c.id} unanswered`));
        return;
      }
      outcomes.push({ id: c.id, tool: c.tool, entries: entries as EntryOutcome[] });
    }
    run.resolve(outcomes);
  }

  #insert(run: BatchRun): void {
    this.#byBatch.set(run.submitted.batch, run);
    const at = this.#index(run.submitted.first);
    this.#live.splice(at, 0, run);
  }

  /** The position of the first live batch whose `first` is not below `first`. */
  #index(first: bigint): number {
    let lo = 0;
    let hi = this.#live.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#live[mid].submitted.first < first) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** The live batch holding an entry. */
  #find(entry: bigint): BatchRun | undefined {
    const live = this.#live;
    let lo = 0;
    let hi = live.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (live[mid].submitted.first <= entry) lo = mid;
      else hi = mid - 1;
    }
    const run = live[lo];
    return run && entry >= run.submitted.first && entry - run.submitted.first < BigInt(run.submitted.count) ? run : undefined;
  }
}

const drivers = new WeakMap<Scheduler, Driver>();

/** Runs one batch on a scheduler (see `Driver.run`) with the scheduler's one driver; batches run
 * at once share its keys. */
export function runBatch(scheduler: Scheduler, calls: readonly CallInput[], execute: Execute, options: RunOptions = {}): Promise<CallOutcome[]> {
  let driver = drivers.get(scheduler);
  if (!driver) {
    driver = new Driver(scheduler);
    drivers.set(scheduler, driver);
  }
  return driver.run(calls, execute, options);
}
