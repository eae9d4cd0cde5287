"""Seeded randomized runs of the driver: many concurrent batches mixing every `execute`
behaviour (ok, raise, sync raise, non-awaitable, slow, asking, ignoring cancellation), random
decisions (invalid ones included), and cancellations. After each run: no key went over its
limit, entries of a key started in entry (written) order, every entry has exactly one outcome,
no batch is left pending, and every slot is free. `TURNSTILE_SEED=N` replays one seed,
`TURNSTILE_SEEDS=N` sets how many. The executions yield to the loop instead of sleeping."""

from __future__ import annotations

import asyncio
import os
import random

import pytest

import vloop
from turnstile_scheduler import Call, Driver, OutcomeStatus, Policy, Scheduler, SubmitError

TOOLS = {  # tool -> (key, limit, fan-out)
    "a1": ("a", 1, False),
    "a2": ("a", 1, False),
    "b": ("b", 2, True),
    "c": ("c", 3, False),
    "s": ("s", 1, True),  # on_error = "stop"
    "free": (None, None, True),
}
CONFIG = """
[conversation.tools.a1]
concurrency = { key = "a" }
[conversation.tools.a2]
concurrency = { key = "a" }
[conversation.tools.b]
concurrency = { key = "b", limit = 2 }
fan_out = true
[conversation.tools.c]
concurrency = { key = "c", limit = 3 }
[conversation.tools.s]
concurrency = { key = "s", limit = 1 }
fan_out = { on_error = "stop" }
[conversation.tools.free]
fan_out = true
"""
BEHAVIOURS = ["ok", "ok", "ok", "raise", "sync-raise", "non-awaitable", "slow", "ask", "stubborn"]
DECISIONS = ["approve"] * 12 + ["reject", "skip", "fail", "bogus", "raise"]


def seeds() -> list[int]:
    if "TURNSTILE_SEED" in os.environ:
        return [int(os.environ["TURNSTILE_SEED"])]
    return list(range(int(os.environ.get("TURNSTILE_SEEDS", "12"))))


@pytest.mark.parametrize("seed", seeds())
def test_random_batches_hold_every_invariant(seed: int) -> None:
    rng = random.Random(seed)
    vloop.run(asyncio.wait_for(run(rng), 60))


async def yields(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def run(rng: random.Random) -> None:
    d = Driver(Scheduler(Policy.resolve([("random", CONFIG)])))
    timeout = rng.choice([None, 5.0])
    running: dict[str, int] = {}
    starts: dict[str, list[int]] = {}
    behaviour: dict[int, str] = {}
    violations: list[str] = []
    next_id = [0]

    def execute(x):
        key, limit, _ = TOOLS[x.call.tool]
        how = rng.choice(BEHAVIOURS)
        behaviour[x.entry] = how
        if how == "sync-raise":
            raise RuntimeError("sync")
        if how == "non-awaitable":
            return "not awaitable"

        async def body():
            if key is not None:
                running[key] = running.get(key, 0) + 1
                starts.setdefault(key, []).append(x.entry)
                if running[key] > limit:
                    violations.append(f"key {key} over its limit {limit}")
            try:
                if how == "slow":
                    await yields(rng.randrange(1, 30))
                elif how == "ask":
                    async with x.question():
                        await yields(rng.randrange(1, 10))
                elif how == "stubborn":
                    for _ in range(rng.randrange(1, 20)):
                        try:
                            await asyncio.sleep(0)
                        except asyncio.CancelledError:
                            pass  # ignores cancellation for a while
                else:
                    await asyncio.sleep(0)
                if how == "raise":
                    raise OSError("failed")
                return x.label
            finally:
                if key is not None:
                    running[key] -= 1

        return body()

    def calls() -> list[Call]:
        out = []
        for _ in range(rng.randrange(1, 6)):
            tool = rng.choice(list(TOOLS))
            next_id[0] += 1
            ops = rng.randrange(1, 4) if TOOLS[tool][2] and rng.random() < 0.6 else None
            out.append(Call(f"call{next_id[0]}", tool, ops))
        return out

    async def decide(label, call):
        choice = rng.choice(DECISIONS)
        if rng.random() < 0.2:
            await asyncio.sleep(0)
        if choice == "raise":
            raise LookupError("prompt failed")
        return choice

    async def one(batch: list[Call]):
        try:
            return batch, await d.run(batch, execute, decide=decide if rng.random() < 0.7 else None, execution_timeout=timeout)
        except (LookupError, ValueError) as e:
            return batch, e

    tasks = []
    for _ in range(rng.randrange(20, 60)):
        tasks.append(asyncio.ensure_future(one(calls())))
        if rng.random() < 0.5:
            await yields(rng.randrange(0, 5))
        if rng.random() < 0.15:
            victim = rng.choice(tasks)
            victim.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)

    assert not violations, violations[:5]
    for key, entries in starts.items():
        assert entries == sorted(entries), f"key {key} started out of written order: {entries}"
    for r in results:
        if isinstance(r, BaseException):
            assert isinstance(r, (asyncio.CancelledError, SubmitError)), repr(r)
            continue
        batch, outcome = r
        if isinstance(outcome, Exception):
            continue
        assert [o.id for o in outcome] == [c.id for c in batch]
        for c, o in zip(batch, outcome):
            labels = [c.id] if c.operations is None else [f"{c.id}#{i}" for i in range(c.operations)]
            assert [e.label for e in o.entries] == labels
            for e in o.entries:
                assert e.status in OutcomeStatus
                if e.status is OutcomeStatus.SETTLED:
                    assert e.reason is not None
                if e.status is OutcomeStatus.OK:
                    assert e.value == e.label and behaviour.get(e.entry) not in ("raise", "sync-raise", "non-awaitable")
                if e.status is OutcomeStatus.FAILED:
                    assert e.error is not None
    # Stubborn executions of cancelled runs may still be finishing: let them.
    for _ in range(200):
        if not d._batches:
            break
        await asyncio.sleep(0)
    assert d.scheduler.unfinished().batches == [], "a batch was left pending"
    assert not d._batches and not d._owner and d.running() == []
    # Every slot is free: one call per key starts at once.
    probe = [Call(f"probe-{t}", t) for t in TOOLS]
    out = await d.run(probe, execute, decide=lambda label, call: "approve")
    assert len(out) == len(TOOLS) and d.scheduler.unfinished().batches == []
    assert all(v == 0 for v in running.values())
