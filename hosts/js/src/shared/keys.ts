// `SharedKeys`: the async client a host (the Driver) uses over a store. `acquire(key, terms)`
// resolves with a `SharedPermit` once the store granted the ticket. Every ticket's lease,
// waiting or granted, is kept by the component's lease schedule (the WIT's `shared`
// interface, `engine/src/shared/lease.rs`): this client reports each request, answer and
// renewal to it and does what its polls say: send the renewals due (one `renew` per key, about
// every `leaseMs / 3`), give tickets up, and wake it at the time it names. `permit.release()`
// gives a permit back when the execution ended; `permit.abandon()` gives back a permit never
// used; aborting `acquire`'s signal withdraws the request.
//
// Failure rules:
// - The store unreachable: `acquire`'s request rejects with `StoreUnavailableError`. A
//   waiting ticket or a permit whose renewals keep failing (or go unanswered) is given up
//   before its lease can have expired in the store, counted from when its last confirmed
//   renewal was sent: the waiter rejects with, and the permit's `signal` aborts with,
//   `StoreUnavailableError`. The store cannot grant that place again before the lease ends, so
//   nothing is granted twice. A request answered too late to be sure of its lease is given back
//   and rejects the same way.
// - The store no longer knows a ticket (its lease expired): `LeaseLostError`, the same way.
// - The store is split (`StoreSplitError`: its SQLite file was deleted or replaced): every
//   ticket of every key is given up at once with it, and nothing is given back to the store
//   (this process can no longer prove what it holds there).
// - Two clients configured with the same `owner` never share a ticket: every ticket id holds a
//   random tag of its `SharedKeys` (`<owner>-<tag>-<n>`).
// - Every wait ends: on a grant, on the signal, on a lost lease or store, or on `close()`.
import { randomBytes } from 'node:crypto';
import type * as wsh from '../component/interfaces/turnstile-scheduler-shared.js';
import { DisposedError } from '../errors.js';
import { Held } from '../instance.js';
import { sharedInstance } from './component.js';
import { array, clockOption, millis, record, signal as checkSignal, string as checkString, u32, type Clock } from '../validate.js';
import type { RateWindow } from '../types.js';
import {
  DELAY_MS_MAX, KEY_LENGTH_MAX, LEASE_MS_MAX, LEASE_MS_MIN, LeaseLostError, LIMIT_MAX, RATE_COUNT_MAX, RATE_WINDOWS_MAX, RENEW_TICKETS_MAX, StoreSplitError, StoreUnavailableError,
  type Removal, type SharedStore, type TicketState, type Wake, type Watch,
} from './contract.js';

export interface SharedKeysOptions {
  /** Each ticket's lease, waiting or granted (default 10000 ms; 300 ..= 3600000): a process
   * killed with SIGKILL holds its permits at most this long. */
  leaseMs?: number;
  /** Starts every ticket id (default: the pid), so a store's tickets show which process holds
   * them; a random tag of these keys follows it, so clients given the same owner never share a
   * ticket. */
  owner?: string;
  /** The clock for leases and retries (default: `performance.now()` and `setTimeout`): the
   * driver's `clock` option, the same object. */
  clock?: Clock;
}

export interface AcquireTerms {
  /** The key's limit across every process (1 ..= 1000000); processes should agree on it. */
  limit: number;
  /** The least time between two grants on the key (default 0). */
  delayMs?: number;
  /** Rate windows every grant on the key keeps within, across processes (at most 8, each window
   * once; count and burst 1 ..= 1000000, `burst` 1 when left out; default none): GCRA at the
   * store. */
  rates?: readonly (Omit<RateWindow, 'burst'> & { burst?: number })[];
  /** Units this permit costs in each rate window (1 ..= the smallest burst; default 1). */
  weight?: number;
  /** Aborting withdraws the request (or gives back a grant that raced it); `acquire` rejects
   * with the signal's reason. */
  signal?: AbortSignal;
}

