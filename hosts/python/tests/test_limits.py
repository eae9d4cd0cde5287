"""The documented limits, in Python: a step refusing 1,000,000 inputs, 4,000,000 live entries
(WIT: 4000000 live entries per scheduler), and what still fails inside them.

wasmtime caps the data one call copies out of the component at 128 MiB ("fuel allocated for
hostcalls has been exhausted", a trap: the instance is dead), counting about 48 bytes a value in
its dynamic API, and wasmtime-py has no way to raise it (its C API has none). So the package
slices a step's inputs into crossings of `CROSSING_INPUTS_MAX`, and the component returns what
could be larger in parts: a round of more than 65536 actions (`releases.more`) and an export of
more than 131072 saved entries (`unfinished(part)`), which the package joins.
"""

from __future__ import annotations

import pytest

from turnstile_scheduler import (
    Call,
    InputErrorCode,
    InputKind,
    InstanceBrokenError,
    Instance,
    Policy,
    Saved,
    SavedBatch,
    SavedCall,
    SavedEntry,
    SavedState,
    Scheduler,
    Started,
    SubmitError,
)
from turnstile_scheduler import scheduler as scheduler_module

CONFIG = """
[conversation.tools.rfd]
concurrency = 1
[conversation.tools.run]
concurrency = 0
fan_out = { on_error = "continue" }
"""
LIVE_ENTRIES_MAX = 4_000_000
OPERATIONS_MAX = 100_000
UNKNOWN = 10**12  # entry and batch numbers no scheduler here hands out


def scheduler() -> Scheduler:
    return Scheduler(Policy.resolve([("limits", CONFIG)], instance=Instance()))


