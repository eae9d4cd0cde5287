"""The scenario corpus (tests/scenarios/*.toml, format in tests/scenarios/README.md): every file
is one test, run by the Driver on a virtual-time loop (`vloop`) with an in-memory `persist`,
and must print exactly its `expect` lines (the JS runner, hosts/js/test/scenarios.test.mjs,
prints the same). Nothing sleeps on real time. `restart` drops the driver without closing it
(what its executions still do is ignored) and resumes the last persisted snapshot with
`Driver.resume`. On a mismatch the test prints both lists, line by line.

Shared keys run over one `MemoryStore` opened on the same virtual loop (its own time base 24 h
ahead, which must not matter). `processes = ["a", "b"]` runs a driver (and a `SharedKeys`) per
process over that one store; each life sees the store through a `MortalStore`: once the process
crashed (`restart`, `kill`) its calls never reach the store and their answers never come back,
so the store keeps its tickets until their leases end.

When the run is over nothing prints any more, and the runner ends its hangs (a `hang` ignores
every abort while the run lasts; a process's exit would end it), closes every driver (a crashed
life's too), the live processes' shared keys and the store. The scenario fails if a task is still
running then (a driver leaves no task behind after `close`), or if its loop reports a task
destroyed pending or an error nobody handled (`vloop.run`, strict)."""

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
from turnstile_scheduler.shared import SharedKeys
from turnstile_scheduler.shared.memory import MemoryStore

DIR = Path(__file__).resolve().parents[3] / "tests" / "scenarios"
FILES = sorted(p.name for p in DIR.glob("*.toml"))

KNOWN = {"about", "config", "started", "processes", "lease_ms", "persist_ms", "batch", "script", "at", "expect"}
BATCH_KNOWN = {"at", "process", "calls", "operations", "execution_ms", "abort_grace_ms", "decide", "cancel_at", "forget"}
AT_KNOWN = {"t", "do", "process"}
# The store's time base: 24 h ahead of the virtual clock (its offset must not matter).
STORE_START_MS = 86_400_000
# A run ends by this virtual time (10,000 s); one still due past it fails (both runners).
CAP_MS = 10_000_000
# What the end of a run waits (virtual seconds) for the ends the closes cause.
SETTLE_S = 3600.0
# Scenarios this runner cannot run, with why (none today).
SKIP: dict[str, str] = {}


class ScenarioError(Exception):
    """The runner's own error: `fail 'message'`, `throw-sync`, a `decide` that raises."""


def _dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


# Python's names that a line writes as JS's (hosts/DRIVERS.md pairs them).
JS_NAMES = {"ValueError": "RangeError"}


def error_name(e: Any) -> str:
    """An error's name as a line writes it: JS's for the pairs of hosts/DRIVERS.md."""
    name = e.name if isinstance(e, RestoredError) else type(e).__name__
    return JS_NAMES.get(name, name)


def error_text(e: Any) -> str:
    """An error as a line writes it: a ScenarioError's message quoted, else its name."""
    name = error_name(e)
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
    """Splits lines into parts at `restart` (`restart P` too) and sorts each part by time, then as
    text."""
    parts: list[list[str]] = [[]]
    for line in lines:
        text = line.strip()
        if not text:
            continue
        if re.fullmatch(r"\d+ restart( \S+)?", text):
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


class MortalStore:
    """A process's view of the shared store: once the process crashed (`kill()`), its calls never
    reach the store, answers to calls it made before never come back, and its watches hear
    nothing (SIGKILL). The calls left waiting are in `never` (the runner cancels them at the
    end)."""

    def __init__(self, store: MemoryStore) -> None:
        self.kind = store.kind
        self._store = store
        self._dead = False
        self.never: list[asyncio.Future[Any]] = []

    def kill(self) -> None:
        self._dead = True

    async def _never(self) -> Any:
        f = asyncio.get_running_loop().create_future()
        self.never.append(f)
        return await f

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if name == "watch":
            return lambda key, tickets, wake: method(
                key, lambda: [] if self._dead else tickets(), lambda w: self._dead or wake(w)
            )

        async def call(*args: Any) -> Any:
            if self._dead:
                return await self._never()
            result = await method(*args)
            if self._dead:
                return await self._never()
            return result

        return call


