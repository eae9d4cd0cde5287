"""The case corpus runner for Python: the format of tests/cases/README.md, the same steps and
renderings as every other host, driving the component through the package.

`python corpus.py DIR_OR_FILE...` runs every `*.toml` case and prints `N passed, M failed`."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Optional

from turnstile_scheduler import (
    Admission,
    AdmissionClass,
    AdmissionError,
    Call,
    ConfigError,
    EntryState,
    HostSettle,
    InputKind,
    Instance,
    Outputs,
    Policy,
    Reason,
    ResumeError,
    Scheduler,
    Started,
    SubmitError,
)
from turnstile_scheduler.types import (
    MAX_WAIT_DEFAULT_MS,
    RETRIES_DEFAULT,
    BatchNotApproved,
    Behind,
    KeyFull,
    KeyPaused,
    KeySpacing,
    PermitGranted,
    PermitRequested,
    RetryAt,
)

NONE = 2**64 - 1
"""The number no scheduler or controller hands out: what an unknown label, batch or request
becomes, so that the component itself refuses it."""

CLASSES = {
    "call": "call", "tool-call": "call", "tool_call": "call", "request": "request", "read": "request",
    "control": "control", "reentrant": "reentrant", "re-entrant": "reentrant",
    "reentrant-call": "reentrant", "re-entrant-call": "reentrant", "reentrant_call": "reentrant",
}
OUTCOMES = {"ok": "ok", "failed": "failed", "err": "failed", "error": "failed"}
SETTLE_VERBS = {"reject": HostSettle.REJECTED, "skip": HostSettle.SKIPPED, "fail": HostSettle.FAILED}

# Fields of each table; a descriptive group allows at most one of its names and is never read.
CASE_FIELDS = {"description", "layer", "diagnostics", "rendered", "tools", "warnings", "batch", "admission", "step", "simulate"}
CASE_DESCRIPTIVE = {"name", "title", "notes", "comment", "reference"}
SCHED_STEP_FIELDS = {
    "do", "start", "settle", "error", "errors", "retired", "unrestored", "layers", "inspect", "at", "wake_at", "acquire",
    "release", "abort", "pause_store",
}
ADMISSION_STEP_FIELDS = {"do", "error", "admit", "cancel", "refused", "drain"}
STEP_DESCRIPTIVE = {"comment", "note", "why"}
LAYER_FIELDS = {"name", "text"}
BATCH_FIELDS = {"calls", "execution_ms", "abort_grace_ms"}
ADMISSION_FIELDS = {"max_concurrent", "allow_parallel"}
SIMULATE_FIELDS = {"duration_ms", "durations", "fail"}


class CaseError(AssertionError):
    """The case is malformed (not a mismatch with the component)."""


# ---------------------------------------------------------------------------------------------
# Renderings (tests/cases/README.md, "Renderings")


def tool_line(t) -> str:
    """`NAME unbounded`, or NAME and each key of its set joined by ` + ` (`key_text`), then
    ` fan-out` and ` stop` when they apply."""
    if not t.concurrency:
        out = f"{t.name} unbounded"
    else:
        out = t.name + "".join((" " if i == 0 else " + ") + key_text(c) for i, c in enumerate(t.concurrency))
    if t.fan_out:
        out += " fan-out"
    if t.on_error == "stop":
        out += " stop"
    return out


def key_text(c) -> str:
    """One key of a tool line: `KEY/LIMIT` and its terms."""
    # A path key has no limit: `KEY path=PATH`.
    out = f"{c.key}/{c.limit}" if c.path is None else f"{c.key} path={c.path}"
    if c.delay_ms:
        out += f" delay={c.delay_ms}"
    if c.rates:
        out += " rate=" + ",".join(
            f"{w.count}/{w.per_ms}ms" + ("" if w.burst == c.burst else f":{w.burst}") for w in c.rates
        )
    if c.burst != 1:
        out += f" burst={c.burst}"
    if c.weight != 1:
        out += f" weight={c.weight}"
    if c.adapt_min is not None:
        out += f" adapt={c.adapt_min}"
    if c.retries != RETRIES_DEFAULT:
        out += f" retries={c.retries}"
    if c.max_wait_ms != MAX_WAIT_DEFAULT_MS:
        out += f" max_wait={c.max_wait_ms}"
    if c.shared:
        out += " shared"
    return out


def reason_text(reason: Reason) -> str:
    out = reason.kind.value + (f" {reason.after}" if reason.after is not None else "")
    out += f" {reason.cause.value}" if reason.cause is not None else ""
    return out + (f" {reason.retries}" if reason.retries is not None else "")


def inspect_line(st) -> str:
    if st.state is EntryState.ENDED:
        state = f"ended-{st.outcome.value}"
    elif st.state is EntryState.SETTLED:
        state = reason_text(st.reason)
    elif st.state is EntryState.ABORTED:
        state = f"aborted {st.cause.value}"
    else:
        state = st.state.value
    out = f"{st.label} {state}"
    w = st.wait
    if isinstance(w, BatchNotApproved):
        out += " waits batch-not-approved"
    elif isinstance(w, KeyFull):
        out += f" waits key-full {w.key} {w.limit} {','.join(w.running)}"
    elif isinstance(w, Behind):
        out += f" waits behind {w.label} on {w.key}"
    elif isinstance(w, KeyPaused):
        out += f" waits key-paused {w.key} {w.until}"
    elif isinstance(w, KeySpacing):
        out += f" waits key-spacing {w.key} {w.until}"
    elif isinstance(w, RetryAt):
        out += f" waits retry-at {w.until}"
    elif isinstance(w, PermitRequested):
        out += f" waits permit-requested {w.key}"
    elif isinstance(w, PermitGranted):
        out += f" waits permit-granted {w.key}"
    return out


def diag_line(d) -> str:
    out = d.code + "".join(f" {l.span.layer_name}:{l.span.line}" for l in d.labels)
    return out + (f" tools={','.join(d.tools)}" if d.tools else "")


# ---------------------------------------------------------------------------------------------
# Reading


def check_fields(table: Any, allowed: set[str], descriptive: set[str], where: str) -> None:
    if not isinstance(table, dict):
        raise CaseError(f"{where} must be a table")
    unknown = sorted(set(table) - allowed - descriptive)
    if unknown:
        raise CaseError(f"{where}: unknown field {unknown[0]!r}")
    if len(set(table) & descriptive) > 1:
        raise CaseError(f"{where}: at most one of {sorted(descriptive)}")


def strings(step: dict, key: str) -> list[str]:
    value = step.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CaseError(f"`{key}` must be a list of strings")
    return value


def layers_of(tables: Any, where: str) -> list[tuple[str, str]]:
    if not isinstance(tables, list):
        raise CaseError(f"{where} must be an array of tables")
    out = []
    for i, t in enumerate(tables):
        check_fields(t, LAYER_FIELDS, set(), f"{where}[{i}]")
        if not isinstance(t.get("text"), str):
            raise CaseError(f"{where}[{i}] needs `text`")
        out.append((t.get("name") or f"L{i + 1}", t["text"]))
    return out


def parse_calls(batch: dict) -> list[Call]:
    """`ID TOOL`, `ID TOOL*N` or `ID TOOL {JSON}`: everything after the tool is the call's
    arguments, passed as written (JSON text, valid or not)."""
    calls = []
    for c in batch["calls"]:
        words = c.split(maxsplit=2)
        if len(words) < 2:
            raise CaseError(f"bad call {c!r}: write `ID TOOL`, `ID TOOL*N` or `ID TOOL {{JSON}}`")
        cid, tool = words[0], words[1]
        arguments = words[2].strip() if len(words) == 3 else None
        if "*" in tool:
            tool, n = tool.split("*", 1)
            if not re.fullmatch(r"[0-9]+", n):
                raise CaseError(f"bad operation count in {c!r}")
            calls.append(Call(cid, tool, int(n), arguments=arguments))
        else:
            calls.append(Call(cid, tool, arguments=arguments))
    return calls


def millis(word: str) -> int:
    if not re.fullmatch(r"[0-9]+", word):
        raise CaseError(f"bad time {word!r}")
    return int(word)


def batch_number(args: list[str]) -> int:
    if len(args) != 1 or not re.fullmatch(r"[0-9]+", args[0]):
        raise CaseError("expected a batch number")
    return int(args[0])


def check_error(want: Optional[str], got: Optional[str]) -> None:
    if want != got:
        if want is None:
            raise AssertionError(f"unexpected error {got}")
        raise AssertionError(f"want error {want}, got " + (f"error {got}" if got else "success"))


def compare(what: str, want: Any, got: Any) -> None:
    if want != got:
        raise AssertionError(f"{what}: want {want}, got {got}")


# ---------------------------------------------------------------------------------------------
# Scheduling


class SchedulingRun:
    """One scheduling case: the scheduler, and the numbers the runner keeps (README,
    "Scheduling steps")."""

    def __init__(self, case: dict, policy: Policy) -> None:
        self.case = case
        self.policy = policy
        self.sched = Scheduler(policy)
        self.calls: dict[str, tuple[int, Optional[int]]] = {}  # call id -> (first entry, operations)
        self.labels: dict[int, str] = {}  # entry -> label
        self.batches: dict[int, int] = {}  # file batch -> scheduler batch
        self.file_batch: dict[int, int] = {}  # scheduler batch -> file batch
        # What the step calls of one `do` line returned.
        self.start: list[str] = []
        self.settle: list[str] = []
        self.retired: list[int] = []
        self.acquire: list[Any] = []
        self.release: list[str] = []
        self.pause_store: list[str] = []
        self.at: Optional[int] = None  # the step's `at`: the `now` of each step call it makes
        self.wake_at: Optional[int] = None  # what its last step call said

    def entry(self, label: str) -> int:
        cid, sep, index = label.partition("#")
        known = self.calls.get(cid)
        if known is None:
            return NONE
        first, operations = known
        if not sep:
            return first if operations is None else NONE
        if operations is None or not re.fullmatch(r"[0-9]+", index) or int(index) >= operations:
            return NONE
        return first + int(index)

    def batch(self, n: int) -> int:
        return self.batches.get(n, NONE)

    def step(self, **inputs: Any) -> Outputs:
        if inputs.get("now") is None and self.at is not None:
            inputs["now"] = self.at
        out = self.sched.step(**inputs)
        self.wake_at = out.wake_at
        for e in out.start:  # the scheduler's labels must agree with the runner's
            if self.sched.label(e) != self.labels.get(e):
                raise AssertionError(f"label({e}): want {self.labels.get(e)!r}, got {self.sched.label(e)!r}")
        self.abort += [f"{self.labels.get(a.entry, f'?{a.entry}')} {a.cause.value}" for a in out.abort]
        self.start += [self.labels.get(e, f"?{e}") for e in out.start]
        self.settle += [f"{self.labels.get(s.entry, f'?{s.entry}')} {reason_text(s.reason)}" for s in out.settle]
        self.retired += [self.file_batch.get(b, -1) for b in out.retired]
        self.acquire += [(self.labels.get(r.entry, f"?{r.entry}"), "none" if r.limit is None else r.limit) for r in out.requests]
        self.release += [self.labels.get(e, f"?{e}") for e in out.release]
        self.pause_store += [f"{key} {until}" for key, until in out.pause_store]
        return out

    def one_by_one(self, kind: str, values: list[Any], single: bool = False) -> Optional[str]:
        """One `step` per input, stopping at the first refused one; a refused input must change
        nothing. `single`: the input is a value, not a list of one (`now`)."""
        for value in values:
            out = self.step(**{kind: value if single else [value]})
            if out.errors:
                if out.start or out.settle:
                    raise AssertionError(f"a refused input changed something: {out}")
                return out.errors[0].code.value
        return None

    def run(self, step: dict) -> None:
        check_fields(step, SCHED_STEP_FIELDS, STEP_DESCRIPTIVE, "step")
        verb, *args = step["do"].split() or [""]
        many = verb in ("approve-many", "end-many")
        for key, allowed in (("errors", many), ("unrestored", verb == "restart"), ("layers", verb == "restart"), ("inspect", verb == "inspect")):
            if key in step and not allowed:
                raise CaseError(f"`{key}` does not apply to `{verb}`")
        self.start, self.settle, self.retired, self.acquire, self.release, self.abort = [], [], [], [], [], []
        self.pause_store = []
        at = step.get("at")
        if at is not None and (type(at) is not int or at < 0):
            raise CaseError("`at` must be milliseconds (an integer >= 0)")
        self.at = at
        err: Optional[str] = None
        errors: list[str] = []
        unrestored: list[str] = []
        stepped = True
        if verb == "submit":
            err = self.submit(batch_number(args) if args else 1)
            stepped = False
        elif verb in ("approve", "ask", "answer"):
            if not args:
                raise CaseError("expected at least one entry")
            err = self.one_by_one(verb, [self.entry(l) for l in args])
        elif verb in SETTLE_VERBS:
            if not args:
                raise CaseError("expected at least one entry")
            err = self.one_by_one("settle", [(self.entry(l), SETTLE_VERBS[verb]) for l in args])
        elif verb == "end":
            if len(args) not in (1, 2) or (len(args) == 2 and args[1] not in OUTCOMES):
                raise CaseError("expected `end LABEL ok|failed`")
            outcome = OUTCOMES[args[1]] if len(args) == 2 else "ok"
            err = self.one_by_one(outcome, [self.entry(args[0])])
        elif verb == "decline":
            if len(args) != 1:
                raise CaseError("expected `decline LABEL`")
            err = self.one_by_one("ok", [self.entry(args[0])])
        elif verb == "approve-many":
            out = self.step(approve=[self.entry(l) for l in args])
            errors = [f"{e.index} {e.code.value}" for e in out.errors]
        elif verb == "end-many":
            ok: list[tuple[int, int]] = []  # (position among the labels, entry)
            failed: list[tuple[int, int]] = []
            for i, arg in enumerate(args):
                label, eq, outcome = arg.partition("=")
                if not eq or outcome not in OUTCOMES:
                    raise CaseError(f"expected LABEL=ok|failed, got {arg!r}")
                (ok if OUTCOMES[outcome] == "ok" else failed).append((i, self.entry(label)))
            out = self.step(ok=[e for _, e in ok], failed=[e for _, e in failed])
            refused = sorted(((ok if e.input is InputKind.OK else failed)[e.index][0], e.code.value) for e in out.errors)
            errors = [f"{i} {code}" for i, code in refused]
        elif verb in ("grant", "deny"):
            if not args:
                raise CaseError(f"expected `{verb} LABEL...`")
            # One step with every entry; the event is refused with its first refused input's code.
            out = self.step(**{"granted" if verb == "grant" else "denied": [self.entry(l) for l in args]})
            err = out.errors[0].code.value if out.errors else None
        elif verb == "cancel":
            err = self.one_by_one("cancel", [self.batch(batch_number(args))])
        elif verb == "now":
            if len(args) != 1:
                raise CaseError("expected `now MILLISECONDS`")
            err = self.one_by_one("now", [millis(args[0])], single=True)
        elif verb == "retry":
            if len(args) != 2:
                raise CaseError("expected `retry LABEL UNTIL`")
            err = self.one_by_one("retry", [(self.entry(args[0]), millis(args[1]))])
        elif verb == "pause":
            if len(args) != 2:
                raise CaseError("expected `pause KEY UNTIL`")
            err = self.one_by_one("pause", [(args[0], millis(args[1]))])
        elif verb == "restart":
            if args not in ([], ["interrupt"]):
                raise CaseError("expected `restart` or `restart interrupt`")
            err, unrestored = self.restart(Started.INTERRUPT if args else Started.RUN_AGAIN, step.get("layers"))
            stepped = False
        elif verb == "inspect":
            # A batch that is not live needs only `error = "unknown-batch"`.
            statuses = self.sched.inspect(self.batch(batch_number(args)))
            if statuses is None:
                err = "unknown-batch"
            elif "inspect" not in step:
                got = [inspect_line(s) for s in statuses]
                raise AssertionError(f"inspect: the batch is live; list its entries in `inspect = [...]`: {got}")
            else:
                compare("inspect", strings(step, "inspect"), [inspect_line(s) for s in statuses])
            stepped = False
        else:
            raise CaseError(f"unknown event {verb!r}")
        if not stepped:
            self.step()
        if many and "error" in step:
            # The event as a whole is refused with the code of its first refused input.
            err = errors[0].split()[1] if errors else None
        check_error(step.get("error"), err)
        if many:
            compare("errors", strings(step, "errors"), errors)
        if verb == "restart":
            compare("unrestored", strings(step, "unrestored"), unrestored)
        want_start, want_settle = strings(step, "start"), strings(step, "settle")
        if self.start != want_start or self.settle != want_settle:
            raise AssertionError(f"want start {want_start} settle {want_settle}, got start {self.start} settle {self.settle}")
        compare("abort", strings(step, "abort"), self.abort)
        compare("pause_store", strings(step, "pause_store"), self.pause_store)
        want_acquire, want_release = strings(step, "acquire"), strings(step, "release")
        # A wanted `LABEL limit=N` also checks the limit the request carries.
        self.acquire = [
            f"{label} limit={limit}" if i < len(want_acquire) and " limit=" in want_acquire[i] else label
            for i, (label, limit) in enumerate(self.acquire)
        ]
        if self.acquire != want_acquire or self.release != want_release:
            raise AssertionError(
                f"want acquire {want_acquire} release {want_release}, got acquire {self.acquire} release {self.release}"
            )
        if "retired" in step:
            compare("retired", step["retired"], self.retired)
        if "wake_at" in step:
            want = step["wake_at"]
            if want == "none":
                want = None
            elif type(want) is not int or want < 0:
                raise CaseError('`wake_at` must be milliseconds or "none"')
            compare("wake_at", want, self.wake_at)

    def submit(self, n: int) -> Optional[str]:
        specs = self.case.get("batch", [])
        if not 1 <= n <= len(specs):
            raise CaseError(f"the case has no batch {n}")
        check_fields(specs[n - 1], BATCH_FIELDS, set(), f"batch {n}")
        calls = parse_calls(specs[n - 1])
        spec = specs[n - 1]
        try:
            submitted = self.sched.submit(calls, execution_ms=spec.get("execution_ms"), abort_grace_ms=spec.get("abort_grace_ms"))
        except SubmitError as e:
            return e.code.value
        self.batches[n] = submitted.batch
        self.file_batch[submitted.batch] = n
        entry = submitted.first
        for c in calls:
            self.calls[c.id] = (entry, c.operations)
            for label in c.labels():
                self.labels[entry] = label
                entry += 1
        return None

    def restart(self, started: Started, layers: Any) -> tuple[Optional[str], list[str]]:
        if layers is not None:
            try:
                self.policy = Policy.resolve(layers_of(layers, "layers"), instance=self.policy.instance)
            except ConfigError as e:
                raise CaseError(f"the restart's layers failed to resolve:\n{e}") from e
        state = self.sched.unfinished()
        try:
            sched, unrestored = Scheduler.resume(self.policy, state, started=started)
        except ResumeError as e:
            return e.code.value, []
        self.sched.close()
        self.sched = sched
        return None, [f"{u.call} {u.code.value}" for u in unrestored]


# ---------------------------------------------------------------------------------------------
# Admission


class AdmissionRun:
    """One admission case: the controller, and each request id's tickets in `begin` order."""

    def __init__(self, spec: dict, instance: Instance) -> None:
        check_fields(spec, ADMISSION_FIELDS, set(), "admission")
        max_concurrent = min(max(int(spec["max_concurrent"]), 0), 2**32 - 1)
        self.adm = Admission(max_concurrent, bool(spec.get("allow_parallel", False)), instance=instance)
        self.tickets: dict[str, list[int]] = {}
        self.names: dict[int, tuple[str, int]] = {}  # ticket -> (id, its begin's position from 1)

    def ticket(self, name: str) -> int:
        """`ID` is the ticket of ID's most recent begin, `ID@N` of its N-th."""
        if name in self.tickets:
            return self.tickets[name][-1]
        base, at, n = name.rpartition("@")
        if at and re.fullmatch(r"[0-9]+", n) and 1 <= int(n) <= len(self.tickets.get(base, [])):
            return self.tickets[base][int(n) - 1]
        return NONE

    def name(self, ticket: int) -> str:
        if ticket not in self.names:
            return f"?{ticket}"
        rid, n = self.names[ticket]
        return rid if n == len(self.tickets[rid]) else f"{rid}@{n}"

    def names_of(self, want: list[str]) -> list[str]:
        """Expected names in their canonical form (`c1@2` is `c1` when it is c1's latest)."""
        return [self.name(t) if (t := self.ticket(w)) != NONE else w for w in want]

    def run(self, step: dict) -> None:
        check_fields(step, ADMISSION_STEP_FIELDS, STEP_DESCRIPTIVE, "step")
        words = step["do"].split()
        cancel: list[int] = []
        refused: list[int] = []
        err: Optional[str] = None
        try:
            if words[:1] == ["begin"] and len(words) in (3, 4):
                rid, klass = words[1], CLASSES.get(words[2])
                if klass is None:
                    raise CaseError(f"unknown class {words[2]!r}")
                parent = self.ticket(words[3]) if len(words) == 4 else None
                ticket = self.adm.begin(rid, AdmissionClass(klass), parent)
                self.tickets.setdefault(rid, []).append(ticket)
                self.names[ticket] = (rid, len(self.tickets[rid]))
            elif words[:1] == ["end"] and len(words) == 2:
                self.adm.end(self.ticket(words[1]))
            elif words[:1] == ["abandon"] and len(words) == 2:
                self.adm.abandon(self.ticket(words[1]))
            elif words == ["shutdown"]:
                report = self.adm.shutdown()
                cancel, refused = report.cancel, report.refused
            else:
                raise CaseError("unknown admission event")
        except AdmissionError as e:
            err = e.code.value
        check_error(step.get("error"), err)
        drain = step.get("drain", True)
        if not isinstance(drain, bool):
            raise CaseError("`drain` must be a boolean")
        if drain:
            compare("admit", self.names_of(strings(step, "admit")), [self.name(t) for t in self.adm.next_admissions()])
        elif "admit" in step:
            raise CaseError("`admit` needs the drain (`drain = false` defers it to the next step)")
        compare("cancel", self.names_of(strings(step, "cancel")), [self.name(t) for t in cancel])
        compare("refused", self.names_of(strings(step, "refused")), [self.name(t) for t in refused])


