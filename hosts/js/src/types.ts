// The package's public data types: plain objects with string-literal unions, the package's own
// (never jco's generated `{ tag, val }` variants), so a jco upgrade is no API change.
// `convert.ts` converts at the boundary; the compiler checks that jco's records still fit.
//
// Numbers. Batch, entry and ticket numbers are WIT `u64`s, never reused over a scheduler's (or a
// controller's) life, so they are `bigint`s here, and lists of them are `BigUint64Array`s (one
// memory copy across the boundary); `readonly bigint[]` is accepted wherever a list goes in.

/** A list of numbers as it goes in. */
export type Numbers = BigUint64Array | readonly bigint[];

// --- config ---------------------------------------------------------------------------------

/** Stable diagnostic codes. */
export type DiagnosticCode =
  | 'toml-syntax'
  | 'json-syntax'
  | 'too-many-layers'
  | 'too-large'
  | 'too-many-tools'
  | 'table-type'
  | 'concurrency-type'
  | 'concurrency-negative'
  | 'concurrency-key-missing'
  | 'concurrency-key-empty'
  | 'concurrency-unknown-field'
  | 'concurrency-on-defaults'
  | 'fan-out-type'
  | 'fan-out-on-defaults'
  | 'fan-out-concurrency-removed'
  | 'fan-out-on-error-value'
  | 'fan-out-unknown-field'
  | 'concurrency-limit-conflict'
  | 'stop-without-limit'
  | 'enable-value'
  | 'concurrency-delay-conflict'
  | 'concurrency-retries-conflict'
  | 'concurrency-key-template'
  | 'concurrency-shared-conflict'
  /** A warning: a field or table name a small edit away from one Turnstile reads. */
  | 'unknown-field-typo'
  /** Tools naming one concurrency key give it different `max_wait`s. */
  | 'concurrency-max-wait-conflict'
  /** Tools naming one concurrency key give it different `rate` windows. */
  | 'concurrency-rate-conflict'
  /** Tools naming one concurrency key give it different `burst`s. */
  | 'concurrency-burst-conflict'
  /** A `burst` on a key with no `rate`. */
  | 'burst-without-rate'
  /** A rate window on a `shared` key above 1000000 starts or a burst of 1000000. */
  | 'shared-rate-out-of-range'
  /** Tools naming one concurrency key disagree on whether its limit adapts, or on its floor. */
  | 'concurrency-adapt-conflict'
  /** An adaptive limit on a `shared` key (its store keeps one fixed limit). */
  /** A `weight` above 1 on a key with no `rate`. */
  | 'weight-without-rate'
  /** A `weight` above the key's `burst` (such a call could never start). */
  | 'weight-above-burst'
  /** One key named twice in one tool's key set. */
  | 'concurrency-key-repeated'
  /** A key set with two `shared` keys, or a delay or a rate on a key beside its shared key. */
  | 'shared-key-in-set'
  /** Two adaptive limits in one key set: a rate limit on its call could not say which one to
   * halve. */
  | 'adaptive-keys-in-set'
  /** A path key (`path = ...`) whose key has placeholders, or with a limit, delay, rate,
   * burst, weight, adaptive limit or sharing: a path key only keeps overlapping paths apart. */
  | 'path-key-terms'
  /** Tools naming one key disagree on whether it is a path key. */
  | 'concurrency-path-conflict';

/** An error stops resolution; a warning is reported beside a resolved policy
 * (`Policy.warnings()`). */
export type Severity = 'error' | 'warning';

/** A place in one layer. Offsets are bytes into the layer's text (for a layer given as an
 * object: into the TOML the package generated from it); line and column are one-based. */
export interface Span {
  layer: number;
  layerName: string;
  start: number;
  end: number;
  line: number;
  column: number;
}

/** A span and what it shows there; a diagnostic's first label is its primary one. */
export interface Label {
  span: Span;
  message: string;
}

/** One config problem: a stable code, the dotted key path, the tools involved, labelled spans,
 * and `rendered`, the rustc-style plain text ready to print. */
