// The scheduler: `submit` a batch, then feed every driver round to `step`. Every argument is
// checked before it crosses (see `validate.ts`); refused calls throw typed errors and change
// nothing; a refused `step` input is data (`errors`), and every other input applies.
import type * as ws from './component/interfaces/turnstile-scheduler-scheduler.js';
import * as convert from './convert.js';
import { ResumeError, SubmitError } from './errors.js';
import { Held, type Instance } from './instance.js';
import type { Policy } from './turnstile.js';
import type { EntryStatus, SavedState, Started, StepInputs, StepOutputs, Unrestored } from './types.js';
import { array, fail, numbers, oneOf, record, string, time, u32, u64 } from './validate.js';

/** A call as the model wrote it: `operations` for a fan-out envelope of that many operations
 * (at least 1); without it, a plain call. Other fields (the call's arguments, say) are kept and
 * handed back to `execute` by the driver. */
export interface CallInput {
  id: string;
  tool: string;
  operations?: number;
}

/** What `Scheduler.resume` does with entries that had started and have no response. */
export interface ResumeOptions {
  started: Started;
}

/** A batch as `submit` numbered it: entries `first .. first + count - 1`, in written order, with
 * the mapping between entry numbers and labels (`id`, or `id#i` for an operation). */
export class Submitted {
  readonly batch: bigint;
  readonly first: bigint;
  readonly count: number;
  readonly calls: readonly CallInput[];
  /** Offset of each call's first entry, when some call fans out (else offset = call index). */
  #starts: Uint32Array | null | undefined;
  #byId: Map<string, number> | undefined;

  /** @internal `Scheduler.submit` makes these (`plain`: no call fans out, when known). */
  constructor(batch: bigint, first: bigint, count: number, calls: readonly CallInput[], plain?: boolean) {
    this.batch = batch;
    this.first = first;
    this.count = count;
    this.calls = calls;
    if (plain) this.#starts = null;
  }

  /** Every entry number of the batch, in written order (e.g. to approve them all). */
  entries(): BigUint64Array {
    const out = new BigUint64Array(this.count);
    let entry = this.first;
    for (let i = 0; i < out.length; i++, entry += 1n) out[i] = entry;
    return out;
  }

  /** The call index and operation index (undefined for a plain call) of the entry at `offset`
   * from `first`. @internal */
  at(offset: number): { index: number; operation: number | undefined } {
    const starts = this.callStarts();
    if (starts === null) return { index: offset, operation: undefined };
    let lo = 0;
    let hi = starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (starts[mid] <= offset) lo = mid;
      else hi = mid - 1;
    }
    return { index: lo, operation: this.calls[lo].operations === undefined ? undefined : offset - starts[lo] };
  }

  /** The entry's call (its index in `calls`) and operation index (none for a plain call), or
   * `undefined` when the number is not one of this batch's. */
  locate(entry: bigint): { call: CallInput; index: number; operation: number | undefined } | undefined {
    u64(entry, 'entry');
    const offset = entry - this.first;
    if (offset < 0n || offset >= BigInt(this.count)) return undefined;
    const { index, operation } = this.at(Number(offset));
    return { call: this.calls[index], index, operation };
  }

  /** The label of one of this batch's entries: `id`, or `id#i` for an operation. */
  label(entry: bigint): string | undefined {
    const found = this.locate(entry);
    if (!found) return undefined;
    return found.operation === undefined ? found.call.id : `${found.call.id}#${found.operation}`;
  }

  /** The entry number of a label of this batch, or `undefined`. */
  entry(label: string): bigint | undefined {
    string(label, 'label');
    if (!this.#byId) this.#byId = new Map(this.calls.map((c, i) => [c.id, i]));
    const hash = label.indexOf('#');
    const index = this.#byId.get(hash < 0 ? label : label.slice(0, hash));
    if (index === undefined) return undefined;
    const call = this.calls[index];
    const start = this.callStarts()?.[index] ?? index;
    if (hash < 0) return call.operations === undefined ? this.first + BigInt(start) : undefined;
    const digits = label.slice(hash + 1);
    if (call.operations === undefined || !/^(0|[1-9][0-9]*)$/.test(digits)) return undefined;
    const op = Number(digits);
    return op < call.operations ? this.first + BigInt(start + op) : undefined;
  }

  /** @internal */
  callStarts(): Uint32Array | null {
    if (this.#starts === undefined) {
      if (this.calls.every((c) => c.operations === undefined)) this.#starts = null;
      else {
        const starts = new Uint32Array(this.calls.length);
        let at = 0;
        this.calls.forEach((c, i) => {
          starts[i] = at;
          at += c.operations ?? 1;
        });
        this.#starts = starts;
      }
    }
    return this.#starts;
  }
}

