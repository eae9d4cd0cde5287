"""Policy, Scheduler and Admission: the WIT surface in snake_case, with typed values."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Iterable, Optional, Sequence, Union

from ._component import Instance, default_instance
from .types import (
    AdmissionClass,
    Call,
    ConfigError,
    Diagnostic,
    EntryStatus,
    Finished,
    HostSettle,
    KeyFull,
    Label,
    Outcome,
    Reason,
    Releases,
    Settlement,
    ShutdownReport,
    Span,
    ToolPolicy,
    TurnstileError,
)


def _get(record: Any, name: str) -> Any:
    return getattr(record, name)


def _raise_if_error(result: Any) -> Any:
    """`result<T, error>` comes back untagged (an error is a record with `code` and `message`),
    except when T is a record too: then it is a `Variant` tagged `ok` or `err`."""
    if getattr(result, "tag", None) in ("ok", "err") and hasattr(result, "payload"):
        if result.tag == "err":
            raise TurnstileError(result.payload.code, result.payload.message)
        return result.payload
    if result is not None and hasattr(result, "code") and hasattr(result, "message") and not isinstance(result, (list, int, str)):
        raise TurnstileError(result.code, result.message)
    return result


def _diagnostic(d: Any) -> Diagnostic:
    labels = [
        Label(
            span=Span(
                layer=l.span.layer,
                layer_name=_get(l.span, "layer-name"),
                start=l.span.start,
                end=l.span.end,
                line=l.span.line,
                column=l.span.column,
            ),
            message=l.message,
        )
        for l in d.labels
    ]
    return Diagnostic(d.code, d.message, list(d.path), list(d.tools), labels, d.help, d.rendered)


def _reason(v: Any) -> Reason:
    return Reason(v.tag, v.payload if v.tag == "stopped" else None)


def _call(c: Call) -> SimpleNamespace:
    return SimpleNamespace(
        id=c.id,
        tool=c.tool,
        operations=c.operations,
        finished=[SimpleNamespace(operation=f.operation, failed=f.failed) for f in c.finished],
    )


def entry_labels(call: Call) -> list[str]:
    """`id` for a plain call, `id#0` .. `id#(n-1)` for a fan-out call."""
    if call.operations is None:
        return [call.id]
    return [f"{call.id}#{i}" for i in range(call.operations)]


LayerLike = Union[tuple[str, str], Any]


class Policy:
    """A validated config. Build one with `Policy.resolve`."""

    def __init__(self, instance: Instance, resource: Any) -> None:
        self.instance = instance
        self._resource = resource

    @classmethod
    def resolve(cls, layers: Iterable[LayerLike], instance: Optional[Instance] = None) -> "Policy":
        """Resolves `(name, text)` layers, lowest precedence first; raises `ConfigError`."""
        inst = instance or default_instance()
        wit = []
        for layer in layers:
            name, text = layer if isinstance(layer, tuple) else (layer.name, layer.text)
            wit.append(SimpleNamespace(name=name, text=text))
        result = inst.func("config", "[static]policy.resolve")(wit)
        if isinstance(result, list):
            raise ConfigError([_diagnostic(d) for d in result])
        return cls(inst, result)

    def tool(self, name: str) -> ToolPolicy:
        """A tool's policy; an unconfigured tool is unbounded without fan-out."""
        return _tool(self.instance.func("config", "[method]policy.tool")(self._resource, name))

    def tools(self) -> list[ToolPolicy]:
        """Every configured tool, in configuration order."""
        return [_tool(t) for t in self.instance.func("config", "[method]policy.tools")(self._resource)]

    @property
    def resource(self) -> Any:
        return self._resource


def _tool(t: Any) -> ToolPolicy:
    c = t.concurrency
    return ToolPolicy(
        name=t.name,
        key=c.key if c is not None else None,
        limit=c.limit if c is not None else None,
        fan_out=_get(t, "fan-out"),
        on_error=_get(t, "on-error"),
    )


