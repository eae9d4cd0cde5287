"""The driver's snapshot as JSON text (hosts/DRIVERS.md, "Persistence"): one format for both
packages, byte for byte. Fields are written in a fixed order with no spaces, u64 numbers as
decimal strings, u32 numbers as JSON numbers, an absent option as an absent field, numbers as
JavaScript's `JSON.stringify` writes them, and every character outside printable ASCII
escaped (`\\uXXXX`, lowercase), so one state gives the same text here and in JS.

Writing: `state_json`, `value_json`, `error_json`, `retired_json`. Reading: `read` (the
whole text, checked field by field: a malformed snapshot is a TypeError / ValueError naming
the field)."""

from __future__ import annotations

import json
from typing import Any, Optional

from ._arguments import js_number
from .errors import RestoredError
from .outcomes import CallOutcome, EntryOutcome, OutcomeStatus
from .types import AbortCause, Outcome, Reason, ReasonKind, Saved, SavedBatch, SavedCall, SavedEntry, SavedState

_VERSION = 1

# ---------------------------------------------------------------------------------------------
# Writing


def _str(s: str) -> str:
    return json.dumps(s)  # ensure_ascii: JS's `ascii(JSON.stringify(s))`


def _value(v: Any, seen: set[int]) -> Optional[str]:
    """`v` as `JSON.stringify` writes it; None when JSON cannot hold it."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        text = js_number(v) or "null"  # NaN and the infinities: JS writes null
        # A float stays a float across a restart: `1.0` is written `1.0`, not JS's `1` (which
        # reads back as an int); JS reads both as the same number.
        return text + ".0" if text.lstrip("-").isdigit() else text
    if isinstance(v, (list, tuple, dict)):
        if id(v) in seen:
            return None  # a cycle
        seen.add(id(v))
        try:
            if isinstance(v, dict):
                parts = []
                for k, item in v.items():
                    if not isinstance(k, str):
                        return None
                    text = _value(item, seen)
                    if text is None:
                        return None
                    parts.append(f"{_str(k)}:{text}")
                return "{" + ",".join(parts) + "}"
            items = [_value(item, seen) for item in v]
            if any(t is None for t in items):
                return None
            return "[" + ",".join(items) + "]"  # type: ignore[arg-type]
        finally:
            seen.discard(id(v))
    return None


def not_json(value: Any) -> Optional[str]:
    """What in `value` JSON cannot carry (`"a set"`, `"a float nan"`, `"a tuple"`, `"a
    cycle"`), or None for JSON data: None, bool, int, a finite float, str, and lists and dicts
    with str keys of those (subclasses come back as their base type, equal to what was
    returned). What the driver refuses to save (hosts/DRIVERS.md, "Persistence")."""
    return _not_json(value, set())


def _not_json(v: Any, seen: set[int]) -> Optional[str]:
    if v is None or isinstance(v, (bool, int, str)):
        return None
    if isinstance(v, float):
        return None if js_number(v) is not None else f"a float {v!r}"
    if not isinstance(v, (list, dict)):
        return f"a {type(v).__name__}"
    if id(v) in seen:
        return "a cycle"
    seen.add(id(v))
    try:
        if isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(k, str):
                    return f"a dict key of type {type(k).__name__}"
                bad = _not_json(item, seen)
                if bad is not None:
                    return bad
            return None
        for item in v:
            bad = _not_json(item, seen)
            if bad is not None:
                return bad
        return None
    finally:
        seen.discard(id(v))


def value_json(value: Any) -> str:
    """A value as JSON; what JSON cannot hold (an object, a set, a cycle) is saved as its
    string."""
    text = _value(value, set())
    return _str(str(value)) if text is None else text


def error_name(error: Any) -> str:
    """The name an error is saved under: its class's name (a `RestoredError` keeps the name it
    was restored with)."""
    if isinstance(error, RestoredError):
        return error.name
    return type(error).__name__


def error_json(error: Any) -> str:
    """An error as `{name, message}`."""
    message = error.message if isinstance(error, RestoredError) else str(error)
    return f'{{"name":{_str(error_name(error))},"message":{_str(message)}}}'


def reason_json(r: Reason) -> str:
    """A reason as the snapshot writes it: `"rejected"`, `{"stopped":1}`,
    `{"timed-out":"cancelled"}`."""
    kind = ReasonKind(r.kind)
    if kind is ReasonKind.STOPPED:
        return f'{{"stopped":{r.after}}}'
    if kind is ReasonKind.RATE_LIMITED:
        return f'{{"rate-limited":{r.retries}}}'
    if kind is ReasonKind.TIMED_OUT:
        return '{"timed-out":"%s"}' % ("cancelled" if r.cause is AbortCause.CANCEL else "deadline")
    return f'"{kind.value}"'


def _entry_state_json(e: SavedEntry) -> str:
    if e.state is Saved.STARTED:
        return '"started"'
    if e.state is Saved.ENDED:
        return f'{{"ended":"{Outcome(e.outcome).value}"}}'
    return f'{{"settled":{reason_json(e.reason)}}}'  # type: ignore[arg-type]


def _call_json(c: SavedCall) -> str:
    out = f'{{"id":{_str(c.id)},"tool":{_str(c.tool)}'
    if c.operations is not None:
        out += f',"operations":{c.operations}'
    # One key is written `"key"`, as 0.2 wrote it (such a state still resumes there); a key
    # set's `"keys"`; none, nothing.
    if len(c.keys) == 1:
        out += f',"key":{_str(c.keys[0])}'
    elif c.keys:
        out += f',"keys":[{",".join(_str(k) for k in c.keys)}]'
    entries = ",".join(f'{{"operation":{e.operation},"state":{_entry_state_json(e)}}}' for e in c.entries)
    return f'{out},"entries":[{entries}]}}'


def _batch_json(b: SavedBatch) -> str:
    limits = []
    if b.execution_ms is not None:
        limits.append(f'"execution-ms":{b.execution_ms}')
    if b.abort_grace_ms is not None:
        limits.append(f'"abort-grace-ms":{b.abort_grace_ms}')
    calls = ",".join(_call_json(c) for c in b.calls)
    cancelled = "true" if b.cancelled else "false"
    return f'{{"batch":"{b.batch}","first":"{b.first}","cancelled":{cancelled},"limits":{{{",".join(limits)}}},"calls":[{calls}]}}'


def state_json(s: SavedState) -> str:
    """`Scheduler.unfinished()` with the WIT's names."""
    batches = ",".join(_batch_json(b) for b in s.batches)
    return (
        f'{{"version":{s.version},"policy":"{s.policy}","next-batch":"{s.next_batch}",'
        f'"next-entry":"{s.next_entry}","batches":[{batches}]}}'
    )


