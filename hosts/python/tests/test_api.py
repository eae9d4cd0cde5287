"""The typed surface: values are checked before they cross (and the instance stays usable),
`submit` and `resume` raise typed errors, `step` reports refused inputs as data and applies the
rest, retired numbers stay unknown, state survives a round trip through JSON, and admission
tickets."""

from __future__ import annotations

import json

import pytest

from turnstile_scheduler import (
    Admission,
    AdmissionClass,
    AdmissionError,
    AdmissionErrorCode,
    Call,
    EntryState,
    HostSettle,
    InputErrorCode,
    InputKind,
    Instance,
    Outcome,
    Policy,
    Reason,
    ReasonKind,
    RefusedInput,
    ResumeError,
    ResumeErrorCode,
    Saved,
    SavedState,
    Scheduler,
    Settled,
    Started,
    SubmitError,
    SubmitErrorCode,
    UnrestoredCode,
)
from turnstile_scheduler.types import BatchNotApproved, Behind, KeyFull

NONE = 2**64 - 1
CONFIG = """
[conversation.tools.rfd]
concurrency = 1
[conversation.tools.del]
concurrency = 1
fan_out = { on_error = "stop" }
"""


def policy(text: str = CONFIG) -> Policy:
    return Policy.resolve([("test", text)], instance=Instance())


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda s: s.step(approve=[-1]), ValueError),
        (lambda s: s.step(approve=[NONE + 1]), ValueError),
        (lambda s: s.step(approve=[True]), TypeError),
        (lambda s: s.step(ok=[1.0]), TypeError),
        (lambda s: s.step(cancel="1"), TypeError),
        (lambda s: s.step(settle=[(1, "declined")]), ValueError),
        (lambda s: s.step(settle=[(1, 2)]), TypeError),
        (lambda s: s.step(settle=[1]), TypeError),
        (lambda s: s.label(-1), ValueError),
        (lambda s: s.inspect(2**64), ValueError),
        (lambda s: s.submit([Call("a", "rfd", -1)]), ValueError),
        (lambda s: s.submit([Call("a", "rfd", 2**32)]), ValueError),
        (lambda s: s.submit([Call("a", 7)]), TypeError),  # type: ignore[arg-type]
        (lambda s: s.submit(["a rfd"]), TypeError),  # type: ignore[list-item]
        (lambda s: Scheduler.resume(Policy.resolve([("t", CONFIG)], instance=s.instance), s.unfinished(), started="again"), ValueError),
    ],
)
def test_bad_values_are_refused_before_they_cross(call, error) -> None:
    s = Scheduler(policy())
    with pytest.raises(error):
        call(s)
    # The instance is still usable.
    sub = s.submit([Call("a", "rfd")])
    assert s.step(approve=[sub.first]).start == [sub.first]


def test_bad_admission_values_are_refused_before_they_cross() -> None:
    inst = Instance()
    with pytest.raises(ValueError):
        Admission(-1, instance=inst)
    with pytest.raises(TypeError):
        Admission(1, allow_parallel=1, instance=inst)  # type: ignore[arg-type]
    adm = Admission(1, instance=inst)
    with pytest.raises(ValueError):
        adm.begin("c1", "tool")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        adm.begin("r1", AdmissionClass.REENTRANT, parent=-1)
    with pytest.raises(ValueError):
        adm.end(2**64)
    ticket = adm.begin("c1", AdmissionClass.CALL)
    assert adm.next_admissions() == [ticket]