const HOW = ['rejected', 'skipped', 'failed'] as const;
const STEP_FIELDS = ['approve', 'settle', 'ask', 'answer', 'ok', 'failed', 'cancel', 'now', 'retry', 'pause'] as const;

function retries(value: unknown): ws.RetryAfter[] {
  if (value === undefined) return [];
  return array(value, 'inputs.retry').map((v, i) => {
    const r = record(v, `inputs.retry[${i}]`, ['entry', 'until']);
    return { entry: u64(r.entry, `inputs.retry[${i}].entry`), until: time(r.until, `inputs.retry[${i}].until`) };
  });
}

function pauses(value: unknown): ws.KeyPause[] {
  if (value === undefined) return [];
  return array(value, 'inputs.pause').map((v, i) => {
    const p = record(v, `inputs.pause[${i}]`, ['key', 'until']);
    return { key: string(p.key, `inputs.pause[${i}].key`), until: time(p.until, `inputs.pause[${i}].until`) };
  });
}

function settlements(value: unknown): ws.HostSettlement[] {
  if (value === undefined) return [];
  return array(value, 'inputs.settle').map((v, i) => {
    const s = record(v, `inputs.settle[${i}]`, ['entry', 'how']);
    return { entry: u64(s.entry, `inputs.settle[${i}].entry`), how: oneOf(s.how, `inputs.settle[${i}].how`, HOW) };
  });
}

/** The scheduler: `submit` a batch, then feed every driver round to `step`. Batches, keys and
 * slots are shared by everything submitted to one scheduler. Disposable. */
export class Scheduler {
  /** @internal */
  readonly held: Held<ws.Scheduler>;

  /** A scheduler for a policy (from the same `Turnstile` instance). */
  constructor(policy: Policy);
  /** @internal */
  constructor(policy: Policy, raw: ws.Scheduler);
  constructor(policy: Policy, raw?: ws.Scheduler) {
    if (!(policy as unknown as { held?: unknown })?.held) fail('policy', 'a Policy', policy);
    const p = policy.held.get();
    const instance = policy.held.instance;
    this.held = new Held(instance, raw ?? instance.call(() => new instance.root.scheduler.Scheduler(p)), this, 'this scheduler');
  }

  /** Imports what `unfinished` exported into a fresh scheduler under `policy` (the same one or a
   * changed one): every live batch keeps its numbers. Calls the policy no longer allows are left
   * out and listed in `unrestored`; the host answers them itself. Throws `ResumeError`. */
  static resume(policy: Policy, state: SavedState, options: ResumeOptions): { scheduler: Scheduler; unrestored: Unrestored[] } {
    if (!(policy as unknown as { held?: unknown })?.held) fail('policy', 'a Policy', policy);
    const wit = convert.savedStateIn(state);
    const started = convert.started(record(options, 'options', ['started']).started, 'options.started');
    const p = policy.held.get();
    const instance: Instance = policy.held.instance;
    const [raw, unrestored] = instance.call(
      () => instance.root.scheduler.Scheduler.resume(p, wit, started),
      (payload) => new ResumeError((payload as ws.ResumeError).code, (payload as ws.ResumeError).message),
    );
    return { scheduler: new Scheduler(policy, raw), unrestored: convert.unrestored(unrestored) };
  }

