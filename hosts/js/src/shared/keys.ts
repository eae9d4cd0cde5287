// `SharedKeys`: the async client a host (the Driver) uses over a store. `acquire(key, terms)`
// resolves with a `SharedPermit` once the store granted the ticket; the permit's lease (and the
// lease of every waiting ticket) is renewed by one heartbeat per `SharedKeys`, every
// `leaseMs / 3`, in one `renew` per key. `permit.release()` gives it back when the execution
// ended; `permit.abandon()` gives back a permit never used; aborting `acquire`'s signal
// withdraws the request.
//
// Failure rules:
// - The store unreachable: `acquire`'s request rejects with `StoreUnavailableError`. A
//   waiting ticket or a permit whose renewals keep failing is given up before its lease can
//   have expired in the store (when the next heartbeat would come after `renewed + leaseMs`):
//   the waiter rejects with, and the permit's `signal` aborts with, `StoreUnavailableError`. The
//   store cannot grant that place again before the lease ends, so nothing is granted twice.
// - The store no longer knows a ticket (its lease expired): `LeaseLostError`, the same way.
// - Every wait ends: on a grant, on the signal, on a lost lease or store, or on `close()`.
import { DisposedError } from '../errors.js';
import { millis, record, signal as checkSignal, string as checkString, u32 } from '../validate.js';
import {
  DELAY_MS_MAX, KEY_LENGTH_MAX, LEASE_MS_MAX, LEASE_MS_MIN, LeaseLostError, LIMIT_MAX, RENEW_TICKETS_MAX, StoreUnavailableError,
  type Removal, type SharedStore, type TicketState, type Wake, type Watch,
} from './contract.js';

export interface SharedKeysOptions {
  /** Each ticket's lease, waiting or granted (default 10000 ms; 300 ..= 3600000): a process
   * killed with SIGKILL holds its permits at most this long. */
  leaseMs?: number;
  /** Starts every ticket id (default: the pid and random hex), so a store's tickets show which
   * process holds them. */
  owner?: string;
}

export interface AcquireTerms {
  /** The key's limit across every process (1 ..= 1000000); processes should agree on it. */
  limit: number;
  /** The least time between two grants on the key (default 0). */
  delayMs?: number;
  /** Aborting withdraws the request (or gives back a grant that raced it); `acquire` rejects
   * with the signal's reason. */
  signal?: AbortSignal;
}

interface Waiter {
  readonly ticket: string;
  readonly resolve: (permit: SharedPermit) => void;
  readonly reject: (error: unknown) => void;
  readonly cleanup: () => void;
  renewedMs: number;
}

type Granted = Extract<TicketState, { state: 'granted' }>;

/** One key's local tickets. */
interface KeyTickets {
  readonly waiting: Map<string, Waiter>;
  readonly held: Map<string, SharedPermit>;
  /** Requests sent and not answered: a wake-up can report their grant before the answer
   * arrives (it comes on another connection), and `early` keeps it until then. */
  readonly pending: Set<string>;
  readonly early: Map<string, Granted>;
  retry: ReturnType<typeof setTimeout> | undefined;
  checking: boolean;
}

/** A granted ticket. Give it back with `release()` (the execution ended) or `abandon()` (it
 * never started); `signal` aborts when its lease is lost (`LeaseLostError`) or its store
 * stayed unreachable (`StoreUnavailableError`), and then the execution should stop. */
export class SharedPermit {
  readonly key: string;
  readonly ticket: string;
  /** The ticket's place in the key's FIFO at the store, and the grant's number and time (the
   * store's clock). */
  readonly seq: number;
  readonly grant: number;
  readonly grantedMs: number;
  readonly #keys: SharedKeys;
  readonly #lost = new AbortController();
  /** @internal */ renewedMs: number;
  #done = false;