def test_submit_numbers_a_batch_and_refuses_with_typed_codes() -> None:
    s = Scheduler(policy())
    sub = s.submit([Call("a", "rfd"), Call("d", "del", 3)])
    assert sub.count == 4 and list(sub.entries) == [sub.first + i for i in range(4)]
    assert [s.label(e) for e in sub.entries] == ["a", "d#0", "d#1", "d#2"]
    for calls, code in [
        ([Call("a", "rfd")], SubmitErrorCode.DUPLICATE_ID),
        ([], SubmitErrorCode.EMPTY_BATCH),
        ([Call("x#1", "rfd")], SubmitErrorCode.INVALID_ID),
        ([Call("x\ny", "rfd")], SubmitErrorCode.INVALID_ID),
        ([Call("x", "rfd\ny")], SubmitErrorCode.INVALID_ID),
        ([Call("", "rfd")], SubmitErrorCode.INVALID_ID),
        ([Call("x", "rfd", 2)], SubmitErrorCode.NOT_FAN_OUT),
        ([Call("x", "del", 0)], SubmitErrorCode.INVALID_OPERATIONS),
    ]:
        with pytest.raises(SubmitError) as e:
            s.submit(calls)
        assert e.value.code is code, calls
    # Nothing changed: the next batch is numbered right after the first.
    assert s.submit([Call("b", "rfd")]).first == sub.first + 4


def test_each_input_is_judged_on_its_own() -> None:
    s = Scheduler(policy())
    sub = s.submit([Call("a", "rfd"), Call("b", "rfd")])
    a, b = sub.entries
    out = s.step(approve=[a, NONE, a, b], ok=[b], cancel=[NONE])
    assert out.start == [a]
    assert out.errors == [
        RefusedInput(InputKind.APPROVE, 1, InputErrorCode.UNKNOWN_ENTRY, out.errors[0].message),
        RefusedInput(InputKind.APPROVE, 2, InputErrorCode.ALREADY_DECIDED, out.errors[1].message),
        RefusedInput(InputKind.OK, 0, InputErrorCode.NOT_RUNNING, out.errors[2].message),
        RefusedInput(InputKind.CANCEL, 0, InputErrorCode.UNKNOWN_BATCH, out.errors[3].message),
    ]
    [key_full] = [st.wait for st in s.inspect(sub.batch) if st.label == "b"]
    assert key_full == KeyFull("rfd", 1, ["a"])
    out = s.step(ok=[a])
    assert (out.start, out.retired) == ([b], [])
    out = s.step(failed=[b])
    assert out.retired == [sub.batch]
    # Retired numbers are unknown forever, and the call ids are free again.
    assert s.label(a) is None and s.inspect(sub.batch) is None
    assert s.step(ok=[a]).errors[0].code is InputErrorCode.UNKNOWN_ENTRY
    again = s.submit([Call("a", "rfd"), Call("b", "rfd")])
    assert again.batch != sub.batch and again.first >= sub.first + 2


def test_a_step_of_approvals_and_ends_only_places_each_refusal_by_list_and_position() -> None:
    """The common step (approvals and ends alone) crosses its lists as they are; its refusals
    come back placed as in every other step, duplicates included."""
    s = Scheduler(policy())
    sub = s.submit([Call("a", "rfd"), Call("b", "rfd"), Call("c", "free")])
    a, b, c = sub.entries
    out = s.step(approve=[NONE, a, b, c], ok=[b], failed=[NONE - 1])
    assert out.start == [a, c]
    assert [(e.input, e.index, e.code) for e in out.errors] == [
        (InputKind.APPROVE, 0, InputErrorCode.UNKNOWN_ENTRY),
        (InputKind.OK, 0, InputErrorCode.NOT_RUNNING),
        (InputKind.FAILED, 0, InputErrorCode.UNKNOWN_ENTRY),
    ]
    # An entry listed twice: the second is refused at its own place, the first applies.
    out = s.step(approve=[b, b], ok=[a, c, a])
    assert [(e.input, e.index, e.code) for e in out.errors] == [
        (InputKind.APPROVE, 0, InputErrorCode.ALREADY_DECIDED),
        (InputKind.APPROVE, 1, InputErrorCode.ALREADY_DECIDED),
        (InputKind.OK, 2, InputErrorCode.ALREADY_ENDED),
    ]
    assert out.start == [b]


