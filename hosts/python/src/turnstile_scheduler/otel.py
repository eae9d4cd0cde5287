"""OpenTelemetry for the driver's events (`pip install "turnstile-scheduler[otel]"`).

```python
from turnstile_scheduler.otel import otel_events

driver = Driver(Scheduler(policy), on_event=otel_events())      # or Gate(policy, on_event=...)
```

`otel_events(tracer=None, meter=None)` returns an `on_event` handler (module
`turnstile_scheduler.events`) that records, with the global tracer and meter provider by
default (`trace.get_tracer("turnstile_scheduler")`, `metrics.get_meter("turnstile_scheduler")`):

- a span `wait_for {tool}` (kind INTERNAL) for each execution that started after a wait the
  component reported (a `WaitEvent`), from its approval (or its rate-limited end) to its
  start, with `gen_ai.operation.name` = "wait_for", `gen_ai.tool.name`, `gen_ai.tool.call.id`
  (the label), `turnstile.key` (its first key), `turnstile.keys`, `turnstile.wait.reason` (the
  last wait's kind: "key-full", "key-paused", "key-spacing", "behind", "retry-at",
  "permit-requested", "permit-granted" or "batch-not-approved") and `turnstile.wait.ms`;
- metrics, one data point per key of the entry (attribute `turnstile.key`; none for an entry
  without keys): the histogram `turnstile.wait.duration` (ms, with `turnstile.wait.reason`
  when it waited) on every start, the up-down counters `turnstile.running` and
  `turnstile.waiting`, and the counters `turnstile.rate_limited`, `turnstile.retries` (a start
  after a rate-limited end) and `turnstile.settlements` (with `turnstile.settle.reason`).

The span's ends are the driver's times moved onto the tracer's clock: the start is the moment
the event is handled (`time.time_ns()`), the approval `waited_ms` before it. One handler per
driver (it keeps each waiting or running entry's state by batch and entry number).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

try:
    from opentelemetry import metrics, trace
except ImportError as e:  # pragma: no cover - exercised without the extra
    raise ImportError(
        'turnstile_scheduler.otel needs OpenTelemetry: pip install "turnstile-scheduler[otel]" (opentelemetry-api)'
    ) from e

from .events import DriverEvent, EndEvent, SettledEvent, StartEvent, WaitEvent, wait_kind

__all__ = ["otel_events"]

_NAME = "turnstile_scheduler"


def _points(keys: tuple[str, ...], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """One attribute set per key (`turnstile.key`), or one without a key."""
    if not keys:
        return [dict(extra)]
    return [{"turnstile.key": k, **extra} for k in keys]


def otel_events(*, tracer: Optional[Any] = None, meter: Optional[Any] = None) -> Callable[[DriverEvent], None]:
    """An `on_event` handler recording OpenTelemetry spans and metrics (see the module doc)."""
    tracer = trace.get_tracer(_NAME) if tracer is None else tracer
    meter = metrics.get_meter(_NAME) if meter is None else meter
    wait_duration = meter.create_histogram("turnstile.wait.duration", unit="ms", description="How long an entry waited from its approval (or rate-limited end) to its start")
    running = meter.create_up_down_counter("turnstile.running", unit="{execution}", description="Executions running")
    waiting = meter.create_up_down_counter("turnstile.waiting", unit="{entry}", description="Approved entries waiting to start")
    rate_limited = meter.create_counter("turnstile.rate_limited", unit="{execution}", description="Executions that ended rate limited")
    retries = meter.create_counter("turnstile.retries", unit="{execution}", description="Executions started again after a rate limit")
    settlements = meter.create_counter("turnstile.settlements", unit="{entry}", description="Entries the scheduler settled")
    # (batch, entry) -> its state: "waiting" (counted in turnstile.waiting), "running", or
    # "limited" (ended rate limited, not yet waiting again). A waiting entry may also be limited.
    waits: set[tuple[int, int]] = set()
    runs: set[tuple[int, int]] = set()
    limited: set[tuple[int, int]] = set()

    def add(counter: Any, n: int, keys: tuple[str, ...], extra: Optional[dict[str, Any]] = None) -> None:
        for attrs in _points(keys, extra or {}):
            counter.add(n, attrs)

    def on_event(e: DriverEvent) -> None:
        who = (e.batch, e.entry)
        if isinstance(e, WaitEvent):
            if who not in waits:
                waits.add(who)
                add(waiting, 1, e.keys)
        elif isinstance(e, StartEvent):
            if who in waits:
                waits.discard(who)
                add(waiting, -1, e.keys)
            runs.add(who)
            add(running, 1, e.keys)
            if who in limited:
                limited.discard(who)
                add(retries, 1, e.keys)
            reason = None if e.wait is None else wait_kind(e.wait)
            extra = {} if reason is None else {"turnstile.wait.reason": reason}
            for attrs in _points(e.keys, extra):
                wait_duration.record(e.waited_ms, attrs)
            # Only a start the component saw waiting (a wait event): not the millisecond or two
            # between a release and its start.
            if e.wait is not None:
                end_ns = time.time_ns()
                start_ns = end_ns - e.waited_ms * 1_000_000
                attributes: dict[str, Any] = {
                    "gen_ai.operation.name": "wait_for",
                    "gen_ai.tool.name": e.tool,
                    "gen_ai.tool.call.id": e.label,
                    "turnstile.keys": list(e.keys),
                    "turnstile.wait.ms": e.waited_ms,
                }
                if e.keys:
                    attributes["turnstile.key"] = e.keys[0]
                if reason is not None:
                    attributes["turnstile.wait.reason"] = reason
                span = tracer.start_span(f"wait_for {e.tool}", kind=trace.SpanKind.INTERNAL, attributes=attributes, start_time=start_ns)
                span.end(end_time=end_ns)
        elif isinstance(e, EndEvent):
            if who in runs:
                runs.discard(who)
                add(running, -1, e.keys)
            if e.status == "rate-limited":
                limited.add(who)
                add(rate_limited, 1, e.keys)
        elif isinstance(e, SettledEvent):
            if who in waits:
                waits.discard(who)
                add(waiting, -1, e.keys)
            if who in runs:  # given up on after its abort grace: it never reports its end
                runs.discard(who)
                add(running, -1, e.keys)
            limited.discard(who)
            add(settlements, 1, e.keys, {"turnstile.settle.reason": e.reason.kind.value})

    return on_event
