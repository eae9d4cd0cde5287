"""The scenario corpus (tests/scenarios/*.toml, format in tests/scenarios/README.md): every file
is one test, run by the Driver on a virtual-time loop (`vloop`) with an in-memory `persist`,
and must print exactly its `expect` lines (the JS runner, hosts/js/test/scenarios.test.mjs,
prints the same). Nothing sleeps on real time. `restart` drops the driver without closing it
(what its executions still do is ignored) and resumes the last persisted snapshot with
`Driver.resume`. On a mismatch the test prints both lists, line by line."""

from __future__ import annotations

import asyncio
import json
import re
import tomllib
from pathlib import Path
from typing import Any, Optional

import pytest

import vloop
from turnstile_scheduler import Call, Driver, Policy, RateLimited, RestoredError, Scheduler

DIR = Path(__file__).resolve().parents[3] / "tests" / "scenarios"
FILES = sorted(p.name for p in DIR.glob("*.toml"))

KNOWN = {"about", "config", "started", "batch", "script", "at", "expect"}
BATCH_KNOWN = {"at", "calls", "operations", "execution_ms", "abort_grace_ms", "decide", "cancel_at", "forget"}
# Scenarios this runner cannot run, with why (none today; a shared key needs an in-memory store
# on the virtual clock, which does not exist yet: see the corpus README).
SKIP: dict[str, str] = {}


class ScenarioError(Exception):
    """The runner's own error: `fail 'message'`, `throw-sync`, a `decide` that raises."""


def _dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def error_text(e: Any) -> str:
    """An error as a line writes it: a ScenarioError's message quoted, else its name."""
    name = e.name if isinstance(e, RestoredError) else type(e).__name__
    if name == "ScenarioError":
        return _dumps(e.message if isinstance(e, RestoredError) else str(e))
    return name


def outcome_text(o: Any) -> str:
    status = o.status.value
    if status == "ok":
        return f"ok {_dumps(o.value)}"
    if status == "failed":
        return f"failed {error_text(o.error)}"
    if status == "cancelled":
        return "cancelled"
    return f"settled {o.reason.kind.value} {_dumps(o.message)}"


def normalize(lines: list[str]) -> list[str]:
    """Splits lines into parts at `restart` and sorts each part by time, then as text."""
    parts: list[list[str]] = [[]]
    for line in lines:
        text = line.strip()
        if not text:
            continue
        if re.fullmatch(r"\d+ restart", text):
            parts.extend([[text], []])
        else:
            parts[-1].append(text)
    out: list[str] = []
    for part in parts:
        out.extend(sorted(part, key=lambda t: (int(t.split(" ", 1)[0]), t)))
    return out


def diff(expected: list[str], actual: list[str]) -> str:
    rows = []
    for i in range(max(len(expected), len(actual))):
        e = expected[i] if i < len(expected) else ""
        a = actual[i] if i < len(actual) else ""
        rows.append(f"{'  ' if e == a else '!!'} {e:<60} | {a}")
    return "expected (left) and got (right):\n" + "\n".join(rows)


def literal(text: str) -> Any:
    """A TOML literal as a script writes it (`'text'`, `3`, `true`)."""
    return tomllib.loads(f"v = {text}")["v"]


def check_keys(value: dict[str, Any], known: set[str], where: str) -> None:
    for key in value:
        if key not in known:
            raise ValueError(f"{where}: unknown field {key!r}")


