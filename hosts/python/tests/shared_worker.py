"""A process sharing a key, and the helpers of the shared-key tests.

As a program (`python shared_worker.py '<json>'`, the same arguments and events as the JS
package's `test/fixtures/shared-worker.mjs`): opens the store, waits for `startAt`, then
acquires the key `rounds` times, each time recording its tool's start and end (its own clock) to
`log` (one JSON line each) and holding the permit `holdMs`, and stops early at `untilMs` (its
wall clock) when given. With `hang` it holds its first permit
until killed. It prints one JSON line per event: `requested`, `granted`, `released`, `done`;
`lost` when a permit is lost (then it exits), `error` when an acquire raises (then it exits 0).
Every event carries `at`, the real wall clock, and every record `m`, the SQLite store's clock.
`owner` sets the SharedKeys' owner (default: `name`); `wallStepMs` steps this process's wall
clock (`time.time`) by that much before the store opens.

As a module: `Worker` (a worker process and its events; the JS worker too, with `node=True`),
`records`, `max_overlap`, `redis_missing` and `RedisServer` (a real redis-server on a free
loopback port).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

HERE = Path(__file__).resolve().parent
JS_PACKAGE = HERE.parent.parent / "js"
JS_WORKER = JS_PACKAGE / "test" / "fixtures" / "shared-worker.mjs"


def js_missing() -> Optional[str]:
    """None when the JS package's worker can run here (built, with better-sqlite3, ioredis and pg
    installed), else why not."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not (JS_PACKAGE / "dist" / "shared" / "index.js").exists():
        return f"{JS_PACKAGE / 'dist'} has no shared/ (cd hosts/js && node build.mjs)"
    for name in ("better-sqlite3", "ioredis", "pg"):
        if not (JS_PACKAGE / "node_modules" / name).exists():
            return f"{name} is not installed in {JS_PACKAGE} (npm ci)"
    return None


async def _main(args: dict[str, Any]) -> None:
    from turnstile_scheduler.shared import PostgresStore, RedisStore, SharedKeys, SqliteStore
    from turnstile_scheduler.shared.sqlite import sqlite_now_ms

    real_time = time.time

    def now_ms() -> int:
        return int(real_time() * 1000)

    def say(event: dict[str, Any]) -> None:
        print(json.dumps({"name": args["name"], "at": now_ms(), **event}), flush=True)

    def record(event: dict[str, Any]) -> None:
        if args.get("log"):
            with open(args["log"], "a") as f:
                f.write(json.dumps({"name": args["name"], "pid": os.getpid(), "m": sqlite_now_ms(), **event}) + "\n")

    if args.get("wallStepMs"):
        step = args["wallStepMs"] / 1000
        time.time = lambda: real_time() + step  # type: ignore[assignment]

    spec = args["store"]
    store: Any
    if spec["kind"] == "sqlite":
        store = await SqliteStore.open(spec["path"])
    elif spec["kind"] == "postgres":
        store = await PostgresStore.open(spec["url"])
    else:
        store = await RedisStore.open(spec["url"])
    request = store.request

    async def reporting_request(key: str, ticket: str, terms: Any) -> Any:
        state = await request(key, ticket, terms)
        say({"event": "requested", "ticket": ticket, "state": state.state, "seq": state.seq})
        return state

    store.request = reporting_request
    keys = SharedKeys(store, lease_ms=args["leaseMs"], owner=args.get("owner", args["name"]))
    if args.get("startAt"):
        await asyncio.sleep(max(0, args["startAt"] - now_ms()) / 1000)
    for round_ in range(args.get("rounds", 1)):
        if args.get("untilMs") and now_ms() >= args["untilMs"]:
            break
        requested_at = now_ms()
        try:
            permit = await keys.acquire(args["key"], limit=args["limit"], delay_ms=args.get("delayMs", 0))
        except Exception as e:
            say({"event": "error", "round": round_, "error": type(e).__name__, "code": getattr(e, "code", None), "message": str(e)})
            os._exit(0)

        async def watch_lost(permit: Any = permit, round_: int = round_) -> None:
            await permit.lost.wait()
            e = permit.lost_error
            say({"event": "lost", "round": round_, "ticket": permit.ticket, "error": type(e).__name__, "code": getattr(e, "code", None), "message": str(e)})
            os._exit(0)

        watcher = asyncio.get_running_loop().create_task(watch_lost())
        start = now_ms()
        grant = {"ticket": permit.ticket, "seq": permit.seq, "grant": permit.grant, "grantedMs": permit.granted_ms}
        record({"event": "start", "round": round_, "t": start, "requestedAt": requested_at, **grant})
        say({"event": "granted", "round": round_, **grant})
        if args.get("hang"):
            await asyncio.Event().wait()
        await asyncio.sleep(args.get("holdMs", 0) / 1000)
        record({"event": "end", "round": round_, "t": now_ms(), "ticket": permit.ticket})
        watcher.cancel()
        removal = await permit.release()
        say({"event": "released", "round": round_, "removal": removal})
    await keys.close()
    await store.close()
    say({"event": "done"})