def ended_json(o: EntryOutcome) -> str:
    """What the snapshot keeps of an ended entry of a live batch: its value or its error."""
    if o.status is OutcomeStatus.SETTLED:
        return f'{{"error":{{"name":"Error","message":{_str(o.message or "")}}}}}'
    if o.error is not None:
        return f'{{"error":{error_json(o.error)}}}'
    return f'{{"value":{value_json(o.value)}}}'


def _outcome_json(o: EntryOutcome) -> str:
    status = OutcomeStatus(o.status)
    head = f'{{"entry":"{o.entry}","label":{_str(o.label)},"status":"{status.value}"'
    if status is OutcomeStatus.OK:
        return f'{head},"value":{value_json(o.value)}}}'
    if status is OutcomeStatus.FAILED:
        return f'{head},"error":{error_json(o.error)}}}'
    if status is OutcomeStatus.CANCELLED:
        return f'{head},"error":{error_json(o.error)}}}' if o.error is not None else f'{head},"value":{value_json(o.value)}}}'
    error = "" if o.error is None else f',"error":{error_json(o.error)}'
    return f'{head},"reason":{reason_json(o.reason)},"message":{_str(o.message or "")}{error}}}'  # type: ignore[arg-type]


def retired_json(number: int, outcomes: list[CallOutcome]) -> str:
    """A retired batch as the snapshot keeps it: its number and its outcomes as `run` gave them."""
    calls = ",".join(
        f'{{"id":{_str(c.id)},"tool":{_str(c.tool)},"entries":[{",".join(_outcome_json(e) for e in c.entries)}]}}' for c in outcomes
    )
    return f'{{"batch":"{number}","outcomes":[{calls}]}}'


def snapshot_json(state: SavedState, ended: list[tuple[int, str]], retired: list[str]) -> str:
    """The whole snapshot: `ended` holds (entry, `ended_json` text) pairs, `retired` the
    `retired_json` texts."""
    values = ",".join(f'"{entry}":{text}' for entry, text in ended)
    return f'{{"turnstile-snapshot":{_VERSION},"state":{state_json(state)},"ended":{{{values}}},"retired":[{",".join(retired)}]}}'


# ---------------------------------------------------------------------------------------------
# Reading


