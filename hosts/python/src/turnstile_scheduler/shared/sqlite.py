"""The SQLite store: processes on one machine share one database file, with the stdlib
`sqlite3`. WAL mode (readers never block the writer), `BEGIN IMMEDIATE` transactions of a few
statements each, `busy_timeout` for the short waits on the write lock; no server.

The clock is the machine's CLOCK_MONOTONIC (`time.monotonic_ns()`, the clock the JS store's
`process.hrtime.bigint()` reads too), in ms plus 24 h (`SQLITE_CLOCK_BASE_MS`: a last grant of
0 means "none yet"). One clock for every process of the machine, that never steps: a wall-clock
change moves no lease, delay or pause; `SharedKeys` counts its leases on it too. It restarts at
boot: the file records the boot (`/proc/sys/kernel/random/boot_id`) and the first process of a
new boot empties it. So the file serves ONE machine: a file opened from another machine is
refused with `StoreSplitError` at that store's next transaction.

File identity: the store records the file's (st_dev, st_ino) at open and checks, inside every
transaction, that the path still names that file, of this boot. When it was deleted, moved or
replaced, the store fails closed with `StoreSplitError`: every later call raises it; nothing is
granted, written or released. A file the store creates grants nothing before one lease (the
head ticket's) from its creation, so a process still holding a permit of a deleted file has
learned it (its next heartbeat) before the new file grants anything.

Each store runs its statements on one thread of its own (one connection), so the event loop
never blocks on a lock held by another process: `busy_timeout` waits on that thread.

Idle keys are forgotten: every write settles the key's `idle_at_ms` (its last lease expiry,
pause end, and last grant plus the longest delay granted), deletes its row once that passed with
no ticket left, and sweeps up to 16 other keys idle past their time with their expired tickets.

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
import os
import re
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Sequence, TypeVar

from ..types import RateWindow
from . import (
    Arrival,
    KeyInspection,
    Removal,
    SharedStoreError,
    StoreSplitError,
    StoreUnavailableError,
    Terms,
    TicketState,
    Wake,
)
from ._rules import Decision, GrantRule, Head, KeyState
from ._texts import sqlite_texts

T = TypeVar("T")

_GRANTS_PER_CALL_MAX = 10_000
_Head = tuple[Optional[str], Optional[int]]

SQLITE_CLOCK_BASE_MS = 86_400_000
"""The SQLite store's time is CLOCK_MONOTONIC in ms plus this (24 h, the longest delay): a last
grant of 0 ("none yet") is then always longer ago than any delay."""


def sqlite_now_ms() -> int:
    """The store's now: CLOCK_MONOTONIC (every process of the machine reads the same one; it
    never steps) in whole ms, plus `SQLITE_CLOCK_BASE_MS`."""
    return time.monotonic_ns() // 1_000_000 + SQLITE_CLOCK_BASE_MS


_now_ms = sqlite_now_ms


def _boot_id() -> str:
    """This boot of this machine (Linux's boot id; `unknown` elsewhere)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or "unknown"
    except OSError:
        return "unknown"


def _file_id(path: str) -> Optional[tuple[int, int]]:
    """The identity of the file `path` names now; None when it names none."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise StoreUnavailableError("sqlite", f"stat {path}: {e}") from e
    return st.st_dev, st.st_ino


def _private_path(path: str) -> Optional[str]:
    """Why `path` opens a private database (nothing shared), or None."""
    if path == "":
        return "the empty path opens a temporary private database"
    if path == ":memory:" or path.startswith("file::memory:") or re.match(r"^file:.*[?&]mode=memory\b", path):
        return f"{path!r} opens an in-memory private database"
    return None


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
        holds another schema version, and `ValueError` for a path that opens a private database
        (`""`, `":memory:"`: nothing would be shared)."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or a path, got {type(path).__name__}")
        refused = _private_path(str(path))
        if refused is not None:
            raise ValueError(f"path: {refused}, so nothing would be shared between processes; give the path of a file")
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
        self._boot = _boot_id()
        self._file: tuple[int, int] = (0, 0)
        # When the file was created on the store's clock (0: before this boot): no grant before
        # this plus the head's lease.
        self._created_ms = 0
        # Set once the path no longer names the file opened: every call raises it.
        self._split: Optional[StoreSplitError] = None

    def _open(self) -> None:
        self._rule = GrantRule()
        try:
            db = sqlite3.connect(self.path, timeout=self._busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise StoreUnavailableError("sqlite", f"open {self.path}: {e}") from e
        try:
            file = _file_id(self.path)
            if file is None:
                raise StoreUnavailableError("sqlite", f"open {self.path}: the file is gone as it was opened")
            self._file = file
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            # The version first: another version's tables may lack what this schema indexes.
            db.execute("BEGIN IMMEDIATE")
            try:
                try:
                    row = db.execute(self._sql["version"]).fetchone()
                except sqlite3.OperationalError:
                    row = None  # no meta table yet: a new file
                version = row[0] if row else None
                if version is not None and version != str(self._schema_version):
                    raise SharedStoreError(
                        "store-failed",
                        f"{self.path} holds shared-key schema {version}; this package knows schema {self._schema_version} "
                        "(schema 2 had no rate windows, schema 1 ran on the wall clock: delete the file once no process of an older version uses it)",
                    )
                for statement in self._sql["schema"].split(";\n"):
                    db.execute(statement)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            db.execute("BEGIN IMMEDIATE")
            try:
                self._created_ms = self._settle_boot(db, _now_ms())
                self._check(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            self._db = db
        except BaseException:
            self._db = None
            db.close()
            raise

    def _settle_boot(self, db: sqlite3.Connection, now: int) -> int:
        """At open: a new file records this boot and its creation; the first process of a new
        boot empties the file (every process of the last one is gone, and its times were on the
        last boot's clock). Returns the file's creation time (0: none to wait for)."""
        row = db.execute(self._sql["meta"], ("boot",)).fetchone()
        if row is None:
            db.execute(self._sql["setMeta"], ("boot", self._boot))
            db.execute(self._sql["setMeta"], ("created_ms", str(now)))
        elif row[0] != self._boot:
            db.execute(self._sql["wipeTickets"])
            db.execute(self._sql["wipeKeys"])
            db.execute(self._sql["wipeArrivals"])
            db.execute(self._sql["setMeta"], ("boot", self._boot))
            db.execute(self._sql["setMeta"], ("created_ms", "0"))
        created = db.execute(self._sql["meta"], ("created_ms",)).fetchone()
        return int(created[0]) if created else 0

    def _check(self, db: sqlite3.Connection) -> None:
        """Inside every transaction: the path still names the file opened, of this boot;
        otherwise the store is split (see the module doc) and stays so."""
        if self._split is not None:
            raise self._split
        file = _file_id(self.path)
        why: Optional[str] = None
        if file is None:
            why = "the file was deleted or moved"
        elif file != self._file:
            why = "the path names another file now (the file was replaced)"
        else:
            row = db.execute(self._sql["meta"], ("boot",)).fetchone()
            if row is None or row[0] != self._boot:
                why = "the file was opened by another machine (or boot): the SQLite store serves one machine"
        if why is None:
            return
        self._split = StoreSplitError(
            "sqlite",
            self.path,
            f"{why}; processes opening the path now would share another store than this one, so this store grants, writes and releases nothing more",
        )
        raise self._split

    async def _run(self, what: str, fn: Callable[[], T]) -> T:
        if self._closed:
            raise StoreUnavailableError("sqlite", f"{what}: the store is closed")
        if self._split is not None:
            raise self._split
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
            self._check(db)
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
            self._check(db)
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
                # Terms the rule refuses never enter the key (the transaction rolls back; written,
                # they would refuse every later grant on the key until their lease ended).
                self._rule.decide(Head(terms.limit, terms.delay_ms, terms.rates, terms.weight), KeyState(0, 0, 0), now)
                seq = db.execute(self._sql["nextSeq"], (key,)).fetchone()[0]
                rates = json.dumps([[w.count, w.per_ms, w.burst] for w in terms.rates], separators=(",", ":"))
                db.execute(self._sql["insert"], (key, ticket, seq, terms.limit, terms.delay_ms, rates, terms.weight, terms.lease_ms, now, now + terms.lease_ms))
            head = self._promote(db, key, now)
            state = _state(db, self._sql, key, ticket, head)
            self._settle(db, key, now)
            return state

        return await self._run("request", lambda: self._write(op))

    async def renew(self, key: str, tickets: Sequence[str]) -> list[TicketState]:
        tickets = list(tickets)

        def op(db: sqlite3.Connection, now: int) -> list[TicketState]:
            db.execute(self._sql["purge"], (key, now))
            for ticket in tickets:
                db.execute(self._sql["renew"], (now, key, ticket))
            head = self._promote(db, key, now)
            states = [_state(db, self._sql, key, ticket, head) for ticket in tickets]
            self._settle(db, key, now)
            return states

        return await self._run("renew", lambda: self._write(op))

    async def release(self, key: str, ticket: str) -> Removal:
        return await self._remove("release", key, ticket)

    async def abandon(self, key: str, ticket: str) -> Removal:
        return await self._remove("abandon", key, ticket)

    async def _remove(self, what: str, key: str, ticket: str) -> Removal:
        def op(db: sqlite3.Connection, now: int) -> Removal:
            db.execute(self._sql["purge"], (key, now))
            row = db.execute(self._sql["ticket"], (key, ticket)).fetchone()
            if row:
                db.execute(self._sql["remove"], (key, ticket))
                self._promote(db, key, now)
            self._settle(db, key, now)
            if not row:
                return "lost"
            return "withdrawn" if row[1] is None else "released"

        removal = await self._run(what, lambda: self._write(op))
        for nudge in list(self._pollers.get(key, ())):
            nudge()
        return removal

    async def pause(self, key: str, for_ms: int) -> int:
        def op(db: sqlite3.Connection, now: int) -> int:
            db.execute(self._sql["ensureKey"], (key,))
            until = int(db.execute(self._sql["pause"], (now + for_ms, key)).fetchone()[0])
            self._settle(db, key, now)
            return until

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
                arrivals=_arrivals(db, self._sql, key),
                held=tuple((r[0], r[1], r[3], r[2], r[4]) for r in rows if r[2] is not None),
                waiting=tuple((r[0], r[1], r[4]) for r in rows if r[2] is None),
            )

        return await self._run("inspect", lambda: self._read(op))

    async def key_count(self) -> int:
        """How many keys the file holds a row for (live keys, and idle ones not yet swept): for
        tests and operators."""
        return await self._run("key_count", lambda: self._read(lambda db, now: int(db.execute(self._sql["countKeys"]).fetchone()[0])))

    def _settle(self, db: sqlite3.Connection, key: str, now: int) -> None:
        """After a write on `key`: its `idle_at_ms`, its row deleted once idle, and a sweep of
        up to 16 other keys idle past their time (with their expired tickets)."""
        db.execute(self._sql["settle"], (key, key))
        db.execute(self._sql["forgetArrivals"], (key, now))
        db.execute(self._sql["forget"], (key, now))
        db.execute(self._sql["sweepTickets"], (now,))
        db.execute(self._sql["sweepArrivals"], (now,))
        db.execute(self._sql["sweepKeys"], (now,))

    def _promote(self, db: sqlite3.Connection, key: str, now: int) -> _Head:
        return _promote(db, self._sql, self._rule, key, now, self._created_ms)

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
            return changed, not changed and _promotable(db, self._sql, self._rule, key, now, self._created_ms)

        changed, promotable = self._read(read)
        if not promotable:
            return changed

        def promote(db: sqlite3.Connection, now: int) -> None:
            db.execute(self._sql["purge"], (key, now))
            self._promote(db, key, now)
            self._settle(db, key, now)

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
            if mine and store._split is None:
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


def _promote(db: sqlite3.Connection, sql: dict[str, str], rule: GrantRule, key: str, now: int, created_ms: int) -> _Head:
    """The grant rule (the component's `decide`): grants heads while it allows; returns the head
    left waiting and, when only its delay or a pause holds it, the ms until it may be granted."""
    for _ in range(_GRANTS_PER_CALL_MAX):
        head = db.execute(sql["head"], (key,)).fetchone()
        decision = _decide(db, sql, rule, key, head, now, created_ms)
        if decision.tag == "empty":
            return None, None
        if decision.tag == "full":
            return head[0], None
        if decision.tag == "wait":
            return head[0], decision.retry_ms
        for a in decision.arrivals:
            db.execute(sql["setArrival"], (key, a.count, a.per_ms, a.at_ms, a.rest))
        grants = db.execute(sql["keyState"], (key,)).fetchone()[1]
        db.execute(sql["grant"], (now, grants + 1, now, key, head[0]))
        db.execute(sql["countGrant"], (now, head[2], decision.rested_ms, key))
    raise SharedStoreError("store-failed", f"more than {_GRANTS_PER_CALL_MAX} grants in one operation on key {key!r}")


def _decide(db: sqlite3.Connection, sql: dict[str, str], rule: GrantRule, key: str, head: Optional[tuple], now: int, created_ms: int) -> Decision:
    """The grant rule on the key's rows: the head's terms (`head` is the `head` statement's row:
    ticket, limit, delay, lease, rates as a JSON list of `[count, per_ms, burst]`, weight), the
    key's counters and arrival times, and as the pause the key's, and on a new file its creation
    plus the head's lease."""
    if head is None:
        return Decision("empty")
    _, limit, delay_ms, lease_ms, rates_text, weight = head
    held = db.execute(sql["held"], (key,)).fetchone()[0]
    _, _, last_grant_ms, paused_until_ms = db.execute(sql["keyState"], (key,)).fetchone() or (0, 0, 0, 0)
    try:
        rates = tuple(RateWindow(int(c), int(p), int(b)) for c, p, b in json.loads(rates_text or "[]"))
    except (ValueError, TypeError) as e:
        raise SharedStoreError("store-failed", f"the store holds a ticket no client writes: rates {rates_text!r}") from e
    state = KeyState(held, last_grant_ms, max(paused_until_ms, created_ms + lease_ms), _arrivals(db, sql, key))
    return rule.decide(Head(limit, delay_ms, rates, weight), state, now)


def _arrivals(db: sqlite3.Connection, sql: dict[str, str], key: str) -> tuple[Arrival, ...]:
    return tuple(Arrival(c, p, at, rest) for c, p, at, rest in db.execute(sql["arrivals"], (key,)).fetchall())


def _state(db: sqlite3.Connection, sql: dict[str, str], key: str, ticket: str, head: _Head) -> TicketState:
    row = db.execute(sql["ticket"], (key, ticket)).fetchone()
    if row is None:
        return TicketState(ticket, "lost")
    seq, granted_ms, grant = row
    if granted_ms is not None:
        return TicketState(ticket, "granted", seq=seq, grant=grant, granted_ms=granted_ms)
    return TicketState(ticket, "waiting", seq=seq, retry_ms=head[1] if head[0] == ticket else None)


def _promotable(db: sqlite3.Connection, sql: dict[str, str], rule: GrantRule, key: str, now: int, created_ms: int) -> bool:
    earliest = db.execute(sql["earliestExpiry"], (key,)).fetchone()[0]
    if earliest is not None and earliest <= now:
        return True
    head = db.execute(sql["head"], (key,)).fetchone()
    return _decide(db, sql, rule, key, head, now, created_ms).tag == "grant"
