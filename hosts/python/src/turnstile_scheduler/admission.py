"""Admission control for one binding (one shared MCP connection): the WIT `admission` resource,
and `slot`, the async way to use it.

```python
async with admission.slot("call", timeout=30) as permit:
    await run_the_tool_call()
```

`slot` begins a request, waits (queued) until the controller admits it, and ends it when the
block exits, however it exits. `timeout` is the whole request's deadline: time spent queued
counts against it; when it passes while queued, the request is abandoned (it consumed nothing)
and `AdmissionTimeoutError` is raised (an `AdmissionError`, and a `TimeoutError`); when it passes while the block runs, the block's task is cancelled
and TimeoutError raised from the `async with`. Cancelling the waiting task abandons the request
too. `shutdown()` raises `ShutdownError` in every waiter, and cancels the task of every permit
in flight (`permit.cancelled` is set first; the `async with` then raises `ShutdownError`).

The synchronous methods (`begin`, `end`, `abandon`, `next_admissions`) stay available for hosts
with their own loop; tickets the async side drained for requests it does not own are returned
by the next `next_admissions`.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import weakref
from types import SimpleNamespace
from typing import Any, Optional

from . import _check
from ._component import Instance
from .errors import AdmissionError, AdmissionTimeoutError, DisposedError, ShutdownError
from .scheduler import _instance, _release
from .types import AdmissionClass, AdmissionErrorCode, ShutdownReport

_ids = itertools.count(1)


class Admission:
    """Admission control for one binding. `begin` returns a ticket no other request of the
    controller ever gets; `end` and `abandon` take it. Tickets are opaque numbers: each
    controller draws a random tag (`secrets.randbits(64)`) that the component derives its
    tickets from, so another controller's ticket is refused here as `unknown-request` instead
    of being taken for one of this controller's requests. Each controller runs in a component
    instance of its own (unless `instance` is given); `close()` or `with` frees it."""

    def __init__(self, max_concurrent: int, allow_parallel: bool = False, *, instance: Optional[Instance] = None) -> None:
        """`max_concurrent` bounds requests over every class (the component clamps it to at
        least 1); tool calls run one at a time unless `allow_parallel`."""
        config = SimpleNamespace(
            **{
                "max-concurrent": _check.u32(max_concurrent, "max_concurrent"),
                "allow-parallel": _check.boolean(allow_parallel, "allow_parallel"),
                # A fresh random tag per controller: another controller's ticket is unknown here.
                "tag": secrets.randbits(64),
            }
        )
        self.instance = inst = _instance(instance)
        self._resource: Any = inst.func("admission", "[constructor]admission")(config)
        method = lambda name: inst.func("admission", f"[method]admission.{name}")  # noqa: E731
        self._begin = method("begin")
        self._end = method("end")
        self._abandon = method("abandon")
        self._shutdown = method("shutdown")
        self._next = method("next-admissions")
        self._in_flight = method("in-flight")
        self._class_of_method = inst.func("admission", "class-of-method")
        self._waiters: dict[int, asyncio.Future[None]] = {}
        self._permits: dict[int, Permit] = {}
        self._unclaimed: list[int] = []
        self._finalizer = weakref.finalize(self, _release, inst, self._resource, instance is None)

    # -- the synchronous surface ------------------------------------------------------------

    def begin(self, id: str, cls: AdmissionClass, parent: Optional[int] = None) -> int:
        """Asks to admit a request (`id` names it in messages and is unique among live
        requests); it is admitted now or queued, and `next_admissions` reports it either way.
        `parent` is the ticket of the in-flight call a re-entrant call descends from. Returns
        the request's ticket; raises `AdmissionError` (`ShutdownError` after `shutdown`)."""
        rid = _check.string(id, "id")
        klass = _check.enum(AdmissionClass, cls, "cls")
        p = _check.opt_u64(parent, "parent")
        result = self._begin(self._live(), rid, klass.value, p)
        # result<u64, error> lifts untagged: an int or a Record.
        if not isinstance(result, int):
            raise _error(result)
        return result

    def end(self, ticket: int) -> None:
        """An admitted request finished; its budget and lock are returned."""
        ticket = _check.u64(ticket, "ticket")
        _raise(self._end(self._live(), ticket))
        if self._waiters:
            self._pump()

    def abandon(self, ticket: int) -> None:
        """A request gave up before the host learned it was admitted (queued, or admitted but
        not yet drained from `next_admissions`); it consumed nothing."""
        ticket = _check.u64(ticket, "ticket")
        _raise(self._abandon(self._live(), ticket))
        if self._waiters:
            self._pump()

    def shutdown(self) -> ShutdownReport:
        """Refuses all further work; reports the tickets in flight (to cancel, each still needs
        its `end`) and the tickets that were queued (refused). `slot` requests are handled here
        and left out of the report: every waiter raises `ShutdownError` (consuming nothing),
        and every permit in flight is cancelled (its `end` comes when its block exits)."""
        r = self._shutdown(self._live())
        waiters, self._waiters = self._waiters, {}
        mine = set(waiters) | set(self._permits)
        for ticket, fut in waiters.items():
            if not fut.done():
                fut.set_exception(ShutdownError(AdmissionErrorCode.SHUTDOWN, f"request {ticket} was queued at shutdown"))
                fut.exception()  # retrieved: a waiter cancelled meanwhile must not warn
        cancel = []
        for ticket in r.cancel:
            if ticket in waiters:  # admitted but its waiter had not learned it yet
                _raise(self._end(self._resource, ticket))
            elif ticket not in mine:
                cancel.append(ticket)
        for permit in list(self._permits.values()):
            permit._shut_down()
        return ShutdownReport(cancel, [t for t in r.refused if t not in mine])

    def next_admissions(self) -> list[int]:
        """Drains the tickets admitted since the last call, in admission order (those of
        `slot` requests are handled by `slot` itself and not reported here)."""
        self._pump()
        out, self._unclaimed = self._unclaimed, []
        return out

    def in_flight(self) -> int:
        """Requests in flight now (for diagnostics only)."""
        return int(self._in_flight(self._live()))

    def class_of_method(self, method: str) -> AdmissionClass:
        """The class of an MCP request by its method: the component's table (`tools/call` is
        `call`; `initialize`, `ping`, the list, subscribe and `logging/setLevel` methods are
        `control`; everything else, newer methods included, is `request`; methods compare
        exactly). Never `reentrant`: a request sent from a server-request handler while a tool
        call is in flight is re-entrant whatever its method, which only the host knows. Works on
        a closed controller too (it asks the controller's instance, not the controller)."""
        if not isinstance(method, str):
            raise TypeError(f"method must be a str, not {type(method).__name__}")
        return AdmissionClass(self._class_of_method(method))

    # -- the async surface ------------------------------------------------------------------

    def slot(
        self,
        cls: AdmissionClass,
        *,
        parent: Optional[int] = None,
        timeout: Optional[float] = None,
        id: Optional[str] = None,
    ) -> "Slot":
        """`async with admission.slot(cls, parent=..., timeout=..., id=...) as permit:` runs
        the block once the request is admitted and ends it when the block exits. Arguments
        are checked here, before anything is queued. See the module doc for timeouts,
        cancellation and shutdown."""
        klass = _check.enum(AdmissionClass, cls, "cls")
        p = _check.opt_u64(parent, "parent")
        t = _check.number(timeout, "timeout")
        rid = f"slot-{next(_ids)}" if id is None else _check.string(id, "id")
        self._live()
        return Slot(self, klass, p, t, rid)

    # -- lifetime ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._resource is None

    def close(self) -> None:
        """Shuts down (when there are waiters or permits) and frees the controller; later use
        raises RuntimeError. Closing twice is fine."""
        if self._resource is None:
            return
        if (self._waiters or self._permits) and self.instance.broken is None:
            self.shutdown()
        self._resource = None
        self._finalizer()

    def __enter__(self) -> "Admission":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------

    def _live(self) -> Any:
        if self._resource is None:
            raise DisposedError("the admission controller")
        return self._resource

    def _pump(self) -> None:
        """Drains admissions: a waiter's ticket wakes it, any other waits for `next_admissions`."""
        for ticket in self._next(self._live()):
            fut = self._waiters.pop(ticket, None)
            if fut is None:
                self._unclaimed.append(ticket)
            elif not fut.done():
                fut.set_result(None)
            else:  # its waiter gave up in this very turn: it was admitted, so it must end
                _raise(self._end(self._resource, ticket))


