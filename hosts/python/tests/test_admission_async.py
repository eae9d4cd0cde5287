"""`async with admission.slot(...)`: failure paths first (timeout and cancellation while
queued consume nothing, a deadline passing inside the block, shutdown with waiters and permits,
a refused begin, mixing with the synchronous API), then the happy path."""

from __future__ import annotations

import asyncio

import pytest

import vloop
from turnstile_scheduler import Admission, AdmissionError, AdmissionErrorCode, AdmissionTimeoutError, ShutdownError


def held(adm: Admission) -> int:
    """Takes the only tool-call lock with the synchronous API; returns its ticket."""
    t = adm.begin("holder", "call")
    assert adm.next_admissions() == [t]
    return t


def test_a_timeout_while_queued_abandons_and_consumes_nothing() -> None:
    async def main():
        adm = Admission(4)
        t = held(adm)
        with pytest.raises(AdmissionTimeoutError) as e:
            async with adm.slot("call", timeout=0.05, id="late"):
                raise AssertionError("never admitted")
        # One typed error: an AdmissionError, and a TimeoutError for `except TimeoutError`.
        assert isinstance(e.value, AdmissionError) and isinstance(e.value, TimeoutError)
        assert (e.value.code, e.value.id, e.value.timeout) == ("timed-out", "late", 0.05)
        assert str(e.value) == "timed-out: late was not admitted within 0.05 s"
        assert adm.in_flight() == 1 and adm._waiters == {}
        adm.end(t)
        # The abandoned request took nothing: the next one is admitted at once.
        async with adm.slot("call", timeout=1) as permit:
            assert adm.in_flight() == 1 and permit.remaining() > 0
        assert adm.in_flight() == 0

    vloop.run(main())


def test_time_queued_counts_against_the_deadline() -> None:
    async def main():
        adm = Admission(4)
        t = held(adm)
        asyncio.get_running_loop().call_later(0.05, adm.end, t)
        with pytest.raises(TimeoutError, match="deadline"):
            async with adm.slot("call", timeout=0.1) as permit:
                assert permit.remaining() < 0.08  # the queued time was spent
                await asyncio.sleep(1)  # cancelled at the deadline
        assert adm.in_flight() == 0

    vloop.run(main())


def test_cancelling_a_waiter_abandons_and_consumes_nothing() -> None:
    async def main():
        adm = Admission(4)
        t = held(adm)
        entered = []

        async def waiter():
            async with adm.slot("call"):
                entered.append(True)

        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0.01)
        assert adm._waiters
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert adm._waiters == {} and adm.in_flight() == 1 and not entered
        adm.end(t)
        assert adm.in_flight() == 0 and adm.next_admissions() == []

    vloop.run(main())


def test_cancelled_in_the_turn_it_was_admitted_gives_the_slot_back() -> None:
    async def main():
        adm = Admission(4)
        t = held(adm)
        task = asyncio.ensure_future(adm.slot("call").__aenter__())
        await asyncio.sleep(0.01)
        adm.end(t)  # admits the waiter (its future is resolved) ...
        task.cancel()  # ... and it is cancelled before it runs again
        with pytest.raises(asyncio.CancelledError):
            await task
        assert adm.in_flight() == 0
        async with adm.slot("call"):
            assert adm.in_flight() == 1

    vloop.run(main())


def test_shutdown_raises_in_waiters_and_cancels_permits() -> None:
    async def main():
        adm = Admission(4)
        results = []

        async def holder():
            async with adm.slot("call") as permit:
                try:
                    await asyncio.sleep(10)
                finally:
                    results.append(("holder cancelled", permit.cancelled.is_set()))

        async def waiter():
            async with adm.slot("call"):
                results.append("waiter admitted")

        h = asyncio.ensure_future(holder())
        await asyncio.sleep(0.01)
        w = asyncio.ensure_future(waiter())
        await asyncio.sleep(0.01)
        sync_ticket = adm.begin("sync", "request")
        report = adm.shutdown()
        # The report lists only what the host itself must act on: its own request, admitted
        # but not yet drained, is refused (it never learned it was admitted).
        assert report.cancel == [] and report.refused == [sync_ticket]
        with pytest.raises(ShutdownError):
            await w
        with pytest.raises(ShutdownError):
            await h
        assert results == [("holder cancelled", True)]
        assert adm.in_flight() == 0
        with pytest.raises(ShutdownError):
            async with adm.slot("call"):
                pass
        with pytest.raises(ShutdownError) as e:
            adm.begin("late", "call")
        assert e.value.code == AdmissionErrorCode.SHUTDOWN == "shutdown"

    vloop.run(main())


def test_close_shuts_down_waiters() -> None:
    async def main():
        adm = Admission(1)
        held(adm)

        async def waiter():
            async with adm.slot("request"):
                pass

        w = asyncio.ensure_future(waiter())
        await asyncio.sleep(0.01)
        adm.close()
        with pytest.raises(ShutdownError):
            await w

    vloop.run(main())


def test_a_refused_begin_raises_before_waiting() -> None:
    async def main():
        adm = Admission(4)
        async with adm.slot("call", id="c1"):
            with pytest.raises(AdmissionError) as e:
                async with adm.slot("request", id="c1"):
                    pass
            assert e.value.code is AdmissionErrorCode.DUPLICATE_REQUEST
            with pytest.raises(AdmissionError) as e:
                async with adm.slot("reentrant", parent=2**64 - 1):
                    pass
            assert e.value.code is AdmissionErrorCode.INVALID_PARENT
        assert adm.in_flight() == 0

    vloop.run(main())


def test_an_exception_in_the_block_still_ends_the_request() -> None:
    async def main():
        adm = Admission(4)
        with pytest.raises(KeyError):
            async with adm.slot("call"):
                raise KeyError("tool failed")
        assert adm.in_flight() == 0

    vloop.run(main())


def test_slots_queue_in_order_and_reentrant_calls_nest() -> None:
    async def main():
        adm = Admission(4)
        order = []

        async def call(name: str):
            async with adm.slot("call", id=name) as permit:
                order.append(f"start {name}")
                async with adm.slot("reentrant", parent=permit.ticket):
                    order.append(f"nested {name}")
                await asyncio.sleep(0)
                order.append(f"end {name}")

        await asyncio.gather(*(call(f"c{i}") for i in range(3)))
        assert order == [f"{w} c{i}" for i in range(3) for w in ("start", "nested", "end")]
        # Requests run beside the tool calls, up to max_concurrent.
        async with adm.slot("call"):
            async with adm.slot("request"), adm.slot("request"), adm.slot("control"):
                assert adm.in_flight() == 4
        assert adm.in_flight() == 0

    vloop.run(main())


def test_the_synchronous_api_still_sees_its_own_admissions() -> None:
    async def main():
        adm = Admission(4)
        t = adm.begin("sync", "call")
        async with adm.slot("request"):
            assert adm.next_admissions() == [t]  # drained by the slot, kept for the host
        adm.end(t)

    vloop.run(main())
