//! The store texts, owned here and served by the component, so every host runs the same SQL and
//! the same Redis script (and JS and Python processes can share one store): [`SQLITE`], the
//! schema and every statement of the SQLite store, and [`REDIS_SCRIPT`], the one Lua script
//! every Redis operation runs. A store of another kind (Postgres) adds its own set here.
//!
//! The SQLite schema is version [`SQLITE_SCHEMA_VERSION`] (`turnstile_shared_meta`); a change
//! that existing files cannot run bumps it, and a store opening a file of another version fails
//! with a clear error. The statements take `?` parameters in the order the hosts pass them.

/// The SQLite schema version the statements below run on.
pub const SQLITE_SCHEMA_VERSION: u32 = 1;

/// The SQLite store's schema and statements, by name.
#[derive(Clone, Copy, Debug)]
pub struct SqliteTexts {
    /// The schema: three tables and two indexes, created when missing (one script).
    pub schema: &'static str,
    /// The schema version a file holds.
    pub version: &'static str,
    /// Makes a key's row when missing: `(key)`.
    pub ensure_key: &'static str,
    /// Removes the tickets whose lease ended: `(key, now)`.
    pub purge: &'static str,
    /// A ticket's `seq, granted_ms, grant_no`: `(key, ticket)`.
    pub ticket: &'static str,
    /// The key's next `seq`: `(key)`.
    pub next_seq: &'static str,
    /// A new waiting ticket: `(key, ticket, seq, limit, delay, lease, now, now + lease)`.
    pub insert: &'static str,
    /// Extends a ticket's lease: `(now, key, ticket)`.
    pub renew: &'static str,
    /// The earliest waiting ticket's `ticket, limit_n, delay_ms`: `(key)`.
    pub head: &'static str,
    /// How many tickets of the key are granted: `(key)`.
    pub held: &'static str,
    /// The key's `seq, grants, last_grant_ms, paused_until_ms`: `(key)`.
    pub key_state: &'static str,
    /// Grants a ticket: `(now, grant, now, key, ticket)`.
    pub grant: &'static str,
    /// Counts a grant on the key: `(now, key)`.
    pub count_grant: &'static str,
    /// Removes a ticket: `(key, ticket)`.
    pub remove: &'static str,
    /// Extends the key's pause, returning its end: `(until, key)`.
    pub pause: &'static str,
    /// The rows of some tickets (a JSON array): `(key, tickets)`.
    pub peek: &'static str,
    /// The key's earliest lease end: `(key)`.
    pub earliest_expiry: &'static str,
    /// Every ticket of the key by `seq`: `(key)`.
    pub list: &'static str,
}

/// The SQLite store's texts.
pub const SQLITE: SqliteTexts = SqliteTexts {
    schema: include_str!("../../../shared/store/sqlite.sql"),
    version: "SELECT value FROM turnstile_shared_meta WHERE name = 'schema'",
    ensure_key: "INSERT OR IGNORE INTO turnstile_shared_keys (key) VALUES (?)",
    purge: "DELETE FROM turnstile_shared_tickets WHERE key = ? AND expires_ms <= ?",
    ticket: "SELECT seq, granted_ms, grant_no FROM turnstile_shared_tickets WHERE key = ? AND ticket = ?",
    next_seq: "UPDATE turnstile_shared_keys SET seq = seq + 1 WHERE key = ? RETURNING seq",
    insert: "INSERT INTO turnstile_shared_tickets (key, ticket, seq, limit_n, delay_ms, lease_ms, requested_ms, expires_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    renew: "UPDATE turnstile_shared_tickets SET expires_ms = ? + lease_ms WHERE key = ? AND ticket = ?",
    head: "SELECT ticket, limit_n, delay_ms FROM turnstile_shared_tickets WHERE key = ? AND granted_ms IS NULL ORDER BY seq LIMIT 1",
    held: "SELECT count(*) FROM turnstile_shared_tickets WHERE key = ? AND granted_ms IS NOT NULL",
    key_state: "SELECT seq, grants, last_grant_ms, paused_until_ms FROM turnstile_shared_keys WHERE key = ?",
    grant: "UPDATE turnstile_shared_tickets SET granted_ms = ?, grant_no = ?, expires_ms = ? + lease_ms WHERE key = ? AND ticket = ?",
    count_grant: "UPDATE turnstile_shared_keys SET grants = grants + 1, last_grant_ms = ? WHERE key = ?",
    remove: "DELETE FROM turnstile_shared_tickets WHERE key = ? AND ticket = ?",
    pause: "UPDATE turnstile_shared_keys SET paused_until_ms = max(paused_until_ms, ?) WHERE key = ? RETURNING paused_until_ms",
    peek: "SELECT ticket, seq, granted_ms, grant_no FROM turnstile_shared_tickets WHERE key = ? AND ticket IN (SELECT value FROM json_each(?))",
    earliest_expiry: "SELECT min(expires_ms) FROM turnstile_shared_tickets WHERE key = ?",
    list: "SELECT ticket, seq, granted_ms, grant_no, expires_ms FROM turnstile_shared_tickets WHERE key = ? ORDER BY seq",
};

/// The Redis store's script: every operation is one `EVALSHA` of it (script version 1).
pub const REDIS_SCRIPT: &str = include_str!("../../../shared/store/redis.lua");
