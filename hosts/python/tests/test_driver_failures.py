"""The driver's failure paths: a bad `decide`, a non-async `execute`, an execution that ends with
its question open or ignores cancellation, cancellation at every point, close, and resume
through the driver. After each: no key stays blocked, no batch is left pending, every slot is
freed, and other batches are unaffected."""

from __future__ import annotations

import asyncio

import pytest

import vloop
from turnstile_scheduler import (
    AbortCause,
    Call,
    DisposedError,
    Driver,
    OutcomeStatus,
    Policy,
    Reason,
    ReasonKind,
    Scheduler,
    Started,
)

CONFIG = """
[conversation.tools.k]
concurrency = 1
[conversation.tools.del]
concurrency = 1
fan_out = { on_error = "stop" }
[conversation.tools.free]
fan_out = true
"""


def driver(**kw) -> Driver:
    return Driver(Scheduler(Policy.resolve([("t", CONFIG)])), **kw)


async def ok(x) -> str:
    return x.label


async def after(d: Driver) -> None:
    """The key is free again, nothing is pending, nothing is left in the driver."""
    [o] = await asyncio.wait_for(d.run([Call("probe", "k")], ok), 5)
    assert o.entries[0].status is OutcomeStatus.OK
    assert d.scheduler.unfinished().batches == []
    assert not d._batches and not d._owner and d.running() == []


@pytest.mark.parametrize("bad", ["raise-sync", "raise-async", "unknown", "none", "int"])
def test_a_bad_decide_settles_the_undecided_as_failed_and_raises(bad) -> None:
    async def decide(label, call):
        if label == "b":
            if bad == "raise-sync":
                raise KeyError("prompt crashed")
            if bad == "raise-async":
                await asyncio.sleep(0)
                raise KeyError("prompt crashed")
            return {"unknown": "maybe", "none": None, "int": 1}[bad]
        return "approve"

    started = []

    async def execute(x):
        started.append(x.label)
        return x.label

    async def main():
        d = driver()
        other = asyncio.ensure_future(d.run([Call("o1", "k"), Call("o2", "k")], execute))
        # JS pairs: what decide threw; RangeError (here ValueError) for an unknown string,
        # TypeError for a value that is not a string; the message names the label and the value.
        expected = {"unknown": (ValueError, "'maybe'"), "none": (TypeError, "None"), "int": (TypeError, "1")}.get(bad, (KeyError, "prompt crashed"))
        with pytest.raises(expected[0]) as raised:
            await asyncio.wait_for(d.run([Call("a", "k"), Call("b", "k"), Call("c", "k")], execute, decide=decide), 5)
        if bad in ("unknown", "none", "int"):
            assert str(raised.value) == f"decide('b') result must be one of 'approve', 'reject', 'skip', 'fail', not {expected[1]}"
        assert [o.entries[0].status for o in await other] == [OutcomeStatus.OK, OutcomeStatus.OK]
        await after(d)

    vloop.run(main())
    assert "a" not in started and "b" not in started and "c" not in started


@pytest.mark.parametrize("kind", ["sync-raise", "non-awaitable", "none", "sync-function"])
def test_a_non_async_execute_is_that_entrys_failure_and_frees_its_slot(kind) -> None:
    def execute(x):
        if x.label != "a":
            return ok(x)
        if kind == "sync-raise":
            raise OSError("no such tool")
        return {"non-awaitable": "a string", "none": None, "sync-function": 42}[kind]

    async def main():
        d = driver()
        a, b = await asyncio.wait_for(d.run([Call("a", "k"), Call("b", "k")], execute), 5)
        await after(d)
        return a.entries[0], b.entries[0]

    a, b = vloop.run(main())
    assert a.status is OutcomeStatus.FAILED
    assert isinstance(a.error, OSError if kind == "sync-raise" else TypeError)
    assert b.status is OutcomeStatus.OK and b.value == "b"


