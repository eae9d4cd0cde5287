// The SQLite store: processes on one machine share one database file. WAL mode (readers never
// block the writer), `BEGIN IMMEDIATE` transactions of a few statements each; no server.
//
// The clock is the machine's CLOCK_MONOTONIC (`process.hrtime.bigint()`, the clock Python's
// `time.monotonic_ns()` reads too), in ms plus 24 h (`SQLITE_CLOCK_BASE_MS`: a last grant of 0
// means "none yet", so the store's time must be past every delay). It is one clock for every
// process on the machine and it never steps, so a wall-clock change moves no lease, delay or
// pause. It is the clock `SharedKeys` counts its leases on too, so a suspended machine stops
// both. It restarts at boot: the file records the boot (`/proc/sys/kernel/random/boot_id`) and
// the first process of a new boot empties it (every process of the old boot is gone). So the
// file serves ONE machine: a file opened from another machine (a network share) is refused
// with `StoreSplitError` at that store's next transaction.
//
// File identity: the store records the file's (st_dev, st_ino) at open and checks, inside every
// transaction, that the path still names that file and that the file's boot is this machine's.
// When the file was deleted, moved or replaced, it fails closed with `StoreSplitError`: from
// then on every call raises it, nothing is granted, written or released. A file the store
// creates grants nothing before one lease (the head ticket's) from its creation, so a process
// still holding a permit of a deleted file has learned it (its next heartbeat, at most a third
// of a lease later) before the new file grants anything (when processes share one `leaseMs`).
//
// The client is better-sqlite3, an optional peer dependency (`npm install better-sqlite3`),
// loaded on `SqliteStore.open`. It is synchronous, so the store never lets SQLite wait for a
// lock: `busy_timeout` is 0, and a transaction that finds the write lock held is tried again
// after a `setTimeout` back-off (1 ms doubling to 16 ms, jittered) until `busyTimeoutMs`, so
// the event loop runs timers and other promises meanwhile.
//
// Waiting polls (SQLite has no wake-up across processes): a watched key is read, in a read
// transaction that takes no lock, every `pollMinMs` doubling to `pollMaxMs`, and back to
// `pollMinMs` after a change; a release or abandon made through this store wakes its own
// watchers at once. A poll writes only when the rule could grant something (a lease expired, or
// the head has room and its delay and pause are over).
//
// Idle keys are forgotten: every write settles the key's `idle_at_ms` (its last lease expiry,
// pause end, and last grant plus the longest delay granted) and deletes the key's row once that
// has passed with no ticket left; it also sweeps up to 16 other keys whose `idle_at_ms` passed
// (a key whose every process died), with their expired tickets. So the file holds rows only for
// live keys.
//
// The grant rule is the component's (`decide` of the WIT's `shared` interface); the schema and
// every statement are the package's files from the repository's `shared/store/` (`texts.ts`),
// read at `open`: the Python store runs the same ones, so both can share a file.
import { readFileSync, statSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Instance } from '../instance.js';
import { decide, sharedInstance, type Decision } from './component.js';
import type { RateWindow } from '../types.js';
import { sqliteTexts, type SqliteTexts, type StatementName } from './texts.js';
import {
  SharedStoreError, StoreSplitError, StoreUnavailableError,
  type Arrival, type KeyInspection, type Removal, type SharedStore, type Terms, type TicketState, type Wake, type Watch,
} from './contract.js';

export interface SqliteStoreOptions {
  /** The database file (created when missing; its folder must exist), e.g. next to the
   * workspace's config. Every process sharing keys names the same file. `''` and `':memory:'`
   * (a private database: nothing would be shared) are refused with a `RangeError`. */
  path: string;
  /** How long a transaction keeps trying for another process's write lock (without blocking
   * the event loop) before the operation fails with `StoreUnavailableError` (default 2000). */
  busyTimeoutMs?: number;
  /** The poll back-off of a watched key (defaults 2 and 25 ms). */
  pollMinMs?: number;
  pollMaxMs?: number;
}

