"""No public method leaks: each runs in a loop in this long-lived process, and after a warm-up
the memory in use must not grow with the number of calls.

Two counters, both exact and cheap: glibc's `mallinfo2()` (bytes malloc holds for wasmtime, its
C API values and ctypes buffers: where wasmtime-py's leak was, 48 bytes per option, result or
variant payload lifted) and `sys.getallocatedblocks()` (Python objects). Bounds are per call,
far below one leaked allocation per call, over two windows of calls so that a cache or free
list filling once is not taken for a leak. RSS covers what neither sees (the component's
linear memory), loosely. No timing is asserted.

Run as a script to measure one method over many calls, as reported in the README:
`python tests/test_leaks.py label 10000000` prints bytes per call and the RSS.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import sys
from typing import Any, Callable

import pytest

from turnstile_scheduler import (
    Admission,
    AdmissionClass,
    Call,
    Driver,
    Instance,
    Policy,
    RateLimited,
    Reason,
    ReasonKind,
    Scheduler,
    Started,
    explain,
)

CONFIG = """
[conversation.tools.rfd]
concurrency = 1
[conversation.tools.fan]
concurrency = 2
fan_out = { on_error = "stop" }
"""

BYTES_PER_CALL_MAX = 2.0
"""A leak of one 48-byte box per call shows as 48; noise over these loops stays well below 1."""
BLOCKS_PER_CALL_MAX = 0.01
"""Python objects kept per call: one per hundred calls is already a leak."""
RSS_PER_CALL_MAX = 512.0
"""What neither counter sees: the component's own memory (a resource never dropped in its
instance grows the instance's linear memory). Loose: RSS moves by pages."""


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
    ]


def _mallinfo2() -> Callable[[], int]:
    try:
        libc = ctypes.CDLL(None)
        f = libc.mallinfo2
    except (OSError, AttributeError):
        pytest.skip("needs glibc's mallinfo2 (glibc 2.33 or later) to count the bytes malloc holds")
    f.restype = _Mallinfo2
    return lambda: f().uordblks + f().hblkhd


def in_use() -> tuple[int, int]:
    """(bytes malloc holds, Python blocks allocated), after a full collection."""
    gc.collect()
    return _malloc_in_use(), sys.getallocatedblocks()


_malloc_in_use: Callable[[], int] = lambda: 0  # noqa: E731  # set by the fixture


@pytest.fixture(autouse=True)
def _counters() -> None:
    global _malloc_in_use
    _malloc_in_use = _mallinfo2()


def rss_kb() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def growth(call: Callable[[], Any], calls: int, warm_up: int = 500) -> tuple[float, float, float]:
    """(malloc bytes, Python blocks, RSS bytes) the process keeps per call of `call`, after
    `warm_up` calls."""
    for _ in range(warm_up):
        call()
    bytes_before, blocks_before = in_use()
    rss_before = rss_kb()
    for _ in range(calls):
        call()
    bytes_after, blocks_after = in_use()
    rss_after = rss_kb()
    return (bytes_after - bytes_before) / calls, (blocks_after - blocks_before) / calls, (rss_after - rss_before) * 1024 / calls


