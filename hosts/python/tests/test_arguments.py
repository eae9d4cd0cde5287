"""Keys from arguments (`concurrency = { key = "fs:{path}" }`) and the component's sentences
(`explain`, `EntryStatus.why`, `EntryOutcome.message`). Failure paths first: arguments of a type
no call can have are a TypeError at every entry point before anything crosses; arguments that
make no key never raise and take the template's own key; only the named fields cross, and only
for templated tools; a state saved by 0.2 (`key`) still resumes, one with `key` and `keys` is
refused. Then how keys expand (alike from the JavaScript package), a burst of writes to a few
files through the driver, a 429 on one host's key, the saved key across a restart, the gate and
its `decide`, key sets (`concurrency = [{ key = "fs:{src}" }, { key = "fs:{dst}" }]`), and the
sentences."""

from __future__ import annotations

import asyncio
import json
import random
from decimal import Decimal
from enum import IntEnum
from typing import Any, Iterator, Mapping, Optional

import pytest

import vloop
from turnstile_scheduler import (
    Call,
    CallSettledError,
    ConfigError,
    DiagnosticCode,
    DisposedError,
    Driver,
    EntryState,
    Gate,
    OutcomeStatus,
    Policy,
    RateLimited,
    Reason,
    ReasonKind,
    SavedState,
    Scheduler,
    Started,
    SubmitError,
    SubmitErrorCode,
    explain,
    run_batch,
)
from turnstile_scheduler._arguments import js_number
from turnstile_scheduler.types import Behind, KeyFull

CONFIG = """
[conversation.tools.fs_write]
concurrency = { key = "fs:{path}", limit = 1 }
[conversation.tools.fs_read]
concurrency = { key = "fs:{path}", limit = 1 }
[conversation.tools.plain]
concurrency = { key = "plain", limit = 1 }
[conversation.tools.free]
[conversation.tools.api]
concurrency = { key = "api:{host}", limit = 2, retries = 2 }
fan_out = true
[conversation.tools.pr]
concurrency = { key = "pr:{repo}#{n}" }
[conversation.tools.delete]
concurrency = { key = "rm:{dir}" }
fan_out = { on_error = "stop" }
[conversation.tools.flaky]
concurrency = { key = "flaky", retries = 0 }
"""

FALLBACK = "fs:{path}"
"""The key a call of fs_write takes when its arguments make none: the template's own text."""


def policy() -> Policy:
    return Policy.resolve([("test", CONFIG)])


def keys(sched: Scheduler, calls: list[Call]) -> list[Optional[str]]:
    """Each entry's one key as the component made it (None: unbounded)."""
    sub = sched.submit(calls)
    statuses = sched.inspect(sub.batch)
    assert statuses is not None and all(len(st.keys) <= 1 for st in statuses)
    return [st.keys[0] if st.keys else None for st in statuses]


def sent(sched: Scheduler) -> list[list[tuple[int, str]]]:
    """Records the `arguments` of every `submit` that crosses (call before submitting)."""
    crossed: list[list[tuple[int, str]]] = []
    submit = sched._submit

    def recording(resource: Any, calls: Any, limits: Any) -> Any:
        # The packed WIT `batch`: `(index, text)` for the calls that carry arguments.
        crossed.append([(a.call, a.json) for a in calls.arguments])
        return submit(resource, calls, limits)

    sched._submit = recording  # type: ignore[method-assign]
    return crossed


class Raising(Mapping[str, Any]):
    """A mapping whose every lookup raises."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("no")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("no")

    def __len__(self) -> int:
        return 1

    def __contains__(self, key: object) -> bool:
        raise RuntimeError("no")


# ---------------------------------------------------------------------------------------------
# Failure paths


NOT_ARGUMENTS = [b'{"path": "a"}', bytearray(b"{}"), {"a.txt"}, frozenset(), object(), Decimal("1"), 1j]


@pytest.mark.parametrize("bad", NOT_ARGUMENTS, ids=lambda v: type(v).__name__)
def test_arguments_no_call_can_have_are_a_type_error_at_every_entry_point(bad: Any) -> None:
    p = policy()
    # Scheduler.submit: named, and nothing crossed (for a plain tool too: the type is wrong
    # whatever the config says).
    for tool in ("fs_write", "plain", "unconfigured"):
        s = Scheduler(p)
        crossed = sent(s)
        with pytest.raises(TypeError, match=r"calls\[1\]\.arguments must be a mapping"):
            s.submit([Call("ok", "fs_write", arguments={"path": "a"}), Call("bad", tool, arguments=bad)])
        assert crossed == [] and s.unfinished().batches == []

    async def execute(x: Any) -> str:
        return x.label

    async def main() -> None:
        # Driver.run and run_batch.
        async with Driver(Scheduler(p)) as d:
            with pytest.raises(TypeError, match=r"calls\[0\]\.arguments"):
                await d.run([Call("bad", "fs_write", arguments=bad)], execute)
            assert d.scheduler.unfinished().batches == []
            with pytest.raises(TypeError, match=r"calls\[0\]\.arguments"):
                await run_batch(d.scheduler, [Call("bad", "fs_write", arguments=bad)], execute)
            assert d.scheduler.unfinished().batches == []
        # The gate: raised by the call itself, before it joins a batch; a call of the same turn
        # still runs.
        async with Gate(p) as gate:
            good = asyncio.ensure_future(gate.call("fs_write", "good", {"path": "a"}, lambda _: execute(x_label("good"))))
            with pytest.raises(TypeError, match="arguments must be a mapping"):
                await gate.call("fs_write", "bad", bad, lambda _: execute(x_label("bad")))
            assert await good == "good"

    vloop.run(main())


def x_label(label: str) -> Any:
    """What `execute` reads from an execution, for a gate's `run`."""

    class X:
        pass

    x = X()
    x.label = label  # type: ignore[attr-defined]
    return x