// The slice of better-sqlite3's API used here (it is an optional peer dependency, so its types
// are not required to build this package).
interface Statement {
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): unknown[] | undefined;
  all(...params: unknown[]): unknown[][];
  raw(on: boolean): Statement;
  readonly reader: boolean;
}
interface Database {
  prepare(sql: string): Statement;
  pragma(text: string): unknown;
  exec(sql: string): void;
  transaction<A extends unknown[], R>(fn: (...args: A) => R): { immediate(...args: A): R; deferred(...args: A): R };
  close(): void;
}
type Statements = Record<StatementName, Statement>;
/** The `head` statement's row: ticket, limit, delay, lease, rates (JSON), weight. */
type HeadRow = [string, number, number, number, string, number];

const UNAVAILABLE = /^SQLITE_(BUSY|LOCKED|CANTOPEN|IOERR|FULL|READONLY|PROTOCOL|PERM|AUTH|NOTADB|CORRUPT)/;
const GRANTS_PER_CALL_MAX = 10_000;
const RETRY_MS_MAX = 16;

/** The SQLite store's time is CLOCK_MONOTONIC in ms plus this (24 h, the longest delay): a
 * last grant of 0 ("none yet") is then always longer ago than any delay. */
export const SQLITE_CLOCK_BASE_MS = 86_400_000;

/** The store's now: CLOCK_MONOTONIC (every process of the machine reads the same one; it never
 * steps) in whole ms, plus `SQLITE_CLOCK_BASE_MS`. */
export function sqliteNowMs(): number {
  return Number(process.hrtime.bigint() / 1_000_000n) + SQLITE_CLOCK_BASE_MS;
}

/** This boot of this machine (Linux's boot id; `'unknown'` elsewhere). */
function bootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || 'unknown';
  } catch {
    return 'unknown';
  }
}

interface FileId { readonly dev: bigint; readonly ino: bigint }

/** The identity of the file `path` names now; `undefined` when it names none. */
function fileId(path: string): FileId | undefined {
  try {
    const st = statSync(path, { bigint: true });
    return { dev: st.dev, ino: st.ino };
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
    throw new StoreUnavailableError('sqlite', `stat ${path}: ${e instanceof Error ? e.message : String(e)}`, e);
  }
}

/** A path that opens a private database (nothing shared), or `undefined`. */
function privatePath(path: string): string | undefined {
  if (path === '') return 'the empty path opens a temporary private database';
  if (path === ':memory:' || /^file:.*[?&]mode=memory\b/.test(path) || path.startsWith('file::memory:')) return `${JSON.stringify(path)} opens an in-memory private database`;
  return undefined;
}

