"""The gate (`Gate.call`): failure paths first (settled calls raise CallSettledError with the
model's text, a run that raises fails only its call, cancelling a waiter withdraws its call and
never hangs its key, a cancelled running call, close, timeouts, a refused batch), then what
forms a batch (one loop turn, in arrival order) and per-call resolution."""

from __future__ import annotations

import asyncio

import pytest

import vloop
from _adapters import policy
from turnstile_scheduler import (
    CallSettledError,
    DisposedError,
    Driver,
    Gate,
    Reason,
    ReasonKind,
    Scheduler,
    SubmitError,
    TurnstileError,
    explain,
)

class Log:
    """Records start and end of every run, and the peak in flight per tool key."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}

    def tool(self, name: str, key: str, seconds: float = 0.01):
        async def run(arg: str) -> str:
            self.events.append(f"start {name} {arg}")
            self.running[key] = self.running.get(key, 0) + 1
            self.peak[key] = max(self.peak.get(key, 0), self.running[key])
            try:
                await asyncio.sleep(seconds)
            finally:
                self.running[key] -= 1
                self.events.append(f"end {name} {arg}")
            return f"{name}({arg})"

        return run


def test_the_texts_are_the_components() -> None:
    # The component writes them (`explain`), so both packages say the same; these pin a few.
    assert explain("a", Reason(ReasonKind.REJECTED)) == "not run: the user rejected this call"
    assert explain("a", Reason(ReasonKind.CANCELLED)) == "not run: the batch was cancelled"
    assert explain("del#3", Reason(ReasonKind.STOPPED, 2)) == (
        "not run: stopped after del#1 failed (this tool stops a call's operations at the first failure)"
    )
    e = CallSettledError("toolu_1", "rfd_draft", Reason(ReasonKind.REJECTED))
    assert isinstance(e, TurnstileError) and e.code is ReasonKind.REJECTED
    assert str(e) == e.message == explain("toolu_1", Reason(ReasonKind.REJECTED))
    assert str(CallSettledError("t", "x", Reason(ReasonKind.SKIPPED), "given")) == "given"


@pytest.mark.parametrize(
    "args, error",
    [
        ((1, Reason(ReasonKind.REJECTED)), TypeError),
        (("\ud800", Reason(ReasonKind.REJECTED)), ValueError),
        (("a", "rejected"), TypeError),
        (("a", Reason(ReasonKind.REJECTED, after=1)), ValueError),
        (("a", Reason(ReasonKind.STOPPED)), TypeError),
        (("a", Reason(ReasonKind.RATE_LIMITED, retries=-1)), ValueError),
    ],
)
def test_explain_checks_what_it_is_given(args, error) -> None:
    with pytest.raises(error):
        explain(*args)


def test_a_rejected_call_raises_at_once_and_the_others_run() -> None:
    async def main():
        log = Log()
        decide = lambda label, call: "reject" if label == "b" else "approve"  # noqa: E731
        async with Gate(policy(), decide=decide) as gate:
            slow = log.tool("rfd_draft", "rfd", 0.05)
            a = asyncio.ensure_future(gate.call("rfd_draft", "a", "1", slow))
            b = asyncio.ensure_future(gate.call("rfd_draft", "b", "2", slow))
            with pytest.raises(CallSettledError) as e:
                await b
            assert not a.done(), "the rejection is known before the batch ends"
            assert e.value.reason == Reason(ReasonKind.REJECTED)
            assert str(e.value) == "not run: the user rejected this call"
            assert await a == "rfd_draft(1)"
        assert log.events == ["start rfd_draft 1", "end rfd_draft 1"]

    vloop.run(main())


@pytest.mark.parametrize("answer", ["raise", "yes"])
def test_a_decide_that_raises_or_answers_nonsense_fails_every_call_with_its_error(answer) -> None:
    # Not a sentence for the model (which would hide the host's bug): the error itself, for the
    # calls decided before it too (their batch is cancelled) and those after it.
    async def main():
        log = Log()

        def decide(label, call):
            if label != "b":
                return "approve"
            if answer == "raise":
                raise RuntimeError("decide is broken")
            return answer

        async with Gate(policy(), decide=decide) as gate:
            slow = log.tool("rfd_draft", "rfd", 0.05)
            calls = [asyncio.ensure_future(gate.call("rfd_draft", c, c, slow)) for c in "abc"]
            results = await asyncio.gather(*calls, return_exceptions=True)
        want = RuntimeError if answer == "raise" else ValueError
        assert all(type(r) is want for r in results), results
        assert all(r is results[0] for r in results), "one error, the one decide made"
        assert log.events == []

    vloop.run(main())


def test_a_run_that_raises_fails_only_its_call_and_frees_the_key() -> None:
    async def main():
        log = Log()

        async def broken(arg: str) -> str:
            raise ValueError("boom")

        async with Gate(policy()) as gate:
            ok = log.tool("rfd_draft", "rfd")
            results = await asyncio.gather(
                gate.call("rfd_draft", "a", "1", broken),
                gate.call("rfd_renumber", "b", "2", ok),
                return_exceptions=True,
            )
        assert isinstance(results[0], ValueError) and str(results[0]) == "boom"
        assert results[1] == "rfd_draft(2)"

    vloop.run(main())


def test_cancelling_a_queued_call_withdraws_it_and_never_hangs_the_key() -> None:
    async def main():
        log = Log()
        async with Gate(policy()) as gate:
            run = log.tool("rfd_draft", "rfd", 0.03)
            a = asyncio.ensure_future(gate.call("rfd_draft", "a", "1", run))
            b = asyncio.ensure_future(gate.call("rfd_draft", "b", "2", run))
            c = asyncio.ensure_future(gate.call("rfd_draft", "c", "3", run))
            await asyncio.sleep(0.01)  # a runs; b and c are parked behind it
            b.cancel()
            assert await a == "rfd_draft(1)"
            assert await c == "rfd_draft(3)"
            assert b.cancelled()
            # A later batch on the same key still runs.
            assert await gate.call("rfd_draft", "d", "4", run) == "rfd_draft(4)"
        assert log.events == ["start rfd_draft 1", "end rfd_draft 1", "start rfd_draft 3", "end rfd_draft 3", "start rfd_draft 4", "end rfd_draft 4"]

    vloop.run(main())


def test_cancelling_every_waiter_cancels_the_batch() -> None:
    async def main():
        gate = Gate(policy())
        run = Log().tool("rfd_draft", "rfd", 10)
        holder = asyncio.ensure_future(gate.call("rfd_draft", "x", "0", run))
        await asyncio.sleep(0.01)  # x holds the key for 10 s
        a = asyncio.ensure_future(gate.call("rfd_draft", "a", "1", run))
        b = asyncio.ensure_future(gate.call("rfd_draft", "b", "2", run))
        await asyncio.sleep(0.01)  # a and b are parked behind x, in a batch of their own
        assert len(gate._batches) == 2
        a.cancel()
        b.cancel()
        await asyncio.gather(a, b, return_exceptions=True)
        await asyncio.sleep(0.01)
        assert len(gate._batches) == 1, "the withdrawn batch is cancelled, not left parked behind x"
        assert [r.label for r in gate.driver.running()] == ["x"]
        holder.cancel()
        await gate.aclose()

    vloop.run(main())


def test_cancelling_a_running_call_cancels_its_run() -> None:
    async def main():
        log = Log()
        async with Gate(policy()) as gate:
            slow = log.tool("rfd_draft", "rfd", 10)
            fast = log.tool("rfd_draft", "rfd", 0.01)
            a = asyncio.ensure_future(gate.call("rfd_draft", "a", "1", slow))
            b = asyncio.ensure_future(gate.call("rfd_draft", "b", "2", fast))
            await asyncio.sleep(0.02)
            a.cancel()
            assert await b == "rfd_draft(2)"
            assert a.cancelled()
        assert log.events == ["start rfd_draft 1", "end rfd_draft 1", "start rfd_draft 2", "end rfd_draft 2"]

    vloop.run(main())


def test_close_cancels_queued_and_running_calls_and_refuses_new_ones() -> None:
    async def main():
        gate = Gate(policy())
        run = Log().tool("rfd_draft", "rfd", 10)
        a = asyncio.ensure_future(gate.call("rfd_draft", "a", "1", run))
        b = asyncio.ensure_future(gate.call("rfd_draft", "b", "2", run))
        await asyncio.sleep(0.01)
        await gate.aclose()
        ra, rb = await asyncio.gather(a, b, return_exceptions=True)
        assert isinstance(ra, DisposedError)  # it was running
        assert isinstance(rb, CallSettledError) and str(rb) == explain("b", Reason(ReasonKind.CANCELLED))
        with pytest.raises(DisposedError):
            await gate.call("rfd_draft", "c", "3", run)

    vloop.run(main())


def test_a_run_past_the_execution_timeout_raises_timeout_error() -> None:
    async def main():
        log = Log()
        async with Gate(policy(), execution_timeout=0.02) as gate:
            slow = log.tool("rfd_draft", "rfd", 10)
            fast = log.tool("rfd_draft", "rfd", 0.001)
            ra, rb = await asyncio.gather(
                gate.call("rfd_draft", "a", "1", slow), gate.call("rfd_draft", "b", "2", fast), return_exceptions=True
            )
        assert isinstance(ra, TimeoutError)
        assert rb == "rfd_draft(2)"

    vloop.run(main())


def test_a_refused_batch_raises_submit_error_in_each_call() -> None:
    async def main():
        async with Gate(policy()) as gate:
            run = Log().tool("rfd_draft", "rfd")
            results = await asyncio.gather(
                gate.call("rfd_draft", "same", "1", run), gate.call("rfd_draft", "same", "2", run), return_exceptions=True
            )
        assert all(isinstance(r, SubmitError) for r in results)

    vloop.run(main())


def test_wrong_arguments_raise_before_anything_is_queued() -> None:
    async def main():
        async with Gate(policy()) as gate:
            with pytest.raises(TypeError):
                await gate.call("rfd_draft", 1, "1", Log().tool("x", "x"))  # type: ignore[arg-type]
            with pytest.raises(TypeError):
                await gate.call("rfd_draft", "a", None, "not callable")  # type: ignore[arg-type]
            assert gate._arriving == []

    with pytest.raises(TypeError):
        Gate("not a policy")  # type: ignore[arg-type]
    vloop.run(main())


# ---------------------------------------------------------------------------------------------
# What forms a batch, and when each call resolves


def test_calls_of_one_turn_form_one_batch_in_arrival_order() -> None:
    async def main():
        log = Log()
        sched = Scheduler(policy())
        submitted: list[list[str]] = []
        driver = Driver(sched)
        submit = driver._submit

        def recording(calls, execute, *rest):
            submitted.append([c.id for c in calls])
            return submit(calls, execute, *rest)

        driver._submit = recording  # type: ignore[method-assign]
        gate = Gate(driver)
        draft, renumber = log.tool("rfd_draft", "rfd"), log.tool("rfd_renumber", "rfd")
        await asyncio.gather(
            gate.call("rfd_renumber", "r1", "1", renumber),
            gate.call("rfd_draft", "d1", "1", draft),
            gate.call("rfd_renumber", "r2", "2", renumber),
        )
        await gate.call("rfd_draft", "d2", "2", draft)  # a later turn: a batch of its own
        assert submitted == [["r1", "d1", "r2"], ["d2"]]
        assert [e for e in log.events if e.startswith("start")] == [
            "start rfd_renumber 1",
            "start rfd_draft 1",
            "start rfd_renumber 2",
            "start rfd_draft 2",
        ]
        assert log.peak == {"rfd": 1}
        await gate.aclose()
        driver.close()

    vloop.run(main())


def test_each_call_resolves_when_its_own_entry_ends() -> None:
    async def main():
        log = Log()
        async with Gate(policy()) as gate:
            quick = log.tool("github_issues", "github", 0.001)
            slow = log.tool("github_issues", "github", 0.2)
            loop = asyncio.get_running_loop()
            start = loop.time()
            a = asyncio.ensure_future(gate.call("github_issues", "a", "1", slow))
            b = asyncio.ensure_future(gate.call("github_issues", "b", "2", quick))
            assert await b == "github_issues(2)"
            assert not a.done(), "b resolved before its batch ended"
            await a
        assert log.peak == {"github": 2}

    vloop.run(main())


def test_a_key_shared_across_tools_keeps_its_limit_and_written_order() -> None:
    async def main():
        log = Log()
        async with Gate(policy()) as gate:
            issues = log.tool("github_issues", "github", 0.005)
            draft = log.tool("rfd_draft", "rfd", 0.005)
            await asyncio.gather(*(gate.call("github_issues", f"g{i}", str(i), issues) for i in range(6)),
                                 *(gate.call("rfd_draft", f"r{i}", str(i), draft) for i in range(3)))
        assert log.peak == {"github": 2, "rfd": 1}
        assert [e for e in log.events if e.startswith("start rfd")] == [f"start rfd_draft {i}" for i in range(3)]

    vloop.run(main())


def test_a_gate_over_a_persisting_driver_leaves_nothing_retired_in_the_snapshot() -> None:
    """Every call had its answer, so its batch leaves the snapshot when it retires (before,
    every past gate batch stayed, was rewritten by every persist and came back on resume)."""

    async def main():
        import json

        saved: list[str] = []
        driver = Driver(Scheduler(policy()), persist=saved.append)
        async with Gate(driver) as gate:

            async def run(arg: str) -> str:
                await asyncio.sleep(0.01)
                return arg

            for n in range(3):
                assert await gate.call("rfd_draft", f"c{n}", str(n), run) == str(n)
            await asyncio.sleep(0.01)
            last = json.loads(driver.snapshot())
            assert last["retired"] == [] and last["state"]["batches"] == []
            assert saved, "the driver persisted"
        driver.close()

    vloop.run(main())
