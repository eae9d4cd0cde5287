"""The `Scheduler`: the WIT `scheduler` resource in snake_case, with typed values.

Every value is checked before it crosses (see `_check`); the component then judges what the
values mean: `submit` and `resume` raise a `TurnstileError` subclass with a stable `code`, and
`step` returns each refused input as data, by its list and position (the component names it
by what it was about; `step_on` maps it back).
"""

from __future__ import annotations

import weakref
from types import SimpleNamespace
from typing import Any, Optional, Sequence

from wasmtime.component import Variant

from . import _arguments, _check
from ._check import boolean as _bool
from ._check import enum as _enum
from ._check import string as _str
from ._check import u32 as _u32
from ._check import u64 as _u64
from ._check import u64s as _u64s
from ._component import Instance, shared_instance
from .config import Policy
from .errors import DisposedError, ResumeError, SubmitError, TurnstileError
from .types import (
    Abort,
    AbortCause,
    BatchNotApproved,
    Behind,
    Call,
    EntryState,
    EntryStatus,
    HostSettle,
    InputErrorCode,
    InputKind,
    KeyFull,
    KeyPaused,
    KeySpacing,
    Outcome,
    PermitRequest,
    PermitGranted,
    PermitRequested,
    Outputs,
    RateWindow,
    Reason,
    ReasonKind,
    RefusedInput,
    ResumeErrorCode,
    RetryAt,
    Saved,
    SavedBatch,
    SavedCall,
    SavedEntry,
    SavedState,
    Settled,
    Started,
    SubmitErrorCode,
    Submitted,
    ToolPolicy,
    Unrestored,
    UnrestoredCode,
    Wait,
)

# ---------------------------------------------------------------------------------------------
# Checks on the way in


def _lower_reason(r: Reason, what: str) -> Variant:
    if not isinstance(r, Reason):
        raise TypeError(f"{what} must be a Reason, not {type(r).__name__}")
    kind = _enum(ReasonKind, r.kind, f"{what}.kind")
    if kind is not ReasonKind.STOPPED and r.after is not None:
        raise ValueError(f"{what}.after is only for stopped")
    if kind is not ReasonKind.RATE_LIMITED and r.retries is not None:
        raise ValueError(f"{what}.retries is only for rate-limited")
    if kind is not ReasonKind.TIMED_OUT and r.cause is not None:
        raise ValueError(f"{what}.cause is only for timed-out")
    if kind is ReasonKind.TIMED_OUT:
        return Variant(kind.value, _enum(AbortCause, r.cause, f"{what}.cause").value)
    if kind is ReasonKind.STOPPED:
        return Variant(kind.value, _u32(r.after, f"{what}.after"))
    if kind is ReasonKind.RATE_LIMITED:
        return Variant(kind.value, _u32(r.retries, f"{what}.retries"))
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


def _limits(execution_ms: Any, abort_grace_ms: Any, what: str) -> SimpleNamespace:
    """A batch's time limits as the WIT `limits` record (milliseconds, each optional)."""
    return SimpleNamespace(
        **{
            "execution-ms": None if execution_ms is None else _u32(execution_ms, f"{what}.execution_ms"),
            "abort-grace-ms": None if abort_grace_ms is None else _u32(abort_grace_ms, f"{what}.abort_grace_ms"),
        }
    )


