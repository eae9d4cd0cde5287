"""Calls into the component with the function's types read once, and values lifted without
wasmtime-py's leak.

wasmtime-py 50's `Func.__call__` asks wasmtime for the function's type on every call, and each
record, list and variant type asks again for its fields, element or cases on every value it
converts: for `on-events`, `on-ended` and `next-releases` (lists of variants and records) that
is most of the cost of a crossing. Here the type tree is read once per function and kept; the
conversion code is wasmtime-py's own (`convert_to_c`, `convert_from_c`), only the type queries
are answered from the cache. The call itself is `Func.__call__`'s, with the types it would have
re-read passed in. Lists of numbers (`next-admissions`) are copied in bulk, and
`submit-batch`'s ok result is read directly (`lift_submitted`).

The leak. wasmtime-py (every version from 39 to 50.0.1) lifts the payload of an option, a
result or a variant (`VariantLikeType._lift`) and then calls `wasmtime_component_val_delete`
on the payload's box: that drops what the box holds but never frees the box itself (48 bytes
from malloc), which only `wasmtime_component_val_free` does. So every `some(x)`, `ok(x)`,
`err(x)` and variant case with a payload that crosses out of the component leaked 48 bytes:
`label` one, `inspect` several per entry. `_Option`, `_Result` and `_Variant` below lift the
same way and free the box (see UPSTREAM-wasmtime-py.md, the report for wasmtime-py).

This leans on wasmtime-py internals (`_ffi`, `_enter`, the type classes' properties), which
`tests/test_wasmtime_versions.py` runs against every wasmtime-py version `pyproject.toml`
allows. When they are not as expected, `bound_call` returns None, `unavailable()` says why, and
the caller falls back to the plain `Func.__call__` with a `FastPathWarning` (slower, and
leaking as above).
"""

from __future__ import annotations

import ctypes
import struct
import weakref
from ctypes import byref, pointer
from typing import Any, Callable, Optional

from array import array

_MISSING: Optional[str] = None  # why the fast path is off, if it is
try:
    from wasmtime import Trap, WasmtimeError
    from wasmtime import _ffi as ffi
    from wasmtime.component import U32, U64, ListType, OptionType, Record, RecordType, ResultType, TupleType, ValType, Variant, VariantType
    from wasmtime.component._enter import enter_wasm
except ImportError as e:  # pragma: no cover - another wasmtime-py layout
    ffi = None  # type: ignore[assignment]
    _MISSING = f"wasmtime-py's internals moved ({e})"

    class ListType:  # type: ignore[no-redef]  # stand-ins so the classes below still define
        pass

    OptionType = RecordType = ResultType = TupleType = VariantType = ListType  # type: ignore[misc]
    ValType = Any  # type: ignore[misc]


class FastPathWarning(RuntimeWarning):
    """The package's fast path into the component is off with this wasmtime-py (its internals
    moved): calls go through wasmtime-py's generic path, slower and leaking 48 bytes per
    option, result or variant payload lifted."""


def unavailable() -> Optional[str]:
    """Why the fast path is off with this wasmtime-py, or None when it is on."""
    return _MISSING


# The free that `VariantLikeType._lift` should call (see the module doc), and the kind that
# marks a value whose contents were taken (as wasmtime-py does before its delete).
if ffi is not None:
    _val_free = getattr(ffi, "wasmtime_component_val_free", None)
    if _val_free is None:
        _MISSING = "wasmtime-py has no wasmtime_component_val_free"
    _EMPTY = getattr(ffi, "WASMTIME_COMPONENT_BOOL", None)
    _LIST = getattr(ffi, "WASMTIME_COMPONENT_LIST", None)
    _OPTION = getattr(ffi, "WASMTIME_COMPONENT_OPTION", None)
    if _EMPTY is None or _LIST is None or _OPTION is None:
        _MISSING = "wasmtime-py's value kinds moved"

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


# Names of record fields and variant cases are copied from vectors made once per process
# (`_name`), when this wasmtime-py has what that needs. They are never freed: one per distinct
# name in the WIT, a few kilobytes in all, however many instances the process makes.
_NAMES = False
_name_vecs: dict[str, Any] = {}
if ffi is not None:
    try:
        _vec_copy = ffi.wasm_byte_vec_copy
        _RECORD = ffi.WASMTIME_COMPONENT_RECORD
        _VARIANT = ffi.WASMTIME_COMPONENT_VARIANT

        _NAMES = all(
            hasattr(ffi, n)
            for n in ("str_to_capi", "wasmtime_component_valrecord_new_uninit", "wasmtime_component_val_new", "wasmtime_component_valrecord_copy")
        )
        _record_copy = ffi.wasmtime_component_valrecord_copy if _NAMES else None
    except Exception:  # pragma: no cover
        _NAMES = False