  /** @internal */
  constructor(keys: SharedKeys, key: string, state: Extract<TicketState, { state: 'granted' }>, renewedMs: number) {
    this.#keys = keys;
    this.key = key;
    this.ticket = state.ticket;
    this.seq = state.seq;
    this.grant = state.grant;
    this.grantedMs = state.grantedMs;
    this.renewedMs = renewedMs;
  }
  get signal(): AbortSignal {
    return this.#lost.signal;
  }
  /** Whether `release` or `abandon` ran, or the lease was lost. */
  get done(): boolean {
    return this.#done;
  }
  /** Gives the permit back (idempotent: a second call resolves `'lost'` without a store call).
   * Resolves with what the store found: `'lost'` means the lease had expired first. Rejects
   * with `StoreUnavailableError` when the store cannot be reached (the lease then ends on its
   * own); the permit is given up locally either way. */
  release(): Promise<Removal> {
    return this.#end('release');
  }
  /** Gives back a permit whose execution never started. */
  abandon(): Promise<Removal> {
    return this.#end('abandon');
  }
  #end(how: 'release' | 'abandon'): Promise<Removal> {
    if (this.#done) return Promise.resolve('lost');
    this.#done = true;
    return this.#keys.end(this, how);
  }
  /** @internal */
  lose(error: Error): void {
    if (this.#done) return;
    this.#done = true;
    this.#lost.abort(error);
  }
}

/**
 * Shared keys over one store: one heartbeat for all tickets of this process. A process holds
 * only the permits it asked for: each `acquire` is one ticket.
 */
export class SharedKeys {
  readonly store: SharedStore;
  readonly leaseMs: number;
  readonly owner: string;
  readonly #keys = new Map<string, KeyTickets>();
  /** One watch per key once a ticket of it waited, kept until `close()` (a Redis subscription
   * stays, so a later wait costs no round trip). */
  readonly #watches = new Map<string, Watch>();
  readonly #heartbeatMs: number;
  #heartbeat: ReturnType<typeof setInterval> | undefined;
  #count = 0;
  #closed = false;

  constructor(store: SharedStore, options: SharedKeysOptions = {}) {
    record(options, 'options', ['leaseMs', 'owner']);
    this.store = store;
    this.leaseMs = options.leaseMs === undefined ? 10_000 : u32(options.leaseMs, 'options.leaseMs', LEASE_MS_MIN, LEASE_MS_MAX);
    this.owner = options.owner === undefined ? `${process.pid}-${Math.random().toString(16).slice(2, 10)}` : checkString(options.owner, 'options.owner');
    if (this.owner.length === 0 || this.owner.length > 60) throw new RangeError(`options.owner must be 1 ..= 60 characters, got ${this.owner.length}`);
    this.#heartbeatMs = Math.floor(this.leaseMs / 3);
  }

