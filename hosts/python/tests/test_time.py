"""Time and rate limits (issue 12): the boundary of `now`, `retry`, `pause` and `wake_at`; the
driver's clock and its one timer; `RateLimited` from an execution, against a fake API that
answers 429 with Retry-After; and the gate retrying in place. Failure paths first."""

from __future__ import annotations

import asyncio
import time

import pytest

import vloop
from turnstile_scheduler import (
    Call,
    CallSettledError,
    DiagnosticCode,
    Driver,
    Gate,
    InputErrorCode,
    InputKind,
    KeyPaused,
    KeySpacing,
    OutcomeStatus,
    Policy,
    RateLimited,
    RateWindow,
    Reason,
    ReasonKind,
    RefusedInputError,
    RetryAt,
    Scheduler,
    Started,
    explain,
)
from turnstile_scheduler.errors import ConfigError
from turnstile_scheduler.types import SavedState

CONFIG = """
[conversation.tools.search]
concurrency = { key = "api", limit = 2, retries = 2 }
fan_out = true
[conversation.tools.issue]
concurrency = { key = "api", limit = 2, retries = 2 }
[conversation.tools.write]
concurrency = { key = "disk", limit = 1, retries = 1 }
fan_out = { on_error = "stop" }
[conversation.tools.spaced]
concurrency = { key = "slow", limit = 0, delay = "40ms" }
[conversation.tools.free]
fan_out = true
"""


def policy() -> Policy:
    return Policy.resolve([("t", CONFIG)])


# ---------------------------------------------------------------------------------------------
# The boundary


@pytest.mark.parametrize(
    "kw, error",
    [
        ({"now": True}, TypeError),
        ({"now": -1}, ValueError),
        ({"now": 2**64}, ValueError),
        ({"now": 1.5}, TypeError),
        ({"now": "5"}, TypeError),
        ({"retry": [(1,)]}, TypeError),
        ({"retry": [[1, 2]]}, TypeError),
        ({"retry": [(True, 2)]}, TypeError),
        ({"retry": [(1, -2)]}, ValueError),
        ({"retry": [(1, 2**64)]}, ValueError),
        ({"retry": (1, 2)}, TypeError),
        ({"retry": "x"}, TypeError),
        ({"pause": [("api",)]}, TypeError),
        ({"pause": [(1, 2)]}, TypeError),
        ({"pause": [(b"api", 2)]}, TypeError),
        ({"pause": [("\ud800", 2)]}, ValueError),
        ({"pause": [("api", False)]}, TypeError),
        ({"pause": [("api", 2**64)]}, ValueError),
        ({"pause": {"api": 2}}, TypeError),
    ],
)
def test_every_wrong_time_input_is_refused_before_it_crosses(kw, error) -> None:
    with Scheduler(policy()) as s:
        with pytest.raises(error) as e:
            s.step(**kw)
        assert list(kw)[0] in str(e.value)
        s.step(now=5)  # the scheduler is unharmed and nothing applied
        assert s.step(now=5).errors == []


def test_the_clock_must_not_go_back_and_an_unknown_key_is_refused() -> None:
    with Scheduler(policy()) as s:
        assert s.step(now=100).errors == []
        out = s.step(now=50, pause=[("nope", 10), ("api", 1000)])
        assert [(e.input, e.index, e.code) for e in out.errors] == [
            (InputKind.NOW, 0, InputErrorCode.TIME_BACKWARDS),
            (InputKind.PAUSE, 0, InputErrorCode.UNKNOWN_KEY),
        ]
        sub = s.submit([Call("i", "issue")])
        out = s.step(approve=list(sub.entries))
        assert out.start == [] and out.wake_at == 1000  # the pause applied, on the clock as it was
        assert s.inspect(sub.batch)[0].wait == KeyPaused("api", 1000)
        assert s.step(retry=[(12345, 10)]).errors[0].code is InputErrorCode.UNKNOWN_ENTRY


