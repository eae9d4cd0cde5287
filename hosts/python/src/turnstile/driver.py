"""The asyncio driver: runs batches, starting each execution when the scheduler releases it.

`await run_batch(scheduler, calls, execute)` submits the calls, decides every entry (approve by
default), runs `await execute(execution)` for each released entry as its own task, reports each
end (an exception is a failure), collects what the scheduler settles, and returns every call's
outcome in written order once the batch retires.

One pump per scheduler owns its `step` calls: everything the batches report within one loop
turn (approvals, settlements, questions, ends, cancellations) goes out in ONE `step`, and the
outputs are dispatched to the batches they belong to. Each input is judged on its own, so a
refused input fails only its own batch (`run_batch` raises `RefusedInputError` after cancelling
the batch, so that it frees its keys) and every other input still applies. A batch's state is
dropped when `step` reports it retired; its call ids may then be used again.

Cancelling the task that awaits `run_batch` cancels the batch: parked entries are settled as
cancelled and running executions are cancelled; their ends are reported to the scheduler
before the cancellation propagates. Nothing else may call `step` on a scheduler the driver
runs batches on: the outputs would be lost to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Any, AsyncIterator, Awaitable, Callable, Literal, Optional, Union

from .api import Scheduler
from .types import Call, HostSettle, InputKind, Outputs, Reason, ReasonKind, RefusedInputError

Decision = Literal["approve", "reject", "skip", "fail"]
_HOW: dict[str, HostSettle] = {"reject": HostSettle.REJECTED, "skip": HostSettle.SKIPPED, "fail": HostSettle.FAILED}


class OutcomeKind(str, Enum):
    """How an entry ended (`EntryOutcome.status`)."""

    OK = "ok"
    """Its execution returned (`value`)."""
    FAILED = "failed"
    """Its execution raised (`error`)."""
    SETTLED = "settled"
    """It never ran, or stopped being needed (`reason`): rejected, skipped, failed before
    running, cancelled while parked, stopped after a failed operation, interrupted."""
    CANCELLED = "cancelled"
    """Its execution was cancelled with its batch."""


@dataclass(frozen=True)
class EntryOutcome:
    """How one entry ended."""

    entry: int
    label: str
    status: OutcomeKind
    value: Any = None
    error: Optional[BaseException] = None
    reason: Optional[Reason] = None


@dataclass(frozen=True)
class CallOutcome:
    """One call's outcome: its entries' outcomes in operation order."""

    id: str
    tool: str
    entries: list[EntryOutcome]


@dataclass
class Execution:
    """What `execute` gets: the entry to run (its number and label), its call, and its
    operation index for a fan-out call."""

    entry: int
    label: str
    call: Call
    operation: Optional[int]
    _pump: "_Pump" = field(repr=False)
    _batch: "_Batch" = field(repr=False)

    @contextlib.asynccontextmanager
    async def question(self) -> AsyncIterator[None]:
        """`async with execution.question():` around waiting for an answer; the execution keeps
        its slot. (A declined question is an end: return from `execute`.)"""
        self._pump.queue(InputKind.ASK, self.entry, self._batch)
        try:
            yield
        finally:
            self._pump.queue(InputKind.ANSWER, self.entry, self._batch)


Execute = Callable[[Execution], Awaitable[Any]]


class _Batch:
    def __init__(self, batch: int, first: int, calls: list[Call], execute: Execute) -> None:
        self.batch = batch
        self.first = first
        self.calls = calls
        self.execute = execute
        self.entries: list[tuple[str, Call, Optional[int]]] = [
            (label, c, None if c.operations is None else i) for c in calls for i, label in enumerate(c.labels())
        ]
        self.outcomes: list[Optional[EntryOutcome]] = [None] * len(self.entries)
        self.tasks: dict[int, asyncio.Task[None]] = {}
        # Resolved when the batch retires; an exception when one of its inputs was refused.
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.cancelled = False

    def fail(self, error: BaseException) -> None:
        if not self.finished.done():
            self.finished.set_exception(error)

    def results(self) -> list[CallOutcome]:
        out, i = [], 0
        for c in self.calls:
            n = len(c.labels())
            entries = self.outcomes[i : i + n]
            if any(e is None for e in entries):
                raise RuntimeError(f"batch {self.batch} retired with an entry of {c.id} unanswered")
            out.append(CallOutcome(c.id, c.tool, entries))  # type: ignore[arg-type]
            i += n
        return out


class _Inputs:
    """The inputs of the next `step`, each with the batch it belongs to (for its errors)."""

    def __init__(self) -> None:
        self.lists: dict[InputKind, list[Any]] = {k: [] for k in InputKind}
        self.owners: dict[InputKind, list[_Batch]] = {k: [] for k in InputKind}


class _Pump:
    """Owns one scheduler's `step` calls and dispatches their outputs to batches."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = weakref.ref(scheduler)
        self.owner: dict[int, _Batch] = {}  # entry -> its live batch
        self.batches: dict[int, _Batch] = {}  # batch number -> live batch
        self.pending = _Inputs()
        self.scheduled = False
        self.waiters: list[asyncio.Future[None]] = []

    def add(self, b: _Batch) -> None:
        self.batches[b.batch] = b
        for i in range(len(b.entries)):
            self.owner[b.first + i] = b

    def forget(self, b: _Batch) -> None:
        if self.batches.get(b.batch) is b:
            del self.batches[b.batch]
            for i in range(len(b.entries)):
                self.owner.pop(b.first + i, None)

    def queue(self, kind: InputKind, value: Any, b: _Batch) -> None:
        self.pending.lists[kind].append(value)
        self.pending.owners[kind].append(b)
        if not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def next_flush(self) -> Optional[asyncio.Future[None]]:
        """A future resolved after the step that carries what is queued now (None when nothing
        is queued)."""
        if not self.scheduled:
            return None
        f = asyncio.get_running_loop().create_future()
        self.waiters.append(f)
        return f

    def flush(self) -> None:
        q, self.pending, self.scheduled = self.pending, _Inputs(), False
        waiters, self.waiters = self.waiters, []
        try:
            scheduler = self._scheduler()
            if scheduler is None:
                return
            lists = q.lists
            try:
                out = scheduler.step(
                    approve=lists[InputKind.APPROVE],
                    settle=lists[InputKind.SETTLE],
                    ask=lists[InputKind.ASK],
                    answer=lists[InputKind.ANSWER],
                    ok=lists[InputKind.OK],
                    failed=lists[InputKind.FAILED],
                    cancel=lists[InputKind.CANCEL],
                )
                self.dispatch(q, out)
            except Exception as e:  # the instance is unusable (a trap): every batch fails
                for b in list(self.batches.values()):
                    b.fail(e)
        finally:
            for f in waiters:
                if not f.done():
                    f.set_result(None)

    def dispatch(self, q: _Inputs, out: Outputs) -> None:
        refused = set()
        for r in out.errors:
            refused.add((r.input, r.index))
            q.owners[r.input][r.index].fail(RefusedInputError(r))
        for i, (entry, how) in enumerate(q.lists[InputKind.SETTLE]):
            if (InputKind.SETTLE, i) not in refused:
                self.record(q.owners[InputKind.SETTLE][i], entry, OutcomeKind.SETTLED, reason=Reason(ReasonKind(how.value)))
        for s in out.settle:
            b = self.owner.get(s.entry)
            if b is not None:
                self.record(b, s.entry, OutcomeKind.SETTLED, reason=s.reason)
        for entry in out.start:
            b = self.owner.get(entry)
            if b is not None:
                self.start(b, entry)
        for n in out.retired:
            b = self.batches.get(n)
            if b is not None:
                self.forget(b)
                if not b.finished.done():
                    b.finished.set_result(None)

    def record(self, b: _Batch, entry: int, status: OutcomeKind, **kw: Any) -> None:
        i = entry - b.first
        b.outcomes[i] = EntryOutcome(entry, b.entries[i][0], status, **kw)

    def start(self, b: _Batch, entry: int) -> None:
        if b.cancelled:
            # Released in the step that also carried its batch's cancellation: it never runs.
            self.ended(b, entry, OutcomeKind.CANCELLED)
            return
        label, call, operation = b.entries[entry - b.first]
        x = Execution(entry, label, call, operation, self, b)
        task = asyncio.ensure_future(self.run(b, x))
        b.tasks[entry] = task
        task.add_done_callback(partial(self.task_done, b, entry))

    async def run(self, b: _Batch, x: Execution) -> None:
        try:
            value = await b.execute(x)
        except asyncio.CancelledError:
            self.ended(b, x.entry, OutcomeKind.CANCELLED)
        except Exception as e:
            self.ended(b, x.entry, OutcomeKind.FAILED, error=e)
        except BaseException as e:  # KeyboardInterrupt, SystemExit: report, then let it go
            self.ended(b, x.entry, OutcomeKind.FAILED, error=e)
            raise
        else:
            self.ended(b, x.entry, OutcomeKind.OK, value=value)

    def task_done(self, b: _Batch, entry: int, _task: "asyncio.Task[None]") -> None:
        b.tasks.pop(entry, None)
        if b.outcomes[entry - b.first] is None:  # cancelled before it began to run
            self.ended(b, entry, OutcomeKind.CANCELLED)

    def ended(self, b: _Batch, entry: int, status: OutcomeKind, **kw: Any) -> None:
        self.record(b, entry, status, **kw)
        self.queue(InputKind.OK if status is OutcomeKind.OK else InputKind.FAILED, entry, b)

    def cancel(self, b: _Batch) -> None:
        if b.cancelled:
            return
        b.cancelled = True
        self.queue(InputKind.CANCEL, b.batch, b)
        for task in list(b.tasks.values()):
            task.cancel()

    async def wind_down(self, b: _Batch) -> None:
        """After `cancel`: waits until every running execution of `b` ended and its end went
        out in a step; then drops the batch's state."""
        while b.tasks:
            await asyncio.gather(*b.tasks.values(), return_exceptions=True)
        flushed = self.next_flush()
        if flushed is not None:
            await flushed
        self.forget(b)