  /** Waits for a permit on `key`: enters the key's FIFO at the store and resolves when the
   * store granted it. Rejects with the signal's reason, `StoreUnavailableError`,
   * `LeaseLostError`, or `DisposedError` after `close()`. */
  async acquire(key: string, terms: AcquireTerms): Promise<SharedPermit> {
    checkKey(key);
    record(terms, 'terms', ['limit', 'delayMs', 'signal']);
    const limit = u32(terms.limit, 'terms.limit', 1, LIMIT_MAX);
    const delayMs = terms.delayMs === undefined ? 0 : millis(terms.delayMs, 'terms.delayMs');
    if (delayMs > DELAY_MS_MAX || !Number.isInteger(delayMs)) throw new RangeError(`terms.delayMs must be an integer in 0 ..= ${DELAY_MS_MAX}, got ${delayMs}`);
    const signal = checkSignal(terms.signal, 'terms.signal');
    if (this.#closed) throw new DisposedError('these shared keys');
    signal?.throwIfAborted();
    const ticket = `${this.owner}-${++this.#count}`;
    const sentMs = Date.now();
    const k = this.#tickets(key);
    k.pending.add(ticket);
    let state: TicketState;
    let early: Granted | undefined;
    try {
      state = await this.store.request(key, ticket, { limit, delayMs, leaseMs: this.leaseMs });
    } finally {
      k.pending.delete(ticket);
      early = k.early.get(ticket);
      k.early.delete(ticket);
      this.#idle(key, k);
    }
    if (early && state.state === 'waiting') state = early;
    if (this.#closed || signal?.aborted) {
      this.#giveBack(key, ticket);
      if (this.#closed) throw new DisposedError('these shared keys');
      signal!.throwIfAborted();
    }
    if (state.state === 'granted') return this.#grant(key, state, sentMs);
    if (state.state === 'lost') throw new LeaseLostError(key, ticket, `ticket ${ticket} on key ${JSON.stringify(key)} was lost as it was requested`);
    return this.#wait(key, ticket, sentMs, state.retryMs, signal);
  }

  /** No grant on `key`, in any process, before `forMs` from now (a pause only extends).
   * Resolves with the pause's end on the store's clock. */
  pause(key: string, forMs: number): Promise<number> {
    checkKey(key);
    millis(forMs, 'forMs');
    if (forMs > DELAY_MS_MAX || !Number.isInteger(forMs)) throw new RangeError(`forMs must be an integer in 0 ..= ${DELAY_MS_MAX}, got ${forMs}`);
    return this.store.pause(key, forMs);
  }

  /** How many of this process's tickets wait and are held, by key. */
  inspect(): { key: string; waiting: number; held: number }[] {
    return [...this.#keys].map(([key, k]) => ({ key, waiting: k.waiting.size, held: k.held.size }));
  }

  /** Rejects every waiter with `DisposedError`, aborts every permit's signal, and gives every
   * ticket back to the store (waiting for the store, errors ignored: leases end anyway). The
   * store stays open. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#stopHeartbeat();
    const returns: Promise<unknown>[] = [];
    for (const [key, k] of this.#keys) {
      for (const waiter of k.waiting.values()) {
        waiter.cleanup();
        waiter.reject(new DisposedError('these shared keys'));
        returns.push(this.store.abandon(key, waiter.ticket).catch(() => undefined));
      }
      for (const permit of k.held.values()) {
        permit.lose(new DisposedError('these shared keys'));
        returns.push(this.store.abandon(key, permit.ticket).catch(() => undefined));
      }
      k.waiting.clear();
      k.held.clear();
      this.#idle(key, k);
    }
    for (const watch of this.#watches.values()) watch.stop();
    this.#watches.clear();
    await Promise.all(returns);
  }

  /** @internal `SharedPermit.release` and `abandon`. */
  end(permit: SharedPermit, how: 'release' | 'abandon'): Promise<Removal> {
    const k = this.#keys.get(permit.key);
    if (k) {
      k.held.delete(permit.ticket);
      this.#idle(permit.key, k);
    }
    return how === 'release' ? this.store.release(permit.key, permit.ticket) : this.store.abandon(permit.key, permit.ticket);
  }

  #tickets(key: string): KeyTickets {
    let k = this.#keys.get(key);
    if (!k) this.#keys.set(key, (k = { waiting: new Map(), held: new Map(), pending: new Set(), early: new Map(), retry: undefined, checking: false }));
    return k;
  }

  #grant(key: string, state: Granted, renewedMs: number): SharedPermit {
    const permit = new SharedPermit(this, key, state, renewedMs);
    this.#tickets(key).held.set(state.ticket, permit);
    this.#startHeartbeat();
    return permit;
  }

  #wait(key: string, ticket: string, sentMs: number, retryMs: number | null, signal: AbortSignal | undefined): Promise<SharedPermit> {
    const k = this.#tickets(key);
    return new Promise<SharedPermit>((resolve, reject) => {
      const onAbort = (): void => {
        if (k.waiting.get(ticket) !== waiter) return;
        k.waiting.delete(ticket);
        this.#idle(key, k);
        this.#giveBack(key, ticket);
        reject(signal!.reason);
      };
      const waiter: Waiter = {
        ticket, resolve, reject, renewedMs: sentMs,
        cleanup: () => signal?.removeEventListener('abort', onAbort),
      };
      k.waiting.set(ticket, waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#startHeartbeat();
      if (!this.#watches.has(key)) {
        const watch = this.store.watch(key, () => {
          const now = this.#keys.get(key);
          return now ? [...now.waiting.keys(), ...now.pending] : [];
        }, (wake) => this.#wake(key, wake));
        this.#watches.set(key, watch);
        // A grant made between the request and the watch being ready sent no wake-up here.
        watch.ready.then(() => this.#check(key), () => this.#check(key));
      }
      if (retryMs !== null) this.#retryAfter(key, k, retryMs);
    });
  }

  #wake(key: string, wake: Wake): void {
    const k = this.#keys.get(key);
    if (!k) return;
    this.#apply(key, k, wake.states, undefined);
    if (wake.resync) void this.#check(key);
    if (wake.retry && k.waiting.has(wake.retry.ticket)) this.#retryAfter(key, k, wake.retry.ms);
  }

  #retryAfter(key: string, k: KeyTickets, ms: number): void {
    if (k.retry !== undefined) clearTimeout(k.retry);
    k.retry = setTimeout(() => {
      k.retry = undefined;
      void this.#check(key);
    }, ms + 1);
  }

  /** Renews every local ticket of `key` and applies the states (the heartbeat, a retry, a
   * resync). At most one check per key at a time. */
  async #check(key: string): Promise<void> {
    const k = this.#keys.get(key);
    if (!k || k.checking || (k.waiting.size === 0 && k.held.size === 0)) return;
    k.checking = true;
    const tickets = [...k.waiting.keys(), ...k.held.keys()];
    const sentMs = Date.now();
    try {
      for (let i = 0; i < tickets.length; i += RENEW_TICKETS_MAX) {
        this.#apply(key, k, await this.store.renew(key, tickets.slice(i, i + RENEW_TICKETS_MAX)), sentMs);
      }
    } catch (e) {
      this.#failed(key, k, e);
    } finally {
      k.checking = false;
      this.#idle(key, k);
    }
  }

