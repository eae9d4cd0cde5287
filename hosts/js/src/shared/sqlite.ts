// The SQLite store: processes on one machine share one database file. WAL mode (readers never
// block the writer), `BEGIN IMMEDIATE` transactions of a few statements each, `busy_timeout`
// for the short waits on the write lock; no server. The clock is the machine's wall clock
// (`Date.now()`), which every process on the machine shares.
//
// The client is better-sqlite3, an optional peer dependency (`npm install better-sqlite3`),
// loaded on `SqliteStore.open`. It is synchronous: a transaction blocks the event loop for its
// few statements, and for at most `busyTimeoutMs` while another process holds the write lock.
//
// Waiting polls (SQLite has no wake-up across processes): a watched key is read, in a read
// transaction that takes no lock, every `pollMinMs` doubling to `pollMaxMs`, and back to
// `pollMinMs` after a change; a release or abandon made through this store wakes its own
// watchers at once. A poll writes only when the rule could grant something (a lease expired, or
// the head has room and its delay and pause are over).
//
// The grant rule is the component's (`decide` of the WIT's `shared` interface); the schema and
// every statement are the package's files from the repository's `shared/store/` (`texts.ts`),
// read at `open`: the Python store runs the same ones, so both can share a file.
import type { Instance } from '../instance.js';
import { decide, sharedInstance } from './component.js';
import { sqliteTexts, type SqliteTexts, type StatementName } from './texts.js';
import {
  SharedStoreError, StoreUnavailableError,
  type KeyInspection, type Removal, type SharedStore, type Terms, type TicketState, type Wake, type Watch,
} from './contract.js';

export interface SqliteStoreOptions {
  /** The database file (created when missing; its folder must exist), e.g. next to the
   * workspace's config. Every process sharing keys names the same file. */
  path: string;
  /** How long a transaction waits for another process's write lock before the operation
   * fails with `StoreUnavailableError` (default 2000). */
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

const UNAVAILABLE = /^SQLITE_(BUSY|LOCKED|CANTOPEN|IOERR|FULL|READONLY|PROTOCOL|PERM|AUTH|NOTADB|CORRUPT)/;
const GRANTS_PER_CALL_MAX = 10_000;

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
  /** Watchers of this store by key: a local release or abandon wakes them at once. */
  readonly #pollers = new Map<string, Set<() => void>>();
  #closed = false;

  /** Opens (and, the first time, creates) the database. Rejects with `StoreUnavailableError`
   * when the file cannot be opened, `SharedStoreError` when better-sqlite3 is not installed or
   * the file holds another schema version. */
  static async open(options: SqliteStoreOptions): Promise<SqliteStore> {
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
    return sqliteCall('open', busyTimeoutMs, () => {
      let db: Database;
      try {
        db = new mod.default(options.path, { timeout: busyTimeoutMs });
      } catch (e) {
        throw new StoreUnavailableError('sqlite', `open ${options.path}: ${e instanceof Error ? e.message : String(e)}${(e as { code?: string }).code ? ` [${(e as { code?: string }).code}]` : ''}`, e);
      }
      try {
        return new SqliteStore(db, options, rules, texts);
      } catch (e) {
        db.close();
        throw e;
      }
    });
  }

  private constructor(db: Database, options: SqliteStoreOptions, rules: Instance, texts: SqliteTexts) {
    this.path = options.path;
    this.#busyTimeoutMs = options.busyTimeoutMs ?? 2000;
    this.#pollMinMs = options.pollMinMs ?? 2;
    this.#pollMaxMs = Math.max(this.#pollMinMs, options.pollMaxMs ?? 25);
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.transaction(() => db.exec(texts.schema)).immediate();
    const s = {} as Record<string, Statement>;
    for (const [name, text] of Object.entries(texts.statements)) {
      const statement = db.prepare(text);
      s[name] = statement.reader ? statement.raw(true) : statement;
    }
    this.#db = db;
    this.#s = s as Statements;
    this.#rules = rules;
    const version = this.#s.version.get()?.[0];
    if (version !== String(texts.schemaVersion)) throw new SharedStoreError('store-failed', `${this.path} holds shared-key schema ${String(version)}; this package knows schema ${texts.schemaVersion}`);
  }