def test_a_saved_key_of_the_wrong_type_is_refused_and_an_old_state_without_keys_reads() -> None:
    p = policy()
    s = Scheduler(p)
    s.submit([Call("w", "fs_write", arguments={"path": "a"})])
    state = s.unfinished()
    assert state.batches[0].calls[0].keys == ("fs:a",)
    for keys_, error, where in (
        ((123,), TypeError, r"calls\[0\]\.keys\[0\]"),
        ((b"fs:a",), TypeError, r"calls\[0\]\.keys\[0\]"),
        (("fs:\ud800",), ValueError, r"calls\[0\]\.keys\[0\]"),
        ("fs:a", TypeError, r"calls\[0\]\.keys must be a list"),  # a name, not a list of names
    ):
        bad = SavedState.from_dict(state.to_dict())
        bad.batches[0].calls[0].__dict__["keys"] = keys_
        with pytest.raises(error, match=where):
            Scheduler.resume(p, bad, started=Started.RUN_AGAIN)
        with pytest.raises(error):
            vloop.run(_resume(p, bad))
    # A state saved before key templates has no "keys": it reads as none.
    old = state.to_dict()
    assert old["batches"][0]["calls"][0]["keys"] == ["fs:a"]
    del old["batches"][0]["calls"][0]["keys"]
    assert SavedState.from_dict(old).batches[0].calls[0].keys == ()
    # ... and a call without a key is written without one.
    plain = Scheduler(p)
    plain.submit([Call("r", "plain", arguments={"path": "a"})])
    call = plain.unfinished().to_dict()["batches"][0]["calls"][0]
    assert "keys" not in call and "key" not in call


def test_a_state_saved_by_0_2_with_key_resumes_and_one_with_key_and_keys_is_refused() -> None:
    """0.2 saved a call's key as `key` (one name, or none): `from_dict` and a driver's snapshot
    read it as `keys` of that one name, so its files still resume; a call with both is a
    ValueError naming it, before anything crosses."""
    p = policy()
    s = Scheduler(p)
    sub = s.submit([Call("w1", "fs_write", arguments={"path": "a"}), Call("w2", "fs_write", arguments={"path": "a"})])
    s.step(approve=list(sub.entries))  # w1 runs, w2 waits behind it on fs:a
    saved = s.unfinished().to_dict()
    for call in saved["batches"][0]["calls"]:
        call["key"] = call.pop("keys")[0]  # as 0.2 wrote it
    old = SavedState.from_dict(json.loads(json.dumps(saved)))
    assert [c.keys for c in old.batches[0].calls] == [("fs:a",), ("fs:a",)]
    resumed, unrestored = Scheduler.resume(p, old, started=Started.RUN_AGAIN)
    assert unrestored == []
    statuses = resumed.inspect(sub.batch)
    assert statuses is not None and [st.keys for st in statuses] == [("fs:a",), ("fs:a",)]
    # `key: None` (0.2's to_dict never wrote it, but a hand-made dict may) is no key.
    nothing = json.loads(json.dumps(saved))
    nothing["batches"][0]["calls"][0]["key"] = None
    assert SavedState.from_dict(nothing).batches[0].calls[0].keys == ()
    # Both: refused, naming the call.
    both = json.loads(json.dumps(saved))
    both["batches"][0]["calls"][1]["keys"] = ["fs:a"]
    with pytest.raises(ValueError, match=r"batches\[0\]\.calls\[1\] has both keys and key"):
        SavedState.from_dict(both)
    # A key of the wrong type is a TypeError naming it.
    wrong = json.loads(json.dumps(saved))
    wrong["batches"][0]["calls"][0]["key"] = ["fs:a"]
    with pytest.raises(TypeError, match=r"calls\[0\]\.key must be a str"):
        SavedState.from_dict(wrong)

    # The driver's snapshot (hosts/DRIVERS.md): one key is written `"key"`, as 0.2 wrote it, so
    # a 0.2 snapshot reads the same; `"keys"` beside it is refused.
    texts: list[str] = []

    async def hang(x: Any) -> None:
        await asyncio.get_running_loop().create_future()

    async def main() -> None:
        driver = Driver(Scheduler(p), persist=texts.append)
        task = asyncio.ensure_future(driver.run([Call("w1", "fs_write", arguments={"path": "a"})], hang))
        for _ in range(5):
            await asyncio.sleep(0)
        text = texts[-1]  # w1 started
        driver.close()
        with pytest.raises(DisposedError):
            await task
        assert '"id":"w1","tool":"fs_write","key":"fs:a","entries"' in text
        bad = text.replace('"key":"fs:a"', '"key":"fs:a","keys":["fs:a"]')
        with pytest.raises(ValueError, match=r"calls\[0\] has both keys and key"):
            Driver.resume(p, bad, execute=hang, started="run-again")
        resumed = Driver.resume(p, text, execute=hang, started="interrupt")
        statuses = resumed.driver.scheduler.inspect(resumed.driver.scheduler.unfinished().batches[0].batch)
        assert statuses is not None and [st.keys for st in statuses] == [("fs:a",)]
        (outcomes,) = await asyncio.gather(*resumed.batches)
        assert outcomes[0].entries[0].reason == Reason(ReasonKind.INTERRUPTED)
        resumed.driver.close()

    vloop.run(main())


