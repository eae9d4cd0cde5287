"""Telemetry: the driver's `on_event` (wait, start, end, settled events from its own steps and
the component's `inspect`), `Driver.inspect()` for live batches, and the OpenTelemetry handler
(`turnstile_scheduler.otel`). Failure paths first."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

import vloop
from turnstile_scheduler import (
    Call,
    Driver,
    DriverEvent,
    EndEvent,
    EntryState,
    Gate,
    KeyFull,
    OutcomeStatus,
    Policy,
    RateLimited,
    ReasonKind,
    Scheduler,
    SettledEvent,
    StartEvent,
    WaitEvent,
)
from turnstile_scheduler.events import wait_kind

CONFIG = """
[conversation.tools.one]
concurrency = { key = "solo", limit = 1 }
[conversation.tools.flaky]
concurrency = { key = "api", limit = 1, retries = 2 }
[conversation.tools.pair]
concurrency = [{ key = "solo" }, { key = "other", limit = 3 }]
[conversation.tools.many]
concurrency = { key = "solo", limit = 1 }
fan_out = true
[conversation.tools.free]
"""


def policy() -> Policy:
    return Policy.resolve([("test", CONFIG)])


def counted(sched: Scheduler) -> list[int]:
    """Counts `sched.inspect` calls (the driver calls it through the instance)."""
    calls = [0]
    inner = sched.inspect

    def inspect(batch: int):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return inner(batch)

    sched.inspect = inspect  # type: ignore[method-assign]
    return calls


def sleeper(seconds: float):  # type: ignore[no-untyped-def]
    async def execute(x) -> str:  # type: ignore[no-untyped-def]
        await asyncio.sleep(seconds)
        return x.label

    return execute


def brief(events: list[DriverEvent]) -> list[tuple]:
    out: list[tuple] = []
    for e in events:
        if isinstance(e, StartEvent):
            out.append(("start", e.label, e.at_ms, e.waited_ms))
        elif isinstance(e, WaitEvent):
            out.append(("wait", e.label, e.at_ms, wait_kind(e.wait)))
        elif isinstance(e, EndEvent):
            out.append(("end", e.label, e.at_ms, e.status))
        else:
            out.append(("settled", e.label, e.at_ms, e.reason.kind.value))
    return out


# -- failure paths ---------------------------------------------------------------------------------


def test_a_raising_on_event_changes_nothing() -> None:
    calls = [Call(f"c{i}", "one") for i in (1, 2, 3)] + [Call("f", "free")]

    async def main(on_event):  # type: ignore[no-untyped-def]
        with Driver(Scheduler(policy()), on_event=on_event) as d:
            order: list[str] = []

            async def execute(x) -> str:  # type: ignore[no-untyped-def]
                order.append(f"{x.label}@{d.now()}")
                await asyncio.sleep(0.01)
                return x.label

            outcomes = await d.run(calls, execute)
            return [(o.entries[0].status, o.entries[0].value) for o in outcomes], order

    seen: list[DriverEvent] = []

    def boom(e: DriverEvent) -> None:
        seen.append(e)
        raise RuntimeError("a broken hook")

    assert vloop.run(main(boom)) == vloop.run(main(None))
    assert len(seen) > 0  # called, and what it raised was ignored
    with pytest.raises(TypeError, match="on_event must be callable"):
        Driver(Scheduler(policy()), on_event="no")  # type: ignore[arg-type]


def test_without_on_event_the_driver_never_inspects() -> None:
    async def main(with_events: bool) -> int:
        sched = Scheduler(policy())
        n = counted(sched)
        with Driver(sched, on_event=(lambda e: None) if with_events else None) as d:
            await d.run([Call(f"c{i}", "one") for i in (1, 2, 3)], sleeper(0.01))
        return n[0]

    assert vloop.run(main(False)) == 0
    assert vloop.run(main(True)) > 0


def test_a_cancelled_batch_gives_settled_events() -> None:
    async def main():  # type: ignore[no-untyped-def]
        events: list[DriverEvent] = []
        with Driver(Scheduler(policy()), on_event=events.append) as d:
            task = asyncio.ensure_future(d.run([Call(f"c{i}", "one") for i in (1, 2, 3)], sleeper(10)))
            await asyncio.sleep(0.02)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        return events

    events = vloop.run(main())
    assert brief(events) == [
        ("start", "c1", 0, 0),
        ("wait", "c2", 0, "key-full"),
        ("wait", "c3", 0, "behind"),
        ("settled", "c2", 20, "cancelled"),
        ("settled", "c3", 20, "cancelled"),
        ("end", "c1", 20, "cancelled"),
    ]
    settled = [e for e in events if isinstance(e, SettledEvent)]
    assert all(e.keys == ("solo",) and e.message and e.type == "settled" for e in settled)
    end = events[-1]
    assert isinstance(end, EndEvent) and end.duration_ms == 20 and end.retry_after_ms is None


def test_a_rate_limited_run_ends_rate_limited_then_starts_again() -> None:
    async def main():  # type: ignore[no-untyped-def]
        events: list[DriverEvent] = []
        tries: list[int] = []

        async def execute(x) -> str:  # type: ignore[no-untyped-def]
            tries.append(1)
            await asyncio.sleep(0.01)
            if len(tries) == 1:
                raise RateLimited(0.05)
            return "ok"

        with Driver(Scheduler(policy()), on_event=events.append) as d:
            outcomes = await d.run([Call("r", "flaky")], execute)
        return events, outcomes

    events, outcomes = vloop.run(main())
    assert outcomes[0].entries[0].status is OutcomeStatus.OK
    assert [e.type for e in events] == ["start", "end", "wait", "start", "end"]
    first, limited, wait, again, end = events
    assert isinstance(limited, EndEvent) and limited.status == "rate-limited"
    assert (limited.at_ms, limited.duration_ms, limited.retry_after_ms) == (10, 10, 50)
    assert isinstance(wait, WaitEvent) and wait.keys == ("api",) and wait.why
    assert wait_kind(wait.wait) in ("key-paused", "retry-at")
    # waited_ms of a re-run counts from its rate-limited end.
    assert isinstance(again, StartEvent) and (again.at_ms, again.waited_ms) == (60, 50) and again.wait == wait.wait
    assert isinstance(end, EndEvent) and end.status == "ok" and end.duration_ms == 10


# -- what the events say ---------------------------------------------------------------------------


def test_a_limit_one_key_with_three_calls() -> None:
    async def main():  # type: ignore[no-untyped-def]
        events: list[DriverEvent] = []
        with Driver(Scheduler(policy()), on_event=events.append) as d:
            await d.run([Call(f"c{i}", "one") for i in (1, 2, 3)], sleeper(0.01))
        return events

    events = vloop.run(main())
    assert brief(events) == [
        ("start", "c1", 0, 0),
        ("wait", "c2", 0, "key-full"),
        ("wait", "c3", 0, "behind"),
        ("end", "c1", 10, "ok"),
        ("start", "c2", 10, 10),
        ("wait", "c3", 10, "key-full"),  # its wait changed kind: behind c2 -> k full
        ("end", "c2", 20, "ok"),
        ("start", "c3", 20, 20),
        ("end", "c3", 20 + 10, "ok"),
    ]
    assert all(e.keys == ("solo",) and e.tool == "one" and e.batch == events[0].batch for e in events)
    c2_wait, c2_start = events[1], events[4]
    assert isinstance(c2_wait, WaitEvent) and c2_wait.wait == KeyFull("solo", 1, ["c1"]) and "solo" in c2_wait.why
    assert isinstance(c2_start, StartEvent) and c2_start.wait == c2_wait.wait
    with pytest.raises(dataclasses.FrozenInstanceError):
        c2_start.waited_ms = 0  # type: ignore[misc]


def test_a_call_that_starts_at_once_reports_its_keys() -> None:
    async def main():  # type: ignore[no-untyped-def]
        events: list[DriverEvent] = []
        seen = []
        with Driver(Scheduler(policy()), on_event=events.append) as d:

            async def execute(x) -> None:  # type: ignore[no-untyped-def]
                await asyncio.sleep(0)
                seen.append(d.inspect())

            await d.run([Call("p", "pair"), Call("f", "free")], execute)
        return events, seen

    events, seen = vloop.run(main())
    starts = [e for e in events if isinstance(e, StartEvent)]
    assert [(e.label, e.keys, e.waited_ms, e.wait) for e in starts] == [("p", ("solo", "other"), 0, None), ("f", (), 0, None)]
    assert not [e for e in events if isinstance(e, WaitEvent)]
    # Driver.inspect: the live batch, its running entries with their keys.
    live = seen[0]
    assert len(live) == 1
    running = {s.label: s for s in live[0].entries}
    assert running["p"].state is EntryState.RUNNING and running["p"].keys == ("solo", "other")
    assert running["f"].state is EntryState.RUNNING and running["f"].keys == ()


def test_two_batches_and_fan_out_labels() -> None:
    async def main():  # type: ignore[no-untyped-def]
        events: list[DriverEvent] = []
        with Driver(Scheduler(policy()), on_event=events.append) as d:
            a = asyncio.ensure_future(d.run([Call("a", "many", operations=2)], sleeper(0.01)))
            await asyncio.sleep(0.005)
            await d.run([Call("b", "one")], sleeper(0.01))
            await a
        return events

    events = vloop.run(main())
    assert brief(events) == [
        ("start", "a#0", 0, 0),
        ("wait", "a#1", 0, "key-full"),
        ("wait", "b", 5, "behind"),
        ("end", "a#0", 10, "ok"),
        ("start", "a#1", 10, 10),
        ("end", "a#1", 20, "ok"),
        # b's batch was not touched by the step that started a#1: its wait is compared only when
        # a step does something for its batch (here: its start), so it keeps "behind".
        ("start", "b", 20, 15),
        ("end", "b", 30, "ok"),
    ]


def test_the_gate_passes_on_event_to_its_driver() -> None:
    async def main():  # type: ignore[no-untyped-def]
        events: list[DriverEvent] = []
        gate = Gate(policy(), on_event=events.append)
        try:
            async def run(args):  # type: ignore[no-untyped-def]
                await asyncio.sleep(0.01)
                return args

            await asyncio.gather(gate.call("one", "g1", None, run), gate.call("one", "g2", None, run))
        finally:
            gate.close()
        return events

    assert brief(vloop.run(main())) == [
        ("start", "g1", 0, 0),
        ("wait", "g2", 0, "key-full"),
        ("end", "g1", 10, "ok"),
        ("start", "g2", 10, 10),
        ("end", "g2", 20, "ok"),
    ]

    async def refused() -> None:
        with Driver(Scheduler(policy())) as d:
            with pytest.raises(ValueError, match="on_event belongs to the driver"):
                Gate(d, on_event=lambda e: None)
            with pytest.raises(ValueError, match="has a driver already"):
                Gate(d.scheduler, on_event=lambda e: None)

    vloop.run(refused())


# -- OpenTelemetry ---------------------------------------------------------------------------------


def test_otel_spans_and_metrics() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    from turnstile_scheduler.otel import otel_events

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    handler = otel_events(tracer=provider.get_tracer("test"), meter=meters.get_meter("test"))

    async def main() -> None:
        tries: list[int] = []

        async def execute(x) -> str:  # type: ignore[no-untyped-def]
            if x.label == "r":
                tries.append(1)
                if len(tries) == 1:
                    raise RateLimited(0.05)
            await asyncio.sleep(0.01)
            return x.label

        with Driver(Scheduler(policy()), on_event=handler) as d:
            await d.run([Call("c1", "one"), Call("c2", "one"), Call("r", "flaky")], execute)
            task = asyncio.ensure_future(d.run([Call("x1", "one"), Call("x2", "one")], sleeper(10)))
            await asyncio.sleep(0.02)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    vloop.run(main())

    spans = {s.attributes["gen_ai.tool.call.id"]: s for s in exporter.get_finished_spans()}
    assert sorted(spans) == ["c2", "r"]  # c1, x1 started at once; x2 never started
    c2 = spans["c2"]
    assert c2.name == "wait_for one" and c2.kind is SpanKind.INTERNAL
    assert dict(c2.attributes) == {
        "gen_ai.operation.name": "wait_for",
        "gen_ai.tool.name": "one",
        "gen_ai.tool.call.id": "c2",
        "turnstile.key": "solo",
        "turnstile.keys": ("solo",),
        "turnstile.wait.reason": "key-full",
        "turnstile.wait.ms": 10,
    }
    assert c2.end_time - c2.start_time == 10_000_000
    r = spans["r"]
    assert r.attributes["turnstile.wait.ms"] == 50 and r.attributes["turnstile.key"] == "api"
    assert r.attributes["turnstile.wait.reason"] in ("key-paused", "retry-at")
    assert r.end_time - r.start_time == 50_000_000

    points: dict[str, list] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                points[m.name] = [(dict(p.attributes), p) for p in m.data.data_points]
    assert points["turnstile.wait.duration"]
    hist = {(a.get("turnstile.key"), a.get("turnstile.wait.reason")): p for a, p in points["turnstile.wait.duration"]}
    assert hist[("solo", "key-full")].count == 1 and hist[("solo", "key-full")].sum == 10
    assert hist[("solo", None)].count == 2  # c1 and x1 started at once
    assert hist[("api", None)].count == 1 and hist[("api", hist_reason := r.attributes["turnstile.wait.reason"])].sum == 50
    assert hist_reason

    def value(name: str, **attrs: str) -> int:
        want = {k.replace("_", "."): v for k, v in attrs.items()}
        return sum(p.value for a, p in points.get(name, []) if all(a.get(k) == v for k, v in want.items()))

    assert value("turnstile.running", turnstile_key="solo") == 0
    assert value("turnstile.running", turnstile_key="api") == 0
    assert value("turnstile.waiting", turnstile_key="solo") == 0
    assert value("turnstile.rate_limited", turnstile_key="api") == 1
    assert value("turnstile.retries", turnstile_key="api") == 1
    settle = {a["turnstile.settle.reason"]: p.value for a, p in points["turnstile.settlements"]}
    assert settle == {ReasonKind.CANCELLED.value: 1}  # x2
