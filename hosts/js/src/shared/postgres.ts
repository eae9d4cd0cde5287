// The Postgres store: processes on several machines share keys through one Postgres database,
// for fleets that already keep their state there. Every operation is ONE call of one function
// of the store text `shared/store/postgres.sql` (`texts.ts`), which the first `open` of a
// database runs in one transaction under an advisory lock (tables and functions created, the
// text's digest recorded, so later opens only read it): one statement, so one short
// transaction and one round trip. Each function locks the key's row first, reads the server's
// clock (`clock_timestamp()`) after the lock, and applies the grant rule (the component's
// `decide`, written in PL/pgSQL as the Redis script writes it in Lua; both are tested against
// `tests/shared/grant-rule.txt`). Nothing waits inside a transaction but for the key's row
// lock, which other operations hold for their own few statements.
//
// Waiting does not poll: each store instance has a random name, its `owner`, which is also its
// wake-up channel. Every ticket is stored under its owner, so two clients never share a ticket
// even with the same ticket id, and a grant made by another process's operation is sent, by
// `NOTIFY` at commit, to the channel of the ticket's owner only; so is the retry time of a head
// held only by the delay or a pause. This store LISTENs on its channel on one connection of its
// own (made on the first `watch`, remade after it drops, with a `resync` wake-up); the
// heartbeat re-checks as well, so a lost notification costs at most one renewal period.
//
// The client is `pg` (node-postgres) 8.x, an optional peer dependency (`npm install pg`): a pool
// of up to `poolMax` connections for operations, plus the listening one.
import { createHash, randomBytes } from 'node:crypto';
import { postgresSchema } from './texts.js';
import {
  SharedStoreError, StoreUnavailableError,
  type KeyInspection, type Removal, type SharedStore, type Terms, type TicketState, type Wake, type Watch,
} from './contract.js';

export interface PostgresStoreOptions {
  /** A `postgres://` connection string (default: libpq's environment, `PGHOST` and the rest,
   * as `pg` reads it). Every process sharing keys names the same database. */
  url?: string;
  /** How long one operation (or a connection) may take before it fails with
   * `StoreUnavailableError` (default 2000 ms): enforced by the client, and by the server as
   * `statement_timeout`, which bounds a wait on a key's row lock too. */
  opTimeoutMs?: number;
  /** The most connections for operations (default 4); the listening connection is one more. */
  poolMax?: number;
}

// The slice of pg's API used here (an optional peer dependency: its types are not required to
// build this package).
interface QueryResult { rows: unknown[][] }
interface PoolClient {
  query(config: { text: string; values?: unknown[]; rowMode?: 'array' }): Promise<QueryResult>;
  release(error?: Error | boolean): void;
}
interface Pool {
  query(config: { text: string; values?: unknown[]; rowMode: 'array' }): Promise<QueryResult>;
  connect(): Promise<PoolClient>;
  on(event: 'error', listener: (error: Error) => void): unknown;
  end(): Promise<void>;
}
interface Client {
  connect(): Promise<void>;
  query(text: string): Promise<unknown>;
  on(event: 'notification', listener: (message: { channel: string; payload?: string }) => void): unknown;
  on(event: 'error' | 'end', listener: (error?: Error) => void): unknown;
  end(): Promise<void>;
}
interface Pg {
  Pool: new (config: object) => Pool;
  Client: new (config: object) => Client;
}

type Row = [string, number, string | number, string | number, string | number, string | number];
type Listener = (event: Wake | { k?: unknown; g?: unknown; h?: unknown; r?: unknown }) => void;

/** An advisory lock (one key of the two-int space) that serializes opening stores: the schema
 * script creates or replaces functions, which two transactions must not do at once. */
const SCHEMA_LOCK = [0x7475726e, 1];
/** SQLSTATEs of a server that cannot answer now (connection, shutdown, resources, timeouts,
 * a lock wait cut short): `StoreUnavailableError`. Any other SQLSTATE is `SharedStoreError`. */
const UNAVAILABLE = /^(08|53|57|58|40|55P03|57014)/;

/** A shared-key store on a Postgres database (see the file comment). */
export class PostgresStore implements SharedStore {
  readonly kind = 'postgres';
  /** This instance's name: every ticket it requests is stored under it, and it is its wake-up
   * channel. */
  readonly owner: string;
  readonly #pg: Pg;
  readonly #pool: Pool;
  readonly #config: object;
  readonly #opTimeoutMs: number;
  /** The last operation on each key, which the next one waits for. */
  readonly #tails = new Map<string, Promise<void>>();
  /** Watchers by key, and the listening connection. */
  readonly #watchers = new Map<string, Set<Listener>>();
  #listener: Promise<Client> | undefined;
  #listening: Client | undefined;
  #reconnect: ReturnType<typeof setTimeout> | undefined;
  #closed = false;