export interface Diagnostic {
  code: DiagnosticCode;
  severity: Severity;
  message: string;
  path: string[];
  tools: string[];
  labels: Label[];
  help?: string;
  rendered: string;
}

/** What a failed operation does to the later operations of its call. */
export type OnError = 'continue' | 'stop';

/** One rate window of a key: on average at most `count` starts per `perMs` milliseconds, and
 * `burst` of them at once after the key was idle (the window's own, or else the key's). */
export interface RateWindow {
  count: number;
  perMs: number;
  burst: number;
}

/** One key a tool's calls take, as the policy resolved it. `delayMs` is the minimum gap between
 * consecutive starts on the key, `retries` how many times one entry may hit a rate limit and run
 * again (a key with `limit = 0` and a delay has limit 4294967295), `maxWaitMs` the longest wait
 * a rate limit may ask for (`max_wait`, 300000 = 5 minutes unless the config says otherwise; 0
 * waits for nothing): an entry asked to wait longer is settled `rate-limited` at once and its key
 * is not paused. `rates` are the key's rate windows (`rate = "5000/h"` is
 * `{ count: 5000, perMs: 3600000 }`; ascending, empty when none), kept as GCRA with `burst` (1
 * when there is no rate): `count` starts per `perMs` at an even pace, and `burst` of them at once
 * after the key was idle (at most `burst + count - 1` in any `perMs`). A key with placeholders
 * (`"fs:{path}"`) is a template: each call's key is made from its arguments, and `arguments`
 * lists the top-level argument names it uses (empty for a plain key); every key made from one
 * template has the template's limit and delay. `shared`: the limit, delay, rate windows and pauses hold across
 * every process using the same store (see `Driver`'s `sharedKeys` option); the scheduler lists
 * such entries in `acquire` instead of `start`. */
export interface Concurrency {
  key: string;
  limit: number;
  delayMs: number;
  rates: RateWindow[];
  burst: number;
  /** Units of the key's rate windows one call of this tool costs (1 ..= `burst`; 1 without
   * a rate). The tool's own: tools sharing a key may weigh differently. */
  weight: number;
  retries: number;
  maxWaitMs: number;
  arguments: string[];
  shared: boolean;
  /** Present when the limit adapts (`limit = { max, min, adapt = "aimd" }`): its floor;
   * `limit` is its ceiling. It halves on each rate-limited end (not below this) and grows by
   * one after as many clean ends as it then is. */
  adaptMin?: number;
  /** Present for a path key (`{ key = "fs", path = "{path}" }`): the path as written. The key
   * names one tree; each call takes the path its arguments make, normalized by the component
   * (`/` and `\` separate components; empty ones, `.` and a leading `/` are dropped; `..`
   * removes the one before it), or the root when they make none. Calls on equal paths, or one
   * under the other, never run at once and keep written order among themselves; calls on paths
   * apart pass them. `limit` is `UNBOUNDED`; `inspect` names such a key with its path
   * (`fs:/a/b`). */
  path?: string;
}

/** One tool's resolved policy. `concurrency` lists the keys each of its calls takes, in written
 * order: one (`concurrency = 2`, or a table), every member of a key set
 * (`concurrency = [{ key = "fs:{src}" }, { key = "fs:{dst}", limit = 1 }]`), or none (empty)
 * when the tool is unbounded. A call of a key set starts only when every one of its keys has room
 * and it is first among the waiting entries of each key; it holds them all until it ends. Two
 * members that make one key (`{src}` equal to `{dst}`) count once. A key set has at most one
 * `shared` member, and then its other members have no delay or rate (`shared-key-in-set`); a
 * call's keys (`inspect`, saved calls) list the shared one first. */
export interface ToolPolicy {
  name: string;
  concurrency: readonly Concurrency[];
  fanOut: boolean;
  onError: OnError;
}

/** One config layer: TOML text, or a plain object of the same shape
 * (`{ conversation: { tools: { name: { concurrency: 1 } } } }`). `name` is shown in diagnostics. */
export type Layer = { name: string; text: string } | { name: string; value: Record<string, unknown> };

