// The Redis store: processes on several machines share keys through one Redis server. Every
// operation is ONE call of one Lua script (`EVALSHA`, loaded on first use), so it is atomic and
// one round trip; the clock is the server's `TIME`, read inside the script.
//
// Waiting does not poll, and a grant wakes only its own process: each store instance subscribes,
// on a second connection, to a channel of its own (`P:wake:<random>`), and every ticket is
// requested with that channel. When the script grants a ticket (other than a request's own,
// which the reply carries) it publishes the grant to that ticket's channel; when the head left
// waiting is held only by the delay or a pause, it tells the head's channel when to check again.
// So a grant costs one message to one process, however many wait, and only the head's process
// wakes for a delay. A message lost to a reconnection is covered by the resubscription (a
// `resync` wake-up) and by the heartbeat.
//
// Keys, for shared key K and prefix P (default `turnstile`), all with the hash tag `{K}` so a
// Redis Cluster keeps them in one slot: `P:{K}:state`, `P:{K}:queue`, `P:{K}:leases`,
// `P:{K}:tickets`, `P:{K}:held`. The script is the package's file from the repository's
// `shared/store/redis.lua` (`texts.ts`), read at `open`: the Python store (`redis.py`) uses the
// same keys and the same script, so both can share a server.
//
// The client is ioredis, an optional peer dependency (`npm install ioredis`).
import { randomBytes } from 'node:crypto';
import { redisScript } from './texts.js';
import {
  SharedStoreError, StoreUnavailableError,
  type KeyInspection, type Removal, type SharedStore, type Terms, type TicketState, type Wake, type Watch,
} from './contract.js';

export interface RedisStoreOptions {
  /** A `redis://` or `rediss://` URL (default `redis://127.0.0.1:6379`); ignored with `client`. */
  url?: string;
  /** An ioredis client of your own (its options kept; a duplicate is made for wake-ups). Not
   * closed by `close()`. */
  client?: unknown;
  /** Starts every Redis key (default `'turnstile'`). */
  prefix?: string;
  /** How long one operation may take before it fails with `StoreUnavailableError` (default
   * 2000 ms; with `client`, that client's own `commandTimeout` applies). */
  opTimeoutMs?: number;
}

// The slice of ioredis's API used here (an optional peer dependency: its types are not
// required to build this package).
interface Client {
  status: string;
  connect(): Promise<void>;
  disconnect(): void;
  quit(): Promise<unknown>;
  duplicate(): Client;
  defineCommand(name: string, definition: { numberOfKeys: number; lua: string }): void;
  subscribe(channel: string): Promise<unknown>;
  on(event: string, listener: (...args: any[]) => void): unknown;
  turnstileShared(...args: (string | number)[]): Promise<unknown>;
}

type Row = [string, number, number?, number?, number?];

/** A shared-key store on a Redis server (see the file comment). */
export class RedisStore implements SharedStore {
  readonly kind = 'redis';
  readonly prefix: string;
  readonly #client: Client;
  readonly #own: boolean;
  /** This instance's wake-up channel, its subscriber connection and the SUBSCRIBE. */
  readonly channel: string;
  #subscriber: Client | undefined;
  #subscribed: Promise<void> | undefined;
  /** Watchers by key. */
  readonly #watchers = new Map<string, Set<(wake: Wake | { k?: unknown; g?: unknown; h?: unknown; r?: unknown }) => void>>();
  #closed = false;