def _record(value: Any, name: str, known: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be an object, not {type(value).__name__}")
    for k in value:
        if k not in known:
            raise ValueError(f"{name} has an unknown field {k!r}")
    return value


def _array(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{name} must be an array, not {type(value).__name__}")
    return value


def _string(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, not {type(value).__name__}")
    return value


def _u32(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0xFFFF_FFFF:
        raise ValueError(f"{name} must be a u32 number, got {value!r}")
    return value


def _u64_text(value: Any, name: str) -> int:
    if not isinstance(value, str) or not value.isascii() or not value.isdigit() or (len(value) > 1 and value[0] == "0"):
        raise ValueError(f"{name} must be a u64 as a decimal string, got {value!r}")
    n = int(value)
    if n > 0xFFFF_FFFF_FFFF_FFFF:
        raise ValueError(f"{name} must be a u64 as a decimal string, got {value!r}")
    return n


def _one_of(value: Any, name: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value  # type: ignore[no-any-return]


_PLAIN_REASONS = ("rejected", "skipped", "failed", "cancelled", "interrupted")


def reason_from_json(value: Any, name: str) -> Reason:
    if isinstance(value, str):
        return Reason(ReasonKind(_one_of(value, name, _PLAIN_REASONS)))
    r = _record(value, name, ("stopped", "rate-limited", "timed-out"))
    if len(r) != 1:
        raise ValueError(f"{name} must have exactly one field, got {len(r)}")
    if "stopped" in r:
        return Reason(ReasonKind.STOPPED, after=_u32(r["stopped"], f"{name}.stopped"))
    if "rate-limited" in r:
        return Reason(ReasonKind.RATE_LIMITED, retries=_u32(r["rate-limited"], f"{name}.rate-limited"))
    cause = _one_of(r["timed-out"], f"{name}.timed-out", ("deadline", "cancelled"))
    return Reason(ReasonKind.TIMED_OUT, cause=AbortCause.CANCEL if cause == "cancelled" else AbortCause.DEADLINE)


def _entry_from_json(value: Any, name: str) -> SavedEntry:
    e = _record(value, name, ("operation", "state"))
    operation = _u32(e.get("operation"), f"{name}.operation")
    s = e.get("state")
    if s == "started":
        return SavedEntry(operation, Saved.STARTED)
    s = _record(s, f"{name}.state", ("ended", "settled"))
    if "ended" in s:
        return SavedEntry(operation, Saved.ENDED, outcome=Outcome(_one_of(s["ended"], f"{name}.state.ended", ("ok", "failed"))))
    if "settled" in s:
        return SavedEntry(operation, Saved.SETTLED, reason=reason_from_json(s["settled"], f"{name}.state.settled"))
    raise ValueError(f'{name}.state must be "started", {{"ended": ...}} or {{"settled": ...}}')


def _call_from_json(value: Any, name: str) -> SavedCall:
    c = _record(value, name, ("id", "tool", "operations", "key", "keys", "entries"))
    entries = [_entry_from_json(e, f"{name}.entries[{k}]") for k, e in enumerate(_array(c.get("entries"), f"{name}.entries"))]
    ops = None if c.get("operations") is None else _u32(c["operations"], f"{name}.operations")
    return SavedCall(_string(c.get("id"), f"{name}.id"), _string(c.get("tool"), f"{name}.tool"), ops, entries, _keys_from_json(c, name))


def _keys_from_json(c: dict[str, Any], name: str) -> tuple[str, ...]:
    """A saved call's keys: `keys` (a key set's names), or `key` (one name, as 0.2 and one key
    are written), never both; neither is none."""
    if c.get("key") is not None:
        if c.get("keys") is not None:
            raise ValueError(f"{name} has both keys and key (a state saved by 0.2): give one")
        return (_string(c["key"], f"{name}.key"),)
    if c.get("keys") is None:
        return ()
    return tuple(_string(k, f"{name}.keys[{i}]") for i, k in enumerate(_array(c["keys"], f"{name}.keys")))


def _batch_from_json(value: Any, name: str) -> SavedBatch:
    b = _record(value, name, ("batch", "first", "cancelled", "limits", "calls"))
    limits = _record(b.get("limits", {}), f"{name}.limits", ("execution-ms", "abort-grace-ms"))
    cancelled = b.get("cancelled")
    if not isinstance(cancelled, bool):
        raise TypeError(f"{name}.cancelled must be a boolean, not {type(cancelled).__name__}")
    return SavedBatch(
        _u64_text(b.get("batch"), f"{name}.batch"),
        _u64_text(b.get("first"), f"{name}.first"),
        cancelled,
        [_call_from_json(c, f"{name}.calls[{j}]") for j, c in enumerate(_array(b.get("calls"), f"{name}.calls"))],
        None if limits.get("execution-ms") is None else _u32(limits["execution-ms"], f"{name}.limits.execution-ms"),
        None if limits.get("abort-grace-ms") is None else _u32(limits["abort-grace-ms"], f"{name}.limits.abort-grace-ms"),
    )


def state_from_json(value: Any, name: str = "snapshot.state") -> SavedState:
    """The snapshot's `state` read back (checked again by `Scheduler.resume`)."""
    s = _record(value, name, ("version", "policy", "next-batch", "next-entry", "batches"))
    return SavedState(
        version=_u32(s.get("version"), f"{name}.version"),
        policy=_u64_text(s.get("policy"), f"{name}.policy"),
        next_batch=_u64_text(s.get("next-batch"), f"{name}.next-batch"),
        next_entry=_u64_text(s.get("next-entry"), f"{name}.next-entry"),
        batches=[_batch_from_json(b, f"{name}.batches[{i}]") for i, b in enumerate(_array(s.get("batches"), f"{name}.batches"))],
    )


def restored_error(value: Any, name: str) -> RestoredError:
    """A saved error back as a `RestoredError` with its name and message."""
    e = _record(value, name, ("name", "message"))
    return RestoredError(_string(e.get("name"), f"{name}.name"), _string(e.get("message"), f"{name}.message"))


def _outcome_from_json(value: Any, name: str) -> EntryOutcome:
    e = _record(value, name, ("entry", "label", "status", "value", "error", "reason", "message"))
    entry = _u64_text(e.get("entry"), f"{name}.entry")
    label = _string(e.get("label"), f"{name}.label")
    status = OutcomeStatus(_one_of(e.get("status"), f"{name}.status", ("ok", "failed", "cancelled", "settled")))
    error = None if e.get("error") is None else restored_error(e["error"], f"{name}.error")
    if status is OutcomeStatus.OK:
        return EntryOutcome(entry, label, status, value=e.get("value"))
    if status is OutcomeStatus.FAILED:
        return EntryOutcome(entry, label, status, error=error or RestoredError("Error", "no error was saved"))
    if status is OutcomeStatus.CANCELLED:
        return EntryOutcome(entry, label, status, value=e.get("value"), error=error)
    reason = reason_from_json(e.get("reason"), f"{name}.reason")
    return EntryOutcome(entry, label, status, error=error, reason=reason, message=_string(e.get("message"), f"{name}.message"))


def retired_from_json(value: Any, name: str) -> tuple[int, list[CallOutcome]]:
    """A retired batch's saved outcomes, read back: (its number, its outcomes)."""
    r = _record(value, name, ("batch", "outcomes"))
    batch = _u64_text(r.get("batch"), f"{name}.batch")
    outcomes = []
    for i, cv in enumerate(_array(r.get("outcomes"), f"{name}.outcomes")):
        cn = f"{name}.outcomes[{i}]"
        c = _record(cv, cn, ("id", "tool", "entries"))
        entries = [_outcome_from_json(ev, f"{cn}.entries[{j}]") for j, ev in enumerate(_array(c.get("entries"), f"{cn}.entries"))]
        outcomes.append(CallOutcome(_string(c.get("id"), f"{cn}.id"), _string(c.get("tool"), f"{cn}.tool"), entries))
    return batch, outcomes


class Read:
    """A snapshot read back: the state, the saved values of ended entries (by entry number:
    `{"value": ...}` or `{"error": ...}`) and the retired batches not forgotten."""

    __slots__ = ("state", "ended", "retired")

    def __init__(self, state: SavedState, ended: dict[int, Any], retired: list[tuple[int, list[CallOutcome]]]) -> None:
        self.state, self.ended, self.retired = state, ended, retired


def read(text: Any) -> Read:
    """The JSON text `persist` was given (or a `SavedState`, without values)."""
    if isinstance(text, SavedState):
        return Read(text, {}, [])
    if not isinstance(text, str):
        raise TypeError(f"snapshot must be the JSON text persist was given, not {type(text).__name__}")
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise ValueError(f"snapshot must be the JSON text persist was given: {e}") from None
    top = _record(parsed, "snapshot", ("turnstile-snapshot", "state", "ended", "retired"))
    if top.get("turnstile-snapshot") != _VERSION or isinstance(top.get("turnstile-snapshot"), bool):
        raise ValueError(f'snapshot["turnstile-snapshot"] must be {_VERSION}, got {top.get("turnstile-snapshot")!r}')
    state = state_from_json(top.get("state"))
    values = top.get("ended", {})
    if not isinstance(values, dict):
        raise TypeError(f"snapshot.ended must be an object, not {type(values).__name__}")
    ended = {_u64_text(k, f"snapshot.ended key {k!r}"): v for k, v in values.items()}
    retired = [retired_from_json(r, f"snapshot.retired[{i}]") for i, r in enumerate(_array(top.get("retired", []), "snapshot.retired"))]
    return Read(state, ended, retired)


def kept(saved: Any, name: str) -> tuple[bool, Any]:
    """A saved ended value (`{"value": v}` or `{"error": {name, message}}`): (is an error,
    the value or the `RestoredError`)."""
    if not isinstance(saved, dict):
        return False, None
    if saved.get("error") is not None:
        return True, restored_error(saved["error"], f"{name}.error")
    return False, saved.get("value")

