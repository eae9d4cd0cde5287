"""Policy, Scheduler and Admission: the WIT surface in snake_case, with typed values.

Every value is checked here before it crosses into wasmtime-py: a wrong type raises TypeError,
an int outside its WIT width or an unknown enum name raises ValueError. (wasmtime-py would wrap
the int silently, and an unknown enum name makes the instance unusable.) The component then
judges what the values mean: `submit`, `resume` and admission calls raise a `TurnstileError`
subclass with a stable `code`; `step` returns each refused input as data.
"""

from __future__ import annotations

from enum import Enum
from types import SimpleNamespace
from typing import Any, Iterable, Optional, Sequence, TypeVar, Union

from wasmtime.component import Variant

from ._component import Instance, default_instance
from .types import (
    AdmissionClass,
    AdmissionError,
    AdmissionErrorCode,
    BatchNotApproved,
    Behind,
    Call,
    ConfigError,
    Diagnostic,
    EntryState,
    EntryStatus,
    HostSettle,
    InputErrorCode,
    InputKind,
    KeyFull,
    Label,
    OnError,
    Outcome,
    Outputs,
    Reason,
    ReasonKind,
    RefusedInput,
    ResumeError,
    ResumeErrorCode,
    Saved,
    SavedBatch,
    SavedCall,
    SavedEntry,
    SavedState,
    Settled,
    ShutdownReport,
    Span,
    Started,
    SubmitError,
    SubmitErrorCode,
    Submitted,
    ToolPolicy,
    Unrestored,
    UnrestoredCode,
    Wait,
)

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1

E = TypeVar("E", bound=Enum)

# ---------------------------------------------------------------------------------------------
# Checks on the way in