def test_a_question_left_open_is_closed_with_its_execution() -> None:
    async def execute(x):
        if x.label == "a":
            await x.question().__aenter__()  # never exited
            return "asked"
        return "b"

    async def main():
        d = driver()
        a, b = await asyncio.wait_for(d.run([Call("a", "k"), Call("b", "k")], execute), 5)
        await after(d)
        return a.entries[0].status, b.entries[0].status

    assert vloop.run(main()) == (OutcomeStatus.OK, OutcomeStatus.OK)


@pytest.mark.parametrize("when", ["before-submit-turn", "while-deciding", "while-parked", "while-running", "while-asking"])
def test_cancelling_run_at_every_point_frees_everything(when) -> None:
    async def main():
        d = driver()
        deciding = asyncio.Event()
        running = asyncio.Event()

        async def decide(label, call):
            if when == "while-deciding" and label == "b":
                deciding.set()
                await asyncio.sleep(10)
            return "approve"

        async def execute(x):
            running.set()
            if when == "while-asking":
                async with x.question():
                    await asyncio.sleep(10)
            await asyncio.sleep(10)

        task = asyncio.ensure_future(d.run([Call("a", "k"), Call("b", "k"), Call("f", "free", 2)], execute, decide=decide))
        if when == "before-submit-turn":
            await asyncio.sleep(0)
        elif when == "while-deciding":
            await deciding.wait()
        elif when == "while-parked":
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        else:
            await running.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await after(d)

    vloop.run(main())


def test_outcomes_of_a_cancelled_batch_keep_what_executions_did() -> None:
    """Running when cancelled: `cancelled` with what it returned or raised afterwards; parked:
    `settled` with reason cancelled."""

    async def main():
        d = driver()
        gate = asyncio.Event()
        result: dict = {}

        async def execute(x):
            try:
                gate.set()
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if x.label == "f#0":
                    return "partial"
                if x.label == "f#1":
                    raise OSError("rolled back")
                raise

        async def runner():
            result["out"] = await d.run([Call("f", "free", 3), Call("a", "k"), Call("b", "k")], execute)

        task = asyncio.ensure_future(runner())
        await gate.wait()
        await asyncio.sleep(0)
        # Cancel the batch through the driver (as close() does) and read the outcomes.
        b = next(iter(d._batches.values()))
        d._cancel(b)
        while d._batches:
            await asyncio.sleep(0.001)
        await task
        return result["out"]

    f, a, b = vloop.run(main())
    f0, f1, f2 = f.entries
    assert (f0.status, f0.value) == (OutcomeStatus.CANCELLED, "partial")
    assert f1.status is OutcomeStatus.CANCELLED and isinstance(f1.error, OSError)
    assert (f2.status, f2.value, f2.error) == (OutcomeStatus.CANCELLED, None, None)
    assert a.entries[0].status is OutcomeStatus.CANCELLED
    assert (b.entries[0].status, b.entries[0].reason) == (OutcomeStatus.SETTLED, Reason(ReasonKind.CANCELLED))


async def ignoring_cancellation(release: asyncio.Event, value: str) -> str:
    """Returns `value` once `release` is set, ignoring every cancellation meanwhile."""
    while True:
        try:
            await release.wait()
            return value
        except asyncio.CancelledError:
            continue


def test_an_execution_ignoring_cancellation_is_visible_and_bounded_by_the_timeout() -> None:
    release = None

    async def stubborn(x):
        return await ignoring_cancellation(release, "finally")

    async def main():
        nonlocal release
        release = asyncio.Event()
        d = driver()
        task = asyncio.ensure_future(d.run([Call("s", "k"), Call("t", "k")], stubborn, execution_timeout=0.05))
        await asyncio.sleep(0.15)
        # Past the timeout: its task was cancelled, it ignored that and still holds the key.
        [r] = d.running()
        assert (r.label, r.cancel_requested) == ("s", True)
        [s_status, t_status] = d.scheduler.inspect(r.batch)
        assert s_status.state.value == "aborted" and s_status.cause.value == "deadline" and t_status.wait.running == ["s"]
        release.set()
        s, t = await asyncio.wait_for(task, 5)
        await after(d)
        return s.entries[0], t.entries[0]

    s, t = vloop.run(main())
    assert (s.status, s.value) == (OutcomeStatus.OK, "finally")  # it did end by returning