def _name(name: str) -> Any:
    """`name` as a C byte vector, made the first time this process needs it."""
    vec = _name_vecs.get(name)
    if vec is None:
        vec = _name_vecs[name] = ffi.str_to_capi(name)
    return vec


def _take(ty: Any, box: Any) -> Any:
    """The value in `box` (a `wasmtime_component_val_t *` the payload of an option, result or
    variant), lifted by `ty`; the box is freed (what wasmtime-py's `_lift` leaks)."""
    try:
        return ty.convert_from_c(box.contents)
    finally:
        box.contents.kind = _EMPTY  # its contents were taken (or are lost with an error)
        box.contents.of.boolean = False
        _val_free(box)


# Subclasses whose plain class attributes shadow the base classes' type-query properties, so
# that the values stored on each instance answer them.
class _List(ListType):  # type: ignore[misc]
    element = None  # type: ignore[assignment]

    def convert_to_c(self, store: Any, val: Any, ptr: Any) -> None:
        """wasmtime-py's for a list of anything but bytes, with the element type cached and an
        empty list made without a loop (most of a `releases` or `batch` record's lists are)."""
        if type(val) is not list:
            raise TypeError("expected list value")
        n = len(val)
        raw = ffi.wasmtime_component_vallist_t()
        ffi.wasmtime_component_vallist_new_uninit(raw, n)
        if n:
            element = self.element
            data = raw.data
            i = 0
            try:
                for e in val:
                    element.convert_to_c(store, e, pointer(data[i]))
                    i += 1
            except BaseException:
                for j in range(i, n):
                    data[j].kind = _EMPTY
                    data[j].of.boolean = False
                ffi.wasmtime_component_vallist_delete(byref(raw))
                raise
        c = ptr.contents
        c.kind = _LIST
        c.of.list = raw

    def convert_from_c(self, c: Any) -> Any:
        """wasmtime-py's, with the element type cached and an empty list returned at once."""
        raw = c.of.list
        try:
            n = raw.size
            if not n:
                return []
            element = self.element
            data = raw.data
            out = []
            for i in range(n):
                item = data[i]
                out.append(element.convert_from_c(item))
                item.kind = _EMPTY
                item.of.boolean = False
            return out
        finally:
            ffi.wasmtime_component_vallist_delete(byref(raw))


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
    _names: Any = None  # the field names as C byte vectors, made once (see `_cached`)
    _template: Any = None  # a record to copy when lowering (see `convert_to_c`)
    _lists: Any = None  # per field: its type is a list (the template holds it empty)

    def convert_to_c(self, store: Any, val: Any, ptr: Any) -> None:
        """A copy of this type's template record (its field names, an empty list for each list
        field, a placeholder for the rest: one call into wasmtime), then each field converted
        into place, except lists that are empty, which the template already holds. Built field
        by field, as wasmtime-py does, this was one allocation and one name copy per field: an
        `ends` record of three empty lists took 16 us."""
        names = self._names
        if names is None:
            RecordType.convert_to_c(self, store, val, ptr)
            return
        template = self._template
        if template is None:
            template = self._make_template()
        fields = self.fields
        raw = ffi.wasmtime_component_valrecord_t()
        _record_copy(byref(raw), byref(template))
        try:
            data = raw.data
            i = 0
            for name, ty in fields:
                v = getattr(val, name)
                if not (type(v) is list and not v and self._lists[i]):
                    ty.convert_to_c(store, v, pointer(data[i].val))
                i += 1
        except BaseException:
            # Every field holds a value (converted, or the template's): delete them all.
            ffi.wasmtime_component_valrecord_delete(byref(raw))
            raise
        c = ptr.contents
        c.kind = _RECORD
        c.of.record = raw

    def _make_template(self) -> Any:
        fields = self.fields
        raw = ffi.wasmtime_component_valrecord_t()
        ffi.wasmtime_component_valrecord_new_uninit(raw, len(fields))
        lists = []
        for i, ((_, ty), vec) in enumerate(zip(fields, self._names)):
            entry = raw.data[i]
            _vec_copy(byref(entry.name), byref(vec))
            if isinstance(ty, (_List, _WordList)):
                empty = ffi.wasmtime_component_vallist_t()
                ffi.wasmtime_component_vallist_new_uninit(empty, 0)
                entry.val.kind = _LIST
                entry.val.of.list = empty
                lists.append(True)
            else:
                entry.val.kind = _EMPTY
                entry.val.of.boolean = False
                lists.append(False)
        self._lists = lists
        self._template = raw
        # Freed with the type, which lives as long as the functions bound to its instance.
        weakref.finalize(self, ffi.wasmtime_component_valrecord_delete, byref(raw))
        return raw

    def convert_from_c(self, c: Any) -> Any:
        """wasmtime-py's without decoding each field's name only to compare it with the type's
        (fields come in the type's order): a refusal or an action is a record, a million of
        them crossed back decoded three million names."""
        record = c.of.record
        try:
            ret = Record()
            data = record.data
            for i, (name, ty) in zip(range(record.size), self.fields):
                field = data[i].val
                setattr(ret, name, ty.convert_from_c(field))
                field.kind = _EMPTY
                field.of.boolean = False
            return ret
        finally:
            ffi.wasmtime_component_valrecord_delete(byref(record))


