"""The in-memory store: shared keys held in this process's memory, for tests and single-process
use. Several `SharedKeys` (and drivers) in one process sharing one `MemoryStore` behave as
several processes sharing a SQLite file or a Redis server: one FIFO per key by arrival, leases
kept by heartbeats, the delay between grants and 429 pauses kept by the store.

Time: the store runs on the running event loop (`loop.time()` and `loop.call_at`, the drivers'
clock, so a test's virtual-time loop moves the store too) and keeps its own time base: its now
is `start_ms` plus the loop's time since `open`. A store's times (`granted_ms`, pauses) are never
compared with a client's clock (clients give durations), so the offset does not matter; it must
be at least 24 h because a last grant of 0 means "no grant yet" (the grant rule's `never`).

Waiting does not poll: the store arms one timer per key, at the earliest of its next lease
expiry, the end of the delay or pause holding its head, and the time it may forget the key; when
it fires (and after every operation) the store applies the grant rule and wakes the watchers
whose tickets it granted or dropped, like Redis's one message per grant.

The grant rule is the component's (`decide` of the WIT's `shared` interface, through `_rules`),
never decided here. Operations run on the loop's thread without awaiting inside, so each is
atomic. Each costs O(1) plus the tickets it grants, except a lease purge, which scans the key's
tickets only when the earliest lease may have ended. The JS package's `memory.ts` is the same
store.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, TypeVar

from ..types import RateWindow
from . import DELAY_MS_MAX, Arrival, KeyInspection, Removal, SharedStoreError, StoreUnavailableError, Terms, TicketState, Wake
from ._rules import GrantRule, Head, KeyState

T = TypeVar("T")

_GRANTS_PER_CALL_MAX = 10_000
_Retry = Optional[tuple[str, int]]
"""The head left waiting when only its delay or a pause holds it, and the ms until then."""


@dataclass
class _Ticket:
    ticket: str
    seq: int
    limit: int
    delay_ms: int
    lease_ms: int
    expires_ms: int
    rates: tuple[RateWindow, ...] = ()
    weight: int = 1
    granted_ms: Optional[int] = None
    grant: int = 0


@dataclass
class _Key:
    """One key: its counters, its tickets (dict order is `seq` order), its timer."""

    seq: int = 0
    grants: int = 0
    last_grant_ms: int = 0
    paused_until_ms: int = 0
    delay_max_ms: int = 0
    """The longest delay a granted ticket had: the key is forgotten only once it has passed."""
    arrivals: dict[tuple[int, int], Arrival] = field(default_factory=dict)
    """Each rate window's arrival time, by `(count, per_ms)`."""
    rested_ms: int = 0
    """The key's windows pace as fresh ones from then: it is kept until then at least."""
    waiting: dict[str, _Ticket] = field(default_factory=dict)
    held: dict[str, _Ticket] = field(default_factory=dict)
    expiry_floor_ms: float = math.inf
    """No lease ends before this (a lower bound: renewals only lengthen leases)."""
    timer: Optional[asyncio.TimerHandle] = None
    timer_at_ms: float = math.inf


class _Watch:
    """A running watch: `ready` is done at once (wake-ups flow from the start)."""

    def __init__(self, store: "MemoryStore", key: str, tickets: Callable[[], Sequence[str]], wake: Callable[[Wake], None]) -> None:
        self.tickets = tickets
        self.wake = wake
        self._store = store
        self._key = key
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ready.set_result(None)
        self.ready = ready

    def stop(self) -> None:
        self._store._unwatch(self._key, self)