  /** Connects and creates the tables and functions when missing. Rejects with
   * `StoreUnavailableError` when the server cannot be reached within `opTimeoutMs`,
   * `SharedStoreError` when `pg` is not installed or the database holds another schema
   * version (or the role may not create the tables). */
  static async open(options: PostgresStoreOptions = {}): Promise<PostgresStore> {
    const name: string = 'pg';
    let mod: { default: Pg };
    try {
      mod = await import(name);
    } catch (e) {
      throw new SharedStoreError('client-missing', 'the Postgres store needs pg, an optional peer dependency: npm install pg', e);
    }
    const opTimeoutMs = options.opTimeoutMs ?? 2000;
    const config = {
      ...(options.url === undefined ? {} : { connectionString: options.url }),
      connectionTimeoutMillis: opTimeoutMs,
      query_timeout: opTimeoutMs,
      statement_timeout: opTimeoutMs,
      keepAlive: true,
      application_name: 'turnstile-shared',
    };
    const pool = new mod.default.Pool({ ...config, max: options.poolMax ?? 4, idleTimeoutMillis: 30_000 });
    // An idle connection that drops (a server restart) is an event, not a crash; the next
    // operation gets a fresh connection.
    pool.on('error', () => undefined);
    const store = new PostgresStore(mod.default, pool, config, opTimeoutMs);
    try {
      await store.#setup(postgresSchema(), options.url);
    } catch (e) {
      await pool.end().catch(() => undefined);
      throw e;
    }
    return store;
  }

  private constructor(pg: Pg, pool: Pool, config: object, opTimeoutMs: number) {
    this.#pg = pg;
    this.#opTimeoutMs = opTimeoutMs;
    this.#pool = pool;
    this.#config = config;
    this.owner = `turnstile_${randomBytes(8).toString('hex')}`;
  }