SET_INSIDE = {"path": {"a.txt"}}


@pytest.mark.parametrize(
    "arguments",
    [
        None,
        {},
        {"file": "a.txt"},
        {"path": None},
        {"path": ["a.txt"]},
        {"path": {"a": 1}},
        SET_INSIDE,
        {"path": object()},
        {"path": Decimal("1")},
        {"path": float("nan")},
        {"path": float("inf")},
        {"path": float("-inf")},
        {"path": 10**5000},  # past sys.get_int_max_str_digits(): int.__repr__ raises
        {"path": "x" * 300},  # a key longer than 256 bytes
        ["a.txt"],
        ("a.txt",),
        5,
        2.5,
        True,
        "",
        "not json",
        '{"path": ',
        '{"path": NaN}',
        '["a.txt"]',
        '{"path": null}',
        Raising(),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Raising) or v == {"path": 10**5000} else repr(v)[:40],
)
def test_arguments_that_make_no_key_never_raise_and_take_the_templates_own_key(arguments: Any) -> None:
    s = Scheduler(policy())
    assert keys(s, [Call("w", "fs_write", arguments=arguments), Call("v", "fs_write", operations=None)]) == [FALLBACK, FALLBACK]

    async def main() -> list[Any]:
        async def execute(x: Any) -> str:
            await asyncio.sleep(0)
            return x.label

        async with Driver(Scheduler(policy())) as d:
            return await d.run([Call("w", "fs_write", arguments=arguments), Call("ok", "fs_write", arguments={"path": "a"})], execute)

    outcomes = vloop.run(main())
    assert [(c.entries[0].status, c.entries[0].value) for c in outcomes] == [(OutcomeStatus.OK, "w"), (OutcomeStatus.OK, "ok")]


def test_only_the_named_fields_cross_and_only_for_templated_tools() -> None:
    s = Scheduler(policy())
    crossed = sent(s)
    big = "x" * 100_000  # far past the component's 65536 bytes per call
    calls = [
        Call("a", "fs_write", arguments={"path": "a", "content": big, "mode": {"nested": [1, 2]}}),
        Call("p", "plain", arguments={"path": "a", "content": big}),
        Call("f", "free", arguments={"path": "a"}),
        Call("n", "fs_write"),
        Call("t", "fs_write", arguments='{"content": "c", "path": "b"}'),
        Call("u", "fs_write", arguments=json.dumps({"content": big, "path": "c", "n": 1.50})),
        Call("q", "pr", arguments={"n": 7, "repo": "org/x", "title": big}),
        Call("g", "api", operations=2, arguments={"host": "x", "body": big}),
    ]
    assert keys(s, calls) == ["fs:a", "plain", None, FALLBACK, "fs:b", "fs:c", "pr:org/x#7", "api:x", "api:x"]
    assert crossed == [
        [
            (0, '{"path":"a"}'),
            (4, '{"content": "c", "path": "b"}'),  # JSON text small enough crosses as written
            (5, '{"path":"c"}'),  # too big: the named fields, read from it
            (6, '{"repo":"org/x","n":7}'),
            (7, '{"host":"x"}'),
        ]
    ]


