"""A real Postgres server for the shared-key tests (the same as the JS package's
`test/fixtures/postgres-server.mjs`): Debian's binaries (`/usr/lib/postgresql/<version>/bin`, the
newest version found, or `$PG_BIN`), a fresh data directory under a temporary folder, a free
loopback port, the unix socket in that folder, trust authentication. Postgres refuses to run as
root: as root it runs as the `postgres` user (runuser), the folder given to it. `pg_missing()`
says why it cannot run here (then the tests are reported skipped, never passed)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional


def pg_bin() -> Optional[Path]:
    """The folder of Debian's Postgres binaries, or None."""
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    base = Path("/usr/lib/postgresql")
    if not base.is_dir():
        return None
    found = [v for v in base.iterdir() if (v / "bin" / "initdb").exists() and (v / "bin" / "postgres").exists()]
    found.sort(key=lambda v: float(v.name) if v.name.replace(".", "").isdigit() else 0, reverse=True)
    return found[0] / "bin" if found else None


def _run_as() -> Optional[pwd.struct_passwd]:
    """The `postgres` user when this process is root (None otherwise); raises KeyError when
    root has no such user."""
    if os.getuid() != 0:
        return None
    return pwd.getpwnam("postgres")


def pg_missing() -> Optional[str]:
    """None when a Postgres server and psycopg can run here, else why not."""
    if pg_bin() is None:
        return "Postgres's binaries are not installed (/usr/lib/postgresql/*/bin); install Debian's postgresql (.ci/run does) to run these tests"
    try:
        _run_as()
    except KeyError:
        return "running as root and there is no `postgres` user to run the server as (Postgres refuses to run as root)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'turnstile-scheduler[test]')"
    return None


class PostgresServer:
    """A server of our own. `stop()`/`cont()` send SIGSTOP/SIGCONT to every process of the
    server (the postmaster and its children), `kill()` SIGKILLs them all (a crash: the data directory stays),
    `start()` starts it again on the same port, `close()` kills it and removes its folder."""

    def __init__(self, *, fsync: bool = False) -> None:
        bin_ = pg_bin()
        assert bin_ is not None
        self._bin = bin_
        self._user = _run_as()
        self.dir = tempfile.mkdtemp(prefix="turnstile-pg-")
        if self._user is not None:
            os.chown(self.dir, self._user.pw_uid, self._user.pw_gid)
        self._data = str(Path(self.dir) / "data")
        init = subprocess.run(
            self._command("initdb", "-D", self._data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"),
            capture_output=True,
            text=True,
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr}{init.stdout}")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._args = [
            "-D", self._data, "-p", str(self.port), "-k", self.dir, "-c", "listen_addresses=127.0.0.1",
            "-c", f"fsync={'on' if fsync else 'off'}", "-c", "max_connections=200", "-c", "shared_buffers=32MB",
        ]
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.start()

    def _command(self, name: str, *args: str) -> list[str]:
        command = [str(self._bin / name), *args]
        return ["runuser", "-u", "postgres", "--", *command] if self._user is not None else command

    def start(self) -> None:
        self.process = subprocess.Popen(
            self._command("postgres", *self._args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        import psycopg

        for _ in range(200):
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return
            except psycopg.Error:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"postgres did not start on 127.0.0.1:{self.port}: {self.process.stderr.read() if self.process.poll() is not None else ''}")

    def _signal(self, sig: int) -> None:
        """Sends `sig` to every process of the server: the postmaster and its children (each
        child is a session of its own, so a process group does not reach them). Not to runuser,
        which reaps the postmaster (a postmaster left a zombie would hold the data directory),
        but SIGCONT: runuser stops itself when its child stops."""
        if self.process is None:
            return
        for pid in _tree(self.process.pid):
            if self._user is not None and pid == self.process.pid and sig != signal.SIGCONT:
                continue
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        self._signal(signal.SIGSTOP)

    def cont(self) -> None:
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGKILL)
        self.process.wait()

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _tree(root: int) -> list[int]:
    """`root` and its descendants, from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
        parents[int(entry)] = int(stat[stat.rindex(")") + 2 :].split(" ")[1])
    if root not in parents:
        return []
    out = [root]
    for pid in out:
        out += [child for child, parent in parents.items() if parent == pid]
    return out
