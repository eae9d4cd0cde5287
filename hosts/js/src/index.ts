// Turnstile for TypeScript and JavaScript: the component (transpiled by jco) behind a small typed
// API. `Turnstile.load()` makes one independent instance of the component; from it come policies
// (`resolve`) and admission controllers; a `Scheduler` is made from a policy.
//
// Numbers. Batch, entry and ticket numbers are WIT `u64`s, never reused over a scheduler's (or a
// controller's) life, so they are `bigint`s here, and lists of them are `BigUint64Array`s: that
// is what jco lifts them to, and a `BigUint64Array` lowers by one memory copy, with no per-item
// conversion. `readonly bigint[]` is accepted wherever a list goes in.
//
// Errors. A refused `submit`, `resume` or admission call throws a `TurnstileError` subclass with a
// stable `code` (`SubmitError`, `ResumeError`, `AdmissionError`) and changes nothing; a config
// that does not resolve throws `ConfigError` with every diagnostic. A refused `step` input is
// data, not an exception: it is listed in the step's `errors`, and every other input applied.
import { instantiate, type Root } from './component/turnstile.js';
import type * as wc from './component/interfaces/turnstile-scheduler-config.js';
import type * as ws from './component/interfaces/turnstile-scheduler-scheduler.js';
import type * as wa from './component/interfaces/turnstile-scheduler-admission.js';

export type Layer = wc.Layer;
export type Diagnostic = wc.Diagnostic;
export type DiagnosticCode = wc.DiagnosticCode;
export type Span = wc.Span;
export type ToolPolicy = wc.ToolPolicy;
export type HostSettle = ws.HostSettle;
export type HostSettlement = ws.HostSettlement;
export type Outcome = ws.Outcome;
export type Reason = ws.Reason;
export type Settled = ws.Settled;
export type InputKind = ws.InputKind;
export type InputErrorCode = ws.InputErrorCode;
export type InputError = ws.InputError;
export type EntryState = ws.State;
export type Wait = ws.Wait;
export type EntryStatus = ws.EntryStatus;
export type SavedState = ws.SavedState;
export type SavedBatch = ws.SavedBatch;
export type SavedCall = ws.SavedCall;
export type Started = ws.Started;
export type Unrestored = ws.Unrestored;
export type SubmitErrorCode = ws.SubmitErrorCode;
export type ResumeErrorCode = ws.ResumeErrorCode;
export type AdmissionClass = wa.Class;
export type AdmissionConfig = wa.AdmissionConfig;
export type ShutdownReport = wa.ShutdownReport;
export type AdmissionErrorCode = wa.ErrorCode;

export { runBatch } from './driver.js';
export type { Execution, EntryOutcome, CallOutcome, RunOptions, Decision } from './driver.js';

/** A refused call: it changed nothing. `code` is stable; subclasses narrow it. */
export class TurnstileError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(`${code}: ${message}`);
    this.name = new.target.name;
    this.code = code;
  }
}

/** `Scheduler.submit` refused the batch. */
export class SubmitError extends TurnstileError {
  declare readonly code: SubmitErrorCode;
}

/** `Scheduler.resume` refused the state as a whole. */
export class ResumeError extends TurnstileError {
  declare readonly code: ResumeErrorCode;
}

/** An admission controller refused a call. */
export class AdmissionError extends TurnstileError {
  declare readonly code: AdmissionErrorCode;
}

/** A `step` input the driver sent was refused (`errors` of a step): the batch it belonged to
 * fails with this. `target` is the entry the input named (the batch, for `cancel`). */
export class RefusedInputError extends TurnstileError {
  declare readonly code: InputErrorCode;
  readonly input: InputKind;
  readonly target: bigint;
  constructor(error: InputError, target: bigint) {
    super(error.code, `${error.input} ${target}: ${error.message}`);
    this.input = error.input;
    this.target = target;
  }
}

/** The config did not resolve. `diagnostics` has every problem, each with its `rendered` text. */
export class ConfigError extends Error {
  readonly diagnostics: Diagnostic[];
  constructor(diagnostics: Diagnostic[]) {
    super(diagnostics.map((d) => d.rendered).join('\n'));
    this.name = 'ConfigError';
    this.diagnostics = diagnostics;
  }
}

/** Calls a component function whose WIT result is `result<T, E>` with `E` a `{ code, message }`
 * record: jco throws the error value as `payload`; it becomes a `Kind`. */
