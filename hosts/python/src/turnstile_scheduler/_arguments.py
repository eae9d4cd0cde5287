"""A call's arguments as `submit` sends them: JSON text holding only the fields its tool's key
templates name, or nothing.

The component makes the key (`fs:{path}` to `fs:a.txt`) from the text: a string field gives its
contents, a number its text as written, a boolean `true` or `false`; any other call (no text,
invalid JSON, not an object, a named field missing or null, an array or an object) takes the key
named by the template's own text. So the package sends a text only when it can make a key, and
otherwise sends nothing, which gives that same fallback without ever raising on what a model
wrote:

- a mapping: each named field that is a str, an int, a finite float or a bool (one missing or
  anything else is left out, and a template naming it takes its own key: the other templates
  of a key set still make theirs); when none is, nothing is sent;
- a `str`: the JSON text as written (the component judges it), or, past the component's 65536
  bytes, the named fields read from it (numbers kept as written);
- JSON values that are not an object (a list, a number, a bool): nothing.

Numbers are written the way JavaScript's `JSON.stringify` writes them (`float.__repr__`'s
shortest digits laid out by ECMAScript's Number::toString), so the JavaScript package makes the
same key from the same call: `1.0` is `1`, `1e21` is `1e+21`, `1e-7` is `1e-7`. An int is
written exactly (JavaScript holds ints exactly only up to 2**53). A lone surrogate becomes
U+FFFD, as it does from JavaScript.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Optional, Sequence

ARGUMENTS_BYTES_MAX = 64 * 1024
"""The most bytes of one call's arguments the component takes (more: `too-large`)."""

_dumps = json.JSONEncoder(ensure_ascii=False).encode  # a str as a JSON string literal


def check(value: Any, what: str) -> None:
    """TypeError when `value` cannot be a call's arguments at all: not None, a str (JSON text),
    a mapping, or another JSON value (list, tuple, int, float, bool)."""
    if value is None or isinstance(value, (str, Mapping, list, tuple, int, float)):
        return
    raise TypeError(
        f"{what} must be a mapping (the call's arguments), their JSON text (a str) or None, not {type(value).__name__}"
    )


def text(value: Any, fields: Sequence[str]) -> Optional[str]:
    """The text to send for a call with arguments `value` (checked by `check`) whose tool's
    template names `fields`; None to send nothing. Never raises."""
    try:
        if isinstance(value, str):
            out: Optional[str] = value
            if len(value) > ARGUMENTS_BYTES_MAX // 4 and _size(value) > ARGUMENTS_BYTES_MAX:
                out = _from_text(value, fields)
        elif isinstance(value, Mapping):
            out = _picked(value, fields)
        else:
            return None  # JSON that is not an object: the template's own key
        if out is None:
            return None
        try:
            out.encode("utf-8")
        except UnicodeEncodeError:
            out = _well_formed(out)
        if len(out) > ARGUMENTS_BYTES_MAX // 4 and _size(out) > ARGUMENTS_BYTES_MAX:
            # Its key would be far over 256 bytes: the template's own key all the same, without
            # refusing the batch.
            return None
        return out
    except Exception:  # a mapping whose lookups raise, a text too deep to read: no key from it
        return None


def _size(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def _well_formed(s: str) -> str:
    """Surrogate pairs joined, lone surrogates as U+FFFD (what a JavaScript string becomes in
    UTF-8)."""
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _picked(args: Mapping[Any, Any], fields: Sequence[str]) -> Optional[str]:
    """The named fields that can make (part of) a key; None when none can. A field left out
    is one the component would not use either (missing, null, an array, an object): a
    template that names it takes its own key, and the other templates of a key set still
    make theirs from their fields."""
    parts = []
    for name in fields:
        if name not in args:
            continue
        scalar = _scalar(args[name])
        if scalar is not None:
            parts.append(f"{_dumps(name)}:{scalar}")
    return "{" + ",".join(parts) + "}" if parts else None


class _Raw(str):
    """A number read from JSON text, kept as written."""


def _from_text(text: str, fields: Sequence[str]) -> Optional[str]:
    def refuse(word: str) -> Any:
        raise ValueError(f"{word} is not JSON")

    try:
        parsed = json.loads(text, parse_float=_Raw, parse_int=_Raw, parse_constant=refuse)
    except (ValueError, RecursionError):
        return None  # invalid JSON: the component would take the template's own key too
    return _picked(parsed, fields) if isinstance(parsed, dict) else None


def _scalar(v: Any) -> Optional[str]:
    """A value as JSON when it can make (part of) a key; None otherwise."""
    if isinstance(v, str):
        return v if type(v) is _Raw else _dumps(v)
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        try:
            return int.__repr__(v)
        except ValueError:  # past sys.get_int_max_str_digits()
            return None
    if isinstance(v, float):
        return js_number(v)
    return None


def js_number(x: float) -> Optional[str]:
    """`x` as JavaScript's `JSON.stringify` writes it (ECMAScript Number::toString); None for
    NaN and the infinities, which JSON cannot hold."""
    x = float(x)
    if x != x or x in (float("inf"), float("-inf")):
        return None
    if x == 0:
        return "0"
    if x < 0:
        return "-" + js_number(-x)  # type: ignore[operator]
    _, digit_tuple, exponent = Decimal(float.__repr__(x)).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent += len(digit_tuple) - len(digits)  # type: ignore[operator]
    k = len(digits)
    n = exponent + k  # x = 0.digits * 10**n
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    e = n - 1
    mantissa = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
