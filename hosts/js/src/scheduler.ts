// The scheduler: `submit` a batch, then feed every driver round to `step`. Every argument is
// checked before it crosses (see `validate.ts`); refused calls throw typed errors and change
// nothing; a refused `step` input is data (`errors`), and every other input applies.
//
// The component's verbs (WIT `turnstile:scheduler@0.3.0`, boundary 0.3.1) are `submit-batch`
// (a batch packed as two texts, ids and tools one per line, and two short lists by call index:
// `submit` builds it, refusing a newline in a name before anything crosses), `on-events`,
// `on-ended` and `next-releases`; the package's `step` is one round over them (see `stepRaw`):
// its inputs cross in the order of the old `step` (approvals, host settlements, grants,
// denials, questions asked and answered as `on-events`; ends ok, failed and rate-limited as
// `on-ended`'s three lists; cancellations and pauses as `on-events`), consecutive inputs of one
// verb in one crossing, then `next-releases(now)`, whose lists by kind of action are the step's
// outputs. The component names a refused input by what it was about (an entry, a batch, a key,
// the clock); the package maps it back to the input's list and position, which it can because
// it built the lists (see `Round`).
import type * as ws from './component/interfaces/turnstile-scheduler-scheduler.js';
import * as convert from './convert.js';
import { ResumeError, SubmitError } from './errors.js';
import { Held, type Instance } from './instance.js';
import type { Policy } from './turnstile.js';
import type { EntryStatus, InputError, InputKind, Reason, SavedState, Started, StepInputs, StepOutputs, SubmitErrorCode, Unrestored } from './types.js';
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
 * call named twice (here, or here and by its `args`), is refused with `invalid-arguments` (the
 * package's own check, before anything crosses: the component would refuse the whole batch as
 * `malformed-batch`). */