class MemoryStore:
    """A shared-key store in this process's memory (see the module doc)."""

    kind = "memory"

    @classmethod
    async def open(cls, *, start_ms: Optional[int] = None) -> "MemoryStore":
        """An empty store on the running loop, with the component's grant rule loaded.
        `start_ms` is the store's time now (default: the wall clock's, `time.time()`), at least
        86400000 (24 h); a `ValueError` otherwise."""
        if start_ms is None:
            start_ms = int(time.time() * 1000)
        if isinstance(start_ms, bool) or not isinstance(start_ms, int) or start_ms < DELAY_MS_MAX:
            raise ValueError(f"start_ms must be an integer of at least {DELAY_MS_MAX} (24 h: a last grant of 0 means none), got {start_ms!r}")
        return cls(asyncio.get_running_loop(), GrantRule(), start_ms)

    def __init__(self, loop: asyncio.AbstractEventLoop, rule: GrantRule, start_ms: int) -> None:
        """Use `MemoryStore.open`."""
        self._loop = loop
        self._rule = rule
        self._base_ms = start_ms - math.floor(loop.time() * 1000)
        """The store's time minus the loop's, in ms."""
        self._last_now_ms = 0
        self._keys: dict[str, _Key] = {}
        self._watchers: dict[str, set[_Watch]] = {}
        self._closed = False

    async def request(self, key: str, ticket: str, terms: Terms) -> TicketState:
        def change(k: _Key, now: int) -> Callable[[_Retry], TicketState]:
            live = k.waiting.get(ticket) or k.held.get(ticket)
            if live is not None:
                live.expires_ms = now + live.lease_ms
            else:
                # Terms the rule refuses never enter the key (they would refuse every later grant).
                self._rule.decide(Head(terms.limit, terms.delay_ms, terms.rates, terms.weight), KeyState(0, 0, 0), now)
                k.seq += 1
                t = _Ticket(ticket, k.seq, terms.limit, terms.delay_ms, terms.lease_ms, now + terms.lease_ms, tuple(terms.rates), terms.weight)
                k.waiting[ticket] = t
                k.expiry_floor_ms = min(k.expiry_floor_ms, t.expires_ms)
            return lambda retry: _state(k, ticket, retry)

        return self._op("request", key, change)

    async def renew(self, key: str, tickets: Sequence[str]) -> list[TicketState]:
        tickets = list(tickets)

        def change(k: _Key, now: int) -> Callable[[_Retry], list[TicketState]]:
            for ticket in tickets:
                t = k.waiting.get(ticket) or k.held.get(ticket)
                if t is not None:
                    t.expires_ms = now + t.lease_ms
            return lambda retry: [_state(k, ticket, retry) for ticket in tickets]

        return self._op("renew", key, change)

    async def release(self, key: str, ticket: str) -> Removal:
        return self._remove("release", key, ticket)

    async def abandon(self, key: str, ticket: str) -> Removal:
        return self._remove("abandon", key, ticket)

    def _remove(self, what: str, key: str, ticket: str) -> Removal:
        def change(k: _Key, now: int) -> Callable[[_Retry], Removal]:
            removal: Removal = "lost"
            if k.held.pop(ticket, None) is not None:
                removal = "released"
            elif k.waiting.pop(ticket, None) is not None:
                removal = "withdrawn"
            return lambda retry: removal

        return self._op(what, key, change)

    async def pause(self, key: str, for_ms: int) -> int:
        def change(k: _Key, now: int) -> Callable[[_Retry], int]:
            k.paused_until_ms = max(k.paused_until_ms, now + for_ms)
            return lambda retry: k.paused_until_ms

        return self._op("pause", key, change)

    async def inspect(self, key: str) -> KeyInspection:
        if self._closed:
            raise self._closed_error("inspect")
        k = self._keys.get(key) or _Key()
        return KeyInspection(
            key=key,
            now_ms=self._now(),
            seq=k.seq,
            grants=k.grants,
            last_grant_ms=k.last_grant_ms,
            paused_until_ms=k.paused_until_ms,
            arrivals=tuple(k.arrivals[w] for w in sorted(k.arrivals)),
            held=tuple((t.ticket, t.seq, t.grant, t.granted_ms or 0, t.expires_ms) for t in k.held.values()),
            waiting=tuple((t.ticket, t.seq, t.expires_ms) for t in k.waiting.values()),
        )

    def watch(self, key: str, tickets: Callable[[], Sequence[str]], wake: Callable[[Wake], None]) -> _Watch:
        watch = _Watch(self, key, tickets, wake)
        self._watchers.setdefault(key, set()).add(watch)
        return watch

    def _unwatch(self, key: str, watch: _Watch) -> None:
        watchers = self._watchers.get(key)
        if watchers is not None:
            watchers.discard(watch)
            if not watchers:
                del self._watchers[key]

    async def close(self) -> None:
        """Forgets every key and cancels every timer; later calls raise
        `StoreUnavailableError`."""
        if self._closed:
            return
        self._closed = True
        for k in self._keys.values():
            if k.timer is not None:
                k.timer.cancel()
        self._keys.clear()
        self._watchers.clear()

    def _op(self, what: str, key: str, change: Callable[[_Key, int], Callable[[_Retry], T]]) -> T:
        """One atomic operation on `key`: drops expired leases, runs `change`, applies the grant
        rule, wakes watchers, re-arms the key's timer; returns what `change`'s answer reads
        after the rule."""
        if self._closed:
            raise self._closed_error(what)
        now = self._now()
        k = self._keys.get(key)
        if k is None:
            k = self._keys[key] = _Key()
        changed = _purge(k, now)
        answer = change(k, now)
        retry = self._promote(key, k, now, changed)
        result = answer(retry)
        self._settle(key, k, now, retry, changed)
        return result

    def _tick(self, key: str, at_ms: int) -> None:
        """The key's timer for `at_ms` fired: the same as an operation that changes nothing.
        The store's time is at least `at_ms` then (a float loop time may read a hair early)."""
        k = self._keys.get(key)
        if self._closed or k is None:
            return
        k.timer = None
        k.timer_at_ms = math.inf
        self._last_now_ms = max(self._last_now_ms, at_ms)
        now = self._now()
        changed = _purge(k, now)
        retry = self._promote(key, k, now, changed)
        self._settle(key, k, now, retry, changed)

    def _promote(self, key: str, k: _Key, now: int, changed: dict[str, TicketState]) -> _Retry:
        """The grant rule (the component's `decide`): grants heads while it says so."""
        for _ in range(_GRANTS_PER_CALL_MAX):
            head = next(iter(k.waiting.values()), None)
            terms = None if head is None else Head(head.limit, head.delay_ms, head.rates, head.weight)
            state = KeyState(len(k.held), k.last_grant_ms, k.paused_until_ms, tuple(k.arrivals.values()))
            decision = self._rule.decide(terms, state, now)
            if decision.tag in ("empty", "full"):
                return None
            assert head is not None
            if decision.tag == "wait":
                return head.ticket, decision.retry_ms
            for a in decision.arrivals:
                k.arrivals[(a.count, a.per_ms)] = a
            k.rested_ms = max(k.rested_ms, decision.rested_ms)
            del k.waiting[head.ticket]
            k.grants += 1
            head.granted_ms = now
            head.grant = k.grants
            head.expires_ms = now + head.lease_ms
            k.last_grant_ms = now
            k.delay_max_ms = max(k.delay_max_ms, head.delay_ms)
            k.held[head.ticket] = head
            changed[head.ticket] = TicketState(head.ticket, "granted", seq=head.seq, grant=head.grant, granted_ms=now)
        raise SharedStoreError("store-failed", f"more than {_GRANTS_PER_CALL_MAX} grants in one operation on key {key!r}")

    def _settle(self, key: str, k: _Key, now: int, retry: _Retry, changed: dict[str, TicketState]) -> None:
        """After an operation: wakes the watchers of tickets that changed, then forgets the key
        or re-arms its timer."""
        if changed:
            self._wake(key, changed)
        idle = not k.waiting and not k.held
        forget_at_ms = max(k.paused_until_ms, k.last_grant_ms + k.delay_max_ms, k.rested_ms)
        if idle and now >= forget_at_ms:
            if k.timer is not None:
                k.timer.cancel()
            del self._keys[key]
            return
        due_ms = forget_at_ms if idle else min(k.expiry_floor_ms, now + retry[1] if retry else math.inf)
        if due_ms == k.timer_at_ms:
            return
        if k.timer is not None:
            k.timer.cancel()
        k.timer = None
        k.timer_at_ms = due_ms
        if due_ms != math.inf:
            at_ms = int(due_ms)
            k.timer = self._loop.call_at((at_ms - self._base_ms) / 1000, self._tick, key, at_ms)

    def _wake(self, key: str, changed: dict[str, TicketState]) -> None:
        """Each watcher of `key` hears, on a later loop turn (a message, as Redis sends one),
        about the tickets of its own that were granted or dropped."""
        for watch in list(self._watchers.get(key, ())):
            states = [changed[t] for t in watch.tickets() if t in changed]
            if states:
                self._loop.call_soon(watch.wake, Wake(states=states))

    def _now(self) -> int:
        """The store's time: whole ms, never below a time it read before."""
        self._last_now_ms = max(self._last_now_ms, math.floor(self._loop.time() * 1000) + self._base_ms)
        return self._last_now_ms

    def _closed_error(self, what: str) -> StoreUnavailableError:
        return StoreUnavailableError("memory", f"{what}: the store is closed")


def _purge(k: _Key, now: int) -> dict[str, TicketState]:
    """Drops every ticket whose lease ended (`expires <= now`), granted or waiting; returns them
    as lost."""
    changed: dict[str, TicketState] = {}
    if now < k.expiry_floor_ms:
        return changed
    floor = math.inf
    for tickets in (k.waiting, k.held):
        for t in list(tickets.values()):
            if t.expires_ms <= now:
                del tickets[t.ticket]
                changed[t.ticket] = TicketState(t.ticket, "lost")
            else:
                floor = min(floor, t.expires_ms)
    k.expiry_floor_ms = floor
    return changed


def _state(k: _Key, ticket: str, retry: _Retry) -> TicketState:
    held = k.held.get(ticket)
    if held is not None:
        return TicketState(ticket, "granted", seq=held.seq, grant=held.grant, granted_ms=held.granted_ms or 0)
    waiting = k.waiting.get(ticket)
    if waiting is None:
        return TicketState(ticket, "lost")
    return TicketState(ticket, "waiting", seq=waiting.seq, retry_ms=retry[1] if retry and retry[0] == ticket else None)
