"""The package's fast path (`_fastcall`) leans on wasmtime-py internals (`wasmtime._ffi`, the
component type classes, `_enter`); this runs it on every wasmtime-py version pyproject.toml
allows, so that a version that moves them fails here, loudly, not in a host.

Each version is installed once into a venv of its own under `$CARGO_TARGET_DIR/wasmtime-matrix`
(else `target/wasmtime-matrix` at the repository root) and reused after; a probe then runs
there against this checkout's source: the fast path must be on (a `FastPathWarning` is an
error), every kind of crossing must lift what wasmtime-py's generic path lifts, and the calls
that lifted options, results and variants must keep no memory (glibc's mallinfo2). Skipped,
with the reason, when PyPI cannot be reached and a version is not installed yet.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
ROOT = PACKAGE.parent.parent
VERSIONS = ("48.0.0", "49.0.0", "50.0.1", "51.0.0")
"""Every release pyproject.toml's range allows (the newest of each major); keep in step."""


def matrix_dir() -> Path:
    target = os.environ.get("CARGO_TARGET_DIR")
    return (Path(target) if target else ROOT / "target") / "wasmtime-matrix"


def test_the_matrix_covers_pyproject_range() -> None:
    """The oldest version here is the range's floor and the newest lies under its ceiling."""
    text = (PACKAGE / "pyproject.toml").read_text()
    m = re.search(r'"wasmtime>=([0-9.]+),<([0-9]+)"', text)
    assert m, "pyproject.toml's wasmtime requirement is not `wasmtime>=X,<Y`"
    floor, ceiling = m.group(1), int(m.group(2))
    assert VERSIONS[0] == floor
    assert int(VERSIONS[-1].split(".")[0]) == ceiling - 1


def _install(version: str) -> Path:
    """The venv with wasmtime `version`, made now or reused; skips when PyPI is unreachable."""
    home = matrix_dir() / f"wasmtime-{version}"
    python = home / "bin" / "python"
    done = home / ".installed"
    if done.is_file():
        return python
    venv.EnvBuilder(with_pip=True, clear=True).create(home)
    r = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"wasmtime=={version}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode != 0:
        out = r.stdout + r.stderr
        if re.search(r"(?i)connection|resolve|network|timed? ?out|unreachable|proxy|No matching distribution", out):
            pytest.skip(f"cannot install wasmtime=={version} (PyPI unreachable?): {out.strip().splitlines()[-1]}")
        pytest.fail(f"pip install wasmtime=={version} failed:\n{out}")
    done.write_text(version)
    return python


PROBE = r'''
import ctypes, gc, sys, warnings
from importlib import metadata
from turnstile_scheduler import _fastcall
warnings.simplefilter("error", _fastcall.FastPathWarning)
from turnstile_scheduler import Admission, AdmissionClass, Call, Instance, Policy, Reason, ReasonKind, Scheduler, Started, explain

print("wasmtime", metadata.version("wasmtime"))
assert _fastcall.unavailable() is None, _fastcall.unavailable()
CONFIG = """
[conversation.tools.rfd]
concurrency = 1
[conversation.tools.fan]
concurrency = 2
fan_out = { on_error = "stop" }
"""
policy = Policy.resolve([("probe", CONFIG)], instance=Instance())
s = Scheduler(policy, instance=policy.instance)
sub = s.submit([Call("a", "rfd"), Call("b", "rfd"), Call("c", "fan", 3)])
out = s.step(approve=list(sub.entries), now=1)
assert out.start == [sub.first, sub.first + 2, sub.first + 3], out
out = s.step(ok=[sub.first], failed=[sub.first + 2], approve=[10**9], now=2)
assert [e.index for e in out.errors] == [0], out

# Every kind of crossing, lifted by the fast path and by wasmtime-py's generic `Func.__call__`.
inst, res = s.instance, s._resource
def both(interface, name, *args):
    fast = inst.func(interface, name)(*args)
    f = inst._export(interface, name)
    generic = f(inst.store, *args)
    assert fast == generic, (name, fast, generic)
    return fast
m = "[method]scheduler."
both("scheduler", m + "label", res, sub.first + 1)
both("scheduler", m + "label", res, 10**9)
both("scheduler", m + "inspect", res, sub.batch, 0)
both("scheduler", m + "unfinished", res, 0)
both("scheduler", m + "next-releases", res, 3)
both("scheduler", "explain", "a#1", _fastcall.Variant("stopped", 1))
both("scheduler", "retry-after", "12", 0)
both("scheduler", "retry-after", "soon", 0)
both("config", "[method]policy.tool", policy._resource, "fan")
both("config", "[method]policy.tools", policy._resource)
both("config", "[static]policy.resolve", [type("L", (), {"name": "bad", "text": "[conversation"})()])
restored, unrestored = Scheduler.resume(policy, s.unfinished(), started=Started.INTERRUPT)
assert unrestored == []
assert explain("a", Reason(ReasonKind.CANCELLED))

# No memory kept per call where wasmtime-py leaks (options, results, variants lifted).
libc = ctypes.CDLL(None)
class M(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = M
def used():
    gc.collect()
    m = libc.mallinfo2()
    return m.uordblks + m.hblkhd
a = Admission(4)
def begin_end():
    t = a.begin("r", AdmissionClass.CALL)
    a.next_admissions()
    a.end(t)
for name, call in [
    ("label", lambda: s.label(sub.first + 1)),
    ("inspect", lambda: s.inspect(sub.batch)),
    ("Policy.tool", lambda: policy.tool("fan")),
    ("Admission.begin/end", begin_end),
]:
    for _ in range(300):
        call()
    kept = []
    for _ in range(2):
        before = used()
        for _ in range(3000):
            call()
        kept.append((used() - before) / 3000)
    assert min(kept) < 2, f"{name}: {min(kept):.1f} bytes kept per call"
    print(name, "ok", f"{min(kept):.2f} B/call")
print("probe ok")
'''


def run_probe(python: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(PACKAGE / "src"), PYTHONNOUSERSITE="1")
    return subprocess.run([python, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300, cwd=str(PACKAGE))


@pytest.mark.parametrize("version", VERSIONS)
def test_fast_path_on_wasmtime(version: str) -> None:
    python = _install(version)
    r = run_probe(str(python))
    assert r.returncode == 0, f"the fast path fails on wasmtime {version}:\n{r.stdout}\n{r.stderr}"
    assert f"wasmtime {version}" in r.stdout and "probe ok" in r.stdout


def test_a_moved_internal_falls_back_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the fast path cannot bind (here: made to believe wasmtime-py moved), the call goes
    through wasmtime-py's generic path and says so, never silently."""
    from turnstile_scheduler import Instance, _fastcall

    monkeypatch.setattr(_fastcall, "_MISSING", "wasmtime-py's internals moved (a test)")
    with pytest.warns(_fastcall.FastPathWarning, match="generic path.*a test.*leaking"):
        label = Instance().func("scheduler", "explain")("a", _fastcall.Variant("cancelled"))
    assert label.startswith("not run")


def test_the_probe_fails_on_a_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's leak check sees wasmtime-py's own lifting (the fast path's fix undone)."""
    leaky = PROBE.replace("from turnstile_scheduler import _fastcall\n", "from turnstile_scheduler import _fastcall\n_fastcall._val_free = _fastcall.ffi.wasmtime_component_val_delete\n", 1)
    env = dict(os.environ, PYTHONPATH=str(PACKAGE / "src"))
    r = subprocess.run([sys.executable, "-c", leaky], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0 and "bytes kept per call" in r.stderr, r.stdout + r.stderr