interface Waiter {
  readonly ticket: string;
  readonly resolve: (permit: SharedPermit) => void;
  readonly reject: (error: unknown) => void;
  readonly cleanup: () => void;
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
  retry: { cancel(): void } | undefined;
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
  #done = false;

  /** @internal */
  constructor(keys: SharedKeys, key: string, state: Extract<TicketState, { state: 'granted' }>) {
    this.#keys = keys;
    this.key = key;
    this.ticket = state.ticket;
    this.seq = state.seq;
    this.grant = state.grant;
    this.grantedMs = state.grantedMs;
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
 * Shared keys over one store: one lease schedule for all tickets of this process. A process
 * holds only the permits it asked for: each `acquire` is one ticket.
 */
export class SharedKeys {
  readonly store: SharedStore;
  readonly leaseMs: number;
  readonly owner: string;
  /** `<owner>-<random tag>`: every ticket id starts with it. */
  readonly #prefix: string;
  readonly #keys = new Map<string, KeyTickets>();
  /** One watch per key once a ticket of it waited, kept until `close()` (a Redis subscription
   * stays, so a later wait costs no round trip). */
  readonly #watches = new Map<string, Watch>();
  /** The lease schedule, made on the first `acquire` (loading the component is async). */
  #lease: Held<wsh.LeaseSchedule> | undefined;
  #leaseLoading: Promise<Held<wsh.LeaseSchedule>> | undefined;
  /** The timer for the schedule's `wake-at`. */
  #timer: { cancel(): void } | undefined;
  readonly #clock: Clock;
  #lastNow = 0;
  /** The store's error from the latest failed renewal, for the message of a ticket given up. */
  #lastError: unknown;
  #count = 0;
  #closed = false;

  constructor(store: SharedStore, options: SharedKeysOptions = {}) {
    record(options, 'options', ['leaseMs', 'owner', 'clock']);
    this.#clock = clockOption(options.clock, 'options.clock');
    this.store = store;
    this.leaseMs = options.leaseMs === undefined ? 10_000 : u32(options.leaseMs, 'options.leaseMs', LEASE_MS_MIN, LEASE_MS_MAX);
    this.owner = options.owner === undefined ? String(process.pid) : checkString(options.owner, 'options.owner');
    if (this.owner.length === 0 || this.owner.length > 60) throw new RangeError(`options.owner must be 1 ..= 60 characters, got ${this.owner.length}`);
    this.#prefix = `${this.owner}-${randomBytes(6).toString('hex')}`;
  }

  /** Waits for a permit on `key`: enters the key's FIFO at the store and resolves when the
   * store granted it. Rejects with the signal's reason, `StoreUnavailableError`,
   * `LeaseLostError`, or `DisposedError` after `close()`. */
  async acquire(key: string, terms: AcquireTerms): Promise<SharedPermit> {
    checkKey(key);
    record(terms, 'terms', ['limit', 'delayMs', 'rates', 'weight', 'signal']);
    const limit = u32(terms.limit, 'terms.limit', 1, LIMIT_MAX);
    const delayMs = terms.delayMs === undefined ? 0 : millis(terms.delayMs, 'terms.delayMs');
    if (delayMs > DELAY_MS_MAX || !Number.isInteger(delayMs)) throw new RangeError(`terms.delayMs must be an integer in 0 ..= ${DELAY_MS_MAX}, got ${delayMs}`);
    const rates = checkRates(terms.rates);
    const burstMin = Math.min(...rates.map((w) => w.burst), rates.length > 0 ? Infinity : 1);
    const weight = terms.weight === undefined ? 1 : u32(terms.weight, 'terms.weight', 1, burstMin);
    const signal = checkSignal(terms.signal, 'terms.signal');
    if (this.#closed) throw new DisposedError('these shared keys');
    signal?.throwIfAborted();
    await this.#loadLease();
    if (this.#closed) throw new DisposedError('these shared keys');
    signal?.throwIfAborted();
    const n = ++this.#count;
    const ticket = this.#ticketId(BigInt(n));
    const k = this.#tickets(key);
    this.#report((l) => l.requested(key, BigInt(n), this.#now()));
    this.#pump();
    k.pending.add(ticket);
    let state: TicketState;
    let early: Granted | undefined;
    try {
      state = await this.store.request(key, ticket, rates.length > 0 ? { limit, delayMs, rates, weight, leaseMs: this.leaseMs } : { limit, delayMs, leaseMs: this.leaseMs });
    } catch (e) {
      this.#forget(BigInt(n));
      if (e instanceof StoreSplitError) this.#split(e);
      throw e;
    } finally {
      k.pending.delete(ticket);
      early = k.early.get(ticket);
      k.early.delete(ticket);
      this.#idle(key, k);
    }
    if (early && state.state === 'waiting') state = early;
    if (this.#closed || signal?.aborted) {
      this.#forget(BigInt(n));
      this.#giveBack(key, ticket);
      if (this.#closed) throw new DisposedError('these shared keys');
      signal!.throwIfAborted();
    }
    if (state.state === 'lost') {
      this.#forget(BigInt(n));
      throw new LeaseLostError(key, ticket, `ticket ${ticket} on key ${JSON.stringify(key)} was lost as it was requested`);
    }
    this.#pump(); // gives the ticket up first when its answer came too late
    if (!this.#answered(BigInt(n))) {
      this.#giveBack(key, ticket);
      throw new StoreUnavailableError(this.store.kind, `the request for ticket ${ticket} on key ${JSON.stringify(key)} was answered too late to be sure of its lease (${this.leaseMs} ms); it was given back`);
    }
    if (state.state === 'granted') {
      const permit = this.#grant(key, state);
      this.#pump();
      return permit;
    }
    return this.#wait(key, ticket, state.retryMs, signal);
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
    this.#timer?.cancel();
    this.#timer = undefined;
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
    this.#lease?.dispose();
    this.#lease = undefined;
    await Promise.all(returns);
  }

  /** @internal `SharedPermit.release` and `abandon`. */
  end(permit: SharedPermit, how: 'release' | 'abandon'): Promise<Removal> {
    const k = this.#keys.get(permit.key);
    if (k) {
      k.held.delete(permit.ticket);
      this.#idle(permit.key, k);
    }
    this.#forget(this.#number(permit.ticket));
    return how === 'release' ? this.store.release(permit.key, permit.ticket) : this.store.abandon(permit.key, permit.ticket);
  }

  #loadLease(): Promise<Held<wsh.LeaseSchedule>> {
    if (this.#lease) return Promise.resolve(this.#lease);
    this.#leaseLoading ??= (async () => {
      const instance = await sharedInstance();
      const raw = instance.call(() => instance.root.shared.LeaseSchedule.create(this.leaseMs));
      this.#lease = new Held(instance, raw, this, 'these shared keys');
      return this.#lease;
    })();
    const loading = this.#leaseLoading;
    loading.catch(() => { if (this.#leaseLoading === loading) this.#leaseLoading = undefined; });
    return loading;
  }

  /** Reports to the lease schedule. A refusal is a bug of this client (it reports only what
   * happened, in order), so it throws; a trap breaks the instance (`InstanceBrokenError`). */
  #report<T>(f: (raw: wsh.LeaseSchedule) => T): T {
    const lease = this.#lease!;
    const raw = lease.get();
    return lease.instance.call(() => f(raw), (payload) => new Error(`shared keys: the lease schedule refused a report: ${(payload as wsh.LeaseError).message}`));
  }

  /** Reports that a request was answered; false when its ticket was given up first (the
   * answer came too late to be sure of its lease). */
  #answered(n: bigint): boolean {
    const lease = this.#lease!;
    const raw = lease.get();
    try {
      lease.instance.call(() => raw.answered(n), (payload) => Object.assign(new Error((payload as wsh.LeaseError).message), { leaseCode: (payload as wsh.LeaseError).code }));
      return true;
    } catch (e) {
      if ((e as { leaseCode?: string }).leaseCode === 'unknown-ticket') return false;
      throw e;
    }
  }

  /** The schedule no longer tracks ticket `n` (given back, or lost at the store). A ticket it
   * gave up already is unknown, which is fine here. */
  #forget(n: bigint): void {
    const lease = this.#lease;
    if (!lease || this.#closed) return;
    const raw = lease.get();
    try {
      lease.instance.call(() => raw.remove(n), () => new Error('unknown'));
    } catch (e) {
      if (lease.instance.broken) throw e;
    }
    this.#pump();
  }

  /** Polls the lease schedule and does what it says: gives tickets up, sends the renewals due,
   * and sets the timer for its next poll. */
  #pump(): void {
    if (this.#closed || !this.#lease) return;
    const poll = this.#report((l) => l.poll(this.#now()));
    for (const g of poll.givenUp) this.#givenUp(g);
    for (const r of poll.renewals) void this.#renew(r);
    this.#timer?.cancel();
    this.#timer = undefined;
    if (poll.wakeAt !== undefined) {
      this.#timer = this.#clock.setTimer(Number(poll.wakeAt), () => {
        this.#timer = undefined;
        this.#pump();
      });
    }
  }

  /** One renewal the schedule asked for: the store's answer goes to the schedule, and the
   * states it carries to the waiters and permits. */
  async #renew(renewal: wsh.Renewal): Promise<void> {
    const tickets = [...renewal.tickets].map((n) => this.#ticketId(n));
    let states: TicketState[] | undefined;
    let error: unknown;
    try {
      states = await this.store.renew(renewal.key, tickets);
    } catch (e) {
      error = e;
    }
    if (this.#closed) return;
    if (error instanceof StoreSplitError) return this.#split(error);
    this.#report((l) => (states ? l.renewed(renewal.id) : l.renewFailed(renewal.id)));
    const k = this.#keys.get(renewal.key);
    if (states && k) this.#apply(renewal.key, k, states);
    this.#lastError = states ? undefined : error;
    this.#pump();
  }

  /** A ticket the schedule gave up: its waiter rejects, its permit's signal aborts, with
   * `StoreUnavailableError` (a pending request finds out when it is answered). */
  #givenUp(g: wsh.GivenUp): void {
    const k = this.#keys.get(g.key);
    if (!k) return;
    const ticket = this.#ticketId(g.ticket);
    const error = this.#lastError;
    const why = `ticket ${ticket} on key ${JSON.stringify(g.key)} was given up before its lease (${this.leaseMs} ms) could end at the store: ${GIVE_UP_REASONS[g.reason]}`;
    const unavailable = error instanceof StoreUnavailableError ? new StoreUnavailableError(error.store, `${why} (${error.message})`, error) : new StoreUnavailableError(this.store.kind, error === undefined ? why : `${why} (${error instanceof Error ? error.message : String(error)})`, error);
    const waiter = k.waiting.get(ticket);
    if (waiter) {
      k.waiting.delete(ticket);
      waiter.cleanup();
      waiter.reject(unavailable);
    }
    const permit = k.held.get(ticket);
    if (permit) {
      k.held.delete(ticket);
      permit.lose(unavailable);
    }
    this.#idle(g.key, k);
  }

  /** The store is split: every waiter rejects and every permit's signal aborts with `error`,
   * at once, and no ticket is given back (the store refuses every call from now on). */
  #split(error: StoreSplitError): void {
    for (const [key, k] of [...this.#keys]) {
      for (const waiter of [...k.waiting.values()]) {
        k.waiting.delete(waiter.ticket);
        waiter.cleanup();
        this.#forget(this.#number(waiter.ticket));
        waiter.reject(error);
      }
      for (const permit of [...k.held.values()]) {
        k.held.delete(permit.ticket);
        this.#forget(this.#number(permit.ticket));
        permit.lose(error);
      }
      this.#idle(key, k);
    }
  }

  #ticketId(n: bigint): string {
    return `${this.#prefix}-${n}`;
  }

  #number(ticket: string): bigint {
    return BigInt(ticket.slice(this.#prefix.length + 1));
  }

  #tickets(key: string): KeyTickets {
    let k = this.#keys.get(key);
    if (!k) this.#keys.set(key, (k = { waiting: new Map(), held: new Map(), pending: new Set(), early: new Map(), retry: undefined, checking: false }));
    return k;
  }

  #grant(key: string, state: Granted): SharedPermit {
    const permit = new SharedPermit(this, key, state);
    this.#tickets(key).held.set(state.ticket, permit);
    return permit;
  }

