"""A virtual-time asyncio loop for tests: `loop.time()` is virtual (it starts at 0), and when
every task is blocked (nothing is ready and no file descriptor has an event) the loop jumps
to its next timer instead of waiting for it. Nothing sleeps on real time, and a test's
timeline is exact: `asyncio.sleep(0.010)` ends at 10 ms, whatever the machine does.

`run(coro)` runs a coroutine on a fresh virtual loop (what `asyncio.run` does on a real one).
`await loop.run_until(t)` (seconds) lets everything due until `t` happen, then returns at
`t` with nothing else ready: what the scenario runner uses to act "at" a time. A loop with no
timer left and nothing ready waits for real file-descriptor events (a thread's
`call_soon_threadsafe`) up to `stall` seconds, then raises: a test that deadlocks fails
instead of hanging. `run` also fails a run that leaves a task pending when its loop closes (it
would be destroyed pending), or an error the loop's exception handler got (`strict=False` lets
them be, as `asyncio.run` does)."""

from __future__ import annotations

import asyncio
import gc
import selectors
from typing import Any, Awaitable, Optional, TypeVar

T = TypeVar("T")

# A timer within this of a target time counts as due at it (a float of seconds carries error).
_EPSILON = 1e-7


class _VirtualSelector:
    """The loop's selector: a real one polled without waiting, and the wait turned into a
    jump of the virtual clock."""

    def __init__(self, loop: "VirtualLoop") -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def select(self, timeout: Optional[float] = None) -> list[Any]:
        events = self._real.select(0)
        if events or timeout == 0:
            return events
        return self._loop._idle(timeout, self._real)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class VirtualLoop(asyncio.SelectorEventLoop):
    """See the module doc."""

    def __init__(self, stall: float = 30.0) -> None:
        self._now = 0.0
        self._stall = stall
        self._target: Optional[tuple[float, asyncio.Future[None]]] = None
        super().__init__(_VirtualSelector(self))  # type: ignore[arg-type]

    def time(self) -> float:
        return self._now

    async def run_until(self, t: float) -> None:
        """Returns at virtual time `t` (or now, if later) once nothing due until then is left
        to do."""
        f = self.create_future()
        self._target = (t, f)
        try:
            await f
        finally:
            self._target = None

    def _next_timer(self) -> Optional[float]:
        scheduled = self._scheduled  # type: ignore[attr-defined]
        while scheduled and scheduled[0]._cancelled:
            import heapq

            heapq.heappop(scheduled)
            self._timer_cancelled_count -= 1  # type: ignore[attr-defined]
        return scheduled[0]._when if scheduled else None

    def _idle(self, timeout: Optional[float], real: selectors.BaseSelector) -> list[Any]:
        """Nothing is ready: jump to the next timer, or wake `run_until`, or wait for real."""
        nxt = self._next_timer()
        if self._target is not None:
            t, f = self._target
            if nxt is None or nxt > t + _EPSILON:
                self._now = max(self._now, t)
                self._target = None
                if not f.done():
                    f.set_result(None)
                return []
        if nxt is not None:
            self._now = max(self._now, nxt)
            return []
        events = real.select(self._stall)
        if not events:
            raise RuntimeError(f"the virtual loop is stuck: every task waits, no timer is armed, and nothing came for {self._stall} s")
        return events


class LeftBehindError(AssertionError):
    """`run` (strict): the run left a task pending when its loop closed (it would be destroyed
    pending), or the loop reported an error nobody handled."""


def run(main: Awaitable[T], *, stall: float = 30.0, strict: bool = True) -> T:
    """`asyncio.run(main)` on a fresh virtual loop. `strict` (the default): once `main`
    returned, raises `LeftBehindError` if a task is still pending after the teardown cancelled
    every task (a task that ignores its cancellation), or if the loop's exception handler was
    called (a task destroyed pending, an exception never retrieved, a callback that raised),
    collected garbage included."""
    loop = VirtualLoop(stall)
    reports: list[str] = []
    if strict:
        loop.set_exception_handler(lambda _loop, context: reports.append(_report(context)))
    left: list[str] = []
    try:
        asyncio.set_event_loop(loop)
        result = loop.run_until_complete(main)
    finally:
        try:
            left = [repr(t) for t in _cancel_all(loop)]
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
    if strict:
        gc.collect()  # a task dropped pending reports itself when it is collected
        if left or reports:
            raise LeftBehindError(
                "the run left work behind:\n"
                + "\n".join([f"pending after the teardown: {t}" for t in left] + reports)
            )
    return result


def _report(context: dict[str, Any]) -> str:
    """One call of the loop's exception handler, as a line."""
    what = context.get("task") or context.get("future") or context.get("handle") or ""
    error = context.get("exception")
    return f"{context.get('message', '')} {what!r}" + (f" ({type(error).__name__}: {error})" if error is not None else "")


def _cancel_all(loop: asyncio.AbstractEventLoop) -> list["asyncio.Task[Any]"]:
    """Cancels every task and waits for them; returns those still pending then."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        # A task that ignores its cancellation (a test's `hang`) is left after a virtual minute.
        loop.run_until_complete(asyncio.wait(tasks, timeout=60))
    return [t for t in tasks if not t.done()]
