"""Persistence (hosts/DRIVERS.md, "Persistence"), failure paths first: a persist that raises
breaks the driver loudly (PersistError on every batch, executions cancelled, nothing starts);
on_outcome and a returned run wait for their snapshot; a malformed snapshot is a TypeError or
ValueError naming the field. Then the snapshot's text, byte for byte: the state the JS package
wrote as tests/scenarios/snapshots/js-basic.json gives the same text here, that fixture
resumes here, and py-basic.json is this package's fixture (the JS package resumes it). All on
the virtual-time loop."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

import vloop
from turnstile_scheduler import (
    Call,
    DisposedError,
    Driver,
    OutcomeStatus,
    PersistError,
    Policy,
    RestoredError,
    Scheduler,
)

SNAPSHOTS = Path(__file__).resolve().parents[3] / "tests" / "scenarios" / "snapshots"
CONFIG = (SNAPSHOTS / "js-basic.toml").read_text(encoding="utf-8")


def policy(text: str = CONFIG) -> Policy:
    return Policy.resolve([("persist", text)])


class RangeError(Exception):
    """JavaScript's RangeError, by name (the fixture saves errors by class name)."""


def test_persist_must_be_callable_naming_the_parameter() -> None:
    with pytest.raises(TypeError, match="persist"):
        Driver(Scheduler(policy()), persist="file")  # type: ignore[arg-type]


def test_a_persist_that_raises_breaks_the_driver_and_nothing_starts() -> None:
    boom = OSError("disk full")

    def persist(text: str) -> None:
        raise boom

    async def main() -> None:
        driver = Driver(Scheduler(policy()), persist=persist)
        started: list[str] = []

        async def execute(x: Any) -> None:
            started.append(x.label)

        with pytest.raises(PersistError) as e:
            await driver.run([Call("r1", "read")], execute)
        assert e.value.__cause__ is boom and e.value.code == "persist-failed"
        assert started == []
        with pytest.raises(DisposedError):
            await driver.run([Call("r2", "read")], execute)

    vloop.run(main())


def test_an_async_persist_that_fails_later_cancels_executions_and_fails_every_batch() -> None:
    calls = 0

    async def persist(text: str) -> None:
        nonlocal calls
        calls += 1
        if calls >= 2:  # the first snapshot (the starts) is saved; the one after the first end fails
            raise OSError("gone")

    async def main() -> None:
        driver = Driver(Scheduler(policy()), persist=persist)
        aborted: list[str] = []
        outcomes: list[str] = []

        async def execute(x: Any) -> str:
            if x.label == "r1":
                await asyncio.sleep(0.010)
                return "one"
            try:
                await asyncio.get_running_loop().create_future()
            except asyncio.CancelledError:
                aborted.append(x.label)
                raise
            return "never"

        with pytest.raises(PersistError) as e:
            await driver.run([Call("r1", "read"), Call("r2", "read")], execute, on_outcome=lambda o, c: outcomes.append(o.label))
        assert str(e.value.__cause__) == "gone"
        await asyncio.sleep(0)
        assert aborted == ["r2"]
        assert outcomes == []  # r1's end never reached a saved snapshot: it was not handed out

    vloop.run(main())


def test_on_outcome_and_the_run_wait_for_the_snapshot_that_holds_the_end() -> None:
    async def main() -> None:
        saved: list[str] = []
        release: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def persist(text: str) -> Any:
            saved.append(text)
            # Holds the snapshot that holds r1's end (its batch retired with it).
            if '"status":"ok"' in text and not release.done():
                return release
            return None

        driver = Driver(Scheduler(policy()), persist=persist)
        seen: list[str] = []

        async def execute(x: Any) -> str:
            return "v"

        def on_outcome(o: Any, call: Call) -> None:
            seen.append(f"{o.label} {json.loads(saved[-1])['retired'][0]['outcomes'][0]['entries'][0]['value']}")

        run = asyncio.ensure_future(driver.run([Call("r1", "read")], execute, on_outcome=on_outcome))
        for _ in range(10):
            await asyncio.sleep(0)
        assert seen == [] and not run.done()
        release.set_result(None)
        outcomes = await run
        assert seen == ["r1 v"]
        assert len(json.loads(saved[-1])["retired"]) == 1  # saved until the host forgets it
        driver.forget(outcomes)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert json.loads(saved[-1])["retired"] == []
        with pytest.raises(TypeError):
            driver.forget("outcomes")  # type: ignore[arg-type]
        driver.close()

    vloop.run(main())


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("{", "JSON"),
        ('{"turnstile-snapshot":2,"state":{}}', "turnstile-snapshot"),
        ("POLICY", "snapshot.state.policy"),
        ("NEXT", "snapshot.state.next-batch"),
        ("STATUS", "snapshot.retired[0].outcomes[0].entries[0].status"),
        ("EXTRA", "extra"),
    ],
)
def test_a_malformed_snapshot_names_the_field(text: str, field: str) -> None:
    good: dict[str, Any] = {
        "turnstile-snapshot": 1,
        "state": {"version": 2, "policy": "1", "next-batch": "0", "next-entry": "0", "batches": []},
        "ended": {},
        "retired": [],
    }
    if text == "POLICY":
        text = json.dumps({**good, "state": {**good["state"], "policy": 1}})
    elif text == "NEXT":
        text = json.dumps({**good, "state": {**good["state"], "next-batch": "-1"}})
    elif text == "STATUS":
        entries = [{"entry": "1", "label": "a", "status": "odd"}]
        text = json.dumps({**good, "retired": [{"batch": "1", "outcomes": [{"id": "a", "tool": "t", "entries": entries}]}]})
    elif text == "EXTRA":
        text = json.dumps({**good, "extra": 1})

    async def execute(x: Any) -> int:
        return 1

    async def main() -> None:
        with pytest.raises((TypeError, ValueError)) as e:
            Driver.resume(policy(), text, execute=execute, started="interrupt")
        assert field in str(e.value)

    vloop.run(main())