def test_policy_reports_delay_and_retries_and_the_new_diagnostics_are_typed() -> None:
    p = policy()
    [c] = p.tool("search").concurrency
    assert (c.key, c.limit, c.delay_ms, c.retries) == ("api", 2, 0, 2)
    [c] = p.tool("spaced").concurrency
    assert (c.key, c.limit, c.delay_ms, c.retries) == ("slow", 2**32 - 1, 40, 3)
    assert p.tool("free").concurrency == ()
    with pytest.raises(ConfigError) as e:
        Policy.resolve(
            [("t", '[conversation.tools.a]\nconcurrency = { key = "k", limit = 1, delay = 5 }\n'
                   '[conversation.tools.b]\nconcurrency = { key = "k", limit = 1, retries = 7 }\n')]
        )
    assert [d.code for d in e.value.diagnostics] == [
        DiagnosticCode.CONCURRENCY_DELAY_CONFLICT,
        DiagnosticCode.CONCURRENCY_RETRIES_CONFLICT,
    ]
    assert e.value.diagnostics[0].code == "concurrency-delay-conflict"


def test_rate_windows_resolve_ascending_with_their_burst_and_their_mistakes_are_typed() -> None:
    p = Policy.resolve(
        [("t", '[conversation.tools.web]\nconcurrency = { key = "brave", limit = 0, '
               'rate = ["2000/30d", "1/s"], burst = 10 }\n[conversation.tools.plain]\nconcurrency = 1\n')]
    )
    [web] = p.tool("web").concurrency
    assert web.rates == (RateWindow(1, 1000, 10), RateWindow(2000, 2_592_000_000, 10))
    own = Policy.resolve(
        [("t", '[conversation.tools.web]\nconcurrency = { key = "brave", '
               'rate = ["1/s", { rate = "2000/30d", burst = 2000 }] }\n')]
    )
    assert own.tool("web").concurrency[0].rates == (RateWindow(1, 1000, 1), RateWindow(2000, 2_592_000_000, 2000))
    assert (web.burst, web.limit, web.weight) == (10, 2**32 - 1, 1)
    [plain] = p.tool("plain").concurrency
    assert (plain.rates, plain.burst) == ((), 1)
    for table, code in [
        ('{ key = "k", rate = "5000" }', DiagnosticCode.CONCURRENCY_TYPE),
        ('{ key = "k", rate = 5 }', DiagnosticCode.CONCURRENCY_TYPE),
        ('{ key = "k", delay = 100, burst = 3 }', DiagnosticCode.BURST_WITHOUT_RATE),
        ('{ key = "k", rate = "2000000/h", shared = true }', DiagnosticCode.SHARED_RATE_OUT_OF_RANGE),
        ('{ key = "k", rate = "1/s", burst = 1000001, shared = true }', DiagnosticCode.SHARED_RATE_OUT_OF_RANGE),
    ]:
        with pytest.raises(ConfigError) as e:
            Policy.resolve([("t", f"[conversation.tools.a]\nconcurrency = {table}\n")])
        assert [d.code for d in e.value.diagnostics] == [code], table
    with pytest.raises(ConfigError) as e:
        Policy.resolve(
            [("t", '[conversation.tools.a]\nconcurrency = { key = "k", rate = "1/s" }\n'
                   '[conversation.tools.b]\nconcurrency = { key = "k", rate = "2/s" }\n')]
        )
    assert [(d.code, d.tools) for d in e.value.diagnostics] == [
        (DiagnosticCode.CONCURRENCY_RATE_CONFLICT, ["a", "b"])
    ]


def test_an_adaptive_limit_resolves_to_its_ceiling_and_halves_on_a_rate_limit() -> None:
    text = '[conversation.tools.api]\nconcurrency = { key = "api", limit = { max = 4, adapt = "aimd" } }\n'
    p = Policy.resolve([("t", text + "[conversation.tools.plain]\nconcurrency = 3\n")])
    [api] = p.tool("api").concurrency
    assert (api.limit, api.adapt_min) == (4, 1)
    assert p.tool("plain").concurrency[0].adapt_min is None
    for table, code in [
        ('{ key = "k", limit = { max = 4 } }', DiagnosticCode.CONCURRENCY_TYPE),
        ('{ key = "k", limit = { max = 2, min = 3, adapt = "aimd" } }', DiagnosticCode.CONCURRENCY_TYPE),
    ]:
        with pytest.raises(ConfigError) as e:
            Policy.resolve([("t", f"[conversation.tools.a]\nconcurrency = {table}\n")])
        assert [d.code for d in e.value.diagnostics] == [code], table
    with Scheduler(Policy.resolve([("t", text)])) as s:
        sub = s.submit([Call(c, "api") for c in "abcdef"])
        a, b, c, d, e_, f = sub.entries
        assert s.step(now=0, approve=list(sub.entries)).start == [a, b, c, d]
        s.step(now=1, retry=[(a, 1)])
        # b's end frees a slot, but two (c, d) is the limit now.
        assert s.step(now=2, ok=[b]).start == []
        why = next(st.why for st in s.inspect(sub.batch) if st.label == "a")
        assert "its limit adapts between 1 and 4 and is 2 now, halved after a rate limit" in why