def test_settle_cancel_and_stop_are_reported_with_reasons() -> None:
    s = Scheduler(policy())
    sub = s.submit([Call("d", "del", 3), Call("r", "rfd"), Call("x", "rfd")])
    d0, d1, d2, r, x = sub.entries
    st = {st.label: st for st in s.inspect(sub.batch)}
    assert st["d#0"].state is EntryState.PENDING and st["d#0"].wait is None
    out = s.step(approve=[d0, d1, d2, r], settle=[(x, HostSettle.SKIPPED)])
    assert out.start == [d0, r]
    out = s.step(failed=[d0])
    assert out.settle == [Settled(d1, Reason(ReasonKind.STOPPED, 1)), Settled(d2, Reason(ReasonKind.STOPPED, 1))]
    st = {st.label: st for st in s.inspect(sub.batch)}
    assert (st["d#0"].state, st["d#0"].outcome) == (EntryState.ENDED, Outcome.FAILED)
    assert (st["x"].state, st["x"].reason) == (EntryState.SETTLED, Reason(ReasonKind.SKIPPED))
    assert st["r"].state is EntryState.RUNNING
    later = s.submit([Call("y", "rfd"), Call("z", "rfd")])
    y, z = later.entries
    s.step(approve=[y])
    st = {st.label: st for st in s.inspect(later.batch)}
    assert st["y"].wait == BatchNotApproved(1)
    s.step(approve=[z])
    st = {st.label: st for st in s.inspect(later.batch)}
    assert st["y"].wait == KeyFull("rfd", 1, ["r"]) and st["z"].wait == Behind("y", "rfd")
    out = s.step(cancel=[later.batch])
    assert out.settle == [Settled(y, Reason(ReasonKind.CANCELLED)), Settled(z, Reason(ReasonKind.CANCELLED))]
    assert out.retired == [later.batch]


def test_state_survives_json_and_resume() -> None:
    p = policy()
    s = Scheduler(p)
    sub = s.submit([Call("d", "del", 2), Call("r", "rfd"), Call("q", "rfd")])
    d0, d1, r, q = sub.entries
    s.step(approve=[d0, d1, r, q])
    s.step(ok=[d0])  # d#1 and r run now
    state = s.unfinished()
    assert SavedState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    [batch] = state.batches
    entries = {c.id: c.entries for c in batch.calls}
    assert [(e.operation, e.state, e.outcome) for e in entries["d"]] == [(0, Saved.ENDED, Outcome.OK), (1, Saved.STARTED, None)]
    restored = SavedState.from_dict(json.loads(json.dumps(state.to_dict())))

    again, unrestored = Scheduler.resume(p, restored, started=Started.RUN_AGAIN)
    assert unrestored == []
    st = {st.label: st.state for st in again.inspect(sub.batch)}
    assert st == {"d#0": EntryState.ENDED, "d#1": EntryState.PENDING, "r": EntryState.PENDING, "q": EntryState.PENDING}
    assert again.step(approve=[d1, r, q]).start == [d1, r]

    interrupted, _ = Scheduler.resume(p, restored, started=Started.INTERRUPT)
    out = interrupted.step()
    assert out.settle == [Settled(d1, Reason(ReasonKind.INTERRUPTED)), Settled(r, Reason(ReasonKind.INTERRUPTED))]
    assert out.start == []  # q was approved before; it is pending again
    # New numbers continue after the old ones.
    assert interrupted.submit([Call("n", "rfd")]).first > q


def test_resume_leaves_out_what_the_policy_no_longer_allows() -> None:
    s = Scheduler(policy())
    s.submit([Call("d", "del", 2), Call("r", "rfd")])
    changed = policy("[conversation.tools.rfd]\nconcurrency = 1\n")
    # The fingerprint says, before resuming, that the policy changed.
    assert s.unfinished().policy == policy().fingerprint() != changed.fingerprint()
    again, unrestored = Scheduler.resume(changed, s.unfinished(), started=Started.RUN_AGAIN)
    assert [(u.call, u.code) for u in unrestored] == [("d", UnrestoredCode.INVALID_OPERATIONS)]
    state = s.unfinished()
    future = SavedState(99, state.policy, state.next_batch, state.next_entry, state.batches)
    with pytest.raises(ResumeError) as e:
        Scheduler.resume(changed, future, started=Started.RUN_AGAIN)
    assert e.value.code is ResumeErrorCode.UNSUPPORTED_VERSION