def check(call: Callable[[], Any], calls: int) -> None:
    """Two windows of `calls / 2` calls each, each counter at its lower one: a leak grows in
    both windows, a free list or cache filling up once in one only."""
    first, second = growth(call, calls // 2), growth(call, calls // 2, warm_up=0)
    per_call, blocks, rss = (min(a, b) for a, b in zip(first, second))
    print(f"{per_call:.2f} B/call malloc, {blocks:.4f} blocks/call, {rss:.1f} B/call RSS")
    assert per_call < BYTES_PER_CALL_MAX, f"{per_call:.1f} bytes kept per call"
    assert blocks < BLOCKS_PER_CALL_MAX, f"{blocks:.3f} Python blocks kept per call"
    assert rss < RSS_PER_CALL_MAX, f"RSS grew by {rss:.0f} bytes per call"


# ---------------------------------------------------------------------------------------------
# The methods, each with what it needs set up once


def _scheduler() -> tuple[Scheduler, int, int]:
    """A scheduler with one batch of a running call, a waiting one and a fan-out; (scheduler,
    batch, running entry)."""
    s = Scheduler(Policy.resolve([("leaks", CONFIG)], instance=Instance()))
    sub = s.submit([Call("a", "rfd"), Call("b", "rfd"), Call("c", "fan", 3)])
    s.step(approve=list(sub.entries), now=0)
    return s, sub.batch, sub.entries[0]


def _round(s: Scheduler) -> Callable[[], Any]:
    """One batch through its life: submit, approve, start, end, retire (ids reused after)."""

    def round() -> None:
        sub = s.submit([Call("x", "rfd"), Call("y", "fan", 2)])
        out = s.step(approve=list(sub.entries))
        while sub.batch not in out.retired:
            out = s.step(ok=out.start)

    return round


def _refusing_step(s: Scheduler) -> Callable[[], Any]:
    """A step whose inputs are refused (unknown entries, a batch, a key): refusals cross back."""
    return lambda: s.step(approve=[10**9], ok=[10**9 + 1], cancel=[10**9], pause=[("nokey", 5)])


def _admission() -> tuple[Callable[[], Any], Callable[[], Any]]:
    a = Admission(4)

    def begin_end() -> None:
        t = a.begin("r", AdmissionClass.CALL)
        a.next_admissions()
        a.end(t)

    def begin_abandon() -> None:
        a.abandon(a.begin("q", AdmissionClass.REQUEST))
        a.in_flight()

    return begin_end, begin_abandon


def _resume(s: Scheduler) -> Callable[[], Any]:
    policy = Policy.resolve([("leaks", CONFIG)], instance=Instance())
    state = s.unfinished()

    def resume() -> None:
        restored, _ = Scheduler.resume(policy, state, started=Started.INTERRUPT, instance=policy.instance)
        restored.close()

    return resume


def _driver_run() -> Callable[[], Any]:
    driver = Driver(Scheduler(Policy.resolve([("leaks", CONFIG)], instance=Instance())))
    loop = asyncio.new_event_loop()

    async def execute(x: Any) -> str:
        return "done"

    calls = [Call("d1", "rfd"), Call("d2", "fan", 2), Call("d3", "other")]
    return lambda: loop.run_until_complete(driver.run(calls, execute))


s, batch, running = _scheduler()
policy = Policy.resolve([("leaks", CONFIG)])
begin_end, begin_abandon = _admission()
classes = Admission(1)

METHODS: dict[str, tuple[Callable[[], Any], int]] = {
    # name: (one call, calls measured); about 1-3 s each on a loaded 2-core machine
    "Scheduler.label": (lambda: s.label(running), 30_000),
    "Scheduler.label unknown": (lambda: s.label(10**9), 30_000),
    "Scheduler.inspect": (lambda: s.inspect(batch), 10_000),
    "Scheduler.unfinished": (lambda: s.unfinished(), 10_000),
    "Scheduler.step (refusals)": (_refusing_step(s), 10_000),
    "Scheduler.step (rounds)": (_round(Scheduler(Policy.resolve([("leaks", CONFIG)], instance=Instance()))), 3_000),
    "Scheduler.resume": (_resume(s), 2_000),
    # 4,000: a few blocks other tests left for the collector would read as 0.03 per call over 1,000
    "Scheduler create/close": (lambda: Scheduler(policy).close(), 4_000),
    "Policy.tool": (lambda: policy.tool("fan"), 20_000),
    "Policy.tools": (lambda: policy.tools(), 10_000),
    "Policy.warnings/fingerprint": (lambda: (policy.warnings(), policy.fingerprint()), 20_000),
    "Policy.resolve/close": (lambda: Policy.resolve([("leaks", CONFIG)]).close(), 2_000),
    "Admission.begin/end": (begin_end, 20_000),
    "Admission.begin/abandon": (begin_abandon, 20_000),
    "Admission.class_of_method": (lambda: classes.class_of_method("tools/call"), 30_000),
    "explain": (lambda: explain("a#1", Reason(ReasonKind.STOPPED, 0)), 30_000),
    "RateLimited.from_header": (lambda: RateLimited.from_header("Wed, 21 Oct 2015 07:28:00 GMT", now=0), 20_000),
    "Driver.run": (_driver_run(), 1_000),
}


@pytest.mark.parametrize("name", list(METHODS))
def test_memory_is_flat_per_call(name: str) -> None:
    call, calls = METHODS[name]
    check(call, calls)


def test_a_leak_of_one_box_per_call_is_seen() -> None:
    """The check fails on what wasmtime-py leaked: 48 bytes malloc'd per call and never freed."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    with pytest.raises(AssertionError, match="bytes kept per call"):
        check(lambda: libc.malloc(48), 20_000)


def test_schedulers_in_one_instance_free_their_policy() -> None:
    """A scheduler built in an instance that is not its policy's resolves the policy there and
    frees it once built (it leaked 7 KB of the instance's memory per scheduler)."""
    tools = "".join(f"[conversation.tools.t{i}]\nconcurrency = 2\n" for i in range(50))
    many = Policy.resolve([("leaks", CONFIG + tools)])
    inst = Instance()
    check(lambda: Scheduler(many, instance=inst).close(), 2_000)


def test_a_policy_nobody_closes_is_freed() -> None:
    """A policy dropped without `close` frees its resource in the component (the shared
    instance would otherwise grow by one policy per `Policy.resolve`)."""
    check(lambda: Policy.resolve([("leaks", CONFIG)]), 2_000)


if __name__ == "__main__":  # pragma: no cover - a measurement, not a test
    name = sys.argv[1] if len(sys.argv) > 1 else "label"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000_000
    _malloc_in_use = _mallinfo2()
    call = METHODS[next(k for k in METHODS if name in k)][0]
    for _ in range(10_000):
        call()
    rss0, (b0, k0) = rss_kb(), in_use()
    for i in range(n):
        call()
    rss1, (b1, k1) = rss_kb(), in_use()
    print(f"{name}: {n} calls, {(b1 - b0) / n:.4f} B/call (malloc), {(k1 - k0) / n:.6f} blocks/call, RSS {rss0} -> {rss1} kB")