def _lower_state(state: SavedState) -> SimpleNamespace:
    if not isinstance(state, SavedState):
        raise TypeError(f"state must be a SavedState, not {type(state).__name__}")
    batches = []
    for i, b in enumerate(_check.sequence(state.batches, "state.batches")):
        w = f"state.batches[{i}]"
        if not isinstance(b, SavedBatch):
            raise TypeError(f"{w} must be a SavedBatch, not {type(b).__name__}")
        calls = []
        for j, c in enumerate(_check.sequence(b.calls, f"{w}.calls")):
            wc = f"{w}.calls[{j}]"
            if not isinstance(c, SavedCall):
                raise TypeError(f"{wc} must be a SavedCall, not {type(c).__name__}")
            ops = None if c.operations is None else _u32(c.operations, f"{wc}.operations")
            calls.append(
                SimpleNamespace(
                    id=_str(c.id, f"{wc}.id"),
                    tool=_str(c.tool, f"{wc}.tool"),
                    operations=ops,
                    entries=[_lower_saved_entry(e, f"{wc}.entries[{k}]") for k, e in enumerate(_check.sequence(c.entries, f"{wc}.entries"))],
                    keys=[_str(k, f"{wc}.keys[{n}]") for n, k in enumerate(_check.sequence(c.keys, f"{wc}.keys"))],
                )
            )
        batches.append(
            SimpleNamespace(
                batch=_u64(b.batch, f"{w}.batch"),
                first=_u64(b.first, f"{w}.first"),
                cancelled=_bool(b.cancelled, f"{w}.cancelled"),
                limits=_limits(b.execution_ms, b.abort_grace_ms, w),
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


def _reason(v: Variant) -> Reason:
    kind = ReasonKind(v.tag)
    if kind is ReasonKind.STOPPED:
        return Reason(kind, v.payload)
    if kind is ReasonKind.RATE_LIMITED:
        return Reason(kind, retries=v.payload)
    if kind is ReasonKind.TIMED_OUT:
        return Reason(kind, cause=AbortCause(v.payload))
    return Reason(kind)


def _wait(w: Any) -> Optional[Wait]:
    if w is None:
        return None
    if isinstance(w, Variant):
        # Tagged since two of its cases lift to the same Python types (u32 and u64 to int,
        # two records to a Record).
        tag, v = w.tag, w.payload
        if tag == "batch-not-approved":
            return BatchNotApproved(v)
        if tag == "key-full":
            return KeyFull(v.key, v.limit, list(v.running))
        if tag == "behind":
            return Behind(v.label, v.key)
        if tag == "key-paused":
            return KeyPaused(v.key, v.until)
        if tag == "key-spacing":
            return KeySpacing(v.key, v.until)
        if tag == "retry-at":
            return RetryAt(v)
        if tag == "permit-requested":
            return PermitRequested(v)
        if tag == "permit-granted":
            return PermitGranted(v)
        raise ValueError(f"unknown wait {tag!r}")
    # A component before 0.3 passed `wait` untagged (u32, string and record lifted to int, str
    # and a Record); the package loads only 0.3, whose `wait` always lifts tagged.
    raise ValueError(f"unknown wait {w!r}")


def _status(s: Any) -> EntryStatus:
    state = EntryState(s.state.tag)
    outcome = Outcome(s.state.payload) if state is EntryState.ENDED else None
    reason = _reason(s.state.payload) if state is EntryState.SETTLED else None
    cause = AbortCause(s.state.payload) if state is EntryState.ABORTED else None
    return EntryStatus(s.entry, s.label, s.tool, tuple(s.keys), state, outcome, reason, _wait(s.wait), getattr(s, "why", None), cause)


def _saved_entry(e: Any) -> SavedEntry:
    v = e.state
    if v is None:
        return SavedEntry(e.operation, Saved.STARTED)
    if isinstance(v, str):
        return SavedEntry(e.operation, Saved.ENDED, outcome=Outcome(v))
    return SavedEntry(e.operation, Saved.SETTLED, reason=_reason(v))


def _export_part(result: Any, k: int) -> Any:
    """`unfinished(k)`'s `result<saved-part, unfinished-error>` (both records, so it lifts as a
    `Variant` tagged `ok` or `err`): the part, or a RuntimeError, since nothing changes the
    scheduler between one export's parts here."""
    if result.tag != "ok":
        e = result.payload
        raise RuntimeError(f"unfinished part {k}: {e.code}: {e.message} (a bug in Turnstile)")
    return result.payload


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
                [SavedCall(c.id, c.tool, c.operations, [_saved_entry(e) for e in c.entries], tuple(c.keys)) for c in b.calls],
                getattr(b.limits, "execution-ms"),
                getattr(b.limits, "abort-grace-ms"),
            )
            for b in s.batches
        ],
    )


def _outputs(
    start: list[int],
    settle: list[Any],
    errors: list[Any],
    retired: list[int],
    wake_at: Optional[int] = None,
    acquire: Optional[list[Any]] = None,
    release: Optional[list[int]] = None,
    abort: Optional[list[Any]] = None,
    pause_store: Optional[list[Any]] = None,
) -> Outputs:
    requests = [
        PermitRequest(
            r.entry,
            r.key,
            r.limit,
            getattr(r, "delay-ms"),
            tuple(RateWindow(w.count, getattr(w, "per-ms"), w.burst) for w in r.rates),
            r.weight,
        )
        for r in acquire or ()
    ]
    return Outputs(
        start=start,
        settle=[Settled(s.entry, _reason(s.reason), s.message) for s in settle],
        errors=[RefusedInput(InputKind(e.input), e.index, InputErrorCode(e.code), e.message) for e in errors],
        retired=retired,
        wake_at=wake_at,
        acquire=[r.entry for r in requests],
        release=release or [],
        requests=requests,
        abort=[Abort(a.entry, AbortCause(a.cause)) for a in abort or ()],
        pause_store=[(p.key, p.until) for p in pause_store or ()],
    )