function attempt<T>(Kind: new (code: string, message: string) => TurnstileError, f: () => T): T {
  try {
    return f();
  } catch (e) {
    const payload = (e as { payload?: { code?: unknown; message?: unknown } }).payload;
    if (payload && typeof payload.code === 'string') throw new Kind(payload.code, String(payload.message ?? ''));
    throw e;
  }
}

/** A list of numbers as it goes in: `BigUint64Array` crosses as one copy, arrays are checked. */
export type Numbers = BigUint64Array | readonly bigint[];

const NONE = new BigUint64Array(0);

/** A list for jco: a `BigUint64Array` or an array (jco checks each item is a `u64` bigint); any
 * other typed array would be copied byte for byte, so it is refused here. */
function numbers(list: Numbers | undefined): BigUint64Array | bigint[] {
  if (list === undefined) return NONE;
  if (list instanceof BigUint64Array || Array.isArray(list)) return list as BigUint64Array | bigint[];
  throw new TypeError('entry, batch and ticket lists are BigUint64Array or bigint[]');
}

/** Where to find the transpiled core modules. Node reads files; a browser fetches URLs. */
async function defaultCoreModule(path: string): Promise<WebAssembly.Module> {
  const url = new URL(`./component/${path}`, import.meta.url);
  if (typeof process !== 'undefined' && process.versions?.node) {
    const { readFile } = await import('node:fs/promises');
    return WebAssembly.compile(await readFile(url));
  }
  const response = await fetch(url);
  if (!response.ok) throw new Error(`fetching ${url}: ${response.status}`);
  return WebAssembly.compileStreaming ? WebAssembly.compileStreaming(response) : WebAssembly.compile(await response.arrayBuffer());
}

const compiled = new Map<string, Promise<WebAssembly.Module>>();
function cachedCoreModule(path: string): Promise<WebAssembly.Module> {
  let module = compiled.get(path);
  if (!module) {
    module = defaultCoreModule(path);
    compiled.set(path, module);
  }
  return module;
}

function dispose(raw: unknown): void {
  (raw as { [Symbol.dispose]?: () => void })[Symbol.dispose]?.();
}

/** One instance of the component. Instances share nothing; load as many as you need. */
export class Turnstile {
  readonly #root: Root;

  private constructor(root: Root) {
    this.#root = root;
  }

  /** Compiles and instantiates the component (the compiled modules are cached per process). */
  static async load(options: { coreModule?: (path: string) => Promise<WebAssembly.Module> } = {}): Promise<Turnstile> {
    return new Turnstile(await instantiate(options.coreModule ?? cachedCoreModule, {}));
  }

  /** Resolves layers, lowest precedence first; throws `ConfigError` with every diagnostic. */
  resolve(layers: Layer[]): Policy {
    let raw: wc.Policy;
    try {
      raw = this.#root.config.Policy.resolve(layers);
    } catch (e) {
      const payload = (e as { payload?: unknown }).payload;
      if (Array.isArray(payload)) throw new ConfigError(payload as Diagnostic[]);
      throw e;
    }
    return new Policy(this.#root.scheduler, raw);
  }

  /** An admission controller for one binding (one shared MCP connection). */
  admission(config: AdmissionConfig): Admission {
    return new Admission(new this.#root.admission.Admission(config));
  }
}

/** A validated config. Immutable; any number of schedulers can be made from one. */
export class Policy {
  /** @internal */
  readonly raw: wc.Policy;
  /** @internal The scheduler interface of the instance the policy came from. */
  readonly iface: Root['scheduler'];

  /** @internal Policies come from `Turnstile.resolve`. */
  constructor(iface: Root['scheduler'], raw: wc.Policy) {
    this.iface = iface;
    this.raw = raw;
  }
  /** One tool's policy (an unconfigured tool is unbounded without fan-out). */
  tool(name: string): ToolPolicy {
    return this.raw.tool(name);
  }
  /** Every configured tool, in configuration order. */
  tools(): ToolPolicy[] {
    return this.raw.tools();
  }
  /**
   * What the policy means to a scheduler, as 64 bits: equal for policies that schedule alike.
   * A saved state records it (`SavedState.policy`), so a host can tell before `resume` whether
   * the policy changed since the state was saved.
   */
  fingerprint(): bigint {
    return this.raw.fingerprint();
  }
  [Symbol.dispose](): void {
    dispose(this.raw);
  }
}

/** A call as the model wrote it: `operations` for a fan-out envelope of that many operations
 * (at least 1); without it, a plain call. */
export interface CallInput {
  id: string;
  tool: string;
  operations?: number;
}

/** Inputs of one `step`, every field optional. Applied in this field order, each list in order;
 * each input is judged on its own. */
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
  /** Batches to cancel: their pending and approved entries are settled as cancelled. */
  cancel?: Numbers;
}

/** What one `step` decided: entries to `start`, entries the scheduler `settle`d (each needs its
 * response), refused inputs (`errors`, by list and position), and `retired` batches (every entry
 * has a response; their numbers are never valid again). */
export type StepOutputs = ws.Outputs;

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

