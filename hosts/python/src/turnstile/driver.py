"""The asyncio driver: runs a batch, starting each execution when the scheduler releases it.

`run_batch(scheduler, calls, execute)` submits the calls, decides every entry (approve by
default), runs `await execute(execution)` for each released entry as its own task, reports each
end (an exception is a failure), collects what the scheduler settles, and returns every call's
outcome in written order. Cancelling the task that awaits `run_batch` cancels the batch: parked
entries are settled as cancelled and running executions are cancelled; their ends are still
reported to the scheduler before the cancellation propagates. Several `run_batch` calls may share
one scheduler at once: one pump per scheduler dispatches releases to their batch.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Literal, Optional, Union
from weakref import WeakKeyDictionary

from .api import Scheduler, entry_labels
from .types import Call, Reason

Decision = Literal["approve", "reject", "skip", "fail"]


@dataclass
class Execution:
    """What `execute` gets: the entry to run, its call, its operation index if any."""

    entry: str
    call: Call
    operation: Optional[int]
    _scheduler: Scheduler

    @contextlib.asynccontextmanager
    async def question(self):
        """`async with execution.question():` around waiting for an answer; the slot is kept."""
        self._scheduler.begin_question(self.entry)
        try:
            yield
        finally:
            self._scheduler.end_question(self.entry)


@dataclass(frozen=True)
class EntryOutcome:
    """How one entry ended: `status` is ok, failed (with `error`), settled (with `reason`), or
    cancelled (its execution was cancelled with the batch)."""

    entry: str
    status: Literal["ok", "failed", "settled", "cancelled"]
    value: Any = None
    error: Optional[BaseException] = None
    reason: Optional[Reason] = None


@dataclass(frozen=True)
class CallOutcome:
    id: str
    tool: str
    entries: list[EntryOutcome]


class _Batch:
    def __init__(self, batch: int, first: int, calls: list[Call], execute: Callable[[Execution], Awaitable[Any]]) -> None:
        self.batch = batch
        self.first = first
        self.calls = calls
        self.execute = execute
        self.labels = [label for c in calls for label in entry_labels(c)]
        self.call_of = {
            label: (c, None if c.operations is None else i) for c in calls for i, label in enumerate(entry_labels(c))
        }
        self.outcomes: dict[str, EntryOutcome] = {}
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self.done = asyncio.get_running_loop().create_future()
        self.cancelled = False

    def record(self, outcome: EntryOutcome) -> None:
        self.outcomes[outcome.entry] = outcome
        if len(self.outcomes) == len(self.labels) and not self.done.done():
            self.done.set_result(None)


class _Pump:
    """Owns one scheduler's `next_releases` queue and dispatches it to batches."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.by_id: dict[int, _Batch] = {}
        # Ends that arrived in this loop iteration, reported together in one crossing.
        self.ends: list[tuple[_Batch, int, EntryOutcome, str]] = []

    def pump(self) -> None:
        self.dispatch(self.scheduler.next_release_ids())

    def dispatch(self, releases: tuple[list[int], list[tuple[int, Reason]]]) -> None:
        start, settle = releases
        for i, reason in settle:
            b = self.by_id.get(i)
            if b:
                b.record(EntryOutcome(b.labels[i - b.first], "settled", reason=reason))
        for i in start:
            b = self.by_id.get(i)
            if b:
                self.start(b, b.labels[i - b.first], i)

    def start(self, b: _Batch, entry: str, id: int) -> None:
        call, operation = b.call_of[entry]
        execution = Execution(entry, call, operation, self.scheduler)
        task = asyncio.ensure_future(b.execute(execution))
        b.tasks[entry] = task
        task.add_done_callback(lambda t: self.ended(b, entry, id, t))

    def ended(self, b: _Batch, entry: str, id: int, task: asyncio.Task[Any]) -> None:
        b.tasks.pop(entry, None)
        if task.cancelled():
            outcome, how = EntryOutcome(entry, "cancelled"), "failed"
        elif task.exception() is not None:
            outcome, how = EntryOutcome(entry, "failed", error=task.exception()), "failed"
        else:
            outcome, how = EntryOutcome(entry, "ok", value=task.result()), "ok"
        self.ends.append((b, id, outcome, how))
        if len(self.ends) == 1:
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        ends, self.ends = self.ends, []
        releases = self.scheduler.on_ended_next(
            [i for _, i, _, how in ends if how == "ok"],
            [i for _, i, _, how in ends if how != "ok"],
        )
        for b, _, outcome, _ in ends:
            b.record(outcome)
        self.dispatch(releases)


_pumps: "WeakKeyDictionary[Scheduler, _Pump]" = WeakKeyDictionary()


async def run_batch(
    scheduler: Scheduler,
    calls: list[Call],
    execute: Callable[[Execution], Awaitable[Any]],
    decide: Optional[Callable[[str, Call], Union[Decision, Awaitable[Decision]]]] = None,
) -> list[CallOutcome]:
    """Runs one batch to the end and returns each call's outcome in written order."""
    pump = _pumps.get(scheduler)
    if pump is None:
        pump = _Pump(scheduler)
        _pumps[scheduler] = pump
    batch_id = scheduler.submit_batch(calls)
    first, _ = scheduler.batch_entries(batch_id)
    b = _Batch(batch_id, first, list(calls), execute)
    for i in range(len(b.labels)):
        pump.by_id[first + i] = b
    try:
        if decide is None:
            # Everything approved: one crossing for the whole batch.
            pump.dispatch(scheduler.approve_next(range(first, first + len(b.labels))))
        for c in calls if decide is not None else []:
            for label in entry_labels(c):
                decision: Any = decide(label, c) if decide else "approve"
                if asyncio.iscoroutine(decision) or isinstance(decision, asyncio.Future):
                    decision = await decision
                if decision == "approve":
                    scheduler.approve(label)
                else:
                    how = {"reject": "rejected", "skip": "skipped", "fail": "failed"}[decision]
                    scheduler.settle(label, how)  # type: ignore[arg-type]
                    b.record(EntryOutcome(label, "settled", reason=Reason(how)))  # type: ignore[arg-type]
                pump.pump()
        await asyncio.shield(b.done)
    except asyncio.CancelledError:
        _cancel(pump, b)
        if pump.ends:
            pump.flush()
        # Let every running execution report its end before the cancellation propagates.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(b.done)
        raise
    finally:
        for i in range(len(b.labels)):
            pump.by_id.pop(first + i, None)
    return [CallOutcome(c.id, c.tool, [b.outcomes[l] for l in entry_labels(c)]) for c in calls]


def _cancel(pump: _Pump, b: _Batch) -> None:
    if b.cancelled:
        return
    b.cancelled = True
    pump.scheduler.cancel_batch(b.batch)
    for task in list(b.tasks.values()):
        task.cancel()
    pump.pump()
