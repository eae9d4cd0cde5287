"""The asyncio driver with real concurrency: order within a key, a key shared across tools,
cancellation mid-batch, an execute that raises, questions, batches sharing a scheduler, one
`step` per loop turn, a refused input that fails only its own batch, and call ids reused
across thousands of batches."""

from __future__ import annotations

import asyncio

import pytest

import vloop
from turnstile_scheduler import (
    Call,
    ConfigError,
    InputErrorCode,
    InputKind,
    Instance,
    OutcomeStatus,
    Policy,
    Reason,
    ReasonKind,
    RefusedInputError,
    Scheduler,
    SubmitError,
    SubmitErrorCode,
    run_batch,
)
from turnstile_scheduler.driver import _ANSWER

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


def counting(sched: Scheduler) -> list[dict]:
    """Records the inputs of every `step` the driver makes (call before the driver is made)."""
    calls: list[dict] = []
    step = sched._step

    def recording(resource, inputs):
        calls.append({k: list(getattr(inputs, k)) for k in ("approve", "settle", "ask", "answer", "ok", "failed", "cancel")})
        return step(resource, inputs)

    sched._step = recording  # type: ignore[method-assign]
    return calls


class Recorder:
    def __init__(self, durations: dict[str, float] | None = None) -> None:
        self.durations = durations or {}
        self.starts: list[str] = []
        self.now = 0
        self.peak = 0

    async def __call__(self, x) -> str:
        self.starts.append(x.label)
        self.now += 1
        self.peak = max(self.peak, self.now)
        await asyncio.sleep(self.durations.get(x.label, 0.005))
        self.now -= 1
        return f"{x.label} done"


def test_unkeyed_calls_run_concurrently() -> None:
    rec = Recorder({f"r{i}": 0.03 for i in range(4)})
    calls = [Call(f"r{i}", "read") for i in range(4)]
    outcomes = vloop.run(run_batch(scheduler(), calls, rec))
    assert rec.peak == 4
    assert [o.entries[0].value for o in outcomes] == [f"r{i} done" for i in range(4)]


def test_written_order_within_a_key() -> None:
    rec = Recorder({"n1": 0.03, "n2": 0.001, "n3": 0.02, "d1": 0.001, "d2": 0.01})
    calls = [Call("n1", "rfd_renumber"), Call("n2", "rfd_renumber"), Call("n3", "rfd_renumber"), Call("d1", "rfd_draft"), Call("d2", "rfd_draft")]
    outcomes = vloop.run(run_batch(scheduler(), calls, rec))
    assert rec.starts == ["n1", "n2", "n3", "d1", "d2"]
    assert rec.peak == 1
    assert [o.id for o in outcomes] == ["n1", "n2", "n3", "d1", "d2"]


def test_a_key_shared_by_two_tools() -> None:
    rec = Recorder({"i1": 0.03, "p1": 0.03})
    ids = ["i1", "p1", "i2", "p2", "i3", "p3"]
    calls = [Call(i, "github_issues" if i[0] == "i" else "github_pulls") for i in ids]
    vloop.run(run_batch(scheduler(), calls, rec))
    assert rec.peak == 2
    assert rec.starts == ids


def test_cancelling_mid_batch() -> None:
    seen: list[str] = []

    async def execute(x) -> str:
        seen.append(x.label)
        await asyncio.sleep(10)
        return "never"

    async def main():
        sched = scheduler()
        task = asyncio.ensure_future(run_batch(sched, [Call(f"n{i}", "rfd_renumber") for i in (1, 2, 3)], execute))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The scheduler saw every end: the batch retired, and a new batch on the same key
        # (reusing a call id of the cancelled one) starts at once.
        live = sched.unfinished().batches
        started: list[str] = []

        async def quick(x) -> None:
            started.append(x.label)

        await run_batch(sched, [Call("n1", "rfd_draft")], quick)
        return live, started

    live, started = vloop.run(main())
    assert seen == ["n1"]
    assert live == []
    assert started == ["n1"]


def test_an_execute_that_raises_is_a_failure() -> None:
    async def execute(x) -> str:
        if x.label == "d#0":
            raise OSError("disk full")
        return "ok"

    calls = [Call("d", "fs_delete_file", 3), Call("e", "fs_delete_file")]
    d, e = vloop.run(run_batch(scheduler(), calls, execute))
    assert d.entries[0].status is OutcomeStatus.FAILED and str(d.entries[0].error) == "disk full"
    assert [x.reason for x in d.entries[1:]] == [Reason(ReasonKind.STOPPED, 1), Reason(ReasonKind.STOPPED, 1)]
    assert [x.label for x in d.entries] == ["d#0", "d#1", "d#2"]
    assert e.entries[0].status is OutcomeStatus.OK


def test_rejections_and_questions() -> None:
    order: list[str] = []

    async def execute(x) -> None:
        order.append(f"start {x.label}")
        if x.label == "n2":
            async with x.question():
                await asyncio.sleep(0.01)
            order.append("answered")
        order.append(f"end {x.label}")

    async def decide(label: str, call: Call) -> str:
        return "reject" if label == "n1" else "approve"

    calls = [Call(f"n{i}", "rfd_renumber") for i in (1, 2, 3)]
    outcomes = vloop.run(run_batch(scheduler(), calls, execute, decide=decide))
    assert outcomes[0].entries[0].status is OutcomeStatus.SETTLED
    assert outcomes[0].entries[0].reason == Reason(ReasonKind.REJECTED)
    assert order == ["start n2", "answered", "end n2", "start n3", "end n3"]