# ---------------------------------------------------------------------------------------------
# One package `step` over the component's verbs
#
# The component (WIT `turnstile:scheduler@0.3.0`) takes inputs through `on-events` and
# `on-ended`, each applied the moment it arrives, and says what to do in `next-releases(now)`.
# The package's `step` is one round over them: its inputs cross in the order the old `step`
# applied them (approve, settle as `not-run`, granted, denied, ask, answer as `on-events`; ok,
# failed, retry as `rate-limited` as `on-ended`; cancel, pause as `on-events`), consecutive
# inputs of one verb in one crossing, then `next-releases(now)`. So a round is at most four
# crossings, and one (`next-releases`) when it carries only the clock.
#
# Refusals. The component names a refused input by what it was about (an entry, a batch, a key,
# the clock), not by its position, and returns a crossing's refusals in input order. The
# package built the lists, so it maps each refusal back to the input's (list, position): within
# one crossing, every subject (an entry, a batch, a key) appears in one run of adjacent
# identical inputs at most. An input about a subject already in the crossing starts a new
# crossing, unless it is identical (same list, same payload) to the input just before it. Each
# refusal then belongs to exactly one run; of a run of n identical inputs with k refused, the
# refused are the last k (a refused input changed nothing, so the identical input right after
# it is refused too, and those before the first refused one applied). So `approve=[e, e]`
# crosses once and its refusal is the second's, while `ask=[e], answer=[e]` crosses twice. A
# refused clock (`time-backwards`, a `refused` action) is the `now` input, listed first, as
# the old `step` applied `now` first.

_ENTRY, _BATCH, _KEY = "entry", "batch", "key"  # the `about` cases

CROSSING_INPUTS_MAX = 50_000
"""Inputs in one `on-events` or `on-ended` crossing; more are sliced into several crossings.
wasmtime caps the data one call lifts and lowers at 128 MiB ("fuel allocated for hostcalls
has been exhausted", a trap that breaks the instance), wasmtime-py gives no way to raise the
cap, and a refused input comes back with its sentence: a step refusing 1,000,000 inputs in
one crossing trapped. Slicing changes nothing the component decides (each input is judged on
its own, in order); the step's `now` crosses with the first slice, and the refusals of every
slice are mapped back to (list, position) as one list."""


class _Refused:
    """A refused input with its package list and position (the old WIT `input-error`)."""

    __slots__ = ("input", "index", "code", "message")

    def __init__(self, input: str, index: int, code: str, message: str) -> None:
        self.input, self.index, self.code, self.message = input, index, code, message


class _Fields:
    """A WIT record as wasmtime-py lowers it: its fields are attributes named as the WIT spells
    them (`fan-outs`, `rate-limited`)."""

    def __init__(self, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, name.replace("_", "-"), value)


_OK, _FAILED, _RETRY = 0, 1, 2  # an `on-ended` item's kind: the `ends` list it goes to


class _Round:
    """The inputs of one package `step` on their way across, a crossing at a time, and their
    refusals mapped back to (list, position) (see above)."""

    __slots__ = ("on_events", "on_ended", "resource", "now", "errors", "crossings", "ended", "items", "meta", "seen")

    def __init__(self, on_events: Any, on_ended: Any, resource: Any, now: Optional[int]) -> None:
        self.on_events, self.on_ended, self.resource = on_events, on_ended, resource
        # The step's clock, given with its first crossing: the component judges each input at
        # the clock it comes with (a 429's wait from the 429, a cancel's grace from the cancel).
        self.now = now
        self.errors: list[_Refused] = []
        self.crossings = 0
        self.ended = False
        self.items: list[Any] = []
        # Per item: (kind, index, subject, value, payload, continues the run before it).
        self.meta: list[tuple[str, int, str, Any, Any, bool]] = []
        self.seen: set[tuple[str, Any]] = set()

    def add(self, ended: bool, kind: str, index: int, item: Any, subject: str, value: Any, payload: Any = None) -> None:
        if self.items and (ended is not self.ended or len(self.items) >= CROSSING_INPUTS_MAX):
            self.flush()
        self.ended = ended
        continues = False
        if (subject, value) in self.seen:
            k, _, s, v, p, _ = self.meta[-1]
            if k == kind and s == subject and v == value and p == payload:
                continues = True
            else:
                self.flush()
        if not continues:
            self.seen.add((subject, value))
        self.items.append(item)
        self.meta.append((kind, index, subject, value, payload, continues))

    def flush(self) -> None:
        """Sends what is gathered in one crossing and maps its refusals."""
        items = self.items
        if not items:
            return
        self.crossings += 1
        now, self.now = self.now, None
        if self.ended:
            refusals = self.on_ended(self.resource, _ends(items), now)
        else:
            refusals = self.on_events(self.resource, _events(items), now)
        # A clock that went back is refused first, and again by `next-releases`, which reports it.
        if refusals and refusals[0].about.tag == "clock":
            refusals = refusals[1:]
        if refusals:
            self._map(refusals)
        self.items = []
        self.meta = []
        self.seen = set()

    def _map(self, refusals: list[Any]) -> None:
        meta = self.meta
        n, r, total = len(meta), 0, len(refusals)
        i = 0
        while i < n and r < total:
            j = i + 1
            while j < n and meta[j][5]:
                j += 1
            _, _, subject, value, _, _ = meta[i]
            k = 0
            while k < j - i and r + k < total:
                about = refusals[r + k].about
                if about.tag != subject or about.payload != value:
                    break
                k += 1
            for t in range(j - k, j):
                refusal = refusals[r]
                r += 1
                self.errors.append(_Refused(meta[t][0], meta[t][1], refusal.code, refusal.message))
            i = j
        if r < total:
            rest = ", ".join(f"{x.about.tag} {x.about.payload} {x.code}" for x in refusals[r:])
            raise RuntimeError(f"the component refused inputs the package cannot place ({rest}; a bug in Turnstile)")