def test_wake_at_and_every_time_wait_cross_typed() -> None:
    with Scheduler(policy()) as s:
        sub = s.submit([Call("sp1", "spaced"), Call("sp2", "spaced"), Call("w1", "write"), Call("f1", "free")])
        sp1, sp2, w1, f1 = sub.entries
        out = s.step(now=1000, approve=list(sub.entries))
        assert out.start == [sp1, w1, f1] and out.wake_at == 1040
        out = s.step(retry=[(w1, 3000), (f1, 2500)])
        assert out.errors == [] and out.wake_at == 1040
        waits = {st.label: st.wait for st in s.inspect(sub.batch)}
        assert waits == {
            "sp1": None,
            "sp2": KeySpacing("slow", 1040),
            "w1": KeyPaused("disk", 3000),
            "f1": RetryAt(2500),
        }
        assert s.step(now=1040).start == [sp2]
        assert s.step(now=2500).start == [f1]
        out = s.step(now=3000)
        assert out.start == [w1] and out.wake_at is None
        # Past its key's retries (1): settled rate-limited, with how many times it ran again.
        out = s.step(retry=[(w1, 4000)])
        assert [(st.entry, st.reason) for st in out.settle] == [(w1, Reason(ReasonKind.RATE_LIMITED, retries=1))]


def test_a_rate_limited_reason_round_trips_through_a_saved_state() -> None:
    p = policy()
    with Scheduler(p) as s:
        sub = s.submit([Call("w", "write"), Call("x", "free")])
        w, x = sub.entries
        s.step(now=0, approve=[w, x])
        s.step(retry=[(w, 1)])
        s.step(now=1)
        s.step(retry=[(w, 2)])  # settled: rate-limited 1
        state = s.unfinished()
    [call] = [c for c in state.batches[0].calls if c.id == "w"]
    assert call.entries[0].reason == Reason(ReasonKind.RATE_LIMITED, retries=1)
    again = SavedState.from_dict(state.to_dict())
    assert again == state and state.to_dict()["batches"][0]["calls"][0]["entries"][0]["retries"] == 1
    s2, unrestored = Scheduler.resume(p, again, started=Started.INTERRUPT)
    assert unrestored == []
    [st] = [st for st in s2.inspect(sub.batch) if st.label == "w"]
    assert st.reason == Reason(ReasonKind.RATE_LIMITED, retries=1)
    # A reason's fields go with their kinds only.
    bad = SavedState.from_dict(state.to_dict())
    bad.batches[0].calls[0].entries[0].__dict__["reason"] = Reason(ReasonKind.CANCELLED, retries=1)
    with pytest.raises(ValueError, match="retries is only for rate-limited"):
        Scheduler.resume(p, bad, started=Started.INTERRUPT)
    bad.batches[0].calls[0].entries[0].__dict__["reason"] = Reason(ReasonKind.RATE_LIMITED)
    with pytest.raises(TypeError, match="retries"):
        Scheduler.resume(p, bad, started=Started.INTERRUPT)


def test_the_text_for_a_rate_limit_is_the_components() -> None:
    assert explain("g", Reason(ReasonKind.RATE_LIMITED, retries=3)) == (
        "not run again: rate limited 4 times (3 retries allowed); the endpoint asked to wait"
    )
    assert explain("g", Reason(ReasonKind.RATE_LIMITED, retries=1)).startswith("not run again: rate limited 2 times (1 retry allowed)")


