// The in-memory store: shared keys held in this process's memory, for tests and single-process
// use. Several `SharedKeys` (and drivers) in one process sharing one `MemoryStore` behave as
// several processes sharing a SQLite file or a Redis server: one FIFO per key by arrival, leases
// kept by heartbeats, the delay between grants and 429 pauses kept by the store.
//
// Time: the store runs on a `Clock` (the driver's `clock` option, the same object, so a test's
// virtual clock moves the store too) and keeps its own time base: its now is `startMs` plus the
// clock's time since `open`. A store's times (`grantedMs`, pauses) are never compared with a
// client's clock (clients give durations), so the offset does not matter; it must be at least
// 24 h because a last grant of 0 means "no grant yet" (the grant rule's `never`).
//
// Waiting does not poll: the store arms one timer per key, at the earliest of its next lease
// expiry, the end of the delay, rate window or pause holding its head, and the time it may
// forget the key (its leases, delay, pause and rate windows' arrival times all passed);
// when it fires (and after every operation) the store applies the grant rule and wakes the
// watchers whose tickets it granted or dropped, like Redis's one message per grant.
//
// The grant rule is the component's (`decide` of the WIT's `shared` interface), never decided
// here. Operations are synchronous inside and resolve on a microtask: nothing interleaves with
// one, so each is atomic. Each costs O(1) plus the tickets it grants, except a lease purge,
// which scans the key's tickets only when the earliest lease may have ended.
import type { Instance } from '../instance.js';
import { clockOption, type Clock } from '../validate.js';
import { decide, sharedInstance } from './component.js';
import {
  DELAY_MS_MAX, SharedStoreError, StoreUnavailableError,
  type Arrival, type KeyInspection, type Removal, type SharedStore, type Terms, type TicketState, type Wake, type Watch,
} from './contract.js';
import type { RateWindow } from '../types.js';

export interface MemoryStoreOptions {
  /** The clock the store's time and timers run on (default: `performance.now()` and
   * `setTimeout`). Give the drivers' `clock` to run everything on one virtual clock. */
  clock?: Clock;
  /** The store's time at `open`, in ms (default `Date.now()`; at least 86400000). */
  startMs?: number;
}

const GRANTS_PER_CALL_MAX = 10_000;

interface Ticket {
  readonly ticket: string;
  readonly seq: number;
  readonly limit: number;
  readonly delayMs: number;
  readonly rates?: readonly RateWindow[];
  readonly weight?: number;
  readonly leaseMs: number;
  expiresMs: number;
  grantedMs: number | null;
  grant: number;
}

/** One key: its counters, its tickets (insertion order is `seq` order), its timer. */
interface Key {
  seq: number;
  grants: number;
  lastGrantMs: number;
  pausedUntilMs: number;
  /** The longest delay a granted ticket had: the key is forgotten only once it has passed. */
  delayMaxMs: number;
  /** Each rate window's arrival time, by `count/perMs`. */
  readonly arrivals: Map<string, Arrival>;
  /** The key's windows pace as fresh ones from then: it is kept until then at least. */
  restedMs: number;
  readonly waiting: Map<string, Ticket>;
  readonly held: Map<string, Ticket>;
  /** No lease ends before this (a lower bound: renewals only lengthen leases). */
  expiryFloorMs: number;
  timer: { atMs: number; cancel(): void } | undefined;
}

interface Watcher {
  readonly tickets: () => readonly string[];
  readonly wake: (wake: Wake) => void;
}

/** A shared-key store in this process's memory (see the file comment). */
export class MemoryStore implements SharedStore {
  readonly kind = 'memory';
  readonly #rules: Instance;
  readonly #clock: Clock;
  /** The store's time minus the clock's. */
  readonly #baseMs: number;
  #lastNowMs = 0;
  readonly #keys = new Map<string, Key>();
  readonly #watchers = new Map<string, Set<Watcher>>();
  #closed = false;

  /** Loads the component's grant rule and opens an empty store. Throws `RangeError` for a
   * `startMs` under 24 h. */
  static async open(options: MemoryStoreOptions = {}): Promise<MemoryStore> {
    const clock = clockOption(options.clock, 'options.clock');
    const startMs = options.startMs ?? Date.now();
    if (!Number.isSafeInteger(startMs) || startMs < DELAY_MS_MAX) {
      throw new RangeError(`options.startMs must be an integer of at least ${DELAY_MS_MAX} (24 h: a last grant of 0 means none), got ${startMs}`);
    }
    return new MemoryStore(await sharedInstance(), clock, startMs - Math.floor(clock.now()));
  }

  private constructor(rules: Instance, clock: Clock, baseMs: number) {
    this.#rules = rules;
    this.#clock = clock;
    this.#baseMs = baseMs;
  }