// --- scheduler ------------------------------------------------------------------------------

/** Why the scheduler or the host settled an entry without a response from its execution. */
export type ReasonKind = 'rejected' | 'skipped' | 'failed' | 'cancelled' | 'stopped' | 'interrupted' | 'rate-limited' | 'timed-out';

/** Why the scheduler aborts an execution: its batch's `executionMs` passed (`deadline`), or its
 * batch was cancelled while it ran (`cancel`). */
export type AbortCause = 'deadline' | 'cancel';

/** `after` (the one-based position of the failed operation) only for `stopped`; `retries` (how
 * many times it had run again) only for `rate-limited`: it hit a rate limit once more than its
 * key's `retries` allow; `cause` only for `timed-out`: it was aborted and had not ended when its
 * batch's abort grace passed (the scheduler gave up on it and freed its slot). */
export type Reason =
  | { kind: Exclude<ReasonKind, 'stopped' | 'rate-limited' | 'timed-out'> }
  | { kind: 'stopped'; after: number }
  | { kind: 'rate-limited'; retries: number }
  | { kind: 'timed-out'; cause: AbortCause };

/** How the host settles a pending entry without running it. */
export type HostSettle = 'rejected' | 'skipped' | 'failed';

export interface HostSettlement {
  entry: bigint;
  how: HostSettle;
}

/** How an execution ended. */
export type Outcome = 'ok' | 'failed';

/** Which list of step inputs an input was in. */
export type InputKind = 'approve' | 'settle' | 'ask' | 'answer' | 'ok' | 'failed' | 'cancel' | 'now' | 'retry' | 'pause' | 'liftPause' | 'granted' | 'denied';

export type InputErrorCode =
  | 'unknown-entry'
  | 'unknown-batch'
  | 'already-decided'
  | 'not-running'
  | 'not-asking'
  | 'already-ended'
  | 'batch-cancelled'
  | 'time-backwards'
  | 'unknown-key'
  | 'not-acquiring'
  | 'given-up';

/** A refused step input: its list, its position there, and why. It changed nothing. */
export interface InputError {
  input: InputKind;
  index: number;
  code: InputErrorCode;
  message: string;
}

/** An entry the scheduler settled, with why, and `message`: the component's sentence to show a
 * user or hand back to the model as the call's result (`"not run: the batch was cancelled"`). */
export interface Settled {
  entry: bigint;
  reason: Reason;
  message: string;
}

/** Inputs of one `step`, every field optional, applied in this field order, each list in
 * order; each input is judged on its own. */
export interface StepInputs {
  /** Pending entries the user approved. */
  approve?: Numbers;
  /** Pending entries the host settles without running them. */
  settle?: readonly HostSettlement[];
  /** Running executions that asked a question (they keep their slot). */
  ask?: Numbers;
  /** Questions answered; the tool runs on. A declined question is an end (`ok`). */
  answer?: Numbers;
  /** Executions that ended with a result. */
  ok?: Numbers;
  /** Executions that ended with an error. */
  failed?: Numbers;
  /** Batches to cancel: their pending and approved entries are settled as cancelled, their
   * running ones are listed in `abort` (cause `cancel`). */
  cancel?: Numbers;
  /** The host's clock in milliseconds, monotonic (the scheduler never reads a clock). The step's
   * inputs cross with it, so each is judged at this time (a 429's wait from it, a cancel's
   * grace from it). A refused one is reported first in `errors`, as `now`. Give it on every step when keys have a `delay` or may
   * pause. A bigint reaches past 2^53 (any `u64`). */
  now?: number | bigint;
  /** Executions that hit a rate limit, with the time (ms, the same clock) they may run again:
   * each frees its slot, pauses its key until then and goes back to its place in line; past
   * its key's `retries` it is settled `rate-limited`. */
  retry?: readonly { entry: bigint; until: number | bigint }[];
  /** Keys to pause until a time (a pause only ever extends), by name. */
  pause?: readonly { key: string; until: number | bigint }[];
  /** Keys whose pause to lift now, by name (the local pause only: a shared key's store keeps
   * its own). Applied after `pause`. */
  liftPause?: readonly string[];
  /** Entries of shared keys whose permit the store granted (each was in `acquire`); they start
   * in written order. Applied after `settle`. */
  granted?: Numbers;
  /** Entries of shared keys whose permit the store could not grant: settled `failed` without
   * running (their local slot is freed). Applied after `granted`. */
  denied?: Numbers;
}