  #wait(key: string, ticket: string, retryMs: number | null, signal: AbortSignal | undefined): Promise<SharedPermit> {
    const k = this.#tickets(key);
    const promise = new Promise<SharedPermit>((resolve, reject) => {
      const onAbort = (): void => {
        if (k.waiting.get(ticket) !== waiter) return;
        k.waiting.delete(ticket);
        this.#idle(key, k);
        this.#forget(this.#number(ticket));
        this.#giveBack(key, ticket);
        reject(signal!.reason);
      };
      const waiter: Waiter = {
        ticket, resolve, reject,
        cleanup: () => signal?.removeEventListener('abort', onAbort),
      };
      k.waiting.set(ticket, waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
      if (!this.#watches.has(key)) {
        const watch = this.store.watch(key, () => {
          const now = this.#keys.get(key);
          return now ? [...now.waiting.keys(), ...now.pending] : [];
        }, (wake) => this.#onWake(key, wake));
        this.#watches.set(key, watch);
        // A grant made between the request and the watch being ready sent no wake-up here.
        watch.ready.then(() => this.#check(key), () => this.#check(key));
      }
      if (retryMs !== null) this.#retryAfter(key, k, retryMs);
    });
    this.#pump();
    return promise;
  }

  #onWake(key: string, wake: Wake): void {
    const k = this.#keys.get(key);
    if (!k) return;
    this.#apply(key, k, wake.states);
    if (wake.resync) void this.#check(key);
    if (wake.retry && k.waiting.has(wake.retry.ticket)) this.#retryAfter(key, k, wake.retry.ms);
  }

  #retryAfter(key: string, k: KeyTickets, ms: number): void {
    k.retry?.cancel();
    k.retry = this.#clock.setTimer(this.#clock.now() + ms + 1, () => {
      k.retry = undefined;
      void this.#check(key);
    });
  }

  /** Asks the store for the states of every local ticket of `key` (a retry, a resync, a watch
   * that became ready) and applies them. It renews their leases at the store too, which only
   * lengthens them: the lease schedule counts only its own renewals. At most one check per key
   * at a time; a failure is left to the schedule's renewals. */
  async #check(key: string): Promise<void> {
    const k = this.#keys.get(key);
    if (!k || k.checking || (k.waiting.size === 0 && k.held.size === 0)) return;
    k.checking = true;
    const tickets = [...k.waiting.keys(), ...k.held.keys()];
    try {
      for (let i = 0; i < tickets.length; i += RENEW_TICKETS_MAX) {
        this.#apply(key, k, await this.store.renew(key, tickets.slice(i, i + RENEW_TICKETS_MAX)));
      }
    } catch (e) {
      // The lease schedule's renewals see the store's failures and give tickets up in time; a
      // split store gives every ticket up now.
      if (e instanceof StoreSplitError) this.#split(e);
    } finally {
      k.checking = false;
      this.#idle(key, k);
    }
  }

  /** States from the store: grants resolve waiters, losses reject them or abort permits (and
   * leave the lease schedule). */
  #apply(key: string, k: KeyTickets, states: readonly TicketState[]): void {
    for (const state of states) {
      const waiter = k.waiting.get(state.ticket);
      const permit = k.held.get(state.ticket);
      if (waiter) {
        if (state.state === 'waiting') {
          if (state.retryMs !== null) this.#retryAfter(key, k, state.retryMs);
          continue;
        }
        k.waiting.delete(state.ticket);
        waiter.cleanup();
        if (state.state === 'granted') waiter.resolve(this.#grant(key, state));
        else {
          this.#forget(this.#number(state.ticket));
          waiter.reject(new LeaseLostError(key, state.ticket));
        }
      } else if (k.pending.has(state.ticket)) {
        if (state.state === 'granted') k.early.set(state.ticket, state);
      } else if (permit && state.state === 'lost') {
        k.held.delete(state.ticket);
        this.#forget(this.#number(state.ticket));
        permit.lose(new LeaseLostError(key, state.ticket));
      }
    }
    this.#idle(key, k);
  }

  /** Clears the retry when no ticket of `key` waits, and forgets the key when it has no
   * ticket. */
  #idle(key: string, k: KeyTickets): void {
    if (k.waiting.size === 0) {
      k.retry?.cancel();
      k.retry = undefined;
    }
    if (k.waiting.size === 0 && k.held.size === 0 && k.pending.size === 0 && !k.checking && this.#keys.get(key) === k) this.#keys.delete(key);
  }

  /** The lease schedule's clock: whole ms, never below a reading given before. */
  #now(): bigint {
    const t = Math.floor(this.#clock.now());
    if (t > this.#lastNow) this.#lastNow = t;
    return BigInt(this.#lastNow);
  }

  #giveBack(key: string, ticket: string): void {
    this.store.abandon(key, ticket).catch(() => undefined);
  }
}

