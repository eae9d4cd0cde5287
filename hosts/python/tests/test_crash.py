"""Restart under SIGKILL (issue 19, hosts/DRIVERS.md "Persistence"): a child process
(crash_child.py) runs a plan of batches with a file-backed `persist` and is killed at seeded
random moments, then started again from what it persisted, until the plan is done. Its log
must show: no call that had ended (its outcome reported) ever started again or was reported
otherwise afterwards (say, interrupted), and every planned call got a final outcome (its batch
returned) equal to the first one reported. Each restart resumes with `started = "run-again"`
or `"interrupt"`, alternately. Real processes and real time: this is the one test that must
run them (it kills a process). TURNSTILE_CRASH_KILLS and TURNSTILE_CRASH_SEED set the kills
and the seed (printed on failure)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import turnstile_scheduler

CHILD = Path(__file__).with_name("crash_child.py")
KILLS = int(os.environ.get("TURNSTILE_CRASH_KILLS", "50"))
SEED = int(os.environ.get("TURNSTILE_CRASH_SEED", str(int(time.time()) % 100_000)))
# Long enough that 50 kills land before the plan is done on an idle machine too (100 ran out
# after 40-47 kills there; with 400 a life spent its first 60 ms submitting them, so no kill
# cut a call); the last life runs the rest uninterrupted.
BATCHES, CALLS = 200, 4
WINDOW = 0.060  # a kill comes up to this long after the child said ready (seconds)


def precompile(directory: Path) -> Path:
    """The component compiled once for every child (each would take a second to compile it)."""
    from wasmtime.component import Component

    from turnstile_scheduler import _component

    engine, _ = _component._compiled()
    path = directory / "turnstile.cwasm"
    path.write_bytes(Component.from_file(engine, str(_component.component_path())).serialize())
    return path


def run_child(
    directory: Path, started: str, kill_after: "float | None", since: bytes = b"ready"
) -> int:
    """Runs the child once; kills it `kill_after` seconds after it said `since` (`ready`: its
    plan is submitted; `running`: its first call started, so that a loaded machine, which
    starts calls late, still sees kills while calls run), or lets it finish (None). Returns its
    exit code (negative: the signal)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(turnstile_scheduler.__file__).parents[1]),
        "TURNSTILE_CRASH_PRECOMPILED": str(directory.parent / "turnstile.cwasm"),
    }
    args = [sys.executable, str(CHILD), str(directory), str(BATCHES), str(CALLS), started]
    with subprocess.Popen(args, stdout=subprocess.PIPE, env=env) as child:
        assert child.stdout is not None
        if kill_after is not None:
            for line in child.stdout:
                if since in line:
                    time.sleep(kill_after)
                    child.send_signal(signal.SIGKILL)
                    break
        child.stdout.read()
        return child.wait(timeout=60)


def check(log: str, labels: list[str]) -> list[str]:
    """Every violation of the contract the log shows."""
    problems = []
    first: dict[str, str] = {}
    finals: dict[str, str] = {}
    for line in log.split("\n"):
        if not line or line == "complete":
            continue
        kind, label, *rest = line.split(" ")
        what = " ".join(rest)
        if kind == "start":
            if label in first:
                problems.append(f"{label} ran again after it ended ({first[label]}): {line}")
        elif kind == "outcome":
            # A resumed driver reports saved outcomes again: the same, never another.
            if label not in first:
                first[label] = what
            elif first[label] != what:
                problems.append(f"{label} reported {first[label]} then {what}")
        elif kind == "final":
            if label not in finals:
                finals[label] = what
            elif finals[label] != what:
                problems.append(f"{label} returned {finals[label]} then {what}")
    for label in labels:
        final = finals.get(label)
        if final is None:
            problems.append(f"{label} never got its outcome (lost)")
        elif label in first and first[label] != final:
            problems.append(f"{label} was reported {first[label]} and returned {final}")
    return problems


def test_sigkill_at_random_moments_no_ended_call_runs_again_or_comes_back_interrupted_and_none_is_lost(tmp_path: Path) -> None:
    precompile(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    rng = random.Random(SEED)
    kills = 0
    finished = False
    modes = ("run-again", "interrupt")
    for round in range(KILLS * 3):
        if kills >= KILLS:
            break
        since = b"running" if round % 4 >= 2 else b"ready"
        code = run_child(work, modes[round % 2], rng.random() * WINDOW, since)
        if code == -signal.SIGKILL:
            kills += 1
        elif code == 0:
            finished = True
            break
        else:
            raise AssertionError(f"the child exited with {code} (seed {SEED})")
    if not finished:  # the rest of the plan, uninterrupted
        assert run_child(work, "interrupt", None) == 0
    labels = [f"b{k}.c{j}" for k in range(BATCHES) for j in range(CALLS)]
    log_path = work / "log"
    log = log_path.read_text() if log_path.exists() else ""
    assert kills == KILLS, f"the plan was done after {kills} kills: make it longer (seed {SEED})"
    # The kills landed while calls ran: some started call was cut off (ran again, or came back
    # interrupted).
    cut = [label for label in labels if log.count(f"start {label} ") > 1 or f"final {label} settled interrupted" in log]
    assert cut, "no kill landed while a call ran"
    problems = check(log, labels)
    assert problems == [], f"seed {SEED}, {kills} kills:\n" + "\n".join(problems[:20])
