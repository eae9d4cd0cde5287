CREATE TABLE IF NOT EXISTS turnstile_shared_meta (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
INSERT OR IGNORE INTO turnstile_shared_meta (name, value) VALUES ('schema', '3');
CREATE TABLE IF NOT EXISTS turnstile_shared_keys (
  key TEXT PRIMARY KEY NOT NULL,
  seq INTEGER NOT NULL DEFAULT 0,
  grants INTEGER NOT NULL DEFAULT 0,
  last_grant_ms INTEGER NOT NULL DEFAULT 0,
  paused_until_ms INTEGER NOT NULL DEFAULT 0,
  delay_max_ms INTEGER NOT NULL DEFAULT 0,
  rested_ms INTEGER NOT NULL DEFAULT 0,
  idle_at_ms INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS turnstile_shared_keys_idle ON turnstile_shared_keys (idle_at_ms);
CREATE TABLE IF NOT EXISTS turnstile_shared_tickets (
  key TEXT NOT NULL,
  ticket TEXT NOT NULL,
  seq INTEGER NOT NULL,
  limit_n INTEGER NOT NULL,
  delay_ms INTEGER NOT NULL,
  rates TEXT NOT NULL,
  weight INTEGER NOT NULL,
  lease_ms INTEGER NOT NULL,
  requested_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL,
  granted_ms INTEGER,
  grant_no INTEGER,
  PRIMARY KEY (key, ticket)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS turnstile_shared_tickets_seq ON turnstile_shared_tickets (key, seq);
CREATE INDEX IF NOT EXISTS turnstile_shared_tickets_expiry ON turnstile_shared_tickets (key, expires_ms);
CREATE TABLE IF NOT EXISTS turnstile_shared_arrivals (
  key TEXT NOT NULL,
  count INTEGER NOT NULL,
  per_ms INTEGER NOT NULL,
  at_ms INTEGER NOT NULL,
  rest INTEGER NOT NULL,
  PRIMARY KEY (key, count, per_ms)
) WITHOUT ROWID;