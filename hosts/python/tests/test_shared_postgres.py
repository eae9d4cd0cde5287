"""Shared keys on Postgres: the multi-process scenarios (`shared_worker.py`), JS and Python
processes mixed, against a real Postgres server started here (`postgres_server.py`: Debian's
binaries, a fresh data directory, a free loopback port), and the Postgres store's own promises:
unique owners, idle keys forgotten, a server that stops answering, and one killed and restarted.
Without Postgres's binaries (or psycopg) every test here is reported skipped, with the reason;
never passed."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from pathlib import Path
from typing import Awaitable, Callable, Iterator

import pytest
from postgres_server import PostgresServer, pg_missing
from shared_worker import (
    CONFORMANCE,
    Setup,
    js_missing,
    max_overlap,
    records,
    scenario_eight_processes,
)

from turnstile_scheduler.shared import PostgresStore, SharedKeys, SharedStoreError, StoreUnavailableError

missing = pg_missing()
pytestmark = pytest.mark.skipif(missing is not None, reason=f"SKIPPING the Postgres tests: {missing}")

_databases = itertools.count(1)


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))


def sql(url: str, text: str, params: tuple = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(text, params)
        return cur.fetchall() if cur.description else []


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    s = PostgresServer()
    yield s
    s.close()


@pytest.fixture
def url(server: PostgresServer) -> str:
    """A database of its own for each test, on the module's server."""
    name = f"t{next(_databases)}"
    sql(server.url, f"CREATE DATABASE {name}")
    return server.url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture
def setup(url: str, tmp_path: Path) -> Iterator[Setup]:
    s = Setup({"kind": "postgres", "url": url}, lambda: PostgresStore.open(url), tmp_path)
    yield s
    s.close()


def test_no_server_on_the_port_is_store_unavailable_within_the_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as e:
        run(PostgresStore.open("postgresql://postgres@127.0.0.1:1/postgres", op_timeout_ms=500))
    assert e.value.store == "postgres" and time.monotonic() - started < 3


def test_a_database_holding_another_schema_version_is_refused(url: str) -> None:
    async def main() -> None:
        await (await PostgresStore.open(url)).close()
        sql(url, "UPDATE turnstile_shared_meta SET value = '2' WHERE name = 'schema'")
        with pytest.raises(SharedStoreError, match="schema 2; this package knows schema 1") as e:
            await PostgresStore.open(url)
        assert e.value.code == "store-failed"
        # Refused before anything was written: the script did not run again over the other schema.
        sql(url, "DROP FUNCTION turnstile_shared_now_v2()")
        with pytest.raises(SharedStoreError):
            await PostgresStore.open(url)
        assert sql(url, "SELECT proname FROM pg_proc WHERE proname = 'turnstile_shared_now_v2'") == []

    run(main())


def test_the_store_text_runs_once_per_database(url: str) -> None:
    """A second open changes nothing in the catalog; a store text of another version runs."""

    def catalog() -> list[tuple]:
        return sql(url, "SELECT proname, xmin::text FROM pg_proc WHERE proname LIKE 'turnstile_shared_%%' ORDER BY proname")

    async def main() -> None:
        # Four at once on a new database: each waits for the schema lock, then finds the text run.
        for store in await asyncio.gather(*(PostgresStore.open(url) for _ in range(4))):
            await store.close()
        first = catalog()
        assert len(first) >= 5, first
        await (await PostgresStore.open(url)).close()
        assert catalog() == first, "the functions were not created again"
        sql(url, "UPDATE turnstile_shared_meta SET value = 'other' WHERE name = 'script'")
        store = await PostgresStore.open(url)
        assert catalog() != first, "another text runs again"
        assert re.fullmatch(r"[0-9a-f]{64}", sql(url, "SELECT value FROM turnstile_shared_meta WHERE name = 'script'")[0][0])
        keys = SharedKeys(store, owner="test")
        permit = await keys.acquire("k", limit=1)
        assert await permit.release() == "released"
        await keys.close()
        await store.close()

    run(main())


