// The store texts: the SQLite schema and statements, the Redis script and the Postgres schema
// and functions, read from the files this package ships in `dist/shared/store/` (build.mjs
// copies them from the repository's `shared/store/`, the one source the Python package ships
// too, so processes in either language share one store). They are data, not rules: the component does not carry them. Read once, on
// the first store `open` (this entry is Node-only).
import { readFileSync } from 'node:fs';
import { SharedStoreError } from './contract.js';

/** The SQLite statements by name (`sqlite-statements.json`); each takes `?` parameters. */
export const STATEMENT_NAMES = [
  'version', 'meta', 'setMeta', 'wipeTickets', 'wipeKeys', 'wipeArrivals', 'ensureKey', 'purge', 'ticket', 'nextSeq',
  'insert', 'renew', 'head', 'held', 'keyState', 'arrivals', 'setArrival', 'grant', 'countGrant', 'remove', 'pause', 'peek',
  'earliestExpiry', 'list', 'settle', 'forgetArrivals', 'forget', 'sweepTickets', 'sweepArrivals', 'sweepKeys', 'countKeys',
] as const;
export type StatementName = (typeof STATEMENT_NAMES)[number];

export interface SqliteTexts {
  /** The version the schema writes to `turnstile_shared_meta` and the statements need. */
  schemaVersion: number;
  /** The schema (`sqlite.sql`, one script). */
  schema: string;
  statements: Record<StatementName, string>;
}

/** The folder of the shipped texts. */
export const STORE_TEXTS = new URL('./store/', import.meta.url);

function read(name: string): string {
  try {
    return readFileSync(new URL(name, STORE_TEXTS), 'utf8');
  } catch (e) {
    throw new SharedStoreError('store-failed', `the package's store text ${name} cannot be read (a broken install?): ${e instanceof Error ? e.message : String(e)}`, e);
  }
}

let sqlite: SqliteTexts | undefined;
let redis: string | undefined;
let postgres: string | undefined;

/** The SQLite schema and statements (the same for every host). */
export function sqliteTexts(): SqliteTexts {
  if (sqlite) return sqlite;
  let file: { schemaVersion?: unknown; statements?: Record<string, unknown> } | null;
  try {
    file = JSON.parse(read('sqlite-statements.json'));
  } catch (e) {
    if (e instanceof SharedStoreError) throw e;
    throw new SharedStoreError('store-failed', `the package's sqlite-statements.json is not JSON: ${e instanceof Error ? e.message : String(e)}`, e);
  }
  const statements = file?.statements ?? {};
  const names = Object.keys(statements);
  if (!Number.isInteger(file?.schemaVersion) || names.join() !== STATEMENT_NAMES.join() || !names.every((n) => typeof statements[n] === 'string')) {
    throw new SharedStoreError('store-failed', `the package's sqlite-statements.json is not the one this code reads (schemaVersion and the statements ${STATEMENT_NAMES.join(', ')})`);
  }
  sqlite = { schemaVersion: file!.schemaVersion as number, schema: read('sqlite.sql'), statements: statements as Record<StatementName, string> };
  return sqlite;
}

/** The Redis store's script: every operation is one `EVALSHA` of it. */
export function redisScript(): string {
  redis ??= read('redis.lua');
  return redis;
}

/** The Postgres store's schema and functions (`postgres.sql`), run at open. */
export function postgresSchema(): string {
  postgres ??= read('postgres.sql');
  return postgres;
}
