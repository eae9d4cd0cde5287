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

from array import array

try:
    from wasmtime import Trap, WasmtimeError
    from wasmtime import _ffi as ffi
    from wasmtime.component import U32, U64, ListType, OptionType, RecordType, ResultType, TupleType, ValType, VariantType
    from wasmtime.component._enter import enter_wasm
except ImportError:  # pragma: no cover - another wasmtime-py layout
    ffi = None  # type: ignore[assignment]

# Lists of u64 and u32 (entry, batch and ticket numbers) are copied in bulk: a value is a
# 32-byte `wasmtime_component_val_t` (kind byte at 0, payload at 8), so a list is written and
# read as a strided view of 64-bit words, not element by element. Only when the layout is the
# one this was written against.
_BULK = False
if ffi is not None:
    try:
        _VAL_SIZE = ctypes.sizeof(ffi.wasmtime_component_val_t)
        _BULK = (
            _VAL_SIZE == 32
            and ffi.wasmtime_component_val_t.of.offset == 8
            and array("Q").itemsize == 8
            and hasattr(ffi, "wasmtime_component_vallist_new_uninit")
            and hasattr(ffi, "wasmtime_component_vallist_delete")
        )
    except Exception:  # pragma: no cover
        _BULK = False


# Subclasses whose plain class attributes shadow the base classes' type-query properties, so
# that the values stored on each instance answer them.
class _List(ListType):  # type: ignore[misc]
    element = None  # type: ignore[assignment]


class _WordList(ListType):  # type: ignore[misc]
    """`list<u64>` / `list<u32>` copied in bulk (see `_BULK`)."""

    element = None  # type: ignore[assignment]
    _kind = 0
    _code = "Q"

    def convert_to_c(self, store: Any, val: Any, ptr: Any) -> None:
        if not isinstance(val, list):
            raise TypeError("expected list value")
        n = len(val)
        raw = ffi.wasmtime_component_vallist_t()
        ffi.wasmtime_component_vallist_new_uninit(raw, n)
        if n:
            words = array("Q", bytes(_VAL_SIZE * n))
            words[0::4] = array("Q", [self._kind]) * n
            try:
                words[1::4] = array(self._code, val) if self._code == "Q" else array("Q", val)
            except (OverflowError, TypeError):
                ffi.wasmtime_component_vallist_delete(byref(raw))
                raise TypeError("expected a list of ints in range") from None
            ctypes.memmove(raw.data, words.tobytes(), _VAL_SIZE * n)
        ptr.contents.kind = ffi.WASMTIME_COMPONENT_LIST
        ptr.contents.of.list = raw

    def convert_from_c(self, c: Any) -> Any:
        try:
            n = c.of.list.size
            if not n:
                return []
            address = ctypes.cast(c.of.list.data, ctypes.c_void_p).value
            words = array("Q")
            words.frombytes(ctypes.string_at(address, _VAL_SIZE * n))
            out = words[1::4].tolist()
            if self._code == "L":
                out = [w & 0xFFFFFFFF for w in out]
            return out
        finally:
            ffi.wasmtime_component_vallist_delete(byref(c.of.list))


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
        if _BULK and isinstance(element, (U64, U32)):
            ty.__class__ = _WordList
            ty._kind = (ffi.WASMTIME_COMPONENT_U64 if isinstance(element, U64) else ffi.WASMTIME_COMPONENT_U32).value
            ty._code = "Q" if isinstance(element, U64) else "L"
        else:
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


def bound_call(func: Any, store: Any, instance: Any, what: str, lift: Optional[Callable[[Any, Any], Any]] = None) -> Optional[Callable[..., Any]]:
    """`func(store, *args)` with its types read once; None when this wasmtime-py differs. A
    trap marks `instance` broken (`instance.trapped`) and raises its `InstanceBrokenError`;
    once broken, every call raises it before entering. `lift(result_type, value)` replaces
    the generic conversion of the result (it must free the value)."""
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
        if instance.broken is not None:
            raise instance.broken
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

            try:
                enter_wasm(run)
            except (WasmtimeError, Trap) as e:
                raise instance.trapped(what, e) from e
            if result is None or result_space is None:
                return None
            if lift is not None:
                return lift(result, result_space)
            return result.convert_from_c(result_space)
        finally:
            for i in range(n):
                val_delete(byref(param_capi[i]))

    call._fty = fty  # type: ignore[attr-defined]  # keeps the type handles alive with the call
    return call


