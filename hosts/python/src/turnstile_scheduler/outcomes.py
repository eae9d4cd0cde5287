"""What the driver reports: one `CallOutcome` per call, one `EntryOutcome` per entry (the outcome
model shared with the JavaScript package), and `Running` for executions in flight."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Optional

from .types import Reason


class OutcomeStatus(str, Enum):
    """How an entry ended (`EntryOutcome.status`)."""

    OK = "ok"
    """Its execution returned `value`."""
    FAILED = "failed"
    """Its execution raised `error`, or `execute` raised instead of returning an awaitable, or
    returned something not awaitable, or it ran past `execution_timeout` (TimeoutError)."""
    CANCELLED = "cancelled"
    """Its execution had started and its batch was cancelled before it ended; whatever it
    returned (`value`) or raised (`error`, None for the cancellation itself) is kept."""
    SETTLED = "settled"
    """It never ran, or stopped being needed: `reason` says why (rejected, skipped, failed
    before running, cancelled, stopped after a failed operation, interrupted, rate limited past
    its key's retries: then `error` is the last `RateLimited` its execution raised), and
    `message` says it as the sentence to hand the model as the call's result."""


@dataclass(eq=True, slots=True)
class EntryOutcome:
    """How one entry ended. `entry` is its number, `label` `id` or `id#i`. `value` goes with
    OK (and maybe CANCELLED), `error` with FAILED (and maybe CANCELLED), `reason` and
    `message` with SETTLED: `message` is the component's sentence for the reason
    (`explain(label, reason)`, "not run: the batch was cancelled"), the same text the
    JavaScript package gives. An entry that ended before a restart (`Driver.resume`) has the
    value saved in its snapshot, or its error as a `RestoredError`."""

    entry: int
    label: str
    status: OutcomeStatus
    value: Any = None
    error: Optional[BaseException] = None
    reason: Optional[Reason] = None
    message: Optional[str] = None


@dataclass(eq=True, slots=True)
class CallOutcome:
    """One call's outcome: its entries' outcomes in operation order."""

    id: str
    tool: str
    entries: list[EntryOutcome]


@dataclass(frozen=True)
class Running:
    """An execution in flight (`Driver.running`): since when (`loop.time()`), and whether its
    task was asked to stop (batch cancelled or timed out) and has not yet."""

    entry: int
    label: str
    batch: int
    since: float
    cancel_requested: bool
