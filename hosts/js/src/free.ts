// The component's free functions (`retry-after`, `class-of-method`) for the package's own free
// functions and statics (`RateLimitedError.fromHeader`, `classOf` of `@turnstile/scheduler/mcp`),
// which have no instance at hand. They are pure (given the wall clock), so any instance answers
// alike; the package keeps a private one, made by the first `Turnstile.load()` (and again after
// it broke), so a user's instance is never touched by them.
import type * as wa from './component/interfaces/turnstile-scheduler-admission.js';
import type { Instance } from './instance.js';

let shared: Instance | undefined;

/** @internal `Turnstile.load` sets it. */
export function setFreeInstance(instance: Instance): void {
  shared = instance;
}

/** @internal Whether `Turnstile.load` must make one (none yet, or the last one broke). */
export function needsFreeInstance(): boolean {
  return shared === undefined || shared.broken !== undefined;
}

/** What the component's `retry-after` error (`empty`, `malformed`) becomes, to be caught here. */
const UNREAD = new Error('Retry-After unread');

function instance(what: string): Instance {
  if (!shared) throw new TypeError(`${what} asks the component: load it first (\`await Turnstile.load()\`, once per process)`);
  return shared;
}

/** The wait a `Retry-After` value asks for, in milliseconds (the component's `retry-after`, at
 * `Date.now()`), or undefined when it is empty or malformed (the caller's fallback applies). */
export function retryAfterMs(header: string, what: string): number | undefined {
  const i = instance(what);
  const now = BigInt(Math.max(0, Math.floor(Date.now())));
  try {
    return Number(i.call(() => i.root.scheduler.retryAfter(header, now), () => UNREAD));
  } catch (error) {
    if (error === UNREAD) return undefined;
    throw error;
  }
}

/** @internal The component's class of an MCP method (`class-of-method`). */
export function classOfMethod(method: string, what: string): Exclude<wa.Class, 'reentrant'> {
  const i = instance(what);
  return i.call(() => i.root.admission.classOfMethod(method)) as Exclude<wa.Class, 'reentrant'>;
}

