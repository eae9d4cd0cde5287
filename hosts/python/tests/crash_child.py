"""The process the crash test kills with SIGKILL (test_crash.py). It runs a fixed plan of
batches with a file-backed `persist` (write a temporary file, then rename it over the
snapshot) and logs every start, every outcome as `on_outcome` reports it, and every call's
final outcome as its batch returns, appending to `log` (each line one `write` of an
append-only file, so a line is whole whenever the process dies). On start it resumes the
snapshot when there is one and submits the planned batches that are neither in it nor done.

argv: DIR BATCHES CALLS STARTED   (STARTED: run-again | interrupt)
Real processes and real time (it is killed for real): the one place the tests sleep."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from turnstile_scheduler import Call, Driver, Policy, Scheduler

CONFIG = """
[conversation.tools.work]
concurrency = 3
[conversation.tools.other]
concurrency = { key = "other", limit = 2 }
"""


def main() -> None:
    directory, batches, calls, started = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    precompiled = os.environ.get("TURNSTILE_CRASH_PRECOMPILED")
    if precompiled:
        _load_precompiled(precompiled)
    asyncio.run(Child(Path(directory), batches, calls, started).run())


def _load_precompiled(path: str) -> None:
    """Starts faster (many processes are killed): the component as the test compiled it once
    (`Component.serialize`), instead of compiling it again in every process."""
    from wasmtime import Engine
    from wasmtime.component import Component

    from turnstile_scheduler import _component

    engine = Engine()
    _component._engine, _component._component = engine, Component.deserialize_file(engine, path)


def text(o: Any) -> str:
    status = o.status.value
    if status == "ok":
        return f"ok {json.dumps(o.value)}"
    if status == "settled":
        return f"settled {o.reason.kind.value}"
    return f"{status} {json.dumps(str(getattr(o.error, 'message', o.error)) if o.error is not None else o.value)}"


class Child:
    def __init__(self, directory: Path, batches: int, calls: int, started: str) -> None:
        self.snapshot = directory / "snapshot.json"
        self.log_fd = os.open(directory / "log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.done_path = directory / "done"
        self.batches, self.calls, self.started = batches, calls, started
        self.policy = Policy.resolve([("crash", CONFIG)])
        self.counter = 0
        self.driver: Any = None

    def log(self, line: str) -> None:
        os.write(self.log_fd, f"{line}\n".encode())

    async def execute(self, x: Any) -> str:
        attempt = f"{os.getpid()}.{self.counter}"
        self.counter += 1
        self.log(f"start {x.label} {attempt}")
        # The parent may time a kill from the first start (a loaded machine starts late).
        if self.counter == 1:
            sys.stdout.write("running\n")
            sys.stdout.flush()
        await asyncio.sleep((1 + (len(x.label) + self.counter) % 4) / 1000)
        if x.label.endswith("c3"):
            raise RuntimeError(f"boom {attempt}")
        return f"v:{x.label}:{attempt}"

    def on_outcome(self, o: Any, call: Call) -> None:
        self.log(f"outcome {o.label} {text(o)}")

    def persist(self, snapshot: str) -> None:
        tmp = self.snapshot.with_name(f"snapshot.{os.getpid()}.tmp")
        tmp.write_text(snapshot)
        os.replace(tmp, self.snapshot)

    async def settle(self, batch: "asyncio.Future[Any]", name: str) -> None:
        outcomes = await batch
        for call in outcomes:
            for e in call.entries:
                self.log(f"final {e.label} {text(e)}")
        with open(self.done_path, "a") as f:
            f.write(f"{name}\n")
        self.driver.forget(outcomes)

    async def run(self) -> None:
        done = set(self.done_path.read_text().split()) if self.done_path.exists() else set()
        waits = []
        known = set()
        plan_of = lambda id: id[: id.index(".")]  # noqa: E731 - a planned batch's calls are bK.cJ
        if self.snapshot.exists():
            snapshot = self.snapshot.read_text()
            saved = json.loads(snapshot)
            names = [plan_of(r["outcomes"][0]["id"]) for r in saved["retired"]] + [plan_of(b["calls"][0]["id"]) for b in saved["state"]["batches"]]
            resumed = Driver.resume(
                self.policy, snapshot, execute=self.execute, started=self.started, on_outcome=self.on_outcome, persist=self.persist
            )
            self.driver = resumed.driver
            for name, task in zip(names, resumed.batches):
                known.add(name)
                waits.append(self.settle(task, name))
        else:
            self.driver = Driver(Scheduler(self.policy), persist=self.persist)
        for k in range(self.batches):
            name = f"b{k}"
            if name in done or name in known:
                continue
            calls = [Call(f"{name}.c{j}", "other" if j % 2 else "work") for j in range(self.calls)]
            task = asyncio.ensure_future(self.driver.run(calls, self.execute, on_outcome=self.on_outcome))
            waits.append(self.settle(task, name))
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await asyncio.gather(*waits)
        self.log("complete")
        self.driver.close()


if __name__ == "__main__":
    main()
