"""The case corpus runner for Python: the same files, steps and renderings as the Rust runner
(corpus/src/lib.rs), driving the component through the package. Format: tests/cases/README.md."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Callable, Optional

from turnstile import Admission, Call, ConfigError, Instance, Policy, Scheduler, TurnstileError
from turnstile.types import Reason

CLASSES = {
    "call": "call", "tool-call": "call", "tool_call": "call", "request": "request", "read": "request",
    "control": "control", "reentrant": "reentrant", "re-entrant": "reentrant",
    "reentrant-call": "reentrant", "re-entrant-call": "reentrant", "reentrant_call": "reentrant",
}


def tool_line(t) -> str:
    out = f"{t.name} {t.key}/{t.limit}" if t.key is not None else f"{t.name} unbounded"
    if t.fan_out:
        out += " fan-out"
    if t.on_error == "stop":
        out += " stop"
    return out


def settle_line(label: str, reason: Reason) -> str:
    return f"{label} {reason.kind}" + (f" {reason.after}" if reason.after is not None else "")


def inspect_line(st) -> str:
    out = f"{st.entry} {st.state}" + (f" {st.reason.after}" if st.reason and st.reason.after is not None else "")
    if st.wait:
        kind, val = st.wait
        if kind == "batch-not-approved":
            out += " waits batch-not-approved"
        elif kind == "key-full":
            out += f" waits key-full {val.key} {val.limit} {','.join(val.running)}"
        else:
            out += f" waits behind {val}"
    return out


def diag_line(d) -> str:
    out = d.code + "".join(f" {l.span.layer_name}:{l.span.line}" for l in d.labels)
    return out + (f" tools={','.join(d.tools)}" if d.tools else "")


def parse_calls(batch: dict) -> list[Call]:
    calls = []
    for c in batch["calls"]:
        words = c.split()
        if len(words) != 2:
            raise ValueError(f"bad call {c!r}")
        cid, tool = words
        if "*" in tool:
            tool, n = tool.split("*", 1)
            calls.append(Call(cid, tool, int(n)))
        else:
            calls.append(Call(cid, tool))
    return calls


def code_of(f: Callable[[], Any]) -> Optional[str]:
    try:
        f()
        return None
    except TurnstileError as e:
        return e.code


def check_error(want: Optional[str], got: Optional[str]) -> None:
    if want != got:
        raise AssertionError(f"want error {want}, got {got or 'success'}" if want else f"unexpected error {got}")


def run_case(case: dict, instance: Instance) -> None:
    layers = [(l.get("name") or f"L{i + 1}", l["text"]) for i, l in enumerate(case.get("layer", []))]
    steps = case.get("step", [])
    if "admission" in case:
        spec = case["admission"]
        adm = Admission(int(spec["max_concurrent"]), bool(spec.get("allow_parallel", False)), instance=instance)
        for i, step in enumerate(steps):
            try:
                words = step["do"].split()
                cancel: list[str] = []
                refused: list[str] = []
                if words[0] == "begin" and len(words) in (3, 4):
                    err = code_of(lambda: adm.begin(words[1], CLASSES.get(words[2], words[2]), words[3] if len(words) == 4 else None))
                elif words[0] == "end" and len(words) == 2:
                    err = code_of(lambda: adm.end(words[1]))
                elif words[0] == "abandon" and len(words) == 2:
                    err = code_of(lambda: adm.abandon(words[1]))
                elif words == ["shutdown"]:
                    report = adm.shutdown()
                    cancel, refused, err = report.cancel, report.refused, None
                else:
                    raise AssertionError("unknown admission event")
                check_error(step.get("error"), err)
                admit = adm.next_admissions()
                want = (step.get("admit", []), step.get("cancel", []), step.get("refused", []))
                if (admit, cancel, refused) != want:
                    raise AssertionError(f"want admit/cancel/refused {want}, got {(admit, cancel, refused)}")
            except Exception as e:
                raise AssertionError(f"step {i + 1} `{step['do']}`: {e}") from e
        return
    try:
        policy = Policy.resolve(layers, instance=instance)
    except ConfigError as e:
        want = case.get("diagnostics")
        if want is None:
            raise AssertionError(f"the config failed to resolve:\n{e}") from e
        got = e.diagnostics
        ok = len(got) == len(want) and all(
            (diag_line(d) == w) if " " in w else (d.code == w) for d, w in zip(got, want)
        ) and all(d.code in d.rendered for d in got)
        if not ok:
            raise AssertionError(f"diagnostics: want {want}, got {[diag_line(d) for d in got]}") from e
        return
    if "diagnostics" in case:
        raise AssertionError(f"diagnostics: want {case['diagnostics']}, but the config resolved")
    for want in case.get("tools", []):
        name = want.split()[0]
        got = tool_line(policy.tool(name))
        if got != want:
            raise AssertionError(f"tool {name}: want {want!r}, got {got!r}")
    sched = Scheduler(policy)
    batches: dict[int, int] = {}
    verbs = {
        "approve": lambda s, l: s.approve(l),
        "reject": lambda s, l: s.settle(l, "rejected"),
        "skip": lambda s, l: s.settle(l, "skipped"),
        "fail": lambda s, l: s.settle(l, "failed"),
        "ask": lambda s, l: s.begin_question(l),
        "answer": lambda s, l: s.end_question(l),
    }
    for i, step in enumerate(steps):
        try:
            verb, *args = step["do"].split()
            err: Optional[str] = None
            if verb in ("review", "ended-all"):
                pass  # no scheduling effect: the step only checks that nothing is released
            elif verb == "decline":
                (label,) = args
                err = code_of(lambda: sched.on_ended(label, "ok"))
            elif verb == "submit":
                n = int(args[0]) if args else 1
                specs = case.get("batch", [])
                if not 1 <= n <= len(specs):
                    raise AssertionError(f"the case has no batch {n}")
                calls = parse_calls(specs[n - 1])
                err = code_of(lambda: batches.__setitem__(n, sched.submit_batch(calls)))
            elif verb in verbs:
                for label in args:
                    err = code_of(lambda: verbs[verb](sched, label))
                    if err:
                        break
            elif verb == "approve-many":
                err = code_of(lambda: sched.approve_many(args))
            elif verb == "end-many":
                outcomes = {"ok": "ok", "failed": "failed", "err": "failed", "error": "failed"}
                ends = [(a.split("=")[0], outcomes[a.split("=")[1]]) for a in args]
                err = code_of(lambda: sched.on_ended_many(ends))
            elif verb == "end":
                label, outcome = (args[0], args[1] if len(args) > 1 else "ok")
                outcome = {"ok": "ok", "failed": "failed", "err": "failed", "error": "failed"}[outcome]
                err = code_of(lambda: sched.on_ended(label, outcome))
            elif verb == "cancel":
                n = int(args[0])
                err = code_of(lambda: sched.cancel_batch(batches.get(n, 2**32 - 1)))
            elif verb == "restart":
                unfinished = sched.unfinished()
                sched = Scheduler.resume(policy, unfinished)
                mapping = {old: i + 1 for i, (old, _) in enumerate(unfinished)}
                batches = {n: mapping[b] for n, b in batches.items() if b in mapping}
            elif verb == "inspect":
                n = int(args[0])
                got: list[str] = []
                err = code_of(lambda: got.extend(inspect_line(s) for s in sched.inspect(batches.get(n, 2**32 - 1))))
                if not err and got != step["inspect"]:
                    raise AssertionError(f"inspect: want {step['inspect']}, got {got}")
            else:
                raise AssertionError(f"unknown event {verb!r}")
            check_error(step.get("error"), err)
            r = sched.next_releases()
            settle = [settle_line(s.entry, s.reason) for s in r.settle]
            if r.start != step.get("start", []) or settle != step.get("settle", []):
                raise AssertionError(f"want start {step.get('start', [])} settle {step.get('settle', [])}, got start {r.start} settle {settle}")
        except Exception as e:
            raise AssertionError(f"step {i + 1} `{step['do']}`: {e}") from e


def case_files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out.extend(sorted(p.glob("*.toml")) if p.is_dir() else [p])
    return out


def run_files(files: list[Path]) -> tuple[int, list[tuple[Path, str]]]:
    passed, failed = 0, []
    for f in files:
        try:
            run_case(tomllib.loads(f.read_text()), Instance())
            passed += 1
        except Exception as e:
            failed.append((f, str(e)))
    return passed, failed


if __name__ == "__main__":
    import sys

    files = case_files([Path(a) for a in sys.argv[1:]])
    passed, failed = run_files(files)
    for f, why in failed:
        print(f"FAIL {f}: {why}")
    print(f"{passed} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)
