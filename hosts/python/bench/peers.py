"""Turnstile's asyncio driver against what a Python host would write instead: an
asyncio.Semaphore per key, calls started in written order (waiters are served first come,
first served), unkeyed calls run at once. Same batches, instant executions; timed side by side,
reported as a ratio. `python bench/peers.py` with the package installed.

Each round is one batch on one long-lived scheduler, with the same call ids every round (a call
id is free again once its batch retired), as an agent host would run one scheduler per
conversation."""

import asyncio
import time

from turnstile import Call, Policy, Scheduler, run_batch

KEYS = 10
CONFIG = "".join(f'[conversation.tools.t{k}]\nconcurrency = {{ key = "k{k}", limit = {1 + k % 4} }}\n' for k in range(KEYS))


def batch(n: int) -> list[Call]:
    return [Call(f"c{i}", "free" if i % 10 == 9 else f"t{i % KEYS}") for i in range(n)]


async def execute(_x) -> str:
    return "ok"


async def turnstile(policy: Policy, n: int, rounds: int) -> float:
    scheduler = Scheduler(policy)
    calls = batch(n)
    start = time.perf_counter()
    for _ in range(rounds):
        await run_batch(scheduler, calls, execute)
    elapsed = time.perf_counter() - start
    scheduler.close()
    return elapsed


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
    print("| batch size | rounds | Turnstile driver (us/call) | Semaphore per key (us/call) | Turnstile / Semaphore |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n, rounds in [(10, 300), (100, 50), (1000, 5)]:
        a = min([await turnstile(policy, n, rounds) for _ in range(3)])
        b = min([await semaphores(n, rounds) for _ in range(3)])
        per = lambda s: f"{s * 1e6 / (n * rounds):.1f}"  # noqa: E731
        print(f"| {n} | {rounds} | {per(a)} | {per(b)} | {a / b:.2f}x |")


asyncio.run(main())