def test_the_abort_grace_gives_up_on_an_execution_that_ignores_its_timeout() -> None:
    """The component keeps the deadline and the grace: the ignoring execution is settled
    timed-out with the component's sentence, the next call takes its slot, and what it returns
    later changes nothing."""
    release = None
    started = []

    async def stubborn(x):
        started.append(x.label)
        if x.label == "t":
            return "t ran"
        return await ignoring_cancellation(release, "too late")

    async def main():
        nonlocal release
        release = asyncio.Event()
        d = driver()
        s, t = await asyncio.wait_for(d.run([Call("s", "k"), Call("t", "k")], stubborn, execution_timeout=0.03, abort_grace=0.03), 5)
        release.set()
        await asyncio.sleep(0.01)
        await after(d)
        return s.entries[0], t.entries[0]

    s, t = vloop.run(main())
    assert s.status is OutcomeStatus.SETTLED and s.reason == Reason(ReasonKind.TIMED_OUT, cause=AbortCause.DEADLINE)
    assert "time limit" in s.message
    assert (t.status, t.value) == (OutcomeStatus.OK, "t ran")
    assert started == ["s", "t"]


def test_the_execution_timeout_fails_an_execution_that_honours_it() -> None:
    async def slow(x):
        await asyncio.sleep(10)

    async def main():
        d = driver()
        [o] = await asyncio.wait_for(d.run([Call("s", "k")], slow, execution_timeout=0.02), 5)
        await after(d)
        return o.entries[0]

    e = vloop.run(main())
    assert e.status is OutcomeStatus.FAILED and isinstance(e.error, TimeoutError)


def test_close_cancels_batches_in_flight_and_refuses_new_runs() -> None:
    async def main():
        async def forever(x):
            await asyncio.sleep(10)

        d = Driver.resume(
            Policy.resolve([("t", CONFIG)]), Scheduler(Policy.resolve([("t", CONFIG)])).unfinished(), execute=ok, started=Started.INTERRUPT
        ).driver
        scheduler = d.scheduler
        task = asyncio.ensure_future(d.run([Call("a", "k")], forever))
        await asyncio.sleep(0.01)
        d.close()
        with pytest.raises(RuntimeError, match="closed"):
            await asyncio.wait_for(task, 5)
        with pytest.raises(RuntimeError, match="closed"):
            await d.run([Call("b", "k")], ok)
        await asyncio.sleep(0.01)
        assert scheduler.closed  # an owned scheduler is closed once its batches are gone

    vloop.run(main())


def test_resume_through_the_driver_next_to_new_batches() -> None:
    policy = Policy.resolve([("t", CONFIG)])
    s = Scheduler(policy)
    sub = s.submit([Call("a", "k"), Call("d", "del", 2), Call("b", "k")])
    a, d0, d1, b = sub.entries
    s.step(approve=[a, d0, d1, b])
    s.step(ok=[a])  # b runs now; d#0, d#1 ran and are in flight
    state = s.unfinished()

    async def main():
        ran = []

        async def execute(x):
            ran.append(x.label)
            return x.label

        d, batches, unrestored = Driver.resume(policy, state, execute=execute, started=Started.RUN_AGAIN)
        assert unrestored == [] and len(batches) == 1
        restored, new = await asyncio.wait_for(asyncio.gather(batches[0], d.run([Call("n", "k")], execute)), 5)
        await after(d)
        return restored, new, ran

    restored, new, ran = vloop.run(main())
    assert [o.id for o in restored] == ["a", "d", "b"]
    a_out = restored[0].entries[0]
    assert a_out.status is OutcomeStatus.OK and a_out.value is None  # ended before the restart (no value in a SavedState)
    assert [e.value for e in restored[1].entries] == ["d#0", "d#1"]
    assert ran.index("b") < ran.index("n")  # the restored batch's key order holds
    assert new[0].entries[0].value == "n"