# ---------------------------------------------------------------------------------------------
# Cases


def run_case(case: dict, instance: Instance) -> None:
    check_fields(case, CASE_FIELDS, CASE_DESCRIPTIVE, "the case")
    if "simulate" in case:
        check_fields(case["simulate"], SIMULATE_FIELDS, set(), "simulate")
    steps = case.get("step", [])
    if "admission" in case:
        run = AdmissionRun(case["admission"], instance)
        run_steps(steps, run.run)
        return
    layers = layers_of(case.get("layer", []), "layer")
    try:
        policy = Policy.resolve(layers, instance=instance)
    except ConfigError as e:
        want = case.get("diagnostics")
        if want is None:
            raise AssertionError(f"the config failed to resolve:\n{e}") from e
        got = e.diagnostics
        ok = len(got) == len(want) and all(
            (diag_line(d) == w) if " " in w else (d.code == w) for d, w in zip(got, want)
        )
        if not ok:
            raise AssertionError(f"diagnostics: want {want}, got {[diag_line(d) for d in got]}") from e
        # The full rendering, joined by newlines, exactly (trailing newlines aside).
        text = "\n".join(d.rendered for d in got)
        # `rendered` is optional: compared in full when given.
        if "rendered" in case and case["rendered"].rstrip("\n") != text.rstrip("\n"):
            raise AssertionError(f"rendered: want\n{case['rendered']}\ngot\n{text}") from e
        return
    if "diagnostics" in case:
        raise AssertionError(f"diagnostics: want {case['diagnostics']}, but the config resolved")
    # Warnings of a resolved config, in the form of `diagnostics` (none unless listed).
    want_warnings = case.get("warnings", [])
    got_warnings = policy.warnings()
    if len(got_warnings) != len(want_warnings) or not all(
        (diag_line(d) == w) if " " in w else (d.code == w) for d, w in zip(got_warnings, want_warnings)
    ):
        raise AssertionError(f"warnings: want {want_warnings}, got {[diag_line(d) for d in got_warnings]}")
    if got_warnings and "rendered" in case:
        text = "\n".join(d.rendered for d in got_warnings)
        if case["rendered"].rstrip("\n") != text.rstrip("\n"):
            raise AssertionError(f"rendered: want\n{case['rendered']}\ngot\n{text}")
    for want in case.get("tools", []):
        name = want.split()[0]
        got = tool_line(policy.tool(name))
        if got != want:
            raise AssertionError(f"tool {name}: want {want!r}, got {got!r}")
    run_steps(steps, SchedulingRun(case, policy).run)


def run_steps(steps: list, run) -> None:
    for i, step in enumerate(steps):
        try:
            if not isinstance(step, dict) or not isinstance(step.get("do"), str):
                raise CaseError("a step needs `do`")
            run(step)
        except Exception as e:
            raise AssertionError(f"step {i + 1} `{step.get('do') if isinstance(step, dict) else step}`: {e}") from e


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