def _uint(value: Any, bits: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not 0 <= value < 1 << bits:
        raise ValueError(f"{what} must be in 0..{(1 << bits) - 1}, not {value}")
    return int(value)


def _u32(value: Any, what: str) -> int:
    return _uint(value, 32, what)


def _u64(value: Any, what: str) -> int:
    return _uint(value, 64, what)


def _u64s(values: Iterable[Any], what: str) -> list[int]:
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of ints, not {type(values).__name__}")
    out = list(values)
    for v in out:
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{what} must hold ints, not {type(v).__name__}")
    if out and (min(out) < 0 or max(out) > U64_MAX):
        raise ValueError(f"{what} must hold numbers in 0..{U64_MAX}")
    return out


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be a bool, not {type(value).__name__}")
    return value


def _enum(cls: type[E], value: Any, what: str) -> E:
    """A member of `cls` from a member or its WIT name; ValueError for anything else."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a {cls.__name__} or str, not {type(value).__name__}")
    try:
        return cls(value)
    except ValueError:
        names = ", ".join(m.value for m in cls)  # type: ignore[attr-defined]
        raise ValueError(f"{what} must be one of {names}, not {value!r}") from None


def _lower_reason(r: Reason, what: str) -> Variant:
    if not isinstance(r, Reason):
        raise TypeError(f"{what} must be a Reason, not {type(r).__name__}")
    kind = _enum(ReasonKind, r.kind, f"{what}.kind")
    if kind is ReasonKind.STOPPED:
        return Variant(kind.value, _u32(r.after, f"{what}.after"))
    if r.after is not None:
        raise ValueError(f"{what}.after is only for stopped")
    return Variant(kind.value)


def _lower_saved_entry(e: SavedEntry, what: str) -> SimpleNamespace:
    if not isinstance(e, SavedEntry):
        raise TypeError(f"{what} must be a SavedEntry, not {type(e).__name__}")
    state = _enum(Saved, e.state, f"{what}.state")
    # wasmtime-py passes `saved` untagged (its cases lift to distinct Python types): None is
    # `started`, a str is `ended(outcome)`, a Variant is `settled(reason)`.
    if state is Saved.STARTED:
        wit: Any = None
    elif state is Saved.ENDED:
        wit = _enum(Outcome, e.outcome, f"{what}.outcome").value
    else:
        wit = _lower_reason(e.reason, f"{what}.reason")  # type: ignore[arg-type]
    if (state is not Saved.ENDED and e.outcome is not None) or (state is not Saved.SETTLED and e.reason is not None):
        raise ValueError(f"{what}: outcome goes with ended, reason with settled")
    return SimpleNamespace(operation=_u32(e.operation, f"{what}.operation"), state=wit)


def _lower_state(state: SavedState) -> SimpleNamespace:
    if not isinstance(state, SavedState):
        raise TypeError(f"state must be a SavedState, not {type(state).__name__}")
    batches = []
    for i, b in enumerate(state.batches):
        w = f"state.batches[{i}]"
        calls = []
        for j, c in enumerate(b.calls):
            wc = f"{w}.calls[{j}]"
            ops = None if c.operations is None else _u32(c.operations, f"{wc}.operations")
            calls.append(
                SimpleNamespace(
                    id=_str(c.id, f"{wc}.id"),
                    tool=_str(c.tool, f"{wc}.tool"),
                    operations=ops,
                    entries=[_lower_saved_entry(e, f"{wc}.entries[{k}]") for k, e in enumerate(c.entries)],
                )
            )
        batches.append(
            SimpleNamespace(
                batch=_u64(b.batch, f"{w}.batch"),
                first=_u64(b.first, f"{w}.first"),
                cancelled=_bool(b.cancelled, f"{w}.cancelled"),
                calls=calls,
            )
        )
    return SimpleNamespace(
        **{
            "version": _u32(state.version, "state.version"),
            "policy": _u64(state.policy, "state.policy"),
            "next-batch": _u64(state.next_batch, "state.next_batch"),
            "next-entry": _u64(state.next_entry, "state.next_entry"),
            "batches": batches,
        }
    )


# ---------------------------------------------------------------------------------------------
# Conversions on the way out (see the WIT; wasmtime-py passes a variant untagged when its cases
# lift to distinct Python types, and as a `Variant` otherwise)


def _diagnostic(d: Any) -> Diagnostic:
    labels = [
        Label(
            span=Span(
                layer=l.span.layer,
                layer_name=getattr(l.span, "layer-name"),
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


def _tool(t: Any) -> ToolPolicy:
    c = t.concurrency
    return ToolPolicy(
        name=t.name,
        key=c.key if c is not None else None,
        limit=c.limit if c is not None else None,
        fan_out=getattr(t, "fan-out"),
        on_error=OnError(getattr(t, "on-error")),
    )


def _reason(v: Variant) -> Reason:
    kind = ReasonKind(v.tag)
    return Reason(kind, v.payload if kind is ReasonKind.STOPPED else None)


def _wait(w: Any) -> Optional[Wait]:
    # `wait` is untagged: u32, string and record lift to int, str and a Record.
    if w is None:
        return None
    if isinstance(w, int):
        return BatchNotApproved(w)
    if isinstance(w, str):
        return Behind(w)
    return KeyFull(w.key, w.limit, list(w.running))


def _status(s: Any) -> EntryStatus:
    state = EntryState(s.state.tag)
    outcome = Outcome(s.state.payload) if state is EntryState.ENDED else None
    reason = _reason(s.state.payload) if state is EntryState.SETTLED else None
    return EntryStatus(s.entry, s.label, s.tool, s.key, state, outcome, reason, _wait(s.wait))


def _saved_entry(e: Any) -> SavedEntry:
    v = e.state
    if v is None:
        return SavedEntry(e.operation, Saved.STARTED)
    if isinstance(v, str):
        return SavedEntry(e.operation, Saved.ENDED, outcome=Outcome(v))
    return SavedEntry(e.operation, Saved.SETTLED, reason=_reason(v))


def _saved_state(s: Any) -> SavedState:
    return SavedState(
        version=s.version,
        policy=s.policy,
        next_batch=getattr(s, "next-batch"),
        next_entry=getattr(s, "next-entry"),
        batches=[
            SavedBatch(
                b.batch,
                b.first,
                b.cancelled,
                [SavedCall(c.id, c.tool, c.operations, [_saved_entry(e) for e in c.entries]) for c in b.calls],
            )
            for b in s.batches
        ],
    )


def _outputs(o: Any) -> Outputs:
    return Outputs(
        start=o.start,
        settle=[Settled(s.entry, _reason(s.reason)) for s in o.settle] if o.settle else [],
        errors=[RefusedInput(InputKind(e.input), e.index, InputErrorCode(e.code), e.message) for e in o.errors]
        if o.errors
        else [],
        retired=o.retired,
    )


# ---------------------------------------------------------------------------------------------
# Policy


LayerLike = Union[tuple[str, str], Any]


class Policy:
    """A validated config. Build one with `Policy.resolve`; immutable, and any number of
    schedulers can be built from one."""

    def __init__(self, instance: Instance, resource: Any) -> None:
        self.instance = instance
        self._resource = resource

    @classmethod
    def resolve(cls, layers: Iterable[LayerLike], instance: Optional[Instance] = None) -> "Policy":
        """Resolves `(name, text)` layers (or objects with `.name` and `.text`), lowest
        precedence first; raises `ConfigError` with every diagnostic."""
        inst = instance or default_instance()
        wit = []
        for i, layer in enumerate(layers):
            name, text = layer if isinstance(layer, tuple) else (layer.name, layer.text)
            wit.append(SimpleNamespace(name=_str(name, f"layers[{i}].name"), text=_str(text, f"layers[{i}].text")))
        result = inst.func("config", "[static]policy.resolve")(wit)
        if isinstance(result, list):
            raise ConfigError([_diagnostic(d) for d in result])
        return cls(inst, result)

    def tool(self, name: str) -> ToolPolicy:
        """A tool's policy; an unconfigured tool is unbounded without fan-out."""
        return _tool(self.instance.func("config", "[method]policy.tool")(self._resource, _str(name, "name")))

    def tools(self) -> list[ToolPolicy]:
        """Every configured tool, in configuration order."""
        return [_tool(t) for t in self.instance.func("config", "[method]policy.tools")(self._resource)]

    def fingerprint(self) -> int:
        """What the policy means to a scheduler, as 64 bits: equal for policies that schedule
        alike. A saved state records it (``SavedState.policy``), so a host can tell before
        ``resume`` whether the policy changed since the state was saved."""
        return int(self.instance.func("config", "[method]policy.fingerprint")(self._resource))

    def close(self) -> None:
        """Frees the policy in the component; schedulers built from it keep working."""
        self.instance.drop(self._resource)

    @property
    def resource(self) -> Any:
        return self._resource


# ---------------------------------------------------------------------------------------------
# Scheduler


class Scheduler:
    """The RFD 129 scheduler, sans-IO: `submit` adds a batch, `step` takes everything that
    happened since the last step and says what to start, `label`, `inspect` and `unfinished`
    are queries. A batch's entries are the numbers `Submitted.entries`; numbers are never
    handed out twice, so a stale one is refused, never confused with another entry."""

    def __init__(self, policy: Policy) -> None:
        self._bind(policy.instance)
        self._resource = policy.instance.func("scheduler", "[constructor]scheduler")(policy.resource)

    def _bind(self, instance: Instance) -> None:
        self.instance = instance
        method = lambda name: instance.func("scheduler", f"[method]scheduler.{name}")  # noqa: E731
        self._submit = method("submit")
        self._step = method("step")
        self._label = method("label")
        self._inspect = method("inspect")
        self._unfinished = method("unfinished")

    @classmethod
    def resume(cls, policy: Policy, state: SavedState, *, started: Started) -> tuple["Scheduler", list[Unrestored]]:
        """Imports what `unfinished` exported into a fresh scheduler under `policy` (the same or
        a changed one). Every live batch keeps its numbers; what ended or was settled keeps its
        response; what was pending or approved is pending; what had started is pending again or
        settled as interrupted, as `started` says. Returns the scheduler and the calls the
        policy no longer allows (the host answers those itself); raises `ResumeError` when the
        state as a whole is refused."""
        how = _enum(Started, started, "started")
        wit = _lower_state(state)
        result = policy.instance.func("scheduler", "[static]scheduler.resume")(policy.resource, wit, how.value)
        # result<tuple<scheduler, list<unrestored>>, resume-error> lifts untagged: a tuple or a Record.
        if not isinstance(result, tuple):
            raise ResumeError(ResumeErrorCode(result.code), result.message)
        resource, unrestored = result
        self = cls.__new__(cls)
        self._bind(policy.instance)
        self._resource = resource
        return self, [Unrestored(u.batch, u.call, UnrestoredCode(u.code), u.message) for u in unrestored]

    def submit(self, calls: Sequence[Call]) -> Submitted:
        """Adds a batch of calls in written order, all or nothing; raises `SubmitError`.

        The calls cross packed: ids and tools newline-joined, one operation count per call (0
        for a plain call). So a newline in an id or tool is refused here as `invalid-id`, and a
        fan-out envelope of 0 operations (which would read as a plain call) as
        `invalid-operations`."""
        ids, tools, operations = [], [], []
        for i, c in enumerate(calls):
            if not isinstance(c, Call):
                raise TypeError(f"calls[{i}] must be a Call, not {type(c).__name__}")
            cid, tool = _str(c.id, f"calls[{i}].id"), _str(c.tool, f"calls[{i}].tool")
            if "\n" in cid or "\n" in tool:
                raise SubmitError(SubmitErrorCode.INVALID_ID, f"calls[{i}]: an id or tool name has a newline")
            if c.operations is None:
                operations.append(0)
            else:
                n = _u32(c.operations, f"calls[{i}].operations")
                if n == 0:
                    raise SubmitError(SubmitErrorCode.INVALID_OPERATIONS, f"calls[{i}] ({cid}): a fan-out envelope of no operations")
                operations.append(n)
            ids.append(cid)
            tools.append(tool)
        result = self._submit(self._resource, "\n".join(ids), "\n".join(tools), operations)
        # result<submitted, submit-error>: two records, so it lifts tagged.
        if result.tag == "err":
            raise SubmitError(SubmitErrorCode(result.payload.code), result.payload.message)
        r = result.payload
        return Submitted(r.batch, r.first, r.count)

    def step(
        self,
        *,
        approve: Sequence[int] = (),
        settle: Sequence[tuple[int, HostSettle]] = (),
        ask: Sequence[int] = (),
        answer: Sequence[int] = (),
        ok: Sequence[int] = (),
        failed: Sequence[int] = (),
        cancel: Sequence[int] = (),
    ) -> Outputs:
        """One driver round: every input since the last step (entry numbers; batch numbers for
        `cancel`; `(entry, how)` pairs for `settle`). Inputs apply in the order of the keywords
        above, each list in order, and each on its own: a refused one is reported in
        `Outputs.errors` with its list and position and changes nothing; every other input
        still applies. Returns what to start, what the scheduler settled, and which batches
        retired."""
        settlements = []
        for i, pair in enumerate(settle):
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise TypeError(f"settle[{i}] must be an (entry, how) pair")
            entry, how = pair
            settlements.append(
                SimpleNamespace(entry=_u64(entry, f"settle[{i}] entry"), how=_enum(HostSettle, how, f"settle[{i}] how").value)
            )
        inputs = SimpleNamespace(
            approve=_u64s(approve, "approve"),
            settle=settlements,
            ask=_u64s(ask, "ask"),
            answer=_u64s(answer, "answer"),
            ok=_u64s(ok, "ok"),
            failed=_u64s(failed, "failed"),
            cancel=_u64s(cancel, "cancel"),
        )
        return _outputs(self._step(self._resource, inputs))

    def label(self, entry: int) -> Optional[str]:
        """`call` or `call#i` for a live entry; None when no live entry has this number."""
        return self._label(self._resource, _u64(entry, "entry"))

    def inspect(self, batch: int) -> Optional[list[EntryStatus]]:
        """Every entry of a live batch in written order, with why each approved one waits; None
        when no live batch has this number."""
        result = self._inspect(self._resource, _u64(batch, "batch"))
        return None if result is None else [_status(s) for s in result]

    def unfinished(self) -> SavedState:
        """The state to persist (every live batch), for `Scheduler.resume`."""
        return _saved_state(self._unfinished(self._resource))

    def close(self) -> None:
        """Frees the scheduler in the component; it must not be used afterwards."""
        self.instance.drop(self._resource)


# ---------------------------------------------------------------------------------------------
# Admission


class Admission:
    """Admission control for one binding (one shared MCP connection). `begin` returns a ticket
    no other request of the controller ever gets; `end` and `abandon` take it."""

    def __init__(self, max_concurrent: int, allow_parallel: bool = False, instance: Optional[Instance] = None) -> None:
        """`max_concurrent` bounds requests over every class (the component clamps it to at
        least 1); tool calls run one at a time unless `allow_parallel`."""
        self.instance = inst = instance or default_instance()
        config = SimpleNamespace(
            **{
                "max-concurrent": _u32(max_concurrent, "max_concurrent"),
                "allow-parallel": _bool(allow_parallel, "allow_parallel"),
            }
        )
        self._resource = inst.func("admission", "[constructor]admission")(config)
        method = lambda name: inst.func("admission", f"[method]admission.{name}")  # noqa: E731
        self._begin = method("begin")
        self._end = method("end")
        self._abandon = method("abandon")
        self._shutdown = method("shutdown")
        self._next = method("next-admissions")
        self._in_flight = method("in-flight")

    def begin(self, id: str, cls: AdmissionClass, parent: Optional[int] = None) -> int:
        """Asks to admit a request (`id` names it in messages and is unique among live
        requests); it is admitted now or queued, and `next_admissions` reports it either way.
        `parent` is the ticket of the in-flight call a re-entrant call descends from. Returns
        the request's ticket; raises `AdmissionError`."""
        klass = _enum(AdmissionClass, cls, "cls")
        p = None if parent is None else _u64(parent, "parent")
        result = self._begin(self._resource, _str(id, "id"), klass.value, p)
        # result<u64, error> lifts untagged: an int or a Record.
        if not isinstance(result, int):
            raise AdmissionError(AdmissionErrorCode(result.code), result.message)
        return result

    def end(self, ticket: int) -> None:
        """An admitted request finished; its budget and lock are returned."""
        self._check(self._end(self._resource, _u64(ticket, "ticket")))

    def abandon(self, ticket: int) -> None:
        """A request gave up before the host learned it was admitted (queued, or admitted but
        not yet drained from `next_admissions`); it consumed nothing."""
        self._check(self._abandon(self._resource, _u64(ticket, "ticket")))

    def shutdown(self) -> ShutdownReport:
        """Refuses all further work; reports the tickets in flight (to cancel, each still needs
        its `end`) and the tickets that were queued (refused)."""
        r = self._shutdown(self._resource)
        return ShutdownReport(list(r.cancel), list(r.refused))

    def next_admissions(self) -> list[int]:
        """Drains the tickets admitted since the last call, in admission order."""
        return self._next(self._resource)

    def in_flight(self) -> int:
        """Requests in flight now (for diagnostics only)."""
        return self._in_flight(self._resource)

    def close(self) -> None:
        """Frees the controller in the component; it must not be used afterwards."""
        self.instance.drop(self._resource)

    @staticmethod
    def _check(result: Any) -> None:
        # result<_, error> lifts untagged: None or a Record.
        if result is not None:
            raise AdmissionError(AdmissionErrorCode(result.code), result.message)