  /** Adds a batch, in written order; all or nothing. Throws `SubmitError` for what the
   * scheduler refuses, `TypeError` / `RangeError` for arguments of the wrong type or range. */
  submit(calls: readonly CallInput[]): Submitted {
    array(calls, 'calls');
    const operations = new Uint32Array(calls.length);
    let ids = '';
    let tools = '';
    let fansOut = false;
    for (let i = 0; i < calls.length; i++) {
      // Checked inline: a parameter name is only built for an error (this loop is per call).
      const call = calls[i];
      if (typeof call !== 'object' || call === null) fail(`calls[${i}]`, 'an object { id, tool, operations? }', call);
      const id = call.id;
      const tool = call.tool;
      if (typeof id !== 'string') fail(`calls[${i}].id`, 'a string', id);
      if (typeof tool !== 'string') fail(`calls[${i}].tool`, 'a string', tool);
      // The ids and tools cross as two newline-joined strings, which cannot carry a newline or
      // tell one empty line from none: such a call is refused here with the guest's code.
      if (id === '' || tool === '' || id.includes('\n') || tool.includes('\n')) {
        throw new SubmitError('invalid-id', `call ${i + 1}: call ids and tool names are 1 to 256 bytes without a newline`);
      }
      if (call.operations !== undefined) {
        fansOut = true;
        const n = u32(call.operations, `calls[${i}].operations`);
        // `0` on the wire is a plain call, so an envelope of no operations is refused here with
        // the code the scheduler would give it.
        if (n === 0) throw new SubmitError('invalid-operations', `call ${JSON.stringify(id)}: a fan-out call has at least 1 operation, got 0`);
        operations[i] = n;
      }
      if (i) {
        ids += '\n';
        tools += '\n';
      }
      ids += id;
      tools += tool;
    }
    const raw = this.held.get();
    const s = this.held.instance.call(
      () => raw.submit(ids, tools, operations),
      (payload) => new SubmitError((payload as ws.SubmitError).code, (payload as ws.SubmitError).message),
    );
    return new Submitted(s.batch, s.first, s.count, calls, !fansOut);
  }

  /** One driver round: applies every input, each on its own, and says what to do. A refused input
   * is listed in `errors` (its list, position and code) and changed nothing. */
  step(inputs: StepInputs = {}): StepOutputs {
    const i = record(inputs, 'inputs', STEP_FIELDS);
    return convert.outputs(
      this.stepRaw({
        approve: numbers(i.approve, 'inputs.approve'),
        settle: settlements(i.settle),
        ask: numbers(i.ask, 'inputs.ask'),
        answer: numbers(i.answer, 'inputs.answer'),
        ok: numbers(i.ok, 'inputs.ok'),
        failed: numbers(i.failed, 'inputs.failed'),
        cancel: numbers(i.cancel, 'inputs.cancel'),
        now: i.now === undefined ? undefined : time(i.now, 'inputs.now'),
        retry: retries(i.retry),
        pause: pauses(i.pause),
      }),
    );
  }

  /** @internal `step` with inputs already checked and outputs unconverted (the driver's path). */
  stepRaw(inputs: ws.Inputs): ws.Outputs {
    const raw = this.held.get();
    return this.held.instance.call(() => raw.step(inputs));
  }

  /** The label of a live entry (`call` or `call#i`); `undefined` once its batch retired. */
  label(entry: bigint): string | undefined {
    u64(entry, 'entry');
    const raw = this.held.get();
    return this.held.instance.call(() => raw.label(entry));
  }

  /** Every entry of a live batch in written order, with why each approved one waits;
   * `undefined` for a batch that is not live. */
  inspect(batch: bigint): EntryStatus[] | undefined {
    u64(batch, 'batch');
    const raw = this.held.get();
    return this.held.instance.call(() => raw.inspect(batch))?.map(convert.entryStatus);
  }

  /** The state to persist for `Scheduler.resume`: every live batch. Plain data (with bigints). */
  unfinished(): SavedState {
    const raw = this.held.get();
    return convert.savedState(this.held.instance.call(() => raw.unfinished()));
  }

  /** Frees the scheduler; any later use throws `DisposedError`. */
  dispose(): void {
    this.held.dispose();
  }
  [Symbol.dispose](): void {
    this.dispose();
  }
}
