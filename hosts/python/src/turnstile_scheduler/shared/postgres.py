"""The Postgres store: processes on several machines share keys through one Postgres database,
for fleets that already keep their state there, with psycopg 3's asyncio connections (the
optional extra: `pip install 'turnstile-scheduler[postgres]'`). Every operation is ONE call of
one function of the store text `shared/store/postgres.sql` (`_texts`), which the first `open` of
a database runs in one transaction under an advisory lock (tables and functions created, the
text's digest recorded, so later opens only read it): one statement, so one short transaction
and one round trip. Each function locks the key's row first, reads the server's clock
(`clock_timestamp()`) after the lock, and applies the grant rule (the component's `decide`,
written in PL/pgSQL as the Redis script writes it in Lua; both are tested against
`tests/shared/grant-rule.txt`). Nothing waits inside a transaction but for the key's row lock,
which other operations hold for their own few statements.

Waiting does not poll: each store instance has a random name, its `owner`, which is also its
wake-up channel. Every ticket is stored under its owner, so two clients never share a ticket even
with the same ticket id, and a grant made by another process's operation is sent, by `NOTIFY` at
commit, to the channel of the ticket's owner only; so is the retry time of a head held only by
the delay or a pause. This store LISTENs on its channel on one connection of its own (made on the
first `watch`, remade after it drops, with a `resync` wake-up); the heartbeat re-checks as well.

The JS store (`hosts/js/src/shared/postgres.ts`) runs the same text, so both can share a
database. Operations run on a small pool of connections (`pool_max`, default 4); one that does
not answer within `op_timeout_ms` fails with `StoreUnavailableError` at once, and its
connection is dropped (the server also ends the statement: `statement_timeout`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import secrets
from typing import Any, Callable, Optional, Sequence

from . import Arrival, KeyInspection, Removal, SharedStoreError, StoreUnavailableError, Terms, TicketState, Wake
from ._texts import store_text

_SCHEMA_LOCK = (0x7475726E, 1)
"""An advisory lock (one key of the two-int space) that serializes opening stores."""
_UNAVAILABLE = re.compile(r"^(08|53|57|58|40|55P03)")
"""SQLSTATEs of a server that cannot answer now (connection, shutdown, resources, a statement
timeout or a lock wait cut short): `StoreUnavailableError`. Others are `SharedStoreError`."""


class PostgresStore:
    """A shared-key store on a Postgres database (see the module doc)."""

    kind = "postgres"

    @classmethod
    async def open(cls, url: str = "", *, op_timeout_ms: int = 2000, pool_max: int = 4) -> "PostgresStore":
        """Connects to `url` (a `postgresql://` URL or a libpq connection string; empty: libpq's
        environment, `PGHOST` and the rest) and creates the tables and functions when missing.
        Raises `StoreUnavailableError` when the server cannot be reached within
        `op_timeout_ms`, `SharedStoreError` when psycopg is not installed or the database holds
        another schema version (or the role may not create the tables)."""
        try:
            import psycopg  # noqa: F401
        except ImportError as e:
            raise SharedStoreError(
                "client-missing", "the Postgres store needs psycopg 3: pip install 'turnstile-scheduler[postgres]'"
            ) from e
        store = cls(url, op_timeout_ms, pool_max)
        try:
            await store._setup(store_text("postgres.sql").decode())
        except BaseException:
            await store.close()
            raise
        return store

    def __init__(self, url: str, op_timeout_ms: int, pool_max: int) -> None:
        """Use `PostgresStore.open`."""
        self.owner = f"turnstile_{secrets.token_hex(8)}"
        """This instance's name: every ticket it requests is stored under it, and it is its
        wake-up channel."""
        self._url = url
        self._timeout = op_timeout_ms / 1000
        self._slots = asyncio.Semaphore(pool_max)
        self._idle: list[Any] = []
        self._lines: dict[str, list[Any]] = {}
        """Per key: a lock its operations take in call order, and how many want it."""
        self._watchers: dict[str, set[Callable[[Any], None]]] = {}
        self._listener: Optional[asyncio.Task[None]] = None
        self._listening: Optional[asyncio.Future[None]] = None
        self._closed = False

    async def _connect(self) -> Any:
        import psycopg

        # libpq's own connect_timeout counts whole seconds (at least 2); the operation's timeout
        # (`_call`) bounds it too.
        return await psycopg.AsyncConnection.connect(
            self._url,
            autocommit=True,
            connect_timeout=max(2, int(self._timeout + 0.999)),
            options=f"-c statement_timeout={int(self._timeout * 1000)}",
            application_name="turnstile-shared",
        )

    async def _setup(self, schema: str) -> None:
        """Runs the store text once per database and text: it records its digest (`script` in
        `turnstile_shared_meta`), and an open that finds its own digest there changes nothing
        (re-creating the functions at every open would serialize opens on the lock and make
        every other session re-plan its calls). A database of another schema is refused before
        anything is written to it."""
        digest = hashlib.sha256(schema.encode()).hexdigest()

        async def meta(conn: Any) -> dict[str, str]:
            # Asked first, so that a new database is no error (which would abort a transaction).
            cur = await conn.execute("SELECT to_regclass('turnstile_shared_meta') IS NOT NULL")
            row = await cur.fetchone()
            if not (row and row[0]):
                return {}
            cur = await conn.execute("SELECT name, value FROM turnstile_shared_meta WHERE name IN ('schema', 'script')")
            return dict(await cur.fetchall())

        async def setup(conn: Any) -> Any:
            found = await meta(conn)
            if found.get("schema", "1") != "1" or found.get("script") == digest:
                return found.get("schema")
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", _SCHEMA_LOCK)
                # Again under the lock: another process may have run a text since.
                found = await meta(conn)
                if found.get("schema", "1") != "1" or found.get("script") == digest:
                    return found.get("schema")
                await conn.execute(schema.encode())
                await conn.execute(
                    "INSERT INTO turnstile_shared_meta (name, value) VALUES ('script', %s) "
                    "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                    (digest,),
                )
                return (await meta(conn)).get("schema")

        version = await self._call("open", "", setup)
        if version != "1":
            raise SharedStoreError("store-failed", f"the database holds shared-key schema {version}; this package knows schema 1")

    async def _call(self, what: str, key: str, op: Callable[[Any], Any]) -> Any:
        """Runs `op(connection)` on a pooled connection, after every earlier operation of this
        store on `key` (so they reach the server in the order they were called, as on one
        connection), within the timeout of the call. A timeout fails at once: the operation is
        cancelled in the background and its connection dropped."""
        if self._closed:
            raise StoreUnavailableError("postgres", f"{what}: the store is closed")
        task = asyncio.get_running_loop().create_task(self._in_line(what, key, op))
        try:
            done, _ = await asyncio.wait({task}, timeout=self._timeout)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if task in done:
            return task.result()
        task.cancel()
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        raise StoreUnavailableError("postgres", f"{what}: no answer within {int(self._timeout * 1000)} ms")

    async def _in_line(self, what: str, key: str, op: Callable[[Any], Any]) -> Any:
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = [asyncio.Lock(), 0]
        line[1] += 1
        try:
            async with line[0]:
                return await self._pooled(what, op)
        finally:
            line[1] -= 1
            if line[1] == 0 and self._lines.get(key) is line:
                del self._lines[key]

    async def _pooled(self, what: str, op: Callable[[Any], Any]) -> Any:
        async with self._slots:
            conn = self._idle.pop() if self._idle else None
            try:
                if conn is None:
                    conn = await self._connect()
                result = await op(conn)
            except BaseException as e:
                if conn is not None:
                    _close_soon(conn)
                if isinstance(e, Exception):
                    raise _failure(what, e) from e
                raise
            if self._closed:
                _close_soon(conn)
            else:
                self._idle.append(conn)
            return result

    async def _query(self, what: str, sql: str, params: Sequence[Any]) -> list[Any]:
        async def op(conn: Any) -> list[Any]:
            cur = await conn.execute(sql, params, prepare=True)
            return await cur.fetchall()

        return await self._call(what, params[0], op)

    async def request(self, key: str, ticket: str, terms: Terms) -> TicketState:
        rows = await self._query(
            "request",
            "SELECT * FROM turnstile_shared_request_v2(%s, %s, %s, %s, %s, %s, %s::jsonb, %s)",
            (key, self.owner, ticket, terms.limit, terms.delay_ms, terms.lease_ms, json.dumps([[w.count, w.per_ms, w.burst] for w in terms.rates]), terms.weight),
        )
        return _state(rows[0])

    async def renew(self, key: str, tickets: Sequence[str]) -> list[TicketState]:
        rows = await self._query("renew", "SELECT * FROM turnstile_shared_renew_v2(%s, %s, %s::text[])", (key, self.owner, list(tickets)))
        return [_state(row) for row in rows]

    async def release(self, key: str, ticket: str) -> Removal:
        return await self._remove("release", key, ticket)

    async def abandon(self, key: str, ticket: str) -> Removal:
        return await self._remove("abandon", key, ticket)

    async def _remove(self, what: str, key: str, ticket: str) -> Removal:
        rows = await self._query(what, "SELECT turnstile_shared_remove_v2(%s, %s, %s)", (key, self.owner, ticket))
        return rows[0][0]

    async def pause(self, key: str, for_ms: int) -> int:
        rows = await self._query("pause", "SELECT turnstile_shared_pause_v2(%s, %s)", (key, for_ms))
        return int(rows[0][0])

    async def inspect(self, key: str) -> KeyInspection:
        rows = await self._query("inspect", "SELECT turnstile_shared_inspect_v2(%s)", (key,))
        out = rows[0][0]
        out = json.loads(out) if isinstance(out, str) else out
        k = out.get("key") or {}
        tickets = out.get("tickets") or []
        return KeyInspection(
            key=key,
            now_ms=int(out["now"]),
            seq=int(k.get("seq", 0)),
            grants=int(k.get("grants", 0)),
            last_grant_ms=int(k.get("last_grant_ms", 0)),
            paused_until_ms=int(k.get("paused_until_ms", 0)),
            arrivals=tuple(Arrival(*(int(v) for v in a)) for a in out.get("arrivals") or []),
            held=tuple((t, s, g, at, exp) for t, s, at, g, exp in tickets if at is not None),
            waiting=tuple((t, s, exp) for t, s, at, _, exp in tickets if at is None),
        )

    def watch(self, key: str, tickets: Callable[[], Sequence[str]], wake: Callable[[Wake], None]) -> "_Watch":
        def listener(event: Any) -> None:
            if isinstance(event, Wake):
                wake(event)
                return
            parsed = _parse_wake(event, set(tickets()))
            if parsed is not None:
                wake(parsed)

        self._watchers.setdefault(key, set()).add(listener)
        return _Watch(self, key, listener, self._listen())

    def _listen(self) -> "asyncio.Future[None]":
        """Starts the listening task unless it runs; the future completes when its first LISTEN
        did (or fails with its first connection's error, while the task keeps trying)."""
        if self._listener is None:
            loop = asyncio.get_running_loop()
            self._listening = loop.create_future()
            self._listener = loop.create_task(self._listen_loop(self._listening))
        assert self._listening is not None
        return self._listening

    async def _listen_loop(self, first: "asyncio.Future[None]") -> None:
        """The listening connection: LISTENs on this instance's channel, hands notifications to
        the watchers; after a lost connection it connects again and asks every watcher to
        resync. Ends when nobody watches or the store closes."""
        lost = False
        while not self._closed and self._watchers:
            conn: Any = None
            try:
                conn = await asyncio.wait_for(self._connect(), self._timeout)
                await asyncio.wait_for(conn.execute(f'LISTEN "{self.owner}"'), self._timeout)
                if not first.done():
                    first.set_result(None)
                if lost:
                    lost = False
                    for watchers in list(self._watchers.values()):
                        for listener in list(watchers):
                            listener(Wake(resync=True))
                async for note in conn.notifies():
                    try:
                        m = json.loads(note.payload)
                    except ValueError:
                        continue
                    for listener in list(self._watchers.get(str(m.get("k")), ())):
                        listener(m)
            except asyncio.CancelledError:
                if conn is not None:
                    _close_soon(conn)
                raise
            except Exception as e:
                if not first.done():
                    first.set_exception(_failure("listen", e))
                lost = True
            if conn is not None:
                _close_soon(conn)
            await asyncio.sleep(0.1)
        self._listener = None

    def _unwatch(self, key: str, listener: Any) -> None:
        watchers = self._watchers.get(key)
        if watchers is not None:
            watchers.discard(listener)
            if not watchers:
                del self._watchers[key]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._watchers.clear()
        if self._listener is not None:
            self._listener.cancel()
        if self._listening is not None and not self._listening.done():
            self._listening.cancel()
        idle, self._idle = self._idle, []
        for conn in idle:
            try:
                await asyncio.wait_for(conn.close(), self._timeout)
            except Exception:
                pass


class _Watch:
    def __init__(self, store: PostgresStore, key: str, listener: Any, ready: "asyncio.Future[None]") -> None:
        self._store = store
        self._key = key
        self._listener = listener
        self.ready = asyncio.shield(ready)
        self.ready.add_done_callback(lambda f: f.cancelled() or f.exception())

    def stop(self) -> None:
        self._store._unwatch(self._key, self._listener)


_tasks: set[asyncio.Task[Any]] = set()


def _close_soon(conn: Any) -> None:
    """Closes a connection in the background (a broken one may take a while to let go)."""

    async def close() -> None:
        try:
            await asyncio.wait_for(conn.close(), 10)
        except BaseException:
            pass

    try:
        task = asyncio.get_running_loop().create_task(close())
    except RuntimeError:
        return
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


def _failure(what: str, e: Exception) -> SharedStoreError:
    """A driver's error as the contract's: a server that cannot answer now (no connection, a
    timeout, a shutdown, a lock wait cut short) is `StoreUnavailableError`; an error the server
    raised for any other reason is `SharedStoreError`."""
    if isinstance(e, SharedStoreError):
        return e
    sqlstate = getattr(e, "sqlstate", None)
    if isinstance(sqlstate, str) and not _UNAVAILABLE.match(sqlstate):
        return SharedStoreError("store-failed", f"postgres {what}: {e} [{sqlstate}]")
    detail = f" [{sqlstate}]" if sqlstate else ""
    return StoreUnavailableError("postgres", f"{what}: {type(e).__name__}: {e}{detail}".rstrip())


def _state(row: Sequence[Any]) -> TicketState:
    ticket, code, seq, grant, granted_ms, retry = row
    if code == 2:
        return TicketState(ticket, "granted", seq=int(seq), grant=int(grant), granted_ms=int(granted_ms))
    if code == 1:
        return TicketState(ticket, "waiting", seq=int(seq), retry_ms=int(retry) if retry >= 0 else None)
    return TicketState(ticket, "lost")


def _parse_wake(m: dict[str, Any], mine: set[str]) -> Optional[Wake]:
    """A wake-up message (`{k: key, g: [[ticket, seq, grant, granted_ms]...], h: head, r: retry
    ms}`), kept to the tickets of `mine`; None when none of it concerns them."""
    granted = m.get("g") if isinstance(m.get("g"), list) else []
    states = [
        TicketState(g[0], "granted", seq=int(g[1]), grant=int(g[2]), granted_ms=int(g[3])) for g in granted if g[0] in mine
    ]
    head, retry_ms = m.get("h"), m.get("r")
    retry = (head, int(retry_ms)) if isinstance(head, str) and head in mine and isinstance(retry_ms, (int, float)) and retry_ms >= 0 else None
    if not states and retry is None:
        return None
    return Wake(states=states, retry=retry)