class Scheduler:
    """The RFD 129 scheduler. Inputs raise `TurnstileError` on a host mistake and change
    nothing; drain `next_releases()` after each input."""

    def __init__(self, policy: Policy) -> None:
        self.instance = policy.instance
        self._f = lambda name: self.instance.func("scheduler", f"[method]scheduler.{name}")
        self._resource = self.instance.func("scheduler", "[constructor]scheduler")(policy.resource)

    @classmethod
    def resume(cls, policy: Policy, state: Sequence[tuple[int, Sequence[Call]]]) -> "Scheduler":
        """Imports what `unfinished()` exported: a fresh scheduler with each batch submitted
        again (after a crash or a restart); batches are renumbered from 1."""
        self = cls.__new__(cls)
        self.instance = policy.instance
        self._f = lambda name: self.instance.func("scheduler", f"[method]scheduler.{name}")
        wit = [SimpleNamespace(batch=b, calls=[_call(c) for c in calls]) for b, calls in state]
        self._resource = _raise_if_error(self.instance.func("scheduler", "[static]scheduler.resume")(policy.resource, wit))
        return self

    def submit_batch(self, calls: Sequence[Call]) -> int:
        """Submits a batch; returns its id. Batches without finished operations and without
        newlines in ids or tools cross in the packed form (two strings and a list of ints), which
        wasmtime-py converts far faster than one record per call."""
        packable = bool(calls) and all(
            not c.finished and "\n" not in c.id and "\n" not in c.tool and c.operations != 0 for c in calls
        )
        if packable:
            return _raise_if_error(
                self._f("submit-packed")(
                    self._resource,
                    "\n".join(c.id for c in calls),
                    "\n".join(c.tool for c in calls),
                    [c.operations or 0 for c in calls],
                )
            )
        return _raise_if_error(self._f("submit-batch")(self._resource, [_call(c) for c in calls]))

    def submit_packed(self, ids: Sequence[str], tools: Sequence[str], operations: Sequence[int]) -> int:
        """The WIT's `submit-packed`: ids and tools joined by newlines, 0 operations for a plain
        call. `submit_batch` picks it by itself when it can."""
        return _raise_if_error(
            self._f("submit-packed")(self._resource, "\n".join(ids), "\n".join(tools), list(operations))
        )

    def approve(self, entry: str) -> None:
        _raise_if_error(self._f("approve")(self._resource, entry))

    def approve_many(self, entries: Sequence[str]) -> None:
        """Approves several entries in one crossing, all or nothing."""
        _raise_if_error(self._f("approve-many")(self._resource, list(entries)))

    def on_ended_many(self, ends: Sequence[tuple[str, Outcome]]) -> None:
        """Reports several ends in one crossing, all or nothing."""
        wit = [SimpleNamespace(entry=e, outcome=o) for e, o in ends]
        _raise_if_error(self._f("on-ended-many")(self._resource, wit))

    def batch_entries(self, batch: int) -> tuple[int, int]:
        """The ids of a batch's entries: `(first, count)`, in written order."""
        r = _raise_if_error(self._f("batch-entries")(self._resource, batch))
        return r.first, r.count

    def approve_ids(self, entries: Sequence[int]) -> None:
        """`approve_many` by entry id: a list of ints, no strings."""
        _raise_if_error(self._f("approve-ids")(self._resource, list(entries)))

    def on_ended_ids(self, ok: Sequence[int], failed: Sequence[int] = ()) -> None:
        """`on_ended_many` by entry id: every `ok` entry, then every `failed` one."""
        _raise_if_error(self._f("on-ended-ids")(self._resource, list(ok), list(failed)))

    def next_release_ids(self) -> tuple[list[int], list[tuple[int, Reason]]]:
        """`next_releases` by entry id; both drain the same queue."""
        return self._ids(self._f("next-release-ids")(self._resource))

    def approve_next(self, entries: Sequence[int]) -> tuple[list[int], list[tuple[int, Reason]]]:
        """`approve_ids` then `next_release_ids`, in one crossing."""
        return self._ids(_raise_if_error(self._f("approve-next")(self._resource, list(entries))))

    def on_ended_next(self, ok: Sequence[int], failed: Sequence[int] = ()) -> tuple[list[int], list[tuple[int, Reason]]]:
        """`on_ended_ids` then `next_release_ids`, in one crossing: a driver's whole round."""
        return self._ids(_raise_if_error(self._f("on-ended-next")(self._resource, list(ok), list(failed))))

    @staticmethod
    def _ids(r: Any) -> tuple[list[int], list[tuple[int, Reason]]]:
        return list(r.start), [(x.entry, _reason(x.reason)) for x in r.settle]

    def label(self, entry: int) -> str:
        return _raise_if_error(self._f("label")(self._resource, entry))

    def settle(self, entry: str, how: HostSettle) -> None:
        _raise_if_error(self._f("settle")(self._resource, entry, how))

    def begin_question(self, entry: str) -> None:
        _raise_if_error(self._f("begin-question")(self._resource, entry))

    def end_question(self, entry: str) -> None:
        _raise_if_error(self._f("end-question")(self._resource, entry))

    def on_ended(self, entry: str, outcome: Outcome) -> None:
        _raise_if_error(self._f("on-ended")(self._resource, entry, outcome))

    def cancel_batch(self, batch: int) -> None:
        _raise_if_error(self._f("cancel-batch")(self._resource, batch))

    def next_releases(self) -> Releases:
        r = self._f("next-releases")(self._resource)
        return Releases(list(r.start), [Settlement(s.entry, _reason(s.reason)) for s in r.settle])

    def inspect(self, batch: int) -> list[EntryStatus]:
        result = _raise_if_error(self._f("inspect")(self._resource, batch))
        return [_status(s) for s in result]

    def unfinished(self) -> list[tuple[int, list[Call]]]:
        out = []
        for b in self._f("unfinished")(self._resource):
            calls = [
                Call(c.id, c.tool, c.operations, [Finished(f.operation, f.failed) for f in c.finished])
                for c in b.calls
            ]
            out.append((b.batch, calls))
        return out


