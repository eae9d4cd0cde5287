-- Turnstile shared keys on Postgres, schema 1: the store text both packages ship and run when a
-- store opens and the database does not hold this text's SHA-256 (`script` in
-- turnstile_shared_meta, which the opening store writes after it), in one transaction under an
-- advisory lock (so two processes opening at once do not race on the catalog). Tables are created when missing; the functions are created or
-- replaced (their names carry the schema version, so a later schema never changes what a
-- running older client calls: version 2 added rate windows, as columns older clients leave at
-- their defaults, and a process of version 1 still grants by its own rule, without windows).
--
-- One row per key, one per ticket. A ticket's identity is (key, owner, ticket): `owner` is the
-- store instance that requested it, a random name that is also its wake-up channel, so two
-- clients can never share a ticket even when they chose the same ticket id.
--
-- Every operation is ONE call of one function below: one statement, so one transaction and one
-- round trip. It locks the key's row first (an upsert: INSERT ... ON CONFLICT DO UPDATE, which
-- also makes the row), reads the server's clock after the lock (clock_timestamp(), never the
-- client's), removes the tickets whose lease ended, applies the grant rule, notifies the
-- channel of every ticket it granted (but the caller's own request, which the reply carries;
-- NOTIFY is delivered at commit), and forgets the key when it is idle (no ticket, no delay or
-- pause ahead). Nothing inside waits but for the key's row lock, which other operations hold
-- only for their own few statements. `request` also removes up to 8 other keys that went idle
-- unseen (their last tickets' leases ended), skipping rows another transaction holds.
CREATE TABLE IF NOT EXISTS turnstile_shared_meta (name text PRIMARY KEY, value text NOT NULL);
INSERT INTO turnstile_shared_meta (name, value) VALUES ('schema', '1') ON CONFLICT (name) DO NOTHING;
CREATE TABLE IF NOT EXISTS turnstile_shared_keys (
  key text PRIMARY KEY,
  seq bigint NOT NULL DEFAULT 0,
  grants bigint NOT NULL DEFAULT 0,
  last_grant_ms bigint NOT NULL DEFAULT 0,
  paused_until_ms bigint NOT NULL DEFAULT 0,
  -- the longest delay any ticket of the key asked for, so the key outlives its last grant by it
  delay_max_ms bigint NOT NULL DEFAULT 0,
  -- when the key is idle unless an operation comes first: its last lease, delay or pause ends
  idle_at_ms bigint NOT NULL DEFAULT 0
);
-- two ms past the latest arrival time of the key's rate windows: they are as fresh from then
ALTER TABLE turnstile_shared_keys ADD COLUMN IF NOT EXISTS rested_ms bigint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS turnstile_shared_keys_idle ON turnstile_shared_keys (idle_at_ms);
CREATE TABLE IF NOT EXISTS turnstile_shared_tickets (
  key text NOT NULL,
  owner text NOT NULL,
  ticket text NOT NULL,
  seq bigint NOT NULL,
  limit_n integer NOT NULL,
  delay_ms bigint NOT NULL,
  lease_ms bigint NOT NULL,
  expires_ms bigint NOT NULL,
  granted_ms bigint,
  grant_no bigint,
  PRIMARY KEY (key, owner, ticket)
);
CREATE INDEX IF NOT EXISTS turnstile_shared_tickets_waiting ON turnstile_shared_tickets (key, seq) WHERE granted_ms IS NULL;
-- the ticket's rate windows, [[count, per_ms, burst], ...], and its weight in each
ALTER TABLE turnstile_shared_tickets ADD COLUMN IF NOT EXISTS rates jsonb NOT NULL DEFAULT '[]';
ALTER TABLE turnstile_shared_tickets ADD COLUMN IF NOT EXISTS weight integer NOT NULL DEFAULT 1;
-- each rate window's theoretical arrival time, at_ms + rest / count (GCRA, the component's
-- arithmetic: engine/src/schedule/rate.rs)
CREATE TABLE IF NOT EXISTS turnstile_shared_arrivals (
  key text NOT NULL,
  count bigint NOT NULL,
  per_ms bigint NOT NULL,
  at_ms bigint NOT NULL,
  rest bigint NOT NULL,
  PRIMARY KEY (key, count, per_ms)
);