async def fixture_snapshot(live_calls: list[Call], execute: Any, **run: Any) -> tuple[str, Driver]:
    """The fixture's state: a retired batch not forgotten (r1 ok, r2 failed), then a live
    batch run until 10 ms."""
    last: list[str] = []
    driver = Driver(Scheduler(policy()), persist=last.append)

    async def first(x: Any) -> int:
        if x.label == "r2":
            raise TypeError("bad input")
        return 3

    await driver.run([Call("r1", "read"), Call("r2", "read")], first, decide=lambda label, call: "approve")
    task = asyncio.ensure_future(driver.run(live_calls, execute, **run))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    await asyncio.get_running_loop().run_until(0.010)  # type: ignore[attr-defined]
    return last[-1], driver


async def hang() -> Any:
    await asyncio.get_running_loop().create_future()


def test_the_js_fixtures_state_gives_the_same_text_byte_for_byte() -> None:
    async def execute(x: Any) -> Any:
        if x.label == "w1":
            return {"text": "café ☕", "n": [1, 2.5, None], "ok": True}
        if x.label == "w2":
            raise RangeError('boom "quoted"')
        return await hang()

    async def main() -> str:
        calls = [Call("w1", "write", arguments={"path": "a"}), Call("w2", "write", arguments={"path": "b"}), Call("f", "fan", 2)]
        text, driver = await fixture_snapshot(
            calls, execute, execution_timeout=5, decide=lambda label, call: "reject" if label == "f#1" else "approve"
        )
        driver.close()
        return text

    text = vloop.run(main())
    assert text == (SNAPSHOTS / "js-basic.json").read_text(encoding="utf-8")
    assert text.isascii() and ", " not in text and ": " not in text


def test_the_js_fixture_resumes_with_its_values_errors_and_retired_outcomes() -> None:
    reported: list[str] = []

    async def again(x: Any) -> str:
        return "again"

    async def main() -> list[Any]:
        resumed = Driver.resume(
            policy(), (SNAPSHOTS / "js-basic.json").read_text(encoding="utf-8"), execute=again, started="interrupt",
            on_outcome=lambda o, c: reported.append(o.label),
        )
        batches = await asyncio.gather(*resumed.batches)
        resumed.driver.close()
        return batches

    retired, live = vloop.run(main())
    assert retired[0].entries[0].value == 3
    error = retired[1].entries[0].error
    assert isinstance(error, RestoredError) and (error.name, error.message) == ("TypeError", "bad input")
    assert live[0].entries[0].value == {"text": "café ☕", "n": [1, 2.5, None], "ok": True}
    assert (live[1].entries[0].error.name, live[1].entries[0].error.message) == ("RangeError", 'boom "quoted"')
    fan = live[2].entries
    assert [e.reason.kind.value if e.status is OutcomeStatus.SETTLED else e.status.value for e in fan] == ["interrupted", "rejected"]
    assert sorted(reported) == ["f#0", "f#1", "r1", "r2", "w1", "w2"]