def _events(items: list[Any]) -> list[Any]:
    """The `on-events` list for a crossing's items: consecutive approvals (plain entry numbers)
    go as one `approve` event, every other item is its event."""
    events: list[Any] = []
    run: Optional[list[int]] = None
    for item in items:
        if type(item) is int:
            if run is None:
                run = []
                events.append(Variant("approve", run))
            run.append(item)
        else:
            run = None
            events.append(item)
    return events


def _ends(items: list[tuple[int, int, int]]) -> _Fields:
    """The `ends` record for a crossing's `(kind, entry, until)` items. The component applies ok,
    then failed, then rate-limited; `step_on` adds them in that order, so the refusals come
    back in the items' order."""
    ok = [e for k, e, _ in items if k == _OK]
    failed = [e for k, e, _ in items if k == _FAILED]
    limited = [_Fields(entry=e, until=u) for k, e, u in items if k == _RETRY]
    return _Fields(ok=ok, failed=failed, rate_limited=limited)


def _plain_round(on_events: Any, on_ended: Any, resource: Any, now: Optional[int], approve: Any, ok: Any, failed: Any) -> Optional[list[Any]]:
    """The common step (approvals, then ends, nothing else): at most two crossings with the
    lists as they are, and refusals placed by their entry only when there are any. The same
    crossings `_Round` would make, without its bookkeeping per input, which cost a driver round
    about a microsecond per entry. None, and nothing crossed, for an entry listed twice or lists
    longer than a crossing carries: those go through `_Round`."""
    n_ends = len(ok) + len(failed)
    if (
        len(approve) > CROSSING_INPUTS_MAX
        or n_ends > CROSSING_INPUTS_MAX
        or len(set(approve)) != len(approve)
        or (n_ends > 1 and len(set(ok).union(failed)) != n_ends)
    ):
        return None
    errors: list[Any] = []
    if approve:
        refusals = on_events(resource, [Variant("approve", list(approve))], now)
        now = None
        if refusals:
            errors += _placed(refusals, ("approve", approve))
    if n_ends:
        refusals = on_ended(resource, _Fields(ok=list(ok), failed=list(failed), rate_limited=[]), now)
        if refusals:
            errors += _placed(refusals, ("ok", ok), ("failed", failed))
    return errors


def _placed(refusals: list[Any], *lists: tuple[str, Any]) -> list[Any]:
    """Refusals of one crossing, each naming its entry, as `_Refused` items with their list and
    position (each entry is in the lists once). A clock that went back is refused first, and
    again by `next-releases`, which reports it."""
    if refusals[0].about.tag == "clock":
        refusals = refusals[1:]
    where = {e: (kind, i) for kind, values in lists for i, e in enumerate(values)}
    out = []
    for r in refusals:
        placed = where.get(r.about.payload) if r.about.tag == _ENTRY else None
        if placed is None:
            raise RuntimeError(f"the component refused an input the package cannot place ({r.about.tag} {r.about.payload} {r.code}; a bug in Turnstile)")
        out.append(_Refused(placed[0], placed[1], r.code, r.message))
    return out


_INSPECT_PART_MAX = 65536  # the most statuses one `inspect` result carries (WIT)
_ROUND_LISTS = ("abort", "pause-store", "release", "settled", "acquire", "start", "retired")


