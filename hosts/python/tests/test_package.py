"""The distribution: a wheel and an sdist built from the repository carry the component, the
licenses, the project URLs, the example and the shared-key guide (SHARED.md); the README names
no file the wheel lacks; the wheel installs into a fresh venv outside the repository and the
installed example runs there; a build without the component fails loudly."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parents[1]
# Where xtask wrote the component; the build hook (setup.py) looks in the same places.
COMPONENT = Path(
    os.environ.get("TURNSTILE_WASM") or Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target") / "turnstile.wasm"
)


def run(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if not COMPONENT.is_file():
        pytest.fail(f"{COMPONENT} is missing: run `cargo xtask build-guest` first")
    out = tmp_path_factory.mktemp("dist")
    r = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--disable-pip-version-check", "-w", out, PACKAGE)
    assert r.returncode == 0, r.stdout + r.stderr
    [whl] = out.glob("turnstile_scheduler-*.whl")
    return whl


def test_the_wheel_carries_the_component_store_texts_licenses_and_urls(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert "turnstile_scheduler/turnstile.wasm" in names
        assert z.read("turnstile_scheduler/turnstile.wasm") == COMPONENT.read_bytes()
        assert "turnstile_scheduler/py.typed" in names and "turnstile_scheduler/__main__.py" in names
        for text in ("sqlite.sql", "sqlite-statements.json", "redis.lua", "postgres.sql"):
            assert z.read(f"turnstile_scheduler/shared/store/{text}") == (ROOT / "shared" / "store" / text).read_bytes()
        assert not any(n.startswith("turnstile/") for n in names), "the import name must not clash with PyPI's turnstile"
        # What the README sends a wheel user to: the example and the shared-key guide, inside the
        # package, byte for byte the repository's.
        assert z.read("turnstile_scheduler/examples/agent_host.py") == (PACKAGE / "examples" / "agent_host.py").read_bytes()
        assert z.read("turnstile_scheduler/SHARED.md") == (ROOT / "SHARED.md").read_bytes()
        licenses = [n for n in names if n.endswith(("LICENSE-MIT", "LICENSE-APACHE"))]
        assert len(licenses) == 2, names
        [meta] = [n for n in names if n.endswith("METADATA")]
        metadata = z.read(meta).decode()
    assert "Name: turnstile-scheduler" in metadata
    assert "Requires-Dist: wasmtime<52,>=48.0.0" in metadata or "Requires-Dist: wasmtime>=48.0.0,<52" in metadata
    assert "Project-URL: Repository, https://github.com/" in metadata
    assert "Description-Content-Type: text/markdown" in metadata


def test_the_wheel_installs_and_runs_outside_the_repository(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    r = run(python, "-m", "pip", "install", "--disable-pip-version-check", "-q", wheel)
    assert r.returncode == 0, r.stdout + r.stderr
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(PACKAGE / "examples" / "agent_host.py", app / "agent_host.py")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TURNSTILE_WASM")}
    r = run(python, "agent_host.py", cwd=app, env=clean)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "toolu_03 fs_read_file ok,ok" in r.stdout
    r = run(python, "-m", "turnstile_scheduler.examples.agent_host", cwd=app, env=clean)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "toolu_03 fs_read_file ok,ok" in r.stdout
    r = run(python, "-m", "turnstile_scheduler", "--help", cwd=app, env=clean)
    assert r.returncode == 0 and "check" in r.stdout and "simulate" in r.stdout
    r = run(python, "-m", "turnstile_scheduler", "simulate", cwd=app, env=clean)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every entry ended or settled" in r.stdout
    r = run(python, "-c", "import turnstile_scheduler, sys; print(turnstile_scheduler.__file__)", cwd=app, env=clean)
    assert str(env_dir) in r.stdout


def test_the_readme_names_only_what_the_wheel_ships(wheel: Path) -> None:
    """Every path the README gives a user (above its last section, "Developing Turnstile", which
    names repository files) is in the wheel, and it sends the user nowhere in the repository."""
    readme = (PACKAGE / "README.md").read_text(encoding="utf-8")
    user, sep, _ = readme.partition("\n## Developing Turnstile\n")
    assert sep, 'the README ends with a "Developing Turnstile" section'
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    paths = re.findall(r"`([\w./-]+/[\w.-]+\.(?:py|md|toml|json|sql|lua))`", user)
    assert paths, "the README names the shipped example and guide"
    for path in paths:
        assert path in names, f"the README names {path}, which the wheel lacks"
    for hint in ("in the repository", "repository root", "hosts/", "tests/", "bench/", ".jp/"):
        assert hint not in user, f"the README sends users to {hint!r}"


def test_a_build_without_the_component_or_the_store_texts_fails_loudly(tmp_path: Path) -> None:
    copy = tmp_path / "python"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("turnstile.wasm", "store", "LICENSE-*", "build", "*.egg-info", "__pycache__", "dist"))
    r = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--disable-pip-version-check", "-w", tmp_path / "out", copy)
    assert r.returncode != 0
    assert "cannot build the package without turnstile.wasm, sqlite.sql, sqlite-statements.json, redis.lua" in r.stdout + r.stderr
    assert not list((tmp_path).glob("out/*.whl"))
