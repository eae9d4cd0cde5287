"""Shared keys: one limit across processes and machines (SHARED.md at the repository root).

A store holds each shared key's FIFO of tickets and its leases: `SqliteStore` (one database
file, for processes on one machine; the stdlib `sqlite3`), `RedisStore` (one Redis server, for
processes on several machines; the optional `redis` extra), `PostgresStore` (one Postgres
database, for processes on several machines; the optional `postgres` extra) or `MemoryStore` (this process's
memory, on the running loop's clock: for tests, and several `SharedKeys` of one process).
`SharedKeys` is the async client a host uses over a store:

```python
store = await SqliteStore.open("/path/to/workspace/.turnstile/shared.sqlite")
keys = SharedKeys(store, lease_ms=10_000)
async with await keys.acquire("github", limit=4) as permit:
    ...  # `permit.lost` is set (and `permit.lost_error` says why) if the lease was lost
```

The contract (the same as the JS package's `contract.ts`; the SQLite schema and statements, the
Redis script and the grant rule are the component's, so JS and Python processes share one
store). The grant rule, applied by the store atomically in every operation that changes a key:

    while the key's earliest waiting ticket (by `seq`, the store's arrival order) exists,
      and fewer than ITS `limit` tickets of the key are granted,
      and the store's now >= max(last grant + ITS `delay_ms` (when > 0), paused until,
                                  when each of ITS `rates` lets ITS `weight` through):
    grant it (granted at now, lease renewed, `grant` = the key's grant count, and each of its
    rate windows' arrival times moved past the grant: GCRA, the component's arithmetic).

A rate window's arrival time is kept per window (count and length) as `at_ms + rest / count`.

Before that, every ticket whose lease expired (`expires <= now`), granted or waiting, is
removed. A store keeps ONE clock (SQLite: the machine's CLOCK_MONOTONIC; Redis: `TIME`;
Postgres: `clock_timestamp()`). Every
operation is one transaction or one script (one round trip), and idempotent for a ticket id the
caller chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable, Literal, Optional, Protocol, Sequence

from ..errors import TurnstileError
from ..types import RateWindow

KEY_LENGTH_MAX = 200
"""The longest key name, in bytes of UTF-8: the component's one key length (`KEY_BYTES_MAX`)."""
TICKET_LENGTH_MAX = 100
"""The longest ticket id a store accepts."""
RENEW_TICKETS_MAX = 1000
"""The most tickets one `renew` may name."""
LEASE_MS_MIN = 300
"""Lease bounds: a heartbeat runs every lease / 3."""
LEASE_MS_MAX = 3_600_000
LIMIT_MAX = 1_000_000
"""The largest limit."""
DELAY_MS_MAX = 86_400_000
"""The longest delay or pause (24 h)."""
RATE_COUNT_MAX = 1_000_000
"""A rate window's largest count and burst at a store (its arrival times stay exact in 53 bits)."""
RATE_WINDOWS_MAX = 8
"""The most rate windows one key may carry."""

TicketStateKind = Literal["waiting", "granted", "lost"]
Removal = Literal["released", "withdrawn", "lost"]
"""What `release` and `abandon` found: a granted ticket, a waiting one, or none (its lease had
expired)."""


@dataclass(frozen=True)
class Terms:
    """What a request asks for; the head ticket's own terms decide its grant."""

    limit: int
    delay_ms: int
    lease_ms: int
    rates: tuple[RateWindow, ...] = ()
    """Rate windows every grant on the key keeps within (each window once; count and burst
    1 ..= 1000000)."""
    weight: int = 1
    """Units this ticket's grant costs in each rate window (1 ..= the smallest burst)."""


@dataclass(frozen=True)
class Arrival:
    """One rate window's theoretical arrival time at a store: `at_ms + rest / count` ms on the
    store's clock (`rest < count`), kept per window (`count` starts per `per_ms`)."""

    count: int
    per_ms: int
    at_ms: int
    rest: int


@dataclass(frozen=True)
class TicketState:
    """A ticket's state as the store saw it at the end of an operation. `seq` is its place in
    the key's FIFO; `grant` counts the key's grants (1, 2, ...) and `granted_ms` is the grant's
    time on the store's clock; `retry_ms`, for the waiting head held only by the delay or a
    pause, is the time until that ends. `lost`: the store does not know the ticket (its lease
    expired)."""

    ticket: str
    state: TicketStateKind
    seq: int = 0
    grant: int = 0
    granted_ms: int = 0
    retry_ms: Optional[int] = None


@dataclass(frozen=True)
class Wake:
    """A nudge from a store's `watch`: states it already knows, a head ticket to check again
    after `retry_ms` (as `(ticket, ms)`), or `resync` (wake-ups may have been missed)."""

    states: Sequence[TicketState] = ()
    retry: Optional[tuple[str, int]] = None
    resync: bool = False