/** What one `step` decided: entries to `start`, entries the scheduler `settle`d (each needs its
 * response), refused inputs (`errors`), and `retired` batches (every entry has a response; their
 * numbers are never valid again). */
export interface StepOutputs {
  /** Executions to stop, first: their batch's `executionMs` passed or their batch was cancelled.
   * Report each one's end as usual; with an `abortGraceMs` the scheduler gives up on one that
   * has not ended in time (it is then in `settle`, `timed-out`, and its late end is refused). */
  abort: { entry: bigint; cause: AbortCause }[];
  start: BigUint64Array;
  settle: Settled[];
  errors: InputError[];
  retired: BigUint64Array;
  /** When to `step` again with a later `now` because something waits on time; absent when
   * nothing does. */
  wakeAt?: number;
  /** Entries of shared keys to acquire a permit for from the store, in written order; report
   * each as `granted` or `denied`. Each holds a local slot meanwhile. */
  acquire: BigUint64Array;
  /** The permits to ask for, one per entry of `acquire`, in its order, with the terms the store
   * keeps for the key: `limit` (absent: unbounded; an adaptive limit's value now, which this
   * process moved by the ends it reported), `delayMs`, `rates`, and the entry's `weight` in
   * them. */
  requests: PermitRequest[];
  /** Entries of shared keys whose permit (or permit request) the host gives back: they ended,
   * hit a rate limit, or were cancelled or stopped while waiting for a permit. */
  release: BigUint64Array;
  /** Shared keys to pause at their store until `until` (the scheduler's clock; the store keeps
   * the longest pause), before giving back any permit: the scheduler decides it, when a shared
   * key's pause moved later (a rate limit it waits for, or `pause` on a configured or
   * template-made key). Each key at most once per step. */
  pauseStore: { key: string; until: number }[];
}

/** A permit to ask a shared key's store for (`StepOutputs.requests`). */
export interface PermitRequest {
  entry: bigint;
  key: string;
  limit?: number;
  delayMs: number;
  rates: RateWindow[];
  weight: number;
}

/** Where an entry is. */
export type EntryState =
  | { kind: 'pending' | 'approved' | 'acquiring' | 'granted' | 'running' | 'asking' }
  | { kind: 'aborted'; cause: AbortCause }
  | { kind: 'ended'; outcome: Outcome }
  | { kind: 'settled'; reason: Reason };

/** Why an approved entry waits: its batch still has `pending` undecided entries, its key is
 * full (these executions hold its slots), an earlier entry (`label`) with one of its keys
 * (`key`) has not started yet, its key is paused or spacing its starts `until` a time, or (unkeyed) it runs
 * again `until` a time after a rate limit; a shared key's entry waits for its permit from the
 * store (`permit-requested`) or, granted, for earlier entries of its key to start
 * (`permit-granted`). */
export type Wait =
  | { kind: 'batch-not-approved'; pending: number }
  | { kind: 'key-full'; key: string; limit: number; running: string[] }
  | { kind: 'behind'; label: string; key: string }
  | { kind: 'key-paused' | 'key-spacing'; key: string; until: number }
  | { kind: 'retry-at'; until: number }
  | { kind: 'permit-requested' | 'permit-granted'; key: string };

/** One entry as `inspect` reports it. `keys` are its keys (made from its arguments for a key
 * template): one, its key set's (written order, each once; a shared key first), or none (empty) when unbounded; `why` is `wait` as one plain sentence for a UI, from the component
 * (`"waiting: github is full (2 of 2 running: g1, g2)"`; a wait on time says how long is left
 * by the scheduler's clock as last given). */
