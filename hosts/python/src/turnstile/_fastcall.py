"""Calls into the component with the function's types read once.

wasmtime-py 50's `Func.__call__` asks wasmtime for the function's type on every call, and each
record, list and variant type asks again for its fields, element or cases on every value it
converts: for `step` that is most of the cost of a crossing. Here the type tree is read once per
function and kept; the conversion code is wasmtime-py's own (`convert_to_c`, `convert_from_c`),
only the type queries are answered from the cache. The call itself is `Func.__call__`'s, with
the types it would have re-read passed in.

This leans on wasmtime-py internals (`_ffi`, `_enter`, the type classes' properties), which is
why `pyproject.toml` pins wasmtime exactly. `bound_call` returns None when they are not as
expected, and the caller falls back to the plain `Func.__call__`.
"""

from __future__ import annotations

import ctypes
from ctypes import byref, pointer
from typing import Any, Callable, Optional

try:
    from wasmtime import _ffi as ffi
    from wasmtime.component import ListType, OptionType, RecordType, ResultType, TupleType, ValType, VariantType
    from wasmtime.component._enter import enter_wasm
except ImportError:  # pragma: no cover - another wasmtime-py layout
    ffi = None  # type: ignore[assignment]


# Subclasses whose plain class attributes shadow the base classes' type-query properties, so
# that the values stored on each instance answer them.
class _List(ListType):  # type: ignore[misc]
    element = None  # type: ignore[assignment]


class _Record(RecordType):  # type: ignore[misc]
    fields = None  # type: ignore[assignment]


class _Tuple(TupleType):  # type: ignore[misc]
    elements = None  # type: ignore[assignment]


class _Variant(VariantType):  # type: ignore[misc]
    cases = None  # type: ignore[assignment]

    def _tagged(self) -> bool:
        return self._tagged_cached  # type: ignore[attr-defined,no-any-return]


class _Option(OptionType):  # type: ignore[misc]
    payload = None  # type: ignore[assignment]

    def _tagged(self) -> bool:
        return self._tagged_cached  # type: ignore[attr-defined,no-any-return]


class _Result(ResultType):  # type: ignore[misc]
    ok = None  # type: ignore[assignment]
    err = None  # type: ignore[assignment]

    def _tagged(self) -> bool:
        return self._tagged_cached  # type: ignore[attr-defined,no-any-return]


def _cached(type_: ValType) -> Any:
    """`type_` with every nested type query answered once (the object is reused)."""
    ty: Any = type_
    if isinstance(type_, ListType):
        element = _cached(ty.element)
        ty.__class__ = _List
        ty.element = element
    elif isinstance(type_, RecordType):
        fields = [(name, _cached(t)) for name, t in ty.fields]
        ty.__class__ = _Record
        ty.fields = fields
    elif isinstance(type_, TupleType):
        elements = [_cached(t) for t in ty.elements]
        ty.__class__ = _Tuple
        ty.elements = elements
    elif isinstance(type_, VariantType):
        cases = [(name, None if t is None else _cached(t)) for name, t in ty.cases]
        ty.__class__ = _Variant
        ty.cases = cases
        ty._tagged_cached = VariantType._tagged(ty)
    elif isinstance(type_, OptionType):
        payload = _cached(ty.payload)
        ty.__class__ = _Option
        ty.payload = payload
        ty._tagged_cached = OptionType._tagged(ty)
    elif isinstance(type_, ResultType):
        ok = None if ty.ok is None else _cached(ty.ok)
        err = None if ty.err is None else _cached(ty.err)
        ty.__class__ = _Result
        ty.ok, ty.err = ok, err
        ty._tagged_cached = ResultType._tagged(ty)
    return ty


def bound_call(func: Any, store: Any) -> Optional[Callable[..., Any]]:
    """`func(store, *args)` with its types read once; None when this wasmtime-py differs."""
    if ffi is None or not hasattr(func, "_func"):
        return None
    try:
        fty = func.type(store)
        params: list[ValType] = [_cached(t) for _, t in fty.params]
        result: Optional[ValType] = None if fty.result is None else _cached(fty.result)
        raw = func._func
        val_t = ffi.wasmtime_component_val_t
        func_call = ffi.wasmtime_component_func_call
        val_delete = ffi.wasmtime_component_val_delete
    except Exception:  # pragma: no cover - another wasmtime-py layout
        return None
    count = len(params)

    def call(*args: Any) -> Any:
        if len(args) != count:
            raise TypeError(f"wrong number of parameters provided: given {len(args)}, expected {count}")
        param_capi = (val_t * count)()
        n = 0
        try:
            for ty, val in zip(params, args):
                ty.convert_to_c(store, val, pointer(param_capi[n]))
                n += 1
            result_space = val_t() if result is not None else None
            result_ptr = byref(result_space) if result_space is not None else None

            def run() -> "ctypes._Pointer[Any]":
                return func_call(byref(raw), store._context(), param_capi, n, result_ptr, 0 if result is None else 1)

            enter_wasm(run)
            if result is None or result_space is None:
                return None
            return result.convert_from_c(result_space)
        finally:
            for i in range(n):
                val_delete(byref(param_capi[i]))

    call._fty = fty  # type: ignore[attr-defined]  # keeps the type handles alive with the call
    return call