def test_two_batches_share_a_scheduler_and_a_step() -> None:
    rec = Recorder()

    async def main():
        sched = scheduler()
        steps = counting(sched)
        await asyncio.gather(
            run_batch(sched, [Call("a1", "rfd_draft"), Call("a2", "rfd_draft")], rec),
            run_batch(sched, [Call("b1", "rfd_renumber")], rec),
        )
        return steps

    steps = vloop.run(main())
    assert rec.peak == 1
    assert rec.starts == ["a1", "a2", "b1"]
    # Both batches' approvals went out in one step.
    assert len(steps[0]["approve"]) == 3


def test_a_refused_input_fails_only_its_own_batch() -> None:
    """Batch A runs a1 (unkeyed) until told otherwise; batch B runs b1 then b2 on a key of
    limit 1. When b1 ends, an illegal input for A (an answer to a question a1 never asked) goes
    out in the same step as b1's end: A fails with the refusal, and b2 still starts."""

    async def main():
        sched = scheduler()
        steps = counting(sched)
        pump_of = lambda: sched._driver  # noqa: E731
        a1_entry: list[int] = []

        async def run_a(x) -> str:
            a1_entry.append(x.entry)
            await asyncio.sleep(10)  # until A is cancelled
            return "a1"

        async def run_b(x) -> str:
            if x.label == "b1":
                while not a1_entry:
                    await asyncio.sleep(0)
                driver = pump_of()
                a_batch = driver._owner[a1_entry[0]]
                driver._queue(_ANSWER, a1_entry[0], a_batch)  # illegal: a1 is not asking
            return x.label

        a = asyncio.ensure_future(run_batch(sched, [Call("a1", "read")], run_a))
        b = asyncio.ensure_future(run_batch(sched, [Call("b1", "rfd_draft"), Call("b2", "rfd_draft")], run_b))
        b_outcomes = await asyncio.wait_for(b, 5)
        with pytest.raises(RefusedInputError) as refused:
            await asyncio.wait_for(a, 5)
        return steps, b_outcomes, refused.value, sched, a1_entry[0]

    steps, b_outcomes, refused, sched, a1 = vloop.run(main())
    assert [o.entries[0].status for o in b_outcomes] == [OutcomeStatus.OK, OutcomeStatus.OK]
    assert refused.code is InputErrorCode.NOT_ASKING
    assert (refused.refused.input, refused.refused.index) == (InputKind.ANSWER, 0)
    # The illegal answer and b1's end went out together.
    assert any(s["answer"] == [a1] and len(s["ok"]) == 1 for s in steps)
    # A was cancelled (a1's execution with it) and retired; nothing is left.
    assert sched.unfinished().batches == []
    assert not sched._driver._owner and not sched._driver._batches


def test_five_thousand_batches_reuse_call_ids() -> None:
    """0.1 forbade reusing a call id; in 0.2 an id is free again once its batch retired."""

    async def execute(x) -> int:
        return x.operation or 0

    async def main():
        sched = scheduler()
        calls = [Call("call_0", "rfd_draft"), Call("call_1", "github_issues"), Call("call_2", "read", 2), Call("call_3", "fs_delete_file")]
        firsts = []
        for _ in range(5000):
            outcomes = await run_batch(sched, calls, execute)
            assert [e.status for o in outcomes for e in o.entries] == [OutcomeStatus.OK] * 5
            firsts.append(outcomes[0].entries[0].entry)
        return sched, firsts

    sched, firsts = vloop.run(main())
    # Numbers are never handed out twice.
    assert len(set(firsts)) == 5000 and firsts == sorted(firsts)
    assert sched.unfinished().batches == []
    assert not sched._driver._owner and not sched._driver._batches


def test_independent_instances_and_typed_errors() -> None:
    one, two = scheduler(), scheduler()
    assert one.submit([Call("x", "t")]) == two.submit([Call("x", "t")])
    with pytest.raises(SubmitError) as e:
        one.submit([Call("x", "t")])
    assert e.value.code is SubmitErrorCode.DUPLICATE_ID
    with pytest.raises(ConfigError) as c:
        Policy.resolve([("bad.toml", '[conversation.tools.t]\nconcurrency = "2"\n')])
    d = c.value.diagnostics[0]
    assert (d.code, d.labels[0].span.line, d.labels[0].span.layer_name) == ("concurrency-type", 2, "bad.toml")
    assert "bad.toml:2" in d.rendered


def test_a_refused_submit_raises_from_run_batch() -> None:
    async def main():
        sched = scheduler()
        with pytest.raises(SubmitError) as e:
            await run_batch(sched, [Call("x", "t"), Call("x", "t")], Recorder())
        return e.value.code

    assert vloop.run(main()) is SubmitErrorCode.DUPLICATE_ID