  /** States from the store: grants resolve waiters, losses reject them or abort permits, and
   * a renewal sent at `renewedMs` moves the local lease deadline. */
  #apply(key: string, k: KeyTickets, states: readonly TicketState[], renewedMs: number | undefined): void {
    for (const state of states) {
      const waiter = k.waiting.get(state.ticket);
      const permit = k.held.get(state.ticket);
      if (waiter) {
        if (state.state === 'waiting') {
          if (renewedMs !== undefined) waiter.renewedMs = renewedMs;
          if (state.retryMs !== null) this.#retryAfter(key, k, state.retryMs);
          continue;
        }
        k.waiting.delete(state.ticket);
        waiter.cleanup();
        if (state.state === 'granted') waiter.resolve(this.#grant(key, state, renewedMs ?? waiter.renewedMs));
        else waiter.reject(new LeaseLostError(key, state.ticket));
      } else if (k.pending.has(state.ticket)) {
        if (state.state === 'granted') k.early.set(state.ticket, state);
      } else if (permit) {
        if (state.state === 'lost') {
          k.held.delete(state.ticket);
          permit.lose(new LeaseLostError(key, state.ticket));
        } else if (renewedMs !== undefined) {
          permit.renewedMs = renewedMs;
        }
      }
    }
    this.#idle(key, k);
  }

  /** A renewal failed: tickets whose lease may end before the next heartbeat are given up. */
  #failed(key: string, k: KeyTickets, error: unknown): void {
    const now = Date.now();
    const unavailable = (): Error => (error instanceof StoreUnavailableError ? error : new StoreUnavailableError(this.store.kind, `renew failed: ${error instanceof Error ? error.message : String(error)}`, error));
    for (const waiter of [...k.waiting.values()]) {
      if (now + this.#heartbeatMs < waiter.renewedMs + this.leaseMs) continue;
      k.waiting.delete(waiter.ticket);
      waiter.cleanup();
      waiter.reject(unavailable());
    }
    for (const permit of [...k.held.values()]) {
      if (now + this.#heartbeatMs < permit.renewedMs + this.leaseMs) continue;
      k.held.delete(permit.ticket);
      permit.lose(unavailable());
    }
    this.#idle(key, k);
  }

  /** Clears the retry when no ticket of `key` waits, forgets the key when it has no ticket,
   * and stops the heartbeat when no key is left. */
  #idle(key: string, k: KeyTickets): void {
    if (k.waiting.size === 0) {
      if (k.retry !== undefined) clearTimeout(k.retry);
      k.retry = undefined;
    }
    if (k.waiting.size === 0 && k.held.size === 0 && k.pending.size === 0 && !k.checking && this.#keys.get(key) === k) this.#keys.delete(key);
    if (this.#keys.size === 0) this.#stopHeartbeat();
  }

  #giveBack(key: string, ticket: string): void {
    this.store.abandon(key, ticket).catch(() => undefined);
  }

  #startHeartbeat(): void {
    if (this.#heartbeat !== undefined || this.#closed) return;
    this.#heartbeat = setInterval(() => {
      for (const key of this.#keys.keys()) void this.#check(key);
    }, this.#heartbeatMs);
  }

  #stopHeartbeat(): void {
    if (this.#heartbeat !== undefined) clearInterval(this.#heartbeat);
    this.#heartbeat = undefined;
  }
}

function checkKey(key: unknown): void {
  checkString(key, 'key');
  if ((key as string).length === 0 || (key as string).length > KEY_LENGTH_MAX) throw new RangeError(`key must be 1 ..= ${KEY_LENGTH_MAX} characters, got ${(key as string).length}`);
}