@pytest.mark.parametrize("args, kw, error", [((), {}, TypeError), ((1,), {"until": 2}, TypeError), ((-1,), {}, ValueError),
                                             ((True,), {}, TypeError), ((float("nan"),), {}, ValueError), (("5",), {}, TypeError)])
def test_rate_limited_checks_its_time(args, kw, error) -> None:
    with pytest.raises(error):
        RateLimited(*args, **kw)


def test_rate_limited_reads_a_retry_after_header() -> None:
    assert RateLimited.from_header("7").retry_after == 7.0
    assert RateLimited.from_header(None, default=2).retry_after == 2.0
    assert RateLimited.from_header("soon", default=3).retry_after == 3.0
    now = 1_700_000_000.0
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now + 12))
    assert RateLimited.from_header(date, now=now).retry_after == 12.0


@pytest.mark.parametrize(
    "header",
    [
        "\u0663",  # ARABIC-INDIC DIGIT THREE: str.isdigit() took it for 3
        "\u00b2",  # SUPERSCRIPT TWO: isdigit() is True, float() raised ValueError
        "\u00b2\u00b3",
        "3.5",
        "-5",
        "+5",
        "5 s",
        "5, 6",
        "Someday, 32 Foo 2015 07:28:00 GMT",
        "\ud800",  # a lone surrogate cannot cross: unreadable all the same
    ],
)
def test_retry_after_that_is_not_ascii_delta_seconds_or_a_date_takes_the_default(header: str) -> None:
    limited = RateLimited.from_header(header, default=4)
    assert limited.retry_after == 4.0
    assert limited.header_error  # the component's sentence (or why it could not cross)


def test_retry_after_empty_takes_the_default_and_a_missing_header_says_nothing() -> None:
    for header in ["", "  ", "\t"]:
        limited = RateLimited.from_header(header, default=2)
        assert limited.retry_after == 2.0 and "empty" in (limited.header_error or "")
    missing = RateLimited.from_header(None, default=2)
    assert (missing.retry_after, missing.header_error) == (2.0, None)


def test_retry_after_is_read_by_the_component() -> None:
    # 400 digits: int(float()) raised OverflowError or ValueError before; the wait saturates.
    huge = RateLimited.from_header("9" * 400)
    assert huge.retry_after == (2**64 - 1) / 1000 and huge._wait_ms == 2**64 - 1 and huge.header_error is None
    assert RateLimited.from_header(" \t7 ").retry_after == 7.0  # spaces and tabs around are fine
    assert RateLimited.from_header("0").retry_after == 0.0
    now = 1_700_000_000.0
    past = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now - 60))
    assert RateLimited.from_header(past, now=now).retry_after == 0.0  # a date in the past is 0
    rfc850 = time.strftime("%A, %d-%b-%y %H:%M:%S GMT", time.gmtime(now + 30))
    assert RateLimited.from_header(rfc850, now=now).retry_after == 30.0
    asctime = time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(now + 5))
    assert RateLimited.from_header(asctime, now=now).retry_after == 5.0
    with pytest.raises(TypeError):
        RateLimited.from_header("5", now="now")  # type: ignore[arg-type]


def test_a_huge_retry_after_is_settled_by_the_scheduler_at_once() -> None:
    # No clamping in the package: a wait of more than 5 minutes reaches the scheduler, which
    # settles the entry rate-limited at once (its sentence says how long the endpoint asked).
    text = '[conversation.tools.api]\nconcurrency = { key = "api", limit = 1 }\n'
    calls = 0

    async def execute(x):
        nonlocal calls
        calls += 1
        raise RateLimited.from_header("9" * 400)

    async def main():
        async with Driver(Scheduler(Policy.resolve([("t", text)])), owns_scheduler=True) as driver:
            return await asyncio.wait_for(driver.run([Call("a", "api"), Call("b", "api")], execute), 10)

    out = vloop.run(main())
    assert calls == 2  # settled at once, and the key was not paused: b ran right after
    for c in out:
        e = c.entries[0]
        assert e.status is OutcomeStatus.SETTLED and e.reason.kind is ReasonKind.RATE_LIMITED


