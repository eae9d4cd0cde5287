// The boundary between jco's generated types (`{ tag, val }` variants) and the package's own
// (`types.ts`). Records whose shape is the same are typed, not copied: the compiler checks here
// that jco's still fit, so a jco upgrade that changes one fails the build instead of the API.
// Everything that comes in from the host (a saved state) is validated on the way.
import type * as wc from './component/interfaces/turnstile-scheduler-config.js';
import type * as ws from './component/interfaces/turnstile-scheduler-scheduler.js';
import type { Concurrency, Diagnostic, EntryState, EntryStatus, Limits, PermitRequest, Reason, SavedCall, SavedEntryState, SavedState, Settled, Started, StepOutputs, ToolPolicy, Unrestored, Wait } from './types.js';
import type { RawOutputs } from './scheduler.js';
import type { CallOutcome, EntryOutcome } from './driver.js';
import { RestoredError } from './errors.js';
import { array, boolean, oneOf, record, string, u32, u64 } from './validate.js';

export const diagnostics = (list: wc.Diagnostic[]): Diagnostic[] => list;
/** The limit of a key that is unbounded but spaced (or capped), as `ToolPolicy` spells it: the
 * component's `none`. */
export const UNBOUNDED = 4294967295;

function concurrency(c: wc.Concurrency): Concurrency {
  return {
    key: c.key,
    limit: c.limit ?? UNBOUNDED,
    delayMs: c.delayMs,
    rates: c.rates.map((w) => ({ count: w.count, perMs: w.perMs, burst: w.burst })),
    burst: c.burst,
    weight: c.weight,
    retries: c.retries,
    maxWaitMs: c.maxWaitMs,
    arguments: c.arguments,
    shared: c.shared,
    ...(c.adaptMin === undefined ? {} : { adaptMin: c.adaptMin }),
    ...(c.path === undefined ? {} : { path: c.path }),
  };
}

export function toolPolicy(p: wc.ToolPolicy): ToolPolicy {
  return { name: p.name, concurrency: p.concurrency.map(concurrency), fanOut: p.fanOut, onError: p.onError };
}
export const unrestored = (list: ws.Unrestored[]): Unrestored[] => list;

export function reason(r: ws.Reason): Reason {
  switch (r.tag) {
    case 'stopped':
      return { kind: 'stopped', after: r.val };
    case 'rate-limited':
      return { kind: 'rate-limited', retries: r.val };
    case 'timed-out':
      return { kind: 'timed-out', cause: r.val };
    default:
      return { kind: r.tag };
  }
}

const REASONS = ['rejected', 'skipped', 'failed', 'cancelled', 'stopped', 'interrupted', 'rate-limited', 'timed-out'] as const;

/** A reason the package made (trusted) as the component's. */
export function witReason(r: Reason): ws.Reason {
  switch (r.kind) {
    case 'stopped':
      return { tag: 'stopped', val: r.after };
    case 'rate-limited':
      return { tag: 'rate-limited', val: r.retries };
    case 'timed-out':
      return { tag: 'timed-out', val: r.cause };
    default:
      return { tag: r.kind };
  }
}

/** A reason as the host gives it (a saved state, `explain`), checked field by field. */
export function reasonIn(value: unknown, name: string): ws.Reason {
  const r = record(value, name, ['kind', 'after', 'retries', 'cause']);
  const kind = oneOf(r.kind, `${name}.kind`, REASONS);
  if (kind !== 'stopped' && r.after !== undefined) throw new TypeError(`${name}.after is only for kind 'stopped'`);
  if (kind !== 'rate-limited' && r.retries !== undefined) throw new TypeError(`${name}.retries is only for kind 'rate-limited'`);
  if (kind !== 'timed-out' && r.cause !== undefined) throw new TypeError(`${name}.cause is only for kind 'timed-out'`);
  if (kind === 'timed-out') return { tag: 'timed-out', val: oneOf(r.cause, `${name}.cause`, ['deadline', 'cancel'] as const) };
  if (kind === 'stopped') return { tag: 'stopped', val: u32(r.after, `${name}.after`, 1) };
  if (kind === 'rate-limited') return { tag: 'rate-limited', val: u32(r.retries, `${name}.retries`) };
  return { tag: kind };
}

/** A time the component reported (u64 milliseconds) as a JS number. */
const ms = (t: bigint): number => Number(t);

