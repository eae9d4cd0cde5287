"""The store texts: the SQLite schema and statements and the Redis script, read from the files
this package ships in `turnstile_scheduler/shared/store/` (`setup.py` copies them from the
repository's `shared/store/`, the one source the JS package ships too, so processes in either
language share one store). They are data, not rules: the component does not carry them. Read
once, on the first store `open`.
"""

from __future__ import annotations

import json
import threading
from importlib import resources
from typing import Any, Optional

from . import SharedStoreError

STATEMENT_NAMES = (
    "version", "meta", "setMeta", "wipeTickets", "wipeKeys", "wipeArrivals", "ensureKey", "purge", "ticket", "nextSeq",
    "insert", "renew", "head", "held", "keyState", "arrivals", "setArrival", "grant", "countGrant", "remove", "pause", "peek",
    "earliestExpiry", "list", "settle", "forgetArrivals", "forget", "sweepTickets", "sweepArrivals", "sweepKeys", "countKeys",
)
"""The SQLite statements by name (`sqlite-statements.json`); each takes `?` parameters."""

_lock = threading.Lock()
_sqlite: Optional[tuple[int, dict[str, str]]] = None
_script: Optional[str] = None


def store_text(name: str) -> bytes:
    """The shipped file `name` of the store texts."""
    try:
        return (resources.files(__package__) / "store" / name).read_bytes()
    except OSError as e:
        raise SharedStoreError("store-failed", f"the package's store text {name} cannot be read (a broken install?): {e}") from e


def sqlite_texts() -> tuple[int, dict[str, str]]:
    """The SQLite schema version and the schema and statements by name (`schema`, `ensureKey`,
    ...: the JS package's names), the same for every host."""
    global _sqlite
    with _lock:
        if _sqlite is None:
            try:
                file: Any = json.loads(store_text("sqlite-statements.json"))
            except ValueError as e:
                raise SharedStoreError("store-failed", f"the package's sqlite-statements.json is not JSON: {e}") from e
            version = file.get("schemaVersion") if isinstance(file, dict) else None
            statements = file.get("statements") if isinstance(file, dict) else None
            if (
                type(version) is not int
                or not isinstance(statements, dict)
                or tuple(statements) != STATEMENT_NAMES
                or not all(isinstance(t, str) for t in statements.values())
            ):
                raise SharedStoreError(
                    "store-failed",
                    f"the package's sqlite-statements.json is not the one this code reads (schemaVersion and the statements {', '.join(STATEMENT_NAMES)})",
                )
            _sqlite = version, {"schema": store_text("sqlite.sql").decode(), **statements}
        return _sqlite


def redis_script() -> str:
    """The Redis store's script, the same for every host."""
    global _script
    with _lock:
        if _script is None:
            _script = store_text("redis.lua").decode()
        return _script
