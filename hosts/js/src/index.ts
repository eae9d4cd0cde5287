// Turnstile for TypeScript and JavaScript: the component (transpiled by jco) behind a small typed
// API. `Turnstile.load()` makes one independent instance of the component; from it come policies
// (`resolve`), schedulers and admission controllers. Errors are thrown as `TurnstileError` (a
// host mistake, with a stable `code`) or `ConfigError` (with every diagnostic).
import { instantiate, type Root } from './component/turnstile.js';
import type * as wc from './component/interfaces/turnstile-scheduler-config.js';
import type * as ws from './component/interfaces/turnstile-scheduler-scheduler.js';
import type * as wa from './component/interfaces/turnstile-scheduler-admission.js';

export type Layer = wc.Layer;
export type Diagnostic = wc.Diagnostic;
export type DiagnosticCode = wc.DiagnosticCode;
export type Span = wc.Span;
export type ToolPolicy = wc.ToolPolicy;
export type Call = ws.Call;
export type Releases = ws.Releases;
export type Settlement = ws.Settlement;
export type Reason = ws.Reason;
export type EntryStatus = ws.EntryStatus;
export type Outcome = ws.Outcome;
export type HostSettle = ws.HostSettle;
export type ErrorCode = ws.ErrorCode;
export type UnfinishedBatch = ws.UnfinishedBatch;
export type AdmissionClass = wa.Class;
export type AdmissionConfig = wa.AdmissionConfig;
export type ShutdownReport = wa.ShutdownReport;
export type AdmissionErrorCode = wa.ErrorCode;

export { runBatch, Driver } from './driver.js';
export type { Execution, EntryOutcome, CallOutcome, RunOptions, Decision } from './driver.js';

/** A host mistake: the call changed nothing. `code` is stable. */
export class TurnstileError extends Error {
  readonly code: ErrorCode | AdmissionErrorCode;
  constructor(code: ErrorCode | AdmissionErrorCode, message: string) {
    super(`${code}: ${message}`);
    this.name = 'TurnstileError';
    this.code = code;
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

/** Calls a component function, turning the error payload jco throws into a typed error. */
function call<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    const payload = (e as { payload?: { code?: string; message?: string } }).payload;
    if (payload && typeof payload.code === 'string') {
      throw new TurnstileError(payload.code as ErrorCode, payload.message ?? '');
    }
    throw e;
  }
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

/** One instance of the component. Instances share nothing; load as many as you need. */
export class Turnstile {
  readonly #root: Root;

  private constructor(root: Root) {
    this.#root = root;
  }

  /** Compiles and instantiates the component (the compiled modules are cached per process). */
  static async load(options: { coreModule?: (path: string) => Promise<WebAssembly.Module> } = {}): Promise<Turnstile> {
    const get = options.coreModule ?? cachedCoreModule;
    return new Turnstile(await instantiate(get, {}));
  }

