"""The in-memory store against the store contract (SHARED.md), on a virtual-time event loop:
nothing sleeps. The JS package's test/shared-memory.test.mjs checks the same promises. Failure
paths first."""

from __future__ import annotations

import asyncio
import selectors
from typing import Any, Awaitable, Callable, TypeVar

import pytest

from turnstile_scheduler import RateWindow
from turnstile_scheduler.shared import (
    Arrival,
    MemoryStore,
    SharedKeys,
    SharedStoreError,
    StoreUnavailableError,
    Terms,
    Wake,
)

T = TypeVar("T")
DAY = 86_400_000


class _VirtualSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """Waiting for `timeout` seconds moves the loop's virtual time instead of sleeping."""

    loop: "VirtualLoop"

    def select(self, timeout: Any = None) -> Any:
        if timeout is None:
            raise RuntimeError("the virtual loop has nothing to wait for: the test would hang")
        if timeout > 0:
            self.loop.now_s += timeout
        return super().select(0)


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time()` moves only to its next timer, once nothing else is ready."""

    def __init__(self) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self.now_s = 0.0

    def time(self) -> float:
        return self.now_s


def run(main: Callable[[], Awaitable[T]]) -> T:
    loop = VirtualLoop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def now_ms() -> int:
    return round(asyncio.get_running_loop().time() * 1000)


async def until(ms: int) -> None:
    """Lets everything due until `ms` (virtual) happen."""
    await asyncio.sleep(max(0, ms - now_ms()) / 1000)
    for _ in range(3):
        await asyncio.sleep(0)


def terms(limit: int = 1, delay_ms: int = 0, lease_ms: int = 3000) -> Terms:
    return Terms(limit=limit, delay_ms=delay_ms, lease_ms=lease_ms)


def test_a_start_under_24_h_is_refused() -> None:
    async def main() -> None:
        for bad in (DAY - 1, 1.5 + DAY, True):
            with pytest.raises(ValueError, match="start_ms must be an integer of at least 86400000"):
                await MemoryStore.open(start_ms=bad)  # type: ignore[arg-type]

    run(main)


def test_a_closed_store_raises_store_unavailable_on_every_operation() -> None:
    async def main() -> None:
        store = await MemoryStore.open(start_ms=DAY)
        await store.close()
        calls = [
            lambda: store.request("k", "t-1", terms()),
            lambda: store.renew("k", ["t-1"]),
            lambda: store.release("k", "t-1"),
            lambda: store.abandon("k", "t-1"),
            lambda: store.pause("k", 10),
            lambda: store.inspect("k"),
        ]
        for call in calls:
            with pytest.raises(StoreUnavailableError, match="closed") as caught:
                await call()
            assert caught.value.store == "memory"

    run(main)


def test_a_row_no_client_writes_is_refused_by_the_components_rule() -> None:
    async def main() -> None:
        store = await MemoryStore.open(start_ms=DAY)
        with pytest.raises(SharedStoreError, match="limit 0") as caught:
            await store.request("k", "t-1", terms(0))
        assert caught.value.code == "store-failed"

    run(main)


def test_fifo_by_arrival_across_clients_never_over_the_limit_a_retried_request_only_renews() -> None:
    async def main() -> None:
        store = await MemoryStore.open(start_ms=DAY)
        states = [await store.request("k", t, terms(2)) for t in ("a-1", "b-1", "a-2", "c-1")]
        assert [(s.ticket, s.state, s.seq) for s in states] == [
            ("a-1", "granted", 1),
            ("b-1", "granted", 2),
            ("a-2", "waiting", 3),
            ("c-1", "waiting", 4),
        ]
        assert (await store.request("k", "a-2", terms(2))).seq == 3, "a retried request keeps its place"
        assert await store.release("k", "b-1") == "released"
        after = await store.renew("k", ["a-2", "c-1"])
        assert [(s.ticket, s.state, s.grant) for s in after] == [("a-2", "granted", 3), ("c-1", "waiting", 0)]
        assert await store.abandon("k", "c-1") == "withdrawn"
        assert await store.release("k", "c-1") == "lost"
        seen = await store.inspect("k")
        assert [h[0] for h in seen.held] == ["a-1", "a-2"]
        assert seen.waiting == ()

    run(main)


def test_a_lease_ends_when_its_heartbeat_stops_and_the_next_ticket_is_granted_then() -> None:
    async def main() -> None:
        store = await MemoryStore.open(start_ms=DAY)
        await store.request("k", "dead-1", terms(1, 0, 3000))
        await store.request("k", "live-1", terms(1, 0, 3000))
        woken: list[tuple[int, list[str]]] = []

        def wake(w: Wake) -> None:
            woken.append((now_ms(), [f"{s.ticket} {s.state}" for s in w.states]))

        store.watch("k", lambda: ["live-1"], wake)
        for at in (1000, 2000, 2999):
            await until(at)
            await store.renew("k", ["live-1"])  # the waiter's heartbeat only
        await until(5000)
        assert woken == [(3000, ["live-1 granted"])], "granted when the dead lease ended (3000), not later"
        assert [s.state for s in await store.renew("k", ["dead-1"])] == ["lost"]
        assert await store.release("k", "dead-1") == "lost"

    run(main)


def test_a_renewal_extends_a_lease_by_the_tickets_own_lease() -> None:
    async def main() -> None:
        store = await MemoryStore.open(start_ms=DAY)
        await store.request("k", "a-1", terms(1, 0, 1000))
        await until(900)
        await store.renew("k", ["a-1"])
        await until(1899)
        assert (await store.inspect("k")).held[0][4] == DAY + 1900
        await until(1900)
        assert (await store.inspect("k")).held == ()

    run(main)


def test_the_delay_between_grants_is_kept_by_the_store() -> None:
    async def main() -> None:
        store = await MemoryStore.open(start_ms=DAY)
        assert (await store.request("k", "a-1", terms(5, 100))).state == "granted"
        b = await store.request("k", "b-1", terms(5, 100))
        assert (b.state, b.retry_ms) == ("waiting", 100)
        assert (await store.request("k", "b-2", terms(5, 100))).retry_ms is None, "only the head has a retry"
        woken: list[tuple[int, list[str]]] = []
        store.watch("k", lambda: ["b-1", "b-2"], lambda w: woken.append((now_ms(), [f"{s.ticket} {s.grant}" for s in w.states])))
        await until(1000)
        assert woken == [(100, ["b-1 2"]), (200, ["b-2 3"])]

    run(main)


def test_rate_windows_are_kept_by_the_store_across_clients_a_burst_then_the_pace_weights_forgotten_once_rested() -> None:
    async def main() -> None:
        store = await MemoryStore.open(start_ms=DAY)

        def rated(weight: int = 1) -> Terms:
            return Terms(limit=100, delay_ms=0, lease_ms=3000, rates=(RateWindow(2, 1000, 2),), weight=weight)

        first = [await store.request("k", t, rated()) for t in ("a-1", "b-1", "a-2")]
        assert [(s.ticket, s.state, s.retry_ms) for s in first] == [("a-1", "granted", None), ("b-1", "granted", None), ("a-2", "waiting", 500)]
        assert (await store.request("k", "b-2", rated(2))).state == "waiting"
        woken: list[tuple[int, list[str]]] = []
        store.watch("k", lambda: ["a-2", "b-2"], lambda w: woken.append((now_ms(), [s.ticket for s in w.states])))
        await until(1500)
        assert woken == [(500, ["a-2"]), (1500, ["b-2"])], "b-2 weighs 2: it waits for the window to hold 2 units"
        for t in ("a-1", "b-1", "a-2", "b-2"):
            await store.release("k", t)
        await until(2501)
        assert (await store.inspect("k")).arrivals == (Arrival(2, 1000, DAY + 2500, 0),), "kept until the window rested"
        await until(2502)
        gone = await store.inspect("k")
        assert (gone.seq, gone.arrivals, store._keys) == (0, (), {}), "forgotten, no timer left"

    run(main)


def test_rate_windows_no_client_writes_are_refused_by_the_rule_and_by_shared_keys_first() -> None:
    async def main() -> None:
        store = await MemoryStore.open(start_ms=DAY)
        for i, (rates, weight, message) in enumerate(
            (
                ((RateWindow(0, 1000, 1),), 1, "rate window 0/1000"),
                ((RateWindow(1_000_001, 1000, 1),), 1, "rate window"),
                ((RateWindow(1, 1000, 2),), 3, "weight 3"),
            )
        ):
            with pytest.raises(SharedStoreError, match=message):
                await store.request(f"k{i}", "t-1", Terms(limit=1, delay_ms=0, lease_ms=3000, rates=rates, weight=weight))
            assert (await store.request(f"k{i}", "t-2", terms())).state == "granted", "the refused terms never entered the key"
        keys = SharedKeys(store)
        for extra, error, message in (
            ({"rates": (RateWindow(1_000_001, 1000, 1),)}, ValueError, r"rates\[0\]\.count"),
            ({"rates": (RateWindow(1, 0, 1),)}, ValueError, r"rates\[0\]\.per_ms"),
            ({"rates": (RateWindow(1, 1000, 1), RateWindow(1, 1000, 2))}, ValueError, "a second time"),
            ({"rates": (RateWindow(1, 1000, 1),) * 9}, ValueError, "at most 8"),
            ({"rates": (RateWindow(1, 1000, 2),), "weight": 3}, ValueError, "weight"),
            ({"weight": 2}, ValueError, "weight"),
            ({"rates": ((1, 1000, 1),)}, TypeError, r"rates\[0\] must be a RateWindow"),
            ({"rates": "1/s"}, TypeError, "sequence of RateWindow"),
        ):
            with pytest.raises(error, match=message):
                await keys.acquire("k", limit=1, **extra)
        await keys.close()

    run(main)


def test_a_pause_only_extends_holds_every_clients_grants_and_ends_on_the_stores_clock() -> None:
    async def main() -> None:
        store = await MemoryStore.open(start_ms=DAY)
        assert await store.pause("k", 500) == DAY + 500
        assert await store.pause("k", 100) == DAY + 500
        b = await store.request("k", "b-1", terms())
        assert (b.state, b.retry_ms) == ("waiting", 500)
        woken: list[int] = []
        store.watch("k", lambda: ["b-1"], lambda w: woken.append(now_ms()))
        await until(2000)
        assert woken == [500]

    run(main)


def test_a_key_idle_past_its_delay_and_pause_is_forgotten() -> None:
    async def main() -> None:
        store = await MemoryStore.open(start_ms=DAY)
        await store.request("k", "a-1", terms(1, 300))
        await store.release("k", "a-1")
        assert (await store.inspect("k")).grants == 1
        assert (await store.request("k", "a-2", terms(1, 300))).state == "waiting", "the delay outlives the release"
        await store.abandon("k", "a-2")
        await until(300)
        assert (await store.inspect("k")).seq == 0
        assert store._keys == {}, "forgotten, no timer left"

    run(main)


def test_the_stores_time_base_does_not_matter() -> None:
    async def story(start_ms: int) -> list[str]:
        store = await MemoryStore.open(start_ms=start_ms)
        log: list[str] = []
        store.watch("k", lambda: ["b-1", "c-1"], lambda w: log.append(f"{now_ms()} " + ",".join(f"{s.ticket} {s.state}" for s in w.states)))
        for t in ("a-1", "b-1", "c-1"):
            await store.request("k", t, terms(1, 50, 1000))
        await until(10)
        await store.release("k", "a-1")
        await store.pause("k", 200)
        await until(900)
        await store.renew("k", ["c-1"])
        await until(3000)
        return log

    base = run(lambda: story(DAY))
    # b-1's lease (granted at 210, never renewed) ends at 1210 and c-1 moves up; c-1's, renewed by
    # its grant, at 2210.
    assert base == ["210 b-1 granted", "1210 b-1 lost,c-1 granted", "2210 c-1 lost"]
    assert run(lambda: story(1_000_000_000_000 + 7)) == base


def test_two_shared_keys_on_one_store_are_two_processes() -> None:
    """`SharedKeys` over the store, on a real loop with nothing timed: b's wait ends with a's
    release, in arrival order."""

    async def main() -> None:
        store = await MemoryStore.open()
        keys_a = SharedKeys(store, lease_ms=10_000, owner="a")
        keys_b = SharedKeys(store, lease_ms=10_000, owner="b")
        held = await keys_a.acquire("k", limit=1)
        waiting = asyncio.ensure_future(keys_b.acquire("k", limit=1))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not waiting.done()
        assert await held.release() == "released"
        permit = await asyncio.wait_for(waiting, 5)
        assert (permit.grant, permit.seq) == (2, 2)
        assert await permit.release() == "released"
        await keys_a.close()
        await keys_b.close()
        await store.close()

    asyncio.run(main())


class _Mortal:
    """One process's view of the store: once `kill()`ed, its calls never reach the store and
    never return, and its watches hear nothing (a process killed with SIGKILL)."""

    def __init__(self, store: MemoryStore) -> None:
        self.kind = store.kind
        self._store = store
        self._dead = False
        self._never: list[asyncio.Future[None]] = []

    def kill(self) -> None:
        self._dead = True

    async def bury(self) -> None:
        """Ends the dead process's calls that wait forever (the test is over)."""
        for future in self._never:
            future.cancel()
        await asyncio.sleep(0)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if name == "watch":
            return lambda key, tickets, wake: method(key, lambda: [] if self._dead else tickets(), lambda w: self._dead or wake(w))

        async def call(*args: Any) -> Any:
            if self._dead:
                never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._never.append(never)
                await never  # never answered
            return await method(*args)

        return call


def test_shared_keys_on_a_virtual_loop_keep_a_permit_by_heartbeats_and_a_killed_holders_comes_back_within_one_lease() -> None:
    """The lease schedule runs on the loop's clock, as the store does: a live holder's renewals
    keep its permit for 10 s of virtual time with a 3 s lease; killed, its permit goes to the
    waiter when its lease ends."""

    async def main() -> None:
        store = await MemoryStore.open(start_ms=DAY)
        view_a = _Mortal(store)
        keys_a = SharedKeys(view_a, lease_ms=3000, owner="a")  # type: ignore[arg-type]
        keys_b = SharedKeys(store, lease_ms=3000, owner="b")
        held = await keys_a.acquire("k", limit=1)
        granted_at: list[int] = []
        waiting = asyncio.ensure_future(keys_b.acquire("k", limit=1))
        waiting.add_done_callback(lambda _: granted_at.append(now_ms()))
        await until(10_000)
        assert granted_at == [], "the live holder's heartbeat keeps its permit"
        assert not held.lost.is_set()
        view_a.kill()
        permit = await waiting
        assert 10_000 < granted_at[0] <= 13_000, f"granted at {granted_at[0]} (killed at 10000, lease 3000)"
        assert permit.grant == 2
        assert await permit.release() == "released"
        await keys_b.close()
        await store.close()
        await view_a.bury()

    run(main)
