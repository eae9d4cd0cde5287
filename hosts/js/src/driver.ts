// The async driver: runs a batch on a scheduler, starting each execution when the scheduler
// releases it, reporting every end, and resolving with every call's outcome in written order.
//
// One `Driver` owns one scheduler's `nextReleases` queue, so several batches (several `run`s at
// once) can share a scheduler and its keys; `runBatch` uses one driver per scheduler.
import { entryLabels, type CallInput, type Reason, type Scheduler } from './index.js';

/** What `execute` gets: the entry to run and a signal that fires when its batch is cancelled. */
export interface Execution {
  /** `id` or `id#i`. */
  entry: string;
  call: CallInput;
  /** The operation index for a fan-out call. */
  operation?: number;
  /** Aborted when the batch is cancelled; the execution should stop soon. */
  signal: AbortSignal;
  /** Runs `answer` while the tool waits on a question; the execution keeps its slot. */
  question<T>(answer: () => Promise<T>): Promise<T>;
}

/** How one entry ended. */
export type EntryOutcome =
  | { entry: string; status: 'ok'; value: unknown; cancelled: boolean }
  | { entry: string; status: 'failed'; error: unknown; cancelled: boolean }
  | { entry: string; status: 'settled'; reason: Reason };

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
  /** Decides each entry (default: approve all); may be async (a permission prompt). */
  decide?: (entry: string, call: CallInput) => Decision | Promise<Decision>;
}

interface BatchRun {
  batch: number;
  /** The id of the batch's first entry; entry `first + i` is `labels[i]`. */
  first: number;
  labels: string[];
  calls: CallInput[];
  /** Each entry's call and operation index. */
  entries: Map<string, readonly [CallInput, number | undefined]>;
  execute: (execution: Execution) => Promise<unknown>;
  outcomes: Map<string, EntryOutcome>;
  total: number;
  cancelled: boolean;
  controller: AbortController;
  resolve: (outcomes: CallOutcome[]) => void;
  reject: (error: unknown) => void;
}

export class Driver {
  readonly scheduler: Scheduler;
  /** Every entry id of a running batch, with its batch. */
  readonly #byId = new Map<number, BatchRun>();

  constructor(scheduler: Scheduler) {
    this.scheduler = scheduler;
  }

  /** Submits `calls` as a batch, decides every entry, runs what is released, and resolves with
   * every call's outcome in written order. Rejects only on a host mistake (a TurnstileError). */
  async run(calls: CallInput[], execute: (execution: Execution) => Promise<unknown>, options: RunOptions = {}): Promise<CallOutcome[]> {
    const batch = this.scheduler.submitBatch(calls);
    const { first } = this.scheduler.batchEntries(batch);
    const labels = calls.flatMap((c) => entryLabels(c).map((label) => [label, c] as const));
    const done = new Promise<CallOutcome[]>((resolve, reject) => {
      const run: BatchRun = {
        batch,
        first,
        labels: labels.map(([label]) => label),
        calls,
        entries: new Map(calls.flatMap((c) => entryLabels(c).map((label, i) => [label, [c, c.operations === undefined ? undefined : i] as const]))),
        execute,
        outcomes: new Map(),
        total: labels.length,
        cancelled: false,
        controller: new AbortController(),
        resolve,
        reject,
      };
      for (let i = 0; i < labels.length; i++) this.#byId.set(first + i, run);
      const cancel = () => this.#cancel(run);
      if (options.signal?.aborted) queueMicrotask(cancel);
      else options.signal?.addEventListener('abort', cancel, { once: true });
      this.#decideAll(run, labels, options).catch(reject);
    });
    return done;
  }

