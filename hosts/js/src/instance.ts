// One instance of the component and the rule every wrapper follows when it calls into it: a
// result error becomes the wrapper's typed error; a trap (`WebAssembly.RuntimeError`, or the
// engine's stack overflowing) breaks the instance, and from then on every use of it, through
// any policy, scheduler or controller made from it, throws the same `InstanceBrokenError`.
// Disposal: every wrapper drops its resource on `dispose()`; a FinalizationRegistry drops it
// when the wrapper is collected undisposed.
import type { Root } from './component/turnstile.js';
import type * as ws from './component/interfaces/turnstile-scheduler-scheduler.js';
import { DisposedError, InstanceBrokenError } from './errors.js';

/** Loads one core module of the component by its file name. */
export type CoreModuleLoader = (name: string) => Promise<WebAssembly.Module>;

function isTrap(error: unknown): boolean {
  return error instanceof WebAssembly.RuntimeError || (error instanceof RangeError && /call stack/i.test(error.message));
}

export class Instance {
  readonly root: Root;
  broken: InstanceBrokenError | undefined;

  constructor(root: Root) {
    this.root = root;
  }

  /** Calls into the component. `onPayload` turns a WIT `result` error (jco throws it with a
   * `payload`) into the caller's typed error; a trap breaks the instance. */
  call<T>(f: () => T, onPayload?: (payload: unknown) => Error): T {
    if (this.broken) throw this.broken;
    try {
      return f();
    } catch (error) {
      if (isTrap(error)) {
        this.broken = new InstanceBrokenError(error);
        throw this.broken;
      }
      const payload = (error as { payload?: unknown } | null)?.payload;
      if (onPayload && payload !== undefined) throw onPayload(payload);
      throw error;
    }
  }

  /** The component's sentence for an entry settled with `reason` (arguments already checked). */
  explain(label: string, reason: ws.Reason): string {
    return this.call(() => this.root.scheduler.explain(label, reason));
  }

  /** `explain` for an outcome the package reports: never throws. On a broken instance (whose
   * batches all fail with `InstanceBrokenError` anyway) it names the reason. */
  explainOrKind(label: string, reason: ws.Reason): string {
    try {
      return this.explain(label, reason);
    } catch {
      return `not run: ${reason.tag} (the scheduler's explanation is unavailable: its instance is broken)`;
    }
  }
}

interface Droppable {
  [Symbol.dispose]?: () => void;
}

const drop = (raw: Droppable): void => {
  try {
    raw[Symbol.dispose]?.();
  } catch {
    // A broken instance cannot run the destructor; its memory goes with it.
  }
};

const backstop = typeof FinalizationRegistry === 'undefined' ? undefined : new FinalizationRegistry<Droppable>(drop);

/** A resource of the component held by a wrapper: `get()` checks the instance and disposal. */
export class Held<T extends object> {
  readonly instance: Instance;
  #raw: T | undefined;
  readonly #what: string;

  constructor(instance: Instance, raw: T, owner: object, what: string) {
    this.instance = instance;
    this.#raw = raw;
    this.#what = what;
    backstop?.register(owner, raw as Droppable, this);
  }

  get(): T {
    if (this.instance.broken) throw this.instance.broken;
    if (this.#raw === undefined) throw new DisposedError(this.#what);
    return this.#raw;
  }

  get disposed(): boolean {
    return this.#raw === undefined;
  }

  dispose(): void {
    const raw = this.#raw;
    if (raw === undefined) return;
    this.#raw = undefined;
    backstop?.unregister(this);
    if (!this.instance.broken) drop(raw as Droppable);
  }
}