-- The server's clock in ms since the epoch.
CREATE OR REPLACE FUNCTION turnstile_shared_now_v2() RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

-- Locks the key's row (making it when missing) until the transaction ends; then the clock.
CREATE OR REPLACE FUNCTION turnstile_shared_lock_v2(p_key text) RETURNS bigint LANGUAGE sql AS $$
  INSERT INTO turnstile_shared_keys AS k (key) VALUES (p_key)
    ON CONFLICT (key) DO UPDATE SET seq = k.seq;
  SELECT turnstile_shared_now_v2();
$$;

CREATE OR REPLACE FUNCTION turnstile_shared_purge_v2(p_key text, p_now bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM turnstile_shared_tickets t WHERE t.key = p_key AND t.expires_ms <= p_now;
  RETURN FOUND;
END $$;

-- A ticket's rate windows (its `rates`) with the key's arrival times (0 + 0: never granted).
CREATE OR REPLACE FUNCTION turnstile_shared_windows_v2(p_key text, p_rates jsonb)
RETURNS TABLE (count bigint, per_ms bigint, burst bigint, at_ms bigint, rest bigint) LANGUAGE sql STABLE AS $$
  SELECT (r.w->>0)::bigint, (r.w->>1)::bigint, (r.w->>2)::bigint, coalesce(a.at_ms, 0), coalesce(a.rest, 0)
    FROM jsonb_array_elements(p_rates) WITH ORDINALITY AS r(w, n)
    LEFT JOIN turnstile_shared_arrivals a ON a.key = p_key AND a.count = (r.w->>0)::bigint AND a.per_ms = (r.w->>1)::bigint
    ORDER BY r.n
$$;

-- The grant rule (the component's `decide`; tests/shared/grant-rule.txt): grants the earliest
-- waiting ticket while the rule allows; returns the head left waiting and, when only the delay
-- or a pause holds it, the ms until it may be granted. Notifies every grant but the caller's
-- own; when something changed and the head waits only for the delay or a pause, tells the
-- head's channel when to check again.
CREATE OR REPLACE FUNCTION turnstile_shared_promote_v2(
  p_key text, p_now bigint, p_changed boolean, p_own_owner text, p_own_ticket text,
  OUT head_owner text, OUT head_ticket text, OUT retry_ms bigint
) LANGUAGE plpgsql AS $$
DECLARE
  k turnstile_shared_keys;
  h record;
  w record;
  held bigint;
  gate bigint;
  opens bigint;
  v_at bigint;
  v_rest bigint;
  granted integer := 0;
  changed boolean := p_changed;
BEGIN
  SELECT * INTO k FROM turnstile_shared_keys WHERE key = p_key;
  SELECT count(*) INTO held FROM turnstile_shared_tickets t WHERE t.key = p_key AND t.granted_ms IS NOT NULL;
  LOOP
    head_owner := NULL; head_ticket := NULL; retry_ms := NULL;
    SELECT t.owner, t.ticket, t.seq, t.limit_n, t.delay_ms, t.rates, t.weight INTO h FROM turnstile_shared_tickets t
      WHERE t.key = p_key AND t.granted_ms IS NULL ORDER BY t.seq LIMIT 1;
    EXIT WHEN NOT FOUND;
    head_owner := h.owner; head_ticket := h.ticket;
    IF h.limit_n < 1 OR h.limit_n > 1000000 OR h.delay_ms < 0 OR h.delay_ms > 86400000 OR h.weight < 1 THEN
      RAISE EXCEPTION 'the store holds a ticket no client writes: limit %, delay %, weight %', h.limit_n, h.delay_ms, h.weight;
    END IF;
    EXIT WHEN held >= h.limit_n;
    gate := k.paused_until_ms;
    IF h.delay_ms > 0 THEN gate := greatest(gate, k.last_grant_ms + h.delay_ms); END IF;
    -- Each rate window: it opens at ceil((tat - (burst - weight) * per_ms) / count).
    FOR w IN SELECT * FROM turnstile_shared_windows_v2(p_key, h.rates) LOOP
      IF w.count < 1 OR w.count > 1000000 OR w.burst < h.weight OR w.burst > 1000000 OR w.per_ms < 1 THEN
        RAISE EXCEPTION 'the store holds a ticket no client writes: rate %/% ms, burst %, weight %', w.count, w.per_ms, w.burst, h.weight;
      END IF;
      opens := w.at_ms + ceil((w.rest - (w.burst - h.weight) * w.per_ms)::numeric / w.count)::bigint;
      gate := greatest(gate, opens);
    END LOOP;
    IF p_now < gate THEN
      retry_ms := gate - p_now;
      EXIT;
    END IF;
    -- Granted: each window's arrival time moves past the grant, from itself while it is less
    -- than one ms behind now (on the pace), else from now (the key was idle).
    FOR w IN SELECT * FROM turnstile_shared_windows_v2(p_key, h.rates) LOOP
      IF w.at_ms >= p_now OR (w.at_ms = p_now - 1 AND w.rest > 0) THEN
        v_at := w.at_ms; v_rest := w.rest;
      ELSE
        v_at := p_now; v_rest := 0;
      END IF;
      v_rest := v_rest + h.weight * w.per_ms;
      v_at := v_at + v_rest / w.count;
      v_rest := v_rest % w.count;
      INSERT INTO turnstile_shared_arrivals AS a (key, count, per_ms, at_ms, rest) VALUES (p_key, w.count, w.per_ms, v_at, v_rest)
        ON CONFLICT (key, count, per_ms) DO UPDATE SET at_ms = EXCLUDED.at_ms, rest = EXCLUDED.rest;
      k.rested_ms := greatest(k.rested_ms, v_at + 2);
    END LOOP;
    granted := granted + 1;
    IF granted > 10000 THEN RAISE EXCEPTION 'more than 10000 grants in one operation on key %', p_key; END IF;
    k.grants := k.grants + 1;
    k.last_grant_ms := p_now;
    held := held + 1;
    changed := true;
    UPDATE turnstile_shared_tickets t SET granted_ms = p_now, grant_no = k.grants, expires_ms = p_now + t.lease_ms
      WHERE t.key = p_key AND t.owner = h.owner AND t.ticket = h.ticket;
    IF h.owner IS DISTINCT FROM p_own_owner OR h.ticket IS DISTINCT FROM p_own_ticket THEN
      PERFORM pg_notify(h.owner, json_build_object('k', p_key, 'g', json_build_array(json_build_array(h.ticket, h.seq, k.grants, p_now)))::text);
    END IF;
  END LOOP;
  IF granted > 0 THEN
    UPDATE turnstile_shared_keys SET grants = k.grants, last_grant_ms = k.last_grant_ms, rested_ms = k.rested_ms WHERE key = p_key;
  END IF;
  IF changed AND retry_ms IS NOT NULL AND (head_owner IS DISTINCT FROM p_own_owner OR head_ticket IS DISTINCT FROM p_own_ticket) THEN
    PERFORM pg_notify(head_owner, json_build_object('k', p_key, 'h', head_ticket, 'r', retry_ms)::text);
  END IF;
END $$;

-- After an operation: when the key is idle unless something comes, and forgets it when it is
-- idle now (no ticket, its delay and pause over).
CREATE OR REPLACE FUNCTION turnstile_shared_settle_v2(p_key text, p_now bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  last_expiry bigint;
  idle bigint;
BEGIN
  SELECT max(t.expires_ms) INTO last_expiry FROM turnstile_shared_tickets t WHERE t.key = p_key;
  UPDATE turnstile_shared_keys k
    SET idle_at_ms = greatest(coalesce(last_expiry, 0), k.last_grant_ms + k.delay_max_ms, k.paused_until_ms, k.rested_ms)
    WHERE k.key = p_key RETURNING k.idle_at_ms INTO idle;
  IF last_expiry IS NULL AND idle <= p_now THEN
    DELETE FROM turnstile_shared_keys WHERE key = p_key;
    DELETE FROM turnstile_shared_arrivals WHERE key = p_key;
  END IF;
END $$;

-- Removes up to 8 keys other than `p_key` that went idle unseen, skipping rows held by others.
CREATE OR REPLACE FUNCTION turnstile_shared_sweep_v2(p_key text, p_now bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  gone text[];
BEGIN
  WITH idle AS (
    SELECT k.key FROM turnstile_shared_keys k WHERE k.idle_at_ms <= p_now AND k.key <> p_key
      ORDER BY k.idle_at_ms LIMIT 8 FOR UPDATE SKIP LOCKED
  ), deleted AS (
    DELETE FROM turnstile_shared_keys k USING idle WHERE k.key = idle.key RETURNING k.key
  )
  SELECT array_agg(deleted.key) INTO gone FROM deleted;
  IF gone IS NOT NULL THEN
    DELETE FROM turnstile_shared_tickets t WHERE t.key = ANY (gone);
    DELETE FROM turnstile_shared_arrivals a WHERE a.key = ANY (gone);
  END IF;
  -- Arrival times whose key row went (a process of the `_v1` functions forgot it) once rested.
  DELETE FROM turnstile_shared_arrivals a WHERE (a.key, a.count, a.per_ms) IN (
    SELECT o.key, o.count, o.per_ms FROM turnstile_shared_arrivals o
      WHERE o.at_ms + 2 <= p_now AND o.key <> p_key
        AND NOT EXISTS (SELECT 1 FROM turnstile_shared_keys k WHERE k.key = o.key)
      LIMIT 8);
END $$;

-- A ticket's state: 2 granted (seq, grant, granted_ms), 1 waiting (seq, retry_ms or -1),
-- 0 lost.
CREATE OR REPLACE FUNCTION turnstile_shared_state_v2(
  p_key text, p_owner text, p_ticket text, p_head_owner text, p_head_ticket text, p_retry_ms bigint,
  OUT r_ticket text, OUT r_state integer, OUT r_seq bigint, OUT r_grant bigint, OUT r_granted_ms bigint, OUT r_retry_ms bigint
) LANGUAGE plpgsql AS $$
DECLARE
  t turnstile_shared_tickets;
BEGIN
  r_ticket := p_ticket; r_state := 0; r_seq := 0; r_grant := 0; r_granted_ms := 0; r_retry_ms := -1;
  SELECT * INTO t FROM turnstile_shared_tickets x WHERE x.key = p_key AND x.owner = p_owner AND x.ticket = p_ticket;
  IF NOT FOUND THEN RETURN; END IF;
  r_seq := t.seq;
  IF t.granted_ms IS NOT NULL THEN
    r_state := 2; r_grant := t.grant_no; r_granted_ms := t.granted_ms;
  ELSE
    r_state := 1;
    IF p_owner = p_head_owner AND p_ticket = p_head_ticket AND p_retry_ms IS NOT NULL THEN r_retry_ms := p_retry_ms; END IF;
  END IF;
END $$;

-- A request's terms, checked before anything is written (a ticket the rule cannot read would
-- stop every later grant on its key): the component's ranges (engine/src/shared/grant.rs).
CREATE OR REPLACE FUNCTION turnstile_shared_check_v2(p_limit integer, p_delay_ms bigint, p_rates jsonb, p_weight integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  w jsonb;
  n integer := 0;
  v_least bigint := 1000000;
  seen text[] := '{}';
  c bigint; p bigint; b bigint;
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000000 THEN RAISE EXCEPTION 'limit % is not in 1 ..= 1000000', p_limit; END IF;
  IF p_delay_ms IS NULL OR p_delay_ms < 0 OR p_delay_ms > 86400000 THEN RAISE EXCEPTION 'delay % ms is not in 0 ..= 86400000', p_delay_ms; END IF;
  IF jsonb_typeof(p_rates) IS DISTINCT FROM 'array' THEN RAISE EXCEPTION 'rates % is not a list', p_rates; END IF;
  FOR w IN SELECT * FROM jsonb_array_elements(p_rates) LOOP
    c := (w->>0)::bigint; p := (w->>1)::bigint; b := (w->>2)::bigint;
    IF c IS NULL OR p IS NULL OR b IS NULL OR c < 1 OR c > 1000000 OR b < 1 OR b > 1000000 OR p < 1 OR p > 4294967295 THEN
      RAISE EXCEPTION 'rate window % is not a count and burst in 1 ..= 1000000 per at least 1 ms', w;
    END IF;
    IF (c || '/' || p) = ANY (seen) THEN RAISE EXCEPTION 'rate window %/% ms is named twice', c, p; END IF;
    seen := seen || (c || '/' || p);
    n := n + 1;
    v_least := least(v_least, b);
  END LOOP;
  IF n > 8 THEN RAISE EXCEPTION '% rate windows, above 8', n; END IF;
  IF n = 0 THEN v_least := 1; END IF;
  IF p_weight IS NULL OR p_weight < 1 OR p_weight > v_least THEN RAISE EXCEPTION 'weight % is not in 1 ..= %', p_weight, v_least; END IF;
END $$;

-- request(key, owner, ticket, limit, delay, lease, rates, weight): enters the ticket at the end
-- of the key's FIFO (or renews it, when it is live already).
CREATE OR REPLACE FUNCTION turnstile_shared_request_v2(
  p_key text, p_owner text, p_ticket text, p_limit integer, p_delay_ms bigint, p_lease_ms bigint,
  p_rates jsonb, p_weight integer,
  OUT r_ticket text, OUT r_state integer, OUT r_seq bigint, OUT r_grant bigint, OUT r_granted_ms bigint, OUT r_retry_ms bigint
) LANGUAGE plpgsql AS $$
DECLARE
  now_ms bigint := turnstile_shared_lock_v2(p_key);
  changed boolean := turnstile_shared_purge_v2(p_key, now_ms);
  next_seq bigint;
  p record;
BEGIN
  UPDATE turnstile_shared_tickets t SET expires_ms = now_ms + t.lease_ms
    WHERE t.key = p_key AND t.owner = p_owner AND t.ticket = p_ticket;
  IF NOT FOUND THEN
    PERFORM turnstile_shared_check_v2(p_limit, p_delay_ms, p_rates, p_weight);
    UPDATE turnstile_shared_keys k SET seq = k.seq + 1, delay_max_ms = greatest(k.delay_max_ms, p_delay_ms)
      WHERE k.key = p_key RETURNING k.seq INTO next_seq;
    INSERT INTO turnstile_shared_tickets (key, owner, ticket, seq, limit_n, delay_ms, rates, weight, lease_ms, expires_ms)
      VALUES (p_key, p_owner, p_ticket, next_seq, p_limit, p_delay_ms, p_rates, p_weight, p_lease_ms, now_ms + p_lease_ms);
  END IF;
  p := turnstile_shared_promote_v2(p_key, now_ms, changed, p_owner, p_ticket);
  SELECT * INTO r_ticket, r_state, r_seq, r_grant, r_granted_ms, r_retry_ms
    FROM turnstile_shared_state_v2(p_key, p_owner, p_ticket, p.head_owner, p.head_ticket, p.retry_ms);
  PERFORM turnstile_shared_settle_v2(p_key, now_ms);
  PERFORM turnstile_shared_sweep_v2(p_key, now_ms);
END $$;

-- renew(key, owner, tickets): the heartbeat; the states in the order asked.
CREATE OR REPLACE FUNCTION turnstile_shared_renew_v2(p_key text, p_owner text, p_tickets text[])
RETURNS TABLE (r_ticket text, r_state integer, r_seq bigint, r_grant bigint, r_granted_ms bigint, r_retry_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
  now_ms bigint := turnstile_shared_lock_v2(p_key);
  changed boolean := turnstile_shared_purge_v2(p_key, now_ms);
  p record;
BEGIN
  UPDATE turnstile_shared_tickets t SET expires_ms = now_ms + t.lease_ms
    WHERE t.key = p_key AND t.owner = p_owner AND t.ticket = ANY (p_tickets);
  p := turnstile_shared_promote_v2(p_key, now_ms, changed, NULL, NULL);
  RETURN QUERY SELECT s.* FROM unnest(p_tickets) WITH ORDINALITY AS a(ticket, n)
    CROSS JOIN LATERAL turnstile_shared_state_v2(p_key, p_owner, a.ticket, p.head_owner, p.head_ticket, p.retry_ms) s
    ORDER BY a.n;
  PERFORM turnstile_shared_settle_v2(p_key, now_ms);
END $$;

-- release / abandon (key, owner, ticket): 'released' (it was granted), 'withdrawn' (it waited)
-- or 'lost' (unknown: its lease had ended).
CREATE OR REPLACE FUNCTION turnstile_shared_remove_v2(p_key text, p_owner text, p_ticket text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  now_ms bigint := turnstile_shared_lock_v2(p_key);
  changed boolean := turnstile_shared_purge_v2(p_key, now_ms);
  was_granted boolean;
  removal text := 'lost';
BEGIN
  DELETE FROM turnstile_shared_tickets t WHERE t.key = p_key AND t.owner = p_owner AND t.ticket = p_ticket
    RETURNING t.granted_ms IS NOT NULL INTO was_granted;
  IF FOUND THEN
    changed := true;
    removal := CASE WHEN was_granted THEN 'released' ELSE 'withdrawn' END;
  END IF;
  PERFORM turnstile_shared_promote_v2(p_key, now_ms, changed, NULL, NULL);
  PERFORM turnstile_shared_settle_v2(p_key, now_ms);
  RETURN removal;
END $$;

-- pause(key, for_ms): no grant before now + for_ms (a pause only extends); returns its end.
CREATE OR REPLACE FUNCTION turnstile_shared_pause_v2(p_key text, p_for_ms bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  now_ms bigint := turnstile_shared_lock_v2(p_key);
  until_ms bigint;
BEGIN
  UPDATE turnstile_shared_keys k SET paused_until_ms = greatest(k.paused_until_ms, now_ms + p_for_ms)
    WHERE k.key = p_key RETURNING k.paused_until_ms INTO until_ms;
  PERFORM turnstile_shared_settle_v2(p_key, now_ms);
  RETURN until_ms;
END $$;

-- inspect(key): the key's counters and tickets (for tests and operators), without a lock.
CREATE OR REPLACE FUNCTION turnstile_shared_inspect_v2(p_key text) RETURNS json LANGUAGE sql AS $$
  SELECT json_build_object(
    'now', turnstile_shared_now_v2(),
    'key', (SELECT row_to_json(k) FROM turnstile_shared_keys k WHERE k.key = p_key),
    'arrivals', coalesce((SELECT json_agg(json_build_array(a.count, a.per_ms, a.at_ms, a.rest) ORDER BY a.count, a.per_ms)
      FROM turnstile_shared_arrivals a WHERE a.key = p_key), '[]'::json),
    'tickets', coalesce((SELECT json_agg(json_build_array(t.ticket, t.seq, t.granted_ms, t.grant_no, t.expires_ms) ORDER BY t.seq)
      FROM turnstile_shared_tickets t WHERE t.key = p_key), '[]'::json))
$$;