# ---------------------------------------------------------------------------------------------
# A fake API with Retry-After


class FakeApi:
    """Answers 429 with Retry-After `retry_after` for the first `k` calls of each window of
    `window` seconds (from the window's first call), or with `once_each` for the first call of
    each label; records what ran when. `limits` are the keys' limits: a call over one, or a
    call on a key while the API had told it to wait, is a failure of the test."""

    def __init__(self, k: int, retry_after: float, window: float, limits: dict[str, int], once_each: bool = False) -> None:
        self.k, self.retry_after, self.window, self.limits = k, retry_after, window, limits
        self.once_each = once_each
        self.window_start: float | None = None
        self.in_window = 0
        self.running: dict[str, int] = {key: 0 for key in limits}
        self.over: list[str] = []
        self.starts: dict[str, list[tuple[float, str]]] = {key: [] for key in limits}
        self.paused_until: dict[str, float] = {key: 0.0 for key in limits}
        self.early: list[str] = []
        self.calls: dict[str, int] = {}

    async def __call__(self, key: str, label: str, duration: float = 0.005) -> str:
        loop = asyncio.get_running_loop()
        t = loop.time()
        self.calls[label] = self.calls.get(label, 0) + 1
        self.running[key] += 1
        try:
            if self.running[key] > self.limits[key]:
                self.over.append(f"{key}: {label}")
            if t < self.paused_until[key] - 0.002:  # the driver's clock is whole milliseconds
                self.early.append(f"{label} at {t:.4f} < {self.paused_until[key]:.4f}")
            self.starts[key].append((t, label))
            if self.window_start is None or t >= self.window_start + self.window:
                self.window_start, self.in_window = t, 0
            self.in_window += 1
            limited = (self.calls[label] == 1) if self.once_each else (self.in_window <= self.k)
            await asyncio.sleep(duration)
            if limited:
                self.paused_until[key] = max(self.paused_until[key], loop.time() + self.retry_after)
                return "429"
            return f"200 {label}"
        finally:
            self.running[key] -= 1


def key_of(tool: str) -> str:
    return {"search": "api", "issue": "api", "write": "disk"}[tool]


def executor(api: FakeApi):
    async def execute(x) -> str:
        answer = await api(key_of(x.call.tool), x.label)
        if answer == "429":
            raise RateLimited(api.retry_after)
        return answer

    return execute


def armed(driver: Driver) -> list[asyncio.TimerHandle]:
    """The driver's live wake-up timers on the running loop."""
    loop = asyncio.get_running_loop()
    return [h for h in loop._scheduled if not h.cancelled() and getattr(h._callback, "__self__", None) is driver]  # type: ignore[attr-defined]


