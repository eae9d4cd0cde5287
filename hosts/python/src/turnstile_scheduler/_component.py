"""Loading the component and calling its exports through wasmtime-py's dynamic API.

Which objects share an instance: every `Scheduler` and every `Admission` gets an instance of its
own (about 60 us and 140 KB each), so a trap in one can never break another. `Policy.resolve`
uses one shared instance for policies; a `Scheduler` resolves its policy's layers again in its
own instance, so it depends on the shared one for nothing. When an instance traps, every object
bound to it raises `InstanceBrokenError` from then on, and the shared instance is replaced at the
next `Policy.resolve`. Pass `instance=` to put several objects in one instance on purpose (they
then share its fate).

Every call goes through `_fastcall` (types read once, values lifted without wasmtime-py's
leak). When this wasmtime-py's internals moved and it cannot, the call goes through
wasmtime-py's own `Func.__call__` and a `FastPathWarning` says so (once per function and
instance): slower, and leaking per value lifted, never silently.
"""

from __future__ import annotations

import os
import threading
import warnings
from importlib import metadata, resources
from pathlib import Path
from typing import Any, Callable, Optional

from wasmtime import Engine, Store, Trap, WasmtimeError
from wasmtime.component import Component, Linker

from ._fastcall import _BULK, FastPathWarning, bound_call, lift_releases, lift_submitted, unavailable
from .errors import InstanceBrokenError

PACKAGE = "turnstile:scheduler"
VERSION = "0.3.0"

_engine: Optional[Engine] = None
_component: Optional[Component] = None
_lock = threading.Lock()


def component_path() -> Path:
    """`$TURNSTILE_WASM`, else the component shipped inside this package."""
    env = os.environ.get("TURNSTILE_WASM")
    if env:
        return Path(env)
    return Path(str(resources.files("turnstile_scheduler").joinpath("turnstile.wasm")))


def _compiled() -> tuple[Engine, Component]:
    global _engine, _component
    with _lock:
        if _engine is None or _component is None:
            path = component_path()
            if not path.is_file():
                raise FileNotFoundError(
                    f"the Turnstile component is missing at {path}: this installation of turnstile-scheduler "
                    "was built without it (build the wheel from the repository, where the build runs "
                    "`cargo xtask build-guest`), or set TURNSTILE_WASM"
                )
            _engine = Engine()
            _component = Component.from_file(_engine, str(path))
        return _engine, _component