def test_two_clients_that_chose_the_same_owner_never_share_a_ticket(url: str) -> None:
    async def main() -> None:
        a, b = await PostgresStore.open(url), await PostgresStore.open(url)
        keys_a, keys_b = SharedKeys(a, owner="same"), SharedKeys(b, owner="same")
        first = await keys_a.acquire("k", limit=1)
        second = asyncio.ensure_future(keys_b.acquire("k", limit=1))
        await asyncio.sleep(0.2)
        assert re.fullmatch(r"same-[0-9a-f]{12}-1", first.ticket), first.ticket  # owner, random tag, count
        assert not second.done(), "a second client with the same ticket id was granted while the first held it"
        seen = await a.inspect("k")
        assert (len(seen.held), len(seen.waiting)) == (1, 1)
        assert await first.release() == "released"
        permit = await asyncio.wait_for(second, 5)
        assert re.fullmatch(r"same-[0-9a-f]{12}-1", permit.ticket) and permit.ticket != first.ticket
        assert await permit.release() == "released"
        for k in (keys_a, keys_b):
            await k.close()
        await a.close()
        await b.close()

    run(main())


def test_idle_keys_leave_the_store_5000_made_keys_leave_no_row(url: str) -> None:
    def count() -> tuple[int, int]:
        [(keys, tickets)] = sql(url, "SELECT (SELECT count(*) FROM turnstile_shared_keys), (SELECT count(*) FROM turnstile_shared_tickets)")
        return keys, tickets

    async def main() -> None:
        store = await PostgresStore.open(url)
        keys = SharedKeys(store, owner="made")

        async def one(name: str) -> None:
            permit = await keys.acquire(name, limit=1)
            assert await permit.release() == "released"

        for i in range(0, 5000, 50):
            await asyncio.gather(*(one(f"api:{i + j}") for j in range(50)))
        assert count() == (0, 0), "every ended key was forgotten"
        # Kept while a delay or pause lies ahead, or a dead client's lease runs; swept after.
        slow = await keys.acquire("slow", limit=1, delay_ms=300)
        await slow.release()
        await keys.pause("paused", 300)
        from turnstile_scheduler.shared import Terms

        await store.request("orphan", "dead-1", Terms(limit=1, delay_ms=0, lease_ms=300))
        assert count() == (3, 1)
        await asyncio.sleep(0.35)
        await one("sweeper")
        assert count() == (0, 0), "keys idle since their delay, pause or last lease ended were swept"
        await keys.close()
        await store.close()

    run(main())


def test_a_server_that_stops_answering_gives_typed_errors_and_no_double_grant(server: PostgresServer, url: str, setup: Setup) -> None:
    async def main() -> None:
        lease_ms = 1500
        store = await PostgresStore.open(url, op_timeout_ms=200)
        keys = SharedKeys(store, lease_ms=lease_ms, owner="test")
        try:
            permit = await keys.acquire("k", limit=1)
            other = setup.worker(key="k", limit=1, leaseMs=3000, name="other")
            await other.wait_for(lambda e: e["event"] == "requested")
            server.stop()
            stopped = time.monotonic()
            with pytest.raises(StoreUnavailableError):
                await keys.acquire("elsewhere", limit=1)
            await asyncio.sleep(max(0, lease_ms / 4000 - (time.monotonic() - stopped)))
            server.cont()
            await asyncio.sleep(lease_ms / 1000)
            assert not permit.lost.is_set(), "the permit survived a short outage"
            assert not [e for e in other.events if e["event"] == "granted"], "nothing was granted twice"
            server.stop()
            await asyncio.wait_for(permit.lost.wait(), 5)
            lost_at = time.time() * 1000
            assert isinstance(permit.lost_error, StoreUnavailableError)
            server.cont()
            granted = await other.wait_for(lambda e: e["event"] == "granted", lease_ms / 1000 + 5)
            assert granted["grantedMs"] >= lost_at - 5, "the other process was granted only after this one gave up"
            await other.done()
        finally:
            server.cont()
            await keys.close()
            await store.close()

    run(main())


