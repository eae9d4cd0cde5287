"""Checks on the way in: every value a public method passes to the component goes through one
of these first. A wrong type is a TypeError, a value out of its WIT range or an unknown enum
name a ValueError; each message names the parameter (`what`)."""

from __future__ import annotations

from enum import Enum
from typing import Any, Iterable, Optional, TypeVar

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1

E = TypeVar("E", bound=Enum)


def type_name(value: Any) -> str:
    return type(value).__name__


def uint(value: Any, bits: int, what: str) -> int:
    if type(value) is not int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{what} must be an int, not {type_name(value)}")
        value = int(value)  # an int subclass (IntEnum): its plain value
    if not 0 <= value < 1 << bits:
        raise ValueError(f"{what} must be in 0..{(1 << bits) - 1}, not {value}")
    return value


def u32(value: Any, what: str) -> int:
    return uint(value, 32, what)


def u64(value: Any, what: str) -> int:
    return uint(value, 64, what)


def opt_u64(value: Any, what: str) -> Optional[int]:
    return None if value is None else uint(value, 64, what)


def u64s(values: Iterable[Any], what: str) -> list[int]:
    if isinstance(values, (str, bytes, bytearray, dict)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{what} must be a list of ints, not {type_name(values)}")
    out = list(values)
    for i, v in enumerate(out):
        if type(v) is not int:
            out[i] = uint(v, 64, f"{what}[{i}]")
    if out and (min(out) < 0 or max(out) > U64_MAX):
        for i, v in enumerate(out):
            uint(v, 64, f"{what}[{i}]")
    return out


def string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type_name(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} must be valid Unicode (it holds a lone surrogate)") from None
    return str(value)


def boolean(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be a bool, not {type_name(value)}")
    return value


def number(value: Any, what: str, *, allow_none: bool = True) -> Optional[float]:
    """A duration in seconds: a non-negative finite int or float (not a bool), or None."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type_name(value)}")
    f = float(value)
    if not (f >= 0 and f != float("inf")):
        raise ValueError(f"{what} must be a finite number of seconds >= 0, not {value!r}")
    return f


def enum(cls: type[E], value: Any, what: str) -> E:
    """A member of `cls` from a member or its WIT name; TypeError or ValueError otherwise."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a {cls.__name__} or str, not {type_name(value)}")
    try:
        return cls(value)
    except ValueError:
        names = ", ".join(repr(m.value) for m in cls)  # type: ignore[attr-defined]
        raise ValueError(f"{what} must be one of {names}, not {value!r}") from None


def sequence(value: Any, what: str) -> list[Any]:
    """A list or tuple (or another non-text, non-mapping iterable) as a list."""
    if isinstance(value, (str, bytes, bytearray)) or hasattr(value, "keys") or not hasattr(value, "__iter__"):
        raise TypeError(f"{what} must be a list, not {type_name(value)}")
    return list(value)