export function outputs(out: RawOutputs): StepOutputs {
  const settled = out.settled;
  const settle: Settled[] = new Array(settled.length);
  for (let i = 0; i < settle.length; i++) settle[i] = { entry: settled[i].entry, reason: reason(settled[i].reason), message: settled[i].message };
  const result: StepOutputs = {
    abort: out.abort,
    // Copies: the glue's lists may be views of its slab (build.mjs, patch 1); a host's are its own.
    start: out.start.slice(),
    settle,
    errors: out.errors,
    retired: out.retired.slice(),
    acquire: BigUint64Array.from(out.acquire, (r) => r.entry),
    requests: out.acquire.map((r) => {
      const request: PermitRequest = { entry: r.entry, key: r.key, delayMs: r.delayMs, rates: r.rates.map((w) => ({ count: w.count, perMs: w.perMs, burst: w.burst })), weight: r.weight };
      if (r.limit !== undefined) request.limit = r.limit;
      return request;
    }),
    release: BigUint64Array.from(out.release, (p) => p.entry),
    pauseStore: out.pauseStore.map((p) => ({ key: p.key, until: ms(p.until) })),
  };
  if (out.wakeAt !== undefined) result.wakeAt = ms(out.wakeAt);
  return result;
}

function state(s: ws.State): EntryState {
  switch (s.tag) {
    case 'ended':
      return { kind: 'ended', outcome: s.val };
    case 'settled':
      return { kind: 'settled', reason: reason(s.val) };
    case 'aborted':
      return { kind: 'aborted', cause: s.val };
    default:
      return { kind: s.tag };
  }
}

function limitsIn(value: unknown, name: string): ws.Limits {
  if (value === undefined) return {};
  const l = record(value, name, ['executionMs', 'abortGraceMs']);
  return {
    executionMs: l.executionMs === undefined ? undefined : u32(l.executionMs, `${name}.executionMs`),
    abortGraceMs: l.abortGraceMs === undefined ? undefined : u32(l.abortGraceMs, `${name}.abortGraceMs`),
  };
}

function wait(w: ws.Wait): Wait {
  switch (w.tag) {
    case 'batch-not-approved':
      return { kind: 'batch-not-approved', pending: w.val };
    case 'key-full':
      return { kind: 'key-full', key: w.val.key, limit: w.val.limit, running: w.val.running };
    case 'behind':
      return { kind: 'behind', label: w.val.label, key: w.val.key };
    case 'key-paused':
    case 'key-spacing':
      return { kind: w.tag, key: w.val.key, until: ms(w.val.until) };
    case 'retry-at':
      return { kind: 'retry-at', until: ms(w.val) };
    case 'permit-requested':
    case 'permit-granted':
      return { kind: w.tag, key: w.val };
  }
}

export function entryStatus(s: ws.EntryStatus): EntryStatus {
  const out: EntryStatus = { entry: s.entry, label: s.label, tool: s.tool, keys: s.keys, state: state(s.state) };
  if (s.wait !== undefined) out.wait = wait(s.wait);
  if (s.why !== undefined) out.why = s.why;
  return out;
}

function saved(s: ws.Saved): SavedEntryState {
  switch (s.tag) {
    case 'started':
      return { kind: 'started' };
    case 'ended':
      return { kind: 'ended', outcome: s.val };
    case 'settled':
      return { kind: 'settled', reason: reason(s.val) };
  }
}

function savedLimits(l: ws.Limits): Limits {
  const out: Limits = {};
  if (l.executionMs !== undefined) out.executionMs = l.executionMs;
  if (l.abortGraceMs !== undefined) out.abortGraceMs = l.abortGraceMs;
  return out;
}

export function savedState(s: ws.SavedState): SavedState {
  return {
    version: s.version,
    policy: s.policy,
    nextBatch: s.nextBatch,
    nextEntry: s.nextEntry,
    batches: s.batches.map((b) => ({
      batch: b.batch,
      first: b.first,
      cancelled: b.cancelled,
      limits: savedLimits(b.limits),
      calls: b.calls.map((c) => {
        const call: SavedState['batches'][number]['calls'][number] = { id: c.id, tool: c.tool, entries: c.entries.map((e) => ({ operation: e.operation, state: saved(e.state) })), keys: c.keys };
        if (c.operations !== undefined) call.operations = c.operations;
        return call;
      }),
    })),
  };
}