  /** @internal `Scheduler.submit` makes these. */
  constructor(wit: ws.Submitted, calls: readonly CallInput[]) {
    this.batch = wit.batch;
    this.first = wit.first;
    this.count = wit.count;
    this.calls = calls;
  }

  /** Every entry number of the batch, in written order (e.g. to approve them all). */
  entries(): BigUint64Array {
    const out = new BigUint64Array(this.count);
    let entry = this.first;
    for (let i = 0; i < out.length; i++, entry += 1n) out[i] = entry;
    return out;
  }

  /** The entry's call (its index in `calls`) and operation index (none for a plain call), or
   * `undefined` when the number is not one of this batch's. */
  locate(entry: bigint): { call: CallInput; index: number; operation: number | undefined } | undefined {
    const offset = entry - this.first;
    if (offset < 0n || offset >= BigInt(this.count)) return undefined;
    const at = Number(offset);
    const starts = this.#callStarts();
    if (starts === null) return { call: this.calls[at], index: at, operation: undefined };
    let lo = 0;
    let hi = starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (starts[mid] <= at) lo = mid;
      else hi = mid - 1;
    }
    const call = this.calls[lo];
    return { call, index: lo, operation: call.operations === undefined ? undefined : at - starts[lo] };
  }

  /** The label of one of this batch's entries: `id`, or `id#i` for an operation. */
  label(entry: bigint): string | undefined {
    const found = this.locate(entry);
    if (!found) return undefined;
    return found.operation === undefined ? found.call.id : `${found.call.id}#${found.operation}`;
  }

  /** The entry number of a label of this batch, or `undefined`. */
  entry(label: string): bigint | undefined {
    if (!this.#byId) this.#byId = new Map(this.calls.map((c, i) => [c.id, i]));
    const hash = label.indexOf('#');
    const index = this.#byId.get(hash < 0 ? label : label.slice(0, hash));
    if (index === undefined) return undefined;
    const call = this.calls[index];
    const start = this.#callStarts()?.[index] ?? index;
    if (hash < 0) return call.operations === undefined ? this.first + BigInt(start) : undefined;
    const digits = label.slice(hash + 1);
    if (call.operations === undefined || !/^(0|[1-9][0-9]*)$/.test(digits)) return undefined;
    const op = Number(digits);
    return op < call.operations ? this.first + BigInt(start + op) : undefined;
  }

  #callStarts(): Uint32Array | null {
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

/** What `Scheduler.resume` does with entries that had started and have no response. */
export interface ResumeOptions {
  /** `'run-again'`: pending again, they run again once approved (RFD 129). `'interrupt'`:
   * settled as `interrupted`, reported by the first `step`. */
  started: Started;
}

const U32_MAX = 0xffff_ffff;

/** The scheduler: `submit` a batch, then feed every driver round to `step`. Batches, keys and
 * slots are shared by everything submitted to one scheduler. */
export class Scheduler {
  readonly #raw: ws.Scheduler;

  /** A scheduler for a policy (from the same `Turnstile` instance). */
  constructor(policy: Policy);
  /** @internal */
  constructor(policy: Policy, raw: ws.Scheduler);
  constructor(policy: Policy, raw?: ws.Scheduler) {
    this.#raw = raw ?? new policy.iface.Scheduler(policy.raw);
  }

  /** Imports what `unfinished` exported into a fresh scheduler under `policy` (the same one or a
   * changed one): every live batch keeps its numbers. Calls the policy no longer allows are left
   * out and listed in `unrestored`; the host answers them itself. Throws `ResumeError`. */
  static resume(policy: Policy, state: SavedState, options: ResumeOptions): { scheduler: Scheduler; unrestored: Unrestored[] } {
    const [raw, unrestored] = attempt(ResumeError, () => policy.iface.Scheduler.resume(policy.raw, state, options.started));
    return { scheduler: new Scheduler(policy, raw), unrestored };
  }

  /** Adds a batch, in written order; all or nothing. Throws `SubmitError`. */
  submit(calls: readonly CallInput[]): Submitted {
    const operations = new Uint32Array(calls.length);
    for (let i = 0; i < calls.length; i++) {
      const { id, tool, operations: n } = calls[i];
      // The ids and tools cross as two newline-joined strings, which cannot carry a newline or
      // tell one empty line from none: such a call is refused here with the guest's code.
      if (id === '' || tool === '' || id.includes('\n') || tool.includes('\n')) {
        throw new SubmitError('invalid-id', `call ${i + 1}: call ids and tool names are 1 to 256 bytes without a newline`);
      }
      if (n !== undefined) {
        // `0` on the wire is a plain call, so a fan-out envelope of zero operations is refused here.
        if (!Number.isInteger(n) || n < 1) throw new SubmitError('invalid-operations', `call ${JSON.stringify(id)}: a fan-out call has at least 1 operation, got ${n}`);
        if (n > U32_MAX) throw new SubmitError('too-large', `call ${JSON.stringify(id)}: ${n} operations`);
        operations[i] = n;
      }
    }
    let ids = '';
    let tools = '';
    for (let i = 0; i < calls.length; i++) {
      if (i) {
        ids += '\n';
        tools += '\n';
      }
      ids += calls[i].id;
      tools += calls[i].tool;
    }
    return new Submitted(attempt(SubmitError, () => this.#raw.submit(ids, tools, operations)), calls);
  }

  /** One driver round: applies every input, each on its own, and says what to do. A refused input
   * is listed in `errors` (its list, position and code) and changed nothing. */
  step(inputs: StepInputs = {}): StepOutputs {
    return this.#raw.step({
      approve: numbers(inputs.approve),
      settle: (inputs.settle ?? []) as HostSettlement[],
      ask: numbers(inputs.ask),
      answer: numbers(inputs.answer),
      ok: numbers(inputs.ok),
      failed: numbers(inputs.failed),
      cancel: numbers(inputs.cancel),
    } as ws.Inputs);
  }

  /** The label of a live entry (`call` or `call#i`); `undefined` once its batch retired. */
  label(entry: bigint): string | undefined {
    return this.#raw.label(entry);
  }

  /** Every entry of a live batch in written order, with why each approved one waits;
   * `undefined` for a batch that is not live. */
  inspect(batch: bigint): EntryStatus[] | undefined {
    return this.#raw.inspect(batch);
  }

  /** The state to persist for `Scheduler.resume`: every live batch. Plain data (with bigints). */
  unfinished(): SavedState {
    return this.#raw.unfinished();
  }

  [Symbol.dispose](): void {
    dispose(this.#raw);
  }
}

/** Admission control for one binding (one shared MCP connection). Requests are named by the
 * tickets `begin` returns, never reused by one controller. Throws `AdmissionError`. */
export class Admission {
  readonly #raw: wa.Admission;

  /** @internal `Turnstile.admission` makes these. */
  constructor(raw: wa.Admission) {
    this.#raw = raw;
  }
  /** Asks to admit a request; it is admitted now or queued (`nextAdmissions` reports it either
   * way). `parent` is the ticket of the in-flight call a re-entrant call descends from. */
  begin(id: string, cls: AdmissionClass, parent?: bigint): bigint {
    return attempt(AdmissionError, () => this.#raw.begin(id, cls, parent));
  }
  /** An admitted request finished. */
  end(ticket: bigint): void {
    attempt(AdmissionError, () => this.#raw.end(ticket));
  }
  /** A request gave up before the host learned it was admitted. */
  abandon(ticket: bigint): void {
    attempt(AdmissionError, () => this.#raw.abandon(ticket));
  }
  /** Refuses all further work; `cancel`: in flight (each still needs its `end`), `refused`:
   * queued (their tickets are retired). */
  shutdown(): ShutdownReport {
    return this.#raw.shutdown();
  }
  /** The tickets admitted since the last call, in admission order. */
  nextAdmissions(): BigUint64Array {
    return this.#raw.nextAdmissions();
  }
  /** Requests in flight now (for diagnostics). */
  inFlight(): number {
    return this.#raw.inFlight();
  }
  [Symbol.dispose](): void {
    dispose(this.#raw);
  }
}