class Permit:
    """An admitted request, for the duration of its `async with` block."""

    def __init__(self, ticket: int, id: str, cls: AdmissionClass, deadline: Optional[float]) -> None:
        self.ticket = ticket
        self.id = id
        self.cls = cls
        self.deadline = deadline
        """The request's deadline in `loop.time()` seconds, or None."""
        self.cancelled = asyncio.Event()
        """Set when `shutdown` cancels the request (just before its task is cancelled)."""
        self._task: Optional[asyncio.Task[Any]] = asyncio.current_task()
        self._why: Optional[str] = None  # "timeout" or "shutdown" once this package cancelled the task

    def remaining(self) -> Optional[float]:
        """Seconds left before the deadline (None without one)."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - asyncio.get_running_loop().time())

    def _cancel(self, why: str) -> None:
        if self._why is None:
            self._why = why
            self.cancelled.set()
            if self._task is not None:
                self._task.cancel()

    def _shut_down(self) -> None:
        self._cancel("shutdown")


class Slot:
    """The async context manager `Admission.slot` returns."""

    def __init__(
        self, admission: Admission, cls: AdmissionClass, parent: Optional[int], timeout: Optional[float], id: str
    ) -> None:
        self._admission = admission
        self._cls = cls
        self._parent = parent
        self._timeout = timeout
        self._id = id
        self._permit: Optional[Permit] = None
        self._timer: Optional[asyncio.TimerHandle] = None

    async def __aenter__(self) -> Permit:
        if self._permit is not None:
            raise RuntimeError("a slot is entered once")
        adm = self._admission
        loop = asyncio.get_running_loop()
        deadline = None if self._timeout is None else loop.time() + self._timeout
        ticket = adm.begin(self._id, self._cls, self._parent)
        fut: asyncio.Future[None] = loop.create_future()
        adm._waiters[ticket] = fut
        adm._pump()
        if not fut.done():
            try:
                if deadline is None:
                    await asyncio.shield(fut)
                else:
                    await asyncio.wait_for(asyncio.shield(fut), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                self._give_up(ticket, fut)
                raise AdmissionTimeoutError(self._id, self._timeout) from None  # type: ignore[arg-type]
            except BaseException:
                self._give_up(ticket, fut)
                raise
        fut.result()  # ShutdownError when shutdown refused it
        permit = self._permit = Permit(ticket, self._id, self._cls, deadline)
        adm._permits[ticket] = permit
        if deadline is not None:
            self._timer = loop.call_at(deadline, permit._cancel, "timeout")
        return permit

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Optional[bool]:
        self._end()
        return self._outcome(exc_type, exc)

    def _end(self) -> None:
        """Ends the request: its budget and lock go to the next waiter (idempotent)."""
        permit, adm = self._permit, self._admission
        assert permit is not None
        if self._timer is not None:
            self._timer.cancel()
        if adm._permits.pop(permit.ticket, None) is None:
            return
        if adm._resource is not None and adm.instance.broken is None:
            adm._end(adm._resource, permit.ticket)  # refused only on a stale ticket: never here
            if adm._waiters:
                adm._pump()

    def _detach(self) -> None:
        """The block is over but the request goes on (an MCP request the server may still run):
        it keeps its slot until `_end`, and its task is no longer its task (shutdown cancels
        nothing for it)."""
        permit = self._permit
        assert permit is not None
        if self._timer is not None:
            self._timer.cancel()
        permit._task = None

    def _outcome(self, exc_type: Any, exc: Any) -> Optional[bool]:
        """What leaving the block raises: a cancellation this package caused becomes
        `TimeoutError` (the deadline) or `ShutdownError`."""
        permit = self._permit
        assert permit is not None
        if permit._why is not None and exc_type is asyncio.CancelledError:
            task = permit._task
            uncancel = getattr(task, "uncancel", None)
            if uncancel is not None and uncancel() > 0:
                return None  # someone else cancelled it too: let that cancellation through
            if permit._why == "timeout":
                raise TimeoutError(f"request {permit.id} ({permit.cls.value}) ran past its deadline") from exc
            raise ShutdownError(AdmissionErrorCode.SHUTDOWN, f"request {permit.id} was cancelled by shutdown") from exc
        return None

    def _give_up(self, ticket: int, fut: "asyncio.Future[None]") -> None:
        """The waiter stops waiting (timeout, cancellation): a queued request is abandoned, one
        admitted meanwhile is ended; either way it consumed nothing."""
        adm = self._admission
        waiting = adm._waiters.pop(ticket, None)
        if adm._resource is None or adm.instance.broken is not None:
            return
        if fut.done() and fut.exception() is not None:
            return  # refused by shutdown: nothing to give back
        if waiting is None and fut.done():
            _raise(adm._end(adm._resource, ticket))  # admitted and drained
        else:
            result = adm._abandon(adm._resource, ticket)
            if result is not None:  # admitted inside a drain we have not seen: end it
                _raise(adm._end(adm._resource, ticket))
        adm._pump()


def _error(record: Any) -> AdmissionError:
    code = AdmissionErrorCode(record.code)
    if code is AdmissionErrorCode.SHUTDOWN:
        return ShutdownError(code, record.message)
    return AdmissionError(code, record.message)


def _raise(result: Any) -> None:
    # result<_, error> lifts untagged: None or a Record.
    if result is not None:
        raise _error(result)