def test_the_component_refuses_what_the_package_never_sends_with_a_typed_code() -> None:
    # The package never sends these (it refuses them itself); the codes still lift to their
    # enum members. Since the 0.3 interface each call carries its own arguments, so there is
    # no `invalid-arguments` to provoke.
    from turnstile_scheduler.scheduler import _Fields, _limits

    def packed(ids: str, tools: str, fan_outs: list[tuple[int, int]] = [], arguments: list[tuple[int, str]] = []) -> Any:
        return _Fields(
            ids=ids,
            tools=tools,
            fan_outs=[_Fields(call=c, operations=n) for c, n in fan_outs],
            arguments=[_Fields(call=c, json=j) for c, j in arguments],
        )

    s = Scheduler(policy())
    for batch, code in (
        (packed("a\n", "api\n", [(0, 0)]), SubmitErrorCode.INVALID_OPERATIONS),
        (packed("a#\n", "fs_write\n", [], [(0, '{"path":"a"}')]), SubmitErrorCode.INVALID_ID),
        # A newline in a name splits it: the texts no longer add up.
        (packed("a\nb\n", "fs_write\n"), SubmitErrorCode.MALFORMED_BATCH),
        (packed("a\n", "fs_write\n", [], [(1, "{}")]), SubmitErrorCode.MALFORMED_BATCH),
        (packed("a", "fs_write"), SubmitErrorCode.MALFORMED_BATCH),
    ):
        result = s._submit(s._resource, batch, _limits(None, None, "limits"))
        assert type(result) is not tuple
        assert SubmitErrorCode(result.payload.code) is code
    with pytest.raises(SubmitError) as e:
        s.submit([Call("a\nb", "fs_write", arguments={"path": "a"})])
    assert e.value.code is SubmitErrorCode.INVALID_ID


def test_a_bad_template_is_a_typed_diagnostic_and_a_policy_names_each_templates_arguments() -> None:
    with pytest.raises(ConfigError) as e:
        Policy.resolve([("bad", '[conversation.tools.w]\nconcurrency = { key = "fs:{path" }\n')])
    [d] = e.value.diagnostics
    assert d.code is DiagnosticCode.CONCURRENCY_KEY_TEMPLATE and d.tools == ["w"]
    p = policy()
    assert p.tool("pr").arguments == ("repo", "n")
    assert [c.key for c in p.tool("fs_write").concurrency] == ["fs:{path}"] and p.tool("fs_write").arguments == ("path",)
    assert p.tool("plain").arguments == () and p.tool("free").arguments == () and p.tool("nowhere").arguments == ()


# ---------------------------------------------------------------------------------------------
# How keys expand


class Mode(IntEnum):
    RW = 6


@pytest.mark.parametrize(
    "value, key",
    [
        ("a.txt", "fs:a.txt"),
        ("dir/é ü\n\"q\"\\", "fs:dir/é ü\n\"q\"\\"),
        ("a\ud800b", "fs:a\ufffdb"),  # a lone surrogate: U+FFFD, as from JavaScript
        ("\ud83d\ude00", "fs:\U0001f600"),  # a surrogate pair: its character
        (7, "fs:7"),
        (-7, "fs:-7"),
        (2**64, "fs:18446744073709551616"),  # exact (JavaScript holds 2**53 at most)
        (Mode.RW, "fs:6"),
        (True, "fs:true"),
        (False, "fs:false"),
        (1.0, "fs:1"),  # as JSON.stringify writes it, not Python's 1.0
        (-0.0, "fs:0"),
        (0.1, "fs:0.1"),
        (2.5e-7, "fs:2.5e-7"),
        (1e21, "fs:1e+21"),
        (1e20, "fs:100000000000000000000"),
    ],
    ids=repr,
)
def test_a_key_expands_from_each_kind_of_value(value: Any, key: str) -> None:
    s = Scheduler(policy())
    assert keys(s, [Call("w", "fs_write", arguments={"path": value})]) == [key]
    # The same from JSON text.
    if isinstance(value, str):
        assert keys(s, [Call("t", "fs_write", arguments=json.dumps({"path": value}))]) == [key]


def test_from_json_text_a_number_is_kept_as_written_small_or_large() -> None:
    s = Scheduler(policy())
    small = '{"path": 1.50}'
    large = '{"content": "' + "x" * 70_000 + '", "path": 1.50}'  # read here, past 65536 bytes
    assert keys(s, [Call("s", "fs_write", arguments=small), Call("l", "fs_write", arguments=large)]) == ["fs:1.50", "fs:1.50"]


def test_numbers_are_written_as_json_stringify_writes_them() -> None:
    # What node prints for `JSON.stringify(x)` (checked against node on 60000 random doubles
    # when this was written).
    table = {
        1.0: "1",
        100.0: "100",
        -1.5: "-1.5",
        123.456: "123.456",
        0.000001: "0.000001",
        0.000001234: "0.000001234",
        1e-7: "1e-7",
        1.5e-7: "1.5e-7",
        1e16: "10000000000000000",
        12345678901234567890.0: "12345678901234567000",
        float(2**53 + 2): "9007199254740994",
        3.14e100: "3.14e+100",
        5e-324: "5e-324",
        1.7976931348623157e308: "1.7976931348623157e+308",
    }
    for x, text in table.items():
        assert js_number(x) == text, x
    for x in (float("nan"), float("inf"), float("-inf")):
        assert js_number(x) is None
    # Whatever the layout, the number reads back as itself.
    rng = random.Random(12)
    for _ in range(2000):
        x = rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30)
        assert float(js_number(x)) == x  # type: ignore[arg-type]


def test_a_template_of_several_fields_and_a_fan_out_call_share_one_key_per_call() -> None:
    s = Scheduler(policy())
    assert keys(s, [Call("q", "pr", arguments={"repo": "o/r", "n": 12}), Call("g", "api", operations=3, arguments={"host": "h"})]) == [
        "pr:o/r#12",
        "api:h",
        "api:h",
        "api:h",
    ]


