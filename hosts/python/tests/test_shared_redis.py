"""Shared keys on Redis: the multi-process scenarios (`shared_worker.py`) against a real
redis-server started here on a free loopback port, and the Redis store's failure paths (no
server, a server that stops answering and comes back). Without redis-server (or redis-py) every
test here is reported skipped, with the reason; never passed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Awaitable, Callable

import pytest
from shared_worker import (
    CONFORMANCE,
    RedisServer,
    Setup,
    js_missing,
    redis_missing,
    scenario_eight_processes,
)

from turnstile_scheduler.shared import RedisStore, SharedKeys, StoreUnavailableError, Terms

missing = redis_missing()
pytestmark = pytest.mark.skipif(missing is not None, reason=f"SKIPPING the Redis tests: {missing}")


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, 45))


@pytest.fixture
def server():
    s = RedisServer()
    yield s
    s.close()


@pytest.fixture
def setup(server: RedisServer, tmp_path: Path):
    s = Setup({"kind": "redis", "url": server.url}, lambda: RedisStore.open(server.url), tmp_path)
    yield s
    s.close()


def test_no_server_on_the_port_is_store_unavailable_within_the_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as e:
        run(RedisStore.open("redis://127.0.0.1:1", op_timeout_ms=500))
    assert e.value.store == "redis" and time.monotonic() - started < 3


def test_a_server_restarted_empty_the_holder_learns_at_its_next_heartbeat(server: RedisServer, setup: Setup) -> None:
    """SHARED.md's table: a Redis restarted with no data (no `appendonly`) forgets every ticket.
    Its holders learn at their next renewal (LeaseLostError); a new request is granted."""

    async def main() -> None:
        lease_ms = 900
        holder = setup.worker(key="k", limit=1, leaseMs=lease_ms, name="holder", hang=True)
        await holder.wait_for(lambda e: e["event"] == "granted")
        await asyncio.get_running_loop().run_in_executor(None, server.restart_empty)
        restarted = time.monotonic()
        lost = await holder.wait_for(lambda e: e["event"] == "lost", lease_ms / 1000 + 5)
        learned_ms = (time.monotonic() - restarted) * 1000
        # LeaseLostError when its next renewal finds the ticket gone; StoreUnavailableError when
        # the restart took longer than a renewal period and it gave up first (a loaded machine).
        assert lost["error"] in ("LeaseLostError", "StoreUnavailableError"), lost
        assert learned_ms <= lease_ms + 2000, f"learned {learned_ms:.0f} ms after the restart (lease {lease_ms} ms)"
        nxt = setup.worker(key="k", limit=1, leaseMs=lease_ms, name="next")
        granted = await nxt.wait_for(lambda e: e["event"] == "granted", 5)
        assert granted["grant"] == 1, "the key starts again: the server has no history"
        await nxt.done()

    run(main())


def test_a_server_that_stops_answering_gives_typed_errors_and_no_double_grant(server: RedisServer, setup: Setup) -> None:
    async def main() -> None:
        lease_ms = 1500
        store = await RedisStore.open(server.url, op_timeout_ms=200)
        keys = SharedKeys(store, lease_ms=lease_ms, owner="test")
        permit = await keys.acquire("k", limit=1)
        other = setup.worker(key="k", limit=1, leaseMs=3000, name="other")
        await other.wait_for(lambda e: e["event"] == "requested")
        # Unreachable for less than a heartbeat (lease / 3): requests fail with the typed error,
        # the permit holds.
        server.stop()
        stopped = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            await keys.acquire("elsewhere", limit=1)
        await asyncio.sleep(max(0, lease_ms / 4000 - (time.monotonic() - stopped)))
        server.cont()
        await asyncio.sleep(lease_ms / 1000)
        assert not permit.lost.is_set(), "the permit survived a short outage"
        assert not [e for e in other.events if e["event"] == "granted"], "nothing was granted twice"
        # Unreachable for longer: the permit is given up before its lease can end in the store.
        server.stop()
        await asyncio.wait_for(permit.lost.wait(), 5)
        lost_at = time.time() * 1000
        assert isinstance(permit.lost_error, StoreUnavailableError)
        server.cont()
        granted = await other.wait_for(lambda e: e["event"] == "granted", lease_ms / 1000 + 5)
        assert granted["grantedMs"] >= lost_at - 5, "the other process was granted only after this one gave up"
        await other.done()
        await keys.close()
        await store.close()

    run(main())


@pytest.mark.parametrize("scenario", CONFORMANCE, ids=lambda f: f.__name__.removeprefix("scenario_"))
def test_conformance(setup: Setup, scenario: Callable[[Setup], Awaitable[None]]) -> None:
    run(scenario(setup))








def test_js_and_python_processes_share_one_server(setup: Setup) -> None:
    js = js_missing()
    if js is not None:
        pytest.skip(f"the JS package is not ready: {js}")
    run(scenario_eight_processes(setup, node=lambda i: i % 2 == 1))




def test_idle_keys_leave_the_server(server: RedisServer) -> None:
    """5,000 made keys, all ended, leave Redis keys only for the live ones."""
    import re

    import redis.asyncio as aioredis

    async def main() -> None:
        store = await RedisStore.open(server.url, prefix="idle")
        keys = SharedKeys(store, lease_ms=300, owner="test")
        raw = aioredis.from_url(server.url)
        live = [await keys.acquire(k, limit=1) for k in ("live:1", "live:2", "live:3")]
        for i in range(5000):
            permit = await keys.acquire(f"api:host-{i}", limit=2, delay_ms=i % 2)
            await permit.release()
        await keys.pause("paused", 400)
        # A process that died holding a ticket: nobody touches its key again.
        await store.request("dead", "gone-1", Terms(limit=1, delay_ms=0, lease_ms=300))
        await asyncio.sleep(0.6)  # the pause, the last delays and the dead lease end: their keys expire

        async def tags() -> list[str]:
            return sorted({re.search(r"\{(.*)\}", k.decode()).group(1) for k in await raw.keys("idle:*")})

        assert await tags() == ["live:1", "live:2", "live:3"]
        assert await raw.dbsize() == 3 * 4, "state, leases, tickets and held of each live key"
        for permit in live:
            await permit.release()
        assert await tags() == [] and await raw.dbsize() == 0
        await raw.aclose()
        await keys.close()
        await store.close()

    asyncio.run(asyncio.wait_for(main(), 120))