/** Why the lease schedule gave a ticket up, for its error's message. */
const GIVE_UP_REASONS: Record<wsh.GiveUpReason, string> = {
  'request-unanswered': 'its request was not answered in time',
  'renewal-failed': 'its renewals failed',
  'renewal-unanswered': 'its renewal was not answered in time',
  'not-renewed': 'it was not renewed in time (the event loop was blocked)',
};


/** `terms.rates`, checked: at most 8 windows, each once, count and burst 1 ..= 1000000 (the
 * stores keep arrival times exactly in 53 bits), a length of 1 ms or more. */
function checkRates(value: unknown): RateWindow[] {
  if (value === undefined) return [];
  const list = array(value, 'terms.rates');
  if (list.length > RATE_WINDOWS_MAX) throw new RangeError(`terms.rates must hold at most ${RATE_WINDOWS_MAX} windows, got ${list.length}`);
  const out: RateWindow[] = [];
  for (const [i, w] of list.entries()) {
    const name = `terms.rates[${i}]`;
    record(w, name, ['count', 'perMs', 'burst']);
    const r = w as Record<string, unknown>;
    const burst = r.burst === undefined ? 1 : u32(r.burst, `${name}.burst`, 1, RATE_COUNT_MAX);
    const window = { count: u32(r.count, `${name}.count`, 1, RATE_COUNT_MAX), perMs: u32(r.perMs, `${name}.perMs`, 1), burst };
    if (out.some((o) => o.count === window.count && o.perMs === window.perMs)) throw new RangeError(`${name} names the window ${window.count}/${window.perMs} ms a second time`);
    out.push(window);
  }
  return out;
}

function checkKey(key: unknown): void {
  checkString(key, 'key');
  const size = Buffer.byteLength(key as string, 'utf8');
  if (size === 0 || size > KEY_LENGTH_MAX) throw new RangeError(`key must be 1 ..= ${KEY_LENGTH_MAX} bytes of UTF-8, got ${size}`);
}