class Watch(Protocol):
    """A running watch: `ready` completes once wake-ups flow; `stop()` ends it."""

    ready: Awaitable[None]

    def stop(self) -> None: ...


@dataclass(frozen=True)
class KeyInspection:
    """A key as the store holds it. Times are the store's clock. `held` rows are
    `(ticket, seq, grant, granted_ms, expires_ms)`, `waiting` rows `(ticket, seq, expires_ms)`."""

    key: str
    now_ms: int
    seq: int
    grants: int
    last_grant_ms: int
    paused_until_ms: int
    held: tuple[tuple[str, int, int, int, int], ...]
    waiting: tuple[tuple[str, int, int], ...]
    arrivals: tuple[Arrival, ...] = ()
    """The arrival times of the key's rate windows (none: no rate window granted yet)."""


class SharedStore(Protocol):
    """A store of shared keys (the contract above). Raises `StoreUnavailableError` when the
    store cannot be reached (or stays locked) within its own timeout, `SharedStoreError` for an
    unexpected answer. Every operation settles within a bounded time."""

    kind: str

    async def request(self, key: str, ticket: str, terms: Terms) -> TicketState:
        """Enters `ticket` at the end of `key`'s FIFO (or renews it when it is live)."""
        ...

    async def renew(self, key: str, tickets: Sequence[str]) -> list[TicketState]:
        """The heartbeat: extends the live tickets' leases, applies the rule, returns their
        states in order."""
        ...

    async def release(self, key: str, ticket: str) -> Removal:
        """Gives back a granted ticket (its execution ended)."""
        ...

    async def abandon(self, key: str, ticket: str) -> Removal:
        """Withdraws a waiting ticket or gives back a grant never used (the same effect as
        `release` in the store)."""
        ...

    async def pause(self, key: str, for_ms: int) -> int:
        """No grant before the store's now + `for_ms` (only extends); returns the pause's end."""
        ...

    def watch(self, key: str, tickets: Callable[[], Sequence[str]], wake: Callable[[Wake], None]) -> Watch:
        """Calls `wake` when tickets of `key` may have changed; `tickets()` lists the caller's
        waiting tickets on `key`. SQLite polls here with a bounded back-off."""
        ...

    async def inspect(self, key: str) -> KeyInspection: ...

    async def close(self) -> None: ...


class SharedStoreError(TurnstileError):
    """A shared-key store failed in a way that is not a lost connection (code `store-failed`,
    or `client-missing` when the store's client library is not installed)."""


class StoreUnavailableError(SharedStoreError):
    """The store could not be reached, or stayed locked, within its timeout (code
    `store-unavailable`). Only shared keys see it. `store` names the store."""

    def __init__(self, store: str, message: str) -> None:
        super().__init__("store-unavailable", f"{store}: {message}")
        self.store = store


class StoreSplitError(SharedStoreError):
    """The store's file is no longer the one this process opened (code `store-split`): the SQLite
    path was deleted, moved or replaced (or the file was opened on another machine), so processes
    opening the path now would share another store than the ones already running. The store fails
    closed: once raised, every later call raises it too, nothing more is granted, written or
    released, and `SharedKeys` gives up every ticket at once with it. `path` names the file."""

    def __init__(self, store: str, path: str, message: str) -> None:
        super().__init__("store-split", f"{store}: {path}: {message}")
        self.store = store
        self.path = path


class LeaseLostError(SharedStoreError):
    """A ticket's lease ended before it was given back (code `lease-lost`): the store may
    grant its place again, so its execution should stop."""

    def __init__(self, key: str, ticket: str, message: Optional[str] = None) -> None:
        super().__init__(
            "lease-lost",
            message or f"the lease of ticket {ticket} on key {key!r} expired before it was given back",
        )
        self.key = key
        self.ticket = ticket


from .keys import SharedKeys, SharedPermit  # noqa: E402
from .memory import MemoryStore  # noqa: E402
from .postgres import PostgresStore  # noqa: E402
from .redis import RedisStore  # noqa: E402
from .sqlite import SqliteStore  # noqa: E402

__all__ = [
    "DELAY_MS_MAX",
    "RATE_COUNT_MAX",
    "RATE_WINDOWS_MAX",
    "Arrival",
    "KEY_LENGTH_MAX",
    "LEASE_MS_MAX",
    "LEASE_MS_MIN",
    "LIMIT_MAX",
    "RENEW_TICKETS_MAX",
    "TICKET_LENGTH_MAX",
    "KeyInspection",
    "LeaseLostError",
    "MemoryStore",
    "PostgresStore",
    "RedisStore",
    "Removal",
    "SharedKeys",
    "SharedPermit",
    "SharedStore",
    "SharedStoreError",
    "SqliteStore",
    "StoreSplitError",
    "StoreUnavailableError",
    "Terms",
    "TicketState",
    "Wake",
    "Watch",
]
