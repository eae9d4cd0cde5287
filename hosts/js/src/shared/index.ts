// `@turnstile/scheduler/shared`: one limit across processes and machines (SHARED.md). A store
// (`SqliteStore` for processes on one machine, `RedisStore` or `PostgresStore` for several,
// `MemoryStore` for tests and a single process) behind the contract of
// `contract.ts`, and `SharedKeys`, the client a host uses over it.
export {
  DELAY_MS_MAX, KEY_LENGTH_MAX, LEASE_MS_MAX, LEASE_MS_MIN, LIMIT_MAX, RATE_COUNT_MAX, RATE_WINDOWS_MAX, RENEW_TICKETS_MAX, TICKET_LENGTH_MAX,
  LeaseLostError, SharedStoreError, StoreSplitError, StoreUnavailableError,
  type Arrival, type KeyInspection, type Removal, type SharedStore, type Terms, type TicketState, type Wake, type Watch,
} from './contract.js';
export { SharedKeys, SharedPermit, type AcquireTerms, type SharedKeysOptions } from './keys.js';
export { SqliteStore, type SqliteStoreOptions } from './sqlite.js';
export { RedisStore, type RedisStoreOptions } from './redis.js';
export { PostgresStore, type PostgresStoreOptions } from './postgres.js';
export { MemoryStore, type MemoryStoreOptions } from './memory.js';
