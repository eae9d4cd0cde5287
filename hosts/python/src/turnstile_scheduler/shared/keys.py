"""`SharedKeys`: the async client a host (the driver) uses over a store. `acquire(key, limit=...)`
returns a `SharedPermit` once the store granted the ticket. Every ticket's lease, waiting or
granted, is kept by the component's lease schedule (the WIT's `shared` interface, through
`_rules.LeaseSchedule`): this client reports each request, answer and renewal to it and does
what its polls say: send the renewals due (one `renew` per key, about every `lease_ms / 3`),
give tickets up, and wake it at the time it names. `permit.release()` gives a permit back when
the execution ended; `permit.abandon()` gives back a permit never used; cancelling the waiting
task (or `timeout`) withdraws the request.

Failure rules (the same as the JS package's `keys.ts`):
- The store unreachable: `acquire`'s request raises `StoreUnavailableError`. A waiting ticket or
  a permit whose renewals keep failing (or go unanswered) is given up before its lease can have
  expired in the store, counted from when its last confirmed renewal was sent: the waiter
  raises, and the permit's `lost` is set with, `StoreUnavailableError`. The store cannot grant
  that place again before the lease ends, so nothing is granted twice. A request answered too
  late to be sure of its lease is given back and raises the same way.
- The store no longer knows a ticket (its lease expired): `LeaseLostError`, the same way.
- The store is split (`StoreSplitError`: its SQLite file was deleted or replaced): every ticket
  of every key is given up at once with it, and nothing is given back to the store (this process
  can no longer prove what it holds there).
- Two clients configured with the same `owner` never share a ticket: every ticket id holds a
  random tag of its `SharedKeys` (`<owner>-<tag>-<n>`).
- Every wait ends: on a grant, on cancellation or `timeout`, on a lost lease or store, or on
  `close()`.
"""

from __future__ import annotations

import asyncio
import math
import os
import secrets
import time
from typing import Any, Optional, Sequence

from .. import _check
from ..errors import DisposedError
from . import (
    DELAY_MS_MAX,
    KEY_LENGTH_MAX,
    LEASE_MS_MAX,
    LEASE_MS_MIN,
    LIMIT_MAX,
    RATE_COUNT_MAX,
    RATE_WINDOWS_MAX,
    RENEW_TICKETS_MAX,
    LeaseLostError,
    Removal,
    SharedStore,
    StoreSplitError,
    StoreUnavailableError,
    Terms,
    TicketState,
    Wake,
    Watch,
)
from ..types import RateWindow
from ._rules import GivenUp, LeaseRefused, LeaseSchedule, Renewal


def _now_ms() -> int:
    """The lease schedule's clock: the running loop's (`loop.time()`, monotonic, virtual on a
    test's virtual-time loop, as the driver's), in whole milliseconds; outside a loop the
    monotonic clock, which is what a default loop's `time()` reads."""
    try:
        now_s = asyncio.get_running_loop().time()
    except RuntimeError:
        now_s = time.monotonic()
    return math.floor(now_s * 1000)


class SharedPermit:
    """A granted ticket. Give it back with `release()` (the execution ended) or `abandon()` (it
    never started); `async with` releases it. `lost` is set when its lease was lost
    (`lost_error` is a `LeaseLostError`) or its store stayed unreachable
    (`StoreUnavailableError`); the execution should then stop."""

    def __init__(self, keys: "SharedKeys", key: str, state: TicketState) -> None:
        self.key = key
        self.ticket = state.ticket
        self.seq = state.seq
        self.grant = state.grant
        self.granted_ms = state.granted_ms
        self.lost = asyncio.Event()
        self.lost_error: Optional[BaseException] = None
        self._keys = keys
        self._done = False

    @property
    def done(self) -> bool:
        """Whether `release` or `abandon` ran, or the lease was lost."""
        return self._done

    async def release(self) -> Removal:
        """Gives the permit back (a second call returns `"lost"` without a store call). Returns
        what the store found (`"lost"`: the lease had expired first). Raises
        `StoreUnavailableError` when the store cannot be reached; the permit is given up
        locally either way."""
        return await self._end("release")

    async def abandon(self) -> Removal:
        """Gives back a permit whose execution never started."""
        return await self._end("abandon")

    async def _end(self, how: str) -> Removal:
        if self._done:
            return "lost"
        self._done = True
        return await self._keys._end(self, how)

    def _lose(self, error: BaseException) -> None:
        if self._done:
            return
        self._done = True
        self.lost_error = error
        self.lost.set()

    async def __aenter__(self) -> "SharedPermit":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.release()


