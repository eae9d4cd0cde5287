"""Loading the component and calling its exports through wasmtime-py's dynamic API."""

from __future__ import annotations

import os
import threading
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Optional

from wasmtime import Engine, Store
from wasmtime.component import Component, Linker

PACKAGE = "turnstile:scheduler"
VERSION = "0.1.0"

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
    not thread-safe, so use an instance from one thread (or one asyncio loop) at a time."""

    def __init__(self) -> None:
        engine, component = _compiled()
        self.store = Store(engine)
        self._instance = Linker(engine).instantiate(self.store, component)
        self._funcs: dict[tuple[str, str], Any] = {}

    def func(self, interface: str, name: str) -> Callable[..., Any]:
        """The exported function `name` (`[method]scheduler.approve`) of `interface` (`scheduler`)."""
        key = (interface, name)
        f = self._funcs.get(key)
        if f is None:
            iface = self._instance.get_export_index(self.store, f"{PACKAGE}/{interface}@{VERSION}")
            index = self._instance.get_export_index(self.store, name, iface)
            if index is None:
                raise LookupError(f"the component exports no {interface}.{name}")
            f = self._instance.get_func(self.store, index)
            self._funcs[key] = f
        store = self.store
        return lambda *args: f(store, *args)


_default: Optional[Instance] = None


def default_instance() -> Instance:
    """The instance the module-level classes use when none is given."""
    global _default
    if _default is None:
        _default = Instance()
    return _default
