"""`SharedKeys`: the async client a host (the driver) uses over a store. `acquire(key, limit=...)`
returns a `SharedPermit` once the store granted the ticket; the permit's lease (and the lease of
every waiting ticket) is renewed by one heartbeat per `SharedKeys`, every `lease_ms / 3`, in one
`renew` per key. `permit.release()` gives it back when the execution ended; `permit.abandon()`
gives back a permit never used; cancelling the waiting task (or `timeout`) withdraws the
request.

Failure rules (the same as the JS package's `keys.ts`):
- The store unreachable: `acquire`'s request raises `StoreUnavailableError`. A waiting ticket or
  a permit whose renewals keep failing is given up before its lease can have expired in the
  store (when the next heartbeat would come after `renewed + lease_ms`): the waiter raises, and
  the permit's `lost` is set with, `StoreUnavailableError`. The store cannot grant that place
  again before the lease ends, so nothing is granted twice.
- The store no longer knows a ticket (its lease expired): `LeaseLostError`, the same way.
- Every wait ends: on a grant, on cancellation or `timeout`, on a lost lease or store, or on
  `close()`.
"""

from __future__ import annotations

import asyncio
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
    RENEW_TICKETS_MAX,
    LeaseLostError,
    Removal,
    SharedStore,
    StoreUnavailableError,
    Terms,
    TicketState,
    Wake,
    Watch,
)


def _now_ms() -> int:
    return int(time.time() * 1000)