export interface SubmitOptions {
  arguments?: readonly (readonly [number, string])[];
  /** The batch's execution limit: an execution that has run this long is listed in a step's
   * `abort` (cause `deadline`). The scheduler keeps the deadline on the `now` of `step`. */
  executionMs?: number;
  /** Once an execution was aborted (deadline or cancel), how long it may still take: past it,
   * the scheduler settles it `timed-out`, frees its slot, and refuses its late end
   * (`given-up`). Default: it keeps its slot until it ends. */
  abortGraceMs?: number;
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

/** The top-level argument names of each tool with a key template (every member's of a key set,
 * each once, in written order); `undefined` when no tool has one (then no call's arguments are
 * looked at). */
function templatesOf(policy: Policy): Map<string, readonly string[]> | undefined {
  let out: Map<string, readonly string[]> | undefined;
  for (const tool of policy.tools()) {
    const members = tool.concurrency;
    const names = members.length === 1 ? members[0].arguments : [...new Set(members.flatMap((c) => c.arguments))];
    if (names.length) (out ??= new Map()).set(tool.name, names);
  }
  return out;
}

/** A shared key as one tool declares it: its key (a template when `template`), limit (4294967295
 * for an unbounded but spaced key, as `ToolPolicy` spells it) and delay. */
export interface SharedTool {
  readonly key: string;
  readonly limit: number;
  readonly delayMs: number;
  readonly template: boolean;
}

/** The tools with a shared key, by name; `undefined` when none is. A tool has at most one (the
 * config refuses two in a key set: `shared-key-in-set`). */
function sharedOf(policy: Policy): Map<string, SharedTool> | undefined {
  let out: Map<string, SharedTool> | undefined;
  for (const tool of policy.tools()) {
    const c = tool.concurrency.find((m) => m.shared);
    if (c !== undefined) (out ??= new Map()).set(tool.name, { key: c.key, limit: c.limit, delayMs: c.delayMs, template: c.arguments.length > 0 });
  }
  return out;
}

function rawArguments(value: unknown): ws.CallArguments[] {
  const list = array(value, 'options.arguments');
  return list.map((item, i) => {
    if (!Array.isArray(item) || item.length !== 2) fail(`options.arguments[${i}]`, 'a [call index, JSON text] pair', item);
    return { call: u32(item[0], `options.arguments[${i}][0]`), json: string(item[1], `options.arguments[${i}][1]`) };
  });
}

/** The component's refusal of a batch as the package's error. `malformed-batch` is the package's
 * own bug, never the host's: `submit` packs every batch, and refuses first what would make one
 * malformed (a newline in a name, an arguments index twice or of no call). */
function submitError(e: ws.SubmitError): Error {
  if (e.code === 'malformed-batch') return new Error(`turnstile: the package packed a malformed batch (${e.message}; a bug)`);
  const code: SubmitErrorCode = e.code;
  return new SubmitError(code, e.message);
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
const STEP_FIELDS = ['approve', 'settle', 'ask', 'answer', 'ok', 'failed', 'cancel', 'now', 'retry', 'pause', 'liftPause', 'granted', 'denied'] as const;

function retries(value: unknown): RawRetry[] {
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

function settlements(value: unknown): RawNotRun[] {
  if (value === undefined) return [];
  return array(value, 'inputs.settle').map((v, i) => {
    const s = record(v, `inputs.settle[${i}]`, ['entry', 'how']);
    return { entry: u64(s.entry, `inputs.settle[${i}].entry`), how: oneOf(s.how, `inputs.settle[${i}].how`, HOW) };
  });
}


/** @internal A host settlement as it crosses (`not-run`). */
export interface RawNotRun {
  entry: bigint;
  how: ws.NotRun;
}

/** @internal An execution that hit a rate limit, and when it may run again. */
export type RawRetry = ws.RateLimited;

/** @internal The inputs of one package `step`, checked: the old WIT `inputs` record, which the
 * driver builds (`Scheduler.stepRaw`). */
export interface RawInputs {
  approve: BigUint64Array;
  settle: readonly RawNotRun[];
  ask: BigUint64Array;
  answer: BigUint64Array;
  ok: BigUint64Array;
  failed: BigUint64Array;
  cancel: BigUint64Array;
  now: bigint | undefined;
  retry: readonly RawRetry[];
  pause: readonly ws.KeyPause[];
  liftPause?: readonly string[];
  granted: BigUint64Array;
  denied: BigUint64Array;
}

/** @internal What one package `step` decided, before conversion: the lists of `next-releases`
 * as the component returns them (each in its order; `start` and `retired` are `BigUint64Array`s,
 * possibly views of the glue's slab: build.mjs, patch 1), and the refused inputs with their list
 * and position (a refused clock first, as `now`). */
export interface RawOutputs extends Omit<ws.Releases, 'refused' | 'more'> {
  errors: InputError[];
}

const ENTRY = 0;
const BATCH = 1;
const KEY = 2;
type Subject = typeof ENTRY | typeof BATCH | typeof KEY;

/** The inputs of one package `step` on their way across, a crossing at a time, and the refusals
 * mapped back to the package's (list, position).
 *
 * The component names a refused input by what it was about, not by its position, and returns
 * the refusals of one crossing in input order. Within one crossing each subject (an entry, a
 * batch, a key) appears in one run of adjacent identical inputs at most: an input about a
 * subject already in the crossing starts a new crossing, unless it is identical (same list,
 * same payload) to the input just before it. Then each refusal belongs to exactly one input:
 * the refusals about a subject are its run's, and of a run of n identical inputs with k refused,
 * the refused are the last k (a refused input changed nothing, so the identical input after it
 * is refused too; the inputs before the first refused one applied). So `[r1, r1]` in `approve`
 * crosses once and its refusal is the second's, while `ask: [e], answer: [e]` crosses twice.
 *
 * A crossing of ends is one `on-ended` (its `ok`, `failed` and `rate-limited` lists, which the
 * component applies in that order: the order `stepOn` adds them in); a crossing of events is one
 * `on-events`, adjacent approvals one `approve` event. */
class Round {
  readonly #raw: ws.Scheduler;
  readonly errors: InputError[] = [];
  #ended = false;
  /** The crossing's inputs, in order. */
  #kinds: InputKind[] = [];
  #indexes: number[] = [];
  #subjects: Subject[] = [];
  #values: (bigint | string)[] = [];
  /** The payload that tells identical inputs on one subject apart (a `how`, an `until`). */
  #payloads: (bigint | string | undefined)[] = [];
  /** Whether the input continues the run of the one before it. */
  #continues: boolean[] = [];
  /** What crosses: events (an `approve` event's entries in `#approvals` until the flush), or
   * ends by kind. */
  #events: ws.Event[] = [];
  #approvals: bigint[][] = [];
  #ok: bigint[] = [];
  #failed: bigint[] = [];
  #limited: ws.RateLimited[] = [];
  readonly #entries = new Set<bigint>();
  readonly #batches = new Set<bigint>();
  readonly #keys = new Set<string>();
  /** Crossings made (`on-events` and `on-ended`). */
  crossings = 0;
  /** The step's `now`, given with its first crossing: the component judges every input at the
   * clock it comes with (a 429's wait from the 429, a cancel's grace from the cancel). */
  #now: bigint | undefined;

  constructor(raw: ws.Scheduler, now: bigint | undefined) {
    this.#raw = raw;
    this.#now = now;
  }

  approve(index: number, entry: bigint): void {
    this.#add(false, 'approve', index, ENTRY, entry);
    const events = this.#events;
    const last = events.length - 1;
    if (last >= 0 && events[last].tag === 'approve') this.#approvals[this.#approvals.length - 1].push(entry);
    else {
      events.push({ tag: 'approve', val: EMPTY_LIST });
      this.#approvals.push([entry]);
    }
  }

  event(kind: InputKind, index: number, event: ws.Event, subject: Subject, value: bigint | string, payload?: bigint | string): void {
    this.#add(false, kind, index, subject, value, payload);
    this.#events.push(event);
  }

  end(kind: 'ok' | 'failed', index: number, entry: bigint): void {
    this.#add(true, kind, index, ENTRY, entry);
    (kind === 'ok' ? this.#ok : this.#failed).push(entry);
  }

  retry(index: number, limited: ws.RateLimited): void {
    this.#add(true, 'retry', index, ENTRY, limited.entry, limited.until);
    this.#limited.push(limited);
  }

  /** Places an input in the crossing, sending the one gathered first when it must start a new one. */
  #add(ended: boolean, kind: InputKind, index: number, subject: Subject, value: bigint | string, payload?: bigint | string): void {
    let n = this.#kinds.length;
    if (n && ended !== this.#ended) {
      this.flush();
      n = 0;
    }
    this.#ended = ended;
    const seen = subject === ENTRY ? this.#entries : subject === BATCH ? this.#batches : this.#keys;
    let continues = false;
    if ((seen as Set<bigint | string>).has(value)) {
      const last = n - 1;
      if (this.#kinds[last] === kind && this.#subjects[last] === subject && this.#values[last] === value && this.#payloads[last] === payload) continues = true;
      else this.flush();
    }
    if (!continues) (seen as Set<bigint | string>).add(value);
    this.#kinds.push(kind);
    this.#indexes.push(index);
    this.#subjects.push(subject);
    this.#values.push(value);
    this.#payloads.push(payload);
    this.#continues.push(continues);
  }

  /** Sends what is gathered in one crossing and maps its refusals. */
  flush(): void {
    if (!this.#kinds.length) return;
    const raw = this.#raw;
    this.crossings++;
    const now = this.#now;
    this.#now = undefined;
    let refusals: ws.Refusal[];
    if (this.#ended) {
      refusals = raw.onEnded({ ok: BigUint64Array.from(this.#ok), failed: BigUint64Array.from(this.#failed), rateLimited: this.#limited }, now);
    } else {
      const events = this.#events;
      for (let i = 0, a = 0; i < events.length; i++) {
        const e = events[i];
        if (e.tag === 'approve') e.val = BigUint64Array.from(this.#approvals[a++]);
      }
      refusals = raw.onEvents(events, now);
    }
    // A clock that went back is refused first, and again by `next-releases`, which reports it.
    if (refusals.length && refusals[0].about.tag === 'clock') refusals.shift();
    if (refusals.length) this.#map(refusals);
    this.#events = [];
    this.#approvals = [];
    this.#ok = [];
    this.#failed = [];
    this.#limited = [];
    this.#kinds.length = this.#indexes.length = this.#subjects.length = this.#values.length = this.#payloads.length = this.#continues.length = 0;
    this.#entries.clear();
    this.#batches.clear();
    this.#keys.clear();
  }

  #map(refusals: ws.Refusal[]): void {
    const n = this.#kinds.length;
    let r = 0;
    for (let i = 0; i < n && r < refusals.length; ) {
      let j = i + 1;
      while (j < n && this.#continues[j]) j++;
      const subject = this.#subjects[i];
      const value = this.#values[i];
      let k = 0;
      while (k < j - i && r + k < refusals.length && about(refusals[r + k].about, subject, value)) k++;
      for (let t = j - k; t < j; t++) {
        const refusal = refusals[r++];
        this.errors.push({ input: this.#kinds[t], index: this.#indexes[t], code: refusal.code, message: refusal.message });
      }
      i = j;
    }
    if (r < refusals.length) unplaced(refusals.slice(r));
  }
}

function about(a: ws.About, subject: Subject, value: bigint | string): boolean {
  switch (a.tag) {
    case 'entry':
      return subject === ENTRY && a.val === value;
    case 'batch':
      return subject === BATCH && a.val === value;
    case 'key':
      return subject === KEY && a.val === value;
    default:
      return false;
  }
}

/** Refusals no input of the crossing can own: the package's bug, never the host's. */
function unplaced(rest: ws.Refusal[]): never {
  throw new Error(`turnstile: the component refused inputs the package cannot place (${rest.map((x) => `${x.about.tag} ${x.about.val} ${x.code}`).join(', ')}; a bug)`);
}

function entryEvents(round: Round, kind: 'ask' | 'answer' | 'granted' | 'denied', list: BigUint64Array): void {
  for (let i = 0; i < list.length; i++) {
    const entry = list[i];
    round.event(kind, i, { tag: kind, val: entry }, ENTRY, entry);
  }
}

/** One package `step` over the component's verbs (see `Round`); `crossings` counts the calls
 * into the component, `next-releases` included. A round of approvals only, or of ends (`ok`,
 * `failed`) only, about distinct entries, crosses in one call without `Round`'s bookkeeping (see
 * `soleRound`); `general` forces `Round` (test/rounds.test.mjs compares the two). @internal */
export function stepOn(raw: ws.Scheduler, inputs: RawInputs, general = false): RawOutputs & { crossings: number } {
  const sole = general ? undefined : soleRound(inputs);
  if (sole !== undefined) {
    const errors = sole === APPROVE_ONLY ? approvalsOnly(raw, inputs) : endsOnly(raw, inputs);
    return nextReleases(raw, inputs.now, errors, 2);
  }
  const round = new Round(raw, inputs.now);
  const approve = inputs.approve;
  for (let i = 0; i < approve.length; i++) round.approve(i, approve[i]);
  const settle = inputs.settle;
  for (let i = 0; i < settle.length; i++) {
    const { entry, how } = settle[i];
    round.event('settle', i, { tag: 'not-run', val: [entry, how] }, ENTRY, entry, how);
  }
  entryEvents(round, 'granted', inputs.granted);
  entryEvents(round, 'denied', inputs.denied);
  entryEvents(round, 'ask', inputs.ask);
  entryEvents(round, 'answer', inputs.answer);
  const ok = inputs.ok;
  for (let i = 0; i < ok.length; i++) round.end('ok', i, ok[i]);
  const failed = inputs.failed;
  for (let i = 0; i < failed.length; i++) round.end('failed', i, failed[i]);
  const retry = inputs.retry;
  for (let i = 0; i < retry.length; i++) round.retry(i, retry[i]);
  const cancel = inputs.cancel;
  for (let i = 0; i < cancel.length; i++) round.event('cancel', i, { tag: 'cancel', val: cancel[i] }, BATCH, cancel[i]);
  const pause = inputs.pause;
  for (let i = 0; i < pause.length; i++) {
    const p = pause[i];
    round.event('pause', i, { tag: 'pause', val: { key: p.key, until: p.until } }, KEY, p.key, p.until);
  }
  const lift = inputs.liftPause;
  if (lift) for (let i = 0; i < lift.length; i++) round.event('liftPause', i, { tag: 'lift-pause', val: lift[i] }, KEY, lift[i]);
  round.flush();
  return nextReleases(raw, inputs.now, round.errors, round.crossings + 1);
}

// --- rounds of one kind ---------------------------------------------------------------------
// Most rounds carry approvals only (a batch just submitted) or ends only (executions that
// returned). When their entries are distinct, `Round` would send them in one crossing and map
// each refusal to the one input about its entry; so do these, without `Round`'s six arrays and
// three sets per input: the lists cross as they are (`approve` is one event, `ok` and `failed`
// are `on-ended`'s lists). Linear in the round: distinctness is a check that the numbers ascend
// (as a driver's approvals do, and its ends mostly), else one set.

const APPROVE_ONLY = 1;
const ENDS_ONLY = 2;

/** Which one-kind round `inputs` is, if any. */
function soleRound(i: RawInputs): typeof APPROVE_ONLY | typeof ENDS_ONLY | undefined {
  if (i.settle.length || i.ask.length || i.answer.length || i.cancel.length || i.retry.length || i.pause.length || i.liftPause?.length || i.granted.length || i.denied.length) return undefined;
  const ends = i.ok.length + i.failed.length;
  if (ends === 0) return i.approve.length && distinct(i.approve, EMPTY_LIST) ? APPROVE_ONLY : undefined;
  return i.approve.length === 0 && distinct(i.ok, i.failed) ? ENDS_ONLY : undefined;
}

const EMPTY_LIST = new BigUint64Array(0);

/** Whether no number appears twice in `a` followed by `b`. */
function distinct(a: BigUint64Array, b: BigUint64Array): boolean {
  if (ascending(a, b)) return true;
  const seen = new Set<bigint>();
  for (let i = 0; i < a.length; i++) seen.add(a[i]);
  for (let i = 0; i < b.length; i++) seen.add(b[i]);
  return seen.size === a.length + b.length;
}

/** Whether `a` followed by `b` strictly ascends, read as 32-bit halves (no bigint per item). */
function ascending(a: BigUint64Array, b: BigUint64Array): boolean {
  last.hi = -1;
  last.lo = 0;
  return ascends(a) && ascends(b);
}

/** The last number `ascends` read, as halves. */
const last = { hi: -1, lo: 0 };
/** The 32-bit view of the last two buffers read: a driver lends the same buffers every round. */
const halves: { buffer: ArrayBufferLike | undefined; words: Uint32Array }[] = [
  { buffer: undefined, words: new Uint32Array(0) },
  { buffer: undefined, words: new Uint32Array(0) },
];

function wordsOf(list: BigUint64Array): Uint32Array {
  const buffer = list.buffer;
  for (const h of halves) if (h.buffer === buffer && h.words.length === buffer.byteLength >> 2) return h.words;
  halves[1] = halves[0];
  halves[0] = { buffer, words: new Uint32Array(buffer) };
  return halves[0].words;
}

/** Whether `list` strictly ascends from `last`; `last` is its last number then. */
function ascends(list: BigUint64Array): boolean {
  if (list.length === 0) return true;
  const w = wordsOf(list);
  let hi = last.hi;
  let lo = last.lo;
  const end = (list.byteOffset >> 2) + list.length * 2;
  for (let j = list.byteOffset >> 2; j < end; j += 2) {
    const h = w[j + 1];
    const l = w[j];
    if (h < hi || (h === hi && l <= lo)) return false;
    hi = h;
    lo = l;
  }
  last.hi = hi;
  last.lo = lo;
  return true;
}

function approvalsOnly(raw: ws.Scheduler, inputs: RawInputs): InputError[] {
  const list = inputs.approve;
  return soleErrors(raw.onEvents([{ tag: 'approve', val: list }], inputs.now), list, EMPTY_LIST, 'approve');
}

function endsOnly(raw: ws.Scheduler, inputs: RawInputs): InputError[] {
  return soleErrors(raw.onEnded({ ok: inputs.ok, failed: inputs.failed, rateLimited: NONE }, inputs.now), inputs.ok, inputs.failed, 'ok');
}

/** The refusals of a one-kind crossing of distinct entries (`a` then `b`; `b` is `failed` when
 * `a` is `ok`), each mapped to its input: they come in input order. */
function soleErrors(refusals: ws.Refusal[], a: BigUint64Array, b: BigUint64Array, kind: 'approve' | 'ok'): InputError[] {
  // A clock that went back is refused first, and again by `next-releases`, which reports it.
  let r = refusals.length && refusals[0].about.tag === 'clock' ? 1 : 0;
  const errors: InputError[] = [];
  const n = a.length + b.length;
  for (let j = 0; j < n && r < refusals.length; j++) {
    const entry = j < a.length ? a[j] : b[j - a.length];
    const refusal = refusals[r];
    if (refusal.about.tag !== 'entry' || refusal.about.val !== entry) continue;
    r++;
    errors.push(j < a.length ? { input: kind, index: j, code: refusal.code, message: refusal.message } : { input: 'failed', index: j - a.length, code: refusal.code, message: refusal.message });
  }
  if (r < refusals.length) unplaced(refusals.slice(r));
  return errors;
}

const NONE: never[] = [];

/** The most statuses one `inspect` result carries (WIT). */
const INSPECT_PART_MAX = 65536;

/** Two `list<u64>` results as one (either may be the glue's frozen empty list or a copy). */
function joinWords(a: BigUint64Array, b: BigUint64Array): BigUint64Array {
  const out = new BigUint64Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** `next-releases`, with the round's refusals (a refused clock first: the old `step` applied the
 * clock first) and its crossings. */
function nextReleases(raw: ws.Scheduler, now: bigint | undefined, errors: InputError[], crossings: number): RawOutputs & { crossings: number } {
  let r = raw.nextReleases(now);
  while (r.more) {
    // A round of more than 65536 actions crosses in parts (WIT `releases.more`): join them.
    const part = raw.nextReleases(now);
    crossings++;
    r = {
      refused: r.refused,
      abort: r.abort.concat(part.abort),
      pauseStore: r.pauseStore.concat(part.pauseStore),
      release: r.release.concat(part.release),
      settled: r.settled.concat(part.settled),
      acquire: r.acquire.concat(part.acquire),
      start: joinWords(r.start, part.start),
      retired: joinWords(r.retired, part.retired),
      wakeAt: part.wakeAt,
      more: part.more,
    };
  }
  const refused = r.refused;
  return {
    abort: r.abort,
    pauseStore: r.pauseStore,
    release: r.release,
    settled: r.settled,
    acquire: r.acquire,
    start: r.start,
    retired: r.retired,
    wakeAt: r.wakeAt,
    errors: refused === undefined ? errors : [{ input: 'now', index: 0, code: refused.code, message: refused.message }, ...errors],
    crossings,
  };
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
    const o = options === undefined ? undefined : record(options, 'options', ['arguments', 'executionMs', 'abortGraceMs']);
    const raw = o?.arguments;
    const args: ws.CallArguments[] = raw === undefined ? [] : rawArguments(raw);
    const limits: ws.Limits = {
      executionMs: o?.executionMs === undefined ? undefined : u32(o.executionMs, 'options.executionMs'),
      abortGraceMs: o?.abortGraceMs === undefined ? undefined : u32(o.abortGraceMs, 'options.abortGraceMs'),
    };
    const templates = this.#templates;
    // The batch as it crosses: ids and tools each one text, a newline after every name; fan-outs
    // and arguments by call index, only for the calls that have them.
    let ids = '';
    let tools = '';
    const fanOuts: ws.FanOut[] = [];
    for (let i = 0; i < calls.length; i++) {
      // Checked inline: a parameter name is only built for an error (this loop is per call).
      const call = calls[i];
      if (typeof call !== 'object' || call === null) fail(`calls[${i}]`, 'an object { id, tool, operations? }', call);
      const id = call.id;
      const tool = call.tool;
      if (typeof id !== 'string') fail(`calls[${i}].id`, 'a string', id);
      if (typeof tool !== 'string') fail(`calls[${i}].tool`, 'a string', tool);
      // No empty name, and no newline in an id or a tool name: a newline would end the name in
      // the packed texts (the component could only call the batch malformed, or read other calls).
      if (id === '' || tool === '' || id.includes('\n') || tool.includes('\n')) {
        throw new SubmitError('invalid-id', `call ${i + 1}: call ids and tool names are 1 to 256 bytes without a newline`);
      }
      ids += id + '\n';
      tools += tool + '\n';
      if (call.operations !== undefined) {
        const n = u32(call.operations, `calls[${i}].operations`);
        // An envelope of no operations has nothing to schedule (the component refuses it with
        // the same code; refused here, with the package's message, before anything crosses).
        if (n === 0) throw new SubmitError('invalid-operations', `call ${JSON.stringify(id)}: a fan-out call has at least 1 operation, got 0`);
        fanOuts.push({ call: i, operations: n });
      }
      if (templates !== undefined && call.args !== undefined) {
        const names = templates.get(tool);
        if (names !== undefined) {
          const text = argumentsText(call.args, names);
          if (text !== undefined) args.push({ call: i, json: text });
        }
      }
    }
    // A call's arguments are given once: a pair naming no call, or a call named twice (by two
    // pairs, or by a pair and its `args`), is refused before anything crosses (the component
    // would call the batch malformed).
    if (args.length) {
      const named = new Set<number>();
      for (const { call } of args) {
        if (call >= calls.length) throw new SubmitError('invalid-arguments', `arguments for call ${call}, but the batch has ${calls.length} calls`);
        if (named.has(call)) throw new SubmitError('invalid-arguments', `arguments for call ${call} given twice`);
        named.add(call);
      }
    }
    const sched = this.held.get();
    const s = this.held.instance.call(
      () => sched.submitBatch({ ids, tools, fanOuts, arguments: args }, limits),
      (payload) => submitError(payload as ws.SubmitError),
    );
    return new Submitted(s.batch, s.first, s.count, calls, fanOuts.length === 0);
  }

  /** One driver round: applies every input, each on its own, and says what to do. A refused input
   * is listed in `errors` (its list, position and code) and changed nothing. Settled entries
   * carry the component's sentence (`message`). */
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
        liftPause: i.liftPause === undefined ? undefined : array(i.liftPause, 'inputs.liftPause').map((k, n) => string(k, `inputs.liftPause[${n}]`)),
        granted: numbers(i.granted, 'inputs.granted'),
        denied: numbers(i.denied, 'inputs.denied'),
      }),
    );
  }

  /** @internal `step` with inputs already checked and outputs unconverted (the driver's path):
   * the inputs cross as `on-events` / `on-ended` (see `Round`), then `next-releases(now)`. */
  stepRaw(inputs: RawInputs, general = false): RawOutputs {
    const raw = this.held.get();
    return this.held.instance.call(() => stepOn(raw, inputs, general));
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
    return this.held.instance.call(() => {
      // A batch of more than 65536 entries is read in parts (WIT `inspect`'s offset), joined.
      let all = raw.inspect(batch, 0);
      for (let last = all?.length ?? 0; all !== undefined && last === INSPECT_PART_MAX; ) {
        const part = raw.inspect(batch, all.length) ?? [];
        last = part.length;
        all = all.concat(part);
      }
      return all;
    })?.map(convert.entryStatus);
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
    return convert.savedState(
      this.held.instance.call(() => {
        // An export of more than one part (WIT `saved-part`), joined; nothing runs between.
        const first = raw.unfinished(0);
        const state = first.state;
        for (let k = 1; k < first.parts; k++) convert.joinSaved(state, raw.unfinished(k).state);
        return state;
      }),
    );
  }

  /** Frees the scheduler; any later use throws `DisposedError`. */
  dispose(): void {
    this.held.dispose();
  }
  [Symbol.dispose](): void {
    this.dispose();
  }
}
