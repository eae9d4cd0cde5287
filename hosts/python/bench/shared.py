"""Shared keys, side by side in one run (the same rows as the JS package's bench/shared.mjs):
acquire + release on a key of limit 4, by 1, 8 and 64 contenders, each in a loop (acquire,
release at once, acquire again) for a fixed window:
- local:  an asyncio.Semaphore, the contenders being tasks of this process (the baseline);
- sqlite: one SqliteStore file, each contender its own process;
- redis:  a redis-server this bench starts on a free loopback port, each contender its own
          process (skipped, and said so, without redis-server or redis-py).
Reported per row: grants per second over all contenders, and p50 / p99 of the acquire latency
(queueing included) and of the release latency. `python bench/shared.py [WINDOW_MS]
[--rows sqlite:8,redis:64]` with the package installed."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Awaitable, Callable

LIMIT = 4
COUNTS = [1, 8, 64]


async def _loop(acquire: Callable[[], Awaitable[Any]], release: Callable[[Any], Awaitable[Any]], start_at: float, end_at: float) -> dict[str, Any]:
    await asyncio.sleep(max(0.0, start_at - time.time()))
    acquire_us: list[int] = []
    release_us: list[int] = []
    grants = 0
    while time.time() < end_at:
        t0 = time.perf_counter()
        permit = await acquire()
        t1 = time.perf_counter()
        await release(permit)
        t2 = time.perf_counter()
        if time.time() <= end_at:
            grants += 1
            acquire_us.append(round((t1 - t0) * 1e6))
            release_us.append(round((t2 - t1) * 1e6))
    return {"grants": grants, "acquireUs": acquire_us, "releaseUs": release_us}


async def _contender(args: dict[str, Any]) -> None:
    from turnstile_scheduler.shared import RedisStore, SharedKeys, SqliteStore

    spec = args["store"]
    store: Any = await SqliteStore.open(spec["path"]) if spec["kind"] == "sqlite" else await RedisStore.open(spec["url"])
    keys = SharedKeys(store, lease_ms=10_000)
    print("ready", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    start_at, end_at = (float(v) for v in line.split())
    out = await _loop(lambda: keys.acquire("bench", limit=LIMIT), lambda p: p.release(), start_at, end_at)
    await keys.close()
    await store.close()
    sys.stdout.write(json.dumps(out))


async def _local(n: int, window: float) -> list[dict[str, Any]]:
    sem = asyncio.Semaphore(LIMIT)

    async def acquire() -> None:
        await sem.acquire()

    async def release(_: Any) -> None:
        sem.release()
        await asyncio.sleep(0)  # a yield per cycle, as a store's await has

    start_at = time.time() + 0.1
    return list(await asyncio.gather(*(_loop(acquire, release, start_at, start_at + window) for _ in range(n))))


def _processes(spec: dict[str, Any], n: int, window: float) -> list[dict[str, Any]]:
    """`n` contender processes; the window opens once every one has started and opened the
    store (starting 64 processes takes seconds on 2 cores, and must not eat the window)."""
    arg = json.dumps({"store": spec})
    if spec["kind"] == "sqlite":
        # A new file grants nothing for one lease (SHARED.md): create it, and let that pass first.
        from turnstile_scheduler.shared import SqliteStore

        async def create() -> None:
            await (await SqliteStore.open(spec["path"])).close()

        asyncio.run(create())
        time.sleep(10)
    children = [
        subprocess.Popen([sys.executable, __file__, "--worker", arg], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(n)
    ]
    for child in children:
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("a contender did not start")
    start_at = time.time() + 0.2
    for child in children:
        child.stdin.write(f"{start_at} {start_at + window}\n")
        child.stdin.flush()
    out = []
    for child in children:
        text, _ = child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"contender exited with {child.returncode}")
        out.append(json.loads(text))
    return out


def _summary(results: list[dict[str, Any]], window: float) -> dict[str, Any]:
    def pct(xs: list[int], p: int) -> float:
        return xs[min(len(xs) - 1, len(xs) * p // 100)] / 1000 if xs else float("nan")

    acquire = sorted(us for r in results for us in r["acquireUs"])
    release = sorted(us for r in results for us in r["releaseUs"])
    grants = sum(r["grants"] for r in results)
    return {
        "per_second": round(grants / window),
        "acquire": (pct(acquire, 50), pct(acquire, 99)),
        "release": (pct(release, 50), pct(release, 99)),
    }


class _Redis:
    def __init__(self, folder: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", folder, "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}"
        for _ in range(100):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")


def main() -> None:
    numbers = [a for a in sys.argv[1:] if a.isdigit()]
    window = int(numbers[0]) / 1000 if numbers else 3.0
    only = sys.argv[sys.argv.index("--rows") + 1].split(",") if "--rows" in sys.argv else None
    folder = tempfile.mkdtemp(prefix="turnstile-bench-")
    try:
        import redis  # noqa: F401

        redis_here = shutil.which("redis-server") is not None
    except ImportError:
        redis_here = False
    server = _Redis(folder) if redis_here else None
    try:
        print(f"shared keys, limit {LIMIT}, window {window * 1000:.0f} ms, {os.cpu_count()} cores, python {sys.version.split()[0]}")
        print("| store | contenders | grants/s | acquire p50 ms | acquire p99 ms | release p50 ms | release p99 ms |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for n in COUNTS:
            for kind in ("local", "sqlite", "redis"):
                if only is not None and f"{kind}:{n}" not in only:
                    continue
                if kind == "local":
                    results = asyncio.run(_local(n, window))
                elif kind == "sqlite":
                    results = _processes({"kind": "sqlite", "path": os.path.join(folder, f"bench-{n}.sqlite")}, n, window)
                elif server is not None:
                    results = _processes({"kind": "redis", "url": server.url}, n, window)
                else:
                    print(f"| redis | {n} | skipped: redis-server or redis-py is not installed | | | | |")
                    continue
                s = _summary(results, window)
                print(f"| {kind} | {n} | {s['per_second']} | {s['acquire'][0]:.3f} | {s['acquire'][1]:.3f} | {s['release'][0]:.3f} | {s['release'][1]:.3f} |", flush=True)
    finally:
        if server is not None:
            server.process.kill()
            server.process.wait()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        asyncio.run(_contender(json.loads(sys.argv[2])))
    else:
        main()