class _Waiter:
    __slots__ = ("ticket", "future")

    def __init__(self, ticket: str, future: "asyncio.Future[SharedPermit]") -> None:
        self.ticket = ticket
        self.future = future


class _KeyTickets:
    """One key's local tickets. `pending` are requests sent and not answered: a wake-up can
    report their grant before the answer arrives (it comes on another connection), and `early`
    keeps it until then."""

    __slots__ = ("waiting", "held", "pending", "early", "retry", "checking")

    def __init__(self) -> None:
        self.waiting: dict[str, _Waiter] = {}
        self.held: dict[str, SharedPermit] = {}
        self.pending: set[str] = set()
        self.early: dict[str, TicketState] = {}
        self.retry: Optional[asyncio.TimerHandle] = None
        self.checking = False


class SharedKeys:
    """Shared keys over one store: one lease schedule for all tickets of this process. A process
    holds only the permits it asked for: each `acquire` is one ticket."""

    def __init__(self, store: SharedStore, *, lease_ms: int = 10_000, owner: Optional[str] = None) -> None:
        """`lease_ms` (300 ..= 3600000) is each ticket's lease, waiting or granted: a process
        killed with SIGKILL holds its permits at most this long. `owner` starts every ticket id
        (default: the pid); a random tag of these keys follows it, so clients given the same
        owner never share a ticket."""
        self.store = store
        self.lease_ms = _int_in(lease_ms, "lease_ms", LEASE_MS_MIN, LEASE_MS_MAX)
        self.owner = str(os.getpid()) if owner is None else _check.string(owner, "owner")
        if not 0 < len(self.owner) <= 60:
            raise ValueError(f"owner must be 1 ..= 60 characters, got {len(self.owner)}")
        # `<owner>-<random tag>`: every ticket id starts with it.
        self._prefix = f"{self.owner}-{secrets.token_hex(6)}"
        self._lease = LeaseSchedule(self.lease_ms)
        self._keys: dict[str, _KeyTickets] = {}
        # One watch per key once a ticket of it waited, kept until `close()` (a Redis
        # subscription stays, so a later wait costs no round trip).
        self._watches: dict[str, Watch] = {}
        # The timer for the schedule's `wake_at`.
        self._timer: Optional[asyncio.TimerHandle] = None
        # The store's error from the latest failed renewal, for the message of a ticket given up.
        self._last_error: Optional[BaseException] = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._count = 0
        self._closed = False

    async def acquire(
        self,
        key: str,
        *,
        limit: int,
        delay_ms: int = 0,
        rates: Sequence[RateWindow] = (),
        weight: int = 1,
        timeout: Optional[float] = None,
    ) -> SharedPermit:
        """Waits for a permit on `key`: enters the key's FIFO at the store and returns when the
        store granted it. The store keeps `limit`, `delay_ms` and the rate windows `rates` (at
        most 8, each window once, count and burst 1 ..= 1000000: GCRA at the store, across
        processes), where this permit costs `weight` units (1 ..= the smallest burst).
        `timeout` (seconds) bounds the whole wait: then the request is withdrawn and
        `TimeoutError` raised; cancelling the task withdraws it too. Raises
        `StoreUnavailableError`, `LeaseLostError`, or `DisposedError` after `close()`."""
        _check_key(key)
        limit = _int_in(limit, "limit", 1, LIMIT_MAX)
        delay_ms = _int_in(delay_ms, "delay_ms", 0, DELAY_MS_MAX)
        windows = _check_rates(rates)
        weight = _int_in(weight, "weight", 1, min((w.burst for w in windows), default=1))
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout >= 0):
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        if self._closed:
            raise DisposedError("these shared keys")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        self._count += 1
        n = self._count
        ticket = self._ticket_id(n)
        k = self._tickets(key)
        self._lease.requested(key, n, _now_ms())
        self._pump()
        k.pending.add(ticket)
        try:
            request = self.store.request(key, ticket, Terms(limit=limit, delay_ms=delay_ms, lease_ms=self.lease_ms, rates=windows, weight=weight))
            state = await (request if deadline is None else asyncio.wait_for(request, max(0.0, deadline - loop.time())))
        except asyncio.TimeoutError:
            self._forget(n)
            self._give_back(key, ticket)
            raise TimeoutError(f"no permit on key {key!r} within {timeout} s") from None
        except asyncio.CancelledError:
            self._forget(n)
            self._give_back(key, ticket)
            raise
        except BaseException as e:
            self._forget(n)
            if isinstance(e, StoreSplitError):
                self._split(e)
            raise
        finally:
            k.pending.discard(ticket)
            early = k.early.pop(ticket, None)
            self._idle(key, k)
        if early is not None and state.state == "waiting":
            state = early
        if self._closed:
            self._give_back(key, ticket)
            raise DisposedError("these shared keys")
        if state.state == "lost":
            self._forget(n)
            raise LeaseLostError(key, ticket, f"ticket {ticket} on key {key!r} was lost as it was requested")
        self._pump()  # gives the ticket up first when its answer came too late
        if not self._answered(n):
            self._give_back(key, ticket)
            raise StoreUnavailableError(
                self.store.kind,
                f"the request for ticket {ticket} on key {key!r} was answered too late to be sure of its lease "
                f"({self.lease_ms} ms); it was given back",
            )
        if state.state == "granted":
            permit = self._grant(key, state)
            self._pump()
            return permit
        return await self._wait(key, ticket, state.retry_ms, deadline, timeout)

    async def pause(self, key: str, for_ms: int) -> int:
        """No grant on `key`, in any process, before `for_ms` from now (a pause only extends).
        Returns the pause's end on the store's clock."""
        _check_key(key)
        return await self.store.pause(key, _int_in(for_ms, "for_ms", 0, DELAY_MS_MAX))

    def inspect(self) -> list[tuple[str, int, int]]:
        """`(key, waiting, held)` for every key with tickets of this process."""
        return [(key, len(k.waiting), len(k.held)) for key, k in self._keys.items()]

    async def close(self) -> None:
        """Raises `DisposedError` in every waiter, sets every permit's `lost`, and gives every
        ticket back to the store (errors ignored: leases end anyway). The store stays open."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        returns = []
        for key, k in list(self._keys.items()):
            for waiter in k.waiting.values():
                if not waiter.future.done():
                    waiter.future.set_exception(DisposedError("these shared keys"))
                returns.append(self.store.abandon(key, waiter.ticket))
            for permit in k.held.values():
                permit._lose(DisposedError("these shared keys"))
                returns.append(self.store.abandon(key, permit.ticket))
            k.waiting.clear()
            k.held.clear()
            self._idle(key, k)
        for watch in self._watches.values():
            watch.stop()
        self._watches.clear()
        self._lease.close()
        await asyncio.gather(*returns, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()

    async def _end(self, permit: SharedPermit, how: str) -> Removal:
        k = self._keys.get(permit.key)
        if k is not None:
            k.held.pop(permit.ticket, None)
            self._idle(permit.key, k)
        self._forget(self._number(permit.ticket))
        if how == "release":
            return await self.store.release(permit.key, permit.ticket)
        return await self.store.abandon(permit.key, permit.ticket)

    def _split(self, error: StoreSplitError) -> None:
        """The store is split: every waiter raises and every permit's `lost` is set with `error`,
        at once, and no ticket is given back (the store refuses every call from now on)."""
        for key, k in list(self._keys.items()):
            for waiter in list(k.waiting.values()):
                k.waiting.pop(waiter.ticket, None)
                self._forget(self._number(waiter.ticket))
                if not waiter.future.done():
                    waiter.future.set_exception(error)
            for permit in list(k.held.values()):
                k.held.pop(permit.ticket, None)
                self._forget(self._number(permit.ticket))
                permit._lose(error)
            self._idle(key, k)

    def _ticket_id(self, n: int) -> str:
        return f"{self._prefix}-{n}"

    def _number(self, ticket: str) -> int:
        return int(ticket[len(self._prefix) + 1 :])

    def _answered(self, n: int) -> bool:
        """Reports that a request was answered; False when its ticket was given up first (the
        answer came too late to be sure of its lease)."""
        try:
            self._lease.answered(n)
        except LeaseRefused as e:
            if e.code == "unknown-ticket":
                return False
            raise
        return True

    def _forget(self, n: int) -> None:
        """The schedule no longer tracks ticket `n` (given back, or lost at the store). A ticket
        it gave up already is unknown, which is fine here."""
        if self._closed:
            return
        try:
            self._lease.remove(n)
        except LeaseRefused:
            pass
        self._pump()

    def _pump(self) -> None:
        """Polls the lease schedule and does what it says: gives tickets up, sends the renewals
        due, and sets the timer for its next poll."""
        if self._closed:
            return
        poll = self._lease.poll(_now_ms())
        for given_up in poll.given_up:
            self._given_up(given_up)
        for renewal in poll.renewals:
            self._spawn(self._renew(renewal))
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if poll.wake_at is not None:
            delay = max(0, poll.wake_at - _now_ms()) / 1000
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._pump()

    async def _renew(self, renewal: Renewal) -> None:
        """One renewal the schedule asked for: the store's answer goes to the schedule, and the
        states it carries to the waiters and permits."""
        tickets = [self._ticket_id(n) for n in renewal.tickets]
        states: Optional[list[TicketState]] = None
        error: Optional[BaseException] = None
        try:
            states = await self.store.renew(renewal.key, tickets)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            error = e
        if self._closed:
            return
        if isinstance(error, StoreSplitError):
            self._split(error)
            return
        if states is not None:
            self._lease.renewed(renewal.id)
            k = self._keys.get(renewal.key)
            if k is not None:
                self._apply(renewal.key, k, states)
        else:
            self._lease.renew_failed(renewal.id)
        self._last_error = error
        self._pump()

    def _given_up(self, given_up: GivenUp) -> None:
        """A ticket the schedule gave up: its waiter raises, its permit's `lost` is set, with
        `StoreUnavailableError` (a pending request finds out when it is answered)."""
        k = self._keys.get(given_up.key)
        if k is None:
            return
        ticket = self._ticket_id(given_up.ticket)
        why = (
            f"ticket {ticket} on key {given_up.key!r} was given up before its lease ({self.lease_ms} ms) could end "
            f"at the store: {_GIVE_UP_REASONS.get(given_up.reason, given_up.reason)}"
        )
        error = self._last_error
        store = error.store if isinstance(error, StoreUnavailableError) else self.store.kind
        unavailable = StoreUnavailableError(store, why if error is None else f"{why} ({error})")
        waiter = k.waiting.pop(ticket, None)
        if waiter is not None and not waiter.future.done():
            waiter.future.set_exception(unavailable)
        permit = k.held.pop(ticket, None)
        if permit is not None:
            permit._lose(unavailable)
        self._idle(given_up.key, k)

    def _tickets(self, key: str) -> _KeyTickets:
        k = self._keys.get(key)
        if k is None:
            k = self._keys[key] = _KeyTickets()
        return k

    def _grant(self, key: str, state: TicketState) -> SharedPermit:
        permit = SharedPermit(self, key, state)
        self._tickets(key).held[state.ticket] = permit
        return permit

    async def _wait(
        self, key: str, ticket: str, retry_ms: Optional[int], deadline: Optional[float], timeout: Optional[float]
    ) -> SharedPermit:
        loop = asyncio.get_running_loop()
        k = self._tickets(key)
        waiter = _Waiter(ticket, loop.create_future())
        k.waiting[ticket] = waiter
        if key not in self._watches:

            def tickets() -> list[str]:
                now = self._keys.get(key)
                return [*now.waiting, *now.pending] if now is not None else []

            watch = self._watches[key] = self.store.watch(key, tickets, lambda wake: self._wake(key, wake))
            # A grant made between the request and the watch being ready sent no wake-up here.
            self._spawn(self._check_when_ready(key, watch))
        if retry_ms is not None:
            self._retry_after(key, k, retry_ms)
        self._pump()
        try:
            if deadline is None:
                return await asyncio.shield(waiter.future)
            return await asyncio.wait_for(asyncio.shield(waiter.future), max(0.0, deadline - loop.time()))
        except (asyncio.TimeoutError, asyncio.CancelledError) as e:
            if k.waiting.get(ticket) is waiter:
                del k.waiting[ticket]
                self._idle(key, k)
            if waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None:
                self._spawn(waiter.future.result().abandon())  # granted as the wait ended
            else:
                waiter.future.cancel()
                self._forget(self._number(ticket))
                self._give_back(key, ticket)
            if isinstance(e, asyncio.TimeoutError):
                raise TimeoutError(f"no permit on key {key!r} within {timeout} s") from None
            raise

    async def _check_when_ready(self, key: str, watch: Watch) -> None:
        try:
            await watch.ready
        except Exception:
            pass
        await self._check(key)

    def _wake(self, key: str, wake: Wake) -> None:
        k = self._keys.get(key)
        if k is None:
            return
        self._apply(key, k, wake.states)
        if wake.resync:
            self._spawn(self._check(key))
        if wake.retry is not None and wake.retry[0] in k.waiting:
            self._retry_after(key, k, wake.retry[1])

    def _retry_after(self, key: str, k: _KeyTickets, ms: int) -> None:
        if k.retry is not None:
            k.retry.cancel()

        def fire() -> None:
            k.retry = None
            self._spawn(self._check(key))

        k.retry = asyncio.get_running_loop().call_later((ms + 1) / 1000, fire)

    async def _check(self, key: str) -> None:
        """Asks the store for the states of every local ticket of `key` (a retry, a resync, a
        watch that became ready) and applies them. It renews their leases at the store too,
        which only lengthens them: the lease schedule counts only its own renewals. At most one
        check per key at a time; a failure is left to the schedule's renewals."""
        k = self._keys.get(key)
        if k is None or k.checking or not (k.waiting or k.held):
            return
        k.checking = True
        tickets = [*k.waiting, *k.held]
        try:
            for i in range(0, len(tickets), RENEW_TICKETS_MAX):
                self._apply(key, k, await self.store.renew(key, tickets[i : i + RENEW_TICKETS_MAX]))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            # The lease schedule's renewals see the store's failures and give tickets up in
            # time; a split store gives every ticket up now.
            if isinstance(e, StoreSplitError):
                self._split(e)
        finally:
            k.checking = False
            self._idle(key, k)

    def _apply(self, key: str, k: _KeyTickets, states: Sequence[TicketState]) -> None:
        """States from the store: grants resolve waiters, losses fail them or set permits'
        `lost` (and leave the lease schedule)."""
        for state in states:
            waiter = k.waiting.get(state.ticket)
            permit = k.held.get(state.ticket)
            if waiter is not None:
                if state.state == "waiting":
                    if state.retry_ms is not None:
                        self._retry_after(key, k, state.retry_ms)
                    continue
                del k.waiting[state.ticket]
                if waiter.future.done():
                    continue
                if state.state == "granted":
                    waiter.future.set_result(self._grant(key, state))
                else:
                    self._forget(self._number(state.ticket))
                    waiter.future.set_exception(LeaseLostError(key, state.ticket))
            elif state.ticket in k.pending:
                if state.state == "granted":
                    k.early[state.ticket] = state
            elif permit is not None and state.state == "lost":
                del k.held[state.ticket]
                self._forget(self._number(state.ticket))
                permit._lose(LeaseLostError(key, state.ticket))
        self._idle(key, k)

    def _idle(self, key: str, k: _KeyTickets) -> None:
        """Clears the retry when no ticket of `key` waits, and forgets the key when it has none."""
        if not k.waiting and k.retry is not None:
            k.retry.cancel()
            k.retry = None
        if not (k.waiting or k.held or k.pending or k.checking) and self._keys.get(key) is k:
            del self._keys[key]

    def _give_back(self, key: str, ticket: str) -> None:
        async def give_back() -> None:
            try:
                await self.store.abandon(key, ticket)
            except Exception:
                pass  # the lease ends anyway

        self._spawn(give_back())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