  /** Connects (or takes `client`). Rejects with `StoreUnavailableError` when the server
   * cannot be reached within `opTimeoutMs`, `SharedStoreError` when ioredis is not installed. */
  static async open(options: RedisStoreOptions = {}): Promise<RedisStore> {
    const opTimeoutMs = options.opTimeoutMs ?? 2000;
    const script = redisScript();
    if (options.client !== undefined) return new RedisStore(options.client as Client, false, script, options.prefix);
    const name: string = 'ioredis';
    let mod: { default: new (url: string, options: object) => Client };
    try {
      mod = await import(name);
    } catch (e) {
      throw new SharedStoreError('client-missing', 'the Redis store needs ioredis, an optional peer dependency: npm install ioredis', e);
    }
    const client = new mod.default(options.url ?? 'redis://127.0.0.1:6379', {
      lazyConnect: true,
      commandTimeout: opTimeoutMs,
      connectTimeout: opTimeoutMs,
      // Each operation is idempotent (ticket ids are the caller's), so one resend after a
      // reconnection is safe.
      maxRetriesPerRequest: 1,
      retryStrategy: (times: number) => Math.min(50 * times, 1000),
    });
    client.on('error', () => undefined);
    try {
      await client.connect();
    } catch (e) {
      client.disconnect();
      throw new StoreUnavailableError('redis', `connect to ${redact(options.url ?? 'redis://127.0.0.1:6379')}: ${e instanceof Error ? e.message : String(e)}`, e);
    }
    return new RedisStore(client, true, script, options.prefix);
  }

  private constructor(client: Client, own: boolean, script: string, prefix = 'turnstile') {
    this.#client = client;
    this.#own = own;
    this.prefix = prefix;
    this.channel = `${prefix}:wake:${randomBytes(8).toString('hex')}`;
    client.defineCommand('turnstileShared', { numberOfKeys: 5, lua: script });
  }