# ---------------------------------------------------------------------------------------------
# The thin path for `scheduler.step`: the driver's hot function.

_INPUT_FIELDS = ("approve", "settle", "ask", "answer", "ok", "failed", "cancel", "now", "retry", "pause", "granted", "denied")
_OUTPUT_FIELDS = ("start", "settle", "errors", "retired", "wake-at", "acquire", "release")
_WORDS = (0, 2, 3, 4, 5, 6, 10, 11)  # the list<u64> fields, written in bulk
_LOWERED = (1, 8, 9)  # settle, retry, pause: lowered by wasmtime-py when not empty


def step_call(func: Any, store: Any, instance: Any, what: str) -> Optional[Callable[..., Any]]:
    """`step(resource, inputs) -> (start, settle, errors, retired, wake_at, acquire, release)`
    with the `inputs`
    record built once and reused: its field names and its lists of numbers live in
    Python-owned memory the call only reads, so a call allocates nothing in wasmtime for them.
    `now` points at a number it owns too; `settle`, `retry` and `pause` are lowered by
    wasmtime-py, and only when not empty;
    `start`, `retired`, `acquire` and `release` are read in bulk, `wake-at` directly, `settle` and `errors` lifted by
    wasmtime-py (records, as `Record` objects) and only when not empty. None when this
    wasmtime-py or the function's type is not the expected one."""
    if not _BULK:
        return None
    try:
        fty = func.type(store)
        (_, resource_ty), (_, inputs_ty) = fty.params
        result_ty = fty.result
        if [n for n, _ in inputs_ty.fields] != list(_INPUT_FIELDS) or [n for n, _ in result_ty.fields] != list(_OUTPUT_FIELDS):
            return None
        resource_ty = _cached(resource_ty)
        in_fields = dict(inputs_ty.fields)
        lowered_ty = {k: _cached(in_fields[_INPUT_FIELDS[k]]) for k in _LOWERED}
        out_fields = dict(result_ty.fields)
        settle_out, errors_out = _cached(out_fields["settle"]), _cached(out_fields["errors"])
        raw = func._func
        val_t = ffi.wasmtime_component_val_t
        func_call = ffi.wasmtime_component_func_call
        val_delete = ffi.wasmtime_component_val_delete
        entry_t = ffi.wasmtime_component_valrecord_entry_t
        OPTION = ffi.WASMTIME_COMPONENT_OPTION.value
    except Exception:  # pragma: no cover - another wasmtime-py layout
        return None

    raw_ref = byref(raw)
    LIST, U64_KIND = ffi.WASMTIME_COMPONENT_LIST.value, ffi.WASMTIME_COMPONENT_U64.value
    count = len(_INPUT_FIELDS)
    params = (val_t * 2)()
    entries = (entry_t * count)()
    names = [ctypes.create_string_buffer(n.encode()) for n in _INPUT_FIELDS]
    for i, n in enumerate(_INPUT_FIELDS):
        entries[i].name.size = len(n)
        entries[i].name.data = ctypes.cast(names[i], type(entries[i].name.data))
        entries[i].val.kind = LIST
    entries[7].val.kind = OPTION  # `now`: none (a null option pointer)
    params[1].kind = ffi.WASMTIME_COMPONENT_RECORD
    params[1].of.record.size = count
    params[1].of.record.data = ctypes.cast(entries, type(params[1].of.record.data))
    data_type = type(entries[0].val.of.list.data)
    option_null = type(entries[7].val.of.option)()
    now_val = val_t()  # `now`'s payload when given: Python-owned, read by the call
    now_val.kind = U64_KIND
    now_some = ctypes.pointer(now_val)
    kinds: dict[int, array] = {}
    bool_kind = ffi.WASMTIME_COMPONENT_BOOL

    views = [entries[i].val.of.list for i in range(count)]  # views into `entries`, made once
    null = data_type()
    filled = [False] * count

    def lower_words(i: int, values: list[int], keep: list[Any]) -> None:
        n = len(values)
        if not n:
            if filled[i]:
                lst = views[i]
                lst.size = 0
                lst.data = null
                filled[i] = False
            return
        lst = views[i]
        lst.size = n
        filled[i] = True
        words = array("Q", bytes(_VAL_SIZE * n))
        k = kinds.get(n)
        if k is None:
            k = kinds[n] = array("Q", [U64_KIND]) * n
        words[0::4] = k
        words[1::4] = array("Q", values)
        buf = (ctypes.c_char * (_VAL_SIZE * n)).from_buffer(words)
        keep.append(words)
        keep.append(buf)
        lst.data = ctypes.cast(buf, data_type)

    def read_words(v: Any) -> list[int]:
        n = v.of.list.size
        if not n:
            return []
        address = ctypes.cast(v.of.list.data, ctypes.c_void_p).value
        words = array("Q")
        words.frombytes(ctypes.string_at(address, _VAL_SIZE * n))
        return words[1::4].tolist()

    def reset(k: int) -> None:
        """Field `k` back to its empty value (the lowered value it pointed to is freed apart)."""
        entries[k].val.kind = LIST
        views[k].size = 0
        views[k].data = null

    def call(resource: Any, inputs: Any) -> tuple[list[int], list[Any], list[Any], list[int], Optional[int], list[int], list[int]]:
        if instance.broken is not None:
            raise instance.broken
        keep: list[Any] = []
        lower_words(0, inputs.approve, keep)
        lower_words(2, inputs.ask, keep)
        lower_words(3, inputs.answer, keep)
        lower_words(4, inputs.ok, keep)
        lower_words(5, inputs.failed, keep)
        lower_words(6, inputs.cancel, keep)
        lower_words(10, inputs.granted, keep)
        lower_words(11, inputs.denied, keep)
        now = inputs.now
        if now is None:
            entries[7].val.of.option = option_null
        else:
            now_val.of.u64 = now
            entries[7].val.of.option = now_some
        given = (inputs.settle, inputs.retry, inputs.pause)
        lowered: list[tuple[int, Any]] = []  # (field, the value wasmtime-py lowered)
        resource_lowered = False
        result_space = val_t()
        try:
            for k, value in zip(_LOWERED, given):
                if not value:
                    continue
                tmp = val_t()
                lowered_ty[k].convert_to_c(store, value, pointer(tmp))
                lowered.append((k, tmp))
                ctypes.memmove(byref(entries[k].val), byref(tmp), _VAL_SIZE)
            resource_ty.convert_to_c(store, resource, pointer(params[0]))
            resource_lowered = True

            error = func_call(raw_ref, store._context(), params, 2, byref(result_space), 1)
            if error:
                raise instance.trapped(what, WasmtimeError._from_ptr(error))
            try:
                fields = result_space.of.record.data
                start = read_words(fields[0].val)
                retired = read_words(fields[3].val)
                acquire = read_words(fields[5].val)
                release = read_words(fields[6].val)
                wake = fields[4].val.of.option
                wake_at = wake.contents.of.u64 if wake else None
                s_val, e_val = fields[1].val, fields[2].val
                settled = []
                errors = []
                if s_val.of.list.size:
                    settled = settle_out.convert_from_c(s_val)  # frees the list
                    s_val.kind = bool_kind
                if e_val.of.list.size:
                    errors = errors_out.convert_from_c(e_val)
                    e_val.kind = bool_kind
            finally:
                val_delete(byref(result_space))
            return start, settled, errors, retired, wake_at, acquire, release
        finally:
            for k, tmp in lowered:
                reset(k)
                val_delete(byref(tmp))
            if resource_lowered:
                val_delete(byref(params[0]))

    call._keep = (fty, names, entries, params, now_val, now_some)  # type: ignore[attr-defined]
    return call


def lift_submitted(result_type: Any, value: Any) -> tuple[int, int, int] | Any:
    """`result<submitted, submit-error>` read directly on the ok path: `(batch, first, count)`;
    the err path is wasmtime-py's (a tagged `Variant` with the error record)."""
    r = value.of.result
    if not r.is_ok:
        return result_type.convert_from_c(value)
    try:
        fields = r.val.contents.of.record.data
        return fields[0].val.of.u64, fields[1].val.of.u64, fields[2].val.of.u32
    finally:
        ffi.wasmtime_component_val_delete(byref(value))
