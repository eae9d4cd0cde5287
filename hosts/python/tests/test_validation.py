"""Nothing traps, nothing wraps: every wrong type and value sent to every public method is a
TypeError or ValueError naming the parameter, raised before anything crosses, and the same
object keeps working afterwards (`unfinished()` included). A trap that happens anyway breaks
only its own instance, with `InstanceBrokenError`, never wasmtime's own errors."""

from __future__ import annotations

import asyncio
import math

import pytest

import vloop
from turnstile_scheduler import (
    Admission,
    AdmissionClass,
    Call,
    DisposedError,
    Driver,
    InstanceBrokenError,
    Layer,
    Policy,
    Reason,
    ReasonKind,
    Saved,
    SavedBatch,
    SavedCall,
    SavedEntry,
    SavedState,
    Scheduler,
    Started,
    TurnstileError,
)

CONFIG = "[conversation.tools.rfd]\nconcurrency = 1\n[conversation.tools.del]\nconcurrency = 1\nfan_out = { on_error = \"stop\" }\n"
BIG = 2**64
# Values that are never a valid number: wrong types, bools, floats, NaN, negatives, too large.
NOT_U64 = [None, "1", b"1", 1.0, 1.9, math.nan, math.inf, True, False, -1, BIG, 2**70, [1], object()]
NOT_U32 = NOT_U64 + [2**32, 2**32 + 1]
NOT_STR = [None, 1, b"x", ["x"], object(), True]
NOT_ENUM = [None, 1, True, "bogus", "Approve", "", b"call"]
NOT_SEQ = [None, 1, "12", b"12", {1: 2}, object()]


def policy() -> Policy:
    return Policy.resolve([("test", CONFIG)])


def still_works(s: Scheduler) -> None:
    assert s.unfinished().batches is not None
    sub = s.submit([Call("probe", "rfd")])
    assert s.step(approve=[sub.first]).start == [sub.first]
    assert s.step(ok=[sub.first]).retired == [sub.batch]
    assert s.unfinished().batches == []


def scheduler_calls() -> list:
    """(description, call) for every wrong input to every Scheduler method."""
    out = []
    for v in NOT_U64:
        out += [
            (f"label({v!r})", lambda s, v=v: s.label(v)),
            (f"inspect({v!r})", lambda s, v=v: s.inspect(v)),
        ]
        for kw in ("approve", "ask", "answer", "ok", "failed", "cancel"):
            out.append((f"step({kw}=[{v!r}])", lambda s, v=v, kw=kw: s.step(**{kw: [v]})))
        out.append((f"step(settle=[({v!r}, 'rejected')])", lambda s, v=v: s.step(settle=[(v, "rejected")])))
    for v in NOT_SEQ:
        for kw in ("approve", "settle", "ask", "answer", "ok", "failed", "cancel"):
            out.append((f"step({kw}={v!r})", lambda s, v=v, kw=kw: s.step(**{kw: v})))
        out.append((f"submit({v!r})", lambda s, v=v: s.submit(v)))
    for v in NOT_ENUM:
        out.append((f"step(settle=[(1, {v!r})])", lambda s, v=v: s.step(settle=[(1, v)])))
    for v in [1, (1,), (1, 2, 3), [1, "rejected"], "x"]:
        out.append((f"step(settle=[{v!r}])", lambda s, v=v: s.step(settle=[v])))
    for v in NOT_STR + ["\ud800"]:
        out += [
            (f"submit(id={v!r})", lambda s, v=v: s.submit([Call(v, "rfd")])),
            (f"submit(tool={v!r})", lambda s, v=v: s.submit([Call("a", v)])),
        ]
    for v in NOT_U32:
        if v is not None:
            out.append((f"submit(operations={v!r})", lambda s, v=v: s.submit([Call("a", "del", v)])))
            # A batch's time limits (the engine keeps the deadlines), checked before they cross.
            out.append((f"submit(execution_ms={v!r})", lambda s, v=v: s.submit([Call("x", "rfd")], execution_ms=v)))
            out.append((f"submit(abort_grace_ms={v!r})", lambda s, v=v: s.submit([Call("x", "rfd")], abort_grace_ms=v)))
    out.append(("submit([str])", lambda s: s.submit(["a rfd"])))
    out.append(("submit([dict])", lambda s: s.submit([{"id": "a", "tool": "rfd"}])))
    return out


