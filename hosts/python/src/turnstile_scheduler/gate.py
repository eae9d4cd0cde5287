"""The gate: Turnstile for frameworks that run tools themselves (pydantic-ai, an MCP client, any
loop that starts one task per tool call and gives no batch boundary).

```python
gate = Gate(policy)                                    # or Gate(scheduler) / Gate(driver)
result = await gate.call("rfd_draft", "toolu_01", {"title": "x"}, draft_rfd)   # draft_rfd({"title": "x"})
```

`await gate.call(tool, call_id, arguments, run)` (the JS package's `gate.call(tool, id, args,
run)`) waits until the scheduler releases the call, then awaits `run(arguments)` **in the
caller's own task** (its contextvars, its cancel scopes, its traceback) and returns what it
returns once its outcome reached the driver (and, with `persist`, its snapshot). `arguments`
are the tool call's arguments as the model wrote them (a mapping, its JSON text, or None; see
`Call.arguments`): the scheduler makes the call's key from them when its tool's key is a
template (`"fs:{path}"`), and `decide` sees them. The types follow `run`, so a checker sees
the arguments and the result. `gate.driver` is the driver the gate runs on.

What forms a batch. The gate relies on one thing: calls that arrive in the same event-loop
turn belong together, in arrival order. The first call of a turn schedules a flush with
`loop.call_soon`; every call that arrives before that callback runs (every task step that was
already queued, in the order the loop runs them) joins the batch. A framework that starts one
task per tool call of a response in written order, in one go (`asyncio.gather`, `create_task`
in a loop, an anyio task group), and reaches `gate.call` without suspending on the way, thus
submits the calls of one response as one batch in the order the model wrote them. A call that
arrives in a later turn is a batch of its own: still limited, still behind earlier batches
of its key, but the scheduler does not wait for it before starting the others. The
integrations test this assumption against the framework itself.

Each call settles on its own entry: `gate.call` returns when ITS run ends, not when the
batch ends. A call the scheduler settles raises `CallSettledError` (a `TurnstileError`)
carrying the `Reason`; its `str()` is the truthful text for the model, the component's (the
sentence its settlement carries, or `explain` for a response the host made), which the
JavaScript package gives word for word. A
`run` that raises fails only its call (the exception propagates from `gate.call`; the slot is
free at once). Cancelling the task awaiting `gate.call` cancels that call: queued, it is
withdrawn and, when the scheduler releases it, ends at once without running (its key moves
on); running, `run` is cancelled with the task. When every call of a batch was withdrawn,
the batch is cancelled. `execution_timeout` (the gate's) cancels a run that takes too long:
`gate.call` raises TimeoutError. `close()` cancels every batch: queued calls raise
`CallSettledError` (cancelled), running ones are cancelled and raise `DisposedError`.

Rate limits: a `run` that raises `RateLimited(retry_after)` retries in place. Its slot is
freed, its key pauses (every call on the key waits, in every batch), and `gate.call` waits in
the caller's task until the scheduler releases the call again, in its written place, then
awaits `run(arguments)` again. Past the key's `retries`, `gate.call` raises
`CallSettledError` with `Reason(ReasonKind.RATE_LIMITED, retries=n)`, whose text says so ("not
run again: rate limited n+1 times (n retries allowed); the endpoint asked to wait").

Fan-out: one `gate.call` is one plain call (one entry). Frameworks hand over one function per
tool call, so the gate never submits fan-out envelopes; a host that splits a call into
operations uses `Driver.run` with `Call(id, tool, operations=n)`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Optional, Sequence, TypeVar, Union

from . import _arguments, _check
from .config import Policy
from .driver import Decide, Driver, Execution, _Batch
from .events import OnEvent
from .errors import DisposedError, RateLimited, TurnstileError
from .outcomes import EntryOutcome
from .scheduler import Scheduler, explain, explain_in, lower_reason
from .types import Call, Reason, ReasonKind

A = TypeVar("A")
T = TypeVar("T")


class CallSettledError(TurnstileError):
    """The scheduler settled this call instead of running it (or stopped it being needed).
    `code` is the `ReasonKind`, `reason` the `Reason`; `message` and `str(error)` are exactly
    the text for the model, the component's `explain(call_id, reason)` (computed when not
    given)."""

    code: ReasonKind

    def __init__(self, call_id: str, tool: str, reason: Reason, message: Optional[str] = None) -> None:
        super().__init__(reason.kind, explain(call_id, reason) if message is None else message)
        self.reason = reason
        self.call_id = call_id
        self.tool = tool

    def __str__(self) -> str:
        return self.message


class _Pending:
    """One `gate.call` on its way: `go` resolves when its entry starts (or raises when it is
    settled); `done` carries its run's end back to the driver's execution."""

    __slots__ = ("tool", "call_id", "arguments", "go", "done", "task", "why", "withdrawn", "reported")

    def __init__(self, tool: str, call_id: str, arguments: Any, go: "asyncio.Future[None]", task: Optional["asyncio.Task[Any]"]) -> None:
        self.tool = tool
        self.call_id = call_id
        self.arguments = arguments
        self.go = go
        self.done: Optional[asyncio.Future[Any]] = None
        self.task = task
        self.why: Optional[str] = None  # "timeout" or "closed" once the gate cancelled the run
        self.withdrawn = False
        # Set once the driver handed out this call's outcome (`on_outcome`), or its batch ended.
        self.reported: "asyncio.Future[None]" = go.get_loop().create_future()


class _GateBatch:
    __slots__ = ("pending", "batch", "task")

    def __init__(self, pending: list[_Pending]) -> None:
        self.pending = pending
        self.batch: Optional[_Batch] = None
        self.task: Optional[asyncio.Task[Any]] = None


class Gate:
    """Batches the calls a framework starts itself (see the module doc). `target` is a
    `Policy` (the gate makes and owns a scheduler and driver), a `Scheduler` (its driver, made
    on first use) or a `Driver`. `decide(label, call)`, `execution_timeout` and `abort_grace`
    go to every batch the gate runs (`Driver.run`'s). `on_event` (telemetry, `Driver`'s) goes
    to the driver the gate makes: a `Policy` target, or a `Scheduler` without a driver (a
    driver you pass or that exists already takes it from its own constructor: a ValueError)."""

    def __init__(
        self,
        target: Union[Policy, Scheduler, Driver],
        *,
        decide: Optional[Decide] = None,
        execution_timeout: Optional[float] = None,
        abort_grace: Optional[float] = None,
        on_event: Optional[OnEvent] = None,
    ) -> None:
        if decide is not None and not callable(decide):
            raise TypeError(f"decide must be callable, not {type(decide).__name__}")
        if on_event is not None and not callable(on_event):
            raise TypeError(f"on_event must be callable, not {type(on_event).__name__}")
        # Checked before a driver is made, so a wrong option leaves no scheduler behind.
        self._execution_timeout = _check.number(execution_timeout, "execution_timeout")
        if self._execution_timeout == 0:
            raise ValueError("execution_timeout must be > 0 seconds (or None)")
        self._abort_grace = _check.number(abort_grace, "abort_grace")
        self._owns = False
        if isinstance(target, Driver):
            if on_event is not None:
                raise ValueError("on_event belongs to the driver: pass it to Driver(...)")
            self.driver = target
        elif isinstance(target, Scheduler):
            existing = getattr(target, "_driver", None)
            if on_event is not None and existing is not None and not existing.closed:
                raise ValueError("this scheduler has a driver already: on_event belongs to it (Driver(..., on_event=...))")
            self.driver = Driver.of(target) if on_event is None else Driver(target, on_event=on_event)
        elif isinstance(target, Policy):
            scheduler = Scheduler(target)
            try:
                self.driver = Driver(scheduler, owns_scheduler=True, on_event=on_event)
            except BaseException:
                scheduler.close()
                raise
            self._owns = True
        else:
            raise TypeError(f"target must be a Policy, Scheduler or Driver, not {type(target).__name__}")
        self._decide = decide
        self._arriving: list[_Pending] = []
        self._expected: dict[str, _Pending] = {}  # call id -> a call of an `expect`ed batch, until claimed
        self._batches: set[_GateBatch] = set()
        self._closed = False

    @property
    def scheduler(self) -> Scheduler:
        return self.driver.scheduler

    async def call(self, tool: str, call_id: str, arguments: A, run: Callable[[A], Awaitable[T]]) -> T:
        """Runs `run(arguments)` as the call `call_id` of `tool` once the scheduler releases it,
        in this task, and returns its result. `arguments` (a mapping, its JSON text, or None;
        see `Call.arguments`) make its key when the tool's key is a template, and `decide` sees
        them; arguments that make no key never raise (the call takes the template's own key),
        a value no call can have (bytes, a set) is a TypeError, raised here. Raises
        `CallSettledError` when the scheduler settles the call, `SubmitError` when its batch is
        refused (a call id already live), TimeoutError past `execution_timeout`,
        `DisposedError` after `close()`, and whatever `run` raises."""
        tool = _check.string(tool, "tool")
        call_id = _check.string(call_id, "call_id")
        _arguments.check(arguments, "arguments")
        if not callable(run):
            raise TypeError(f"run must be callable, not {type(run).__name__}")
        if self._closed:
            raise DisposedError("the gate")
        loop = asyncio.get_running_loop()
        p = self._expected.pop(call_id, None)  # its place in a batch `expect` submitted
        if p is not None and p.tool == tool and not p.withdrawn and p.go.get_loop() is loop:
            p.task = asyncio.current_task()
        else:
            if p is not None:
                self._withdraw(p)
            p = _Pending(tool, call_id, arguments, loop.create_future(), asyncio.current_task())
            if not self._arriving:
                loop.call_soon(self._flush)
            self._arriving.append(p)
        try:
            await p.go
        except asyncio.CancelledError:
            self._withdraw(p)
            raise
        while True:
            # Released: run it here, in the caller's task.
            done = p.done
            assert done is not None
            if done.done():
                # An expected call the driver stopped (timeout, cancelled batch) before it was
                # claimed: it ended without running.
                await p.reported
                if p.why == "timeout":
                    raise TimeoutError(f"{call_id} ({tool}) ran past execution_timeout")
                reason = Reason(ReasonKind.CANCELLED)
                raise CallSettledError(call_id, tool, reason, explain_in(self.driver.scheduler.instance, call_id, lower_reason(reason)))
            try:
                value = await run(arguments)
            except asyncio.CancelledError as e:
                if not done.done():
                    done.cancel()
                if p.why is not None and _only_ours(p.task):
                    if p.why == "timeout":
                        raise TimeoutError(f"{call_id} ({tool}) ran past execution_timeout") from e
                    raise DisposedError("the gate") from e
                raise
            except RateLimited as e:
                if done.done():
                    raise
                # Retry in place: the driver puts the entry back in its line and releases it
                # again after the pause; this task waits for that (or raises CallSettledError
                # once the key's retries are spent, or the batch is cancelled).
                p.go = loop.create_future()
                p.done = None
                done.set_exception(e)
                try:
                    await p.go
                except asyncio.CancelledError:
                    self._withdraw(p)
                    raise
                continue
            except BaseException as e:
                if not done.done():
                    done.set_exception(e)
                if isinstance(e, Exception):
                    await p.reported  # its end reached the driver (and its snapshot)
                raise
            if not done.done():
                done.set_result(value)
            await p.reported
            return value

    def expect(self, calls: Sequence[tuple[str, str, Any]]) -> None:
        """Submits `calls` (`(tool, call_id, arguments)`, in written order) as ONE batch now,
        for a framework that sees a model response before it starts its calls: each call then
        runs through `gate.call(tool, call_id, arguments, run)`, which takes its place in that
        batch (in any turn, in any order) instead of arriving. `decide` is asked about every
        call of the batch, and none of it starts before every one is decided (the component's
        rule for a batch). A released call keeps its slot until it is claimed, so a call the
        framework will not run must be given up with `withdraw(call_id)`. Call from the loop
        the calls will run on. Raises `SubmitError` when the batch is refused (a call id
        already live), `DisposedError` after `close()`."""
        if self._closed:
            raise DisposedError("the gate")
        loop = asyncio.get_running_loop()
        pending = []
        for tool, call_id, arguments in calls:
            tool = _check.string(tool, "tool")
            call_id = _check.string(call_id, "call_id")
            _arguments.check(arguments, "arguments")
            pending.append(_Pending(tool, call_id, arguments, loop.create_future(), None))
        if not pending:
            return
        self._begin(pending)
        for p in pending:
            old = self._expected.pop(p.call_id, None)
            if old is not None:
                self._withdraw(old)
            self._expected[p.call_id] = p

    def withdraw(self, call_id: str) -> bool:
        """Gives up an `expect`ed call nobody claimed: queued, it ends without running when
        released (its key moves on); released, it ends now. False when no such call waits."""
        p = self._expected.pop(call_id, None)
        if p is None:
            return False
        self._withdraw(p)
        return True

    def expected(self) -> list[str]:
        """The call ids of `expect`ed calls not claimed or withdrawn yet."""
        return list(self._expected)

    # -- lifetime ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Refuses new calls (`DisposedError`) and cancels every batch in flight: queued calls
        raise `CallSettledError` (cancelled), running runs are cancelled. Closes the driver
        when the gate made it. Closing twice is fine."""
        if self._closed:
            return
        self._closed = True
        for p in self._arriving:
            if not p.go.done():
                p.go.set_exception(DisposedError("the gate"))
        self._arriving = []
        self._expected = {}
        for gb in list(self._batches):
            if gb.task is not None:
                gb.task.cancel()
        if self._owns:
            self.driver.close()

    async def aclose(self) -> None:
        """`close()`, then waits until every batch of the gate ended."""
        tasks = [gb.task for gb in self._batches if gb.task is not None]
        self.close()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> "Gate":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- internals --------------------------------------------------------------------------

    def _flush(self) -> None:
        arriving, self._arriving = self._arriving, []
        pending = [p for p in arriving if not p.go.done()]
        if not pending or self._closed:
            return
        try:
            self._begin(pending)
        except Exception as e:  # SubmitError, DisposedError: the whole batch is refused
            for p in pending:
                if not p.go.done():
                    p.go.set_exception(e)

    def _begin(self, pending: list[_Pending]) -> None:
        """Submits `pending` as one batch and starts driving it (raises when it is refused)."""
        gb = _GateBatch(pending)
        calls = [Call(p.call_id, p.tool, arguments=p.arguments) for p in pending]
        by_id = {p.call_id: p for p in pending}

        async def execute(x: Execution) -> Any:
            return await self._execute(pending[x._index], x)

        def on_outcome(outcome: EntryOutcome, call: Call) -> None:
            p = by_id[call.id]
            if not p.go.done() and outcome.reason is not None:
                b = gb.batch
                if b is not None and outcome.error is not None and outcome.error is b.decide_error:
                    # `decide` failed (the host's bug): that error itself, not a sentence that
                    # would hide it.
                    p.go.set_exception(outcome.error)
                else:
                    p.go.set_exception(CallSettledError(p.call_id, p.tool, outcome.reason, outcome.message))
            if not p.reported.done():
                p.reported.set_result(None)

        gb.batch = self.driver._submit(calls, execute, on_outcome, self._execution_timeout, self._abort_grace)
        self._batches.add(gb)
        gb.task = asyncio.get_running_loop().create_task(self._drive(gb))

    async def _drive(self, gb: _GateBatch) -> None:
        assert gb.batch is not None
        error: Optional[BaseException] = None
        cancelled = False
        try:
            outcomes = await self.driver._drive(gb.batch, self._decide, range(gb.batch.count))
            # Every call had its answer through on_outcome: the batch leaves the snapshot (a
            # persisting driver would otherwise keep and give back every past gate batch).
            self.driver.forget(outcomes)
        except asyncio.CancelledError:  # close(), or every waiter withdrew: the batch was cancelled
            cancelled = True
        except Exception as e:  # decide raised, a refused input, the driver closed
            error = e
        finally:
            self._batches.discard(gb)
            # Every call has its answer by now; one without (a failed batch) gets the error.
            for p in gb.pending:
                if not p.reported.done():
                    p.reported.set_result(None)
                if not p.go.done():
                    if cancelled or error is None:
                        reason = Reason(ReasonKind.CANCELLED)
                        message = explain_in(self.driver.scheduler.instance, p.call_id, lower_reason(reason))
                        p.go.set_exception(CallSettledError(p.call_id, p.tool, reason, message))
                    else:
                        p.go.set_exception(error)
                if p.task is None and p.go.done() and not p.go.cancelled():
                    p.go.exception()  # an expected call nobody claimed: not an unretrieved error

    async def _execute(self, p: _Pending, x: Execution) -> Any:
        """The driver's execution of one call: lets its waiter go and waits for its run's end."""
        if p.withdrawn or p.go.done():
            # Its waiter was cancelled while it was queued: it ends now without running.
            raise asyncio.CancelledError()
        done = p.done = asyncio.get_running_loop().create_future()
        p.go.set_result(None)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            if done.done():
                raise
            # The driver stops this execution: its timeout passed, or its batch was cancelled.
            b = x._batch
            p.why = "timeout" if x._index in b.expired and not b.cancelled else "closed"
            if p.task is not None:
                p.task.cancel()
            else:  # expected, not claimed: it ends without running
                done.cancel()
            try:
                await asyncio.shield(done)
            except BaseException:
                pass
            raise

    def _withdraw(self, p: _Pending) -> None:
        """The task awaiting `p` was cancelled."""
        if p in self._arriving:
            self._arriving.remove(p)
            return
        if p.done is not None:
            # Released in the very turn its waiter was cancelled: it ends without running.
            if not p.done.done():
                p.done.cancel()
            return
        p.withdrawn = True
        for gb in self._batches:
            if p in gb.pending:
                if gb.task is not None and all(q.withdrawn for q in gb.pending):
                    gb.task.cancel()
                break


def _only_ours(task: Optional["asyncio.Task[Any]"]) -> bool:
    """Whether the gate's cancellation is the only one pending on `task` (Python 3.11+ can
    tell; before, the gate's is assumed)."""
    uncancel = getattr(task, "uncancel", None)
    return uncancel is None or uncancel() == 0


def _adapter_gate(
    target: Any,
    *,
    decide: Optional[Decide],
    execution_timeout: Optional[float],
    abort_grace: Optional[float],
    on_event: Optional[OnEvent],
) -> "tuple[Gate, bool]":
    """An adapter's gate, and whether the adapter made it (so closes it): a `Gate` given is used
    as it is (its options are the gate's, refused here), anything else gets a gate made with the
    adapter's options."""
    if isinstance(target, Gate):
        if decide is not None or execution_timeout is not None or abort_grace is not None or on_event is not None:
            raise ValueError("decide, execution_timeout, abort_grace and on_event belong to the gate: pass them to Gate(...)")
        return target, False
    return Gate(target, decide=decide, execution_timeout=execution_timeout, abort_grace=abort_grace, on_event=on_event), True