def test_rate_windows_and_an_adaptive_limit_through_the_driver() -> None:
    # A burst, then the pace; a 429 storm from calls that started together halves the limit once.
    text = (
        '[conversation.tools.paced]\nconcurrency = { key = "paced", limit = 0, rate = "2/100ms", burst = 3 }\n'
        '[conversation.tools.llm]\nconcurrency = { key = "llm", limit = { max = 4, adapt = "aimd" }, retries = 3 }\n'
    )
    at: list[float] = []
    starts: list[tuple[str, int, float]] = []
    seen: set[str] = set()
    running = 0

    async def paced(x) -> str:
        at.append(asyncio.get_running_loop().time())
        return "ok"

    async def llm(x) -> str:
        nonlocal running
        running += 1
        starts.append((x.label, running, asyncio.get_running_loop().time()))
        try:
            await asyncio.sleep(0.01)
            if x.label in ("a", "b", "c") and x.label not in seen:
                seen.add(x.label)
                raise RateLimited(0.02)
            return "ok"
        finally:
            running -= 1

    async def main():
        async with Driver(Scheduler(Policy.resolve([("t", text)])), owns_scheduler=True) as d:
            await asyncio.wait_for(d.run([Call(f"p{i}", "paced") for i in range(5)], paced), 10)
            return await asyncio.wait_for(d.run([Call(c, "llm") for c in "abcdefgh"], llm), 10)

    out = vloop.run(main())
    assert [round((t - at[0]) * 1000) for t in at] == [0, 0, 0, 50, 100]
    assert all(e.status is OutcomeStatus.OK for c in out for e in c.entries)
    assert [(l, r) for l, r, _ in starts[:4]] == [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
    assert [(l, r) for l, r, _ in starts[4:6]] == [("a", 1), ("b", 2)]
    assert starts[6][2] >= starts[4][2] + 0.01, starts


def test_a_429_storm_backs_off_every_call_on_the_key_keeps_order_and_gives_one_outcome_each() -> None:
    # Every call of a fanned-out batch gets 429 once, then succeeds.
    api = FakeApi(k=0, retry_after=0.05, window=10.0, limits={"api": 2, "disk": 1}, once_each=True)
    most_timers = []

    async def main():
        async with Driver(Scheduler(policy())) as d:
            execute = executor(api)

            async def watched(x):
                most_timers.append(len(armed(d)))
                return await execute(x)

            calls = [Call("s", "search", operations=5), Call("i", "issue"), Call("w", "write")]
            return await asyncio.wait_for(d.run(calls, watched), 10), d

    outcomes, d = vloop.run(main())
    labels = ["s#0", "s#1", "s#2", "s#3", "s#4", "i", "w"]
    flat = [e for c in outcomes for e in c.entries]
    assert [e.label for e in flat] == labels
    assert [(e.status, e.value) for e in flat] == [(OutcomeStatus.OK, f"200 {l}") for l in labels]
    assert api.calls == {l: 2 for l in labels}, "each entry ran exactly twice: one 429, one success"
    assert api.over == [], "no key over its limit"
    assert api.early == [], "nothing started on a paused key"
    # Written order per key: first attempts start in written order, and so do the retries
    # (each retried entry goes back to its place at the front of its key's queue).
    key = {"w": "disk", "i": "api"}
    for k, starts in api.starts.items():
        mine = [l for l in labels if key.get(l, "api") == k]
        order = [l for _, l in starts]
        firsts = list(dict.fromkeys(order))
        assert firsts == mine
        seconds = [l for n, l in enumerate(order) if l in order[:n]]
        assert seconds == mine, order
    assert max(most_timers) <= 1, "one timer at most"


def test_a_retry_cap_that_runs_out_settles_rate_limited_and_stops_the_rest() -> None:
    api = FakeApi(k=1000, retry_after=0.01, window=100.0, limits={"api": 2, "disk": 1})

    async def main():
        async with Driver(Scheduler(policy())) as d:
            return await asyncio.wait_for(d.run([Call("w", "write", operations=3), Call("i", "issue")], executor(api)), 10)

    w, i = vloop.run(main())
    assert [(e.status, e.reason) for e in w.entries] == [
        (OutcomeStatus.SETTLED, Reason(ReasonKind.RATE_LIMITED, retries=1)),
        (OutcomeStatus.SETTLED, Reason(ReasonKind.STOPPED, 1)),
        (OutcomeStatus.SETTLED, Reason(ReasonKind.STOPPED, 1)),
    ]
    assert isinstance(w.entries[0].error, RateLimited), "the last 429 is kept"
    assert (i.entries[0].status, i.entries[0].reason) == (OutcomeStatus.SETTLED, Reason(ReasonKind.RATE_LIMITED, retries=2))
    assert api.calls == {"w#0": 2, "i": 3}, "retries = 1 runs once more, retries = 2 twice more"
    assert api.over == [] and api.early == []


def test_cancelling_a_batch_while_an_entry_waits_on_a_retry_never_runs_it_again() -> None:
    api = FakeApi(k=1, retry_after=0.2, window=100.0, limits={"api": 2, "disk": 1})

    async def main():
        d = Driver(Scheduler(policy()))
        task = asyncio.ensure_future(d.run([Call("w", "write"), Call("i", "issue")], executor(api)))
        while api.calls.get("w") != 1 or d.running():
            await asyncio.sleep(0.005)
        assert [st.wait for st in d.scheduler.inspect(next(iter(d._batches))) if st.label == "w"][0].__class__ is KeyPaused
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.3)  # past the pause: nothing may run again
        assert api.calls == {"w": 1, "i": 1}
        # The pause still holds its key for the next batch, then the key works.
        [o] = await asyncio.wait_for(d.run([Call("w2", "write")], executor(api)), 5)
        assert o.entries[0].status is OutcomeStatus.OK
        assert d.scheduler.unfinished().batches == [] and not d._batches
        d.close()
        return d

    vloop.run(main())