  #write<R>(what: string, fn: (now: number) => R): Promise<R> {
    return this.#run(what, () => this.#db.transaction(() => fn(Date.now())).immediate());
  }

  #run<R>(what: string, fn: () => R): Promise<R> {
    if (this.#closed) return Promise.reject(new StoreUnavailableError('sqlite', `${what}: the store is closed`));
    try {
      return Promise.resolve(sqliteCall(what, this.#busyTimeoutMs, fn));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  request(key: string, ticket: string, terms: Terms): Promise<TicketState> {
    return this.#write('request', (now) => {
      this.#s.purge.run(key, now);
      this.#s.ensureKey.run(key);
      if (this.#s.ticket.get(key, ticket)) {
        this.#s.renew.run(now, key, ticket);
      } else {
        const seq = this.#s.nextSeq.get(key)![0];
        this.#s.insert.run(key, ticket, seq, terms.limit, terms.delayMs, terms.leaseMs, now, now + terms.leaseMs);
      }
      const head = this.#promote(key, now);
      return this.#state(key, ticket, head);
    });
  }

  renew(key: string, tickets: readonly string[]): Promise<TicketState[]> {
    return this.#write('renew', (now) => {
      this.#s.purge.run(key, now);
      for (const ticket of tickets) this.#s.renew.run(now, key, ticket);
      const head = this.#promote(key, now);
      return tickets.map((ticket) => this.#state(key, ticket, head));
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
      if (!row) return 'lost';
      this.#s.remove.run(key, ticket);
      this.#promote(key, now);
      return row[1] === null ? 'withdrawn' : 'released';
    });
    for (const nudge of this.#pollers.get(key) ?? []) nudge();
    return removal;
  }

  pause(key: string, forMs: number): Promise<number> {
    return this.#write('pause', (now) => {
      this.#s.ensureKey.run(key);
      return this.#s.pause.get(now + forMs, key)![0] as number;
    });
  }

  inspect(key: string): Promise<KeyInspection> {
    return this.#run('inspect', () => this.#db.transaction(() => {
      const [seq, grants, lastGrantMs, pausedUntilMs] = (this.#s.keyState.get(key) ?? [0, 0, 0, 0]) as number[];
      const rows = this.#s.list.all(key) as [string, number, number | null, number | null, number][];
      return {
        key, nowMs: Date.now(), seq, grants, lastGrantMs, pausedUntilMs,
        held: rows.filter((r) => r[2] !== null).map(([ticket, seq, grantedMs, grant, expiresMs]) => ({ ticket, seq, grant: grant!, grantedMs: grantedMs!, expiresMs })),
        waiting: rows.filter((r) => r[2] === null).map(([ticket, seq, , , expiresMs]) => ({ ticket, seq, expiresMs })),
      };
    }).deferred());
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
      if (mine.length > 0) {
        try {
          changed = this.#poll(key, mine);
        } catch {
          // The heartbeat reports a store that stays unavailable; the poll backs off.
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

  /** The grant rule (the component's `decide`): grants heads while it allows; returns the head
   * left waiting and, when only its delay or a pause holds it, the ms until it may be granted. */
  #promote(key: string, now: number): { head: string | null; retryMs: number | null } {
    for (let i = 0; i < GRANTS_PER_CALL_MAX; i++) {
      const head = this.#s.head.get(key) as [string, number, number] | undefined;
      const [, grants, lastGrantMs, pausedUntilMs] = head ? this.#s.keyState.get(key) as number[] : [0, 0, 0, 0];
      const held = head ? this.#s.held.get(key)![0] as number : 0;
      const decision = decide(this.#rules, head && { limit: head[1], delayMs: head[2] }, held, lastGrantMs!, pausedUntilMs!, now);
      if (decision.tag === 'empty') return { head: null, retryMs: null };
      if (decision.tag === 'full') return { head: head![0], retryMs: null };
      if (decision.tag === 'wait') return { head: head![0], retryMs: Number(decision.val) };
      this.#s.grant.run(now, grants! + 1, now, key, head![0]);
      this.#s.countGrant.run(now, key);
    }
    throw new SharedStoreError('store-failed', `more than ${GRANTS_PER_CALL_MAX} grants in one operation on key ${JSON.stringify(key)}`);
  }

  #state(key: string, ticket: string, head: { head: string | null; retryMs: number | null }): TicketState {
    const row = this.#s.ticket.get(key, ticket) as [number, number | null, number | null] | undefined;
    if (!row) return { ticket, state: 'lost' };
    const [seq, grantedMs, grant] = row;
    if (grantedMs !== null) return { ticket, state: 'granted', seq, grant: grant!, grantedMs };
    return { ticket, state: 'waiting', seq, retryMs: head.head === ticket ? head.retryMs : null };
  }

  /** One poll of a watched key: the tickets of `mine` that are granted or lost, read without a
   * lock; a write transaction only when the rule could grant something now. */
  #poll(key: string, mine: readonly string[]): TicketState[] {
    const read = (): { changed: TicketState[]; promotable: boolean } => this.#db.transaction(() => {
      const now = Date.now();
      const rows = new Map((this.#s.peek.all(key, JSON.stringify(mine)) as [string, number, number | null, number | null][]).map((r) => [r[0], r]));
      const changed: TicketState[] = [];
      for (const ticket of mine) {
        const row = rows.get(ticket);
        if (!row) changed.push({ ticket, state: 'lost' });
        else if (row[2] !== null) changed.push({ ticket, state: 'granted', seq: row[1], grant: row[3]!, grantedMs: row[2] });
      }
      return { changed, promotable: changed.length === 0 && this.#promotable(key, now) };
    }).deferred();
    const first = read();
    if (!first.promotable) return first.changed;
    this.#db.transaction(() => {
      const now = Date.now();
      this.#s.purge.run(key, now);
      this.#promote(key, now);
    }).immediate();
    return read().changed;
  }

  #promotable(key: string, now: number): boolean {
    const earliest = this.#s.earliestExpiry.get(key)![0] as number | null;
    if (earliest !== null && earliest <= now) return true;
    const head = this.#s.head.get(key) as [string, number, number] | undefined;
    if (!head) return false;
    const [, , lastGrantMs, pausedUntilMs] = (this.#s.keyState.get(key) ?? [0, 0, 0, 0]) as number[];
    const held = this.#s.held.get(key)![0] as number;
    return decide(this.#rules, { limit: head[1], delayMs: head[2] }, held, lastGrantMs!, pausedUntilMs!, now).tag === 'grant';
  }
}

/** Runs `fn`, turning SQLite's errors into the contract's: the file cannot be opened, stays
 * locked past the busy timeout, or fails to read or write: `StoreUnavailableError`; anything
 * else: `SharedStoreError`. */
function sqliteCall<R>(what: string, busyTimeoutMs: number, fn: () => R): R {
  try {
    return fn();
  } catch (e) {
    if (e instanceof SharedStoreError) throw e;
    const code = (e as { code?: unknown }).code;
    const message = e instanceof Error ? e.message : String(e);
    if (typeof code === 'string' && UNAVAILABLE.test(code)) {
      const locked = code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED');
      throw new StoreUnavailableError('sqlite', `${what}: ${locked ? `the database stayed locked for more than ${busyTimeoutMs} ms (${message})` : message} [${code}]`, e);
    }
    throw new SharedStoreError('store-failed', `sqlite ${what}: ${message}`, e);
  }
}