def test_a_step_refusing_a_million_inputs_works() -> None:
    """One step of 1,000,000 approvals, two of them real and on either side of a slice's edge:
    every other one is refused, by its list and position, and the two apply."""
    s = scheduler()
    a, b = s.submit([Call("a", "rfd"), Call("b", "rfd")]).entries
    n = 1_000_000
    edge = min(scheduler_module.CROSSING_INPUTS_MAX, n // 2)
    approve = list(range(UNKNOWN, UNKNOWN + n))
    approve[edge - 1], approve[edge] = a, b
    out = s.step(approve=approve, now=5)
    assert out.start == [a]
    assert len(out.errors) == n - 2
    assert all(e.input is InputKind.APPROVE and e.code is InputErrorCode.UNKNOWN_ENTRY for e in out.errors)
    assert [e.index for e in out.errors] == [i for i in range(n) if i not in (edge - 1, edge)]
    assert out.errors[-1].message == f"no live entry has number {UNKNOWN + n - 1}"
    assert s.label(b) == "b"  # the instance lives on


def _outputs_of(crossing_max: int, monkeypatch: pytest.MonkeyPatch) -> list:
    """What a fresh scheduler's steps say with `crossing_max` inputs per crossing."""
    monkeypatch.setattr(scheduler_module, "CROSSING_INPUTS_MAX", crossing_max)
    s = Scheduler(Policy.resolve([("limits", CONFIG)], instance=Instance()))
    sub = s.submit([Call("a", "rfd"), Call("b", "rfd"), Call("f", "run", 3)], execution_ms=100, abort_grace_ms=10)
    a, b, f0, f1, f2 = sub.entries
    said = [s.step(approve=[a, a, UNKNOWN, b, f0, f1, f2, f2], ask=[f0, UNKNOWN], answer=[f0], now=1)]
    said.append(s.step(ok=[a, a, UNKNOWN], failed=[f0], retry=[(f1, 50), (f1, 60)], now=10))
    # f2 still runs: the cancel's abort grace (10) counts from the step's clock (20)
    said.append(s.step(ok=[UNKNOWN, f1], cancel=[UNKNOWN, sub.batch], pause=[("nokey", 9)], now=20))
    said.append(s.step(now=25))
    said.append(s.step(now=35))
    said.append(s.unfinished())
    return said


@pytest.mark.parametrize("crossing_max", [1, 2, 3])
def test_slicing_a_step_changes_nothing_it_says(crossing_max: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same steps, with runs of identical inputs, refused ones, a clock, a cancel's grace
    and a retry cut at every position: outputs, refusals and their positions are the same as
    in one crossing."""
    whole = _outputs_of(1_000_000, monkeypatch)
    assert whole[0].errors and whole[1].errors and whole[2].errors  # the steps do refuse inputs
    assert whole[3].settle == [] and whole[4].settle  # the grace runs from 20, not from 10
    assert _outputs_of(crossing_max, monkeypatch) == whole


def test_live_entries_up_to_the_limit_are_held_and_exported() -> None:
    """4,000,000 live entries (40 fan-out calls of 100,000 operations), one more refused;
    `unfinished` exports them (pending entries are not listed one by one)."""
    s = scheduler()
    for k in range(LIVE_ENTRIES_MAX // OPERATIONS_MAX):
        s.submit([Call(f"fan-{k}", "run", OPERATIONS_MAX)])
    with pytest.raises(SubmitError):
        s.submit([Call("one-more", "run")])
    state = s.unfinished()
    assert len(state.batches) == LIVE_ENTRIES_MAX // OPERATIONS_MAX
    assert state.next_entry - state.batches[0].first == LIVE_ENTRIES_MAX


STARTED_ENTRIES = 1_000_000
"""A quarter of the limit, for the resume test: one crossing lifts about 160 bytes per started
fan-out operation and 500 per plain call, so one result of the whole would stop at about
800,000 of the first and 250,000 of the second."""


def test_unfinished_exports_the_limit_of_started_entries() -> None:
    """4,000,000 started entries: 40 parts of an export (one fan-out call of 100,000 a part) (about 35 s and 1.8 GB on the
    reference machine), joined into every entry, in order."""
    s = scheduler()
    for k in range(LIVE_ENTRIES_MAX // OPERATIONS_MAX):
        sub = s.submit([Call(f"fan-{k}", "run", OPERATIONS_MAX)])
        assert len(s.step(approve=list(sub.entries), now=0).start) == OPERATIONS_MAX
    state = s.unfinished()
    assert [len(b.calls) for b in state.batches] == [1] * (LIVE_ENTRIES_MAX // OPERATIONS_MAX)
    assert sum(len(c.entries) for b in state.batches for c in b.calls) == LIVE_ENTRIES_MAX
    assert all([e.operation for e in b.calls[0].entries] == list(range(OPERATIONS_MAX)) for b in state.batches)


def test_resuming_a_million_started_entries_as_interrupted() -> None:
    policy = Policy.resolve([("limits", CONFIG)], instance=Instance())
    batches = [
        SavedBatch(k + 1, k * OPERATIONS_MAX + 1, False, [SavedCall(f"fan-{k}", "run", OPERATIONS_MAX, [SavedEntry(i, Saved.STARTED) for i in range(OPERATIONS_MAX)])])
        for k in range(STARTED_ENTRIES // OPERATIONS_MAX)
    ]
    state = SavedState(2, policy.fingerprint(), len(batches) + 1, STARTED_ENTRIES + 1, batches)
    s, unrestored = Scheduler.resume(policy, state, started=Started.INTERRUPT, instance=policy.instance)
    assert unrestored == []
    out = s.step(now=0)
    assert len(out.settle) == STARTED_ENTRIES


def test_inspect_of_a_million_entry_batch() -> None:
    """One batch of 1,000,000 entries (10 fan-out calls): `inspect` reads it in 16 parts of at
    most 65536 statuses (one result of the whole trapped past about 500,000), in written order."""
    s = scheduler()
    calls = 10
    sub = s.submit([Call(f"fan-{k}", "run", OPERATIONS_MAX) for k in range(calls)])
    statuses = s.inspect(sub.batch)
    assert statuses is not None and len(statuses) == calls * OPERATIONS_MAX
    assert [st.label for st in statuses[65535:65537]] == ["fan-0#65535", "fan-0#65536"]
    assert statuses[-1].label == f"fan-{calls - 1}#{OPERATIONS_MAX - 1}"