def test_admission_tickets() -> None:
    adm = Admission(2, instance=Instance())
    c1 = adm.begin("c1", AdmissionClass.CALL)
    c2 = adm.begin("c2", "call")  # tool calls run one at a time: queued
    assert adm.next_admissions() == [c1] and adm.in_flight() == 1
    with pytest.raises(AdmissionError) as e:
        adm.begin("c1", AdmissionClass.REQUEST)
    assert e.value.code is AdmissionErrorCode.DUPLICATE_REQUEST
    with pytest.raises(AdmissionError) as e:
        adm.end(c2)
    assert e.value.code is AdmissionErrorCode.NOT_ADMITTED
    r1 = adm.begin("r1", AdmissionClass.REENTRANT, parent=c1)
    assert adm.next_admissions() == [r1]
    adm.end(r1)
    adm.end(c1)
    assert adm.next_admissions() == [c2]
    adm.end(c2)
    # A stale ticket is refused even after its id is used again.
    c1_again = adm.begin("c1", AdmissionClass.CALL)
    assert c1_again not in (c1, c2, r1) and adm.next_admissions() == [c1_again]
    with pytest.raises(AdmissionError) as e:
        adm.end(c1)
    assert e.value.code is AdmissionErrorCode.UNKNOWN_REQUEST
    # Admitted inside `begin` but not yet drained: it can still be abandoned.
    q = adm.begin("q", AdmissionClass.REQUEST)
    adm.abandon(q)
    assert adm.next_admissions() == [] and adm.in_flight() == 1
    report = adm.shutdown()
    assert (report.cancel, report.refused) == ([c1_again], [])
    with pytest.raises(AdmissionError) as e:
        adm.begin("late", AdmissionClass.REQUEST)
    assert e.value.code is AdmissionErrorCode.SHUTDOWN


def test_two_controllers_tickets_are_not_interchangeable() -> None:
    # Each controller draws a random tag: another controller's ticket is unknown, never taken
    # for one of its own requests, even when both hand out their first tickets.
    inst = Instance()
    a, b = Admission(2, instance=inst), Admission(2, instance=inst)
    ta, tb = a.begin("c", AdmissionClass.CALL), b.begin("c", AdmissionClass.CALL)
    assert ta != tb and (ta, tb) != (1, 1)
    assert a.next_admissions() == [ta] and b.next_admissions() == [tb]
    for use in (lambda: a.end(tb), lambda: b.end(ta), lambda: a.abandon(tb)):
        with pytest.raises(AdmissionError) as e:
            use()
        assert e.value.code is AdmissionErrorCode.UNKNOWN_REQUEST
    # A parent from another controller is no in-flight call of this one.
    with pytest.raises(AdmissionError) as e:
        a.begin("r", AdmissionClass.REENTRANT, parent=tb)
    assert e.value.code is AdmissionErrorCode.INVALID_PARENT
    assert a.in_flight() == 1 and b.in_flight() == 1  # the refusals touched nothing
    a.end(ta)
    b.end(tb)
    assert a.in_flight() == 0 and b.in_flight() == 0
    # Fresh controllers draw fresh tags: their tickets differ from these.
    c = Admission(2, instance=inst)
    assert c.begin("c", AdmissionClass.CALL) not in (ta, tb)


def test_sibling_reentrant_calls_run_together_within_the_budget() -> None:
    # Re-entrant calls of one in-flight call skip the tool-call serializer (allow_parallel is
    # off): siblings are in flight together, bounded only by the budget.
    adm = Admission(3, instance=Instance())
    c1 = adm.begin("c1", AdmissionClass.CALL)
    ra = adm.begin("ra", AdmissionClass.REENTRANT, parent=c1)
    rb = adm.begin("rb", AdmissionClass.REENTRANT, parent=c1)
    assert adm.next_admissions() == [c1, ra, rb] and adm.in_flight() == 3
    rc = adm.begin("rc", AdmissionClass.REENTRANT, parent=c1)  # the budget is full
    assert adm.next_admissions() == []
    adm.end(ra)
    assert adm.next_admissions() == [rc]
    for t in (rb, rc, c1):
        adm.end(t)
    assert adm.in_flight() == 0