_pumps: "weakref.WeakKeyDictionary[Scheduler, _Pump]" = weakref.WeakKeyDictionary()


async def run_batch(
    scheduler: Scheduler,
    calls: list[Call],
    execute: Execute,
    decide: Optional[Callable[[str, Call], Union[Decision, Awaitable[Decision]]]] = None,
) -> list[CallOutcome]:
    """Runs one batch to the end and returns each call's outcome in written order.

    `decide(label, call)` is asked for each entry in written order (default: approve all) and
    may be async (a prompt). Raises `SubmitError` when the batch is refused, and
    `RefusedInputError` when one of its inputs is refused (the batch is cancelled first)."""
    pump = _pumps.get(scheduler)
    if pump is None:
        pump = _pumps[scheduler] = _Pump(scheduler)
    calls = list(calls)
    submitted = scheduler.submit(calls)
    b = _Batch(submitted.batch, submitted.first, calls, execute)
    pump.add(b)
    try:
        if decide is None:
            for entry in submitted.entries:
                pump.queue(InputKind.APPROVE, entry, b)
        else:
            for i, (label, call, _) in enumerate(b.entries):
                if b.finished.done():
                    break
                decision: Any = decide(label, call)
                if asyncio.iscoroutine(decision) or isinstance(decision, asyncio.Future):
                    decision = await decision
                entry = submitted.first + i
                if decision == "approve":
                    pump.queue(InputKind.APPROVE, entry, b)
                elif decision in _HOW:
                    pump.queue(InputKind.SETTLE, (entry, _HOW[decision]), b)
                else:
                    raise ValueError(f"decide returned {decision!r} for {label}: approve, reject, skip or fail")
        await asyncio.shield(b.finished)
    except BaseException:
        pump.cancel(b)
        # Let every running execution report its end before the error propagates (a second
        # cancellation stops the wait).
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(pump.wind_down(b))
        if not b.finished.done():
            b.finished.cancel()  # a later refusal of this batch's inputs has no one to tell
        raise
    return b.results()