@pytest.mark.parametrize("what, call", scheduler_calls(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_wrong_scheduler_input_is_refused_before_it_crosses(what, call) -> None:
    s = Scheduler(policy())
    live = s.submit([Call("a", "rfd"), Call("b", "rfd")])
    with pytest.raises((TypeError, ValueError)) as e:
        call(s)
    assert not isinstance(e.value, TurnstileError) or what.startswith("submit")
    assert "must" in str(e.value) or "newline" in str(e.value), str(e.value)
    # The same instance: the live batch is intact and the scheduler keeps working.
    assert [st.label for st in s.inspect(live.batch)] == ["a", "b"]
    assert len(s.unfinished().batches) == 1
    out = s.step(approve=list(live.entries))
    assert out.start == [live.first]


def saved(**changes) -> SavedState:
    s = Scheduler(policy())
    sub = s.submit([Call("d", "del", 2), Call("r", "rfd")])
    s.step(approve=list(sub.entries))
    s.step(failed=[sub.first])
    state = s.unfinished()
    fields = {f: getattr(state, f) for f in ("version", "policy", "next_batch", "next_entry", "batches")}
    fields.update(changes)
    return SavedState(**fields)


def bad_states() -> list:
    good = saved()
    b = good.batches[0]
    c = b.calls[0]
    out = [("state=None", None), ("state=dict", good.to_dict())]
    for v in NOT_U32:
        out.append((f"version={v!r}", SavedState(v, good.policy, good.next_batch, good.next_entry, good.batches)))
    for v in NOT_U64:
        out += [
            (f"policy={v!r}", SavedState(good.version, v, good.next_batch, good.next_entry, good.batches)),
            (f"next_batch={v!r}", SavedState(good.version, good.policy, v, good.next_entry, good.batches)),
            (f"batch={v!r}", saved(batches=[SavedBatch(v, b.first, b.cancelled, b.calls)])),
        ]
    for v in NOT_SEQ:
        out.append((f"batches={v!r}", saved(batches=v)))
        out.append((f"calls={v!r}", saved(batches=[SavedBatch(b.batch, b.first, b.cancelled, v)])))
    out += [
        ("batches=[str]", saved(batches=["x"])),
        ("cancelled=1", saved(batches=[SavedBatch(b.batch, b.first, 1, b.calls)])),
        ("calls=[str]", saved(batches=[SavedBatch(b.batch, b.first, False, ["x"])])),
        ("entry state bogus", saved(batches=[SavedBatch(b.batch, b.first, False, [SavedCall(c.id, c.tool, c.operations, [SavedEntry(0, "bogus")])])])),
        ("entry outcome bogus", saved(batches=[SavedBatch(b.batch, b.first, False, [SavedCall(c.id, c.tool, c.operations, [SavedEntry(0, Saved.ENDED, outcome="maybe")])])])),
        ("entry reason kind bogus", saved(batches=[SavedBatch(b.batch, b.first, False, [SavedCall(c.id, c.tool, c.operations, [SavedEntry(0, Saved.SETTLED, reason=Reason("bogus"))])])])),
        ("stopped without after", saved(batches=[SavedBatch(b.batch, b.first, False, [SavedCall(c.id, c.tool, c.operations, [SavedEntry(0, Saved.SETTLED, reason=Reason(ReasonKind.STOPPED))])])])),
        ("after on cancelled", saved(batches=[SavedBatch(b.batch, b.first, False, [SavedCall(c.id, c.tool, c.operations, [SavedEntry(0, Saved.SETTLED, reason=Reason(ReasonKind.CANCELLED, 1))])])])),
        ("operation -1", saved(batches=[SavedBatch(b.batch, b.first, False, [SavedCall(c.id, c.tool, c.operations, [SavedEntry(-1, Saved.STARTED)])])])),
        ("id None", saved(batches=[SavedBatch(b.batch, b.first, False, [SavedCall(None, c.tool, c.operations, [])])])),
    ]
    return out


@pytest.mark.parametrize("what, state", bad_states(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_wrong_saved_state_is_refused_before_it_crosses(what, state) -> None:
    p = policy()
    with pytest.raises((TypeError, ValueError)):
        Scheduler.resume(p, state, started=Started.RUN_AGAIN)
    again, _ = Scheduler.resume(p, saved(), started=Started.RUN_AGAIN)
    assert len(again.unfinished().batches) == 1


@pytest.mark.parametrize("started", NOT_ENUM)
def test_resume_refuses_an_unknown_started(started) -> None:
    with pytest.raises((TypeError, ValueError)):
        Scheduler.resume(policy(), saved(), started=started)


def admission_calls() -> list:
    out = []
    for v in NOT_STR:
        out.append((f"begin(id={v!r})", lambda a, v=v: a.begin(v, "call")))
    for v in NOT_ENUM + ["tool-call", "reentrant-call"]:
        out.append((f"begin(cls={v!r})", lambda a, v=v: a.begin("x", v)))
        out.append((f"slot(cls={v!r})", lambda a, v=v: a.slot(v)))
    for v in NOT_U64:
        if v is not None:
            out.append((f"begin(parent={v!r})", lambda a, v=v: a.begin("x", "reentrant", v)))
            out.append((f"slot(parent={v!r})", lambda a, v=v: a.slot("reentrant", parent=v)))
        out += [
            (f"end({v!r})", lambda a, v=v: a.end(v)),
            (f"abandon({v!r})", lambda a, v=v: a.abandon(v)),
        ]
    for v in ["1", -1, math.nan, math.inf, True, object()]:
        out.append((f"slot(timeout={v!r})", lambda a, v=v: a.slot("call", timeout=v)))
    for v in [1, b"x", object()]:
        out.append((f"slot(id={v!r})", lambda a, v=v: a.slot("call", id=v)))
    return out


@pytest.mark.parametrize("what, call", admission_calls(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_wrong_admission_input_is_refused_before_it_crosses(what, call) -> None:
    adm = Admission(2)
    t = adm.begin("held", AdmissionClass.CALL)
    with pytest.raises((TypeError, ValueError)):
        call(adm)
    assert adm.next_admissions() == [t] and adm.in_flight() == 1
    adm.end(t)
    assert adm.in_flight() == 0


@pytest.mark.parametrize(
    "args", [(-1,), (2**32,), (True,), (1.0,), ("2",), (None,), (1, 1), (1, "yes"), (1, None)]
)
def test_admission_config_is_checked(args) -> None:
    with pytest.raises((TypeError, ValueError)):
        Admission(*args)


@pytest.mark.parametrize(
    "layers",
    [
        "[conversation.tools.a]\nconcurrency = 1\n",  # a bare str
        {"user": "[conversation]"},  # a dict instead of a list
        {"conversation": {"tools": {}}},
        ("user", "[conversation]"),  # one pair, not a list of pairs
        Layer("user", ""),
        1,
        None,
        [1],
        ["text"],
        [("user",)],
        [("user", "a", "b")],
        [(1, "text")],
        [("user", 1)],
        [("user", None)],
        [("user", ["[x]"])],
        [("user", {1: 2})],
        [("user", {"conversation": {"tools": {"a": {"concurrency": object()}}}})],
    ],
)
def test_wrong_config_shapes_are_type_errors(layers) -> None:
    with pytest.raises((TypeError, ValueError)) as e:
        Policy.resolve(layers)
    assert "layers" in str(e.value)


def test_policy_methods_check_their_arguments() -> None:
    p = policy()
    for v in NOT_STR:
        with pytest.raises(TypeError):
            p.tool(v)
    assert p.tool("rfd").concurrency[0].limit == 1
    with pytest.raises(TypeError):
        Scheduler("not a policy")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Policy.resolve([("t", CONFIG)], instance="shared")  # type: ignore[arg-type]


def test_driver_arguments_are_checked_and_the_driver_keeps_working() -> None:
    async def ok(x):
        return x.label

    async def main():
        d = Driver(Scheduler(policy()))
        for bad in [
            lambda: d.run("ab", ok),
            lambda: d.run([Call("a", "rfd")], "not callable"),
            lambda: d.run([Call("a", "rfd")], ok, decide=1),
            lambda: d.run([Call("a", True)], ok),
            lambda: d.run([Call("a", "del", -1)], ok),
            lambda: d.run([Call("a", "rfd")], ok, execution_timeout=0),
            lambda: d.run([Call("a", "rfd")], ok, on_outcome=1),
        ]:
            with pytest.raises((TypeError, ValueError)):
                await bad()
        [o] = await d.run([Call("a", "rfd")], ok)
        return o.entries[0].value, d.scheduler.unfinished().batches

    assert vloop.run(main()) == ("a", [])
    for v in [-1, "1", math.nan, True, 0]:

        async def bad(v=v):
            with pytest.raises((TypeError, ValueError)):
                await Driver(Scheduler(policy())).run([Call("a", "rfd")], ok, execution_timeout=v)

        vloop.run(bad())
    with pytest.raises(TypeError):
        Driver("scheduler")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# A trap anyway


def trap(instance) -> None:
    """Makes the instance trap the way the issue's typo did: an unknown enum name lowered by
    wasmtime-py itself (the package's own checks are bypassed on purpose)."""
    begin = instance.func("admission", "[method]admission.begin")
    ctor = instance.func("admission", "[constructor]admission")
    from types import SimpleNamespace

    resource = ctor(SimpleNamespace(**{"max-concurrent": 1, "allow-parallel": False, "tag": 0}))
    with pytest.raises(InstanceBrokenError) as e:
        begin(resource, "x", "tool-call", None)
    return e.value


def test_a_trap_breaks_only_its_own_instance_with_a_typed_error() -> None:
    adm, other = Admission(1), Admission(1)
    s = Scheduler(policy())
    t = adm.begin("c", "call")
    error = trap(adm.instance)
    assert error.code == "instance-broken" and "wasmtime" not in type(error).__name__.lower()
    # Every later use of the broken instance: the same typed error, never WasmtimeError.
    for use in [lambda: adm.begin("d", "call"), lambda: adm.end(t), adm.next_admissions, adm.in_flight, adm.shutdown]:
        with pytest.raises(InstanceBrokenError):
            use()
    adm.close()  # closing a broken controller is fine
    # Unrelated objects are unaffected.
    assert other.begin("c", "call") > 0
    still_works(s)


def test_a_trap_in_a_schedulers_instance_leaves_other_schedulers_and_policies_alone() -> None:
    p = policy()
    broken, fine = Scheduler(p), Scheduler(p)
    sub = broken.submit([Call("a", "rfd")])
    trap(broken.instance)
    for use in [broken.unfinished, lambda: broken.step(approve=[sub.first]), lambda: broken.label(1), lambda: broken.submit([Call("b", "rfd")])]:
        with pytest.raises(InstanceBrokenError):
            use()
    still_works(fine)
    still_works(Scheduler(p))
    assert p.tool("rfd").concurrency[0].limit == 1


def test_a_trap_in_the_shared_policy_instance_is_replaced_for_new_policies() -> None:
    p = policy()
    trap(p.instance)
    with pytest.raises(InstanceBrokenError):
        p.tools()
    # Schedulers resolve the policy's layers in their own instance: still fine.
    still_works(Scheduler(p))
    # The next resolve gets a fresh shared instance.
    q = policy()
    assert q.instance is not p.instance and q.tool("rfd").concurrency[0].limit == 1


def test_a_broken_instance_fails_the_drivers_batches_instead_of_hanging() -> None:
    async def main():
        d = Driver(Scheduler(policy()))
        gate = asyncio.Event()

        async def execute(x):
            await gate.wait()
            return "late"

        run = asyncio.ensure_future(d.run([Call("a", "rfd"), Call("b", "rfd")], execute))
        await asyncio.sleep(0.01)
        trap(d.scheduler.instance)
        gate.set()
        with pytest.raises(InstanceBrokenError):
            await asyncio.wait_for(run, 5)
        with pytest.raises(InstanceBrokenError):
            await d.run([Call("c", "rfd")], execute)

    vloop.run(main())


def test_closed_objects_refuse_use_clearly() -> None:
    p = policy()
    s = Scheduler(p)
    s.close()
    s.close()
    for use in [s.unfinished, lambda: s.submit([Call("a", "rfd")]), lambda: s.step(), lambda: s.label(1)]:
        with pytest.raises(DisposedError, match="the scheduler is closed") as e:
            use()
        assert e.value.code == "disposed"
    with Admission(1) as adm:
        pass
    with pytest.raises(DisposedError):
        adm.begin("a", "call")
    with pytest.raises(DisposedError):
        Driver(s)
    with p:
        pass
    with pytest.raises(DisposedError):
        p.tools()
    still_works(Scheduler(p))  # a closed policy's layers still resolve in a new scheduler
