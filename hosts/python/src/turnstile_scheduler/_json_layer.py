"""A config layer given as plain data (dicts, lists, str, int, float, bool) written as JSON
text, which the component reads like a TOML layer (a layer that starts with `{` is JSON, read
with spans into it), so its diagnostics name the same key paths and tools and point at the
lines written here: two-space indents, and a dict or list that holds no other on one line, as
a person writes `"concurrency": { "key": "github", "limit": 4 }` (the JS package writes the
same text for the same data)."""

from __future__ import annotations

import json
import math
from typing import Any, Mapping


def dumps(data: Mapping[str, Any], what: str) -> str:
    """JSON text for `data`; TypeError or ValueError naming the key path of a value JSON (or a
    config) cannot hold: None, a float that is not finite, a lone surrogate, a non-str key,
    another type, or a cycle."""
    if not isinstance(data, Mapping):
        raise TypeError(f"{what} must be a dict or TOML or JSON text, not {type(data).__name__}")
    _check(data, [], what, set())
    return _emit(data, "") + "\n"


def _emit(v: Any, indent: str) -> str:
    """A checked value's JSON text at `indent`."""
    if not isinstance(v, (Mapping, list, tuple)):
        return json.dumps(v, ensure_ascii=False, allow_nan=False)
    if isinstance(v, Mapping):
        items = [(json.dumps(k, ensure_ascii=False) + ": ", x) for k, x in v.items()]
        brackets = "{}"
    else:
        items = [("", x) for x in v]
        brackets = "[]"
    if not items:
        return brackets
    if not any(isinstance(x, (Mapping, list, tuple)) for _, x in items):
        pad = " " if brackets == "{}" else ""
        return brackets[0] + pad + ", ".join(k + _emit(x, indent) for k, x in items) + pad + brackets[1]
    inner = indent + "  "
    return f"{brackets[0]}\n" + ",\n".join(inner + k + _emit(x, inner) for k, x in items) + f"\n{indent}{brackets[1]}"


def _path(what: str, keys: list[str]) -> str:
    return f"{what}: {'.'.join(keys)}" if keys else what


def _check(v: Any, keys: list[str], what: str, open_ids: set[int]) -> None:
    if isinstance(v, (bool, int)):
        return
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{_path(what, keys)}: JSON has no {v!r} (a number must be finite)")
        return
    if isinstance(v, str):
        if any(0xD800 <= ord(ch) <= 0xDFFF for ch in v):
            raise ValueError(f"{_path(what, keys)}: a string holds a lone surrogate: {v!r}")
        return
    if isinstance(v, (Mapping, list, tuple)):
        if id(v) in open_ids:
            raise ValueError(f"{_path(what, keys)}: the value contains itself (a cycle)")
        open_ids.add(id(v))
        if isinstance(v, Mapping):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise TypeError(f"{_path(what, keys)}: keys must be str, not {type(k).__name__} ({k!r})")
                if any(0xD800 <= ord(ch) <= 0xDFFF for ch in k):
                    raise ValueError(f"{_path(what, keys)}: a key holds a lone surrogate: {k!r}")
                _check(x, keys + [k], what, open_ids)
        else:
            for i, x in enumerate(v):
                _check(x, keys + [f"[{i}]"], what, open_ids)
        open_ids.discard(id(v))
        return
    raise TypeError(f"{_path(what, keys)}: a config holds no {type(v).__name__} values ({v!r}); JSON's null included: leave the field out")
