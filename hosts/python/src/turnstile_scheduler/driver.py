"""The asyncio driver: runs batches on one scheduler, starting each execution when the
scheduler releases it.

```python
with Driver(Scheduler(policy)) as driver:
    outcomes = await driver.run(calls, execute)                 # one model response
```

`run` submits the calls, asks `decide(label, call)` about every entry (approve by default),
calls `execute(execution)` for each released entry and runs what it returns as its own task,
reports each end (returning is ok; raising is failed), collects what the scheduler settles (each
with the component's sentence for the model, `EntryOutcome.message`), and returns every call's
outcome in written order once the batch retired. A call's `arguments` (`Call.arguments`) make
its key when its tool's key is a template (`"fs:{path}"`), and reach `decide` and `execute`
(`execution.call.arguments`) unchanged. Any number of `run`s may
be in flight at once on one driver. This page is hosts/DRIVERS.md for Python: the same
contract, names and outcomes as the JS driver.

Telemetry. `Driver(scheduler, on_event=report)`: `report(event)` gets the driver's facts as
they happen (`turnstile_scheduler.events`): `WaitEvent` (an approved entry that did not start
at once, or whose wait changed kind or key; the wait and its `why` are the component's),
`StartEvent` (with `waited_ms` since approval, or since a rate-limited end), `EndEvent`
(ok, failed, rate-limited, cancelled) and `SettledEvent`; each with the entry's label, tool,
batch, keys and `at_ms` (`Driver.now()`). It is called synchronously after each step's
actions were applied (after `on_outcome` and the starts); what it raises is ignored. Without
it the driver does none of this work. `turnstile_scheduler.otel.otel_events()` makes one that
records OpenTelemetry spans and metrics. `Driver.inspect()` shows every live batch at any time.

Persistence. `Driver(scheduler, persist=save)`: `save(text)` (sync or async) gets the
snapshot's JSON text (`_snapshot.py`, byte for byte the JS package's) after a batch's
submission, after a step that starts executions (before they start), and after a step that
took an end, a settlement, a retirement, a 429 or a cancellation (before `on_outcome` or a
returned `run` hands the outcome out); one at a time, inputs meanwhile wait for the next step.
A retired batch stays in the snapshot until `forget(outcomes)`. `Driver.resume(policy, text,
execute=..., started=...)` gives back `Resumed(driver, batches, unrestored)`: the retired
batches first (their saved outcomes reported again), then the live ones, as tasks. A persist
that raises closes the driver: every live batch raises `PersistError` at once.

One driver per scheduler owns its `step` calls: everything the batches report within one loop
turn goes out in ONE `step`, and the outputs are dispatched to the batches they belong to. Each
input is judged on its own, so a refused input fails only its own batch. Nothing else may call
`step` on that scheduler (the outputs would be lost to the driver).

How a batch ends badly, and what that costs (never another batch, never a slot):

- `decide` raises or returns something other than "approve", "reject", "skip" or "fail": every
  undecided entry is settled as failed, the batch is cancelled (nothing of it runs), and `run`
  raises that error once its running executions ended.
- `close()`, or a `persist` that raised: every live `run` raises `DisposedError` (or
  `PersistError`) at once, running executions' tasks are cancelled, and nothing more is
  reported.
- `execute` raises instead of returning an awaitable, or returns something not awaitable: that
  entry failed (`error` says why); its slot is freed at once.
- One of the batch's inputs is refused (a driver bug): the batch is cancelled and `run` raises
  `RefusedInputError`.
- The task awaiting `run` is cancelled: the batch is cancelled (parked entries are settled as
  cancelled, running executions' tasks are cancelled) and `run` waits for their ends to reach the
  scheduler before the cancellation propagates (a second cancellation stops the wait; the ends
  are still reported when they come).

An execution that ignores cancellation (catches CancelledError and goes on, or waits on a
thread) keeps its key's slot until it really ends: the scheduler cannot know it stopped. It is
visible in `Driver.running()` (`cancel_requested`) and in `Scheduler.inspect` (running, and
named in `KeyFull.running` of the entries waiting for its key).

Deadlines are the component's, not the driver's: the driver keeps no timer of its own for them.
`run`'s `execution_timeout` and `abort_grace` (seconds) go to the component with its batch (its
`limits`, in milliseconds), and the component says when (on the `now` of each step, waking the
driver through `wake_at`). An `abort` action cancels the execution's task: for its deadline
(an execution that ends by that cancellation failed with TimeoutError), or because its batch
was cancelled (cancelling a batch asks the component, whose `abort` actions then cancel the
running tasks). With `abort_grace`, an execution that has not ended that long after its abort
is given up by the component: it is settled TIMED_OUT with the component's sentence, its slot
and permit are freed, and whatever it does later is ignored. Without it, an aborted execution
keeps its slot until it ends. A question open at an abort is closed with it (the component
hears no more questions from an aborted execution).

Time and rate limits. The driver gives the scheduler its clock on every step: `now` is the
event loop's `loop.time()` in whole milliseconds (`Driver.now()`), never less than before.
When a step says something waits on time (a key's `delay`, a paused key, a retry), the driver
keeps ONE timer (`loop.call_at`) for the step's `wake_at`, which steps again with only `now`;
a later step replaces or cancels it, and `close()` cancels it. An execution signals a rate
limit by raising `RateLimited(retry_after)` (seconds; `RateLimited.from_header` reads a
`Retry-After` header): its slot is freed, its key pauses until then, and `execute` is called
again for the same entry when the scheduler releases it (in written order on its key). Past
the key's `retries` the entry is settled with `Reason(ReasonKind.RATE_LIMITED, retries=n)`
(its `EntryOutcome.error` is the last `RateLimited`). `await driver.pause(key, seconds)`
pauses a key from the host.

Shared keys (`shared = true`: one limit across processes, SHARED.md). The driver needs
`shared_keys=SharedKeys(store)` (a ValueError at construction names the keys otherwise). An
entry the scheduler lists in `acquire` gets a task that awaits `keys.acquire(key, limit=...,
delay_ms=...)` on the terms of the scheduler's `acquire` action (the key its arguments made,
the key's limit, the store's largest for an unbounded key, and its delay); the permit is reported `granted` and the
entry starts in written order, and an error of the store is reported `denied`: the entry is
settled failed before it started, with the store's error as `EntryOutcome.error`. An entry in
`release` gets its permit released (its execution started) or abandoned (it never did), or its
request withdrawn (the task is cancelled). A permit whose lease is lost (`permit.lost`)
cancels its execution, which then failed with the store's error. `RateLimited` on a shared key
also pauses it in the store. Whatever ends a batch (cancellation, `close()`, a trap), what it
still holds at the store is given back; `settled_shared()` waits for those calls. The driver
never closes the keys or the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect as _inspect
import math
import weakref
from types import CoroutineType as _CoroutineType
from typing import Any, AsyncIterator, Awaitable, Callable, Literal, NamedTuple, Optional, Sequence, Union

from wasmtime.component import Variant

from . import _check, _snapshot
from .config import Policy
from .events import DriverEvent, EndEvent, OnEvent, SettledEvent, StartEvent, WaitEvent, wait_key
from .errors import DisposedError, PersistError, RateLimited, RefusedInputError, RestoredError, SubmitError, TurnstileError
from .outcomes import CallOutcome, EntryOutcome, OutcomeStatus, Running
from .scheduler import Scheduler, _limits, build_calls, explain_in, lower_reason
from .shared import DELAY_MS_MAX, LIMIT_MAX
from .shared.keys import SharedKeys, SharedPermit
from .types import (
    AbortCause,
    Call,
    EntryState,
    HostSettle,
    InputErrorCode,
    InputKind,
    RefusedInput,
    Outcome,
    RateWindow,
    AbortedRun,
    LiveBatch,
    Reason,
    ReasonKind,
    Saved,
    SavedBatch,
    SavedState,
    Started,
    SubmitErrorCode,
    Unrestored,
)

Decision = Literal["approve", "reject", "skip", "fail"]
Decide = Callable[[str, Call], Union[Decision, Awaitable[Decision]]]
OnOutcome = Callable[[EntryOutcome, Call], Any]
Persist = Callable[[str], Any]
_HOW: dict[str, HostSettle] = {"reject": HostSettle.REJECTED, "skip": HostSettle.SKIPPED, "fail": HostSettle.FAILED}
_HOW_WIT: dict[str, str] = {"reject": "rejected", "skip": "skipped", "fail": "failed"}

OK, FAILED, CANCELLED, SETTLED = OutcomeStatus.OK, OutcomeStatus.FAILED, OutcomeStatus.CANCELLED, OutcomeStatus.SETTLED
_REASONS: dict[str, Reason] = {k.value: Reason(k) for k in ReasonKind if k not in (ReasonKind.STOPPED, ReasonKind.RATE_LIMITED, ReasonKind.TIMED_OUT)}
_CANCELLED_REASON = _REASONS["cancelled"]
# The same reasons as WIT variants, for `explain`.
_REASONS_WIT: dict[str, Variant] = {k: Variant(k) for k in _REASONS}
_CANCELLED_WIT = _REASONS_WIT["cancelled"]

# ---------------------------------------------------------------------------------------------
# What `execute` gets


class Execution:
    """What `execute` gets: the entry to run (its number and label), its call, and its
    operation index for a fan-out call (None for a plain call)."""

    __slots__ = ("entry", "label", "call", "operation", "_batch", "_index")

    def __init__(self, entry: int, label: str, call: Call, operation: Optional[int], batch: "_Batch", index: int) -> None:
        self.entry = entry
        self.label = label
        self.call = call
        self.operation = operation
        self._batch = batch
        self._index = index

    def __repr__(self) -> str:
        return f"Execution(entry={self.entry}, label={self.label!r}, tool={self.call.tool!r})"

    @contextlib.asynccontextmanager
    async def question(self) -> AsyncIterator[None]:
        """`async with execution.question():` around waiting for an answer (the user is asked
        something); the execution keeps its slot. A declined question is an end: return from
        `execute`. Overlapping questions are one wait for the scheduler (asked at the first,
        answered at the last). A question still open when the execution ends is closed with
        it."""
        b, i = self._batch, self._index
        if b.outcomes[i] is not None or i not in b.tasks:
            raise RuntimeError(f"{self.label}: the execution has ended; it cannot ask")
        if i in b.aborted:  # its abort closed every question, as far as the scheduler knows
            yield
            return
        b.asking[i] += 1
        if b.asking[i] == 1:
            b.driver._queue(_ASK, self.entry, b)
        try:
            yield
        finally:
            if b.asking[i] > 0:  # else its end or its abort closed it
                b.asking[i] -= 1
                if b.asking[i] == 0:
                    b.driver._queue(_ANSWER, self.entry, b)


Execute = Callable[[Execution], Awaitable[Any]]

# ---------------------------------------------------------------------------------------------
# A batch in flight


class _Batch:
    __slots__ = (
        "driver", "batch", "first", "calls", "labels", "call_of", "call_index", "call_starts", "ops", "execute", "outcomes",
        "tasks", "asking", "expired", "finished", "cancelled", "failed", "count", "since", "aborted", "aborted_at", "given_up",
        "begun", "on_outcome", "execution_timeout", "final", "gone", "limited", "acquiring", "permits", "permit_used", "shared_keys",
        "denied_errors", "lost", "watchers", "tele", "decide_error",
    )

    def __init__(
        self, driver: "Driver", batch: int, first: int, calls: list[Call], execute: Execute,
        on_outcome: Optional[OnOutcome] = None, execution_timeout: Optional[float] = None,
    ) -> None:
        self.driver = driver
        self.batch = batch
        self.first = first
        self.calls = calls
        labels: list[str] = []
        call_of: list[Call] = []
        call_index: list[int] = []
        call_starts: list[int] = []
        ops: list[Optional[int]] = []
        for ci, c in enumerate(calls):
            call_starts.append(len(labels))
            if c.operations is None:
                labels.append(c.id)
                call_of.append(c)
                call_index.append(ci)
                ops.append(None)
            else:
                for i in range(c.operations):
                    labels.append(f"{c.id}#{i}")
                    call_of.append(c)
                    call_index.append(ci)
                    ops.append(i)
        self.labels = labels
        self.call_of = call_of
        self.call_index = call_index
        self.call_starts = call_starts
        self.ops = ops
        self.on_outcome = on_outcome
        self.execution_timeout = execution_timeout
        # Its outcomes once it retired (what `run` returns, and `forget` takes back).
        self.final: Optional[list[CallOutcome]] = None
        self.failed = False
        self.count = n = len(labels)
        self.execute = execute
        self.outcomes: list[Optional[EntryOutcome]] = [None] * n
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.since: dict[int, float] = {}
        self.asking = [0] * n  # questions open, by entry
        # Entries the component aborted (for their deadline: also `expired`), and those it gave
        # up on after their abort grace (their task's end is ignored).
        self.expired: set[int] = set()
        self.aborted: set[int] = set()
        self.aborted_at: dict[int, float] = {}
        self.given_up: set[int] = set()
        self.begun: set[int] = set()
        # The last RateLimited each entry's execution raised (kept on its outcome if it is
        # settled rate-limited).
        self.limited: dict[int, RateLimited] = {}
        # Shared keys: the task acquiring each entry's permit, the permit once granted (and
        # whether an execution used it), the entry's shared key, the store error that denied
        # it, the error that lost a running entry's permit, and the task watching for that.
        self.acquiring: dict[int, asyncio.Task[None]] = {}
        self.permits: dict[int, Any] = {}
        self.permit_used: set[int] = set()
        self.shared_keys: dict[int, str] = {}
        self.denied_errors: dict[int, BaseException] = {}
        self.lost: dict[int, BaseException] = {}
        self.watchers: dict[int, asyncio.Task[None]] = {}
        # Resolved when the batch retires; an exception when it must fail (refused input, trap).
        self.finished: asyncio.Future[None] = driver._loop.create_future()  # type: ignore[union-attr]
        self.cancelled = False
        # Resolved when it left the driver (retired and handed out, or the driver was closed).
        self.gone: asyncio.Future[None] = driver._loop.create_future()  # type: ignore[union-attr]
        # What `on_event` needs (None without it): see `_Tele`.
        self.tele: Optional[_Tele] = None
        # What `decide` raised (or the error for what it answered), once it failed.
        self.decide_error: Optional[BaseException] = None

    def leave(self) -> None:
        if not self.gone.done():
            self.gone.set_result(None)

    def fail(self, error: BaseException) -> None:
        if not self.finished.done():
            self.failed = True
            self.finished.set_exception(error)
            self.driver._cancel(self)

    def results(self) -> list[CallOutcome]:
        outcomes = self.outcomes
        for o in outcomes:
            if o is None:  # identity, not ==: an outcome's value may compare equal to anything
                raise RuntimeError(f"batch {self.batch} retired with an entry without an outcome")
        out, i = [], 0
        for c in self.calls:
            if c.operations is None:
                out.append(CallOutcome(c.id, c.tool, [outcomes[i]]))  # type: ignore[list-item]
                i += 1
            else:
                n = c.operations
                out.append(CallOutcome(c.id, c.tool, outcomes[i : i + n]))  # type: ignore[arg-type]
                i += n
        return out


class _Tele:
    """A batch's facts for `on_event`: each entry's keys (the component's, read once at
    submission), when it was approved (or its rate-limited end) and when its execution started
    (driver clock, ms), the entries approved and not yet started or settled, and the last wait
    reported for each (and its kind and key, to see a change)."""

    __slots__ = ("keys", "approved", "started", "pending", "last", "sig")

    def __init__(self, keys: list[tuple[str, ...]]) -> None:
        self.keys = keys
        self.approved: dict[int, int] = {}
        self.started: dict[int, int] = {}
        self.pending: set[int] = set()
        self.last: dict[int, Any] = {}
        self.sig: dict[int, tuple[type, Optional[str]]] = {}


_END_STATUS = {OutcomeStatus.OK: "ok", OutcomeStatus.FAILED: "failed", OutcomeStatus.CANCELLED: "cancelled", OutcomeStatus.SETTLED: "cancelled"}


class _Inputs:
    """The inputs of the next `step`, each with the batch it belongs to (for its refusals)."""

    __slots__ = ("lists", "owners")

    def __init__(self) -> None:
        self.lists: list[list[Any]] = [[] for _ in _KINDS]
        # A batch for each input; for a pause, the future `Driver.pause` awaits.
        self.owners: list[list[Any]] = [[] for _ in _KINDS]


_KINDS = list(InputKind)
_KIND_INDEX = {k.value: i for i, k in enumerate(_KINDS)}  # by WIT name
_APPROVE, _SETTLE, _ASK, _ANSWER, _OK, _FAILED, _CANCEL, _NOW, _RETRY, _PAUSE, _GRANTED, _DENIED, _LIFT_PAUSE = range(13)
# The inputs that change the saved state (a question's and a pause's do not).
_CHANGES = (_APPROVE, _SETTLE, _OK, _FAILED, _RETRY, _CANCEL, _GRANTED, _DENIED)
_U64_MAX = 2**64 - 1
_U32_MAX = 2**32 - 1

# ---------------------------------------------------------------------------------------------
# The driver


class Resumed(NamedTuple):
    """What `Driver.resume` gives back: the driver, every saved batch as a task (retired ones
    first, returning their saved outcomes at once, then live ones, in batch order), and the
    calls the scheduler could not restore."""

    driver: "Driver"
    batches: "list[asyncio.Task[list[CallOutcome]]]"
    unrestored: list[Unrestored]


class Driver:
    """Runs batches on one scheduler (see the module doc). `Driver(scheduler)` drives a
    scheduler you own; `Driver.resume(policy, snapshot, ...)` makes the scheduler and owns it.
    `persist(text)` (sync or async) is where the driver saves its snapshot (hosts/DRIVERS.md,
    "Persistence"); `on_event(event)` gets its telemetry events (module doc, "Telemetry").
    `close()` (or `with` / `async with`) cancels every batch in flight and
    refuses new ones; it closes the scheduler when the driver owns it. A driver dropped
    without `close()` is closed by its finalizer."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        shared_keys: Optional[SharedKeys] = None,
        persist: Optional[Persist] = None,
        owns_scheduler: bool = False,
        on_event: Optional[OnEvent] = None,
    ) -> None:
        if not isinstance(scheduler, Scheduler):
            raise TypeError(f"scheduler must be a Scheduler, not {type(scheduler).__name__}")
        if shared_keys is not None and not isinstance(shared_keys, SharedKeys):
            raise TypeError(f"shared_keys must be a SharedKeys, not {type(shared_keys).__name__}")
        if persist is not None:
            _callable(persist, "persist")
        if on_event is not None:
            _callable(on_event, "on_event")
        shared_tools = dict(getattr(scheduler, "_shared_tools", {}))
        if shared_tools and shared_keys is None:
            keys = sorted({c.key for t in shared_tools.values() for c in t.concurrency if c.shared})
            raise ValueError(
                f"the policy declares shared keys ({', '.join(repr(k) for k in keys)}: tools "
                f"{', '.join(sorted(shared_tools))}): give the driver shared_keys=SharedKeys(store) "
                "(see SHARED.md)"
            )
        _check.boolean(owns_scheduler, "owns_scheduler")
        scheduler._live()
        if getattr(scheduler, "_driver", None) is not None:
            raise ValueError("this scheduler already has a driver: one driver per scheduler owns its steps")
        # The scheduler keeps its driver (a cycle the collector frees with both), so that
        # `Driver.of` finds it and a second driver is refused.
        scheduler._driver = self
        self.scheduler = scheduler
        self._step = scheduler._step
        self._resource = scheduler._resource
        self._owner: dict[int, _Batch] = {}  # entry -> its live batch
        self._batches: dict[int, _Batch] = {}  # batch number -> live batch
        self._pending = _Inputs()
        self._scheduled = False
        self._waiters: list[asyncio.Future[None]] = []
        self._closed = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._clock = 0  # the last `now` given (milliseconds): never goes back
        self._wake: Optional[asyncio.TimerHandle] = None  # the one timer, for `wake_at`
        self._wake_at: Optional[int] = None
        # The backstop closes an owned scheduler through its own finalizer (holding the
        # scheduler itself here would keep both alive forever).
        self._finalizer = weakref.finalize(self, _finalize, scheduler._finalizer if owns_scheduler else None)
        self._owns = owns_scheduler
        self.shared_keys = shared_keys
        # Give-backs to the store in flight (`__aexit__` waits for them).
        self._giving: set[asyncio.Task[Any]] = set()
        # Persistence: `persist`, whether a call of it is under way (no step meanwhile), whether
        # the next step persists whatever it does (a submission, a `forget`), the retired batches
        # not forgotten (outcomes, text), and a failed persist (the driver is broken).
        self._persist = persist
        self._persisting = False
        self._dirty = False
        self._retired: list[tuple[list[CallOutcome], str]] = []
        self._broken = False
        # Tasks the driver starts and nobody awaits (a persist under way, the close after the
        # last batches wind down): held here until done, since the loop keeps only weak
        # references to tasks and one could be collected before it finished.
        self._background: set[asyncio.Future[Any]] = set()
        # What the step under way hands the host once its snapshot is persisted: outcomes for
        # `on_outcome` (batch, offset), entries to start, and retired batches to resolve.
        self._reports: list[tuple[_Batch, int]] = []
        self._starts: list[tuple[_Batch, int]] = []
        self._retiring: list[_Batch] = []
        # Telemetry (`on_event`; module turnstile_scheduler.events): the events of the step
        # under way, the batches it touched (their waits are compared after it), its `now`.
        self._on_event = on_event
        self._events: list[DriverEvent] = []
        self._touched: dict[int, _Batch] = {}
        self._step_now = 0

    @classmethod
    def resume(
        cls,
        policy: Policy,
        snapshot: Union[str, SavedState],
        *,
        execute: Execute,
        started: Started,
        decide: Optional[Decide] = None,
        on_outcome: Optional[OnOutcome] = None,
        shared_keys: Optional[SharedKeys] = None,
        persist: Optional[Persist] = None,
        arguments_of: Optional[Callable[[Any], Any]] = None,
        on_event: Optional[OnEvent] = None,
    ) -> Resumed:
        """Resumes a snapshot (the text `persist` was given, or a `SavedState` without values)
        under a new driver, which owns its scheduler; call it inside a running event loop.
        Retired batches not forgotten come back as tasks that report their saved outcomes to
        `on_outcome` and return them (they stay saved until `forget`); each live batch runs
        again next to new ones, its ended entries keeping their saved values (errors as
        `RestoredError`), its pending entries decided and executed like a new batch's;
        `started` says what becomes of an entry that was running ("run-again", or "interrupt":
        settled interrupted). A call keeps the key its arguments made; its arguments are not
        saved: `arguments_of(saved_call)` gives each restored call's `arguments` back. A
        malformed snapshot is a TypeError / ValueError naming the field."""
        loop = asyncio.get_running_loop()
        _callable(execute, "execute")
        for f, what in ((decide, "decide"), (on_outcome, "on_outcome"), (arguments_of, "arguments_of")):
            if f is not None:
                _callable(f, what)
        saved = _snapshot.read(snapshot)
        scheduler, unrestored = Scheduler.resume(policy, saved.state, started=started)
        try:
            args = None if arguments_of is None else [[arguments_of(c) for c in b.calls] for b in saved.state.batches]
            driver = cls(scheduler, owns_scheduler=True, shared_keys=shared_keys, persist=persist, on_event=on_event)
        except BaseException:
            scheduler.close()
            raise
        driver._loop = loop
        batches: list[asyncio.Task[list[CallOutcome]]] = []
        for number, outcomes in saved.retired:
            if persist is not None:
                driver._retired.append((outcomes, _snapshot.retired_json(number, outcomes)))
            batches.append(loop.create_task(_replay(driver, outcomes, on_outcome)))
        for i, sb in enumerate(saved.state.batches):
            batches.append(driver._restore(sb, execute, decide, on_outcome, None if args is None else args[i], saved.ended))
        return Resumed(driver, batches, unrestored)

    @classmethod
    def of(cls, scheduler: Scheduler) -> "Driver":
        """The scheduler's driver, made on first use (what `run_batch` uses)."""
        d = getattr(scheduler, "_driver", None)
        return d if d is not None and not d._closed else cls(scheduler)

    # -- running batches ---------------------------------------------------------------------

    async def run(
        self,
        calls: Sequence[Call],
        execute: Execute,
        *,
        decide: Optional[Decide] = None,
        execution_timeout: Optional[float] = None,
        abort_grace: Optional[float] = None,
        on_outcome: Optional[OnOutcome] = None,
    ) -> list[CallOutcome]:
        """Runs one batch to the end and returns each call's outcome in written order.

        `decide(label, call)` is asked for each entry in written order (default: approve all)
        and may be async (a prompt); it returns "approve", "reject", "skip" or "fail".
        `execution_timeout` (seconds) cancels an execution that ran that long (it failed with
        TimeoutError); `abort_grace` (seconds) is how long an execution whose task was
        cancelled may still take before the component gives up on it (settled timed-out).
        `on_outcome(outcome, call)` is called once per entry as soon as its outcome is known
        (after the snapshot that holds it is persisted); what it raises is ignored. Raises
        `SubmitError` when the batch is refused (nothing ran), TypeError / ValueError for
        wrong arguments, and otherwise the error of `decide`, `RefusedInputError`,
        `PersistError` or `DisposedError`."""
        self._check_open()
        _callable(execute, "execute")
        for f, what in ((decide, "decide"), (on_outcome, "on_outcome")):
            if f is not None:
                _callable(f, what)
        limits, timeout = _batch_limits(execution_timeout, abort_grace)
        calls = list(_check.sequence(calls, "calls"))
        batch, first, _count = self._step_submit(build_calls(calls, self.scheduler._templates), limits)
        b = _Batch(self, batch, first, calls, execute, on_outcome, timeout)
        self._add(b)
        if self._persist is not None:
            self._dirty = True  # saved from its first step on, even while `decide` is still out
            self._queue(_APPROVE, None, None)
        return await self._drive(b, decide, range(b.count))

    def _submit(
        self, calls: list[Call], execute: Execute, on_outcome: OnOutcome, execution_timeout: Optional[float], abort_grace: Optional[float]
    ) -> _Batch:
        """For the gate: submits a batch (raising SubmitError at once); `_drive` runs it."""
        self._check_open()
        limits, timeout = _batch_limits(execution_timeout, abort_grace)
        batch, first, _count = self._step_submit(build_calls(calls, self.scheduler._templates), limits)
        b = _Batch(self, batch, first, calls, execute, on_outcome, timeout)
        self._add(b)
        if self._persist is not None:
            self._dirty = True
            self._queue(_APPROVE, None, None)
        return b

    def _restore(
        self, sb: SavedBatch, execute: Execute, decide: Optional[Decide], on_outcome: Optional[OnOutcome],
        args: Optional[list[Any]], ended: dict[int, Any],
    ) -> "asyncio.Task[list[CallOutcome]]":
        """A saved live batch, running again (see `resume`)."""
        calls = [Call(c.id, c.tool, c.operations, arguments=None if args is None else args[j]) for j, c in enumerate(sb.calls)]
        timeout = None if sb.execution_ms is None else sb.execution_ms / 1000
        b = _Batch(self, sb.batch, sb.first, calls, execute, on_outcome, timeout)
        b.cancelled = sb.cancelled
        statuses = self.scheduler.inspect(sb.batch)
        pending = []
        for i in range(b.count):
            entry, label = b.first + i, b.labels[i]
            op = b.ops[i] or 0
            saved = next((e for e in sb.calls[b.call_index[i]].entries if e.operation == op), None)
            if saved is not None and saved.state is Saved.ENDED:
                # Ended before the crash: its saved value (or error) is its outcome, reported
                # again (the host cannot know which outcomes it saw before the crash).
                is_error, kept = _snapshot.kept(ended.get(entry), f"snapshot.ended[{entry!r}]")
                if b.cancelled:
                    o = EntryOutcome(entry, label, CANCELLED, error=kept) if is_error else EntryOutcome(entry, label, CANCELLED, value=kept)
                elif saved.outcome is Outcome.OK:
                    o = EntryOutcome(entry, label, OK, value=None if is_error else kept)
                else:
                    o = EntryOutcome(entry, label, FAILED, error=kept if is_error else RestoredError("Error", "no error was saved"))
                self._record(b, i, o)
            elif saved is not None and saved.state is Saved.SETTLED:
                self._record(b, i, self._settled(entry, label, saved.reason))  # type: ignore[arg-type]
            elif statuses is None:
                # Nothing of the batch is live (every call unrestored): what started is interrupted.
                self._record(b, i, self._settled(entry, label, _REASONS["interrupted"]), report=False)
            elif statuses[i].state not in (EntryState.SETTLED, EntryState.ENDED):
                pending.append(i)
            # Else settled by the resume itself (interrupted): the first step reports it.
        loop = self._loop
        if statuses is None:
            b.final = b.results()
            return loop.create_task(_done(b.final))  # type: ignore[union-attr]
        self._add(b)
        self._queue(_APPROVE, None, None)  # the first step reports the resume's settlements
        return loop.create_task(self._drive(b, decide, pending))  # type: ignore[union-attr]

    async def _drive(self, b: _Batch, decide: Optional[Decide], undecided: Sequence[int]) -> list[CallOutcome]:
        decider: Optional[asyncio.Task[None]] = None
        try:
            if decide is None:
                if undecided:
                    p = self._pending
                    p.lists[_APPROVE].extend([b.first + i for i in undecided])
                    p.owners[_APPROVE].extend([b] * len(undecided))
                    self._queue(_APPROVE, None, None)
            else:
                # Decided on the side: the batch fails at once (closed driver, a refused input)
                # even while `decide` is still out.
                decider = self._loop.create_task(self._decide_all(b, decide, list(undecided)))  # type: ignore[union-attr]
            await asyncio.shield(b.finished)
        except GeneratorExit:
            # The task is being collected (its loop is gone): nothing can be reported.
            raise
        except BaseException:
            if decider is not None:
                decider.cancel()
            self._cancel(b)
            # Every running execution reports its end (or is given up) before the error
            # propagates (a second cancellation stops the wait; the ends are still reported
            # when they come). A closed driver reports nothing more: its batches fail at once.
            if not self._closed:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(self._until_retired(b))
                if b.final is not None:
                    # `run` raises instead of returning the outcomes, so the host has nothing
                    # to `forget`: the batch leaves the snapshot here (JS resolves it instead,
                    # and the host forgets it). Else every restart would give it back.
                    self.forget(b.final)
            if not b.finished.done():
                b.finished.cancel()
            raise
        finally:
            if b.acquiring or b.permits:  # never hang a shared key, whatever ended the batch
                for i in list(b.acquiring) + [i for i in b.permits if i not in b.tasks]:
                    self._give_back(b, i)
        return b.final  # type: ignore[return-value]

    async def _decide_all(self, b: _Batch, decide: Decide, todo: list[int]) -> None:
        """Asks `decide` about each entry in written order; when it raises (or returns
        something else), the undecided entries fail and the batch fails with that error."""
        n = 0
        try:
            while n < len(todo):
                i = todo[n]
                if b.finished.done() or b.cancelled:
                    return
                decision: Any = decide(b.labels[i], b.call_of[i])
                if _inspect.isawaitable(decision):
                    decision = await decision
                if b.finished.done() or b.cancelled:
                    return
                if decision == "approve":
                    self._queue_approve(b.first + i, b)
                elif isinstance(decision, str) and decision in _HOW:
                    self._queue(_SETTLE, (b.first + i, _HOW_WIT[decision]), b)
                else:
                    # JS: a TypeError for a value that is not a string, a RangeError for another.
                    error = ValueError if isinstance(decision, str) else TypeError
                    raise error(f"decide({b.labels[i]!r}) result must be one of 'approve', 'reject', 'skip', 'fail', not {decision!r}")
                n += 1
        except Exception as e:
            # Undecided entries fail; the batch is cancelled (nothing of it runs) and fails. Each
            # entry settled from now on carries the error (`_record`).
            if b.decide_error is None:
                b.decide_error = e
            for i in todo[n:]:
                self._queue(_SETTLE, (b.first + i, "failed"), b)
            b.fail(e)

    def snapshot(self) -> str:
        """The snapshot's JSON text (hosts/DRIVERS.md, "Persistence"): the scheduler's
        `unfinished()`, the values of ended entries of live batches, and the retired batches
        not forgotten."""
        state = self.scheduler.unfinished()
        ended: list[tuple[int, str]] = []
        for sb in state.batches:
            b = self._batches.get(sb.batch)
            if b is None:
                continue
            for ci, c in enumerate(sb.calls):
                for e in c.entries:
                    if e.state is not Saved.ENDED:
                        continue
                    offset = b.call_starts[ci] + e.operation
                    o = b.outcomes[offset]
                    if o is not None:
                        ended.append((b.first + offset, _snapshot.ended_json(o)))
        return _snapshot.snapshot_json(state, ended, [text for _, text in self._retired])

    def forget(self, outcomes: list[CallOutcome]) -> None:
        """Drops a retired batch from the snapshot (the next step persists without it):
        `outcomes` is the list its `run` returned, once the host kept them itself. A list of
        no retired batch (forgotten already, or never retired here) changes nothing."""
        if not isinstance(outcomes, list):
            raise TypeError(f"outcomes must be the list a run returned, not {type(outcomes).__name__}")
        for k, (kept, _) in enumerate(self._retired):
            if kept is outcomes:
                del self._retired[k]
                if not self._closed:
                    self._dirty = True
                    self._queue(_APPROVE, None, None)
                return

    # -- time ------------------------------------------------------------------------------------

    def now(self) -> int:
        """The driver's clock as it gives it to the scheduler (`now` on every step): the event
        loop's `loop.time()` in whole milliseconds, never less than a time it gave before."""
        # A microsecond's allowance: a timer set for a millisecond reads that millisecond (a
        # float of seconds times 1000 may fall a hair below it).
        t = int(self._loop.time() * 1000 + 0.001) if self._loop is not None else 0  # type: ignore[union-attr]
        if t < self._clock:
            return self._clock
        self._clock = t
        return t

    def pause(self, key: str, seconds: float) -> "asyncio.Future[None]":
        """Pauses `key` for `seconds` from now (a `Retry-After` the host learned elsewhere, or
        its own back-off): nothing on the key starts before then, in any batch. A pause only
        ever extends. Returns an awaitable done once the pause reached the scheduler; it raises
        `RefusedInputError` (code `unknown-key`) when no configured tool declares the key, and
        `DisposedError` after `close()`. A key that is not a str (TypeError) or a duration that
        is not a finite number of seconds >= 0 (TypeError, ValueError) raises at the call,
        before anything is queued (JS: `pause` throws)."""
        if self._closed:
            return self._refused(DisposedError("the driver"))
        key = _check.string(key, "key")
        span = _check.number(seconds, "seconds", allow_none=False)
        self._check_open()
        until = min(self.now() + math.ceil(span * 1000), _U64_MAX)  # type: ignore[operator]
        done: asyncio.Future[None] = self._loop.create_future()  # type: ignore[union-attr]
        self._queue(_PAUSE, (key, until), done)
        return done

    def lift_pause(self, key: str) -> "asyncio.Future[None]":
        """Lifts the pauses the host set on `key` (`pause`) now; a pause that came from a rate
        limit stays until it ends (and a shared key's store keeps its own, the host's to lift
        there). Returns an awaitable done once the scheduler applied it; it raises
        `RefusedInputError` (code `unknown-key`) for a key no configured tool declares, and
        `DisposedError` after `close()`. A key that is not a str raises TypeError at the call."""
        if self._closed:
            return self._refused(DisposedError("the driver"))
        key = _check.string(key, "key")
        self._check_open()
        done: asyncio.Future[None] = self._loop.create_future()  # type: ignore[union-attr]
        self._queue(_LIFT_PAUSE, key, done)
        return done

    def _refused(self, error: BaseException) -> "asyncio.Future[None]":
        """An awaitable that raises `error` (JS: a rejected promise)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_exception(error)
        return done

    def _retry(self, b: _Batch, i: int, limited: RateLimited) -> None:
        """An execution raised `RateLimited`: the entry runs again after it (or is settled
        rate-limited past its key's cap)."""
        entry = b.first + i
        if i in b.given_up:  # the component gave up on it: its rate limit changes nothing
            b.given_up.discard(i)
            return
        b.limited[i] = limited
        if limited.until is not None:
            until = math.ceil(limited.until * 1000)
        else:
            wait = limited._wait_ms  # exact when read from a header (the component's milliseconds)
            until = self.now() + (wait if wait is not None else math.ceil(limited.retry_after * 1000))  # type: ignore[operator]
        until = min(max(until, 0), _U64_MAX)  # u64 range only: the scheduler judges the wait
        if b.asking[i]:  # a question still open is closed with its execution
            b.asking[i] = 0
            self._queue(_ANSWER, entry, b)
        self._queue(_RETRY, (entry, until), b)

    def _disarm(self) -> None:
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        self._wake_at = None

    def _arm(self, wake_at: Optional[int]) -> None:
        """Keeps ONE timer, for the scheduler's latest `wake_at` (none: no timer)."""
        if wake_at == self._wake_at and (wake_at is None or self._wake is not None):
            return
        self._disarm()
        if wake_at is None or self._closed:
            return
        self._wake_at = wake_at
        # `now()` reads the millisecond when the timer runs (it allows for the float's error).
        self._wake = self._loop.call_at(wake_at / 1000, self._on_wake)  # type: ignore[union-attr]

    def _on_wake(self) -> None:
        self._wake = None
        self._wake_at = None
        if not self._closed:
            self._queue(_NOW, None, None)  # a step with only `now`

    # -- inspection and lifetime ---------------------------------------------------------------

    def inspect(self) -> list[LiveBatch]:
        """Every live batch in batch order (the way to see what is in flight, rather than
        `Scheduler.unfinished()`): whether it was cancelled or failed, every entry's status as
        the scheduler sees it (`EntryStatus`: state, keys (running entries' too), and for one
        that waits its `wait` and the component's `why`), and executions whose task was
        cancelled and that have not ended (`since`: seconds ago)."""
        now = self._loop.time() if self._loop is not None else 0.0
        out = []
        for b in sorted(self._batches.values(), key=lambda b: b.first):
            aborted = [AbortedRun(b.first + i, b.labels[i], now - t) for i, t in sorted(b.aborted_at.items()) if i in b.tasks]
            entries = [] if self.scheduler.closed else (self.scheduler.inspect(b.batch) or [])
            out.append(LiveBatch(b.batch, b.cancelled, b.failed, entries, aborted))
        return out

    def running(self) -> list[Running]:
        """Every execution in flight, in entry order; `cancel_requested` marks those asked to
        stop that have not (yet): they still hold their slots."""
        out = []
        for b in self._batches.values():
            for i, task in b.tasks.items():
                out.append(Running(b.first + i, b.labels[i], b.batch, b.since.get(i, 0.0), b.cancelled or i in b.expired))
        return sorted(out, key=lambda r: r.entry)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Cancels every batch in flight (each `run` raises `DisposedError` once its running
        executions ended) and refuses new `run`s (`DisposedError`); closes the scheduler when
        the driver owns it, after those ends reached it. Closing twice is fine."""
        if self._closed:
            return
        self._shut(DisposedError("the driver"))

    def _shut(self, error: BaseException) -> None:
        """Closes the driver: every live batch fails with `error` (see `close`)."""
        self._closed = True
        self._disarm()
        if getattr(self.scheduler, "_driver", None) is self:
            self.scheduler._driver = None
        for b in list(self._batches.values()):
            b.fail(error)
            b.leave()
            # Requests withdrawn and unused permits given back now, not after the next step.
            for i in list(b.acquiring) + [i for i in b.permits if i not in b.permit_used]:
                self._give_back(b, i)
        if self._batches:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:
                # The cancellations and ends must reach the scheduler before it is closed.
                self._hold(loop.create_task(self._close_later()))
                return
        self._close_owned()

    def _hold(self, task: "asyncio.Future[Any]") -> "asyncio.Future[Any]":
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _close_owned(self) -> None:
        self._finalizer.detach()
        if self._owns:
            self.scheduler.close()

    async def _close_later(self) -> None:
        while self._batches:
            for b in list(self._batches.values()):
                with contextlib.suppress(BaseException):
                    await self._wind_down(b)
            await asyncio.sleep(0)
            if all(not b.tasks for b in self._batches.values()):
                break
        self._close_owned()

    def __enter__(self) -> "Driver":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "Driver":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        """Cancels what is still in flight and waits for the ends to reach the scheduler."""
        live = list(self._batches.values())
        self.close()
        for b in live:
            await self._wind_down(b)
        await self.settled_shared()

    def _check_open(self) -> None:
        if self._closed:
            raise DisposedError("the driver")
        self.scheduler._live()
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._batches:
                raise RuntimeError("a driver runs its batches on one event loop at a time")
            self._loop = loop

    # -- the pump --------------------------------------------------------------------------------

    def _step_submit(self, calls: list[Any], limits: Any) -> tuple[int, int, int]:
        result = self.scheduler._submit(self._resource, calls, limits)
        if type(result) is not tuple:
            raise SubmitError(SubmitErrorCode(result.payload.code), result.payload.message)
        return result  # type: ignore[no-any-return]

    def _add(self, b: _Batch) -> None:
        if self._on_event is not None:
            # The entries' keys, the component's (they never change): one `inspect` per batch.
            b.tele = _Tele([s.keys for s in self.scheduler.inspect(b.batch) or []])
        self._batches[b.batch] = b
        owner = self._owner
        for e in range(b.first, b.first + b.count):
            owner[e] = b

    def _forget(self, b: _Batch) -> None:
        if self._batches.get(b.batch) is b:
            del self._batches[b.batch]
            owner = self._owner
            for e in range(b.first, b.first + b.count):
                owner.pop(e, None)

    def _queue_approve(self, entry: int, b: _Batch) -> None:
        p = self._pending
        p.lists[_APPROVE].append(entry)
        p.owners[_APPROVE].append(b)
        if not self._scheduled:
            self._scheduled = True
            if not self._persisting:  # else the step waits for the persist under way
                self._loop.call_soon(self._flush)  # type: ignore[union-attr]

    def _queue(self, k: int, value: Any, b: Any) -> None:
        """Queues an input of kind `k` (`_APPROVE` .. `_PAUSE`, not `_NOW`) for the next step;
        None only asks for a step. `b` is its batch (a future for a pause)."""
        if value is not None:
            self._pending.lists[k].append(value)
            self._pending.owners[k].append(b)  # type: ignore[arg-type]
        if not self._scheduled:
            self._scheduled = True
            if not self._persisting:  # else the step waits for the persist under way
                self._loop.call_soon(self._flush)  # type: ignore[union-attr]

    def _next_flush(self) -> Optional["asyncio.Future[None]"]:
        """A future resolved after the step that carries what is queued now (None when nothing
        is queued)."""
        if not self._scheduled:
            return None
        f = self._loop.create_future()  # type: ignore[union-attr]
        self._waiters.append(f)
        return f

    def _flush(self) -> None:
        """Sends every input queued since the last step in one `step`, dispatches the outputs,
        and hands the host what the step decided once its snapshot is persisted."""
        if self._persisting or not self._scheduled:
            return
        q, self._pending, self._scheduled = self._pending, _Inputs(), False
        waiters, self._waiters = self._waiters, []
        try:
            if self._broken:  # a persist failed: nothing more reaches the scheduler
                _fail_host_inputs(q, DisposedError("the driver"))
                return
            if self.scheduler.closed:
                error: BaseException = DisposedError("the scheduler (closed under its driver)")
                for b in list(self._batches.values()):
                    b.fail(error)
                    b.leave()
                _fail_host_inputs(q, error)
                return
            lists = q.lists
            settle = [_Settlement(e, how) for e, how in lists[_SETTLE]] if lists[_SETTLE] else []
            retry = [_RetryAfter(e, until) for e, until in lists[_RETRY]] if lists[_RETRY] else []
            pause = [_KeyPause(key, until) for key, until in lists[_PAUSE]] if lists[_PAUSE] else []
            self._step_now = now = self.now()
            inputs = _StepInputs(
                lists[_APPROVE], settle, lists[_ASK], lists[_ANSWER], lists[_OK], lists[_FAILED], lists[_CANCEL],
                now, retry, pause, lists[_GRANTED], lists[_DENIED], lists[_LIFT_PAUSE],
            )
            try:
                out = self._step(self._resource, inputs)
            except TurnstileError as e:  # InstanceBrokenError: every batch fails
                for b in list(self._batches.values()):
                    b.fail(e)
                    b.leave()
                _fail_host_inputs(q, e)
                return
            changed = any(lists[k] for k in _CHANGES)
            self._dispatch(q, *out)
            self._after_step(changed)
        finally:
            for f in waiters:
                if not f.done():
                    f.set_result(None)

    # -- persistence -----------------------------------------------------------------------------

    def _after_step(self, changed: bool) -> None:
        """Persists what the step changed (hosts/DRIVERS.md, "Persistence"), then hands it out."""
        reports, starts, retiring = self._reports, self._starts, self._retiring
        persist = self._persist
        tele: Optional[tuple[list[DriverEvent], list[_Batch]]] = None
        if self._on_event is not None:
            tele = self._events, list(self._touched.values())
            self._events, self._touched = [], {}
        if not (reports or starts or retiring or self._dirty or (changed and persist is not None)):
            if tele is not None:
                self._report(*tele)
            return
        self._reports, self._starts, self._retiring = [], [], []
        if persist is None:
            self._hand_out(reports, starts, retiring, tele)
            return
        self._dirty = False
        self._persisting = True
        try:
            saved = persist(self.snapshot())
        except Exception as e:
            self._persist_failed(e, retiring)
            return
        if not _inspect.isawaitable(saved):
            self._persisted(reports, starts, retiring, tele)
            return

        def done(task: "asyncio.Future[Any]") -> None:
            if task.cancelled():
                self._persist_failed(asyncio.CancelledError("persist was cancelled"), retiring)
            elif task.exception() is not None:
                self._persist_failed(task.exception(), retiring)  # type: ignore[arg-type]
            else:
                self._persisted(reports, starts, retiring, tele)

        self._hold(asyncio.ensure_future(saved, loop=self._loop)).add_done_callback(done)

    def _persisted(
        self, reports: list[tuple[_Batch, int]], starts: list[tuple[_Batch, int]], retiring: list[_Batch],
        tele: Optional[tuple[list[DriverEvent], list[_Batch]]] = None,
    ) -> None:
        self._persisting = False
        self._hand_out(reports, starts, retiring, tele)
        if self._scheduled:
            self._loop.call_soon(self._flush)  # type: ignore[union-attr]

    def _persist_failed(self, cause: BaseException, retiring: list[_Batch]) -> None:
        """A failed `persist` breaks the driver loudly: every batch raises `PersistError`,
        running executions are cancelled, nothing starts, the driver is closed."""
        self._persisting = False
        self._broken = True
        error = PersistError(cause)
        for b in retiring:
            if not b.finished.done():
                b.failed = True
                b.finished.set_exception(error)
            b.leave()
        if self._closed:  # closed while the persist was under way: its batches failed already
            return
        self._shut(error)

    def _hand_out(
        self, reports: list[tuple[_Batch, int]], starts: list[tuple[_Batch, int]], retiring: list[_Batch],
        tele: Optional[tuple[list[DriverEvent], list[_Batch]]] = None,
    ) -> None:
        """What a step decided, to the host: outcomes to `on_outcome`, executions started,
        retired batches returned, then the step's events to `on_event`."""
        if not self._closed:  # a closed driver reports nothing more
            for b, i in reports:
                try:
                    b.on_outcome(b.outcomes[i], b.call_of[i])  # type: ignore[misc]
                except Exception:
                    pass  # a host's hook must not break the driver's round
        if tele is None:
            for b, i in starts:
                self._start(b, i)
        else:
            events = tele[0]
            for b, i in starts:
                t = b.tele
                if t is None:
                    self._start(b, i)
                    continue
                now = self.now()
                t.started[i] = now
                if self._start(b, i):
                    t.pending.discard(i)
                    approved = t.approved.pop(i, now)
                    t.sig.pop(i, None)
                    events.append(StartEvent(b.first + i, b.labels[i], b.call_of[i].tool, b.batch, now, t.keys[i], max(now - approved, 0), t.last.pop(i, None)))
                else:
                    del t.started[i]
                    self._settled_event(events, b, i, now)
        for b in retiring:
            if not b.finished.done():
                b.finished.set_result(None)
            b.leave()
        if tele is not None:
            self._report(*tele)

    def _settled_event(
        self, events: list[DriverEvent], b: _Batch, i: int, now: int, reason: Optional[Reason] = None, message: Optional[str] = None,
    ) -> None:
        """A settled event for entry `i`: the component's settlement (`reason`, `message`), or
        the settled outcome just recorded for it."""
        t = b.tele
        if t is None:
            return
        if reason is None:
            o = b.outcomes[i]
            if o is None or o.reason is None:
                return
            reason, message = o.reason, o.message
        t.pending.discard(i)
        t.started.pop(i, None)
        t.approved.pop(i, None)
        t.last.pop(i, None)
        t.sig.pop(i, None)
        events.append(SettledEvent(b.first + i, b.labels[i], b.call_of[i].tool, b.batch, now, t.keys[i], reason, message or ""))

    def _report(self, events: list[DriverEvent], touched: list[_Batch]) -> None:
        """Hands a step's events to `on_event`: its ends, settlements and starts, then a wait
        event for each entry of a batch the step touched that waits, when it did not wait
        before or its wait changed kind or key (the component's `inspect`, once per batch)."""
        on_event = self._on_event
        if on_event is None or self._closed or self.scheduler.closed:
            return
        for b in touched:
            t = b.tele
            if t is None or not t.pending or self._batches.get(b.batch) is not b:
                continue
            statuses = self.scheduler.inspect(b.batch)
            if statuses is None:
                continue
            now = self.now()
            for i in sorted(t.pending):
                s = statuses[i]
                w = s.wait
                if w is None or s.state not in (EntryState.APPROVED, EntryState.ACQUIRING, EntryState.GRANTED):
                    continue
                sig = (type(w), wait_key(w))
                if t.sig.get(i) != sig:
                    t.sig[i] = sig
                    t.last[i] = w
                    events.append(WaitEvent(b.first + i, b.labels[i], b.call_of[i].tool, b.batch, now, t.keys[i], w, s.why or ""))
        for e in events:
            try:
                on_event(e)
            except Exception:
                pass  # a host's hook must not break the driver's round

    def _retire(self, number: int) -> None:
        """A batch left the scheduler: it returns once the step's snapshot (which keeps it
        under `retired` until `forget`) is persisted."""
        b = self._batches.get(number)
        if b is None:
            return
        self._forget(b)
        if b.finished.done():
            b.leave()
            return
        try:
            b.final = b.results()
        except RuntimeError as e:  # an entry unanswered: a bug
            b.finished.set_exception(e)
            b.leave()
            return
        if self._persist is not None:
            self._retired.append((b.final, _snapshot.retired_json(number, b.final)))
        self._retiring.append(b)

    def _record(self, b: _Batch, i: int, outcome: EntryOutcome, report: bool = True) -> None:
        """The one place an entry's outcome is recorded. The first one recorded goes to
        `on_outcome` after the step that takes it (and its snapshot, with `persist`)."""
        if outcome.status is SETTLED and b.decide_error is not None and outcome.error is None:
            # An entry settled because `decide` failed carries the host's error, not only a sentence.
            outcome = dataclasses.replace(outcome, error=b.decide_error)
        first = b.outcomes[i] is None
        b.outcomes[i] = outcome
        if first and report and b.on_outcome is not None:
            self._reports.append((b, i))

    def _dispatch(
        self,
        q: _Inputs,
        start: list[int],
        settled: list[Any],
        errors: list[Any],
        retired: list[int],
        wake_at: Optional[int] = None,
        acquire: Sequence[Any] = (),
        release: Sequence[int] = (),
        abort: Sequence[Any] = (),
        pause_store: Sequence[Any] = (),
    ) -> None:
        owner = self._owner
        refused: set[tuple[int, int]] = set()
        if errors:
            for r in errors:
                k = _KIND_INDEX[r.input]
                refused.add((k, r.index))
                refusal = RefusedInput(InputKind(r.input), r.index, InputErrorCode(r.code), r.message)
                if k == _GRANTED or k == _DENIED:
                    # A permit that came (or failed) after its entry stopped waiting for it (the
                    # step that listed it in `release` went first): nothing to report.
                    b = q.owners[k][r.index]
                    entry = q.lists[k][r.index]
                    if k == _GRANTED:
                        self._give_back(b, entry - b.first)
                    else:
                        b.denied_errors.pop(entry - b.first, None)
                elif k == _NOW:  # the clock went back (a scheduler stepped with another clock)
                    for b in list(self._batches.values()):
                        b.fail(RefusedInputError(refusal))
                elif k == _PAUSE or k == _LIFT_PAUSE:
                    q.owners[k][r.index].set_exception(RefusedInputError(refusal))
                else:
                    q.owners[k][r.index].fail(RefusedInputError(refusal))
        for f in q.owners[_PAUSE] + q.owners[_LIFT_PAUSE]:
            if not f.done():
                f.set_result(None)
        self._arm(wake_at)
        for a in abort:  # abort records: entry, cause
            b = owner.get(a.entry)
            if b is not None:
                self._abort(b, a.entry - b.first, a.cause)
        for i, (entry, how) in enumerate(q.lists[_SETTLE]):
            if (_SETTLE, i) not in refused:
                b = owner.get(entry)
                if b is not None:
                    j = entry - b.first
                    self._record(b, j, self._settled(entry, b.labels[j], _REASONS[how], _REASONS_WIT[how]))
        for i, entry in enumerate(q.lists[_DENIED]):
            # The store could not grant the permit: settled failed, with the store's error.
            if (_DENIED, i) not in refused:
                b = owner.get(entry)
                if b is not None:
                    j = entry - b.first
                    error = b.denied_errors.pop(j, None)
                    self._record(b, j, self._settled(entry, b.labels[j], _REASONS["failed"], _REASONS_WIT["failed"], error))
        if self.shared_keys is not None:
            # The scheduler says when a shared key pauses at its store, for every process (a
            # pause only extends; a store error changes nothing here), before permits go back.
            for p in pause_store:  # key-pause records: key, until
                self._spawn_give(self.shared_keys.pause(p.key, min(max(p.until - self.now(), 0), DELAY_MS_MAX)))
        for entry in release:
            b = owner.get(entry)
            if b is not None:
                self._give_back(b, entry - b.first)
        for terms in acquire:  # permit-request records: entry, key, limit, delay-ms
            b = owner.get(terms.entry)
            if b is not None:
                self._acquire(b, terms.entry - b.first, terms)
        if settled:
            for s in settled:
                b = owner.get(s.entry)
                if b is not None:
                    i = s.entry - b.first
                    reason = _lift_reason(s.reason)
                    if reason.kind is ReasonKind.TIMED_OUT:
                        # Given up after its abort grace: whatever its task does later is ignored.
                        b.given_up.add(i)
                    if reason.kind is ReasonKind.CANCELLED and i in b.limited and any(e == s.entry for e, _ in q.lists[_RETRY]):
                        # A cancelled batch's execution that ended with a 429 (this step's): it
                        # ran, its error is its outcome.
                        self._record(b, i, EntryOutcome(s.entry, b.labels[i], CANCELLED, error=b.limited.pop(i)))
                        continue
                    error = b.limited.pop(i, None) if reason.kind is ReasonKind.RATE_LIMITED else None
                    self._record(b, i, self._settled(s.entry, b.labels[i], reason, s.reason, error, s.message))
        for entry in start:
            b = owner.get(entry)
            if b is not None:
                self._starts.append((b, entry - b.first))
        if self._on_event is not None:
            self._tele_step(q, refused, start, settled, abort, acquire, release)
        for n in retired:
            self._retire(n)

    def _tele_step(
        self, q: _Inputs, refused: set[tuple[int, int]], start: list[int], settled: list[Any], abort: Sequence[Any],
        acquire: Sequence[Any], release: Sequence[int],
    ) -> None:
        """The step's facts for `on_event` (after its outputs were applied): ends it took, then
        entries settled; approvals and rate-limited ends start a wait; the batches it touched
        get their waits compared when the step is handed out."""
        now, events, touched, owner = self._step_now, self._events, self._touched, self._owner
        lists, owners = q.lists, q.owners
        for k in (_APPROVE, _SETTLE, _ASK, _ANSWER, _OK, _FAILED, _CANCEL, _RETRY, _GRANTED, _DENIED):
            for b in owners[k]:
                if b is not None and b.tele is not None:
                    touched[b.batch] = b
        for entries in (start, release):
            for entry in entries:
                b = owner.get(entry)
                if b is not None and b.tele is not None:
                    touched[b.batch] = b
        for x in list(settled) + list(abort) + list(acquire):
            b = owner.get(x.entry)
            if b is not None and b.tele is not None:
                touched[b.batch] = b
        for k in (_OK, _FAILED, _RETRY):
            for n, value in enumerate(lists[k]):
                b = owners[k][n]
                if (k, n) in refused or b is None or b.tele is None:
                    continue
                entry, until = value if k == _RETRY else (value, None)
                i, t = entry - b.first, b.tele
                began = t.started.pop(i, None)
                if began is not None:
                    if k == _RETRY:
                        status, after = "rate-limited", max(until - now, 0)
                    else:
                        o = b.outcomes[i]
                        status, after = ("failed" if o is None else _END_STATUS[o.status]), None
                    events.append(EndEvent(entry, b.labels[i], b.call_of[i].tool, b.batch, now, t.keys[i], status, max(now - began, 0), after))  # type: ignore[arg-type]
                if k == _RETRY:  # it waits again, from its rate-limited end
                    t.approved[i] = now
                    t.pending.add(i)
                    t.last.pop(i, None)
                    t.sig.pop(i, None)
        for n, entry in enumerate(lists[_APPROVE]):
            b = owners[_APPROVE][n]
            if (_APPROVE, n) not in refused and b is not None and b.tele is not None:
                i = entry - b.first
                b.tele.approved[i] = now
                b.tele.pending.add(i)
        for k in (_SETTLE, _DENIED):
            for n, value in enumerate(lists[k]):
                b = owners[k][n]
                if (k, n) not in refused and b is not None and b.tele is not None:
                    entry = value[0] if k == _SETTLE else value
                    self._settled_event(events, b, entry - b.first, now)
        for x in settled:
            b = owner.get(x.entry)
            if b is not None and b.tele is not None:
                i = x.entry - b.first
                self._settled_event(events, b, i, now, _lift_reason(x.reason), x.message)

    def _start(self, b: _Batch, i: int) -> bool:
        """Starts entry `i` (calls `execute`); False when its batch was cancelled (settled
        cancelled instead)."""
        entry = b.first + i
        if b.cancelled:
            # Released in the step that also carried its batch's cancellation: it never runs.
            self._record(b, i, self._settled(entry, b.labels[i], _CANCELLED_REASON, _CANCELLED_WIT))
            self._queue(_FAILED, entry, b)
            return False
        x = Execution(entry, b.labels[i], b.call_of[i], b.ops[i], b, i)
        try:
            awaitable = b.execute(x)
        except RateLimited as e:  # raised before returning an awaitable: a rate limit all the same
            self._retry(b, i, e)
            return True
        except Exception as e:  # execute is not async, or raised before returning: its failure
            self._ended(b, i, EntryOutcome(entry, x.label, FAILED, error=e), False)
            return True
        if type(awaitable) is not _CoroutineType and not _inspect.isawaitable(awaitable):
            error = TypeError(f"execute returned {type(awaitable).__name__} for {x.label}, not an awaitable (make it async def)")
            self._ended(b, i, EntryOutcome(entry, x.label, FAILED, error=error), False)
            return True
        loop = self._loop
        task = loop.create_task(self._run(b, i, awaitable))  # type: ignore[union-attr]
        b.tasks[i] = task
        b.since[i] = loop.time()
        permit = b.permits.get(i)
        if permit is not None:
            b.permit_used.add(i)
            b.watchers[i] = loop.create_task(self._watch_lost(b, i, permit, task))  # type: ignore[union-attr]
        return True

    async def _run(self, b: _Batch, i: int, awaitable: Awaitable[Any]) -> None:
        """An execution's task: awaits what `execute` returned and reports the end. (Tasks not
        yet begun are not cancelled by the driver; they see their batch's cancellation here.)"""
        entry, label = b.first + i, b.labels[i]
        try:
            if b.cancelled and i not in b.expired:
                # Its batch was cancelled before its task began: it never runs.
                close = getattr(awaitable, "close", None)
                if close is not None:
                    close()
                self._record(b, i, self._settled(entry, label, _CANCELLED_REASON, _CANCELLED_WIT))
                self._queue(_FAILED, entry, b)
                return
            if i in b.expired:
                # Its deadline passed before its task began: it never runs.
                close = getattr(awaitable, "close", None)
                if close is not None:
                    close()
                error = TimeoutError(f"{label} ran past execution_timeout ({b.execution_timeout} s)")
                self._ended(b, i, EntryOutcome(entry, label, FAILED, error=error), False)
                return
            b.begun.add(i)
            try:
                value = await awaitable
            except asyncio.CancelledError:
                lost = b.lost.pop(i, None)
                if lost is not None and not b.cancelled:
                    # Its shared key's permit was lost (lease expired, store unreachable).
                    self._ended(b, i, EntryOutcome(entry, label, FAILED, error=lost), False)
                elif i in b.expired and not b.cancelled:
                    error = TimeoutError(f"{label} ran past execution_timeout ({b.execution_timeout} s)")
                    self._ended(b, i, EntryOutcome(entry, label, FAILED, error=error), False)
                else:
                    self._ended(b, i, EntryOutcome(entry, label, CANCELLED), False)
            except RateLimited as e:
                # The component decides, even in a cancelled batch (its key pauses; the entry is
                # settled cancelled, and reported cancelled with this error).
                self._retry(b, i, e)
            except Exception as e:
                status = CANCELLED if b.cancelled else FAILED
                self._ended(b, i, EntryOutcome(entry, label, status, error=e), False)
            except GeneratorExit:
                # The task is being collected (its loop is gone): nothing can be reported.
                raise
            except BaseException as e:  # KeyboardInterrupt, SystemExit: report, then let it go
                self._ended(b, i, EntryOutcome(entry, label, CANCELLED if b.cancelled else FAILED, error=e), False)
                raise
            else:
                bad = None if self._persist is None else _snapshot.not_json(value)
                if bad is not None:
                    # A value the snapshot cannot hold would come back another after a restart:
                    # refused at its end, live (hosts/DRIVERS.md, "Persistence").
                    error = TypeError(
                        f"{label} returned {bad}, which the snapshot cannot hold as JSON: with persist, an execution "
                        "returns JSON data (None, bool, int, a finite float, str, list, dict with str keys)"
                    )
                    self._ended(b, i, EntryOutcome(entry, label, CANCELLED if b.cancelled else FAILED, error=error), False)
                else:
                    self._ended(b, i, EntryOutcome(entry, label, CANCELLED if b.cancelled else OK, value=value), True)
        finally:
            del b.tasks[i]
            del b.since[i]
            if b.watchers:
                watcher = b.watchers.pop(i, None)
                if watcher is not None:
                    watcher.cancel()
            if b.finished.done() and i in b.permits:  # its batch is gone: no step will say so
                self._give_back(b, i)
            b.begun.discard(i)  # it may run again (a retry), as a task not yet begun
            b.expired.discard(i)
            b.aborted.discard(i)
            b.aborted_at.pop(i, None)

    # -- shared keys -----------------------------------------------------------------------------

    def _acquire(self, b: _Batch, i: int, terms: Any) -> None:
        """`acquire` listed entry `i` with `terms` (the component's `permit-request`: the key
        its arguments made and the terms its store keeps: the key's limit, delay and rate
        windows, and the entry's weight): a task asks the store for its permit and reports it
        granted or denied."""
        key = terms.key
        # Pure range protection: a key written `limit = 0` with a delay is unbounded but spaced
        # (no limit), which a store takes as its largest limit.
        limit = min(terms.limit if terms.limit is not None else LIMIT_MAX, LIMIT_MAX)
        delay_ms = min(getattr(terms, "delay-ms"), DELAY_MS_MAX)
        # The key's rate windows and the entry's weight, which the store keeps across processes.
        rates = tuple(RateWindow(w.count, getattr(w, "per-ms"), w.burst) for w in terms.rates)
        b.shared_keys[i] = key
        b.acquiring[i] = self._loop.create_task(self._acquiring(b, i, key, limit, delay_ms, rates, terms.weight))  # type: ignore[union-attr]

    async def _acquiring(self, b: _Batch, i: int, key: str, limit: int, delay_ms: int, rates: tuple[RateWindow, ...], weight: int) -> None:
        entry = b.first + i
        me = asyncio.current_task()
        try:
            permit = await self.shared_keys.acquire(key, limit=limit, delay_ms=delay_ms, rates=rates, weight=weight)  # type: ignore[union-attr]
        except asyncio.CancelledError:
            return  # withdrawn: the keys gave the request back
        except BaseException as e:  # StoreUnavailableError, LeaseLostError, DisposedError, anything
            if b.acquiring.get(i) is me:
                del b.acquiring[i]
                b.denied_errors[i] = e
                self._queue(_DENIED, entry, b)
            if not isinstance(e, Exception):
                raise
            return
        if b.acquiring.get(i) is not me or self._closed or b.finished.done():
            self._spawn_give(permit.abandon())  # no longer wanted
            return
        del b.acquiring[i]
        b.permits[i] = permit
        self._queue(_GRANTED, entry, b)

    def _give_back(self, b: _Batch, i: int) -> None:
        """`release` listed entry `i` (or its batch is gone): its request is withdrawn, or its
        permit released (its execution started) or abandoned (it never did)."""
        task = b.acquiring.pop(i, None)
        if task is not None:
            task.cancel()
        permit = b.permits.pop(i, None)
        if permit is not None:
            used = i in b.permit_used
            b.permit_used.discard(i)
            self._spawn_give(permit.release() if used else permit.abandon())

    def _spawn_give(self, coro: Any) -> None:
        """Runs a store call to its end (errors dropped: a lease ends anyway)."""

        async def run() -> None:
            with contextlib.suppress(Exception):
                await coro

        try:
            task = self._loop.create_task(run())  # type: ignore[union-attr]
        except (RuntimeError, AttributeError):  # no loop to run it on (closed): the lease ends anyway
            coro.close()
            return
        self._giving.add(task)
        task.add_done_callback(self._giving.discard)

    async def _watch_lost(self, b: _Batch, i: int, permit: SharedPermit, task: "asyncio.Task[None]") -> None:
        """Cancels the execution when its permit is lost."""
        await permit.lost.wait()
        if b.tasks.get(i) is task and not task.done():
            b.lost[i] = permit.lost_error or RuntimeError(f"the permit of {b.labels[i]} was lost")
            task.cancel()

    async def settled_shared(self) -> None:
        """Waits until every permit and request this driver gave back reached the store."""
        while self._giving:
            await asyncio.gather(*list(self._giving), return_exceptions=True)

    def _settled(
        self, entry: int, label: str, reason: Reason, wit: Any = None, error: Optional[BaseException] = None, message: Optional[str] = None
    ) -> EntryOutcome:
        """A settled entry's outcome, with the component's sentence for it: `message` when the
        scheduler settled it (its `settled` action carries it), else `explain` (a response the
        host made: an entry it answered without running, a permit denied, a cancellation it saw
        first; `wit` is the reason as the WIT variant, when at hand)."""
        if message is None:
            message = explain_in(self.scheduler.instance, label, lower_reason(reason) if wit is None else wit)
        return EntryOutcome(entry, label, SETTLED, error=error, reason=reason, message=message)

    def _ended(self, b: _Batch, i: int, outcome: EntryOutcome, ok: bool) -> None:
        if i in b.given_up:  # the component gave up on it: its end changes nothing
            b.given_up.discard(i)
            return
        self._record(b, i, outcome)
        if b.asking[i]:  # a question still open is closed with its execution
            b.asking[i] = 0
            self._queue(_ANSWER, outcome.entry, b)
        self._queue(_OK if ok else _FAILED, outcome.entry, b)

    def _abort(self, b: _Batch, i: int, cause: str) -> None:
        """The component aborted entry `i`: its task is cancelled (for its deadline, or because
        its batch was cancelled); a question it has open is closed with the abort."""
        task = b.tasks.get(i)
        if task is None:
            return
        b.aborted.add(i)
        b.aborted_at.setdefault(i, self._loop.time())  # type: ignore[union-attr]
        b.asking[i] = 0
        if cause == "deadline":
            b.expired.add(i)
        if i in b.begun:  # one not yet begun sees `expired` or `cancelled` when it begins
            task.cancel()

    def _cancel(self, b: _Batch) -> None:
        if b.cancelled:
            return
        b.cancelled = True
        broken = getattr(self.scheduler.instance, "broken", None) is not None
        if self._batches.get(b.batch) is b and not self._closed and not self.scheduler.closed and not broken:
            # The component aborts its running executions (`abort` actions, cause cancel).
            self._queue(_CANCEL, b.batch, b)
            return
        # No step will come (the driver or the scheduler is closed): cancelled here.
        for i, task in list(b.tasks.items()):
            if i in b.begun:  # one not yet begun sees `cancelled` when it begins
                task.cancel()

    async def _until_retired(self, b: _Batch) -> None:
        """After `_cancel`: waits until `b` retired (every execution ended or was given up, and
        the step that said so was persisted and handed out), or the driver was closed."""
        if not b.gone.done():
            await b.gone

    async def _wind_down(self, b: _Batch) -> None:
        """After `_cancel`: waits until every running execution of `b` ended and its end went
        out in a step; the batch's state goes when the step reports it retired."""
        while b.tasks:
            await asyncio.gather(*b.tasks.values(), return_exceptions=True)
        flushed = self._next_flush()
        if flushed is not None:
            await flushed


class _StepInputs:
    """The WIT `inputs` record as wasmtime-py reads it (attributes by field name)."""

    __slots__ = ("approve", "settle", "ask", "answer", "ok", "failed", "cancel", "now", "retry", "pause", "granted", "denied", "lift_pause")

    def __init__(
        self, approve: list[int], settle: list[Any], ask: list[int], answer: list[int], ok: list[int], failed: list[int],
        cancel: list[int], now: Optional[int], retry: list[Any], pause: list[Any], granted: list[int], denied: list[int],
        lift_pause: list[str],
    ) -> None:
        self.approve, self.settle, self.ask, self.answer = approve, settle, ask, answer
        self.ok, self.failed, self.cancel = ok, failed, cancel
        self.now, self.retry, self.pause = now, retry, pause
        self.granted, self.denied, self.lift_pause = granted, denied, lift_pause


class _RetryAfter:
    __slots__ = ("entry", "until")

    def __init__(self, entry: int, until: int) -> None:
        self.entry, self.until = entry, until


class _KeyPause:
    __slots__ = ("key", "until")

    def __init__(self, key: str, until: int) -> None:
        self.key, self.until = key, until


class _Settlement:
    __slots__ = ("entry", "how")

    def __init__(self, entry: int, how: str) -> None:
        self.entry, self.how = entry, how


def _lift_reason(v: Any) -> Reason:
    if v.tag == "timed-out":
        return Reason(ReasonKind.TIMED_OUT, cause=AbortCause(v.payload))
    r = _REASONS.get(v.tag)  # type: ignore[call-overload]
    if r is not None:
        return r
    if v.tag == "rate-limited":
        return Reason(ReasonKind.RATE_LIMITED, retries=v.payload)
    return Reason(ReasonKind(v.tag), v.payload)


def _callable(f: Any, what: str) -> None:
    if not callable(f):
        raise TypeError(f"{what} must be callable, not {type(f).__name__}")


def _finalize(owned: Optional[Callable[[], Any]]) -> None:
    if owned is not None:
        owned()


def _fail_host_inputs(q: _Inputs, error: BaseException) -> None:
    """The host's pauses and lifts of a step that will not come fail with `error`."""
    for f in q.owners[_PAUSE] + q.owners[_LIFT_PAUSE]:
        if not f.done():
            f.set_exception(error)


def _batch_limits(execution_timeout: Any, abort_grace: Any) -> tuple[Any, Optional[float]]:
    """A batch's limits for the component, in whole milliseconds (at least 1 for a timeout; a
    grace of 0 gives up at the abort's own step), capped at the u32 range; and the timeout."""
    timeout = _check.number(execution_timeout, "execution_timeout")
    if timeout == 0:
        raise ValueError("execution_timeout must be > 0 seconds (or None)")
    grace = _check.number(abort_grace, "abort_grace")
    limits = _limits(
        None if timeout is None else min(max(math.ceil(timeout * 1000), 1), _U32_MAX),
        None if grace is None else min(math.ceil(grace * 1000), _U32_MAX),
        "limits",
    )
    return limits, timeout


async def _replay(driver: Driver, outcomes: list[CallOutcome], on_outcome: Optional[OnOutcome]) -> list[CallOutcome]:
    """A retired batch of a resumed snapshot: its outcomes are reported again (the host cannot
    know which it saw before the crash), then returned."""
    if on_outcome is not None and not driver._closed:
        for c in outcomes:
            call = Call(c.id, c.tool)
            for o in c.entries:
                try:
                    on_outcome(o, call)
                except Exception:
                    pass  # a host's hook must not break the driver
    return outcomes


async def _done(outcomes: list[CallOutcome]) -> list[CallOutcome]:
    return outcomes


async def run_batch(scheduler: Scheduler, calls: Sequence[Call], execute: Execute, decide: Optional[Decide] = None) -> list[CallOutcome]:
    """`Driver.of(scheduler).run(calls, execute, decide=decide)`: one batch on the
    scheduler's driver (made on first use)."""
    return await Driver.of(scheduler).run(calls, execute, decide=decide)