class _Tuple(TupleType):  # type: ignore[misc]
    elements = None  # type: ignore[assignment]


class _Variant(VariantType):  # type: ignore[misc]
    cases = None  # type: ignore[assignment]
    _by_tag: Any = None  # tag -> (its name as a C byte vector, its payload type), for tagged ones

    def _tagged(self) -> bool:
        return self._tagged_cached  # type: ignore[attr-defined,no-any-return]

    def convert_to_c(self, store: Any, val: Any, ptr: Any) -> None:
        """wasmtime-py's for a tagged variant (an `event`, an `end`), with the case found by
        its tag and its name copied from a vector made once."""
        by_tag = self._by_tag
        if by_tag is None:
            VariantType.convert_to_c(self, store, val, ptr)
            return
        if not isinstance(val, Variant):
            raise TypeError("expected Variant type")
        case = by_tag.get(val.tag)
        if case is None:
            raise ValueError("value not valid for this variant")
        vec, ty = case
        raw = None
        if ty is not None:
            tmp = ffi.wasmtime_component_val_t()
            ty.convert_to_c(store, val.payload, pointer(tmp))
            raw = ffi.wasmtime_component_val_new(byref(tmp))
        c = ptr.contents
        c.kind = _VARIANT
        _vec_copy(byref(c.of.variant.discriminant), byref(vec))
        c.of.variant.val = raw

    def convert_from_c(self, c: Any) -> Any:
        """wasmtime-py's, with the payload's box freed (see `_take`)."""
        variant = c.of.variant
        vec = variant.discriminant
        raw = ctypes.string_at(vec.data, vec.size)
        ffi.wasm_byte_vec_delete(byref(vec))
        case = self._by_name.get(raw)  # type: ignore[attr-defined]
        if case is None:
            raise ValueError(f"tag {raw.decode('utf-8', 'replace')} not found in variant cases")
        tag, ty = case
        payload = None if ty is None or not variant.val else _take(ty, variant.val)
        if self._tagged_cached:
            return Variant(tag) if ty is None else Variant(tag, payload)
        return payload


class _Option(OptionType):  # type: ignore[misc]
    payload = None  # type: ignore[assignment]

    def convert_to_c(self, store: Any, val: Any, ptr: Any) -> None:
        """wasmtime-py's for an untagged option (`option<u64>`, the clock of every crossing):
        none is a null box, some(x) a box made from x, without the case search of `_lower`."""
        if self._tagged_cached or not _NAMES:  # type: ignore[attr-defined]
            OptionType.convert_to_c(self, store, val, ptr)
            return
        raw = None
        if val is not None:
            tmp = ffi.wasmtime_component_val_t()
            self.payload.convert_to_c(store, val, pointer(tmp))
            raw = ffi.wasmtime_component_val_new(byref(tmp))
        c = ptr.contents
        c.kind = _OPTION
        c.of.option = raw

    def _tagged(self) -> bool:
        return self._tagged_cached  # type: ignore[attr-defined,no-any-return]

    def convert_from_c(self, c: Any) -> Any:
        """wasmtime-py's, with the payload's box freed (see `_take`)."""
        box = c.of.option
        if not box:
            return Variant("none") if self._tagged_cached else None  # type: ignore[attr-defined]
        payload = _take(self.payload, box)
        return Variant("some", payload) if self._tagged_cached else payload  # type: ignore[attr-defined]