function isBusy(e: unknown): boolean {
  const code = (e as { code?: unknown }).code;
  return typeof code === 'string' && (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'));
}

/** The back-off before try `attempt + 1` of a locked transaction: 1 ms doubling to 16, with
 * jitter so that processes retrying together spread out. */
function backoffMs(attempt: number): number {
  return Math.max(1, Math.round(Math.min(2 ** attempt, RETRY_MS_MAX) * (0.5 + Math.random() / 2)));
}

/** A shared-key store on one SQLite file (see the file comment). */
export class SqliteStore implements SharedStore {
  readonly kind = 'sqlite';
  readonly path: string;
  readonly #db: Database;
  readonly #s: Statements;
  /** The component's instance: the grant rule. */
  readonly #rules: Instance;
  readonly #pollMinMs: number;
  readonly #pollMaxMs: number;
  readonly #busyTimeoutMs: number;
  /** The file this store opened, and the boot it belongs to. */
  readonly #file: FileId;
  readonly #boot: string;
  /** When the file was created on the store's clock (0: before this boot): no grant before
   * this plus the head's lease. */
  readonly #createdMs: number;
  /** Set once the path no longer names the file opened: every call raises it. */
  #split: StoreSplitError | undefined;
  /** Watchers of this store by key: a local release or abandon wakes them at once. */
  readonly #pollers = new Map<string, Set<() => void>>();
  #closed = false;

  /** Opens (and, the first time, creates) the database. Rejects with `StoreUnavailableError`
   * when the file cannot be opened (or stays locked past `busyTimeoutMs`), `SharedStoreError`
   * when better-sqlite3 is not installed or the file holds another schema version, and throws
   * `RangeError` for a path that opens a private database (`''`, `':memory:'`). */
  static async open(options: SqliteStoreOptions): Promise<SqliteStore> {
    if (typeof options?.path !== 'string') throw new TypeError('options.path must be a string (the database file)');
    const refused = privatePath(options.path);
    if (refused) throw new RangeError(`options.path: ${refused}, so nothing would be shared between processes; give the path of a file`);
    const name: string = 'better-sqlite3';
    let mod: { default: new (path: string, options: { timeout: number }) => Database };
    try {
      mod = await import(name);
    } catch (e) {
      throw new SharedStoreError('client-missing', 'the SQLite store needs better-sqlite3, an optional peer dependency: npm install better-sqlite3', e);
    }
    const busyTimeoutMs = options.busyTimeoutMs ?? 2000;
    const rules = await sharedInstance();
    const texts = sqliteTexts();
    const boot = bootId();
    return retryLocked('open', busyTimeoutMs, () => {
      let db: Database;
      try {
        db = new mod.default(options.path, { timeout: 0 });
      } catch (e) {
        throw new StoreUnavailableError('sqlite', `open ${options.path}: ${e instanceof Error ? e.message : String(e)}${(e as { code?: string }).code ? ` [${(e as { code?: string }).code}]` : ''}`, e);
      }
      try {
        return new SqliteStore(db, options, rules, texts, boot);
      } catch (e) {
        db.close();
        throw e;
      }
    });
  }

  private constructor(db: Database, options: SqliteStoreOptions, rules: Instance, texts: SqliteTexts, boot: string) {
    this.path = options.path;
    this.#busyTimeoutMs = options.busyTimeoutMs ?? 2000;
    this.#pollMinMs = options.pollMinMs ?? 2;
    this.#pollMaxMs = Math.max(this.#pollMinMs, options.pollMaxMs ?? 25);
    this.#boot = boot;
    const file = fileId(this.path);
    if (!file) throw new StoreUnavailableError('sqlite', `open ${this.path}: the file is gone as it was opened`);
    this.#file = file;
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    // The version first: another version's tables may lack what this schema indexes.
    const found = db.transaction(() => {
      let version: unknown;
      try {
        version = db.prepare(texts.statements.version).raw(true).get()?.[0];
      } catch {
        version = undefined; // no meta table yet: a new file
      }
      if (version !== undefined && version !== String(texts.schemaVersion)) return version;
      db.exec(texts.schema);
      return undefined;
    }).immediate();
    if (found !== undefined) throw new SharedStoreError('store-failed', `${this.path} holds shared-key schema ${String(found)}; this package knows schema ${texts.schemaVersion} (schema 2 had no rate windows, schema 1 ran on the wall clock: delete the file once no process of an older version uses it)`);
    const s = {} as Record<string, Statement>;
    for (const [name, text] of Object.entries(texts.statements)) {
      const statement = db.prepare(text);
      s[name] = statement.reader ? statement.raw(true) : statement;
    }
    this.#db = db;
    this.#s = s as Statements;
    this.#rules = rules;
    this.#createdMs = db.transaction(() => {
      const now = sqliteNowMs();
      const recorded = this.#s.meta.get('boot')?.[0];
      if (recorded === undefined) {
        // A new file: it grants nothing for one lease (see the file comment).
        this.#s.setMeta.run('boot', boot);
        this.#s.setMeta.run('created_ms', String(now));
      } else if (recorded !== boot) {
        // The first process of a new boot: every process of the last one is gone, and its
        // times were on the last boot's clock.
        this.#s.wipeTickets.run();
        this.#s.wipeKeys.run();
        this.#s.wipeArrivals.run();
        this.#s.setMeta.run('boot', boot);
        this.#s.setMeta.run('created_ms', '0');
      }
      this.#check();
      return Number(this.#s.meta.get('created_ms')?.[0] ?? 0);
    }).immediate();
  }

  /** Inside every transaction: the path still names the file opened, of this boot; otherwise
   * the store is split (see the file comment) and stays so. */
  #check(): void {
    if (this.#split) throw this.#split;
    const now = fileId(this.path);
    let why: string | undefined;
    if (!now) why = 'the file was deleted or moved';
    else if (now.dev !== this.#file.dev || now.ino !== this.#file.ino) why = 'the path names another file now (the file was replaced)';
    else if (this.#s.meta.get('boot')?.[0] !== this.#boot) why = 'the file was opened by another machine (or boot): the SQLite store serves one machine';
    if (why === undefined) return;
    this.#split = new StoreSplitError('sqlite', this.path, `${why}; processes opening the path now would share another store than this one, so this store grants, writes and releases nothing more`);
    throw this.#split;
  }

  #transaction<R>(mode: 'immediate' | 'deferred', fn: (now: number) => R): R {
    return this.#db.transaction(() => {
      this.#check();
      return fn(sqliteNowMs());
    })[mode]();
  }

  #write<R>(what: string, fn: (now: number) => R): Promise<R> {
    return this.#run(what, () => this.#transaction('immediate', fn));
  }

  async #run<R>(what: string, fn: () => R): Promise<R> {
    if (this.#closed) throw new StoreUnavailableError('sqlite', `${what}: the store is closed`);
    return retryLocked(what, this.#busyTimeoutMs, () => {
      if (this.#closed) throw new StoreUnavailableError('sqlite', `${what}: the store is closed`);
      if (this.#split) throw this.#split;
      return fn();
    });
  }

  request(key: string, ticket: string, terms: Terms): Promise<TicketState> {
    return this.#write('request', (now) => {
      this.#s.purge.run(key, now);
      this.#s.ensureKey.run(key);
      if (this.#s.ticket.get(key, ticket)) {
        this.#s.renew.run(now, key, ticket);
      } else {
        // Terms the rule refuses never enter the key (the transaction rolls back; written, they
        // would refuse every later grant on the key until their lease ended).
        decide(this.#rules, terms, { held: 0, lastGrantMs: 0, pausedUntilMs: 0, arrivals: [] }, now);
        const seq = this.#s.nextSeq.get(key)![0];
        const rates = JSON.stringify((terms.rates ?? []).map((w) => [w.count, w.perMs, w.burst]));
        this.#s.insert.run(key, ticket, seq, terms.limit, terms.delayMs, rates, terms.weight ?? 1, terms.leaseMs, now, now + terms.leaseMs);
      }
      const head = this.#promote(key, now);
      const state = this.#state(key, ticket, head);
      this.#settle(key, now);
      return state;
    });
  }

  renew(key: string, tickets: readonly string[]): Promise<TicketState[]> {
    return this.#write('renew', (now) => {
      this.#s.purge.run(key, now);
      for (const ticket of tickets) this.#s.renew.run(now, key, ticket);
      const head = this.#promote(key, now);
      const states = tickets.map((ticket) => this.#state(key, ticket, head));
      this.#settle(key, now);
      return states;
    });
  }

  release(key: string, ticket: string): Promise<Removal> {
    return this.#remove('release', key, ticket);
  }

  abandon(key: string, ticket: string): Promise<Removal> {
    return this.#remove('abandon', key, ticket);
  }

  async #remove(what: string, key: string, ticket: string): Promise<Removal> {
    const removal = await this.#write(what, (now): Removal => {
      this.#s.purge.run(key, now);
      const row = this.#s.ticket.get(key, ticket);
      if (row) {
        this.#s.remove.run(key, ticket);
        this.#promote(key, now);
      }
      this.#settle(key, now);
      if (!row) return 'lost';
      return row[1] === null ? 'withdrawn' : 'released';
    });
    for (const nudge of this.#pollers.get(key) ?? []) nudge();
    return removal;
  }

  pause(key: string, forMs: number): Promise<number> {
    return this.#write('pause', (now) => {
      this.#s.ensureKey.run(key);
      const until = this.#s.pause.get(now + forMs, key)![0] as number;
      this.#settle(key, now);
      return until;
    });
  }

  inspect(key: string): Promise<KeyInspection> {
    return this.#run('inspect', () => this.#transaction('deferred', (nowMs) => {
      const [seq, grants, lastGrantMs, pausedUntilMs] = (this.#s.keyState.get(key) ?? [0, 0, 0, 0]) as number[];
      const rows = this.#s.list.all(key) as [string, number, number | null, number | null, number][];
      return {
        key, nowMs, seq, grants, lastGrantMs, pausedUntilMs, arrivals: this.#arrivals(key),
        held: rows.filter((r) => r[2] !== null).map(([ticket, seq, grantedMs, grant, expiresMs]) => ({ ticket, seq, grant: grant!, grantedMs: grantedMs!, expiresMs })),
        waiting: rows.filter((r) => r[2] === null).map(([ticket, seq, , , expiresMs]) => ({ ticket, seq, expiresMs })),
      };
    }));
  }

  /** How many keys the file holds a row for (live keys, and idle ones not yet swept): for tests
   * and operators. */
  keyCount(): Promise<number> {
    return this.#run('keyCount', () => this.#transaction('deferred', () => this.#s.countKeys.get()![0] as number));
  }

  watch(key: string, tickets: () => readonly string[], wake: (wake: Wake) => void): Watch {
    let delayMs = this.#pollMinMs;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stopped = false;
    const tick = (): void => {
      timer = undefined;
      if (stopped || this.#closed) return;
      const mine = tickets();
      let changed: TicketState[] = [];
      if (mine.length > 0 && !this.#split) {
        try {
          changed = this.#poll(key, mine);
        } catch {
          // The heartbeat reports a store that stays unavailable or split; the poll backs off.
        }
      }
      delayMs = changed.length > 0 ? this.#pollMinMs : mine.length === 0 ? this.#pollMaxMs : Math.min(delayMs * 2, this.#pollMaxMs);
      timer = setTimeout(tick, delayMs);
      // An idle watch (no ticket waits) does not keep the process alive.
      if (mine.length === 0) timer.unref?.();
      if (changed.length > 0) wake({ states: changed });
    };
    const nudge = (): void => {
      if (stopped || timer === undefined || tickets().length === 0) return;
      clearTimeout(timer);
      delayMs = this.#pollMinMs;
      timer = setTimeout(tick, 0);
    };
    let set = this.#pollers.get(key);
    if (!set) this.#pollers.set(key, (set = new Set()));
    set.add(nudge);
    timer = setTimeout(tick, this.#pollMinMs);
    return {
      ready: Promise.resolve(),
      stop: () => {
        stopped = true;
        if (timer !== undefined) clearTimeout(timer);
        set.delete(nudge);
        if (set.size === 0 && this.#pollers.get(key) === set) this.#pollers.delete(key);
      },
    };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#pollers.clear();
    this.#db.close();
  }

  /** After a write on `key`: its `idle_at_ms`, its row deleted once idle, and a sweep of up
   * to 16 other keys idle past their time (with their expired tickets). */
  #settle(key: string, now: number): void {
    this.#s.settle.run(key, key);
    this.#s.forgetArrivals.run(key, now);
    this.#s.forget.run(key, now);
    this.#s.sweepTickets.run(now);
    this.#s.sweepArrivals.run(now);
    this.#s.sweepKeys.run(now);
  }

  /** The grant rule (the component's `decide`): grants heads while it allows; returns the head
   * left waiting and, when only its delay or a pause holds it, the ms until it may be granted. */
  #promote(key: string, now: number): { head: string | null; retryMs: number | null } {
    for (let i = 0; i < GRANTS_PER_CALL_MAX; i++) {
      const head = this.#s.head.get(key) as HeadRow | undefined;
      const [, grants] = head ? this.#s.keyState.get(key) as number[] : [0, 0];
      const decision = this.#decide(key, head, now);
      if (decision.tag === 'empty') return { head: null, retryMs: null };
      if (decision.tag === 'full') return { head: head![0], retryMs: null };
      if (decision.tag === 'wait') return { head: head![0], retryMs: decision.ms };
      for (const a of decision.arrivals) this.#s.setArrival.run(key, a.count, a.perMs, a.atMs, a.rest);
      this.#s.grant.run(now, grants! + 1, now, key, head![0]);
      this.#s.countGrant.run(now, head![2], decision.restedMs, key);
    }
    throw new SharedStoreError('store-failed', `more than ${GRANTS_PER_CALL_MAX} grants in one operation on key ${JSON.stringify(key)}`);
  }

  /** The grant rule on the key's rows: the head's terms (its rates a JSON list of `[count, perMs,
   * burst]`), the key's counters and arrival times, and as the pause the key's, and on a new
   * file its creation plus the head's lease. */
  #decide(key: string, head: HeadRow | undefined, now: number): Decision {
    if (!head) return { tag: 'empty' };
    const [, , lastGrantMs, pausedUntilMs] = (this.#s.keyState.get(key) ?? [0, 0, 0, 0]) as number[];
    const held = this.#s.held.get(key)![0] as number;
    const [, limit, delayMs, leaseMs, rates, weight] = head;
    let windows: RateWindow[];
    try {
      windows = (JSON.parse(rates || '[]') as number[][]).map(([count, perMs, burst]) => ({ count: count!, perMs: perMs!, burst: burst! }));
    } catch {
      throw new SharedStoreError('store-failed', `the store holds a ticket no client writes: rates ${JSON.stringify(rates)}`);
    }
    const state = { held, lastGrantMs: lastGrantMs!, pausedUntilMs: Math.max(pausedUntilMs!, this.#createdMs + leaseMs), arrivals: this.#arrivals(key) };
    return decide(this.#rules, { limit, delayMs, rates: windows, weight }, state, now);
  }

  #arrivals(key: string): Arrival[] {
    return (this.#s.arrivals.all(key) as number[][]).map(([count, perMs, atMs, rest]) => ({ count: count!, perMs: perMs!, atMs: atMs!, rest: rest! }));
  }

  #state(key: string, ticket: string, head: { head: string | null; retryMs: number | null }): TicketState {
    const row = this.#s.ticket.get(key, ticket) as [number, number | null, number | null] | undefined;
    if (!row) return { ticket, state: 'lost' };
    const [seq, grantedMs, grant] = row;
    if (grantedMs !== null) return { ticket, state: 'granted', seq, grant: grant!, grantedMs };
    return { ticket, state: 'waiting', seq, retryMs: head.head === ticket ? head.retryMs : null };
  }

  /** One poll of a watched key: the tickets of `mine` that are granted or lost, read without a
   * lock; a write transaction only when the rule could grant something now (a locked file
   * throws at once: the poll is tried again later). */
  #poll(key: string, mine: readonly string[]): TicketState[] {
    const read = (): { changed: TicketState[]; promotable: boolean } => this.#transaction('deferred', (now) => {
      const rows = new Map((this.#s.peek.all(key, JSON.stringify(mine)) as [string, number, number | null, number | null][]).map((r) => [r[0], r]));
      const changed: TicketState[] = [];
      for (const ticket of mine) {
        const row = rows.get(ticket);
        if (!row) changed.push({ ticket, state: 'lost' });
        else if (row[2] !== null) changed.push({ ticket, state: 'granted', seq: row[1], grant: row[3]!, grantedMs: row[2] });
      }
      return { changed, promotable: changed.length === 0 && this.#promotable(key, now) };
    });
    const first = read();
    if (!first.promotable) return first.changed;
    this.#transaction('immediate', (now) => {
      this.#s.purge.run(key, now);
      this.#promote(key, now);
      this.#settle(key, now);
    });
    return read().changed;
  }

  #promotable(key: string, now: number): boolean {
    const earliest = this.#s.earliestExpiry.get(key)![0] as number | null;
    if (earliest !== null && earliest <= now) return true;
    const head = this.#s.head.get(key) as HeadRow | undefined;
    return this.#decide(key, head, now).tag === 'grant';
  }
}