def test_a_driver_closed_with_its_timer_armed_leaks_no_timer_and_steps_no_more() -> None:
    async def main():
        d = Driver(Scheduler(policy()))
        stepped = []
        real = d._step
        d._step = lambda *a: stepped.append(1) or real(*a)  # type: ignore[method-assign]
        ran = []

        async def execute(x):
            ran.append(x.label)
            return "ok"

        await d.pause("disk", 0.05)
        task = asyncio.ensure_future(d.run([Call("w", "write")], execute))
        while not armed(d):
            await asyncio.sleep(0.001)
        assert len(armed(d)) == 1 and d._wake_at is not None
        d.close()
        assert armed(d) == [] and d._wake is None
        with pytest.raises(Exception):
            await task
        n = len(stepped)
        await asyncio.sleep(0.1)
        assert len(stepped) == n and ran == [], "no step and no run after close"
        with pytest.raises(Exception):
            await d.pause("disk", 1)

    vloop.run(main())


def test_one_timer_follows_the_latest_wake_at() -> None:
    async def main():
        async with Driver(Scheduler(policy())) as d:
            loop = asyncio.get_running_loop()
            await d.pause("disk", 5.0)
            t1 = asyncio.ensure_future(d.run([Call("w", "write")], lambda x: asyncio.sleep(0, "w")))
            while not armed(d):
                await asyncio.sleep(0.001)
            [h] = armed(d)
            assert abs(h.when() - (loop.time() + 5)) < 0.05
            await d.pause("api", 0.03)
            t2 = asyncio.ensure_future(d.run([Call("i", "issue")], lambda x: asyncio.sleep(0, "i")))
            while h in armed(d):
                await asyncio.sleep(0.001)
            [h2] = armed(d)  # an earlier wake-up replaced the timer
            assert h.cancelled() and h2.when() < loop.time() + 0.1
            [o] = await asyncio.wait_for(t2, 5)
            assert o.entries[0].value == "i"
            [h3] = armed(d)  # the disk pause is still ahead: re-armed for it
            assert abs(h3.when() - h.when()) < 0.01
            t1.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t1
            await asyncio.sleep(0.01)

    vloop.run(main())


def test_host_pause_holds_a_key_and_an_unknown_key_is_refused() -> None:
    async def main():
        async with Driver(Scheduler(policy())) as d:
            with pytest.raises(RefusedInputError) as e:
                await d.pause("nope", 1)
            assert e.value.code is InputErrorCode.UNKNOWN_KEY
            with pytest.raises(TypeError):
                await d.pause(3, 1)  # type: ignore[arg-type]
            with pytest.raises(ValueError):
                await d.pause("disk", -1)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            await d.pause("disk", 0.08)
            began = []

            async def execute(x):
                began.append(loop.time())
                return "ok"

            [o] = await asyncio.wait_for(d.run([Call("w", "write")], execute), 5)
            assert o.entries[0].status is OutcomeStatus.OK and began[0] - t0 >= 0.078

    vloop.run(main())


def test_delay_spaces_starts_through_the_driver() -> None:
    async def main():
        async with Driver(Scheduler(policy())) as d:
            loop = asyncio.get_running_loop()
            began = []

            async def execute(x):
                began.append(loop.time())
                return x.label

            calls = [Call(f"c{i}", "spaced") for i in range(4)]
            outcomes = await asyncio.wait_for(d.run(calls, execute), 5)
            assert [c.entries[0].status for c in outcomes] == [OutcomeStatus.OK] * 4
            gaps = [b - a for a, b in zip(began, began[1:])]
            # Each start is stamped when its task first runs, after the scheduler released it:
            # a loaded machine runs a task late, which only shortens the gap after it. The exact
            # spacing is checked on a virtual clock (tests/cases/time-*.toml, the simulator);
            # this checks the driver's wake-ups, with room for scheduling jitter.
            assert min(gaps) >= 0.030, gaps
            assert began[-1] - began[0] >= 0.100, began

    vloop.run(main())