def test_a_server_killed_and_restarted_gives_typed_errors_then_recovers_with_no_double_grant(tmp_path: Path) -> None:
    own = PostgresServer()
    setup = Setup({"kind": "postgres", "url": own.url}, lambda: PostgresStore.open(own.url), tmp_path)

    async def main() -> None:
        lease_ms = 1500
        store = await PostgresStore.open(own.url, op_timeout_ms=300)
        keys = SharedKeys(store, lease_ms=lease_ms, owner="test")
        try:
            permit = await keys.acquire("k", limit=1)
            other = setup.worker(key="k", limit=1, leaseMs=8000, name="other")
            await other.wait_for(lambda e: e["event"] == "requested")
            own.kill()
            killed_at = time.time() * 1000
            with pytest.raises(StoreUnavailableError):
                await keys.acquire("elsewhere", limit=1)
            await asyncio.wait_for(permit.lost.wait(), 5)
            lost_at = time.time() * 1000
            assert isinstance(permit.lost_error, StoreUnavailableError)
            # Given up at its last confirmed renewal + lease - lease / 6: within a lease of the crash.
            assert lost_at - killed_at < lease_ms, f"given up {lost_at - killed_at:.0f} ms after the crash"
            own.start()
            granted = await other.wait_for(lambda e: e["event"] == "granted", 15)
            assert granted["grantedMs"] >= lost_at - 5, "granted only after the holder gave up"
            assert granted["grant"] == 2
            await other.done()
            again = await keys.acquire("k", limit=1)
            assert await again.release() == "released"
        finally:
            await keys.close()
            await store.close()

    try:
        run(main())
    finally:
        setup.close()
        own.close()


@pytest.mark.parametrize("scenario", CONFORMANCE, ids=lambda f: f.__name__.removeprefix("scenario_"))
def test_conformance(setup: Setup, scenario: Callable[[Setup], Awaitable[None]]) -> None:
    run(scenario(setup))








def test_js_and_python_processes_share_one_database(setup: Setup) -> None:
    js = js_missing()
    if js is not None:
        pytest.skip(f"the JS package is not ready: {js}")
    run(scenario_eight_processes(setup, node=lambda i: i % 2 == 1))


def test_two_js_and_two_python_processes_on_one_key_of_limit_1_never_overlap(setup: Setup) -> None:
    """Four processes, two of each language, loop on one key of limit 1 for 2 s: the tools' own
    start and end records never overlap; prints the grants per second."""
    js = js_missing()
    if js is not None:
        pytest.skip(f"the JS package is not ready: {js}")

    async def main() -> None:
        start_at = time.time() * 1000 + 2500
        workers = [
            setup.worker(i % 2 == 1, key="hot", limit=1, leaseMs=5000, rounds=100000, untilMs=start_at + 2000, holdMs=0,
                         name=f"p{i}", startAt=start_at, log=str(setup.tmp / f"p{i}.jsonl"))
            for i in range(4)
        ]
        await asyncio.gather(*(w.done() for w in workers))
        recs = records(setup.tmp)
        starts = [r for r in recs if r["event"] == "start"]
        assert max_overlap(recs) == 1
        by_language = {lang: sum(1 for r in starts if int(r["name"][1:]) % 2 == (1 if lang == "js" else 0)) for lang in ("js", "python")}
        print(f"postgres: {len(starts)} grants in 2 s on one key of limit 1 across 2 JS and 2 Python processes ({len(starts) // 2}/s; {by_language})")
        assert by_language["js"] > 5 and by_language["python"] > 5

    run(main())
