// The store contract behind shared keys (SHARED.md, "The store contract", says the same in
// prose): what a store must do so that `SharedKeys` can hold one limit across processes, and the
// errors it may throw. The Python package (`turnstile_scheduler.shared`) has the same contract;
// the SQLite schema and statements, the Redis script and the grant rule are the component's
// (the WIT's `shared` interface), so processes in both languages share a store.
//
// The grant rule, applied by the store atomically in every operation that changes a key:
//   while the key's earliest waiting ticket (by `seq`, the store's arrival order) exists,
//     and fewer than ITS `limit` tickets of the key are granted,
//     and the store's now >= max(last grant + ITS `delayMs` (when > 0), paused until,
//                                 when each of ITS `rates` lets ITS `weight` through):
//   grant it (granted at now, lease renewed, `grant` = the key's grant count, and each of its
//   rate windows' arrival times moved past the grant: GCRA, the component's arithmetic).
// A rate window's arrival time is kept per window (count and length) as `atMs + rest / count`.
// Before that, every ticket whose lease expired (`expires <= now`), granted or waiting, is
// removed. A store keeps ONE clock (SQLite: the machine's CLOCK_MONOTONIC; Redis: `TIME`).
import { TurnstileError } from '../errors.js';
import type { RateWindow } from '../types.js';

/** The longest key name, in bytes of UTF-8: the component's one key length (`KEY_BYTES_MAX`). */
export const KEY_LENGTH_MAX = 200;
/** The longest ticket id a store accepts. */
export const TICKET_LENGTH_MAX = 100;
/** The most tickets one `renew` may name. */
export const RENEW_TICKETS_MAX = 1000;
/** Lease bounds: a heartbeat runs every lease / 3, so a lease under 300 ms would beat too often
 * to be useful; one over an hour keeps a dead process's permits for that long. */
export const LEASE_MS_MIN = 300;
export const LEASE_MS_MAX = 3_600_000;
/** The largest limit and the longest delay or pause (24 h). */
export const LIMIT_MAX = 1_000_000;
export const DELAY_MS_MAX = 86_400_000;
/** A rate window's largest count and burst at a store (its arrival times stay exact in 53
 * bits), and the most windows one key may carry. */
export const RATE_COUNT_MAX = 1_000_000;
export const RATE_WINDOWS_MAX = 8;

/** What a request asks for; the head ticket's own terms decide its grant. */
export interface Terms {
  /** How many tickets of the key may be granted at once (processes should agree on it). */
  readonly limit: number;
  /** The least time between two grants on the key, in ms (0: none). */
  readonly delayMs: number;
  /** Rate windows every grant on the key keeps within (each window once; count and burst 1 ..=
   * 1000000; default none). */
  readonly rates?: readonly RateWindow[];
  /** Units this ticket's grant costs in each rate window (1 ..= the smallest burst; default 1). */
  readonly weight?: number;
  /** How long the ticket lives without a renewal, waiting or granted. */
  readonly leaseMs: number;
}

/** One rate window's theoretical arrival time at a store: `atMs + rest / count` ms on the
 * store's clock (`rest < count`), kept per window (`count` starts per `perMs`). */
export interface Arrival {
  readonly count: number;
  readonly perMs: number;
  readonly atMs: number;
  readonly rest: number;
}

/** A ticket's state as the store saw it at the end of an operation. `seq` is its place in the
 * key's FIFO (arrival order at the store); `grant` counts the key's grants (1, 2, ...). */
export type TicketState =
  | { readonly ticket: string; readonly state: 'waiting'; readonly seq: number;
    /** When the ticket is the head and only the delay or a pause holds it, the ms until that
     * ends (a store with wake-ups asks to be checked then); otherwise `null`. */
    readonly retryMs: number | null }
  | { readonly ticket: string; readonly state: 'granted'; readonly seq: number; readonly grant: number;
    /** The grant's time on the store's clock (Redis: ms since the epoch; SQLite: CLOCK_MONOTONIC ms plus 24 h). */
    readonly grantedMs: number }
  /** Unknown to the store: its lease expired (or it was never requested, or was removed). */
  | { readonly ticket: string; readonly state: 'lost' };

/** What `release` and `abandon` found: a granted ticket (`'released'`), a waiting one
 * (`'withdrawn'`) or none, its lease having expired (`'lost'`). */
export type Removal = 'released' | 'withdrawn' | 'lost';

/** A nudge from a store's `watch`: states it already knows (grants it made, or lost tickets),
 * a head ticket to check again after `retry.ms`, or `resync` (wake-ups may have been missed:
 * check every waiting ticket). */
export interface Wake {
  readonly states: readonly TicketState[];
  readonly retry?: { readonly ticket: string; readonly ms: number };
  readonly resync?: boolean;
}

/** A running watch: `ready` resolves once wake-ups are flowing (a wake-up for a change made
 * after that is not missed); `stop()` ends it. */
export interface Watch {
  readonly ready: Promise<void>;
  stop(): void;
}