class Instance:
    """One instance of the component in its own store. Instances share nothing; a store is not
    thread-safe, so use an instance from one thread (or one asyncio loop) at a time.

    wasmtime-py lowers what it is given without checking ranges (an int wraps to the WIT width)
    and a value it cannot lower (an unknown enum name) traps the instance. The public classes
    therefore check every value before it crosses; callers of `func` must do the same. If a call
    traps anyway, the instance is broken: that call and every later one raise
    `InstanceBrokenError` (never wasmtime's own errors)."""

    def __init__(self) -> None:
        engine, component = _compiled()
        self.store = Store(engine)
        self._instance = Linker(engine).instantiate(self.store, component)
        self._funcs: dict[tuple[str, str], Callable[..., Any]] = {}
        self.broken: Optional[InstanceBrokenError] = None
        """Set when the instance trapped; every later call raises it again."""

    def submit_func(self) -> Callable[..., Any]:
        """`scheduler.submit-batch` returning `(batch, first, count)` on success and
        wasmtime-py's tagged `Variant` on refusal (see `_fastcall.lift_submitted`)."""
        key = ("scheduler", "[method]scheduler.submit-batch#thin")
        bound = self._funcs.get(key)
        if bound is None:
            what = "scheduler.submit-batch"
            f = self._export("scheduler", "[method]scheduler.submit-batch")
            bound = bound_call(f, self.store, self, what, lift_submitted) if _BULK else None
            if bound is None:
                generic = self.func("scheduler", "[method]scheduler.submit-batch")

                def bound(*args: Any) -> Any:
                    r = generic(*args)
                    return r if r.tag == "err" else (r.payload.batch, r.payload.first, r.payload.count)

            self._funcs[key] = bound
        return bound

    def func(self, interface: str, name: str) -> Callable[..., Any]:
        """The exported function `name` (`[method]scheduler.next-releases`) of `interface`
        (`scheduler`), bound to this instance's store, raising `InstanceBrokenError` on a trap."""
        key = (interface, name)
        bound = self._funcs.get(key)
        if bound is None:
            f = self._export(interface, name)
            lift = lift_releases if name == "[method]scheduler.next-releases" and _BULK else None
            bound = bound_call(f, self.store, self, f"{interface}.{name}", lift)
            if bound is None:
                _warn_fallback(f"{interface}.{name}")
                bound = self._plain(f, f"{interface}.{name}")
            self._funcs[key] = bound
        return bound

    def _export(self, interface: str, name: str) -> Any:
        self.check()
        iface = self._instance.get_export_index(self.store, f"{PACKAGE}/{interface}@{VERSION}")
        if iface is None:
            raise LookupError(f"the component exports no {PACKAGE}/{interface}@{VERSION}")
        index = self._instance.get_export_index(self.store, name, iface)
        if index is None:
            raise LookupError(f"the component exports no {interface}.{name}")
        f = self._instance.get_func(self.store, index)
        if f is None:
            raise LookupError(f"{interface}.{name} is not a function")
        return f

    def _plain(self, f: Any, what: str) -> Callable[..., Any]:
        store = self.store

        def bound(*args: Any) -> Any:
            if self.broken is not None:
                raise self.broken
            try:
                return f(store, *args)
            except (WasmtimeError, Trap) as e:
                raise self.trapped(what, e) from e

        return bound

    def check(self) -> None:
        """Raises `InstanceBrokenError` when the instance trapped earlier."""
        if self.broken is not None:
            raise self.broken

    def trapped(self, what: str, cause: BaseException) -> InstanceBrokenError:
        """Marks the instance broken after `cause` (a trap in `what`); returns the error."""
        if self.broken is None:
            self.broken = InstanceBrokenError(
                f"the component trapped in {what} ({cause}); this instance is unusable from now on "
                "(a bug in Turnstile: please report it with the call that caused it)",
                cause,
            )
        return self.broken

    def drop(self, resource: Any) -> None:
        """Runs a resource's destructor in the guest (its memory is reused). Does nothing on a
        broken instance (its memory is gone with it)."""
        if self.broken is not None:
            return
        try:
            resource.drop(self.store)
        except (WasmtimeError, Trap) as e:
            raise self.trapped("drop", e) from e


def _warn_fallback(what: str) -> None:
    try:
        version = metadata.version("wasmtime")
    except metadata.PackageNotFoundError:  # pragma: no cover
        version = "?"
    warnings.warn(
        f"turnstile_scheduler: {what} goes through wasmtime-py {version}'s generic path, not the "
        f"package's fast path ({unavailable()}): slower, and leaking 48 bytes per option, result "
        "or variant payload it returns (see UPSTREAM-wasmtime-py.md); use a wasmtime version "
        "pyproject.toml allows",
        FastPathWarning,
        stacklevel=4,
    )


_shared: Optional[Instance] = None


def shared_instance() -> Instance:
    """The instance `Policy.resolve` uses when none is given; replaced when it broke."""
    global _shared
    if _shared is None or _shared.broken is not None:
        _shared = Instance()
    return _shared


_retry_after_instance: Optional[Instance] = None
_retry_after_lock = threading.Lock()


def retry_after(header: str, wall_now_ms: int) -> Any:
    """The component's `scheduler.retry-after`: the wait (milliseconds, an int) an HTTP
    `Retry-After` value asks for at wall-clock `wall_now_ms`, or its `retry-after-error`
    record (`code` `empty` or `malformed`, `message`). Runs in an instance of its own, under a
    lock, so any thread may call it (an execution may read its header in a worker thread); a
    broken instance is replaced at the next call. `header` must be a str that encodes as
    UTF-8 and `wall_now_ms` a u64 (the caller checks)."""
    global _retry_after_instance
    with _retry_after_lock:
        inst = _retry_after_instance
        if inst is None or inst.broken is not None:
            inst = _retry_after_instance = Instance()
        return inst.func("scheduler", "retry-after")(header, wall_now_ms)