class Worker:
    """A worker process (Python's, or the JS package's with `node=True`) and its stdout events."""

    def __init__(self, args: dict[str, Any], *, node: bool = False) -> None:
        self.args = args
        command = ["node", str(JS_WORKER)] if node else [sys.executable, str(Path(__file__))]
        self.process = subprocess.Popen(
            [*command, json.dumps(args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.events.append(json.loads(line))

    async def wait_for(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 15.0) -> dict[str, Any]:
        """The first event matching `pred` (seen before or after the call)."""
        deadline = time.monotonic() + timeout
        while True:
            for event in list(self.events):
                if pred(event):
                    return event
            if self.process.poll() is not None:
                self._reader.join(1)
                if not any(pred(e) for e in self.events):
                    raise AssertionError(f"{self.args['name']} exited ({self.process.returncode}) before the event; events {self.events}; stderr {self.process.stderr.read()}")
                continue
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.args['name']}: no matching event within {timeout} s; events {self.events}")
            await asyncio.sleep(0.01)

    async def done(self, timeout: float = 40.0) -> None:
        await self.wait_for(lambda e: e["event"] == "done", timeout)
        code = await asyncio.get_running_loop().run_in_executor(None, self.process.wait)
        if code != 0:
            raise AssertionError(f"{self.args['name']} exited with {code}: {self.process.stderr.read()}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def records(folder: Path) -> list[dict[str, Any]]:
    """Every record the workers' tools wrote to `folder` (files *.jsonl)."""
    out = []
    for path in sorted(folder.glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line]
    return out


def max_overlap(recs: list[dict[str, Any]]) -> int:
    """The most tools running at once (an end at the same ms as a start counts as before it)."""
    points = sorted((r["t"], 1 if r["event"] == "start" else -1) for r in recs)
    now = peak = 0
    for _, d in points:
        now += d
        peak = max(peak, now)
    return peak


REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")


def redis_missing() -> Optional[str]:
    """None when redis-server and redis-py are here, else why not."""
    if shutil.which(REDIS_SERVER) is None:
        return f"{REDIS_SERVER} is not installed; install Debian's redis-server (.ci/run does) to run these tests"
    try:
        import redis  # noqa: F401
    except ImportError:
        return "redis-py is not installed (pip install 'turnstile-scheduler[test]')"
    return None


class RedisServer:
    """A redis-server of our own on a free loopback port, in a temporary folder, no persistence.
    `stop()`/`cont()` send SIGSTOP/SIGCONT; `restart_empty()` starts it again with no data;
    `close()` kills it."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="turnstile-redis-")
        for _ in range(3):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            self.process = self._spawn()
            if self._answers():
                self.url = f"redis://127.0.0.1:{self.port}"
                return
            self.process.kill()
            self.process.wait()
        raise RuntimeError("redis-server did not start")

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _answers(self) -> bool:
        for _ in range(100):
            if self.process.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def restart_empty(self) -> None:
        """Kills the server and starts a new one on the same port, with no data."""
        self.cont()
        self.process.kill()
        self.process.wait()
        self.process = self._spawn()
        if not self._answers():
            raise RuntimeError(f"redis-server did not come back on 127.0.0.1:{self.port}")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def cont(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.cont()
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Setup:
    """One store for one test: `spec` as workers name it, `open()` opens it in the test process,
    `tmp` is a temporary folder; `worker(...)` starts a worker killed at teardown."""

    def __init__(self, spec: dict[str, Any], open_store: Callable[[], Any], tmp: Path) -> None:
        self.spec = spec
        self.open = open_store
        self.tmp = tmp
        self.workers: list[Worker] = []

    def worker(self, node: bool = False, **args: Any) -> Worker:
        w = Worker({"store": self.spec, **args}, node=node)
        self.workers.append(w)
        return w

    def close(self) -> None:
        for w in self.workers:
            w.kill()


# The multi-process scenarios every store must pass (the same as the JS package's
# test/fixtures/shared-scenarios.mjs). Failure paths first.


async def scenario_holder_killed(s: Setup) -> None:
    """A holder killed with SIGKILL loses its permit when its lease expires; the next goes on."""
    lease_ms = 900
    base = {"key": "k", "limit": 1, "leaseMs": lease_ms}
    holder = s.worker(**base, name="holder", hang=True)
    await holder.wait_for(lambda e: e["event"] == "granted")
    nxt = s.worker(**base, name="next")
    await nxt.wait_for(lambda e: e["event"] == "requested")
    await asyncio.sleep(lease_ms / 2000)
    assert not [e for e in nxt.events if e["event"] == "granted"], "granted while the holder lived"
    killed = time.monotonic()
    holder.kill()
    granted = await nxt.wait_for(lambda e: e["event"] == "granted", lease_ms / 1000 + 5)
    waited_ms = (time.monotonic() - killed) * 1000
    assert waited_ms <= lease_ms + 2000, f"granted {waited_ms:.0f} ms after the kill (lease {lease_ms} ms)"
    assert granted["grant"] == 2
    await nxt.done()


async def scenario_holder_stopped(s: Setup) -> None:
    """A holder stopped (SIGSTOP) past its lease: its permit is granted again when the lease
    ends, and it learns at its next heartbeat once it runs again."""
    lease_ms = 900
    base = {"key": "k", "limit": 1, "leaseMs": lease_ms}
    holder = s.worker(**base, name="holder", hang=True)
    await holder.wait_for(lambda e: e["event"] == "granted")
    nxt = s.worker(**base, name="next", hang=True)
    await nxt.wait_for(lambda e: e["event"] == "requested")
    await asyncio.sleep(lease_ms / 2000)
    assert not [e for e in nxt.events if e["event"] == "granted"], "granted while the holder ran"
    stopped = time.monotonic()
    holder.process.send_signal(signal.SIGSTOP)
    granted = await nxt.wait_for(lambda e: e["event"] in ("granted", "error"), lease_ms / 1000 + 5)
    if granted["event"] == "error":
        # SQLite only: the holder was stopped inside one of its transactions (a few ms per
        # heartbeat), so it holds the file's write lock; the store fails closed (SHARED.md).
        assert (s.spec["kind"], granted["code"]) == ("sqlite", "store-unavailable"), granted
        holder.process.send_signal(signal.SIGCONT)
        return
    waited_ms = (time.monotonic() - stopped) * 1000
    assert waited_ms <= lease_ms + 2000, f"granted {waited_ms:.0f} ms after the stop (lease {lease_ms} ms)"
    assert granted["grant"] == 2
    assert not [e for e in holder.events if e["event"] == "lost"], "a stopped process reports nothing"
    # Running again, it learns at once: its lease schedule sees no renewal confirmed in time and
    # gives the ticket up (StoreUnavailableError, "not renewed in time"), or a renewal in flight
    # at the stop comes back unknown (LeaseLostError). Its tool stops.
    holder.process.send_signal(signal.SIGCONT)
    resumed = time.monotonic()
    lost = await holder.wait_for(lambda e: e["event"] == "lost", lease_ms / 1000 + 5)
    assert (time.monotonic() - resumed) * 1000 <= lease_ms / 3 + 2000, "learned within a heartbeat of running again"
    assert lost["error"] in ("StoreUnavailableError", "LeaseLostError"), lost
    assert not [e for e in nxt.events if e["event"] == "lost"], "the new holder keeps its permit"


async def scenario_waiter_killed(s: Setup) -> None:
    """A waiting process killed with SIGKILL does not block the queue."""
    from turnstile_scheduler.shared import SharedKeys

    lease_ms = 900
    store = await s.open()
    keys = SharedKeys(store, lease_ms=lease_ms, owner="test")
    try:
        held = await keys.acquire("k", limit=1)
        base = {"key": "k", "limit": 1, "leaseMs": lease_ms}
        doomed = s.worker(**base, name="doomed", hang=True)
        first = await doomed.wait_for(lambda e: e["event"] == "requested")
        after = s.worker(**base, name="after")
        second = await after.wait_for(lambda e: e["event"] == "requested")
        assert first["seq"] < second["seq"]
        doomed.kill()
        await held.release()
        granted = await after.wait_for(lambda e: e["event"] == "granted", lease_ms / 1000 + 5)
        assert granted["ticket"] == second["ticket"]
        await after.done()
        left = await store.inspect("k")
        assert (left.held, left.waiting) == ((), ())
    finally:
        await keys.close()
        await store.close()


async def scenario_eight_processes(s: Setup, node: Callable[[int], bool] = lambda i: False) -> None:
    """Eight processes on a key of limit 2: never more than 2 at once, grants in request order.
    `node(i)` makes worker i the JS package's. The test holds one permit of a limit of 3
    throughout, so the workers share 2 and the key is never idle (an idle key is forgotten, and
    its seq and grant counts start again)."""
    from turnstile_scheduler.shared import SharedKeys

    store = await s.open()
    keys = SharedKeys(store, lease_ms=5000, owner="pin")
    pin = await keys.acquire("gh", limit=3)
    start_at = time.time() * 1000 + 1500
    workers = [
        s.worker(node(i), key="gh", limit=3, leaseMs=5000, rounds=3, holdMs=15 + (i % 3) * 10,
                 name=f"w{i}", startAt=start_at, log=str(s.tmp / f"w{i}.jsonl"))
        for i in range(8)
    ]
    await asyncio.gather(*(w.done() for w in workers))
    assert await pin.release() == "released"
    await keys.close()
    await store.close()
    recs = records(s.tmp)
    starts = [r for r in recs if r["event"] == "start"]
    assert len(starts) == 24 and len([r for r in recs if r["event"] == "end"]) == 24
    overlap = max_overlap(recs)
    assert overlap <= 2, f"{overlap} tools ran at once"
    # The store's FIFO: no ticket here is withdrawn or lost, so the n-th request of the key's
    # life is its n-th grant (a store that forgets an idle key, between processes that started
    # apart, starts both counts again at 1).
    assert all(r["grant"] == r["seq"] for r in starts), sorted((r["seq"], r["grant"], r["name"]) for r in starts)
    # On the store's clock: SQLite's is CLOCK_MONOTONIC (`m`); Redis's TIME is the wall clock here.
    for r in starts:
        assert r["m" if s.spec["kind"] == "sqlite" else "t"] >= r["grantedMs"] - 1, f"{r['name']} started before its grant"


async def scenario_same_owner(s: Setup) -> None:
    """Two (three) clients configured with the same owner never share a ticket: never both
    granted on a limit of 1."""
    start_at = time.time() * 1000 + 1000
    workers = [
        s.worker(key="dup", limit=1, leaseMs=900, rounds=3, holdMs=60, owner="same",
                 name=name, startAt=start_at, log=str(s.tmp / f"{name}.jsonl"))
        for name in ("a", "b", "c")
    ]
    await asyncio.gather(*(w.done() for w in workers))
    recs = records(s.tmp)
    starts = [r for r in recs if r["event"] == "start"]
    assert len(starts) == 9 and len({r["ticket"] for r in starts}) == 9
    assert max_overlap(recs) == 1
    for w in workers:
        assert [e["removal"] for e in w.events if e["event"] == "released"] == ["released"] * 3


async def scenario_wall_clock_steps(s: Setup) -> None:
    """A process whose wall clock is an hour ahead, and one an hour behind: no ticket purged,
    no grant stalled."""
    start_at = time.time() * 1000 + 1000
    workers = [
        s.worker(key="stepped", limit=1, delayMs=50, leaseMs=900, rounds=3, holdMs=150, wallStepMs=step,
                 name=name, startAt=start_at, log=str(s.tmp / f"{name}.jsonl"))
        for name, step in (("now", 0), ("ahead", 3_600_000), ("behind", -3_600_000))
    ]
    await asyncio.gather(*(w.done(20) for w in workers))
    recs = records(s.tmp)
    assert len([r for r in recs if r["event"] == "start"]) == 9
    assert max_overlap(recs) == 1, "never two at once"
    for w in workers:
        assert not [e for e in w.events if e["event"] in ("lost", "error")], w.events
        assert [e["removal"] for e in w.events if e["event"] == "released"] == ["released"] * 3


async def scenario_delay(s: Setup) -> None:
    """A spacing delay holds across processes."""
    delay_ms = 120
    start_at = time.time() * 1000 + 1500
    workers = [
        s.worker(key="spaced", limit=4, delayMs=delay_ms, leaseMs=5000, rounds=2, holdMs=5,
                 name=f"d{i}", startAt=start_at, log=str(s.tmp / f"d{i}.jsonl"))
        for i in range(4)
    ]
    await asyncio.gather(*(w.done() for w in workers))
    starts = sorted((r for r in records(s.tmp) if r["event"] == "start"), key=lambda r: r["grant"])
    assert len(starts) == 8
    for a, b in zip(starts, starts[1:]):
        gap = b["grantedMs"] - a["grantedMs"]
        assert gap >= delay_ms, f"grants {a['grant']} and {b['grant']} were {gap} ms apart"


async def scenario_bad_terms(s: Setup) -> None:
    """A request with terms no client writes is refused before anything is written; the key
    goes on."""
    from turnstile_scheduler import RateWindow
    from turnstile_scheduler.shared import SharedStoreError, Terms

    def window(count: int, burst: int = 1) -> RateWindow:
        return RateWindow(count, 1000, burst)

    store = await s.open()
    try:
        bad = [
            Terms(0, 0, 3000),
            Terms(1, 0, 3000, (window(0),)),
            Terms(1, 0, 3000, (window(1_000_001),)),
            Terms(1, 0, 3000, (window(1, 1_000_001),)),
            Terms(1, 0, 3000, (window(1), window(1, 2))),
            Terms(1, 0, 3000, tuple(window(i + 1) for i in range(9))),
            Terms(1, 0, 3000, (window(1, 2),), 3),
            Terms(1, 0, 3000, (window(1, 2),), 0),
            Terms(1, 0, 3000, (), 2),
        ]
        for i, terms in enumerate(bad):
            try:
                await store.request("bad", f"t-{i}", terms)
            except SharedStoreError as e:
                assert e.code == "store-failed", (terms, e)
            else:
                raise AssertionError(f"{terms} was accepted")
        # (A new SQLite file grants nothing for a lease: the ticket may wait.)
        fine = await store.request("bad", "fine", Terms(1, 0, 3000))
        assert (fine.state != "lost", fine.seq) == (True, 1), "nothing refused entered the key"
        seen = await store.inspect("bad")
        assert [h[0] for h in (*seen.held, *seen.waiting)] == ["fine"]
        await store.abandon("bad", "fine")
    finally:
        await store.close()


async def scenario_rate(s: Setup) -> None:
    """Rate windows hold across clients: a burst at once, then the pace, counted at the store;
    a weight costs that many intervals."""
    from turnstile_scheduler import RateWindow
    from turnstile_scheduler.shared import SharedKeys

    stores = [await s.open(), await s.open()]
    keys = [SharedKeys(store, owner=f"r{i}") for i, store in enumerate(stores)]
    try:
        # 2 per 600 ms is one per 300 ms; a burst of 2 lets two through at once.
        rates = (RateWindow(2, 600, 2),)
        permits = [await keys[i % 2].acquire("r", limit=10, rates=rates) for i in range(4)]
        permits.append(await keys[1].acquire("r", limit=10, rates=rates, weight=2))
        at = [p.granted_ms - permits[0].granted_ms for p in permits]
        assert at[1] < 300, f"the burst: {at}"
        for i, least in ((2, 300), (3, 600), (4, 1200)):
            assert least <= at[i] < least + 2000, f"grant {i + 1} at {at[i]} ms, its window opened at {least}: {at}"
        seen = await stores[0].inspect("r")
        assert [(a.count, a.per_ms, a.at_ms - permits[0].granted_ms >= 1800) for a in seen.arrivals] == [(2, 600, True)]
        for p in permits:
            await p.release()
    finally:
        for k in keys:
            await k.close()
        for store in stores:
            await store.close()


async def scenario_pause(s: Setup) -> None:
    """A pause only extends, and holds in every process."""
    from turnstile_scheduler.shared import SharedKeys

    store = await s.open()
    keys = SharedKeys(store, owner="test")
    try:
        until = await keys.pause("p", 700)
        assert await keys.pause("p", 50) == until, "a shorter pause does not shorten it"
        longer = await keys.pause("p", 800)
        assert longer >= until
        other = s.worker(key="p", limit=1, leaseMs=3000, name="paused")
        granted = await other.wait_for(lambda e: e["event"] == "granted", 10)
        assert granted["grantedMs"] >= longer
        await other.done()
    finally:
        await keys.close()
        await store.close()


async def scenario_cancel(s: Setup) -> None:
    """Cancelling or timing out a wait withdraws the request; the next in line gets the permit."""
    from turnstile_scheduler.shared import SharedKeys

    store = await s.open()
    keys = SharedKeys(store, owner="test")
    try:
        held = await keys.acquire("a", limit=1)
        withdrawn = asyncio.ensure_future(keys.acquire("a", limit=1))
        try:
            await keys.acquire("a", limit=1, timeout=0.05)
            raise AssertionError("granted while held")
        except TimeoutError:
            pass
        nxt = asyncio.ensure_future(keys.acquire("a", limit=1))
        await asyncio.sleep(0.05)
        withdrawn.cancel()
        try:
            await withdrawn
            raise AssertionError("not cancelled")
        except asyncio.CancelledError:
            pass
        assert await held.release() == "released"
        permit = await asyncio.wait_for(nxt, 5)
        assert permit.grant == 2
        assert await permit.release() == "released"
        assert await permit.release() == "lost"
        assert keys.inspect() == []
    finally:
        await keys.close()
        await store.close()


if __name__ == "__main__":
    asyncio.run(_main(json.loads(sys.argv[1])))


CONFORMANCE: tuple[Callable[[Setup], Awaitable[None]], ...] = (
    scenario_holder_killed,
    scenario_holder_stopped,
    scenario_waiter_killed,
    scenario_eight_processes,
    scenario_delay,
    scenario_rate,
    scenario_bad_terms,
    scenario_pause,
    scenario_cancel,
    scenario_same_owner,
    scenario_wall_clock_steps,
)
"""The scenarios every store runs, in every language's tests (the JS package's
`test/fixtures/shared-scenarios.mjs` is the same list): a test file parametrizes one test over
them, so no store's list can miss one."""