def test_dropped_schedulers_and_drivers_are_freed() -> None:
    """Nothing keeps a scheduler or its driver alive after the host drops them (run_batch's
    driver included), and closing frees the instance's resources."""
    import gc
    import weakref

    from turnstile_scheduler import run_batch

    policy = Policy.resolve([("t", CONFIG)])

    async def main():
        refs = []
        for i in range(50):
            s = Scheduler(policy)
            await run_batch(s, [Call("a", "k")], ok)
            refs.append((weakref.ref(s), weakref.ref(s._driver), weakref.ref(s.instance)))
            if i % 2:
                with Driver.of(s):
                    pass
            del s
        return refs

    refs = vloop.run(main())
    gc.collect()
    gc.collect()  # the first pass runs the schedulers' finalizers; the second frees what they held
    assert [r for trio in refs for r in trio if r() is not None] == []


def test_async_with_waits_for_the_ends_to_reach_the_scheduler() -> None:
    from turnstile_scheduler import DisposedError

    async def main():
        gate = asyncio.Event()

        async def slow(x):
            gate.set()
            await asyncio.sleep(10)

        async with driver() as d:
            task = asyncio.ensure_future(d.run([Call("a", "k"), Call("b", "k")], slow))
            await gate.wait()
        # Exited: the batch was cancelled and its ends reached the scheduler.
        assert d.scheduler.unfinished().batches == [] and d.running() == []
        with pytest.raises(DisposedError):
            await task
        assert d.scheduler.closed is False  # not owned: the host closes it
        d.scheduler.close()

    vloop.run(main())


def test_a_driver_whose_loop_closed_under_a_running_execution_is_collected_quietly() -> None:
    """A loop closed with an execution still running (its task never cancelled), then the task
    collected: the execution's task is closed with GeneratorExit and must report nothing
    (reporting needs the closed loop: "Event loop is closed" printed as unraisable)."""
    import gc
    import sys

    unraisable: list[object] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda u: unraisable.append(u.exc_value)
    try:
        loop = asyncio.new_event_loop()
        hang = loop.create_future()

        async def forever(x) -> str:
            await hang
            return x.label

        d = driver()

        async def main() -> None:
            loop.create_task(d.run([Call("a", "k")], forever))
            for _ in range(20):
                await asyncio.sleep(0)
            assert [r.label for r in d.running()] == ["a"]

        loop.run_until_complete(main())
        loop.close()
        del d, main, forever, hang
        gc.collect()
        gc.collect()
    finally:
        sys.unraisablehook = previous
    assert [repr(e) for e in unraisable if not isinstance(e, GeneratorExit)] == []


def test_pause_refuses_a_bad_argument_at_the_call_before_anything_is_queued() -> None:
    """JS: `driver.pause(key, -5)` throws a RangeError at the call (and a TypeError for a key or
    a duration of the wrong type); here a ValueError / TypeError raises at the call, not when
    the awaitable is awaited, and nothing reaches a step. A closed driver's pause raises
    DisposedError when awaited (JS: a rejected promise)."""

    async def main():
        d = driver()
        with pytest.raises(ValueError, match=r"^seconds must be a finite number of seconds >= 0, not -5$"):
            d.pause("k", -5)
        with pytest.raises(ValueError, match="nan"):
            d.pause("k", float("nan"))
        with pytest.raises(TypeError, match="seconds must be a number of seconds, not str"):
            d.pause("k", "5")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="key must be a str"):
            d.lift_pause(3)  # type: ignore[arg-type]
        assert not d._scheduled  # nothing was queued
        await d.pause("k", 0.005)  # a good one still works
        d.close()
        refused = d.pause("k", 1)
        with pytest.raises(DisposedError):
            await refused

    vloop.run(main())