# ---------------------------------------------------------------------------------------------
# Through the driver


class Files:
    """Writes that record their start and end, with how many run at once per file and over all."""

    def __init__(self) -> None:
        self.running: dict[str, int] = {}
        self.overlap: list[str] = []  # a file written twice at once
        self.order: dict[str, list[str]] = {}  # per file, the writes in start order
        self.most = 0  # the most writes running at once, over every file
        self.log: list[tuple[str, str]] = []

    async def execute(self, x: Any) -> str:
        path = x.call.arguments["path"]
        self.running[path] = self.running.get(path, 0) + 1
        if self.running[path] > 1:
            self.overlap.append(f"{x.label} on {path}")
        self.most = max(self.most, sum(self.running.values()))
        self.order.setdefault(path, []).append(x.label)
        self.log.append(("start", x.label))
        try:
            await asyncio.sleep(random.uniform(0.0005, 0.004))
        finally:
            self.running[path] -= 1
            self.log.append(("end", x.label))
        return f"wrote {path}"


def test_a_burst_of_writes_to_a_few_files_runs_one_at_a_time_per_file_in_written_order() -> None:
    random.seed(3)
    paths = ["a.txt", "b.txt", "c.txt", "d.txt"]
    writes = [Call(f"w{i}", "fs_write", arguments={"path": paths[(i * 7) % 4 if i % 3 else i % 4], "content": f"v{i}"}) for i in range(30)]
    # Three responses in flight at once on one driver: per file, earlier batches first.
    batches = [writes[:12], writes[12:20], writes[20:]]
    files = Files()

    async def main() -> list[Any]:
        async with Driver(Scheduler(policy())) as d:
            return await asyncio.wait_for(asyncio.gather(*(d.run(b, files.execute) for b in batches)), 20)

    outcomes = vloop.run(main())
    flat = [c for batch in outcomes for c in batch]
    assert [c.id for c in flat] == [c.id for c in writes]
    assert all(c.entries[0].status is OutcomeStatus.OK for c in flat)
    assert files.overlap == [], "never two writes at once on one file"
    for path in paths:
        assert files.order[path] == [c.id for c in writes if c.arguments["path"] == path], path
    assert files.most > 1, "writes to different files ran together"
    assert sum(len(v) for v in files.order.values()) == 30


def test_a_429_on_one_host_pauses_that_hosts_key_only() -> None:
    # A fanned-out call per host; host x answers its first request 429 with Retry-After: 1.
    answered: dict[str, int] = {}
    seen: list[tuple[str, str, float]] = []  # (event, label, loop time)

    async def execute(x: Any) -> str:
        loop = asyncio.get_running_loop()
        host = x.call.arguments["host"]
        seen.append(("start", x.label, loop.time()))
        answered[host] = answered.get(host, 0) + 1
        first = host == "x" and answered[host] == 1
        await asyncio.sleep(0.005 if first else 0.03)
        seen.append(("end", x.label, loop.time()))
        if first:
            raise RateLimited.from_header("1")
        return f"200 {x.label}"

    async def main() -> list[Any]:
        async with Driver(Scheduler(policy())) as d:
            calls = [Call("a", "api", operations=3, arguments={"host": "x"}), Call("b", "api", operations=3, arguments={"host": "y"})]
            return await asyncio.wait_for(d.run(calls, execute), 10)

    outcomes = vloop.run(main())
    flat = [e for c in outcomes for e in c.entries]
    assert [(e.label, e.status, e.value) for e in flat] == [(l, OutcomeStatus.OK, f"200 {l}") for l in ("a#0", "a#1", "a#2", "b#0", "b#1", "b#2")]
    limited_at = next(t for ev, l, t in seen if ev == "end" and l == "a#0")
    after = [(l, t) for ev, l, t in seen if ev == "start" and t > limited_at]
    # Host y never waited on x's pause: all of it ended well before the pause did.
    y_ends = [t for ev, l, t in seen if ev == "end" and l.startswith("b#")]
    assert max(y_ends) < limited_at + 0.5
    # Host x: nothing started during its pause; a#0 ran again (first in line), then a#2.
    x_after = [l for l, _ in after if l.startswith("a#")]
    assert x_after == ["a#0", "a#2"]
    assert all(t >= limited_at + 1 - 0.003 for l, t in after if l.startswith("a#"))


