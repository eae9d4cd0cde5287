"""The asyncio driver with real concurrency: order within a key, a key shared across tools,
cancellation mid-batch, an execute that raises, questions, and independent instances."""

from __future__ import annotations

import asyncio

import pytest

from turnstile import Call, ConfigError, Instance, Policy, Scheduler, TurnstileError, run_batch
from turnstile.types import Reason

CONFIG = """
[conversation.tools.rfd_draft]
concurrency = { key = "rfd" }
[conversation.tools.rfd_renumber]
concurrency = { key = "rfd" }
[conversation.tools.github_issues]
concurrency = { key = "github", limit = 2 }
[conversation.tools.github_pulls]
concurrency = { key = "github", limit = 2 }
[conversation.tools.fs_delete_file]
concurrency = 1
fan_out = { on_error = "stop" }
[conversation.tools.read]
fan_out = true
"""


def scheduler(instance: Instance | None = None) -> Scheduler:
    return Scheduler(Policy.resolve([("test", CONFIG)], instance=instance or Instance()))


class Recorder:
    def __init__(self, durations: dict[str, float] | None = None) -> None:
        self.durations = durations or {}
        self.starts: list[str] = []
        self.now = 0
        self.peak = 0

    async def __call__(self, x) -> str:
        self.starts.append(x.entry)
        self.now += 1
        self.peak = max(self.peak, self.now)
        await asyncio.sleep(self.durations.get(x.entry, 0.005))
        self.now -= 1
        return f"{x.entry} done"


def test_unkeyed_calls_run_concurrently() -> None:
    rec = Recorder({f"r{i}": 0.03 for i in range(4)})
    calls = [Call(f"r{i}", "read") for i in range(4)]
    outcomes = asyncio.run(run_batch(scheduler(), calls, rec))
    assert rec.peak == 4
    assert [o.entries[0].value for o in outcomes] == [f"r{i} done" for i in range(4)]


def test_written_order_within_a_key() -> None:
    rec = Recorder({"n1": 0.03, "n2": 0.001, "n3": 0.02, "d1": 0.001, "d2": 0.01})
    calls = [Call("n1", "rfd_renumber"), Call("n2", "rfd_renumber"), Call("n3", "rfd_renumber"), Call("d1", "rfd_draft"), Call("d2", "rfd_draft")]
    outcomes = asyncio.run(run_batch(scheduler(), calls, rec))
    assert rec.starts == ["n1", "n2", "n3", "d1", "d2"]
    assert rec.peak == 1
    assert [o.id for o in outcomes] == ["n1", "n2", "n3", "d1", "d2"]


def test_a_key_shared_by_two_tools() -> None:
    rec = Recorder({"i1": 0.03, "p1": 0.03})
    ids = ["i1", "p1", "i2", "p2", "i3", "p3"]
    calls = [Call(i, "github_issues" if i[0] == "i" else "github_pulls") for i in ids]
    asyncio.run(run_batch(scheduler(), calls, rec))
    assert rec.peak == 2
    assert rec.starts == ids


def test_cancelling_mid_batch() -> None:
    seen: list[str] = []

    async def execute(x) -> str:
        seen.append(x.entry)
        await asyncio.sleep(10)
        return "never"

    async def main():
        sched = scheduler()
        task = asyncio.ensure_future(run_batch(sched, [Call(f"n{i}", "rfd_renumber") for i in (1, 2, 3)], execute))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The scheduler saw every end: a new batch on the same key starts at once.
        started: list[str] = []

        async def quick(x) -> None:
            started.append(x.entry)

        await run_batch(sched, [Call("after", "rfd_draft")], quick)
        return started, sched.inspect(1)

    started, statuses = asyncio.run(main())
    assert seen == ["n1"]
    assert started == ["after"]
    assert [s.state for s in statuses] == ["ended-failed", "cancelled", "cancelled"]


def test_an_execute_that_raises_is_a_failure() -> None:
    async def execute(x) -> str:
        if x.entry == "d#0":
            raise OSError("disk full")
        return "ok"

    calls = [Call("d", "fs_delete_file", 3), Call("e", "fs_delete_file")]
    d, e = asyncio.run(run_batch(scheduler(), calls, execute))
    assert d.entries[0].status == "failed" and str(d.entries[0].error) == "disk full"
    assert [x.reason for x in d.entries[1:]] == [Reason("stopped", 1), Reason("stopped", 1)]
    assert e.entries[0].status == "ok"


def test_rejections_and_questions() -> None:
    order: list[str] = []

    async def execute(x) -> None:
        order.append(f"start {x.entry}")
        if x.entry == "n2":
            async with x.question():
                await asyncio.sleep(0.01)
            order.append("answered")
        order.append(f"end {x.entry}")

    async def decide(entry: str, call: Call) -> str:
        return "reject" if entry == "n1" else "approve"

    calls = [Call(f"n{i}", "rfd_renumber") for i in (1, 2, 3)]
    outcomes = asyncio.run(run_batch(scheduler(), calls, execute, decide=decide))
    assert outcomes[0].entries[0].reason == Reason("rejected")
    assert order == ["start n2", "answered", "end n2", "start n3", "end n3"]


def test_two_batches_share_a_scheduler() -> None:
    rec = Recorder()

    async def main():
        sched = scheduler()
        return await asyncio.gather(
            run_batch(sched, [Call("a1", "rfd_draft"), Call("a2", "rfd_draft")], rec),
            run_batch(sched, [Call("b1", "rfd_renumber")], rec),
        )

    asyncio.run(main())
    assert rec.peak == 1
    assert rec.starts == ["a1", "a2", "b1"]


def test_independent_instances_and_typed_errors() -> None:
    one, two = scheduler(), scheduler()
    assert one.submit_batch([Call("x", "t")]) == 1
    assert two.submit_batch([Call("x", "t")]) == 1
    with pytest.raises(TurnstileError) as e:
        one.submit_batch([Call("x", "t")])
    assert e.value.code == "duplicate-id"
    with pytest.raises(ConfigError) as c:
        Policy.resolve([("bad.toml", '[conversation.tools.t]\nconcurrency = "2"\n')])
    d = c.value.diagnostics[0]
    assert (d.code, d.labels[0].span.line, d.labels[0].span.layer_name) == ("concurrency-type", 2, "bad.toml")
    assert "bad.toml:2" in d.rendered