/** Appends the batches of an export's next part to `into` (WIT `saved-part`): a batch split
 * between the two is made one. */
export function joinSaved(into: ws.SavedState, part: ws.SavedState): void {
  let batches = part.batches;
  const last = into.batches[into.batches.length - 1];
  if (last !== undefined && batches.length > 0 && batches[0].batch === last.batch) {
    last.calls = last.calls.concat(batches[0].calls);
    batches = batches.slice(1);
  }
  into.batches = into.batches.concat(batches);
}

function savedIn(value: unknown, name: string): ws.Saved {
  const s = record(value, name, ['kind', 'outcome', 'reason']);
  const kind = oneOf(s.kind, `${name}.kind`, ['started', 'ended', 'settled'] as const);
  if (kind === 'started') {
    if (s.outcome !== undefined || s.reason !== undefined) throw new TypeError(`${name}: 'started' has no outcome or reason`);
    return { tag: 'started' };
  }
  if (kind === 'ended') {
    if (s.reason !== undefined) throw new TypeError(`${name}: 'ended' has no reason`);
    return { tag: 'ended', val: oneOf(s.outcome, `${name}.outcome`, ['ok', 'failed'] as const) };
  }
  if (s.outcome !== undefined) throw new TypeError(`${name}: 'settled' has no outcome`);
  return { tag: 'settled', val: reasonIn(s.reason, `${name}.reason`) };
}

/** A saved call's keys as the host gives them back: `keys` (a list of names), or a state saved
 * by 0.2's `key` (one name: `[key]`), never both; neither is none (a state saved before keys
 * from arguments, or a call whose tool has no key template: a call of a key template then takes
 * the template's own key). */
function savedKeysIn(keys: unknown, key: unknown, name: string): string[] {
  if (key === undefined) return keys === undefined ? [] : array(keys, `${name}.keys`).map((k, i) => string(k, `${name}.keys[${i}]`));
  if (keys !== undefined) throw new TypeError(`${name} has both keys and key (a state saved by 0.2): give one`);
  return [string(key, `${name}.key`)];
}

/** A call of a saved state the host gave back (checked by `savedStateIn`) as a `SavedCall`: one
 * saved by 0.2 (`key`, or no keys at all) with its `keys`. */
export function savedCall(c: SavedCall): SavedCall {
  const old = c as SavedCall & { key?: string };
  if (old.key === undefined) return Array.isArray(old.keys) ? c : { ...c, keys: [] };
  const { key, ...rest } = old;
  return { ...rest, keys: [key] };
}

/** A saved state as the host gives it back, checked field by field. */
export function savedStateIn(value: unknown, name = 'state'): ws.SavedState {
  const s = record(value, name, ['version', 'policy', 'nextBatch', 'nextEntry', 'batches']);
  return {
    version: u32(s.version, `${name}.version`),
    policy: u64(s.policy, `${name}.policy`),
    nextBatch: u64(s.nextBatch, `${name}.nextBatch`),
    nextEntry: u64(s.nextEntry, `${name}.nextEntry`),
    batches: array(s.batches, `${name}.batches`).map((bv, i) => {
      const bn = `${name}.batches[${i}]`;
      const b = record(bv, bn, ['batch', 'first', 'cancelled', 'limits', 'calls']);
      return {
        batch: u64(b.batch, `${bn}.batch`),
        first: u64(b.first, `${bn}.first`),
        cancelled: boolean(b.cancelled, `${bn}.cancelled`),
        limits: limitsIn(b.limits, `${bn}.limits`),
        calls: array(b.calls, `${bn}.calls`).map((cv, j) => {
          const cn = `${bn}.calls[${j}]`;
          const c = record(cv, cn, ['id', 'tool', 'operations', 'entries', 'keys', 'key']);
          return {
            id: string(c.id, `${cn}.id`),
            tool: string(c.tool, `${cn}.tool`),
            operations: c.operations === undefined ? undefined : u32(c.operations, `${cn}.operations`),
            keys: savedKeysIn(c.keys, c.key, cn),
            entries: array(c.entries, `${cn}.entries`).map((ev, k) => {
              const en = `${cn}.entries[${k}]`;
              const e = record(ev, en, ['operation', 'state']);
              return { operation: u32(e.operation, `${en}.operation`), state: savedIn(e.state, `${en}.state`) };
            }),
          };
        }),
      };
    }),
  };
}