class Proc:
    """One process: its current life, how many it had, its last persisted snapshot, whether its
    persist fails, and the batch numbers of its driver (batch number -> index)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.life: Optional["Life"] = None
        self.lives = 0
        self.snapshot: Optional[str] = None
        self.fail_persist = False
        self.numbers: dict[int, int] = {}


class Life:
    """One life of a process: its driver, its view of the store and its shared keys, and
    everything its executions report (ignored once it is dead: `alive` is whether its lines
    count, `crashed` whether it died by `restart` or `kill`)."""

    def __init__(self, run: "Runner", proc: Proc) -> None:
        self.run = run
        self.proc = proc
        self.alive = True
        self.crashed = False
        self.resume_at: dict[str, int] = {}
        self.driver: Optional[Driver] = None
        proc.lives += 1
        proc.life = self
        run.lives.append(self)
        self.view: Optional[MortalStore] = None
        self.keys: Optional[SharedKeys] = None
        if run.store is not None:
            self.view = MortalStore(run.store)
            run.views.append(self.view)
            lease_ms = run.spec.get("lease_ms", 10_000)
            owner = f"{proc.name or 'p'}{proc.lives}"  # a1, a2 after a restart; p1 unnamed
            self.keys = SharedKeys(self.view, lease_ms=lease_ms, owner=owner)  # type: ignore[arg-type]

    def log(self, text: str) -> None:
        if self.alive:
            self.run.lines.append(f"{self.run.now()} {text}")

    def crash(self) -> None:
        self.alive = False
        self.crashed = True
        if self.view is not None:
            self.view.kill()

    def persist(self, text: str) -> Any:
        if self.proc.fail_persist:
            raise ScenarioError("disk full")
        ms = self.run.spec.get("persist_ms")
        if ms is None:
            if self.alive:
                self.proc.snapshot = text
            return None

        async def slow() -> None:
            # A slow disk: the snapshot is saved when the write ends (a crash before loses it).
            await asyncio.sleep(ms / 1000)
            if self.alive:
                self.proc.snapshot = text

        return slow()

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
        if not isinstance(d, dict):  # a string, or a value no decision is (a number): as it is
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
                await ignoring(self.run.hang())
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
            elif word == "ok-nothing":
                return None
            elif word == "ok-not-json":
                return {"k", 1}
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
        self.shared = any(c.shared for t in self.policy.tools() for c in t.concurrency)
        # The processes by name; one unnamed process unless `processes` names them (the first is
        # the default of a batch's or an action's `process`).
        names = self.spec.get("processes", [""])
        if not isinstance(names, list) or not names or len(set(names)) != len(names):
            raise ValueError(f"{file}: processes must be distinct names")
        self.procs = {name: Proc(name) for name in names}
        self.store: Optional[MemoryStore] = None
        self.lines: list[str] = []
        self.tasks: dict[int, asyncio.Task[Any]] = {}  # batch index -> its `run` task
        self.hangs: list[asyncio.Future[Any]] = []  # what each `hang` waits for
        self.views: list[MortalStore] = []  # every life's view of the store
        self.lives: list[Life] = []  # every life of every process

    def now(self) -> int:
        return round(asyncio.get_running_loop().time() * 1000)

    def proc_of(self, what: str, name: Optional[str]) -> Proc:
        if name is None:
            return next(iter(self.procs.values()))
        if name not in self.procs:
            raise ValueError(f"{self.file}: {what}: process {name!r} is not in processes")
        return self.procs[name]

    def hang(self) -> "asyncio.Future[Any]":
        """What a `hang` waits for: nothing, until the run is over (`end_hangs`)."""
        f = asyncio.get_running_loop().create_future()
        self.hangs.append(f)
        return f

    def end_hangs(self) -> None:
        """The run is over: every `hang` ends (as the process's exit would end it), so that no
        execution, and no task of a driver awaiting it, is left pending when the loop closes."""
        for f in self.hangs:
            if not f.done():
                f.set_exception(ScenarioError("the run is over"))

    def new_driver(self, life: Life) -> None:
        life.driver = Driver(Scheduler(self.policy), persist=life.persist, shared_keys=life.keys)

    def watch(self, life: Life, index: int, task: "asyncio.Task[Any]", forget: bool, restored: bool = False) -> None:
        def done(t: "asyncio.Task[Any]") -> None:
            error = None if t.cancelled() else t.exception()  # retrieved even when not printed
            if not life.alive:
                return
            if t.cancelled():
                life.log(f"batch {index} {'rejected CancelledError' if restored else 'cancelled'}")
            elif error is not None:
                life.log(f"batch {index} rejected {error_name(error)}")
            else:
                life.log(f"batch {index} resolved")
                if forget:
                    life.driver.forget(t.result())  # type: ignore[union-attr]

        task.add_done_callback(done)

    async def submit(self, index: int) -> None:
        b = self.batches[index]
        proc = self.proc_of(f"batch {index}", b.get("process"))
        life = proc.life
        assert life is not None
        if not life.alive:
            return  # a killed process submits nothing
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
                    proc.numbers[lb.batch] = index

    def restart(self, proc: Proc) -> None:
        """`restart`: the process crashes and comes back from its last persisted snapshot."""
        proc.life.crash()  # type: ignore[union-attr]
        self.lines.append(f"{self.now()} restart{' ' + proc.name if proc.name else ''}")
        life = Life(self, proc)
        if proc.snapshot is None:
            self.new_driver(life)
            return
        saved = json.loads(proc.snapshot)
        order = [int(r["batch"]) for r in saved["retired"]] + [int(b["batch"]) for b in saved["state"]["batches"]]
        resumed = Driver.resume(
            self.policy, proc.snapshot, execute=life.execute, started=self.spec.get("started", "interrupt"),
            decide=life.decide, on_outcome=life.on_outcome, persist=life.persist, shared_keys=life.keys,
        )
        life.driver = resumed.driver
        for number, task in zip(order, resumed.batches):
            index = proc.numbers[number]
            self.watch(life, index, task, self.batches[index].get("forget", True), restored=True)

    def kill(self, proc: Proc) -> None:
        """`kill`: the process crashes for good (its tickets stay at the store until their leases
        end)."""
        proc.life.crash()  # type: ignore[union-attr]
        self.lines.append(f"{self.now()} kill {proc.name}")

    def settle_of(self, life: Life, what: str, call: Any) -> None:
        """A host call that returns an awaitable: `threw` when it raises at the call, `rejected`
        when awaiting it raises (both with the error's name)."""
        try:
            awaitable = call()
        except Exception as e:
            life.log(f"{what} threw {error_name(e)}")
            return

        async def wait() -> None:
            try:
                await awaitable
            except Exception as e:
                life.log(f"{what} rejected {error_name(e)}")

        asyncio.ensure_future(wait())

    async def act(self, proc: Proc, word: str, args: list[str]) -> None:
        life = proc.life
        assert life is not None
        if not life.alive:
            return  # a killed process does nothing more
        if word == "restart":
            self.restart(proc)
        elif word == "kill":
            self.kill(proc)
        elif word == "dispose":
            life.driver.close()  # type: ignore[union-attr]
        elif word == "fail-persist":
            proc.fail_persist = True
        elif word == "cancel":
            self.cancel(int(args[0]))
        elif word == "pause":
            key, ms = args
            self.settle_of(life, f"pause {key}", lambda: life.driver.pause(key, float(ms) / 1000))  # type: ignore[union-attr]
        elif word == "lift-pause":
            (key,) = args
            self.settle_of(life, f"lift-pause {key}", lambda: life.driver.lift_pause(key))  # type: ignore[union-attr]
        elif word == "step-ahead":
            # The host steps the driver's scheduler itself (what the contract forbids: one
            # stepper), with a `now` MS ahead of the clock: the driver's next `now` is below it.
            life.driver.scheduler.step(now=self.now() + int(args[0]))  # type: ignore[union-attr]
        else:
            raise ValueError(f"{self.file}: unknown action {word!r}")

    def cancel(self, index: int) -> None:
        task = self.tasks.get(index)
        if task is not None:
            task.cancel()

    def plan(self) -> list[tuple[int, int, int, Any]]:
        """The host's doings by time, each `(t, rank, seq, doing)`: at each time the batches
        (file order), then the cancellations and actions (file order)."""
        host: list[tuple[int, int, int, Any]] = []
        for i, b in enumerate(self.batches):
            host.append((b.get("at", 0), 0, len(host), ("submit", i)))
        for i, b in enumerate(self.batches):
            if b.get("cancel_at") is not None:
                host.append((b["cancel_at"], 1, len(host), ("cancel", i)))
        for i, a in enumerate(self.spec.get("at", [])):
            check_keys(a, AT_KNOWN, f"{self.file}: at {i} (a key after [[at]] belongs to it: put expect before the tables)")
            word, *args = a["do"].split(" ")
            host.append((a["t"], 1, len(host), ("act", self.proc_of(f"at {i}", a.get("process")), word, args)))
        host.sort(key=lambda h: h[:3])
        return host

    async def do(self, doing: tuple[Any, ...]) -> None:
        if doing[0] == "submit":
            await self.submit(doing[1])
        elif doing[0] == "cancel":
            self.cancel(doing[1])
        else:
            await self.act(*doing[1:])

    async def main(self) -> list[str]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, vloop.VirtualLoop)
        if self.shared:
            self.store = await MemoryStore.open(start_ms=STORE_START_MS)
        for proc in self.procs.values():
            self.new_driver(Life(self, proc))
        for t, _, _, doing in self.plan():
            await loop.run_until(t / 1000)
            await self.do(doing)
            await loop.run_until(t / 1000)
        await loop.run_until(CAP_MS / 1000)
        late = loop._next_timer()
        if late is not None:
            raise AssertionError(
                f"{self.file}: still running at {CAP_MS} ms (a timer is due at {round(late * 1000)} ms): a scenario must end by then"
            )
        await self.end()
        return self.lines

    async def end(self) -> None:
        """The run is over: nothing prints any more (`alive` off). Every hang ends, as the
        process's exit would end it; every driver closes, a crashed life's too; each live
        process's shared keys close, then the store; the store calls of crashed processes,
        never answered, are cancelled. Then nothing may be left running: a driver leaves no
        task behind after `close`."""
        loop = asyncio.get_running_loop()
        assert isinstance(loop, vloop.VirtualLoop)
        for life in self.lives:
            life.alive = False
        self.end_hangs()
        for life in self.lives:
            if life.driver is not None:
                life.driver.close()
        await loop.run_until(loop.time())
        for proc in self.procs.values():
            if proc.life is not None and not proc.life.crashed and proc.life.keys is not None:
                await proc.life.keys.close()
        if self.store is not None:
            await self.store.close()
        for view in self.views:
            for f in view.never:
                f.cancel()
        await loop.run_until(loop.time() + SETTLE_S)
        me = asyncio.current_task()
        left = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        if left:
            raise vloop.LeftBehindError(
                f"{self.file}: tasks left after every driver closed and every hang ended:\n" + "\n".join(map(repr, left))
            )


@pytest.mark.parametrize("file", FILES)
def test_scenario(file: str) -> None:
    if file in SKIP:
        pytest.skip(SKIP[file])
    runner = Runner(file)
    lines = vloop.run(runner.main())
    expected = normalize((runner.spec.get("expect") or "").split("\n"))
    actual = normalize(lines)
    assert actual == expected, f"{file}: {runner.spec.get('about', '')}\n{diff(expected, actual)}"


def test_runner_a_scenario_still_running_at_the_cap_fails() -> None:
    """The runners' own rule (README, "Time"): a run still due past the cap fails, with the same
    sentence as the JS runner's, instead of stopping quietly or running on."""
    runner = Runner("runner/runs-past-the-cap.toml")
    with pytest.raises(AssertionError) as raised:
        vloop.run(runner.main(), strict=False)
    assert str(raised.value) == (
        "runner/runs-past-the-cap.toml: still running at 10000000 ms (a timer is due at 10000001 ms): a scenario must end by then"
    )
