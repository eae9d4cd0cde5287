"""What the driver reports to `Driver(scheduler, on_event=...)` (the JS package's `onEvent`):
one event per fact of its own round, called synchronously after the step's actions were
applied. Facts only: the wait's kind, its key and the `why` sentence are the component's
(`Scheduler.inspect`), the times the driver's clock (`Driver.now()`, milliseconds).

- `WaitEvent`: an approved entry that did not start in the step that approved it, or whose wait
  changed kind or key since its last wait event (compared once per step, for the entries of
  the batches that step touched; at most one per entry per step).
- `StartEvent`: an execution starts (a re-run after a rate limit too). `waited_ms` is the time
  since the entry was approved (a re-run: since its rate-limited end); `wait` the last wait it
  had (None when it never waited).
- `EndEvent`: an execution's end as the step took it (`status` 'ok', 'failed', 'rate-limited'
  or 'cancelled'; `retry_after_ms` for a rate limit).
- `SettledEvent`: an entry the component settled (`reason`, and its sentence `message`).

Every event has the entry's number, its `label` (its call id, `id#i` for an operation), its
`tool`, its `batch`, `at_ms` (the driver's clock) and its `keys` (`EntryStatus.keys`).
`turnstile_scheduler.otel.otel_events()` turns them into OpenTelemetry spans and metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Optional, Union

from .types import (
    BatchNotApproved,
    Behind,
    KeyFull,
    KeyPaused,
    KeySpacing,
    PermitGranted,
    PermitRequested,
    Reason,
    RetryAt,
    Wait,
)

EndStatus = Literal["ok", "failed", "rate-limited", "cancelled"]


@dataclass(frozen=True)
class _Event:
    """What every event says: the entry (its number, `id` or `id#i` label, tool, batch), when
    (`at_ms`, the driver's clock) and the keys it takes (the component's, from `inspect`)."""

    entry: int
    label: str
    tool: str
    batch: int
    at_ms: int
    keys: tuple[str, ...]


@dataclass(frozen=True)
class WaitEvent(_Event):
    """An approved entry waits (or its wait changed kind or key): `wait` and `why` as the
    component's `inspect` says them."""

    wait: Wait
    why: str
    type: Literal["wait"] = field(default="wait", init=False)


@dataclass(frozen=True)
class StartEvent(_Event):
    """An execution starts: `waited_ms` since its approval (a re-run: since its rate-limited
    end), `wait` the last wait it had (None: it never waited)."""

    waited_ms: int
    wait: Optional[Wait] = None
    type: Literal["start"] = field(default="start", init=False)


@dataclass(frozen=True)
class EndEvent(_Event):
    """An execution ended, `duration_ms` after its start; `retry_after_ms` is how long its key
    (or the entry) waits after a rate limit (None for every other status)."""

    status: EndStatus
    duration_ms: int
    retry_after_ms: Optional[int] = None
    type: Literal["end"] = field(default="end", init=False)


@dataclass(frozen=True)
class SettledEvent(_Event):
    """An entry the component settled, with its reason and the component's sentence."""

    reason: Reason
    message: str
    type: Literal["settled"] = field(default="settled", init=False)


DriverEvent = Union[WaitEvent, StartEvent, EndEvent, SettledEvent]
OnEvent = Callable[[DriverEvent], None]

_WAIT_KINDS: dict[type, str] = {
    BatchNotApproved: "batch-not-approved",
    KeyFull: "key-full",
    Behind: "behind",
    KeyPaused: "key-paused",
    KeySpacing: "key-spacing",
    RetryAt: "retry-at",
    PermitRequested: "permit-requested",
    PermitGranted: "permit-granted",
}


def wait_kind(wait: Wait) -> str:
    """A wait's kind as the JS package names it (`Wait.kind`): 'key-full', 'key-paused',
    'key-spacing', 'behind', 'retry-at', 'permit-requested', 'permit-granted' or
    'batch-not-approved'."""
    return _WAIT_KINDS[type(wait)]


def wait_key(wait: Wait) -> Optional[str]:
    """The key a wait names (None for 'batch-not-approved' and 'retry-at')."""
    return getattr(wait, "key", None)
