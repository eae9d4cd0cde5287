// The component's shared-key rules for this package's shared code: one private instance of the
// component per process (made on first use, and again after it broke), which every
// `SharedKeys` (its lease schedule) and every `SqliteStore` (the grant rule) uses. Every rule
// lives in the component (the engine's `shared` module), so the JS and Python packages decide
// alike and share one store; the store texts are files the package ships (`texts.ts`).
import '../node.js'; // the default loader of the component's core modules
import type * as wsh from '../component/interfaces/turnstile-scheduler-shared.js';
import { instantiateDefault } from '../turnstile.js';
import type { Instance } from '../instance.js';
import { SharedStoreError, type Arrival } from './contract.js';
import type { RateWindow } from '../types.js';

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

/** What a store may do with a key's earliest waiting ticket (the grant rule): grant it, write
 * `arrivals` (its rate windows' arrival times) and keep the key until `restedMs` at least, or leave it waiting (`full`: for a
 * release; `wait`: `ms` for the delay, a rate window or a pause), or nothing waits. */
export type Decision =
  | { readonly tag: 'grant'; readonly arrivals: Arrival[]; readonly restedMs: number }
  | { readonly tag: 'empty' }
  | { readonly tag: 'full' }
  | { readonly tag: 'wait'; readonly ms: number };

/** The head ticket's terms, as a store keeps them. */
export interface HeadTerms {
  readonly limit: number;
  readonly delayMs: number;
  readonly rates?: readonly RateWindow[];
  readonly weight?: number;
}

/** A key as a store keeps it, times on the store's clock. */
export interface KeyTerms {
  readonly held: number;
  readonly lastGrantMs: number;
  readonly pausedUntilMs: number;
  readonly arrivals: readonly Arrival[];
}

/** The grant rule on `instance` (loaded at the store's `open`). A row no client writes (a
 * limit of 0, say) is `SharedStoreError` (`store-failed`). */
export function decide(instance: Instance, head: HeadTerms | undefined, key: KeyTerms, nowMs: number): Decision {
  const h = head && { limit: head.limit, delayMs: head.delayMs, rates: [...(head.rates ?? [])], weight: head.weight ?? 1 };
  const k = {
    held: key.held, lastGrantMs: BigInt(key.lastGrantMs), pausedUntilMs: BigInt(key.pausedUntilMs),
    arrivals: key.arrivals.map((a) => ({ count: a.count, perMs: a.perMs, atMs: BigInt(a.atMs), rest: a.rest })),
  };
  const d = instance.call(
    () => instance.root.shared.decide(h, k, BigInt(nowMs)),
    (payload) => new SharedStoreError('store-failed', `the store holds a ticket no client writes: ${(payload as wsh.GrantError).message}`),
  );
  switch (d.tag) {
    case 'grant': return {
      tag: 'grant',
      arrivals: d.val.arrivals.map((a) => ({ count: a.count, perMs: a.perMs, atMs: Number(a.atMs), rest: a.rest })),
      restedMs: Number(d.val.restedMs),
    };
    case 'wait': return { tag: 'wait', ms: Number(d.val) };
    default: return { tag: d.tag };
  }
}