  async #decideAll(run: BatchRun, labels: (readonly [string, CallInput])[], options: RunOptions): Promise<void> {
    if (!options.decide) {
      // Everything approved: one crossing for the whole batch.
      this.#dispatch(this.scheduler.approveNext(Array.from({ length: labels.length }, (_, i) => run.first + i)));
      return;
    }
    for (const [label, c] of labels) {
      if (run.cancelled) return;
      const decision = options.decide ? await options.decide(label, c) : 'approve';
      if (run.cancelled) return;
      if (decision === 'approve') this.scheduler.approve(label);
      else {
        this.scheduler.settle(label, decision === 'reject' ? 'rejected' : decision === 'skip' ? 'skipped' : 'failed');
        const reason: Reason = { tag: decision === 'reject' ? 'rejected' : decision === 'skip' ? 'skipped' : 'failed' };
        this.#record(run, { entry: label, status: 'settled', reason });
      }
      this.#pump();
    }
  }

  #cancel(run: BatchRun): void {
    if (run.cancelled || run.outcomes.size === run.total) return;
    run.cancelled = true;
    run.controller.abort();
    this.scheduler.cancelBatch(run.batch);
    this.#pump();
  }

  /** Drains the scheduler and dispatches every start and settlement to its batch. */
  #pump(): void {
    this.#dispatch(this.scheduler.nextReleaseIds());
  }

  #dispatch({ start, settle }: { start: Uint32Array; settle: { entry: number; reason: Reason }[] }): void {
    for (const s of settle) {
      const run = this.#byId.get(s.entry);
      if (run) this.#record(run, { entry: run.labels[s.entry - run.first], status: 'settled', reason: s.reason });
    }
    for (const id of start) {
      const run = this.#byId.get(id);
      if (run) this.#start(run, run.labels[id - run.first], id);
    }
  }

  #start(run: BatchRun, entry: string, id: number): void {
    const [c, operation] = run.entries.get(entry) ?? [{ id: entry, tool: '' }, undefined];
    const scheduler = this.scheduler;
    const execution: Execution = {
      entry,
      call: c,
      operation,
      signal: run.controller.signal,
      async question<T>(answer: () => Promise<T>): Promise<T> {
        scheduler.beginQuestion(entry);
        try {
          return await answer();
        } finally {
          scheduler.endQuestion(entry);
        }
      },
    };
    let promise: Promise<unknown>;
    try {
      promise = Promise.resolve(run.execute(execution));
    } catch (error) {
      promise = Promise.reject(error);
    }
    promise.then(
      (value) => this.#ended(run, id, { entry, status: 'ok', value, cancelled: run.cancelled }),
      (error) => this.#ended(run, id, { entry, status: 'failed', error, cancelled: run.cancelled }),
    );
  }

  /** Ends that arrived in this microtask turn, reported together in one crossing. */
  #ends: { run: BatchRun; id: number; outcome: EntryOutcome }[] = [];

  #ended(run: BatchRun, id: number, outcome: EntryOutcome): void {
    this.#ends.push({ run, id, outcome });
    if (this.#ends.length === 1) queueMicrotask(() => this.#flushEnds());
  }

  #flushEnds(): void {
    const ends = this.#ends;
    this.#ends = [];
    let releases;
    try {
      releases = this.scheduler.onEndedNext(
        ends.filter((e) => e.outcome.status === 'ok').map((e) => e.id),
        ends.filter((e) => e.outcome.status !== 'ok').map((e) => e.id),
      );
    } catch (error) {
      for (const { run } of ends) run.reject(error);
      return;
    }
    for (const { run, outcome } of ends) this.#record(run, outcome);
    this.#dispatch(releases);
  }

  #record(run: BatchRun, outcome: EntryOutcome): void {
    run.outcomes.set(outcome.entry, outcome);
    if (run.outcomes.size < run.total) return;
    for (let i = 0; i < run.labels.length; i++) this.#byId.delete(run.first + i);
    run.resolve(
      run.calls.map((c) => ({
        id: c.id,
        tool: c.tool,
        entries: entryLabels(c).map((label) => run.outcomes.get(label) as EntryOutcome),
      })),
    );
  }
}

const drivers = new WeakMap<Scheduler, Driver>();

/** Runs one batch on a scheduler (see `Driver.run`); batches run at once share its keys. */
export function runBatch(
  scheduler: Scheduler,
  calls: CallInput[],
  execute: (execution: Execution) => Promise<unknown>,
  options: RunOptions = {},
): Promise<CallOutcome[]> {
  let driver = drivers.get(scheduler);
  if (!driver) {
    driver = new Driver(scheduler);
    drivers.set(scheduler, driver);
  }
  return driver.run(calls, execute, options);
}