  request(key: string, ticket: string, terms: Terms): Promise<TicketState> {
    return this.#op('request', key, (k, now) => {
      const live = k.waiting.get(ticket) ?? k.held.get(ticket);
      if (live) live.expiresMs = now + live.leaseMs;
      else {
        // Terms the rule refuses never enter the key (they would refuse every later grant).
        decide(this.#rules, terms, { held: 0, lastGrantMs: 0, pausedUntilMs: 0, arrivals: [] }, now);
        const t: Ticket = { ticket, seq: ++k.seq, ...terms, expiresMs: now + terms.leaseMs, grantedMs: null, grant: 0 };
        k.waiting.set(ticket, t);
        k.expiryFloorMs = Math.min(k.expiryFloorMs, t.expiresMs);
      }
      return (retryMs) => this.#state(k, ticket, retryMs);
    });
  }

  renew(key: string, tickets: readonly string[]): Promise<TicketState[]> {
    return this.#op('renew', key, (k, now) => {
      for (const ticket of tickets) {
        const t = k.waiting.get(ticket) ?? k.held.get(ticket);
        if (t) t.expiresMs = now + t.leaseMs;
      }
      return (retryMs) => tickets.map((ticket) => this.#state(k, ticket, retryMs));
    });
  }

  release(key: string, ticket: string): Promise<Removal> {
    return this.#remove('release', key, ticket);
  }

  abandon(key: string, ticket: string): Promise<Removal> {
    return this.#remove('abandon', key, ticket);
  }

  #remove(what: string, key: string, ticket: string): Promise<Removal> {
    return this.#op(what, key, (k) => {
      const removal: Removal = k.held.delete(ticket) ? 'released' : k.waiting.delete(ticket) ? 'withdrawn' : 'lost';
      return () => removal;
    });
  }

  pause(key: string, forMs: number): Promise<number> {
    return this.#op('pause', key, (k, now) => {
      k.pausedUntilMs = Math.max(k.pausedUntilMs, now + forMs);
      return () => k.pausedUntilMs;
    });
  }

  inspect(key: string): Promise<KeyInspection> {
    if (this.#closed) return Promise.reject(this.#closedError('inspect'));
    const k = this.#keys.get(key);
    const nowMs = this.#now();
    return Promise.resolve({
      key, nowMs, seq: k?.seq ?? 0, grants: k?.grants ?? 0, lastGrantMs: k?.lastGrantMs ?? 0, pausedUntilMs: k?.pausedUntilMs ?? 0,
      arrivals: [...(k?.arrivals.values() ?? [])].sort((a, b) => a.count - b.count || a.perMs - b.perMs),
      held: [...(k?.held.values() ?? [])].map((t) => ({ ticket: t.ticket, seq: t.seq, grant: t.grant, grantedMs: t.grantedMs!, expiresMs: t.expiresMs })),
      waiting: [...(k?.waiting.values() ?? [])].map((t) => ({ ticket: t.ticket, seq: t.seq, expiresMs: t.expiresMs })),
    });
  }

  watch(key: string, tickets: () => readonly string[], wake: (wake: Wake) => void): Watch {
    const watcher: Watcher = { tickets, wake };
    let set = this.#watchers.get(key);
    if (!set) this.#watchers.set(key, (set = new Set()));
    set.add(watcher);
    return {
      ready: Promise.resolve(),
      stop: () => {
        set.delete(watcher);
        if (set.size === 0 && this.#watchers.get(key) === set) this.#watchers.delete(key);
      },
    };
  }

  /** Forgets every key and cancels every timer; later calls reject with
   * `StoreUnavailableError`. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const k of this.#keys.values()) k.timer?.cancel();
    this.#keys.clear();
    this.#watchers.clear();
  }

  /** One atomic operation on `key`: drops expired leases, runs `change`, applies the grant
   * rule, wakes watchers, re-arms the key's timer; resolves with what `change`'s answer reads
   * after the rule (the head's `retryMs` when only its delay or a pause holds it). */
  #op<R>(what: string, key: string, change: (k: Key, nowMs: number) => (retry: { head: string; ms: number } | null) => R): Promise<R> {
    if (this.#closed) return Promise.reject(this.#closedError(what));
    try {
      const now = this.#now();
      const k = this.#key(key);
      const changed = this.#purge(k, now);
      const answer = change(k, now);
      const retry = this.#promote(key, k, now, changed);
      const result = answer(retry);
      this.#settle(key, k, now, retry, changed);
      return Promise.resolve(result);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** The key's timer for `atMs` fired: the same as an operation that changes nothing. The
   * store's time is at least `atMs` then (a clock may fire a fraction of a ms early). */
  #tick(key: string, atMs: number): void {
    const k = this.#keys.get(key);
    if (this.#closed || !k) return;
    k.timer = undefined;
    this.#lastNowMs = Math.max(this.#lastNowMs, atMs);
    const now = this.#now();
    const changed = this.#purge(k, now);
    const retry = this.#promote(key, k, now, changed);
    this.#settle(key, k, now, retry, changed);
  }

  /** Drops every ticket whose lease ended (`expires <= now`), granted or waiting; records them
   * as lost in `changed`. */
  #purge(k: Key, now: number): Map<string, TicketState> {
    const changed = new Map<string, TicketState>();
    if (now < k.expiryFloorMs) return changed;
    let floor = Infinity;
    for (const tickets of [k.waiting, k.held]) {
      for (const t of tickets.values()) {
        if (t.expiresMs <= now) {
          tickets.delete(t.ticket);
          changed.set(t.ticket, { ticket: t.ticket, state: 'lost' });
        } else floor = Math.min(floor, t.expiresMs);
      }
    }
    k.expiryFloorMs = floor;
    return changed;
  }

  /** The grant rule (the component's `decide`): grants heads while it says so; returns the head
   * left waiting when only its delay or a pause holds it, with the ms until then. */
  #promote(key: string, k: Key, now: number, changed: Map<string, TicketState>): { head: string; ms: number } | null {
    for (let i = 0; i < GRANTS_PER_CALL_MAX; i++) {
      const head: Ticket | undefined = k.waiting.values().next().value;
      const state = { held: k.held.size, lastGrantMs: k.lastGrantMs, pausedUntilMs: k.pausedUntilMs, arrivals: [...k.arrivals.values()] };
      const decision = decide(this.#rules, head, state, now);
      if (decision.tag === 'empty' || decision.tag === 'full') return null;
      if (decision.tag === 'wait') return { head: head!.ticket, ms: decision.ms };
      for (const a of decision.arrivals) k.arrivals.set(`${a.count}/${a.perMs}`, a);
      k.restedMs = Math.max(k.restedMs, decision.restedMs);
      const t = head!;
      k.waiting.delete(t.ticket);
      t.grantedMs = now;
      t.grant = ++k.grants;
      t.expiresMs = now + t.leaseMs;
      k.lastGrantMs = now;
      k.delayMaxMs = Math.max(k.delayMaxMs, t.delayMs);
      k.held.set(t.ticket, t);
      changed.set(t.ticket, { ticket: t.ticket, state: 'granted', seq: t.seq, grant: t.grant, grantedMs: now });
    }
    throw new SharedStoreError('store-failed', `more than ${GRANTS_PER_CALL_MAX} grants in one operation on key ${JSON.stringify(key)}`);
  }

  #state(k: Key, ticket: string, retry: { head: string; ms: number } | null): TicketState {
    const held = k.held.get(ticket);
    if (held) return { ticket, state: 'granted', seq: held.seq, grant: held.grant, grantedMs: held.grantedMs! };
    const waiting = k.waiting.get(ticket);
    if (!waiting) return { ticket, state: 'lost' };
    return { ticket, state: 'waiting', seq: waiting.seq, retryMs: retry?.head === ticket ? retry.ms : null };
  }

  /** After an operation: wakes the watchers of tickets that changed, then forgets the key or
   * re-arms its timer. */
  #settle(key: string, k: Key, now: number, retry: { head: string; ms: number } | null, changed: Map<string, TicketState>): void {
    if (changed.size > 0) this.#wake(key, changed);
    const idle = k.waiting.size === 0 && k.held.size === 0;
    const forgetAtMs = Math.max(k.pausedUntilMs, k.lastGrantMs + k.delayMaxMs, k.restedMs);
    if (idle && now >= forgetAtMs) {
      k.timer?.cancel();
      this.#keys.delete(key);
      return;
    }
    const dueMs = idle ? forgetAtMs : Math.min(k.expiryFloorMs, retry ? now + retry.ms : Infinity);
    if (k.timer?.atMs === dueMs) return;
    k.timer?.cancel();
    k.timer = undefined;
    if (dueMs === Infinity) return;
    const timer = this.#clock.setTimer(dueMs - this.#baseMs, () => this.#tick(key, dueMs));
    k.timer = { atMs: dueMs, cancel: () => timer.cancel() };
  }

  /** Each watcher of `key` hears, on a microtask (a message, as Redis sends one), about the
   * tickets of its own that were granted or dropped. */
  #wake(key: string, changed: Map<string, TicketState>): void {
    for (const watcher of this.#watchers.get(key) ?? []) {
      const states = watcher.tickets().flatMap((ticket) => changed.get(ticket) ?? []);
      if (states.length > 0) queueMicrotask(() => watcher.wake({ states }));
    }
  }

  #key(key: string): Key {
    let k = this.#keys.get(key);
    if (!k) {
      k = { seq: 0, grants: 0, lastGrantMs: 0, pausedUntilMs: 0, delayMaxMs: 0, arrivals: new Map(), restedMs: 0, waiting: new Map(), held: new Map(), expiryFloorMs: Infinity, timer: undefined };
      this.#keys.set(key, k);
    }
    return k;
  }

  /** The store's time: whole ms, never below a time it read before. */
  #now(): number {
    this.#lastNowMs = Math.max(this.#lastNowMs, Math.floor(this.#clock.now()) + this.#baseMs);
    return this.#lastNowMs;
  }

  #closedError(what: string): StoreUnavailableError {
    return new StoreUnavailableError('memory', `${what}: the store is closed`);
  }
}
