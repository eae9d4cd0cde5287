"""Loading the component and calling its exports through wasmtime-py's dynamic API."""

from __future__ import annotations

import os
import threading
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Optional

from wasmtime import Engine, Store
from wasmtime.component import Component, Linker

from ._fastcall import bound_call

PACKAGE = "turnstile:scheduler"
VERSION = "0.2.0"

_engine: Optional[Engine] = None
_component: Optional[Component] = None
_lock = threading.Lock()


def component_path() -> Path:
    """`$TURNSTILE_WASM`, else the component shipped inside this package."""
    env = os.environ.get("TURNSTILE_WASM")
    if env:
        return Path(env)
    return Path(str(resources.files("turnstile").joinpath("turnstile.wasm")))


def _compiled() -> tuple[Engine, Component]:
    global _engine, _component
    with _lock:
        if _engine is None or _component is None:
            _engine = Engine()
            _component = Component.from_file(_engine, str(component_path()))
        return _engine, _component


class Instance:
    """One instance of the component in its own store. Instances share nothing; a store is
    not thread-safe, so use an instance from one thread (or one asyncio loop) at a time.

    wasmtime-py lowers what it is given without checking ranges (an int wraps to the WIT width)
    and a value it cannot lower (an unknown enum name) leaves the instance unusable. The classes
    in `api` therefore check every value before it crosses; callers of `func` must do the same."""

    def __init__(self) -> None:
        engine, component = _compiled()
        self.store = Store(engine)
        self._instance = Linker(engine).instantiate(self.store, component)
        self._funcs: dict[tuple[str, str], Callable[..., Any]] = {}

    def func(self, interface: str, name: str) -> Callable[..., Any]:
        """The exported function `name` (`[method]scheduler.step`) of `interface` (`scheduler`),
        bound to this instance's store."""
        key = (interface, name)
        bound = self._funcs.get(key)
        if bound is None:
            iface = self._instance.get_export_index(self.store, f"{PACKAGE}/{interface}@{VERSION}")
            if iface is None:
                raise LookupError(f"the component exports no {PACKAGE}/{interface}@{VERSION}")
            index = self._instance.get_export_index(self.store, name, iface)
            if index is None:
                raise LookupError(f"the component exports no {interface}.{name}")
            f = self._instance.get_func(self.store, index)
            if f is None:
                raise LookupError(f"{interface}.{name} is not a function")
            store = self.store
            fast = bound_call(f, store)
            if fast is None:

                def bound(*args: Any) -> Any:
                    return f(store, *args)

            else:
                bound = fast
            self._funcs[key] = bound
        return bound

    def drop(self, resource: Any) -> None:
        """Runs a resource's destructor in the guest (its memory is reused)."""
        resource.drop(self.store)


_default: Optional[Instance] = None


def default_instance() -> Instance:
    """The instance the module-level classes use when none is given."""
    global _default
    if _default is None:
        _default = Instance()
    return _default
