"""The SQLite store: processes on one machine share one database file, with the stdlib
`sqlite3`. WAL mode (readers never block the writer), `BEGIN IMMEDIATE` transactions of a few
statements each, `busy_timeout` for the short waits on the write lock; no server. The clock is
the machine's wall clock (`time.time()`), which every process on the machine shares.

Each store runs its statements on one thread of its own (one connection), so the event loop
never blocks on a lock held by another process.

Waiting polls (SQLite has no wake-up across processes): a watched key is read, in a read
transaction that takes no lock, every `poll_min_ms` doubling to `poll_max_ms`, and back to
`poll_min_ms` after a change; a release or abandon made through this store wakes its own
watchers at once. A poll writes only when the rule could grant something.

The grant rule is the component's (`decide` of the WIT's `shared` interface, through `_rules`);
the schema and every statement are the package's files from the repository's `shared/store/`
(`_texts`), read at `open`: the JS store (`hosts/js/src/shared/sqlite.ts`) runs the same ones,
so both can share a file.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Sequence, TypeVar

from . import (
    KeyInspection,
    Removal,
    SharedStoreError,
    StoreUnavailableError,
    Terms,
    TicketState,
    Wake,
)
from ._rules import GrantRule, GrantRuleError
from ._texts import sqlite_texts

T = TypeVar("T")

_GRANTS_PER_CALL_MAX = 10_000
_Head = tuple[Optional[str], Optional[int]]


def _now_ms() -> int:
    return int(time.time() * 1000)


class SqliteStore:
    """A shared-key store on one SQLite file (see the module doc)."""

    kind = "sqlite"

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        busy_timeout_ms: int = 2000,
        poll_min_ms: int = 2,
        poll_max_ms: int = 25,
    ) -> "SqliteStore":
        """Opens (and, the first time, creates) the database; its folder must exist. Raises
        `StoreUnavailableError` when the file cannot be opened, `SharedStoreError` when it
        holds another schema version."""
        store = cls(path, busy_timeout_ms, poll_min_ms, poll_max_ms)
        try:
            await store._run("open", store._open)
        except BaseException:
            store._executor.shutdown(wait=False)
            raise
        return store

    def __init__(self, path: str, busy_timeout_ms: int, poll_min_ms: int, poll_max_ms: int) -> None:
        """Use `SqliteStore.open`."""
        self.path = str(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._poll_min_ms = poll_min_ms
        self._poll_max_ms = max(poll_min_ms, poll_max_ms)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="turnstile-sqlite")
        self._db: Optional[sqlite3.Connection] = None
        self._pollers: dict[str, set[Callable[[], None]]] = {}
        self._closed = False
        self._schema_version, self._sql = sqlite_texts()
        # The grant rule's instance, used only on the store's thread.
        self._rule: GrantRule

    def _open(self) -> None:
        self._rule = GrantRule()
        try:
            db = sqlite3.connect(self.path, timeout=self._busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise StoreUnavailableError("sqlite", f"open {self.path}: {e}") from e
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.executescript("BEGIN IMMEDIATE;\n" + self._sql["schema"] + "\nCOMMIT;")
            row = db.execute(self._sql["version"]).fetchone()
            version = row[0] if row else None
            if version != str(self._schema_version):
                raise SharedStoreError(
                    "store-failed", f"{self.path} holds shared-key schema {version}; this package knows schema {self._schema_version}"
                )
        except BaseException:
            db.close()
            raise
        self._db = db

    async def _run(self, what: str, fn: Callable[[], T]) -> T:
        if self._closed:
            raise StoreUnavailableError("sqlite", f"{what}: the store is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, what, fn)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except SharedStoreError:
            raise
        except sqlite3.Error as e:
            name = getattr(e, "sqlite_errorname", "") or ""
            text = str(e)
            locked = name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text
            if isinstance(e, (sqlite3.OperationalError, sqlite3.DatabaseError)) and not isinstance(e, (sqlite3.IntegrityError, sqlite3.ProgrammingError)):
                detail = f"the database stayed locked for more than {self._busy_timeout_ms} ms ({text})" if locked else text
                raise StoreUnavailableError("sqlite", f"{what}: {detail}" + (f" [{name}]" if name else "")) from e
            raise SharedStoreError("store-failed", f"sqlite {what}: {text}") from e

    def _write(self, fn: Callable[[sqlite3.Connection, int], T]) -> T:
        db = self._db
        assert db is not None
        db.execute("BEGIN IMMEDIATE")
        try:
            result = fn(db, _now_ms())
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return result

    def _read(self, fn: Callable[[sqlite3.Connection, int], T]) -> T:
        db = self._db
        assert db is not None
        db.execute("BEGIN DEFERRED")
        try:
            return fn(db, _now_ms())
        finally:
            db.execute("COMMIT")

    async def request(self, key: str, ticket: str, terms: Terms) -> TicketState:
        def op(db: sqlite3.Connection, now: int) -> TicketState:
            db.execute(self._sql["purge"], (key, now))
            db.execute(self._sql["ensureKey"], (key,))
            if db.execute(self._sql["ticket"], (key, ticket)).fetchone():
                db.execute(self._sql["renew"], (now, key, ticket))
            else:
                seq = db.execute(self._sql["nextSeq"], (key,)).fetchone()[0]
                db.execute(self._sql["insert"], (key, ticket, seq, terms.limit, terms.delay_ms, terms.lease_ms, now, now + terms.lease_ms))
            head = _promote(db, self._sql, self._rule, key, now)
            return _state(db, self._sql, key, ticket, head)

        return await self._run("request", lambda: self._write(op))

    async def renew(self, key: str, tickets: Sequence[str]) -> list[TicketState]:
        tickets = list(tickets)

        def op(db: sqlite3.Connection, now: int) -> list[TicketState]:
            db.execute(self._sql["purge"], (key, now))
            for ticket in tickets:
                db.execute(self._sql["renew"], (now, key, ticket))
            head = _promote(db, self._sql, self._rule, key, now)
            return [_state(db, self._sql, key, ticket, head) for ticket in tickets]

        return await self._run("renew", lambda: self._write(op))

    async def release(self, key: str, ticket: str) -> Removal:
        return await self._remove("release", key, ticket)

    async def abandon(self, key: str, ticket: str) -> Removal:
        return await self._remove("abandon", key, ticket)

    async def _remove(self, what: str, key: str, ticket: str) -> Removal:
        def op(db: sqlite3.Connection, now: int) -> Removal:
            db.execute(self._sql["purge"], (key, now))
            row = db.execute(self._sql["ticket"], (key, ticket)).fetchone()
            if not row:
                return "lost"
            db.execute(self._sql["remove"], (key, ticket))
            _promote(db, self._sql, self._rule, key, now)
            return "withdrawn" if row[1] is None else "released"

        removal = await self._run(what, lambda: self._write(op))
        for nudge in list(self._pollers.get(key, ())):
            nudge()
        return removal

    async def pause(self, key: str, for_ms: int) -> int:
        def op(db: sqlite3.Connection, now: int) -> int:
            db.execute(self._sql["ensureKey"], (key,))
            return int(db.execute(self._sql["pause"], (now + for_ms, key)).fetchone()[0])

        return await self._run("pause", lambda: self._write(op))

    async def inspect(self, key: str) -> KeyInspection:
        def op(db: sqlite3.Connection, now: int) -> KeyInspection:
            seq, grants, last, paused = db.execute(self._sql["keyState"], (key,)).fetchone() or (0, 0, 0, 0)
            rows = db.execute(self._sql["list"], (key,)).fetchall()
            return KeyInspection(
                key=key,
                now_ms=now,
                seq=seq,
                grants=grants,
                last_grant_ms=last,
                paused_until_ms=paused,
                held=tuple((r[0], r[1], r[3], r[2], r[4]) for r in rows if r[2] is not None),
                waiting=tuple((r[0], r[1], r[4]) for r in rows if r[2] is None),
            )

        return await self._run("inspect", lambda: self._read(op))

    def watch(self, key: str, tickets: Callable[[], Sequence[str]], wake: Callable[[Wake], None]) -> "_Poller":
        poller = _Poller(self, key, tickets, wake)
        self._pollers.setdefault(key, set()).add(poller.nudge)
        return poller

    def _unwatch(self, key: str, nudge: Callable[[], None]) -> None:
        pollers = self._pollers.get(key)
        if pollers is not None:
            pollers.discard(nudge)
            if not pollers:
                del self._pollers[key]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pollers.clear()
        db = self._db
        if db is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, db.close)
        self._executor.shutdown(wait=False)

    def _poll(self, key: str, mine: Sequence[str]) -> list[TicketState]:
        """One poll of a watched key (on the store's thread): the tickets of `mine` that are
        granted or lost, read without a lock; a write only when the rule could grant now."""
        mine = list(mine)

        def read(db: sqlite3.Connection, now: int) -> tuple[list[TicketState], bool]:
            rows = {r[0]: r for r in db.execute(self._sql["peek"], (key, json.dumps(mine))).fetchall()}
            changed: list[TicketState] = []
            for ticket in mine:
                row = rows.get(ticket)
                if row is None:
                    changed.append(TicketState(ticket, "lost"))
                elif row[2] is not None:
                    changed.append(TicketState(ticket, "granted", seq=row[1], grant=row[3], granted_ms=row[2]))
            return changed, not changed and _promotable(db, self._sql, self._rule, key, now)

        changed, promotable = self._read(read)
        if not promotable:
            return changed

        def promote(db: sqlite3.Connection, now: int) -> None:
            db.execute(self._sql["purge"], (key, now))
            _promote(db, self._sql, self._rule, key, now)

        self._write(promote)
        return self._read(read)[0]


class _Poller:
    """The watch of one key: a task polling with a bounded back-off while tickets wait."""

    def __init__(self, store: SqliteStore, key: str, tickets: Callable[[], Sequence[str]], wake: Callable[[Wake], None]) -> None:
        self._store = store
        self._key = key
        self._tickets = tickets
        self._wake = wake
        self._nudged = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop())
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        self.ready = done

    def nudge(self) -> None:
        self._nudged.set()

    def stop(self) -> None:
        self._task.cancel()
        self._store._unwatch(self._key, self.nudge)

    async def _loop(self) -> None:
        store = self._store
        delay_ms = store._poll_min_ms
        while not store._closed:
            try:
                await asyncio.wait_for(self._nudged.wait(), delay_ms / 1000)
                delay_ms = store._poll_min_ms
            except asyncio.TimeoutError:
                pass
            self._nudged.clear()
            mine = list(self._tickets())
            changed: list[TicketState] = []
            if mine:
                try:
                    changed = await store._run("poll", lambda: store._poll(self._key, mine))
                except SharedStoreError:
                    pass  # the heartbeat reports a store that stays unavailable; the poll backs off
            if changed:
                delay_ms = store._poll_min_ms
            else:
                delay_ms = store._poll_max_ms if not mine else min(delay_ms * 2, store._poll_max_ms)
            if changed:
                self._wake(Wake(states=changed))


def _promote(db: sqlite3.Connection, sql: dict[str, str], rule: GrantRule, key: str, now: int) -> _Head:
    """The grant rule (the component's `decide`): grants heads while it allows; returns the head
    left waiting and, when only its delay or a pause holds it, the ms until it may be granted."""
    for _ in range(_GRANTS_PER_CALL_MAX):
        head = db.execute(sql["head"], (key,)).fetchone()
        grants = last_grant_ms = paused_until_ms = held = 0
        if head is not None:
            held = db.execute(sql["held"], (key,)).fetchone()[0]
            _, grants, last_grant_ms, paused_until_ms = db.execute(sql["keyState"], (key,)).fetchone()
        decision, retry_ms = _decide(rule, head, held, last_grant_ms, paused_until_ms, now)
        if decision == "empty":
            return None, None
        if decision == "full":
            return head[0], None
        if decision == "wait":
            return head[0], retry_ms
        db.execute(sql["grant"], (now, grants + 1, now, key, head[0]))
        db.execute(sql["countGrant"], (now, key))
    raise SharedStoreError("store-failed", f"more than {_GRANTS_PER_CALL_MAX} grants in one operation on key {key!r}")


def _decide(rule: GrantRule, head: Optional[tuple[str, int, int]], held: int, last: int, paused: int, now: int) -> tuple[str, int]:
    try:
        return rule.decide(None if head is None else (head[1], head[2]), held, last, paused, now)
    except GrantRuleError as e:
        raise SharedStoreError("store-failed", f"the store holds a ticket no client writes: {e}") from e


def _state(db: sqlite3.Connection, sql: dict[str, str], key: str, ticket: str, head: _Head) -> TicketState:
    row = db.execute(sql["ticket"], (key, ticket)).fetchone()
    if row is None:
        return TicketState(ticket, "lost")
    seq, granted_ms, grant = row
    if granted_ms is not None:
        return TicketState(ticket, "granted", seq=seq, grant=grant, granted_ms=granted_ms)
    return TicketState(ticket, "waiting", seq=seq, retry_ms=head[1] if head[0] == ticket else None)


def _promotable(db: sqlite3.Connection, sql: dict[str, str], rule: GrantRule, key: str, now: int) -> bool:
    earliest = db.execute(sql["earliestExpiry"], (key,)).fetchone()[0]
    if earliest is not None and earliest <= now:
        return True
    head = db.execute(sql["head"], (key,)).fetchone()
    if head is None:
        return False
    held = db.execute(sql["held"], (key,)).fetchone()[0]
    _, _, last_grant_ms, paused_until_ms = db.execute(sql["keyState"], (key,)).fetchone() or (0, 0, 0, 0)
    return _decide(rule, head, held, last_grant_ms, paused_until_ms, now)[0] == "grant"