class _Result(ResultType):  # type: ignore[misc]
    ok = None  # type: ignore[assignment]
    err = None  # type: ignore[assignment]

    def _tagged(self) -> bool:
        return self._tagged_cached  # type: ignore[attr-defined,no-any-return]

    def convert_from_c(self, c: Any) -> Any:
        """wasmtime-py's, with the payload's box freed (see `_take`)."""
        result = c.of.result
        tag, ty = ("ok", self.ok) if result.is_ok else ("err", self.err)
        payload = None if ty is None or not result.val else _take(ty, result.val)
        if self._tagged_cached:  # type: ignore[attr-defined]
            return Variant(tag) if ty is None else Variant(tag, payload)
        return payload


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
        if _NAMES:
            ty._names = [_name(name) for name, _ in fields]
    elif isinstance(type_, TupleType):
        elements = [_cached(t) for t in ty.elements]
        ty.__class__ = _Tuple
        ty.elements = elements
    elif isinstance(type_, VariantType):
        cases = [(name, None if t is None else _cached(t)) for name, t in ty.cases]
        ty.__class__ = _Variant
        ty.cases = cases
        ty._tagged_cached = VariantType._tagged(ty)
        ty._by_name = {name.encode("utf-8"): (name, t) for name, t in cases}  # lifting: tag bytes -> case
        if _NAMES and ty._tagged_cached:
            ty._by_tag = {name: (_name(name), t) for name, t in cases}
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
    the generic conversion of the result (it must free the value). When it returns None,
    `unavailable()` says why."""
    global _MISSING
    if _MISSING is not None:
        return None
    if not hasattr(func, "_func"):
        _MISSING = "wasmtime-py's Func has no _func"
        return None
    try:
        fty = func.type(store)
        params: list[ValType] = [_cached(t) for _, t in fty.params]
        result: Optional[ValType] = None if fty.result is None else _cached(fty.result)
        raw = func._func
        val_t = ffi.wasmtime_component_val_t
        func_call = ffi.wasmtime_component_func_call
        val_delete = ffi.wasmtime_component_val_delete
    except Exception as e:  # pragma: no cover - another wasmtime-py layout
        _MISSING = f"wasmtime-py's types or ffi moved ({type(e).__name__}: {e})"
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


def lift_submitted(result_type: Any, value: Any) -> tuple[int, int, int] | Any:
    """`submit-batch`'s `result<submitted, submit-error>` read directly on the ok path: `(batch, first, count)`;
    the err path is wasmtime-py's (a tagged `Variant` with the error record)."""
    r = value.of.result
    if not r.is_ok:
        return result_type.convert_from_c(value)
    try:
        fields = r.val.contents.of.record.data
        return fields[0].val.of.u64, fields[1].val.of.u64, fields[2].val.of.u32
    finally:
        ffi.wasmtime_component_val_delete(byref(value))


_RELEASES = ("refused", "abort", "pause-store", "release", "settled", "acquire", "start", "retired", "wake-at", "more")
_ENTRY_SIZE = 48  # a record entry: its name (a byte vector, 16 bytes), its value (32 bytes)
_PAIR = struct.Struct("<QQ")
_WORD = struct.Struct("<Q")


def lift_releases(result_type: Any, value: Any) -> Any:
    """`next-releases`' `releases` record read in place, then freed with one delete: the sizes of
    its ten fields come from one copy of its entries, empty lists cost nothing, `start` and
    `retired` are read in bulk, and only a list of records that has any is converted field by
    field (then marked taken, so the delete does not free it twice). Field by field, as the
    generic path lifts it, an empty round's record took about 26 us. A record that is not the
    one this was written against goes the generic way."""
    layout = getattr(result_type, "_releases_layout", None)
    if layout is None:  # checked once per bound function, not per round
        layout = result_type._releases_layout = (
            _BULK
            and [name for name, _ in result_type.fields] == list(_RELEASES)
            and ctypes.sizeof(ffi.wasmtime_component_valrecord_entry) == _ENTRY_SIZE
        )
    if not layout:
        return result_type.convert_from_c(value)
    record = value.of.record
    try:
        n = record.size
        entries = ctypes.string_at(ctypes.cast(record.data, ctypes.c_void_p).value, _ENTRY_SIZE * n)
        out = Record()
        fields = result_type.fields
        for i in range(n):
            name, ty = fields[i]
            first, second = _PAIR.unpack_from(entries, _ENTRY_SIZE * i + 24)  # the value's payload
            if i == 9:  # bool: the payload's first byte
                v = bool(first & 0xFF)
            elif i == 0 or i == 8:  # option: `first` is the payload's box, or null
                if not first:
                    v = None
                elif i == 8:
                    v = _WORD.unpack(ctypes.string_at(first + 8, 8))[0]  # a u64 value's payload at 8
                else:
                    field = record.data[i].val
                    v = ty.convert_from_c(field)  # frees the box
                    field.kind = _EMPTY
                    field.of.boolean = False
            elif not first:  # an empty list
                v = []
            elif i == 6 or i == 7:  # list<u64>: `first` is the size, `second` the values
                words = array("Q")
                words.frombytes(ctypes.string_at(second, _VAL_SIZE * first))
                v = words[1::4].tolist()
            else:
                field = record.data[i].val
                v = ty.convert_from_c(field)  # frees the list
                field.kind = _EMPTY
                field.of.boolean = False
            setattr(out, name, v)
        return out
    finally:
        ffi.wasmtime_component_val_delete(byref(value))
