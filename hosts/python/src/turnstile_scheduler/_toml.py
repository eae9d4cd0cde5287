"""A config layer given as plain data (dicts, lists, str, int, float, bool) written as TOML text,
so that the component resolves it like any other layer and its diagnostics name the same key
paths and tools. Spans then point into this generated text (`Diagnostic.rendered` shows its
lines). Tables down to a tool (`[conversation.tools.NAME]`) are written as sections, tables
inside a tool's table inline (`concurrency = { key = "github", limit = 4 }`), as a person
would write them."""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")
_I64 = (-(2**63), 2**63 - 1)
_SECTION_DEPTH = 3  # conversation.tools.NAME


def dumps(data: Mapping[str, Any], what: str) -> str:
    """TOML text for `data`; TypeError or ValueError naming the key path of a value TOML (or
    the config) cannot hold."""
    if not isinstance(data, Mapping):
        raise TypeError(f"{what} must be a dict or TOML text, not {type(data).__name__}")
    lines: list[str] = []
    _table(data, [], lines, what)
    return "\n".join(lines) + ("\n" if lines else "")


def _path(what: str, keys: list[str]) -> str:
    return f"{what}: {'.'.join(keys)}" if keys else what


def _key(k: Any, keys: list[str], what: str) -> str:
    if not isinstance(k, str):
        raise TypeError(f"{_path(what, keys)}: keys must be str, not {type(k).__name__} ({k!r})")
    return k if _BARE.match(k) else _string(k)


def _table(t: Mapping[str, Any], keys: list[str], lines: list[str], what: str) -> None:
    sections = []
    body = []
    for k, v in t.items():
        key = _key(k, keys, what)
        if isinstance(v, Mapping) and (len(keys) < _SECTION_DEPTH or any(isinstance(x, Mapping) for x in v.values())):
            sections.append((k, key, v))
        else:
            body.append(f"{key} = {_value(v, keys + [k], what)}")
    if body or (keys and not sections):
        if keys:
            if lines:
                lines.append("")
            lines.append("[" + ".".join(_key(k, keys[:i], what) for i, k in enumerate(keys)) + "]")
        lines.extend(body)
    for k, _key_text, v in sections:
        _table(v, keys + [k], lines, what)


def _value(v: Any, keys: list[str], what: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if not _I64[0] <= v <= _I64[1]:
            raise ValueError(f"{_path(what, keys)}: {v} does not fit TOML's 64-bit integers")
        return str(int(v))
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, Mapping):
        items = [f"{_key(k, keys, what)} = {_value(x, keys + [k], what)}" for k, x in v.items()]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x, keys + [f"[{i}]"], what) for i, x in enumerate(v)) + "]"
    raise TypeError(f"{_path(what, keys)}: TOML has no {type(v).__name__} values ({v!r})")


def _string(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\u{o:04X}")
        elif 0xD800 <= o <= 0xDFFF:
            raise ValueError(f"a string holds a lone surrogate: {s!r}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
