"""The floor under the driver: the peers bench's batches (`bench/peers.py`) scheduled without
the driver, against an asyncio.Semaphore per key, side by side in one process, interleaved:

- component: the component's verbs as the package binds them (`submit-batch`, `on-events` with
  the approvals, then per round `on-ended` of everything the previous round started and
  `next-releases`), executions "run" synchronously: wasmtime-py, the package's fast path and
  the component, nothing else;
- package:   the same rounds through the public `Scheduler.submit` and `Scheduler.step` (the
  package's checks and its step over the component's verbs), still without the driver.

What the driver adds on top is tasks, executions, outcomes and its bookkeeping. Reported per
size: us per call (best of the runs) and the median of the paired ratios to the semaphores.
`python bench/floor.py [PAIRS]` with the package installed (it imports the batches and the
semaphores from `peers.py`, beside it) (the JS package's bench/floor.mjs
is the same measurement against p-limit)."""

from __future__ import annotations

import asyncio
import sys
import time

from peers import CONFIG, SIZES, batch, semaphores
from turnstile_scheduler import Policy, Scheduler
from turnstile_scheduler.scheduler import _Fields
from wasmtime.component import Variant

def component(policy: Policy, n: int, rounds: int) -> float:
    """The component's verbs as bound by the package (its private fast path)."""
    scheduler = Scheduler(policy)
    verbs = dict(zip(scheduler._step.__code__.co_freevars, (c.cell_contents for c in scheduler._step.__closure__)))
    on_events, on_ended, next_releases = verbs["on_events"], verbs["on_ended"], verbs["next_releases"]
    resource = scheduler._resource
    calls = batch(n)
    start = time.perf_counter()
    for _ in range(rounds):
        submitted = scheduler.submit(calls)
        on_events(resource, [Variant("approve", list(submitted.entries))], None)
        while True:
            out = next_releases(resource, None)
            if out.retired:
                break
            on_ended(resource, _Fields(ok=out.start, failed=[], rate_limited=[]), None)
    elapsed = time.perf_counter() - start
    scheduler.close()
    return elapsed


def package(policy: Policy, n: int, rounds: int) -> float:
    """The public `Scheduler.submit` and `Scheduler.step`."""
    scheduler = Scheduler(policy)
    calls = batch(n)
    start = time.perf_counter()
    for _ in range(rounds):
        submitted = scheduler.submit(calls)
        out = scheduler.step(approve=submitted.entries)
        while not out.retired:
            out = scheduler.step(ok=out.start)
    elapsed = time.perf_counter() - start
    scheduler.close()
    return elapsed


async def main(pairs: int) -> None:
    policy = Policy.resolve([("bench", CONFIG)])
    print(f"| batch size | rounds | component (us/call, best) | package, no driver (us/call, best) | Semaphore per key (us/call, best) | component / Semaphore, median of {pairs} | package / Semaphore, median of {pairs} |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, rounds in SIZES:
        component(policy, n, rounds)
        package(policy, n, rounds)
        await semaphores(n, rounds)
        a, b, c = [], [], []
        for i in range(pairs):
            if i % 2:
                c.append(await semaphores(n, rounds))
                a.append(component(policy, n, rounds))
                b.append(package(policy, n, rounds))
            else:
                a.append(component(policy, n, rounds))
                b.append(package(policy, n, rounds))
                c.append(await semaphores(n, rounds))
        per = lambda s: f"{s * 1e6 / (n * rounds):.1f}"  # noqa: E731
        ratio = lambda xs: f"{sorted(x / y for x, y in zip(xs, c))[len(xs) // 2]:.2f}x"  # noqa: E731
        print(f"| {n} | {rounds} | {per(min(a))} | {per(min(b))} | {per(min(c))} | {ratio(a)} | {ratio(b)} |", flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 9))
