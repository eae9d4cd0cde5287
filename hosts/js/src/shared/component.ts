// The component's shared-key rules for this package's shared code: one private instance of the
// component per process (made on first use, and again after it broke), which every
// `SharedKeys` (its lease schedule) and every `SqliteStore` (the grant rule) uses. Every rule
// lives in the component (the engine's `shared` module), so the JS and Python packages decide
// alike and share one store; the store texts are files the package ships (`texts.ts`).
import '../node.js'; // the default loader of the component's core modules
import type * as wsh from '../component/interfaces/turnstile-scheduler-shared.js';
import { instantiateDefault } from '../turnstile.js';
import type { Instance } from '../instance.js';
import { SharedStoreError } from './contract.js';

let current: Promise<Instance> | undefined;

/** The package's instance for shared keys. */
export async function sharedInstance(): Promise<Instance> {
  if (current) {
    const instance = await current.catch(() => undefined);
    if (instance && instance.broken === undefined) return instance;
  }
  current = instantiateDefault();
  return current;
}

/** What a store may do with a key's earliest waiting ticket (the grant rule). */
export type Decision = wsh.Decision;

/** The grant rule on `instance` (loaded at the store's `open`). A row no client writes (a
 * limit of 0, say) is `SharedStoreError` (`store-failed`). */
export function decide(instance: Instance, head: wsh.Head | undefined, held: number, lastGrantMs: number, pausedUntilMs: number, nowMs: number): Decision {
  const key = { held, lastGrantMs: BigInt(lastGrantMs), pausedUntilMs: BigInt(pausedUntilMs) };
  return instance.call(
    () => instance.root.shared.decide(head, key, BigInt(nowMs)),
    (payload) => new SharedStoreError('store-failed', `the store holds a ticket no client writes: ${(payload as wsh.GrantError).message}`),
  );
}