class SharedPermit:
    """A granted ticket. Give it back with `release()` (the execution ended) or `abandon()` (it
    never started); `async with` releases it. `lost` is set when its lease was lost
    (`lost_error` is a `LeaseLostError`) or its store stayed unreachable
    (`StoreUnavailableError`); the execution should then stop."""

    def __init__(self, keys: "SharedKeys", key: str, state: TicketState, renewed_ms: int) -> None:
        self.key = key
        self.ticket = state.ticket
        self.seq = state.seq
        self.grant = state.grant
        self.granted_ms = state.granted_ms
        self.lost = asyncio.Event()
        self.lost_error: Optional[BaseException] = None
        self._keys = keys
        self._renewed_ms = renewed_ms
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
    __slots__ = ("ticket", "future", "renewed_ms")

    def __init__(self, ticket: str, future: "asyncio.Future[SharedPermit]", renewed_ms: int) -> None:
        self.ticket = ticket
        self.future = future
        self.renewed_ms = renewed_ms


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
    """Shared keys over one store: one heartbeat for all tickets of this process. A process
    holds only the permits it asked for: each `acquire` is one ticket."""

    def __init__(self, store: SharedStore, *, lease_ms: int = 10_000, owner: Optional[str] = None) -> None:
        """`lease_ms` (300 ..= 3600000) is each ticket's lease, waiting or granted: a process
        killed with SIGKILL holds its permits at most this long. `owner` starts every ticket id
        (default: the pid and random hex)."""
        self.store = store
        self.lease_ms = _int_in(lease_ms, "lease_ms", LEASE_MS_MIN, LEASE_MS_MAX)
        self.owner = f"{os.getpid()}-{secrets.token_hex(4)}" if owner is None else _check.string(owner, "owner")
        if not 0 < len(self.owner) <= 60:
            raise ValueError(f"owner must be 1 ..= 60 characters, got {len(self.owner)}")
        self._heartbeat_ms = self.lease_ms // 3
        self._keys: dict[str, _KeyTickets] = {}
        # One watch per key once a ticket of it waited, kept until `close()` (a Redis
        # subscription stays, so a later wait costs no round trip).
        self._watches: dict[str, Watch] = {}
        self._heartbeat: Optional[asyncio.Task[None]] = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._count = 0
        self._closed = False

    async def acquire(self, key: str, *, limit: int, delay_ms: int = 0, timeout: Optional[float] = None) -> SharedPermit:
        """Waits for a permit on `key`: enters the key's FIFO at the store and returns when the
        store granted it. `timeout` (seconds) bounds the whole wait: then the request is
        withdrawn and `TimeoutError` raised; cancelling the task withdraws it too. Raises
        `StoreUnavailableError`, `LeaseLostError`, or `DisposedError` after `close()`."""
        _check_key(key)
        limit = _int_in(limit, "limit", 1, LIMIT_MAX)
        delay_ms = _int_in(delay_ms, "delay_ms", 0, DELAY_MS_MAX)
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout >= 0):
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        if self._closed:
            raise DisposedError("these shared keys")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        self._count += 1
        ticket = f"{self.owner}-{self._count}"
        sent_ms = _now_ms()
        k = self._tickets(key)
        k.pending.add(ticket)
        try:
            request = self.store.request(key, ticket, Terms(limit=limit, delay_ms=delay_ms, lease_ms=self.lease_ms))
            state = await (request if deadline is None else asyncio.wait_for(request, max(0.0, deadline - loop.time())))
        except asyncio.TimeoutError:
            self._give_back(key, ticket)
            raise TimeoutError(f"no permit on key {key!r} within {timeout} s") from None
        except asyncio.CancelledError:
            self._give_back(key, ticket)
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
        if state.state == "granted":
            return self._grant(key, state, sent_ms)
        if state.state == "lost":
            raise LeaseLostError(key, ticket, f"ticket {ticket} on key {key!r} was lost as it was requested")
        return await self._wait(key, ticket, sent_ms, state.retry_ms, deadline, timeout)

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
        if self._heartbeat is not None:
            self._heartbeat.cancel()
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
        await asyncio.gather(*returns, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()

    async def _end(self, permit: SharedPermit, how: str) -> Removal:
        k = self._keys.get(permit.key)
        if k is not None:
            k.held.pop(permit.ticket, None)
            self._idle(permit.key, k)
        if how == "release":
            return await self.store.release(permit.key, permit.ticket)
        return await self.store.abandon(permit.key, permit.ticket)

    def _tickets(self, key: str) -> _KeyTickets:
        k = self._keys.get(key)
        if k is None:
            k = self._keys[key] = _KeyTickets()
        return k

    def _grant(self, key: str, state: TicketState, renewed_ms: int) -> SharedPermit:
        permit = SharedPermit(self, key, state, renewed_ms)
        self._tickets(key).held[state.ticket] = permit
        self._start_heartbeat()
        return permit

    async def _wait(
        self, key: str, ticket: str, sent_ms: int, retry_ms: Optional[int], deadline: Optional[float], timeout: Optional[float]
    ) -> SharedPermit:
        loop = asyncio.get_running_loop()
        k = self._tickets(key)
        waiter = _Waiter(ticket, loop.create_future(), sent_ms)
        k.waiting[ticket] = waiter
        self._start_heartbeat()
        if key not in self._watches:

            def tickets() -> list[str]:
                now = self._keys.get(key)
                return [*now.waiting, *now.pending] if now is not None else []

            watch = self._watches[key] = self.store.watch(key, tickets, lambda wake: self._wake(key, wake))
            # A grant made between the request and the watch being ready sent no wake-up here.
            self._spawn(self._check_when_ready(key, watch))
        if retry_ms is not None:
            self._retry_after(key, k, retry_ms)
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
        self._apply(key, k, wake.states, None)
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
        """Renews every local ticket of `key` and applies the states (the heartbeat, a retry, a
        resync). At most one check per key at a time."""
        k = self._keys.get(key)
        if k is None or k.checking or not (k.waiting or k.held):
            return
        k.checking = True
        tickets = [*k.waiting, *k.held]
        sent_ms = _now_ms()
        try:
            for i in range(0, len(tickets), RENEW_TICKETS_MAX):
                self._apply(key, k, await self.store.renew(key, tickets[i : i + RENEW_TICKETS_MAX]), sent_ms)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._failed(key, k, e)
        finally:
            k.checking = False
            self._idle(key, k)

    def _apply(self, key: str, k: _KeyTickets, states: Sequence[TicketState], renewed_ms: Optional[int]) -> None:
        """States from the store: grants resolve waiters, losses fail them or set permits'
        `lost`, and a renewal sent at `renewed_ms` moves the local lease deadline."""
        for state in states:
            waiter = k.waiting.get(state.ticket)
            permit = k.held.get(state.ticket)
            if waiter is not None:
                if state.state == "waiting":
                    if renewed_ms is not None:
                        waiter.renewed_ms = renewed_ms
                    if state.retry_ms is not None:
                        self._retry_after(key, k, state.retry_ms)
                    continue
                del k.waiting[state.ticket]
                if waiter.future.done():
                    continue
                if state.state == "granted":
                    waiter.future.set_result(self._grant(key, state, renewed_ms if renewed_ms is not None else waiter.renewed_ms))
                else:
                    waiter.future.set_exception(LeaseLostError(key, state.ticket))
            elif state.ticket in k.pending:
                if state.state == "granted":
                    k.early[state.ticket] = state
            elif permit is not None:
                if state.state == "lost":
                    del k.held[state.ticket]
                    permit._lose(LeaseLostError(key, state.ticket))
                elif renewed_ms is not None:
                    permit._renewed_ms = renewed_ms
        self._idle(key, k)

    def _failed(self, key: str, k: _KeyTickets, error: BaseException) -> None:
        """A renewal failed: tickets whose lease may end before the next heartbeat are given up."""
        now = _now_ms()

        def unavailable() -> BaseException:
            if isinstance(error, StoreUnavailableError):
                return error
            return StoreUnavailableError(self.store.kind, f"renew failed: {error}")

        for waiter in list(k.waiting.values()):
            if now + self._heartbeat_ms < waiter.renewed_ms + self.lease_ms:
                continue
            del k.waiting[waiter.ticket]
            if not waiter.future.done():
                waiter.future.set_exception(unavailable())
        for permit in list(k.held.values()):
            if now + self._heartbeat_ms < permit._renewed_ms + self.lease_ms:
                continue
            del k.held[permit.ticket]
            permit._lose(unavailable())
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

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None and not self._closed:
            self._heartbeat = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        try:
            while self._keys and not self._closed:
                await asyncio.sleep(self._heartbeat_ms / 1000)
                for key in list(self._keys):
                    self._spawn(self._check(key))
        finally:
            self._heartbeat = None


def _check_key(key: Any) -> None:
    _check.string(key, "key")
    if not 0 < len(key) <= KEY_LENGTH_MAX:
        raise ValueError(f"key must be 1 ..= {KEY_LENGTH_MAX} characters, got {len(key)}")


def _int_in(value: Any, what: str, low: int, high: int) -> int:
    value = _check.u32(value, what)
    if not low <= value <= high:
        raise ValueError(f"{what} must be in {low} ..= {high}, got {value}")
    return value