/** Runs `fn` (one transaction), and again after a `setTimeout` back-off while it finds the
 * database locked, for at most `busyTimeoutMs`: the event loop keeps running meanwhile. */
async function retryLocked<R>(what: string, busyTimeoutMs: number, fn: () => R): Promise<R> {
  const deadline = performance.now() + busyTimeoutMs;
  for (let attempt = 0; ; attempt++) {
    try {
      return fn();
    } catch (e) {
      if (!isBusy(e) || performance.now() >= deadline) throw storeError(what, busyTimeoutMs, e);
    }
    await sleep(Math.min(backoffMs(attempt), Math.max(1, deadline - performance.now())));
  }
}

/** SQLite's errors as the contract's: the file cannot be opened, stays locked past the busy
 * timeout, or fails to read or write: `StoreUnavailableError`; the contract's own errors as
 * they are; anything else: `SharedStoreError`. */
function storeError(what: string, busyTimeoutMs: number, e: unknown): unknown {
  if (e instanceof SharedStoreError) return e;
  const code = (e as { code?: unknown }).code;
  const message = e instanceof Error ? e.message : String(e);
  if (typeof code === 'string' && UNAVAILABLE.test(code)) {
    return new StoreUnavailableError('sqlite', `${what}: ${isBusy(e) ? `the database stayed locked for more than ${busyTimeoutMs} ms (${message})` : message} [${code}]`, e);
  }
  return new SharedStoreError('store-failed', `sqlite ${what}: ${message}`, e);
}
