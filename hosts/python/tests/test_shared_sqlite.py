"""Shared keys on SQLite: the SQLite store's failure paths, the multi-process scenarios
(`shared_worker.py`) on one database file, and JS and Python processes sharing one file."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest
from shared_worker import (
    Setup,
    js_missing,
    scenario_cancel,
    scenario_delay,
    scenario_eight_processes,
    scenario_holder_killed,
    scenario_pause,
    scenario_waiter_killed,
)

from turnstile_scheduler.shared import SharedKeys, SharedStoreError, SqliteStore, StoreUnavailableError


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
        keys = SharedKeys(store, owner="test")
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
        lost_after = time.time() * 1000 - permit.granted_ms
        raw.execute("COMMIT")
        raw.close()
        assert isinstance(permit.lost_error, StoreUnavailableError)
        assert lost_after < 600, f"given up {lost_after:.0f} ms after the grant, the lease being 600 ms"
        await keys.close()
        await store.close()

    run(main())


def test_holder_killed(setup: Setup) -> None:
    run(scenario_holder_killed(setup))


def test_waiter_killed(setup: Setup) -> None:
    run(scenario_waiter_killed(setup))


def test_eight_processes_limit_2(setup: Setup) -> None:
    run(scenario_eight_processes(setup))


def test_delay_across_processes(setup: Setup) -> None:
    run(scenario_delay(setup))


def test_pause_extends_only(setup: Setup) -> None:
    run(scenario_pause(setup))


def test_cancel_and_timeout_withdraw(setup: Setup) -> None:
    run(scenario_cancel(setup))


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
    raw.execute("INSERT INTO turnstile_shared_meta VALUES ('schema', '2')")
    raw.commit()
    raw.close()

    async def main() -> None:
        with pytest.raises(SharedStoreError, match="holds shared-key schema 2; this package knows schema 1"):
            await SqliteStore.open(path)

    run(main())
