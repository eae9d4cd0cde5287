"""Turnstile's asyncio driver against what a Python host would write instead: an
asyncio.Semaphore per key, calls started in written order (waiters are served first come,
first served), unkeyed calls run at once. Same batches, instant executions; both timed in the
same run, interleaved (A, B, A, B, ...), best of five each, reported as a ratio.
`python bench/peers.py` with the package installed.

Each round is one batch on one long-lived driver and scheduler, with the same call ids every
round (a call id is free again once its batch retired), as an agent host would run one
scheduler per conversation; the scheduler is closed after each measurement."""

import asyncio
import gc
import time

from turnstile_scheduler import Call, Driver, Policy, Scheduler

KEYS = 10
CONFIG = "".join(f'[conversation.tools.t{k}]\nconcurrency = {{ key = "k{k}", limit = {1 + k % 4} }}\n' for k in range(KEYS))
SIZES = [(10, 400), (100, 60), (1000, 6)]
REPEATS = 5


def batch(n: int) -> list[Call]:
    return [Call(f"c{i}", "free" if i % 10 == 9 else f"t{i % KEYS}") for i in range(n)]


async def execute(_x) -> str:
    return "ok"


async def turnstile(policy: Policy, n: int, rounds: int) -> float:
    calls = batch(n)
    with Driver(Scheduler(policy), owns_scheduler=True) as driver:
        start = time.perf_counter()
        for _ in range(rounds):
            await driver.run(calls, execute)
        return time.perf_counter() - start


async def semaphores(n: int, rounds: int) -> float:
    calls = batch(n)
    start = time.perf_counter()
    for _ in range(rounds):
        sems = [asyncio.Semaphore(1 + k % 4) for k in range(KEYS)]

        async def one(c: Call) -> str:
            if c.tool == "free":
                return await execute(c)
            async with sems[int(c.tool[1:])]:
                return await execute(c)

        await asyncio.gather(*(one(c) for c in calls))
    return time.perf_counter() - start


async def main() -> None:
    policy = Policy.resolve([("bench", CONFIG)])
    await turnstile(policy, 10, 10)  # compile and warm up
    print("| batch size | rounds | Turnstile driver (us/call) | Semaphore per key (us/call) | Turnstile / Semaphore |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n, rounds in SIZES:
        a, b = [], []
        for _ in range(REPEATS):
            gc.collect()
            a.append(await turnstile(policy, n, rounds))
            gc.collect()
            b.append(await semaphores(n, rounds))
        per = lambda s: f"{s * 1e6 / (n * rounds):.1f}"  # noqa: E731
        print(f"| {n} | {rounds} | {per(min(a))} | {per(min(b))} | {min(a) / min(b):.2f}x |", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