  /** Resolves layers, lowest precedence first; throws `ConfigError` with every diagnostic. */
  resolve(layers: Layer[]): Policy {
    try {
      return new Policy(this.#root.config.Policy.resolve(layers));
    } catch (e) {
      const payload = (e as { payload?: unknown }).payload;
      if (Array.isArray(payload)) throw new ConfigError(payload as Diagnostic[]);
      throw e;
    }
  }

  /** A scheduler for a policy. */
  scheduler(policy: Policy): Scheduler {
    return new Scheduler(new this.#root.scheduler.Scheduler(policy.raw));
  }

  /** Imports what `Scheduler.unfinished()` exported: a fresh scheduler with each batch
   * submitted again (after a crash or a restart); batches are renumbered from 1. */
  resume(policy: Policy, state: UnfinishedBatch[]): Scheduler {
    return new Scheduler(call(() => this.#root.scheduler.Scheduler.resume(policy.raw, state)));
  }

  /** An admission controller for one binding. */
  admission(config: AdmissionConfig): Admission {
    return new Admission(new this.#root.admission.Admission(config));
  }
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

/** A validated config. */
export class Policy {
  /** @internal */
  readonly raw: wc.Policy;
  constructor(raw: wc.Policy) {
    this.raw = raw;
  }
  /** One tool's policy (an unconfigured tool is unbounded). */
  tool(name: string): ToolPolicy {
    return this.raw.tool(name);
  }
  /** Every configured tool, in configuration order. */
  tools(): ToolPolicy[] {
    return this.raw.tools();
  }
  [Symbol.dispose](): void {
    (this.raw as unknown as { [Symbol.dispose]?: () => void })[Symbol.dispose]?.();
  }
}

/** A call as the model wrote it: `operations` for a fan-out envelope of that many operations. */
export interface CallInput {
  id: string;
  tool: string;
  operations?: number;
  finished?: ws.Finished[];
}

/** The labels of a call's entries: `id`, or `id#0` .. `id#(n-1)`. */
export function entryLabels(call: CallInput): string[] {
  if (call.operations === undefined) return [call.id];
  return Array.from({ length: call.operations }, (_, i) => `${call.id}#${i}`);
}

/** The scheduler; every method mirrors the WIT and throws `TurnstileError` on a host mistake. */
export class Scheduler {
  readonly #raw: ws.Scheduler;
  constructor(raw: ws.Scheduler) {
    this.#raw = raw;
  }
  submitBatch(calls: CallInput[]): number {
    // The packed form crosses as two strings and one typed array instead of a record per call;
    // it covers every batch whose ids and tools have no newline and nothing finished.
    const packable = calls.length > 0 && calls.every((c) => !c.finished?.length && !c.id.includes('\n') && !c.tool.includes('\n') && c.operations !== 0);
    if (packable) {
      const ops = Uint32Array.from(calls, (c) => c.operations ?? 0);
      return call(() => this.#raw.submitPacked(calls.map((c) => c.id).join('\n'), calls.map((c) => c.tool).join('\n'), ops));
    }
    const wit: Call[] = calls.map((c) => ({ id: c.id, tool: c.tool, operations: c.operations, finished: c.finished ?? [] }));
    return call(() => this.#raw.submitBatch(wit));
  }
  /** The WIT's `submit-packed` (ids and tools joined by newlines, 0 operations for a plain
   * call); `submitBatch` picks it by itself when it can. */
  submitPacked(ids: string[], tools: string[], operations: Uint32Array | number[]): number {
    return call(() => this.#raw.submitPacked(ids.join('\n'), tools.join('\n'), Uint32Array.from(operations)));
  }
  approve(entry: string): void {
    call(() => this.#raw.approve(entry));
  }
  /** Approves several entries in one crossing, all or nothing. */
  approveMany(entries: string[]): void {
    call(() => this.#raw.approveMany(entries));
  }
  /** Reports several ends in one crossing, all or nothing. */
  onEndedMany(ends: { entry: string; outcome: Outcome }[]): void {
    call(() => this.#raw.onEndedMany(ends));
  }
  /** The ids of a batch's entries: `first` .. `first + count - 1`, in written order. */
  batchEntries(batch: number): { first: number; count: number } {
    return call(() => this.#raw.batchEntries(batch));
  }
  /** `approveMany` by entry id: numbers cross the boundary as one typed array. */
  approveIds(entries: Uint32Array | number[]): void {
    call(() => this.#raw.approveIds(Uint32Array.from(entries)));
  }
  /** `onEndedMany` by entry id: every `ok` entry, then every `failed` one; all or nothing. */
  onEndedIds(ok: Uint32Array | number[], failed: Uint32Array | number[] = []): void {
    call(() => this.#raw.onEndedIds(Uint32Array.from(ok), Uint32Array.from(failed)));
  }
  /** `nextReleases` by entry id; both drain the same queue. */
  nextReleaseIds(): ws.ReleaseIds {
    return this.#raw.nextReleaseIds();
  }
  /** `approveIds` then `nextReleaseIds`, in one crossing. */
  approveNext(entries: Uint32Array | number[]): ws.ReleaseIds {
    return call(() => this.#raw.approveNext(Uint32Array.from(entries)));
  }
  /** `onEndedIds` then `nextReleaseIds`, in one crossing: a driver's whole round. */
  onEndedNext(ok: Uint32Array | number[], failed: Uint32Array | number[] = []): ws.ReleaseIds {
    return call(() => this.#raw.onEndedNext(Uint32Array.from(ok), Uint32Array.from(failed)));
  }
  /** The label of an entry id. */
  label(entry: number): string {
    return call(() => this.#raw.label(entry));
  }
  settle(entry: string, how: HostSettle): void {
    call(() => this.#raw.settle(entry, how));
  }
  beginQuestion(entry: string): void {
    call(() => this.#raw.beginQuestion(entry));
  }
  endQuestion(entry: string): void {
    call(() => this.#raw.endQuestion(entry));
  }
  onEnded(entry: string, outcome: Outcome): void {
    call(() => this.#raw.onEnded(entry, outcome));
  }
  cancelBatch(batch: number): void {
    call(() => this.#raw.cancelBatch(batch));
  }
  nextReleases(): Releases {
    return this.#raw.nextReleases();
  }
  inspect(batch: number): EntryStatus[] {
    return call(() => this.#raw.inspect(batch));
  }
  unfinished(): UnfinishedBatch[] {
    return this.#raw.unfinished();
  }
  [Symbol.dispose](): void {
    (this.#raw as unknown as { [Symbol.dispose]?: () => void })[Symbol.dispose]?.();
  }
}

/** Admission control for one MCP connection. */
export class Admission {
  readonly #raw: wa.Admission;
  constructor(raw: wa.Admission) {
    this.#raw = raw;
  }
  begin(id: string, cls: AdmissionClass, parent?: string): void {
    call(() => this.#raw.begin(id, cls, parent));
  }
  end(id: string): void {
    call(() => this.#raw.end(id));
  }
  abandon(id: string): void {
    call(() => this.#raw.abandon(id));
  }
  shutdown(): ShutdownReport {
    return this.#raw.shutdown();
  }
  nextAdmissions(): string[] {
    return this.#raw.nextAdmissions();
  }
  inFlight(): number {
    return this.#raw.inFlight();
  }
  [Symbol.dispose](): void {
    (this.#raw as unknown as { [Symbol.dispose]?: () => void })[Symbol.dispose]?.();
  }
}