export interface EntryStatus {
  entry: bigint;
  label: string;
  tool: string;
  keys: string[];
  state: EntryState;
  wait?: Wait;
  why?: string;
}

/** An entry's state in a saved state: started (running or asking at export), ended, or
 * settled. Entries not listed were pending or approved. */
export type SavedEntryState = { kind: 'started' } | { kind: 'ended'; outcome: Outcome } | { kind: 'settled'; reason: Reason };

export interface SavedEntry {
  /** The operation index (0 for a plain call). */
  operation: number;
  state: SavedEntryState;
}

/** A call of a live batch; `operations` is absent for a plain call. `keys`, for a tool with a
 * key template, names the key each member of its key set took, in written order, a shared key first (a template's
 * own text where the arguments made none); empty for other tools: `resume` gives the call those
 * keys again. A state saved by 0.2 has `key` (one name, or absent) instead: `resume` takes it as
 * `keys: [key]` (and refuses a call with both). */
export interface SavedCall {
  id: string;
  tool: string;
  operations?: number;
  entries: SavedEntry[];
  keys: string[];
}

/** A batch's time limits in milliseconds, as `submit` took them (absent: none). */
export interface Limits {
  executionMs?: number;
  abortGraceMs?: number;
}

/** `limits` are the batch's time limits (absent in states saved before them: none); a resumed
 * batch keeps them, and what runs again gets a new deadline when it starts. */
export interface SavedBatch {
  batch: bigint;
  first: bigint;
  cancelled: boolean;
  limits?: Limits;
  calls: SavedCall[];
}

/** A scheduler's state as `unfinished` exports it: plain data (with bigints: persist them with
 * a JSON replacer). `version` is 2; `policy` is the fingerprint of the policy it ran under. */
export interface SavedState {
  version: number;
  policy: bigint;
  nextBatch: bigint;
  nextEntry: bigint;
  batches: SavedBatch[];
}

/** What `resume` does with entries that had started and have no response: `'run-again'`
 * (pending again, RFD 129) or `'interrupt'` (settled as interrupted, reported by the first step). */
export type Started = 'run-again' | 'interrupt';

export type UnrestoredCode = 'invalid-operations' | 'invalid-id' | 'duplicate-id' | 'invalid-numbers';

/** A call `resume` left out; the host answers it itself. */
export interface Unrestored {
  batch: bigint;
  call: string;
  code: UnrestoredCode;
  message: string;
}

/** Why `submit` refused a batch: `invalid-id` is an empty call id or tool name, one above 256
 * bytes, one with a newline, or a call id with `#`; `too-large` is above a limit (calls per
 * batch, operations per call, live entries, or 65536 bytes of one call's arguments);
 * `invalid-arguments` is an `arguments` item that names no call of the batch, or a call twice
 * (the package's own check, before the batch crosses). The component's `malformed-batch` is not
 * among them: `submit` packs the batch, and a malformed one would be the package's bug. */
export type SubmitErrorCode = 'empty-batch' | 'invalid-id' | 'duplicate-id' | 'not-fan-out' | 'invalid-operations' | 'too-large' | 'invalid-arguments';
export type ResumeErrorCode = 'unsupported-version' | 'too-large';

// --- admission ------------------------------------------------------------------------------

/** The kind of work an admission request is. */
export type AdmissionClass = 'call' | 'request' | 'control' | 'reentrant';

/** A binding's policy: `maxConcurrent` requests over every class (0 is taken as 1), tool calls
 * one at a time unless `allowParallel`. */
export interface AdmissionConfig {
  maxConcurrent: number;
  allowParallel: boolean;
}

export type AdmissionErrorCode =
  | 'shutdown'
  | 'duplicate-request'
  | 'unknown-request'
  | 'invalid-id'
  | 'invalid-parent'
  | 'would-deadlock'
  | 'not-admitted'
  | 'not-queued'
  | 'too-many'
  | 'timed-out';

/** What `shutdown` reports: in-flight requests to cancel (each still needs its `end`) and the
 * requests it refused (their tickets are retired). */
export interface ShutdownReport {
  cancel: BigUint64Array;
  refused: BigUint64Array;
}
