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
  readonly #byEntry = new Map<string, BatchRun>();

  constructor(scheduler: Scheduler) {
    this.scheduler = scheduler;
  }

  /** Submits `calls` as a batch, decides every entry, runs what is released, and resolves with
   * every call's outcome in written order. Rejects only on a host mistake (a TurnstileError). */
  async run(calls: CallInput[], execute: (execution: Execution) => Promise<unknown>, options: RunOptions = {}): Promise<CallOutcome[]> {
    const batch = this.scheduler.submitBatch(calls);
    const labels = calls.flatMap((c) => entryLabels(c).map((label) => [label, c] as const));
    const done = new Promise<CallOutcome[]>((resolve, reject) => {
      const run: BatchRun = {
        batch,
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
      for (const [label] of labels) this.#byEntry.set(label, run);
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
      this.scheduler.approveMany(labels.map(([label]) => label));
      this.#pump();
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
    const { start, settle } = this.scheduler.nextReleases();
    for (const s of settle) {
      const run = this.#byEntry.get(s.entry);
      if (run) this.#record(run, { entry: s.entry, status: 'settled', reason: s.reason });
    }
    for (const entry of start) {
      const run = this.#byEntry.get(entry);
      if (run) this.#start(run, entry);
    }
  }

  #start(run: BatchRun, entry: string): void {
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
      (value) => this.#ended(run, entry, { entry, status: 'ok', value, cancelled: run.cancelled }),
      (error) => this.#ended(run, entry, { entry, status: 'failed', error, cancelled: run.cancelled }),
    );
  }

  /** Ends that arrived in this microtask turn, reported together in one crossing. */
  #ends: { run: BatchRun; outcome: EntryOutcome }[] = [];

  #ended(run: BatchRun, entry: string, outcome: EntryOutcome): void {
    this.#ends.push({ run, outcome });
    if (this.#ends.length === 1) queueMicrotask(() => this.#flushEnds());
  }

  #flushEnds(): void {
    const ends = this.#ends;
    this.#ends = [];
    try {
      this.scheduler.onEndedMany(ends.map(({ outcome }) => ({ entry: outcome.entry, outcome: outcome.status === 'ok' ? 'ok' : 'failed' })));
    } catch (error) {
      for (const { run } of ends) run.reject(error);
      return;
    }
    for (const { run, outcome } of ends) this.#record(run, outcome);
    this.#pump();
  }

  #record(run: BatchRun, outcome: EntryOutcome): void {
    run.outcomes.set(outcome.entry, outcome);
    if (run.outcomes.size < run.total) return;
    for (const c of run.calls) for (const label of entryLabels(c)) this.#byEntry.delete(label);
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