  #keys(key: string): string[] {
    const base = `${this.prefix}:{${key}}`;
    return [`${base}:state`, `${base}:queue`, `${base}:leases`, `${base}:tickets`, `${base}:held`];
  }

  async #call(what: string, key: string, ...args: (string | number)[]): Promise<unknown> {
    if (this.#closed) throw new StoreUnavailableError('redis', `${what}: the store is closed`);
    try {
      return await this.#client.turnstileShared(...this.#keys(key), what, key, ...args);
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e);
      if ((e as { name?: string }).name === 'ReplyError') throw new SharedStoreError('store-failed', `redis ${what}: ${message}`, e);
      throw new StoreUnavailableError('redis', `${what}: ${message}`, e);
    }
  }

  async request(key: string, ticket: string, terms: Terms): Promise<TicketState> {
    const rates = terms.rates?.length ? terms.rates.map((w) => `${w.count}/${w.perMs}/${w.burst}`).join(',') : '-';
    return toState(await this.#call('request', key, ticket, terms.limit, terms.delayMs, terms.leaseMs, this.channel, terms.weight ?? 1, rates) as Row);
  }

  async renew(key: string, tickets: readonly string[]): Promise<TicketState[]> {
    const rows = await this.#call('renew', key, ...tickets) as Row[];
    return rows.map(toState);
  }

  async release(key: string, ticket: string): Promise<Removal> {
    return await this.#call('release', key, ticket) as Removal;
  }

  async abandon(key: string, ticket: string): Promise<Removal> {
    return await this.#call('abandon', key, ticket) as Removal;
  }

  async pause(key: string, forMs: number): Promise<number> {
    return Number(await this.#call('pause', key, forMs));
  }

  async inspect(key: string): Promise<KeyInspection> {
    const out = await this.#call('inspect', key) as unknown[];
    const [nowMs, seq, grants, lastGrantMs, pausedUntilMs] = out.slice(0, 5).map(Number) as number[];
    const flat = (out[5] as (number | string)[]).map(Number);
    const arrivals = [];
    for (let i = 0; i + 3 < flat.length; i += 4) arrivals.push({ count: flat[i]!, perMs: flat[i + 1]!, atMs: flat[i + 2]!, rest: flat[i + 3]! });
    arrivals.sort((a, b) => a.count - b.count || a.perMs - b.perMs);
    const rows = (out.slice(6) as [string, number, number, number, string | number][])
      .map(([ticket, seq, grantedMs, grant, expires]) => ({ ticket, seq, grantedMs, grant, expiresMs: Number(expires) }))
      .sort((a, b) => a.seq - b.seq);
    return {
      key, nowMs: nowMs!, seq: seq!, grants: grants!, lastGrantMs: lastGrantMs!, pausedUntilMs: pausedUntilMs!, arrivals,
      held: rows.filter((r) => r.grantedMs > 0),
      waiting: rows.filter((r) => r.grantedMs === 0).map(({ ticket, seq, expiresMs }) => ({ ticket, seq, expiresMs })),
    };
  }

  watch(key: string, tickets: () => readonly string[], wake: (wake: Wake) => void): Watch {
    const listener = (event: Wake | { k?: unknown; g?: unknown; h?: unknown; r?: unknown }): void => {
      if ('states' in event) return wake(event as Wake);
      const parsed = parseWake(event, new Set(tickets()));
      if (parsed) wake(parsed);
    };
    let set = this.#watchers.get(key);
    if (!set) this.#watchers.set(key, (set = new Set()));
    set.add(listener);
    const ready = this.#subscribe().catch((e: unknown) => {
      throw new StoreUnavailableError('redis', `subscribe: ${e instanceof Error ? e.message : String(e)}`, e);
    });
    return {
      ready,
      stop: () => {
        set.delete(listener);
        if (set.size === 0 && this.#watchers.get(key) === set) this.#watchers.delete(key);
      },
    };
  }

  /** Subscribes this instance's channel, once (a failed SUBSCRIBE is tried again next time). */
  #subscribe(): Promise<void> {
    if (this.#subscribed) return this.#subscribed;
    const sub = this.#subscriber ??= this.#subscriberClient();
    const subscribed = sub.subscribe(this.channel).then(() => undefined);
    this.#subscribed = subscribed;
    subscribed.catch(() => { if (this.#subscribed === subscribed) this.#subscribed = undefined; });
    return subscribed;
  }

  #subscriberClient(): Client {
    const sub = this.#client.duplicate();
    sub.on('error', () => undefined);
    sub.on('message', (_channel: string, message: string) => {
      let m: { k?: unknown; g?: unknown; h?: unknown; r?: unknown };
      try {
        m = JSON.parse(message);
      } catch {
        return;
      }
      for (const listener of this.#watchers.get(String(m.k)) ?? []) listener(m);
    });
    let connected = false;
    sub.on('ready', () => {
      // ioredis resubscribes after a reconnection; wake-ups sent meanwhile were lost.
      if (connected) for (const set of this.#watchers.values()) for (const listener of set) listener({ states: [], resync: true });
      connected = true;
    });
    return sub;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#watchers.clear();
    const quit = (c: Client): Promise<unknown> => c.quit().catch(() => c.disconnect());
    await Promise.all([this.#subscriber ? quit(this.#subscriber) : undefined, this.#own ? quit(this.#client) : undefined]);
  }
}

function toState(row: Row): TicketState {
  const [ticket, code, seq, a, b] = row;
  if (code === 2) return { ticket, state: 'granted', seq: seq!, grant: a!, grantedMs: b! };
  if (code === 1) return { ticket, state: 'waiting', seq: seq!, retryMs: a! >= 0 ? a! : null };
  return { ticket, state: 'lost' };
}

/** A wake-up message (`{k: key, g: [[ticket, seq, grant, grantedMs]...], h: head, r: retry
 * ms}`), kept to the tickets of `mine`; `undefined` when none of it concerns them. */
function parseWake(m: { g?: unknown; h?: unknown; r?: unknown }, mine: ReadonlySet<string>): Wake | undefined {
  const states: TicketState[] = [];
  for (const g of Array.isArray(m.g) ? m.g as [string, number, number, number][] : []) {
    if (mine.has(g[0])) states.push({ ticket: g[0], state: 'granted', seq: g[1], grant: g[2], grantedMs: g[3] });
  }
  const retry = typeof m.h === 'string' && mine.has(m.h) && typeof m.r === 'number' && m.r >= 0 ? { ticket: m.h, ms: m.r } : undefined;
  if (states.length === 0 && !retry) return undefined;
  return retry ? { states, retry } : { states };
}

function redact(url: string): string {
  return url.replace(/\/\/[^@/]*@/, '//***@');
}