class Life:
    """One life of the process: its driver and everything its executions report (ignored once
    it is dead)."""

    def __init__(self, run: "Runner") -> None:
        self.run = run
        self.alive = True
        self.resume_at: dict[str, int] = {}
        self.driver: Optional[Driver] = None

    def log(self, text: str) -> None:
        if self.alive:
            self.run.lines.append(f"{self.run.now()} {text}")

    def persist(self, text: str) -> None:
        if self.run.fail_persist:
            raise ScenarioError("disk full")
        if self.alive:
            self.run.snapshot = text

    def execute(self, x: Any) -> Any:
        self.log(f"start {x.label}")
        steps = self.run.scripts.get(x.label, [])
        if steps and steps[0] == "throw-sync":
            raise ScenarioError("sync")
        return self.steps(x, steps)

    def decide(self, label: str, call: Call) -> Any:
        for b in self.run.batches:
            d = (b.get("decide") or {}).get(label)
            if d is not None:
                return self.decision(d)
        return "approve"

    def decision(self, d: Any) -> Any:
        if d == "raise":
            raise ScenarioError("decide raised")
        if isinstance(d, str):
            return d

        async def later() -> str:
            await asyncio.sleep(d["after"] / 1000)
            if d["then"] == "raise":
                raise ScenarioError("decide raised")
            return str(d["then"])

        return later()

    def on_outcome(self, o: Any, call: Any) -> None:
        self.log(f"outcome {o.label} {outcome_text(o)}")

    async def steps(self, x: Any, steps: list[str]) -> Any:
        aborted = False

        def abort() -> None:
            nonlocal aborted
            if not aborted:
                aborted = True
                self.log(f"abort {x.label}")

        async def sleep(ms: float) -> None:
            try:
                await asyncio.sleep(ms / 1000)
            except asyncio.CancelledError:
                abort()
                raise

        async def ignoring(wait: "asyncio.Future[Any]") -> None:
            while not wait.done():
                try:
                    await asyncio.shield(wait)
                except asyncio.CancelledError:
                    abort()

        # After a rate limit a label runs again from the step after it (per life).
        for at in range(self.resume_at.get(x.label, 0), len(steps)):
            word, _, arg = steps[at].partition(" ")
            if word == "sleep":
                n, _, how = arg.partition(" ")
                if how == "ignore-abort":
                    await ignoring(asyncio.ensure_future(asyncio.sleep(int(n) / 1000)))
                else:
                    await sleep(int(n))
            elif word == "hang":
                await ignoring(asyncio.get_running_loop().create_future())
            elif word == "ask":
                async with x.question():
                    await sleep(int(arg))
            elif word == "ask-twice":

                async def one() -> None:
                    async with x.question():
                        await asyncio.sleep(int(arg) / 1000)

                try:
                    await asyncio.gather(one(), one())
                except asyncio.CancelledError:
                    abort()
                    raise
            elif word == "ok":
                return literal(arg)
            elif word == "fail":
                raise ScenarioError(literal(arg))
            elif word == "rate-limited":
                self.resume_at[x.label] = at + 1
                raise RateLimited.from_header(literal(arg))
            else:
                raise ValueError(f"unknown script step {steps[at]!r}")
        return f"v:{x.label}"