_GIVE_UP_REASONS = {
    "request-unanswered": "its request was not answered in time",
    "renewal-failed": "its renewals failed",
    "renewal-unanswered": "its renewal was not answered in time",
    "not-renewed": "it was not renewed in time (the event loop was blocked)",
}
"""Why the lease schedule gave a ticket up, for its error's message."""


def _check_key(key: Any) -> None:
    _check.string(key, "key")
    size = len(key.encode())
    if not 0 < size <= KEY_LENGTH_MAX:
        raise ValueError(f"key must be 1 ..= {KEY_LENGTH_MAX} bytes of UTF-8, got {size}")


def _check_rates(rates: Any) -> tuple[RateWindow, ...]:
    """`rates`, checked: a sequence of at most 8 `RateWindow`s, each window once, count and
    burst 1 ..= 1000000 (the stores keep arrival times exactly in 53 bits), at least 1 ms long."""
    if isinstance(rates, (str, bytes)) or not isinstance(rates, Sequence):
        raise TypeError(f"rates must be a sequence of RateWindow, got {type(rates).__name__}")
    if len(rates) > RATE_WINDOWS_MAX:
        raise ValueError(f"rates must hold at most {RATE_WINDOWS_MAX} windows, got {len(rates)}")
    out: list[RateWindow] = []
    for i, w in enumerate(rates):
        if not isinstance(w, RateWindow):
            raise TypeError(f"rates[{i}] must be a RateWindow, got {type(w).__name__}")
        window = RateWindow(
            _int_in(w.count, f"rates[{i}].count", 1, RATE_COUNT_MAX),
            _int_in(w.per_ms, f"rates[{i}].per_ms", 1, 2**32 - 1),
            _int_in(w.burst, f"rates[{i}].burst", 1, RATE_COUNT_MAX),
        )
        if any(o.count == window.count and o.per_ms == window.per_ms for o in out):
            raise ValueError(f"rates[{i}] names the window {window.count}/{window.per_ms} ms a second time")
        out.append(window)
    return tuple(out)


def _int_in(value: Any, what: str, low: int, high: int) -> int:
    value = _check.u32(value, what)
    if not low <= value <= high:
        raise ValueError(f"{what} must be in {low} ..= {high}, got {value}")
    return value