def step_on(
    on_events: Any, on_ended: Any, next_releases: Any, resource: Any, inputs: Any
) -> tuple[list[int], list[Any], list[Any], list[int], Optional[int], list[Any], list[int], list[Any], list[Any]]:
    """One package `step` (`inputs` has the old WIT `inputs` fields: lists of checked values,
    `settle` items with `entry` and `how`, `retry` with `entry` and `until`, `pause` with `key`
    and `until`) over the component's verbs: `(start, settle, errors, retired, wake_at,
    acquire, release, abort, pause_store)`, with `settle` the component's `settlement` records
    (entry, reason, message), `acquire` its `permit-request` records (entry, key, limit,
    delay-ms) and `errors` `_Refused` items, the clock's first."""
    approve, settle, granted, denied = inputs.approve, inputs.settle, inputs.granted, inputs.denied
    ask, answer, ok, failed, retry = inputs.ask, inputs.answer, inputs.ok, inputs.failed, inputs.retry
    cancel, pause, lift = inputs.cancel, inputs.pause, getattr(inputs, "lift_pause", ())
    errors: Optional[list[Any]] = None
    if (approve or ok or failed) and not (settle or granted or denied or ask or answer or retry or cancel or pause or lift):
        errors = _plain_round(on_events, on_ended, resource, inputs.now, approve, ok, failed)
    if errors is None and (approve or settle or granted or denied or ask or answer or ok or failed or retry or cancel or pause or lift):
        round = _Round(on_events, on_ended, resource, inputs.now)
        add = round.add
        for i, e in enumerate(approve):
            add(False, "approve", i, e, _ENTRY, e)
        for i, s in enumerate(settle):
            add(False, "settle", i, Variant("not-run", (s.entry, s.how)), _ENTRY, s.entry, s.how)
        for kind, values in (("granted", granted), ("denied", denied), ("ask", ask), ("answer", answer)):
            for i, e in enumerate(values):
                add(False, kind, i, Variant(kind, e), _ENTRY, e)
        for kind, values, code in (("ok", ok, _OK), ("failed", failed, _FAILED)):
            for i, e in enumerate(values):
                add(True, kind, i, (code, e, 0), _ENTRY, e)
        for i, rt in enumerate(retry):
            add(True, "retry", i, (_RETRY, rt.entry, rt.until), _ENTRY, rt.entry, rt.until)
        for i, b in enumerate(cancel):
            add(False, "cancel", i, Variant("cancel", b), _BATCH, b)
        for i, p in enumerate(pause):
            add(False, "pause", i, Variant("pause", p), _KEY, p.key, p.until)
        for i, k in enumerate(lift):
            add(False, "lift-pause", i, Variant("lift-pause", k), _KEY, k)
        round.flush()
        errors = round.errors
    if errors is None:  # no inputs: only the round
        errors = []
    out = next_releases(resource, inputs.now)
    while out.more:  # a round of more than 65536 actions crosses in parts: join them
        part = next_releases(resource, inputs.now)
        for name in _ROUND_LISTS:
            getattr(out, name).extend(getattr(part, name))
        setattr(out, "wake-at", getattr(part, "wake-at"))
        out.more = part.more
    refused = out.refused
    if refused is not None:
        errors.insert(0, _Refused("now", 0, refused.code, refused.message))
    release = [p.entry for p in out.release]
    return (
        out.start,
        out.settled,  # settlement records: entry, reason, message
        errors,
        out.retired,
        getattr(out, "wake-at"),
        out.acquire,  # permit-request records: entry, key, limit, delay-ms
        release,
        out.abort,  # abort records: entry, cause
        getattr(out, "pause-store"),  # key-pause records: key, until
    )


def _timed(value: Any, what: str, first: str, article: str, check: Any) -> list[SimpleNamespace]:
    """`(first, until)` pairs as WIT records with fields `first` and `until`."""
    out = []
    for i, pair in enumerate(_check.sequence(value, what)):
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError(f"{what}[{i}] must be {article} ({first}, until) pair, not {type(pair).__name__}")
        head, until = pair
        fields = {first: check(head, f"{what}[{i}] {first}"), "until": _u64(until, f"{what}[{i}] until")}
        out.append(SimpleNamespace(**fields))
    return out


def check_retry(retry: Any) -> list[SimpleNamespace]:
    """`(entry, until)` pairs as the WIT's `retry-after` records."""
    return _timed(retry, "retry", "entry", "an", _u64)


def check_pause(pause: Any) -> list[SimpleNamespace]:
    """`(key, until)` pairs as the WIT's `key-pause` records."""
    return _timed(pause, "pause", "key", "a", _str)


# ---------------------------------------------------------------------------------------------
# Explanations


def explain(label: str, reason: Reason, *, instance: Optional[Instance] = None) -> str:
    """The sentence for an entry settled with `reason`, to show a user or hand back to the
    model as the call's result ("not run: the batch was cancelled"); `label` is the
    entry's (`call` or `call#i`; a stopped operation's sentence names the operation it
    followed). The component writes it, so the Python and JavaScript packages say exactly the
    same. `EntryOutcome.message` and `CallSettledError` carry it already."""
    label = _str(label, "label")
    wit = _lower_reason(reason, "reason")
    return explain_in(instance if instance is not None else shared_instance(), label, wit)


def explain_in(instance: Instance, label: str, reason: Variant) -> str:
    """`explain` with checked values in `instance`; the shared instance when that one is
    broken (an explanation is still owed for every settled call)."""
    if instance.broken is None:
        try:
            return instance.func("scheduler", "explain")(label, reason)  # type: ignore[no-any-return]
        except TurnstileError:
            pass
    return shared_instance().func("scheduler", "explain")(label, reason)  # type: ignore[no-any-return]