class Runner:
    def __init__(self, file: str) -> None:
        self.file = file
        self.spec = tomllib.loads((DIR / file).read_text(encoding="utf-8"))
        check_keys(self.spec, KNOWN, file)
        self.batches: list[dict[str, Any]] = self.spec.get("batch", [])
        for i, b in enumerate(self.batches):
            check_keys(b, BATCH_KNOWN, f"{file}: batch {i}")
        self.scripts: dict[str, list[str]] = self.spec.get("script", {})
        self.policy = Policy.resolve([(file, self.spec.get("config", ""))])
        self.lines: list[str] = []
        self.snapshot: Optional[str] = None
        self.fail_persist = False
        self.numbers: dict[int, int] = {}  # batch number -> index
        self.tasks: dict[int, asyncio.Task[Any]] = {}  # index -> its `run` task
        self.life = Life(self)

    def now(self) -> int:
        return round(asyncio.get_running_loop().time() * 1000)

    def new_driver(self, life: Life) -> None:
        life.driver = Driver(Scheduler(self.policy), persist=life.persist)

    def watch(self, life: Life, index: int, task: "asyncio.Task[Any]", forget: bool, restored: bool = False) -> None:
        def done(t: "asyncio.Task[Any]") -> None:
            if not life.alive:
                return
            if t.cancelled():
                life.log(f"batch {index} {'rejected CancelledError' if restored else 'cancelled'}")
            elif t.exception() is not None:
                life.log(f"batch {index} rejected {type(t.exception()).__name__}")
            else:
                life.log(f"batch {index} resolved")
                if forget:
                    life.driver.forget(t.result())  # type: ignore[union-attr]

        task.add_done_callback(done)

    async def submit(self, index: int) -> None:
        b = self.batches[index]
        life = self.life
        calls = [
            Call(c["id"], c["tool"], (b.get("operations") or {}).get(c["id"]), arguments=c.get("arguments"))
            for c in b["calls"]
        ]
        kw: dict[str, Any] = {"on_outcome": life.on_outcome}
        if b.get("decide"):
            kw["decide"] = life.decide
        if b.get("execution_ms") is not None:
            kw["execution_timeout"] = b["execution_ms"] / 1000
        if b.get("abort_grace_ms") is not None:
            kw["abort_grace"] = b["abort_grace_ms"] / 1000
        driver = life.driver
        assert driver is not None
        before = {lb.batch for lb in driver.inspect()} if not driver.closed else set()
        task = asyncio.ensure_future(driver.run(calls, life.execute, **kw))
        self.tasks[index] = task
        self.watch(life, index, task, b.get("forget", True))
        await asyncio.sleep(0)  # the task submits its batch before its first wait
        if not driver.closed:
            for lb in driver.inspect():
                if lb.batch not in before:
                    self.numbers[lb.batch] = index

    def restart(self) -> None:
        old = self.life
        old.alive = False
        self.lines.append(f"{self.now()} restart")
        life = self.life = Life(self)
        if self.snapshot is None:
            self.new_driver(life)
            return
        saved = json.loads(self.snapshot)
        order = [int(r["batch"]) for r in saved["retired"]] + [int(b["batch"]) for b in saved["state"]["batches"]]
        resumed = Driver.resume(
            self.policy, self.snapshot, execute=life.execute, started=self.spec.get("started", "interrupt"),
            decide=life.decide, on_outcome=life.on_outcome, persist=life.persist,
        )
        life.driver = resumed.driver
        for number, task in zip(order, resumed.batches):
            index = self.numbers[number]
            self.watch(life, index, task, self.batches[index].get("forget", True), restored=True)

    async def pause(self, key: str, ms: str) -> None:
        life = self.life
        try:
            await life.driver.pause(key, int(ms) / 1000)  # type: ignore[union-attr]
        except Exception as e:
            life.log(f"pause {key} rejected {type(e).__name__}")

    async def lift_pause(self, key: str) -> None:
        life = self.life
        try:
            await life.driver.lift_pause(key)  # type: ignore[union-attr]
        except Exception as e:
            life.log(f"lift-pause {key} rejected {type(e).__name__}")

    async def act(self, word: str, args: list[str]) -> None:
        if word == "restart":
            self.restart()
        elif word == "dispose":
            self.life.driver.close()  # type: ignore[union-attr]
        elif word == "fail-persist":
            self.fail_persist = True
        elif word == "cancel":
            task = self.tasks.get(int(args[0]))
            if task is not None:
                task.cancel()
        elif word == "pause":
            asyncio.ensure_future(self.pause(*args))
        elif word == "lift-pause":
            asyncio.ensure_future(self.lift_pause(*args))
        else:
            raise ValueError(f"{self.file}: unknown action {word!r}")

    async def main(self) -> list[str]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, vloop.VirtualLoop)
        self.new_driver(self.life)
        host: list[tuple[int, int, int, Any]] = []
        for i, b in enumerate(self.batches):
            host.append((b.get("at", 0), 0, len(host), ("submit", i)))
        for i, b in enumerate(self.batches):
            if b.get("cancel_at") is not None:
                host.append((b["cancel_at"], 1, len(host), ("cancel", [str(i)])))
        for i, a in enumerate(self.spec.get("at", [])):
            check_keys(a, {"t", "do"}, f"{self.file}: at {i} (a key after [[at]] belongs to it: put expect before the tables)")
            word, *args = a["do"].split(" ")
            host.append((a["t"], 1, len(host), (word, args)))
        host.sort(key=lambda h: h[:3])
        for t, _, _, (word, args) in host:
            await loop.run_until(t / 1000)
            if word == "submit":
                await self.submit(args)
            else:
                await self.act(word, args)
            await loop.run_until(t / 1000)
        await loop.run_until(10_000.0)
        self.life.alive = False
        return self.lines


@pytest.mark.parametrize("file", FILES)
def test_scenario(file: str) -> None:
    if file in SKIP:
        pytest.skip(SKIP[file])
    runner = Runner(file)
    lines = vloop.run(runner.main())
    expected = normalize((runner.spec.get("expect") or "").split("\n"))
    actual = normalize(lines)
    assert actual == expected, f"{file}: {runner.spec.get('about', '')}\n{diff(expected, actual)}"