def test_a_restart_keeps_each_calls_key_without_its_arguments() -> None:
    p = policy()
    files = Files()

    async def main() -> tuple[list[Any], list[Any], list[str]]:
        s = Scheduler(p)
        sub = s.submit(
            [
                Call("w1", "fs_write", arguments={"path": "a"}),
                Call("w2", "fs_write", arguments={"path": "b"}),
                Call("w3", "fs_write", arguments={"path": "a"}),
            ]
        )
        s.step(approve=list(sub.entries))  # w1 and w2 start, then the host stops
        state = SavedState.from_dict(json.loads(json.dumps(s.unfinished().to_dict())))
        assert [c.keys for c in state.batches[0].calls] == [("fs:a",), ("fs:b",), ("fs:a",)]
        async def execute(x: Any) -> str:
            # A restored call has no arguments: the key is the saved one.
            if x.call.arguments is None:
                x.call = Call(x.call.id, x.call.tool, arguments={"path": {"w1": "a", "w2": "b", "w3": "a"}[x.call.id]})
            return await files.execute(x)

        d, [restored], unrestored = Driver.resume(p, state, execute=execute, started=Started.RUN_AGAIN)
        assert unrestored == []
        async with d:
            statuses = d.scheduler.inspect(sub.batch)
            assert statuses is not None and [st.keys for st in statuses] == [("fs:a",), ("fs:b",), ("fs:a",)]
            await asyncio.sleep(0)
            new = await d.run([Call("w4", "fs_write", arguments={"path": "a"})], files.execute)
            return await restored, new, files.order["a"]

    restored, new, order_a = vloop.run(main())
    assert [c.entries[0].status for c in restored + new] == [OutcomeStatus.OK] * 4
    assert order_a == ["w1", "w3", "w4"], "the restored calls keep their file's order; the new one comes after"
    assert files.overlap == []


def test_the_gate_and_decide_see_the_arguments_and_keys_follow_them() -> None:
    decided: list[tuple[str, Any]] = []
    files = Files()

    def decide(label: str, call: Call) -> str:
        decided.append((label, call.arguments))
        return "approve"

    async def main() -> list[str]:
        async with Gate(policy(), decide=decide) as gate:

            async def write(label: str, path: str) -> str:
                x = x_label(label)
                x.call = Call(label, "fs_write", arguments={"path": path})
                return await files.execute(x)

            return await asyncio.gather(
                gate.call("fs_write", "g1", {"path": "a"}, lambda _: write("g1", "a")),
                gate.call("fs_write", "g2", '{"path": "b"}', lambda _: write("g2", "b")),
                gate.call("fs_write", "g3", {"path": "a"}, lambda _: write("g3", "a")),
                gate.call("fs_write", "g4", None, lambda _: write("g4", "c")),  # no arguments: the template's own key
            )

    assert vloop.run(main()) == ["wrote a", "wrote b", "wrote a", "wrote c"]
    assert decided == [("g1", {"path": "a"}), ("g2", '{"path": "b"}'), ("g3", {"path": "a"}), ("g4", None)]
    assert files.order == {"a": ["g1", "g3"], "b": ["g2"], "c": ["g4"]}
    assert files.overlap == [] and files.most > 1


# ---------------------------------------------------------------------------------------------
# Key sets


KEY_SET = """
[conversation.tools.mv]
concurrency = [{ key = "fs:{src}" }, { key = "fs:{dst}" }]
[conversation.tools.fs_write]
concurrency = { key = "fs:{path}" }
"""


def test_a_key_set_lists_every_key_and_its_calls_take_them_all() -> None:
    p = Policy.resolve([("sets", KEY_SET)])
    mv = p.tool("mv")
    assert [(c.key, c.limit, c.arguments) for c in mv.concurrency] == [("fs:{src}", 1, ("src",)), ("fs:{dst}", 1, ("dst",))]
    assert mv.arguments == ("src", "dst")  # what a call sends: every member's fields
    assert p.tool("nowhere").concurrency == () and p.tool("nowhere").arguments == ()
    s = Scheduler(p)
    crossed = sent(s)
    sub = s.submit(
        [
            Call("m1", "mv", arguments={"src": "a", "dst": "b", "force": True}),
            Call("m2", "mv", arguments={"src": "b", "dst": "c"}),
            Call("m3", "mv", arguments={"src": "x", "dst": "y"}),
            Call("m4", "mv", arguments={"src": "c", "dst": ["z"]}),  # dst makes no key: its template's own
            Call("m5", "mv", arguments='{"src": "q", "dst": "q"}'),  # one key made twice counts once
            Call("w", "fs_write", arguments={"path": "y"}),
        ]
    )
    assert crossed == [
        [
            (0, '{"src":"a","dst":"b"}'),
            (1, '{"src":"b","dst":"c"}'),
            (2, '{"src":"x","dst":"y"}'),
            (3, '{"src":"c"}'),
            (4, '{"src": "q", "dst": "q"}'),
            (5, '{"path":"y"}'),
        ]
    ]
    out = s.step(approve=list(sub.entries))
    assert [s.label(e) for e in out.start] == ["m1", "m3", "m5"]
    statuses = {st.label: st for st in s.inspect(sub.batch) or []}
    assert [statuses[l].keys for l in ("m1", "m2", "m3", "m4", "m5", "w")] == [
        ("fs:a", "fs:b"),
        ("fs:b", "fs:c"),
        ("fs:x", "fs:y"),
        ("fs:c", "fs:{dst}"),
        ("fs:q",),
        ("fs:y",),
    ]
    assert statuses["m2"].wait == KeyFull("fs:b", 1, ["m1"])
    assert statuses["m4"].wait == Behind("m2", "fs:c")
    assert statuses["w"].wait == KeyFull("fs:y", 1, ["m3"])
    # Saved with every member's key, in written order (one key made twice is named twice).
    assert [c.keys for c in s.unfinished().batches[0].calls] == [
        ("fs:a", "fs:b"),
        ("fs:b", "fs:c"),
        ("fs:x", "fs:y"),
        ("fs:c", "fs:{dst}"),
        ("fs:q", "fs:q"),
        ("fs:y",),
    ]