def _status(s: Any) -> EntryStatus:
    tag, payload = s.state.tag, s.state.payload
    reason = None
    if tag == "ended":
        state = f"ended-{payload}"
    elif tag == "settled":
        reason = _reason(payload)
        state = reason.kind
    else:
        state = tag
    wait: Any = None
    if s.wait is not None:
        # wasmtime-py passes a variant whose cases have distinct payload types untagged: the
        # payload alone (int, str or record) says which case it is.
        w = s.wait
        tag, val = (w.tag, w.payload) if hasattr(w, "tag") else (
            "batch-not-approved" if isinstance(w, int) else "behind" if isinstance(w, str) else "key-full",
            w,
        )
        if tag == "key-full":
            wait = ("key-full", KeyFull(val.key, val.limit, list(val.running)))
        else:
            wait = (tag, val)
    return EntryStatus(s.entry, s.tool, s.key, state, reason, wait)


class Admission:
    """Admission control for one MCP connection (one binding)."""

    def __init__(self, max_concurrent: int, allow_parallel: bool = False, instance: Optional[Instance] = None) -> None:
        self.instance = instance or default_instance()
        self._f = lambda name: self.instance.func("admission", f"[method]admission.{name}")
        config = SimpleNamespace(**{"max-concurrent": max(0, min(max_concurrent, 2**32 - 1)), "allow-parallel": allow_parallel})
        self._resource = self.instance.func("admission", "[constructor]admission")(config)

    def begin(self, id: str, cls: AdmissionClass, parent: Optional[str] = None) -> None:
        _raise_if_error(self._f("begin")(self._resource, id, cls, parent))

    def end(self, id: str) -> None:
        _raise_if_error(self._f("end")(self._resource, id))

    def abandon(self, id: str) -> None:
        _raise_if_error(self._f("abandon")(self._resource, id))

    def shutdown(self) -> ShutdownReport:
        r = self._f("shutdown")(self._resource)
        return ShutdownReport(list(r.cancel), list(r.refused))

    def next_admissions(self) -> list[str]:
        return list(self._f("next-admissions")(self._resource))

    def in_flight(self) -> int:
        return self._f("in-flight")(self._resource)