export const started = (value: unknown, name: string): Started => oneOf(value, name, ['run-again', 'interrupt'] as const);

// --- the snapshot's JSON (hosts/DRIVERS.md, "Persistence") ---------------------------------
// One text in both packages: fields in a fixed order, no spaces, u64 numbers as decimal strings,
// and every character outside printable ASCII escaped (`\uXXXX`, lowercase), as Python's
// `json.dumps(..., separators=(",", ":"))` writes it.

/** `JSON.stringify`'s text with non-ASCII escaped like Python's `ensure_ascii`. */
export function ascii(text: string): string {
  return text.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

const str = (s: string): string => ascii(JSON.stringify(s));

/** What in `value` JSON cannot carry (`"a Map"`, `"the number NaN"`, `"a cycle"`), or
 * `undefined` for JSON data: null, booleans, finite numbers, strings, arrays and plain objects
 * of those (an object's property whose value is `undefined` is left out, as `JSON.stringify`
 * does), or `undefined` as the whole value (nothing returned). What the driver refuses to save
 * (hosts/DRIVERS.md, "Persistence"). */
export function notJson(value: unknown): string | undefined {
  return value === undefined ? undefined : notJsonIn(value, []);
}

function notJsonIn(v: unknown, open: object[]): string | undefined {
  if (v === null || typeof v === 'boolean' || typeof v === 'string') return undefined;
  if (typeof v === 'number') return Number.isFinite(v) ? undefined : `the number ${v}`;
  if (typeof v !== 'object') return v === undefined ? 'undefined in an array' : `a ${typeof v}`;
  if (open.includes(v)) return 'a cycle';
  const proto = Object.getPrototypeOf(v) as object | null;
  const array = Array.isArray(v);
  if (!array && proto !== Object.prototype && proto !== null) return `a ${(v.constructor as { name?: string } | undefined)?.name || 'object'}`;
  open.push(v);
  try {
    if (array) {
      for (let i = 0; i < v.length; i++) {
        const bad = notJsonIn(v[i], open);
        if (bad !== undefined) return bad;
      }
      return undefined;
    }
    for (const item of Object.values(v)) {
      if (item === undefined) continue;
      const bad = notJsonIn(item, open);
      if (bad !== undefined) return bad;
    }
    return undefined;
  } finally {
    open.pop();
  }
}

/** `,"value":X`, or nothing when there is no value (`undefined`: it comes back `undefined`). */
export function valueField(value: unknown): string {
  return value === undefined ? '' : `,"value":${valueJson(value)}`;
}

/** A value as JSON; what JSON cannot hold (a bigint, a function, a cycle) is saved as its
 * string (a driver with `persist` refuses such values at their end: `notJson`). */
export function valueJson(value: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch {
    text = undefined;
  }
  return text === undefined ? str(String(value)) : ascii(text);
}

/** An error as `{name, message}`. */
export function errorJson(error: unknown): string {
  const e = error as { name?: unknown; message?: unknown } | null | undefined;
  const name = typeof e?.name === 'string' ? e.name : 'Error';
  const message = typeof e?.message === 'string' ? e.message : String(error);
  return `{"name":${str(name)},"message":${str(message)}}`;
}

/** A reason as the snapshot writes it: `"rejected"`, `{"stopped":1}`, `{"timed-out":"cancelled"}`. */
export function reasonJson(r: Reason): string {
  if (r.kind === 'stopped') return `{"stopped":${r.after}}`;
  if (r.kind === 'rate-limited') return `{"rate-limited":${r.retries}}`;
  if (r.kind === 'timed-out') return `{"timed-out":"${r.cause === 'cancel' ? 'cancelled' : 'deadline'}"}`;
  return `"${r.kind}"`;
}

function savedEntryJson(s: SavedEntryState): string {
  if (s.kind === 'started') return '"started"';
  if (s.kind === 'ended') return `{"ended":"${s.outcome}"}`;
  return `{"settled":${reasonJson(s.reason)}}`;
}

/** `Scheduler.unfinished()` with the WIT's names. */
export function stateJson(s: SavedState): string {
  const batches = s.batches.map((b) => {
    const limits: string[] = [];
    if (b.limits?.executionMs !== undefined) limits.push(`"execution-ms":${b.limits.executionMs}`);
    if (b.limits?.abortGraceMs !== undefined) limits.push(`"abort-grace-ms":${b.limits.abortGraceMs}`);
    const calls = b.calls.map((c) => {
      let out = `{"id":${str(c.id)},"tool":${str(c.tool)}`;
      if (c.operations !== undefined) out += `,"operations":${c.operations}`;
      // One key is written `"key"`, as 0.2 wrote it (such a state still resumes there); a key
      // set's `"keys"`; none, nothing.
      if (c.keys.length === 1) out += `,"key":${str(c.keys[0])}`;
      else if (c.keys.length > 1) out += `,"keys":[${c.keys.map(str).join(',')}]`;
      return `${out},"entries":[${c.entries.map((e) => `{"operation":${e.operation},"state":${savedEntryJson(e.state)}}`).join(',')}]}`;
    });
    return `{"batch":"${b.batch}","first":"${b.first}","cancelled":${b.cancelled},"limits":{${limits.join(',')}},"calls":[${calls.join(',')}]}`;
  });
  return `{"version":${s.version},"policy":"${s.policy}","next-batch":"${s.nextBatch}","next-entry":"${s.nextEntry}","batches":[${batches.join(',')}]}`;
}

const U64_TEXT = /^(0|[1-9][0-9]{0,19})$/;

function u64Text(value: unknown, name: string): bigint {
  if (typeof value !== 'string' || !U64_TEXT.test(value) || BigInt(value) > 0xffff_ffff_ffff_ffffn) throw new TypeError(`${name} must be a u64 as a decimal string, got ${JSON.stringify(value)}`);
  return BigInt(value);
}

/** A reason as the snapshot writes it, read back. */
export function reasonFromJson(value: unknown, name: string): Reason {
  if (typeof value === 'string') {
    const kind = oneOf(value, name, ['rejected', 'skipped', 'failed', 'cancelled', 'interrupted'] as const);
    return { kind };
  }
  const r = record(value, name, ['stopped', 'rate-limited', 'timed-out']);
  const keys = Object.keys(r);
  if (keys.length !== 1) throw new TypeError(`${name} must have exactly one field, got ${keys.length}`);
  if (r.stopped !== undefined) return { kind: 'stopped', after: u32(r.stopped, `${name}.stopped`) };
  if (r['rate-limited'] !== undefined) return { kind: 'rate-limited', retries: u32(r['rate-limited'], `${name}.rate-limited`) };
  const cause = oneOf(r['timed-out'], `${name}.timed-out`, ['deadline', 'cancelled'] as const);
  return { kind: 'timed-out', cause: cause === 'cancelled' ? 'cancel' : 'deadline' };
}

function savedEntryFromJson(value: unknown, name: string): SavedEntryState {
  if (value === 'started') return { kind: 'started' };
  const s = record(value, name, ['ended', 'settled']);
  if (s.ended !== undefined) return { kind: 'ended', outcome: oneOf(s.ended, `${name}.ended`, ['ok', 'failed'] as const) };
  if (s.settled !== undefined) return { kind: 'settled', reason: reasonFromJson(s.settled, `${name}.settled`) };
  throw new TypeError(`${name} must be "started", {"ended": ...} or {"settled": ...}`);
}

/** The snapshot's `state` read back as `SavedState` (checked again by `Scheduler.resume`). */
export function stateFromJson(value: unknown, name = 'snapshot.state'): SavedState {
  const s = record(value, name, ['version', 'policy', 'next-batch', 'next-entry', 'batches']);
  return {
    version: u32(s.version, `${name}.version`),
    policy: u64Text(s.policy, `${name}.policy`),
    nextBatch: u64Text(s['next-batch'], `${name}.next-batch`),
    nextEntry: u64Text(s['next-entry'], `${name}.next-entry`),
    batches: array(s.batches, `${name}.batches`).map((bv, i) => {
      const bn = `${name}.batches[${i}]`;
      const b = record(bv, bn, ['batch', 'first', 'cancelled', 'limits', 'calls']);
      const l = b.limits === undefined ? {} : record(b.limits, `${bn}.limits`, ['execution-ms', 'abort-grace-ms']);
      const limits: Limits = {};
      if (l['execution-ms'] !== undefined) limits.executionMs = u32(l['execution-ms'], `${bn}.limits.execution-ms`);
      if (l['abort-grace-ms'] !== undefined) limits.abortGraceMs = u32(l['abort-grace-ms'], `${bn}.limits.abort-grace-ms`);
      return {
        batch: u64Text(b.batch, `${bn}.batch`),
        first: u64Text(b.first, `${bn}.first`),
        cancelled: boolean(b.cancelled, `${bn}.cancelled`),
        limits,
        calls: array(b.calls, `${bn}.calls`).map((cv, j) => {
          const cn = `${bn}.calls[${j}]`;
          const c = record(cv, cn, ['id', 'tool', 'operations', 'key', 'keys', 'entries']);
          const call: SavedState['batches'][number]['calls'][number] = {
            id: string(c.id, `${cn}.id`),
            tool: string(c.tool, `${cn}.tool`),
            entries: array(c.entries, `${cn}.entries`).map((ev, k) => {
              const en = `${cn}.entries[${k}]`;
              const e = record(ev, en, ['operation', 'state']);
              return { operation: u32(e.operation, `${en}.operation`), state: savedEntryFromJson(e.state, `${en}.state`) };
            }),
            keys: savedKeysIn(c.keys, c.key, cn),
          };
          if (c.operations !== undefined) call.operations = u32(c.operations, `${cn}.operations`);
          return call;
        }),
      };
    }),
  };
}

export { u64Text };

/** A retired batch as the snapshot keeps it: its number and its outcomes as `run` gave them. */
export function retiredJson(number: bigint, outcomes: CallOutcome[]): string {
  const calls = outcomes.map((c) => `{"id":${ascii(JSON.stringify(c.id))},"tool":${ascii(JSON.stringify(c.tool))},"entries":[${c.entries.map(outcomeJson).join(',')}]}`);
  return `{"batch":"${number}","outcomes":[${calls.join(',')}]}`;
}

function outcomeJson(o: EntryOutcome): string {
  const head = `{"entry":"${o.entry}","label":${ascii(JSON.stringify(o.label))},"status":"${o.status}"`;
  switch (o.status) {
    case 'ok':
      return `${head}${valueField(o.value)}}`;
    case 'failed':
      return `${head},"error":${errorJson(o.error)}}`;
    case 'cancelled':
      return 'error' in o ? `${head},"error":${errorJson(o.error)}}` : `${head}${valueField(o.value)}}`;
    default:
      return `${head},"reason":${reasonJson(o.reason)},"message":${ascii(JSON.stringify(o.message))}${o.error === undefined ? '' : `,"error":${errorJson(o.error)}`}}`;
  }
}

/** A saved error back as a `RestoredError` with its name and message. */
export function restoredError(value: unknown, name: string): RestoredError {
  const e = record(value, name, ['name', 'message']);
  return new RestoredError(string(e.name, `${name}.name`), string(e.message, `${name}.message`));
}

/** A retired batch's saved outcomes, read back. */
export function retiredFromJson(value: unknown, name: string): { batch: bigint; outcomes: CallOutcome[] } {
  const r = record(value, name, ['batch', 'outcomes']);
  const batch = u64Text(r.batch, `${name}.batch`);
  const outcomes = array(r.outcomes, `${name}.outcomes`).map((cv, i) => {
    const cn = `${name}.outcomes[${i}]`;
    const c = record(cv, cn, ['id', 'tool', 'entries']);
    const entries = array(c.entries, `${cn}.entries`).map((ev, j): EntryOutcome => {
      const en = `${cn}.entries[${j}]`;
      const e = record(ev, en, ['entry', 'label', 'status', 'value', 'error', 'reason', 'message']);
      const entry = u64Text(e.entry, `${en}.entry`);
      const label = string(e.label, `${en}.label`);
      const status = oneOf(e.status, `${en}.status`, ['ok', 'failed', 'cancelled', 'settled'] as const);
      if (status === 'ok') return { entry, label, status, value: e.value };
      if (status === 'failed') return { entry, label, status, error: restoredError(e.error, `${en}.error`) };
      if (status === 'cancelled') return e.error !== undefined ? { entry, label, status, error: restoredError(e.error, `${en}.error`) } : { entry, label, status, value: e.value };
      const settled: EntryOutcome = { entry, label, status, reason: reasonFromJson(e.reason, `${en}.reason`), message: string(e.message, `${en}.message`) };
      if (e.error !== undefined) settled.error = restoredError(e.error, `${en}.error`);
      return settled;
    });
    return { id: string(c.id, `${cn}.id`), tool: string(c.tool, `${cn}.tool`), entries };
  });
  return { batch, outcomes };
}