def test_a_driver_runs_calls_of_a_key_set_one_after_the_other_only_where_they_share_a_key() -> None:
    p = Policy.resolve([("sets", KEY_SET)])
    log: list[tuple[str, str, float]] = []

    async def execute(x: Any) -> str:
        loop = asyncio.get_running_loop()
        log.append(("start", x.label, loop.time()))
        await asyncio.sleep(0.010)
        log.append(("end", x.label, loop.time()))
        return x.label

    async def main() -> list[Any]:
        async with Driver(Scheduler(p)) as d:
            return await d.run(
                [
                    Call("ab", "mv", arguments={"src": "a", "dst": "b"}),
                    Call("bc", "mv", arguments={"src": "b", "dst": "c"}),
                    Call("xy", "mv", arguments={"src": "x", "dst": "y"}),
                ],
                execute,
            )

    outcomes = vloop.run(main())
    assert [c.entries[0].value for c in outcomes] == ["ab", "bc", "xy"]
    at = {(ev, label): t for ev, label, t in log}
    assert [label for ev, label, _ in log if ev == "start"] == ["ab", "xy", "bc"]
    assert at[("start", "xy")] == at[("start", "ab")] < at[("end", "ab")]  # beside the first
    assert at[("start", "bc")] >= at[("end", "ab")]  # they share fs:b: one after the other


def test_a_key_sets_keys_are_saved_by_name_and_a_restart_gives_them_back() -> None:
    """A driver's snapshot writes a key set's `"keys"` (one key stays `"key"`, as 0.2 wrote
    it); resumed without arguments, the call takes the same keys."""
    p = Policy.resolve([("sets", KEY_SET)])
    texts: list[str] = []

    async def hang(x: Any) -> None:
        await asyncio.get_running_loop().create_future()

    async def main() -> None:
        driver = Driver(Scheduler(p), persist=texts.append)
        calls = [Call("ab", "mv", arguments={"src": "a", "dst": "b"}), Call("w", "fs_write", arguments={"path": "b"})]
        task = asyncio.ensure_future(driver.run(calls, hang))
        for _ in range(5):
            await asyncio.sleep(0)
        text = texts[-1]  # ab started; w waits for fs:b
        driver.close()
        with pytest.raises(DisposedError):
            await task
        assert '"id":"ab","tool":"mv","keys":["fs:a","fs:b"],"entries"' in text
        assert '"id":"w","tool":"fs_write","key":"fs:b","entries"' in text
        resumed = Driver.resume(p, text, execute=hang, started="interrupt")
        sched = resumed.driver.scheduler
        statuses = sched.inspect(sched.unfinished().batches[0].batch)
        assert statuses is not None and [st.keys for st in statuses] == [("fs:a", "fs:b"), ("fs:b",)]
        resumed.driver.close()
        for b in resumed.batches:
            with pytest.raises(DisposedError):
                await b

    vloop.run(main())


def test_a_key_set_that_the_config_refuses_says_why_with_a_typed_code() -> None:
    for table, code in [
        ('[{ key = "fs:{src}" }, { key = "fs:{src}" }]', DiagnosticCode.CONCURRENCY_KEY_REPEATED),
        ('[{ key = "a", shared = true }, { key = "b", shared = true }]', DiagnosticCode.SHARED_KEY_IN_SET),
        ('[{ key = "a", shared = true }, { key = "b", rate = "1/s" }]', DiagnosticCode.SHARED_KEY_IN_SET),
        (
            '[{ key = "a", limit = { max = 4, adapt = "aimd" } }, { key = "b", limit = { max = 4, adapt = "aimd" } }]',
            DiagnosticCode.ADAPTIVE_KEYS_IN_SET,
        ),
    ]:
        with pytest.raises(ConfigError) as e:
            Policy.resolve([("t", f"[conversation.tools.t]\nconcurrency = {table}\n")])
        assert [d.code for d in e.value.diagnostics] == [code], table
        assert e.value.diagnostics[0].tools == ["t"]


# ---------------------------------------------------------------------------------------------
# The component's sentences