  /** Runs the store text once per database and text: it records its digest (`script` in
   * `turnstile_shared_meta`), and an open that finds its own digest there changes nothing
   * (re-creating the functions at every open would serialize opens on the lock and make every
   * other session re-plan its calls). A database of another schema is refused before anything
   * is written to it. */
  async #setup(schema: string, url: string | undefined): Promise<void> {
    let client: PoolClient;
    try {
      client = await this.#pool.connect();
    } catch (e) {
      throw new StoreUnavailableError('postgres', `connect to ${redact(url ?? '(libpq environment)')}: ${e instanceof Error ? e.message : String(e)}`, e);
    }
    const digest = createHash('sha256').update(schema).digest('hex');
    const meta = async (): Promise<Map<string, string>> => {
      // Asked first, so that a new database is no error (which would abort a transaction).
      const exists = (await client.query({ text: "SELECT to_regclass('turnstile_shared_meta') IS NOT NULL", rowMode: 'array' })).rows[0]?.[0];
      if (exists !== true) return new Map();
      const rows = (await client.query({ text: "SELECT name, value FROM turnstile_shared_meta WHERE name IN ('schema', 'script')", rowMode: 'array' })).rows as [string, string][];
      return new Map(rows);
    };
    let failed: Error | undefined;
    try {
      const current = (found: Map<string, string>) => (found.get('schema') ?? '1') !== '1' || found.get('script') === digest;
      let found = await meta();
      let version = found.get('schema');
      if (!current(found)) {
        await client.query({ text: 'BEGIN' });
        await client.query({ text: 'SELECT pg_advisory_xact_lock($1, $2)', values: SCHEMA_LOCK });
        // Again under the lock: another process may have run a text since.
        found = await meta();
        version = found.get('schema');
        if (!current(found)) {
          await client.query({ text: schema });
          await client.query({
            text: "INSERT INTO turnstile_shared_meta (name, value) VALUES ('script', $1) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
            values: [digest],
          });
          version = (await meta()).get('schema');
        }
        await client.query({ text: 'COMMIT' });
      }
      if (version !== '1') throw new SharedStoreError('store-failed', `the database holds shared-key schema ${String(version)}; this package knows schema 1`);
    } catch (e) {
      failed = e instanceof Error ? e : new Error(String(e));
      throw e instanceof SharedStoreError ? e : failure('open', e);
    } finally {
      client.release(failed);
    }
  }

  /** One operation on `key`: after every earlier operation of this store on the key (so they
   * reach the server in the order they were called, as on one connection), within
   * `opTimeoutMs` of the call. */
  #call(what: string, key: string, text: string, values: unknown[]): Promise<unknown[][]> {
    if (this.#closed) return Promise.reject(new StoreUnavailableError('postgres', `${what}: the store is closed`));
    const query = async (): Promise<unknown[][]> => {
      try {
        return (await this.#pool.query({ text, values, rowMode: 'array' })).rows;
      } catch (e) {
        throw failure(what, e);
      }
    };
    const before = this.#tails.get(key);
    const run = before ? before.then(query) : query();
    const tail = run.then(() => undefined, () => undefined);
    this.#tails.set(key, tail);
    void tail.then(() => { if (this.#tails.get(key) === tail) this.#tails.delete(key); });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new StoreUnavailableError('postgres', `${what}: no answer within ${this.#opTimeoutMs} ms`)), this.#opTimeoutMs);
    });
    return Promise.race([run, late]).finally(() => clearTimeout(timer));
  }

  async request(key: string, ticket: string, terms: Terms): Promise<TicketState> {
    const rates = JSON.stringify((terms.rates ?? []).map((w) => [w.count, w.perMs, w.burst]));
    const rows = await this.#call('request', key, 'SELECT * FROM turnstile_shared_request_v2($1, $2, $3, $4, $5, $6, $7, $8)', [key, this.owner, ticket, terms.limit, terms.delayMs, terms.leaseMs, rates, terms.weight ?? 1]);
    return toState(rows[0] as Row);
  }

  async renew(key: string, tickets: readonly string[]): Promise<TicketState[]> {
    const rows = await this.#call('renew', key, 'SELECT * FROM turnstile_shared_renew_v2($1, $2, $3)', [key, this.owner, tickets]);
    return (rows as Row[]).map(toState);
  }

  release(key: string, ticket: string): Promise<Removal> {
    return this.#remove('release', key, ticket);
  }

  abandon(key: string, ticket: string): Promise<Removal> {
    return this.#remove('abandon', key, ticket);
  }

  async #remove(what: string, key: string, ticket: string): Promise<Removal> {
    const rows = await this.#call(what, key, 'SELECT turnstile_shared_remove_v2($1, $2, $3)', [key, this.owner, ticket]);
    return rows[0]![0] as Removal;
  }

  async pause(key: string, forMs: number): Promise<number> {
    const rows = await this.#call('pause', key, 'SELECT turnstile_shared_pause_v2($1, $2)', [key, forMs]);
    return Number(rows[0]![0]);
  }

  async inspect(key: string): Promise<KeyInspection> {
    const rows = await this.#call('inspect', key, 'SELECT turnstile_shared_inspect_v2($1)', [key]);
    const out = rows[0]![0] as { now: number; key: Record<string, number> | null; arrivals: number[][]; tickets: [string, number, number | null, number | null, number][] };
    const k = out.key;
    return {
      key, nowMs: Number(out.now), seq: Number(k?.seq ?? 0), grants: Number(k?.grants ?? 0),
      lastGrantMs: Number(k?.last_grant_ms ?? 0), pausedUntilMs: Number(k?.paused_until_ms ?? 0),
      arrivals: out.arrivals.map(([count, perMs, atMs, rest]) => ({ count: Number(count), perMs: Number(perMs), atMs: Number(atMs), rest: Number(rest) })),
      held: out.tickets.filter((r) => r[2] !== null).map(([ticket, seq, grantedMs, grant, expiresMs]) => ({ ticket, seq, grant: grant!, grantedMs: grantedMs!, expiresMs })),
      waiting: out.tickets.filter((r) => r[2] === null).map(([ticket, seq, , , expiresMs]) => ({ ticket, seq, expiresMs })),
    };
  }

  watch(key: string, tickets: () => readonly string[], wake: (wake: Wake) => void): Watch {
    const listener: Listener = (event) => {
      if ('states' in event) return wake(event as Wake);
      const parsed = parseWake(event, new Set(tickets()));
      if (parsed) wake(parsed);
    };
    let set = this.#watchers.get(key);
    if (!set) this.#watchers.set(key, (set = new Set()));
    set.add(listener);
    const ready = this.#listen().then(() => undefined, (e: unknown) => {
      throw e instanceof StoreUnavailableError ? e : new StoreUnavailableError('postgres', `listen: ${e instanceof Error ? e.message : String(e)}`, e);
    });
    return {
      ready,
      stop: () => {
        set.delete(listener);
        if (set.size === 0 && this.#watchers.get(key) === set) this.#watchers.delete(key);
      },
    };
  }

  /** The listening connection, made once (and again after it dropped or failed). */
  #listen(): Promise<Client> {
    if (this.#listener) return this.#listener;
    const listener = (async () => {
      const client = new this.#pg.Client(this.#config);
      client.on('notification', (m) => {
        let message: { k?: unknown; g?: unknown; h?: unknown; r?: unknown };
        try {
          message = JSON.parse(m.payload ?? '');
        } catch {
          return;
        }
        for (const l of this.#watchers.get(String(message.k)) ?? []) l(message);
      });
      const lost = (): void => {
        if (this.#listening !== client) return;
        this.#listening = undefined;
        this.#listener = undefined;
        client.end().catch(() => undefined);
        this.#relisten(100);
      };
      client.on('error', lost);
      client.on('end', lost);
      try {
        await client.connect();
        await client.query(`LISTEN "${this.owner}"`);
      } catch (e) {
        client.end().catch(() => undefined);
        throw failure('listen', e);
      }
      if (this.#closed) {
        client.end().catch(() => undefined);
        throw new StoreUnavailableError('postgres', 'listen: the store is closed');
      }
      this.#listening = client;
      return client;
    })();
    this.#listener = listener;
    listener.catch(() => {
      if (this.#listener !== listener) return;
      this.#listener = undefined;
      this.#relisten(500);
    });
    return listener;
  }

  /** Listens again after `ms` while anyone watches; then every watcher resyncs (notifications
   * sent meanwhile were lost). */
  #relisten(ms: number): void {
    if (this.#closed || this.#reconnect !== undefined || this.#watchers.size === 0) return;
    this.#reconnect = setTimeout(() => {
      this.#reconnect = undefined;
      if (this.#closed || this.#watchers.size === 0) return;
      this.#listen().then(() => {
        for (const set of this.#watchers.values()) for (const l of set) l({ states: [], resync: true });
      }, () => undefined);
    }, ms);
    this.#reconnect.unref?.();
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#watchers.clear();
    if (this.#reconnect !== undefined) clearTimeout(this.#reconnect);
    const listening = this.#listening;
    this.#listening = undefined;
    await Promise.all([listening?.end().catch(() => undefined), this.#pool.end().catch(() => undefined)]);
  }
}

function toState(row: Row): TicketState {
  const [ticket, code, seq, a, b, retry] = row;
  if (code === 2) return { ticket, state: 'granted', seq: Number(seq), grant: Number(a), grantedMs: Number(b) };
  if (code === 1) return { ticket, state: 'waiting', seq: Number(seq), retryMs: Number(retry) >= 0 ? Number(retry) : null };
  return { ticket, state: 'lost' };
}

/** A wake-up message (`{k: key, g: [[ticket, seq, grant, grantedMs]], h: head, r: retry ms}`),
 * kept to the tickets of `mine`; `undefined` when none of it concerns them. */
function parseWake(m: { g?: unknown; h?: unknown; r?: unknown }, mine: ReadonlySet<string>): Wake | undefined {
  const states: TicketState[] = [];
  for (const g of Array.isArray(m.g) ? m.g as [string, number, number, number][] : []) {
    if (mine.has(g[0])) states.push({ ticket: g[0], state: 'granted', seq: g[1], grant: g[2], grantedMs: g[3] });
  }
  const retry = typeof m.h === 'string' && mine.has(m.h) && typeof m.r === 'number' && m.r >= 0 ? { ticket: m.h, ms: m.r } : undefined;
  if (states.length === 0 && !retry) return undefined;
  return retry ? { states, retry } : { states };
}

/** A driver's error as the contract's: a server that cannot answer now (no connection, a
 * timeout, a shutdown, a lock wait cut short) is `StoreUnavailableError`; an error the server
 * raised for any other reason is `SharedStoreError`. */
function failure(what: string, e: unknown): SharedStoreError {
  if (e instanceof SharedStoreError) return e;
  const message = e instanceof Error ? e.message : String(e);
  const sqlstate = (e as { code?: unknown }).code;
  const fromServer = typeof sqlstate === 'string' && /^[0-9A-Z]{5}$/.test(sqlstate);
  if (fromServer && !UNAVAILABLE.test(sqlstate)) return new SharedStoreError('store-failed', `postgres ${what}: ${message} [${sqlstate}]`, e);
  return new StoreUnavailableError('postgres', `${what}: ${message}${fromServer ? ` [${sqlstate}]` : ''}`, e);
}

function redact(url: string): string {
  return url.replace(/\/\/[^@/]*@/, '//***@');
}
