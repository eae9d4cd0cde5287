"""The build hook: a wheel or sdist always carries the component, the store texts and the
licenses.

In a checkout of the repository, the component is copied from `$TURNSTILE_WASM`, else
`$CARGO_TARGET_DIR/turnstile.wasm`, else `../../target/turnstile.wasm`, into the package (built first with `cargo xtask build-guest` when it is missing), the
store texts from the repository's `shared/store/` (the SQLite schema and statements, the Redis
script, the Postgres schema: one source, which the JS package ships too) into `turnstile_scheduler/shared/store/`,
the repository's SHARED.md (the shared-key guide, which the JS package ships too) and this
directory's `examples/agent_host.py` into the package (`turnstile_scheduler/SHARED.md`,
`turnstile_scheduler/examples/agent_host.py`: a wheel user has them next to the code), and the
repository's LICENSE-MIT and LICENSE-APACHE next to this file. Outside one (building
from an sdist), they must already be there. Either way a build without the component or the
texts fails loudly instead of producing a package that fails at the first `Policy.resolve` or
store `open`."""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SHIPPED = HERE / "src" / "turnstile_scheduler" / "turnstile.wasm"
STORE_TEXTS = ("sqlite.sql", "sqlite-statements.json", "redis.lua", "postgres.sql")
SHIPPED_TEXTS = HERE / "src" / "turnstile_scheduler" / "shared" / "store"
SHIPPED_GUIDE = HERE / "src" / "turnstile_scheduler" / "SHARED.md"
SHIPPED_EXAMPLE = HERE / "src" / "turnstile_scheduler" / "examples" / "agent_host.py"


def stage() -> None:
    in_repo = (ROOT / "Cargo.toml").is_file() and (ROOT / "wit" / "turnstile.wit").is_file()
    if in_repo:
        target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
        built = Path(os.environ.get("TURNSTILE_WASM") or target / "turnstile.wasm")
        if not built.is_file():
            print(f"turnstile-scheduler: {built} is missing; running `cargo xtask build-guest`")
            try:
                subprocess.run(["cargo", "xtask", "build-guest"], cwd=ROOT, check=True)
            except (OSError, subprocess.CalledProcessError) as e:
                raise SystemExit(f"turnstile-scheduler: cannot build the component ({e}); run `cargo xtask build-guest` in {ROOT}")
        if not SHIPPED.is_file() or SHIPPED.read_bytes() != built.read_bytes():
            shutil.copyfile(built, SHIPPED)
        SHIPPED_TEXTS.mkdir(exist_ok=True)
        for name in STORE_TEXTS:
            source = ROOT / "shared" / "store" / name
            if not source.is_file():
                raise SystemExit(f"turnstile-scheduler: {source} is missing (the store texts)")
            shutil.copyfile(source, SHIPPED_TEXTS / name)
        shutil.copyfile(ROOT / "SHARED.md", SHIPPED_GUIDE)
        SHIPPED_EXAMPLE.parent.mkdir(exist_ok=True)
        shutil.copyfile(HERE / "examples" / "agent_host.py", SHIPPED_EXAMPLE)
        for name in ("LICENSE-MIT", "LICENSE-APACHE"):
            shutil.copyfile(ROOT / name, HERE / name)
    needed = [SHIPPED, *(SHIPPED_TEXTS / name for name in STORE_TEXTS), HERE / "LICENSE-MIT", HERE / "LICENSE-APACHE", SHIPPED_GUIDE, SHIPPED_EXAMPLE]
    missing = [p.name for p in needed if not p.is_file()]
    if missing:
        raise SystemExit(f"turnstile-scheduler: cannot build the package without {', '.join(missing)} (build it from the repository)")


stage()
setup()
