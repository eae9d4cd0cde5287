"""The package's CLI (`python -m turnstile_scheduler`). `simulate` runs tests/simulate/runs.toml,
which the Rust harness and the npm package's CLI run too: the same exit status and the same
lines, PROGRAM standing for the program's name. Then this CLI's own usage mistakes."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import turnstile_scheduler

SIM = Path(__file__).resolve().parents[3] / "tests" / "simulate"
PROG = "python -m turnstile_scheduler"


def cli(*args: str, cwd: Path = SIM / "files") -> subprocess.CompletedProcess[str]:
    # The package as this test imports it (installed or from src), in a child process.
    env = dict(os.environ, PYTHONPATH=str(Path(turnstile_scheduler.__file__).parents[1]))
    return subprocess.run(
        [sys.executable, "-m", "turnstile_scheduler", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_simulate_prints_what_every_turnstile_cli_prints() -> None:
    runs = tomllib.loads((SIM / "runs.toml").read_text(encoding="utf-8"))["run"]
    assert len(runs) >= 10
    for r in runs:
        got = cli(*r["args"])
        assert (got.returncode, got.stdout, got.stderr.replace(PROG, "PROGRAM")) == (
            r["status"],
            r["stdout"],
            r["stderr"],
        ), f"{r['about']}: {r['args']}"


def test_simulate_help_and_usage_mistakes() -> None:
    help = cli("simulate", "--help")
    assert help.returncode == 0
    assert help.stdout.startswith(f"usage: {PROG} simulate [FILE]")
    assert "[[batch]]" in help.stdout
    for args, says in [
        (("simulate", "--frobnicate"), "--frobnicate"),
        (("simulate", "--calls"), "--calls"),
        (("simulate", "a.toml", "b.toml"), "b.toml"),
        (("simulate", "--duration", "soon"), "--duration: expected MS or LABEL=MS"),
        (("simulate", "--duration", "=5"), "--duration: expected MS or LABEL=MS"),
        (("simulate", "no-such-file.toml"), "no-such-file.toml"),
        (("simulate", "--layer", "no-such-layer.toml", "--calls", "a x"), "no-such-layer.toml"),
    ]:
        r = cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stdout == "", args
        assert says in r.stderr, (args, r.stderr)


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    (tmp_path / "latin1.toml").write_bytes(b'# caf\xe9\n[[batch]]\ncalls = ["a x"]\n')
    r = cli("simulate", "latin1.toml", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