def test_a_sync_execute_may_raise_rate_limited_and_a_cancelled_batch_ends_it() -> None:
    async def main():
        async with Driver(Scheduler(policy())) as d:
            seen = []

            def execute(x):  # not async: raises before returning an awaitable
                seen.append(x.label)
                if len(seen) == 1:
                    raise RateLimited(0.01)
                return asyncio.sleep(0, result="ok")

            [o] = await asyncio.wait_for(d.run([Call("w", "write")], execute), 5)
            assert (o.entries[0].status, o.entries[0].value, seen) == (OutcomeStatus.OK, "ok", ["w", "w"])

            # RateLimited raised as its batch is cancelled: cancelled, never run again.
            gate = asyncio.Event()

            async def slow(x):
                seen.append(x.label)
                try:
                    await gate.wait()
                finally:
                    raise RateLimited(0.01)

            task = asyncio.ensure_future(d.run([Call("v", "write")], slow))
            while "v" not in seen:
                await asyncio.sleep(0.001)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.05)
            assert seen.count("v") == 1

    vloop.run(main())


# ---------------------------------------------------------------------------------------------
# The gate


def test_the_gate_retries_in_place_and_settles_past_the_cap() -> None:
    api = FakeApi(k=2, retry_after=0.02, window=100.0, limits={"api": 2, "disk": 1})

    async def call(label: str, key: str) -> str:
        answer = await api(key, label)
        if answer == "429":
            raise RateLimited.from_header("0")
        return answer

    async def main():
        async with Gate(policy()) as gate:
            a, b = await asyncio.gather(
                gate.call("issue", "a", None, lambda _: call("a", "api")),
                gate.call("issue", "b", None, lambda _: call("b", "api")),
            )
            assert (a, b) == ("200 a", "200 b")
            assert api.calls == {"a": 2, "b": 2}
            # Past the cap (write: retries = 1): a CallSettledError the model can read.
            api.k, api.in_window = 10, 0
            with pytest.raises(CallSettledError) as e:
                await gate.call("write", "w", None, lambda _: call("w", "disk"))
            assert e.value.reason == Reason(ReasonKind.RATE_LIMITED, retries=1)
            assert str(e.value) == "not run again: rate limited 2 times (1 retry allowed); the endpoint asked to wait"
            assert api.calls["w"] == 2

    vloop.run(main())


def test_a_gate_call_cancelled_while_it_waits_on_a_retry_never_runs_again() -> None:
    api = FakeApi(k=1, retry_after=0.1, window=100.0, limits={"api": 2, "disk": 1})

    async def call(label: str) -> str:
        if await api("disk", label) == "429":
            raise RateLimited(api.retry_after)
        return "done"

    async def main():
        async with Gate(policy()) as gate:
            task = asyncio.ensure_future(gate.call("write", "w", "w", call))
            while api.calls.get("w") != 1 or gate.driver.running():
                await asyncio.sleep(0.002)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.2)
            assert api.calls == {"w": 1}
            assert await gate.call("write", "w2", "w2", call) == "done"

    vloop.run(main())


def test_a_batch_cancelled_as_a_retry_is_released_ends_without_hanging() -> None:
    # The retried entry is released again and its batch is cancelled before its new task
    # begins: the task must see the cancellation (not be cancelled unbegun and never report).
    async def main():
        async with Driver(Scheduler(policy())) as d:
            seen = []

            async def execute(x):
                seen.append(x.label)
                if len(seen) == 1:
                    raise RateLimited(0)
                await asyncio.sleep(10)

            start = d._start

            def start_then_cancel(b, i):
                start(b, i)
                if len(b.tasks) and seen:  # the second release: cancel before the task begins
                    d._cancel(b)

            d._start = start_then_cancel  # type: ignore[method-assign]
            [o] = await asyncio.wait_for(d.run([Call("w", "write")], execute), 3)
            assert o.entries[0].status in (OutcomeStatus.SETTLED, OutcomeStatus.CANCELLED)
            assert seen == ["w"]

    vloop.run(main())