def lower_reason(reason: Reason) -> Variant:
    """A `Reason` the package made itself, as the WIT variant (unchecked)."""
    if reason.kind is ReasonKind.STOPPED:
        return Variant("stopped", reason.after)
    if reason.kind is ReasonKind.RATE_LIMITED:
        return Variant("rate-limited", reason.retries)
    if reason.kind is ReasonKind.TIMED_OUT:
        return Variant("timed-out", AbortCause(reason.cause).value)
    return Variant(reason.kind.value)


# ---------------------------------------------------------------------------------------------
# Scheduler


class Scheduler:
    """The RFD 129 scheduler, sans-IO: `submit` adds a batch, `step` takes everything that
    happened since the last step and says what to start (over the component's `on-events`,
    `on-ended` and `next-releases`), `label`, `inspect` and `unfinished` are queries. A batch's entries are the numbers `Submitted.entries`; numbers are never
    handed out twice, so a stale one is refused, never confused with another entry.

    Each scheduler runs in a component instance of its own (unless `instance` is given), so
    nothing another object does can break it. `close()` (or `with Scheduler(policy) as s:`)
    frees it; a scheduler that is garbage-collected unclosed is freed too. A closed scheduler
    raises RuntimeError."""

    def __init__(self, policy: Policy, *, instance: Optional[Instance] = None) -> None:
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must be a Policy, not {type(policy).__name__}")
        inst = _instance(instance)
        resource = policy.resource_in(inst)
        try:
            templates = policy.templates_in(inst, resource)
            self._shared_tools = policy.shared_in(inst, resource)
            made = inst.func("scheduler", "[constructor]scheduler")(resource)
        finally:
            policy.release_in(inst, resource)  # borrowed only to build the scheduler
        self._attach(inst, made, instance is None, templates)

    def _attach(self, instance: Instance, resource: Any, owned: bool, templates: dict[str, tuple[str, ...]]) -> None:
        self._driver: Any = None  # the `Driver` that owns its steps, if any
        self._templates = templates
        if not hasattr(self, "_shared_tools"):
            self._shared_tools: dict[str, ToolPolicy] = {}
        """Tool name to its policy, for the tools whose key is shared (the driver needs them)."""
        """Tool name to the arguments its key template names, for templated tools only."""
        self.instance = instance
        self._resource = resource
        method = lambda name: instance.func("scheduler", f"[method]scheduler.{name}")  # noqa: E731
        self._submit = instance.submit_func()
        on_events, on_ended, next_releases = method("on-events"), method("on-ended"), method("next-releases")
        self._step = lambda resource, inputs: step_on(on_events, on_ended, next_releases, resource, inputs)
        self._label = method("label")
        self._inspect = method("inspect")
        self._unfinished = method("unfinished")
        # Own instance: dropping it frees everything. Shared: the resource is dropped in it.
        self._finalizer = weakref.finalize(self, _release, instance, resource, owned)

    @classmethod
    def resume(
        cls, policy: Policy, state: SavedState, *, started: Started, instance: Optional[Instance] = None
    ) -> tuple["Scheduler", list[Unrestored]]:
        """Imports what `unfinished` exported into a fresh scheduler under `policy` (the same or
        a changed one). Every live batch keeps its numbers; what ended or was settled keeps its
        response; what was pending or approved is pending; what had started is pending again or
        settled as interrupted, as `started` says. Returns the scheduler and the calls the
        policy no longer allows (the host answers those itself); raises `ResumeError` when the
        state as a whole is refused."""
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must be a Policy, not {type(policy).__name__}")
        how = _enum(Started, started, "started")
        wit = _lower_state(state)
        inst = _instance(instance)
        resource = policy.resource_in(inst)
        try:
            templates = policy.templates_in(inst, resource)
            shared_tools = policy.shared_in(inst, resource)
            result = inst.func("scheduler", "[static]scheduler.resume")(resource, wit, how.value)
        finally:
            policy.release_in(inst, resource)  # borrowed only to resume
        # result<tuple<scheduler, list<unrestored>>, resume-error> lifts untagged: a tuple or a Record.
        if not isinstance(result, tuple):
            raise ResumeError(ResumeErrorCode(result.code), result.message)
        resource, unrestored = result
        self = cls.__new__(cls)
        self._shared_tools = shared_tools
        self._attach(inst, resource, instance is None, templates)
        return self, [Unrestored(u.batch, u.call, UnrestoredCode(u.code), u.message) for u in unrestored]

    @property
    def closed(self) -> bool:
        return self._resource is None

    def _live(self) -> Any:
        if self._resource is None:
            raise DisposedError("the scheduler")
        return self._resource

    def submit(self, calls: Sequence[Call], *, execution_ms: Optional[int] = None, abort_grace_ms: Optional[int] = None) -> Submitted:
        """Adds a batch of calls in written order, all or nothing; raises `SubmitError`.

        `execution_ms` and `abort_grace_ms` are the batch's time limits, in milliseconds of the
        `now` given to `step`: an execution that ran `execution_ms` is listed in `Outputs.abort`
        (cause DEADLINE), and one aborted (deadline or cancel) that has not ended
        `abort_grace_ms` later is settled TIMED_OUT, its slot freed and its late end refused
        (`given-up`). None: no limit, and an aborted execution keeps its slot until it ends.

        Each call crosses as a WIT `call` record, with its arguments only for a tool whose key
        is a template (only the fields it names; see `Call.arguments`). A newline in an id or
        tool is refused here as `invalid-id`, and a fan-out envelope of 0 operations as
        `invalid-operations`. Arguments of a type no call can have (bytes, a set) are a
        TypeError, whatever the tool; any other value only decides the key."""
        resource = self._live()
        limits = _limits(execution_ms, abort_grace_ms, "submit")
        result = self._submit(resource, build_calls(calls, self._templates), limits)
        if type(result) is not tuple:  # result<submitted, submit-error>: the error, tagged
            raise SubmitError(SubmitErrorCode(result.payload.code), result.payload.message)
        return Submitted(*result)

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
        now: Optional[int] = None,
        retry: Sequence[tuple[int, int]] = (),
        pause: Sequence[tuple[str, int]] = (),
        granted: Sequence[int] = (),
        denied: Sequence[int] = (),
        lift_pause: Sequence[str] = (),
    ) -> Outputs:
        """One driver round: every input since the last step (entry numbers; batch numbers for
        `cancel`; `(entry, how)` pairs for `settle`). Each list applies in order, and each
        input on its own: a refused one is reported in `Outputs.errors` with its list and
        position and changes nothing; every other input still applies. Returns what to start,
        what the scheduler settled, which batches retired, and when to step again
        (`wake_at`).

        Time is the host's: the scheduler never reads a clock. `now` is the host's monotonic
        clock in milliseconds (None leaves the scheduler's clock where it was; it starts at 0;
        an earlier `now` than before is refused as `time-backwards`). `retry` holds
        `(entry, until)` pairs: executions that hit a rate limit and may run again at `until`
        (each frees its slot, pauses its key until then, and goes back to its place at the
        front of its key's queue; past its key's `retries` it is settled `rate-limited`).
        `pause` holds `(key, until)` pairs (a pause only ever extends; a key no tool declares
        is refused as `unknown-key`). `lift_pause` holds keys whose host pauses are lifted
        (a rate limit's pause stays; applied after `pause`).

        Shared keys (`ToolPolicy.shared`): an entry with room locally is listed in
        `Outputs.acquire` instead of `start`; the host asks its store for a permit and reports
        the entry in `granted` (it then starts in written order) or `denied` (the store could
        not grant it: it is settled failed without running; refused as `not-acquiring` for an
        entry not waiting for a permit). `Outputs.release` lists the permits (or requests) to
        give back. The order they apply in: approve, settle, granted, denied, ask, answer, ok,
        failed, retry, cancel, pause, then `now` (a refused `now` is listed first in `errors`).
        A retry's wait is judged by the clock as last given (the `now` of the step before).

        Crossings: the inputs go to the component's `on-events` (approve .. answer),
        `on-ended` (ok, failed, retry) and `on-events` again (cancel, pause), each only when it
        has inputs, then `next-releases(now)`: one to four calls into the component (more only
        when one entry, batch or key is named twice among the inputs of one such call, as by
        `ask` and `answer` of one entry, see `step_on`, or when one call would carry more than
        `CROSSING_INPUTS_MAX` inputs: a step of 1,000,000 inputs is twenty calls)."""
        resource = self._live()
        now = _check.opt_u64(now, "now")
        settlements = []
        for i, pair in enumerate(_check.sequence(settle, "settle")):
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise TypeError(f"settle[{i}] must be an (entry, how) pair, not {type(pair).__name__}")
            entry, how = pair
            settlements.append(
                SimpleNamespace(entry=_u64(entry, f"settle[{i}] entry"), how=_enum(HostSettle, how, f"settle[{i}] how").value)
            )
        inputs = SimpleNamespace(
            approve=_u64s(approve, "approve"),  # checked in keyword order
            settle=settlements,
            ask=_u64s(ask, "ask"),
            answer=_u64s(answer, "answer"),
            ok=_u64s(ok, "ok"),
            failed=_u64s(failed, "failed"),
            cancel=_u64s(cancel, "cancel"),
            now=now,
            retry=check_retry(retry),
            pause=check_pause(pause),
            granted=_u64s(granted, "granted"),
            denied=_u64s(denied, "denied"),
            lift_pause=[_str(k, f"lift_pause[{i}]") for i, k in enumerate(_check.sequence(lift_pause, "lift_pause"))],
        )
        return _outputs(*self._step(resource, inputs))

    def label(self, entry: int) -> Optional[str]:
        """`call` or `call#i` for a live entry; None when no live entry has this number."""
        entry = _u64(entry, "entry")
        return self._label(self._live(), entry)

    def inspect(self, batch: int) -> Optional[list[EntryStatus]]:
        """Every entry of a live batch in written order, with why each approved one waits; None
        when no live batch has this number. An execution that ignores its cancellation shows
        here as `running` for as long as it runs (and holds its key's slot)."""
        batch = _u64(batch, "batch")
        resource = self._live()
        result = self._inspect(resource, batch, 0)
        last = 0 if result is None else len(result)
        while last == _INSPECT_PART_MAX:  # a batch of more than 65536 entries, read in parts
            part = self._inspect(resource, batch, len(result)) or []
            last = len(part)
            result.extend(part)
        return None if result is None else [_status(s) for s in result]

    def unfinished(self) -> SavedState:
        """The state to persist (every live batch), for `Scheduler.resume`."""
        resource = self._live()
        first = _export_part(self._unfinished(resource, 0), 0)
        state = first.state
        for k in range(1, first.parts):  # an export of more than one part, joined
            batches = _export_part(self._unfinished(resource, k), k).state.batches
            if batches and state.batches and batches[0].batch == state.batches[-1].batch:
                state.batches[-1].calls.extend(batches[0].calls)
                batches = batches[1:]
            state.batches.extend(batches)
        return _saved_state(state)

    def close(self) -> None:
        """Frees the scheduler (and its own instance); later use raises RuntimeError. Closing
        twice is fine."""
        if self._resource is None:
            return
        self._resource = None
        self._finalizer()

    def __enter__(self) -> "Scheduler":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def build_calls(calls: Any, templates: dict[str, tuple[str, ...]]) -> _Fields:
    """The calls as `submit-batch` takes them, packed (the WIT `batch`: ids and tools as two
    texts, one name per line; fan-outs and arguments listed by call index), with JSON text
    for the calls of `templates`' tools whose arguments make one; TypeError, ValueError or
    `SubmitError` for what cannot cross."""
    ids: list[str] = []
    tools: list[str] = []
    fan_outs: list[_Fields] = []
    arguments: list[_Fields] = []
    for i, c in enumerate(_check.sequence(calls, "calls")):
        if type(c) is not Call and not isinstance(c, Call):
            raise TypeError(f"calls[{i}] must be a Call, not {type(c).__name__}")
        cid, tool, ops, args = c.id, c.tool, c.operations, c.arguments
        if type(cid) is not str:
            cid = _str(cid, f"calls[{i}].id")
        if type(tool) is not str:
            tool = _str(tool, f"calls[{i}].tool")
        if args is not None:
            _arguments.check(args, f"calls[{i}].arguments")
            if templates:
                fields = templates.get(tool)
                if fields is not None:
                    text = _arguments.text(args, fields)
                    if text is not None:
                        arguments.append(_Fields(call=i, json=text))
        if ops is not None:
            ops = _u32(ops, f"calls[{i}].operations")
            if ops == 0:
                raise SubmitError(SubmitErrorCode.INVALID_OPERATIONS, f"calls[{i}] ({cid}): a fan-out envelope of no operations")
            fan_outs.append(_Fields(call=i, operations=ops))
        ids.append(cid)
        tools.append(tool)
    ids_text = "\n".join(ids)
    tools_text = "\n".join(tools)
    if ids and (ids_text.count("\n") + tools_text.count("\n") != 2 * (len(ids) - 1)):
        # more newlines than the join put there: a name has one
        for i, (cid, tool) in enumerate(zip(ids, tools)):
            if "\n" in cid or "\n" in tool:
                raise SubmitError(SubmitErrorCode.INVALID_ID, f"calls[{i}]: an id or tool name has a newline")
    try:
        (ids_text + tools_text).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: name the call
        for i, (cid, tool) in enumerate(zip(ids, tools)):
            _str(cid, f"calls[{i}].id")
            _str(tool, f"calls[{i}].tool")
    end = "\n" if ids else ""
    return _Fields(ids=ids_text + end, tools=tools_text + end, fan_outs=fan_outs, arguments=arguments)


def _instance(instance: Optional[Instance]) -> Instance:
    if instance is None:
        return Instance()
    if not isinstance(instance, Instance):
        raise TypeError(f"instance must be an Instance, not {type(instance).__name__}")
    return instance


def _release(instance: Instance, resource: Any, owned: bool) -> None:
    """Frees a scheduler or controller: its resource is dropped in the guest (an instance of
    its own then goes when the last reference to it does)."""
    try:
        instance.drop(resource)
    except Exception:  # a broken instance: nothing to free
        pass