def test_inspect_says_why_an_entry_waits() -> None:
    s = Scheduler(policy())
    sub = s.submit(
        [
            Call("w1", "fs_write", arguments={"path": "a"}),
            Call("w2", "fs_write", arguments={"path": "a"}),
            Call("r1", "fs_read", arguments={"path": "a"}),
            Call("w3", "fs_write", arguments={"path": "b"}),
        ]
    )
    w1, w2, r1, w3 = sub.entries
    s.step(approve=[w1, w2])
    statuses = s.inspect(sub.batch)
    assert statuses is not None
    assert [st.why for st in statuses] == [
        "waiting: 2 calls of this batch still need a decision (nothing of a batch starts before every call is approved or declined)",
        "waiting: 2 calls of this batch still need a decision (nothing of a batch starts before every call is approved or declined)",
        None,  # pending: it waits on the user, not the scheduler
        None,
    ]
    s.step(approve=[r1, w3])
    by_label = {st.label: st for st in s.inspect(sub.batch) or []}
    assert by_label["w1"].state is EntryState.RUNNING and by_label["w1"].why is None
    assert by_label["w2"].why == "waiting: fs:a is full (1 of 1 running: w1)"
    assert by_label["r1"].why == "waiting: behind w2, which comes first on fs:a"
    assert by_label["w3"].why is None


def test_every_settled_outcome_carries_the_components_sentence() -> None:
    p = policy()

    async def execute(x: Any) -> str:
        await asyncio.sleep(0.001)
        if x.label == "rm#1":
            raise RuntimeError("disk on fire")
        if x.call.tool == "flaky":
            raise RateLimited(0)
        return x.label

    decisions = {"rej": "reject", "skp": "skip", "fl": "fail"}

    async def main() -> list[Any]:
        async with Driver(Scheduler(p)) as d:
            calls = [
                Call("rej", "fs_write", arguments={"path": "a"}),
                Call("skp", "plain"),
                Call("fl", "free"),
                Call("rm", "delete", operations=4, arguments={"dir": "/tmp"}),
                Call("fk", "flaky"),
                Call("ok", "fs_write", arguments={"path": "a"}),
            ]
            return await d.run(calls, execute, decide=lambda label, call: decisions.get(label, "approve"))

    first = vloop.run(main())
    flat = {e.label: e for c in first for e in c.entries}
    settled = {label: e for label, e in flat.items() if e.status is OutcomeStatus.SETTLED}
    assert {label: e.reason.kind for label, e in settled.items()} == {  # type: ignore[union-attr]
        "rej": ReasonKind.REJECTED,
        "skp": ReasonKind.SKIPPED,
        "fl": ReasonKind.FAILED,
        "rm#2": ReasonKind.STOPPED,
        "rm#3": ReasonKind.STOPPED,
        "fk": ReasonKind.RATE_LIMITED,
    }
    for label, e in settled.items():
        assert e.message == explain(label, e.reason), label  # type: ignore[arg-type]
    assert settled["rm#2"].message == (
        "not run: stopped after rm#1 failed (this tool stops a call's operations at the first failure)"
    )
    assert settled["fk"].message == explain("fk", Reason(ReasonKind.RATE_LIMITED, retries=0))
    assert isinstance(settled["fk"].error, RateLimited)
    for label in ("rm#0", "ok", "rm#1"):
        assert flat[label].message is None, "only a settled outcome has a sentence"


def test_cancelled_restored_and_gate_settled_calls_carry_it_too() -> None:
    p = policy()

    async def cancelled() -> list[Any]:
        got: list[Any] = []
        async with Driver(Scheduler(p)) as d:
            hold = asyncio.Event()

            async def held(x: Any) -> str:
                await hold.wait()
                return x.label

            # h2 waits behind h1 on `plain`; cancelling the run settles it (`run` raises, so
            # the outcome is read where the gate reads it).
            task = asyncio.ensure_future(
                d.run([Call("h1", "plain"), Call("h2", "plain")], held, on_outcome=lambda outcome, call: got.append(outcome))
            )
            await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        return got

    [h2] = [o for o in vloop.run(cancelled()) if o.label == "h2"]
    assert (h2.label, h2.reason, h2.message) == ("h2", Reason(ReasonKind.CANCELLED), "not run: the batch was cancelled")

    # Restored: what had started is interrupted, and says so.
    s = Scheduler(p)
    sub = s.submit([Call("w", "fs_write", arguments={"path": "a"})])
    s.step(approve=list(sub.entries))

    async def restored() -> list[Any]:
        d, [batch], _ = Driver.resume(p, s.unfinished(), execute=lambda x: asyncio.sleep(0), started=Started.INTERRUPT)
        async with d:
            return await batch

    [[w]] = [c.entries for c in vloop.run(restored())]
    assert w.reason == Reason(ReasonKind.INTERRUPTED) and w.message == explain("w", Reason(ReasonKind.INTERRUPTED))

    # The gate: CallSettledError's text is the outcome's sentence.
    async def gated() -> BaseException:
        async with Gate(p, decide=lambda label, call: "skip") as gate:
            try:
                await gate.call("fs_write", "g", {"path": "a"}, lambda _: asyncio.sleep(0))
            except CallSettledError as e:
                return e
        raise AssertionError("not settled")

    e = vloop.run(gated())
    assert str(e) == e.message == explain("g", Reason(ReasonKind.SKIPPED)) == "not run: this call was skipped"


async def _resume(p: Any, state: Any) -> None:
    async def execute(x: Any) -> None:
        return None

    Driver.resume(p, state, execute=execute, started=Started.RUN_AGAIN)