/** A key as the store holds it (for tests and operators). Times are the store's clock. */
export interface KeyInspection {
  readonly key: string;
  readonly nowMs: number;
  readonly seq: number;
  readonly grants: number;
  readonly lastGrantMs: number;
  readonly pausedUntilMs: number;
  /** The arrival times of the key's rate windows (none: no rate window granted yet). */
  readonly arrivals: readonly Arrival[];
  readonly held: readonly { ticket: string; seq: number; grant: number; grantedMs: number; expiresMs: number }[];
  readonly waiting: readonly { ticket: string; seq: number; expiresMs: number }[];
}

/**
 * A store of shared keys. Every operation is atomic in the store (one transaction or one
 * script, one round trip), applies the grant rule above, and is idempotent for a ticket id the
 * caller chose: a retried `request` for a live ticket only renews its lease, so a retry after a
 * lost reply never makes a second ticket, and a retried `release` finds `'lost'`.
 *
 * Errors: `StoreUnavailableError` when the store cannot be reached (or stays locked) within the
 * store's own timeout; `SharedStoreError` for a store that answers something unexpected (a
 * schema of another version, say). Arguments are checked by `SharedKeys`, not here.
 */
export interface SharedStore {
  /** `'sqlite'`, `'redis'`, ... (for messages). */
  readonly kind: string;
  /** Enters `ticket` at the end of `key`'s FIFO (or renews it, when it is live already). */
  request(key: string, ticket: string, terms: Terms): Promise<TicketState>;
  /** The heartbeat: extends the leases of the live `tickets` by their own `leaseMs`, then
   * returns their states (in the same order). With no tickets it only applies the rule. */
  renew(key: string, tickets: readonly string[]): Promise<TicketState[]>;
  /** Gives back a granted ticket (its execution ended). */
  release(key: string, ticket: string): Promise<Removal>;
  /** Withdraws a waiting ticket, or gives back a grant that was never used. Same effect in the
   * store as `release`; a separate name so logs and stores can tell them apart. */
  abandon(key: string, ticket: string): Promise<Removal>;
  /** No grant on `key` before the store's now + `forMs`; a pause only extends. Returns the
   * pause's end on the store's clock. */
  pause(key: string, forMs: number): Promise<number>;
  /** Calls `wake` when tickets of `key` may have changed (see `Wake`); `tickets()` lists the
   * caller's waiting tickets on `key`. A store without push (SQLite) polls here, with a
   * bounded back-off. */
  watch(key: string, tickets: () => readonly string[], wake: (wake: Wake) => void): Watch;
  inspect(key: string): Promise<KeyInspection>;
  /** Closes connections; later calls reject with `StoreUnavailableError`. */
  close(): Promise<void>;
}

/** A shared-key store failed in a way that is not a lost connection (code `'store-failed'`):
 * a reply of an unexpected shape, a schema of another version. Subclasses narrow `code`. */
export class SharedStoreError extends TurnstileError {
  constructor(code: string, message: string, cause?: unknown) {
    super(code, message);
    if (cause !== undefined) (this as { cause?: unknown }).cause = cause;
  }
}

/** The store could not be reached, or stayed locked, within its timeout (code
 * `'store-unavailable'`). Only shared keys see it; local keys never touch a store. `store`
 * names the store (`'sqlite'`, `'redis'`), `cause` is the client's error. */
export class StoreUnavailableError extends SharedStoreError {
  declare readonly code: 'store-unavailable';
  readonly store: string;
  constructor(store: string, message: string, cause?: unknown) {
    super('store-unavailable', `${store}: ${message}`, cause);
    this.store = store;
  }
}

/** The store's file is no longer the one this process opened (code `'store-split'`): the SQLite
 * path was deleted, moved or replaced (or the file was opened on another machine), so processes
 * opening the path now would share another store than the ones already running. The store
 * fails closed: once raised, every later call raises it too, nothing more is granted or written,
 * and `SharedKeys` gives up every ticket at once with it. `path` names the file. */
export class StoreSplitError extends SharedStoreError {
  declare readonly code: 'store-split';
  readonly store: string;
  readonly path: string;
  constructor(store: string, path: string, message: string) {
    super('store-split', `${store}: ${path}: ${message}`);
    this.store = store;
    this.path = path;
  }
}

/** A ticket's lease ended before it was given back (code `'lease-lost'`): the store no longer
 * knows it (its process missed renewals for longer than the lease), so the store may grant its
 * place again. A permit's `signal` aborts with this (or with `StoreUnavailableError`, when the
 * renewals failed); the execution should stop. */
export class LeaseLostError extends SharedStoreError {
  declare readonly code: 'lease-lost';
  readonly key: string;
  readonly ticket: string;
  constructor(key: string, ticket: string, message = `the lease of ticket ${ticket} on key ${JSON.stringify(key)} expired before it was given back`) {
    super('lease-lost', message);
    this.key = key;
    this.ticket = ticket;
  }
}
