// The scheduler: `submit` a batch, then feed every driver round to `step`. Every argument is
// checked before it crosses (see `validate.ts`); refused calls throw typed errors and change
// nothing; a refused `step` input is data (`errors`), and every other input applies.
import type * as ws from './component/interfaces/turnstile-scheduler-scheduler.js';
import * as convert from './convert.js';
import { ResumeError, SubmitError } from './errors.js';
import { Held, type Instance } from './instance.js';
import type { Policy } from './turnstile.js';
import type { EntryStatus, Reason, SavedState, Started, StepInputs, StepOutputs, Unrestored } from './types.js';
import { array, fail, numbers, oneOf, record, string, time, u32, u64 } from './validate.js';

/** A call as the model wrote it: `operations` for a fan-out envelope of that many operations
 * (at least 1); without it, a plain call. `args` is the call's arguments as the model wrote them
 * (parsed JSON, usually an object): for a tool whose key is a template (`"fs:{path}"`) the
 * fields it names make the call's key; for any other tool they are not looked at. Any value is
 * accepted: one that is not a plain object, or whose named fields JSON cannot write (a bigint, a
 * cycle), gives the call the template's own key (limited, never unbounded). Other fields are
 * kept and handed back to `execute` by the driver. */
export interface CallInput {
  id: string;
  tool: string;
  operations?: number;
  args?: unknown;
}

/** `Scheduler.submit`'s options. `arguments` is the component's own form, for a host that holds
 * a call's arguments as JSON text and wants it checked by the component exactly as written:
 * `[call index, JSON text]` pairs, added to those the calls' `args` make. The text crosses as
 * given (every field of it, however long: above 65536 bytes the batch is refused with
 * `too-large`; `args` sends only the fields a template names). An index of no call, or of a
 * call named twice (here, or here and by its `args`), is refused with `invalid-arguments`. */
export interface SubmitOptions {
  arguments?: readonly (readonly [number, string])[];
}

/** The most bytes of arguments one call may pass (the component refuses more). */
const ARGUMENTS_MAX = 65536;
const encoder = new TextEncoder();

/** The JSON text a call of a key template passes: only the fields the template names, in its
 * order. `undefined` (nothing passed: the call takes the template's own key) when `args` is not
 * a plain object, when reading or writing a named field throws (a bigint, a cycle, a throwing
 * getter, `toJSON` or proxy), or when the text is above 65536 bytes. Never throws: arguments are
 * the model's data, and odd data is not the host's mistake. @internal */
export function argumentsText(args: unknown, names: readonly string[]): string | undefined {
  if (typeof args !== 'object' || args === null) return undefined;
  try {
    const proto = Object.getPrototypeOf(args);
    if ((proto !== Object.prototype && proto !== null) || Array.isArray(args)) return undefined;
    const picked: Record<string, unknown> = Object.create(null);
    let any = false;
    for (const name of names) {
      if (Object.hasOwn(args, name)) {
        picked[name] = (args as Record<string, unknown>)[name];
        any = true;
      }
    }
    if (!any) return undefined;
    const text = JSON.stringify(picked);
    if (text.length * 3 > ARGUMENTS_MAX && encoder.encode(text).length > ARGUMENTS_MAX) return undefined;
    return text;
  } catch {
    return undefined;
  }
}

/** The top-level argument names of each tool whose key is a template; `undefined` when no tool's
 * is (then no call's arguments are looked at). */
function templatesOf(policy: Policy): Map<string, readonly string[]> | undefined {
  let out: Map<string, readonly string[]> | undefined;
  for (const tool of policy.tools()) {
    const names = tool.concurrency?.arguments;
    if (names !== undefined && names.length) (out ??= new Map()).set(tool.name, names);
  }
  return out;
}

/** A shared key as one tool declares it: its key (a template when `template`), limit and delay. */
export interface SharedTool {
  readonly key: string;
  readonly limit: number;
  readonly delayMs: number;
  readonly template: boolean;
}

/** The tools whose key is shared, by name; `undefined` when none is. */
function sharedOf(policy: Policy): Map<string, SharedTool> | undefined {
  let out: Map<string, SharedTool> | undefined;
  for (const tool of policy.tools()) {
    const c = tool.concurrency;
    if (c?.shared) (out ??= new Map()).set(tool.name, { key: c.key, limit: c.limit, delayMs: c.delayMs, template: c.arguments.length > 0 });
  }
  return out;
}

function rawArguments(value: unknown): [number, string][] {
  const list = array(value, 'options.arguments');
  return list.map((item, i) => {
    if (!Array.isArray(item) || item.length !== 2) fail(`options.arguments[${i}]`, 'a [call index, JSON text] pair', item);
    return [u32(item[0], `options.arguments[${i}][0]`), string(item[1], `options.arguments[${i}][1]`)];
  });
}

/** The component's sentence for an entry settled with `reason` (checked). @internal */
export function explainIn(instance: Instance, label: unknown, reason: unknown): string {
  string(label, 'label');
  return instance.explain(label as string, convert.reasonIn(reason, 'reason'));
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
const STEP_FIELDS = ['approve', 'settle', 'ask', 'answer', 'ok', 'failed', 'cancel', 'now', 'retry', 'pause', 'granted', 'denied'] as const;

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
  /** Argument names by tool, for the tools whose key is a template (the policy may be disposed
   * after the scheduler is made, so they are read once, here). */
  readonly #templates: Map<string, readonly string[]> | undefined;
  /** @internal The tools whose key is shared (`concurrency.shared`), read once like the
   * templates; the driver asks the store for their permits. */
  readonly sharedTools: Map<string, SharedTool> | undefined;

  /** A scheduler for a policy (from the same `Turnstile` instance). */
  constructor(policy: Policy);
  /** @internal */
  constructor(policy: Policy, raw: ws.Scheduler);
  constructor(policy: Policy, raw?: ws.Scheduler) {
    if (!(policy as unknown as { held?: unknown })?.held) fail('policy', 'a Policy', policy);
    const p = policy.held.get();
    const instance = policy.held.instance;
    this.#templates = templatesOf(policy);
    this.sharedTools = sharedOf(policy);
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
   * scheduler refuses, `TypeError` / `RangeError` for arguments of the wrong type or range. A
   * call's `args` make its key when its tool's key is a template (see `CallInput`); never an
   * error. */
  submit(calls: readonly CallInput[], options?: SubmitOptions): Submitted {
    array(calls, 'calls');
    const raw = options === undefined ? undefined : record(options, 'options', ['arguments']).arguments;
    const args: [number, string][] = raw === undefined ? [] : rawArguments(raw);
    const templates = this.#templates;
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
      if (templates !== undefined && call.args !== undefined) {
        const names = templates.get(tool);
        if (names !== undefined) {
          const text = argumentsText(call.args, names);
          if (text !== undefined) args.push([i, text]);
        }
      }
      if (i) {
        ids += '\n';
        tools += '\n';
      }
      ids += id;
      tools += tool;
    }
    const sched = this.held.get();
    const s = this.held.instance.call(
      () => sched.submit(ids, tools, operations, args),
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
        granted: numbers(i.granted, 'inputs.granted'),
        denied: numbers(i.denied, 'inputs.denied'),
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

  /** The sentence for an entry settled with `reason`, to show a user or hand back to the model
   * as the call's result (`"not run: the batch was cancelled"`); `label` is the entry's
   * (`call` or `call#i`). The component's text, so every host says the same; the driver's
   * settled outcomes and `CallSettledError` carry it as `message`. Works after `dispose`. */
  explain(label: string, reason: Reason): string {
    return explainIn(this.held.instance, label, reason);
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
