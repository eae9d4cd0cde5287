"""Shared keys on SQLite: the SQLite store's failure paths, the multi-process scenarios
(`shared_worker.py`) on one database file, and JS and Python processes sharing one file."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Awaitable, Callable

import pytest
from shared_worker import (
    CONFORMANCE,
    Setup,
    js_missing,
    scenario_eight_processes,
)

from turnstile_scheduler.shared import SharedKeys, SharedStoreError, SqliteStore, StoreSplitError, StoreUnavailableError, Terms
from turnstile_scheduler.shared.sqlite import sqlite_now_ms


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, 45))


@pytest.fixture
def setup(tmp_path: Path):
    path = str(tmp_path / "shared.sqlite")
    logs = tmp_path / "logs"
    logs.mkdir()
    s = Setup({"kind": "sqlite", "path": path}, lambda: SqliteStore.open(path), logs)
    yield s
    s.close()


def test_a_file_that_cannot_be_opened_is_store_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match="unable to open database file") as e:
        run(SqliteStore.open(str(tmp_path / "missing-folder" / "shared.sqlite")))
    assert e.value.code == "store-unavailable" and e.value.store == "sqlite"


def test_a_database_locked_past_the_busy_timeout_is_store_unavailable_and_works_after(setup: Setup) -> None:
    async def main() -> None:
        store = await SqliteStore.open(setup.spec["path"], busy_timeout_ms=200)
        keys = SharedKeys(store, owner="test", lease_ms=600)
        raw = sqlite3.connect(setup.spec["path"], isolation_level=None)
        raw.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="locked for more than 200 ms"):
            await keys.acquire("k", limit=1)
        assert time.monotonic() - started < 2
        raw.execute("COMMIT")
        raw.close()
        permit = await keys.acquire("k", limit=1)
        assert await permit.release() == "released"
        await keys.close()
        await store.close()

    run(main())


def test_a_permit_whose_renewals_fail_past_its_lease_is_lost_before_the_lease_ends(setup: Setup) -> None:
    async def main() -> None:
        store = await SqliteStore.open(setup.spec["path"], busy_timeout_ms=50)
        keys = SharedKeys(store, lease_ms=600, owner="test")
        permit = await keys.acquire("k", limit=1)
        raw = sqlite3.connect(setup.spec["path"], isolation_level=None)
        raw.execute("BEGIN IMMEDIATE")
        await asyncio.wait_for(permit.lost.wait(), 5)
        lost_after = sqlite_now_ms() - permit.granted_ms
        raw.execute("COMMIT")
        raw.close()
        assert isinstance(permit.lost_error, StoreUnavailableError)
        assert lost_after < 600, f"given up {lost_after:.0f} ms after the grant, the lease being 600 ms"
        await keys.close()
        await store.close()

    run(main())


@pytest.mark.parametrize("scenario", CONFORMANCE, ids=lambda f: f.__name__.removeprefix("scenario_"))
def test_conformance(setup: Setup, scenario: Callable[[Setup], Awaitable[None]]) -> None:
    run(scenario(setup))










@pytest.mark.parametrize("path", ["", ":memory:"])
def test_a_path_that_opens_a_private_database_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="private database.*nothing would be shared"):
        run(SqliteStore.open(path))


@pytest.mark.parametrize("fault", ["deleted", "replaced", "moved"])
def test_the_file_split_under_a_holder_and_a_waiter(setup: Setup, fault: str) -> None:
    """The file deleted, replaced or moved while a process holds a permit and another waits:
    both learn it with StoreSplitError (the holder at its next heartbeat), and a process opening
    the path afterwards (a new file) is granted only after both gave up."""

    async def main() -> None:
        path = setup.spec["path"]
        base = {"key": "k", "limit": 1, "leaseMs": 900}
        holder = setup.worker(**base, name="holder", hang=True)
        await holder.wait_for(lambda e: e["event"] == "granted")
        waiter = setup.worker(**base, name="waiter")
        await waiter.wait_for(lambda e: e["event"] == "requested")
        files = [path + suffix for suffix in ("", "-wal", "-shm")]
        folder = os.path.dirname(path)
        if fault == "deleted":
            for f in files:
                if os.path.exists(f):
                    os.remove(f)
        if fault == "moved":
            for f in files:
                if os.path.exists(f):
                    os.rename(f, os.path.join(folder, "elsewhere" + f[len(path) :]))
        if fault == "replaced":
            Path(folder, "new.sqlite").write_bytes(b"")
            os.rename(os.path.join(folder, "new.sqlite"), path)
            for f in files[1:]:
                if os.path.exists(f):
                    os.remove(f)
        newcomer = setup.worker(**base, name="newcomer")
        lost = await holder.wait_for(lambda e: e["event"] == "lost", 5)
        failed = await waiter.wait_for(lambda e: e["event"] == "error", 5)
        for e in (lost, failed):
            assert (e["error"], e["code"]) == ("StoreSplitError", "store-split"), e["message"]
        granted = await newcomer.wait_for(lambda e: e["event"] == "granted", 10)
        assert granted["at"] >= lost["at"] and granted["at"] >= failed["at"], (granted, lost, failed)
        await newcomer.done()

    run(main())


def test_a_split_store_refuses_every_later_call_and_gives_nothing_back(setup: Setup) -> None:
    async def main() -> None:
        path = setup.spec["path"]
        store = await SqliteStore.open(path)
        keys = SharedKeys(store, lease_ms=300, owner="test")
        permit = await keys.acquire("k", limit=1)
        os.remove(path)
        await asyncio.wait_for(permit.lost.wait(), 5)
        assert isinstance(permit.lost_error, StoreSplitError) and permit.lost_error.path == path
        assert await permit.release() == "lost", "nothing is given back"
        with pytest.raises(StoreSplitError):
            await keys.acquire("other", limit=1)
        with pytest.raises(StoreSplitError):
            await store.inspect("k")
        await keys.close()
        await store.close()

    run(main())


def test_a_file_opened_by_another_machine_splits_the_store_and_the_next_open_empties_it(setup: Setup) -> None:
    async def main() -> None:
        path = setup.spec["path"]
        store = await SqliteStore.open(path)
        keys = SharedKeys(store, lease_ms=300, owner="test")
        permit = await keys.acquire("k", limit=1)
        raw = sqlite3.connect(path, isolation_level=None)
        raw.execute("UPDATE turnstile_shared_meta SET value = 'another-boot' WHERE name = 'boot'")
        raw.close()
        await asyncio.wait_for(permit.lost.wait(), 5)
        assert isinstance(permit.lost_error, StoreSplitError) and "another machine" in str(permit.lost_error)
        await keys.close()
        await store.close()
        fresh = await SqliteStore.open(path)
        assert (await fresh.inspect("k")).held == ()
        assert await fresh.key_count() == 0
        await fresh.close()

    run(main())


def test_a_store_call_waiting_for_another_process_lock_does_not_block_the_loop(setup: Setup) -> None:
    async def main() -> None:
        path = setup.spec["path"]
        store = await SqliteStore.open(path, busy_timeout_ms=1000)
        locker = subprocess.Popen(
            [sys.executable, "-c", f"import sqlite3, sys, time\ndb = sqlite3.connect({path!r}, isolation_level=None)\ndb.execute('BEGIN IMMEDIATE')\nprint('locked', flush=True)\ntime.sleep(60)"],
            stdout=subprocess.PIPE, text=True,
        )
        try:
            assert locker.stdout is not None
            assert (await asyncio.get_running_loop().run_in_executor(None, locker.stdout.readline)).strip() == "locked"
            keys = SharedKeys(store, lease_ms=300, owner="test")
            ticks = 0

            async def tick() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticker = asyncio.get_running_loop().create_task(tick())
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError, match="locked for more than 1000 ms"):
                await keys.acquire("k", limit=1)
            elapsed_ms = (time.monotonic() - started) * 1000
            ticker.cancel()
            # About elapsed / 10 ticks when the loop runs; none when a lock wait blocks it.
            assert ticks >= elapsed_ms / 100, f"{ticks} ticks of a 10 ms sleep in {elapsed_ms:.0f} ms"
        finally:
            locker.kill()
            locker.wait()
        permit = await keys.acquire("k", limit=1)
        assert await permit.release() == "released"
        await keys.close()
        await store.close()

    run(main())


def test_idle_keys_leave_the_file(setup: Setup) -> None:
    """5,000 made keys, all ended, leave rows only for the live ones."""

    async def main() -> None:
        path = setup.spec["path"]
        store = await SqliteStore.open(path)
        keys = SharedKeys(store, lease_ms=300, owner="test")
        live = [await keys.acquire(k, limit=1) for k in ("live:1", "live:2", "live:3")]
        for i in range(5000):
            permit = await keys.acquire(f"api:host-{i}", limit=2, delay_ms=i % 2)
            await permit.release()
        await keys.pause("paused", 400)
        # A process that died holding a ticket: nobody touches its key again.
        await store.request("dead", "gone-1", Terms(limit=1, delay_ms=0, lease_ms=300))
        raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        count = lambda table: raw.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # noqa: E731
        assert count("turnstile_shared_keys") <= 3 + 2 + 16
        await asyncio.sleep(0.45)
        # The next writes sweep what became idle meanwhile (the pause ended, the dead lease expired).
        for permit in live:
            await store.renew(permit.key, [permit.ticket])
        assert [r[0] for r in raw.execute("SELECT key FROM turnstile_shared_keys ORDER BY key")] == ["live:1", "live:2", "live:3"]
        assert count("turnstile_shared_tickets") == 3
        assert await store.key_count() == 3
        for permit in live:
            await permit.release()
        assert await store.key_count() == 0
        raw.close()
        await keys.close()
        await store.close()

    asyncio.run(asyncio.wait_for(main(), 120))


js = js_missing()


@pytest.mark.skipif(js is not None, reason=f"the JS package is not ready: {js}")
def test_js_and_python_processes_share_one_file(setup: Setup) -> None:
    """Four JS and four Python processes on one file: the limit and the FIFO hold across both."""
    run(scenario_eight_processes(setup, node=lambda i: i % 2 == 0))


def test_a_file_of_another_schema_version_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    """The schema and statements are the package's (`shared/store/`); a file written by a
    schema of another version is refused at open, before any statement runs on it."""
    path = str(tmp_path / "shared.sqlite")
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE turnstile_shared_meta (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)")
    raw.execute("INSERT INTO turnstile_shared_meta VALUES ('schema', '1')")
    raw.execute("CREATE TABLE turnstile_shared_keys (key TEXT PRIMARY KEY NOT NULL, seq INTEGER NOT NULL DEFAULT 0)")
    raw.commit()
    raw.close()

    async def main() -> None:
        with pytest.raises(SharedStoreError, match="holds shared-key schema 1; this package knows schema 3"):
            await SqliteStore.open(path)

    run(main())