def test_py_basic_json_is_this_packages_text() -> None:
    """This package's fixture (the JS package resumes every py-*.json): a live batch with an
    abort grace, a value with an int beyond 2**53, a float written `1.0` and non-ASCII text (a
    value JSON cannot hold fails at its end instead: see the test below), an error of a Python
    class, a skipped operation, two started ones."""

    async def execute(x: Any) -> Any:
        if x.label == "w1":
            return {"big": 2**60, "float": 1.0, "list": [1, "é", None], "half": -0.5}
        if x.label == "w2":
            raise KeyError("missing")
        return await hang()

    async def main() -> str:
        calls = [Call("w1", "write", arguments={"path": "x"}), Call("w2", "write", arguments={"path": "y"}), Call("f", "fan", 3)]
        text, driver = await fixture_snapshot(
            calls, execute, execution_timeout=2.5, abort_grace=0.1, decide=lambda label, call: "skip" if label == "f#2" else "approve"
        )
        driver.close()
        return text

    text = vloop.run(main())
    path = SNAPSHOTS / "py-basic.json"
    if os.environ.get("TURNSTILE_WRITE_SNAPSHOTS"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_values_come_back_the_same_after_a_restart_and_what_json_cannot_carry_fails_at_its_end() -> None:
    """hosts/DRIVERS.md, "Persistence": with persist, a float stays a float across a restart
    (written `1.0`, not JS's `1`), and a value JSON cannot carry (a tuple, a set, NaN) fails at
    its end with a TypeError that names the label and what it returned, live and after a restart
    alike (scenario 68 runs the same in both packages; JS has one number type)."""
    texts: list[str] = []

    async def main() -> None:
        driver = Driver(Scheduler(policy()), persist=texts.append)
        values: dict[str, Any] = {"f": 1.0, "g": [2.0, -0.5, 1e16], "t": (1, 2), "s": {1}, "n": float("nan")}

        async def execute(x: Any) -> Any:
            if x.label == "w":
                await asyncio.get_running_loop().create_future()  # running at the crash
            return values[x.label]

        run = asyncio.ensure_future(driver.run([Call(k, "read") for k in [*values, "w"]], execute))
        for _ in range(10):
            await asyncio.sleep(0)
        live = {o.label: o for o in driver._batches[next(iter(driver._batches))].outcomes if o is not None}
        assert type(live["f"].value) is float and live["f"].status is OutcomeStatus.OK
        for label, what in (("t", "a tuple"), ("s", "a set"), ("n", "a float nan")):
            assert live[label].status is OutcomeStatus.FAILED and isinstance(live[label].error, TypeError)
            assert str(live[label].error).startswith(f"{label} returned {what}, which the snapshot cannot hold as JSON")
        run.cancel()
        resumed = Driver.resume(policy(), texts[-1], execute=execute, started="interrupt")
        (outcomes,) = await asyncio.gather(*resumed.batches)
        after = {c.id: c.entries[0] for c in outcomes}
        assert after["f"].value == 1.0 and type(after["f"].value) is float
        assert after["g"].value == [2.0, -0.5, 1e16] and all(type(v) is float for v in after["g"].value)
        for label in ("t", "s", "n"):
            assert after[label].status is OutcomeStatus.FAILED
            assert isinstance(after[label].error, RestoredError) and after[label].error.name == "TypeError"
        resumed.driver.close()

    vloop.run(main())


def test_resume_takes_the_options_js_takes_and_a_restored_deadline_names_its_limit() -> None:
    """The JS test "Driver.resume takes the options Python takes": no execution_timeout or
    abort_grace at resume (a restored batch keeps the limits it was saved with), and a
    restored batch's deadline names its limit ("w1 ran past execution_timeout (0.1 s)"; JS
    "w1 ran past executionTimeoutMs (100 ms)")."""
    texts: list[str] = []
    p = policy("[conversation.tools.write]\n")

    async def hang(x: Any) -> None:
        await asyncio.get_running_loop().create_future()

    async def main() -> None:
        driver = Driver(Scheduler(p), persist=texts.append)
        first = asyncio.ensure_future(driver.run([Call("w1", "write")], hang, execution_timeout=0.1))
        for _ in range(5):
            await asyncio.sleep(0)
        text = texts[-1]
        driver.close()
        with pytest.raises(DisposedError):
            await first
        for field in ("execution_timeout", "abort_grace"):
            with pytest.raises(TypeError, match=field):
                Driver.resume(p, text, execute=hang, started="run-again", **{field: 5})  # type: ignore[arg-type]
        resumed = Driver.resume(p, text, execute=hang, started="run-again")
        (outcomes,) = await asyncio.gather(*resumed.batches)
        o = outcomes[0].entries[0]
        assert o.status is OutcomeStatus.FAILED and isinstance(o.error, TimeoutError)
        assert str(o.error) == "w1 ran past execution_timeout (0.1 s)"
        resumed.driver.close()

    vloop.run(main())
