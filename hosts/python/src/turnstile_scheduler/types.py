"""The typed values that cross the API: enums and frozen dataclasses mirroring the WIT.

Enums are `str` enums whose values are the WIT's names (`Outcome.OK == "ok"`), so a value read
from JSON or a log compares equal to its member. Entry, batch and ticket numbers are plain
`int`s (WIT `u64`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional, Union

# ---------------------------------------------------------------------------------------------
# Enums


class OnError(str, Enum):
    """What a failed operation does to the later operations of its call."""

    CONTINUE = "continue"
    STOP = "stop"


class HostSettle(str, Enum):
    """How the host settles a pending entry without running it."""

    REJECTED = "rejected"
    """The user declined it."""
    SKIPPED = "skipped"
    """A remembered "no" or `run = "skip"`."""
    FAILED = "failed"
    """Failed before running: formatter error, unavailable tool, malformed envelope."""


class Outcome(str, Enum):
    """How an execution ended."""

    OK = "ok"
    FAILED = "failed"


class ReasonKind(str, Enum):
    """Why an entry was settled without (or after losing) its execution."""

    REJECTED = "rejected"
    SKIPPED = "skipped"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STOPPED = "stopped"
    """Stopped after a failed operation of its call (`Reason.after` says which)."""
    INTERRUPTED = "interrupted"
    """It had started when the state was exported and was not run again on `resume`."""
    RATE_LIMITED = "rate-limited"
    """Its execution hit a rate limit once more than its key's `retries` allow
    (`Reason.retries` says how many times it had run again). A failure for `on_error = "stop"`."""
    TIMED_OUT = "timed-out"
    """It was aborted (`Reason.cause` says why) and had not ended when its batch's abort grace
    passed: the scheduler gave up on it and freed its slot; its result is unknown. A failure for
    `on_error = "stop"` when its deadline aborted it."""


class AbortCause(str, Enum):
    """Why the scheduler aborts an execution (`Abort.cause`)."""

    DEADLINE = "deadline"
    """It ran as long as its batch's execution limit allows."""
    CANCEL = "cancel"
    """Its batch was cancelled while it ran."""


class Started(str, Enum):
    """What `Scheduler.resume` does with entries that had started and have no response."""

    RUN_AGAIN = "run-again"
    """They are pending again and run again once approved (RFD 129)."""
    INTERRUPT = "interrupt"
    """They are settled as interrupted (the first `step` reports them)."""


class InputKind(str, Enum):
    """Which list of `Scheduler.step`'s inputs an input was in."""

    APPROVE = "approve"
    SETTLE = "settle"
    ASK = "ask"
    ANSWER = "answer"
    OK = "ok"
    FAILED = "failed"
    CANCEL = "cancel"
    NOW = "now"
    RETRY = "retry"
    PAUSE = "pause"
    GRANTED = "granted"
    DENIED = "denied"
    LIFT_PAUSE = "lift-pause"


class InputErrorCode(str, Enum):
    """Why one input of a `step` was refused; it changed nothing."""

    UNKNOWN_ENTRY = "unknown-entry"
    UNKNOWN_BATCH = "unknown-batch"
    ALREADY_DECIDED = "already-decided"
    NOT_RUNNING = "not-running"
    NOT_ASKING = "not-asking"
    ALREADY_ENDED = "already-ended"
    BATCH_CANCELLED = "batch-cancelled"
    TIME_BACKWARDS = "time-backwards"
    """`now` is earlier than a `now` given before: the clock must be monotonic."""
    UNKNOWN_KEY = "unknown-key"
    """A pause names a key no configured tool declares."""
    NOT_ACQUIRING = "not-acquiring"
    """A grant or a refusal of a permit for an entry that is not waiting for one."""
    GIVEN_UP = "given-up"
    """An end or a question for an execution the scheduler gave up on (settled timed-out)."""


class DiagnosticCode(str, Enum):
    """What a config problem is (`Diagnostic.code`; a code this package does not know yet, from
    a newer component, stays a plain `str`)."""

    TOML_SYNTAX = "toml-syntax"
    JSON_SYNTAX = "json-syntax"
    TOO_MANY_LAYERS = "too-many-layers"
    TOO_LARGE = "too-large"
    TOO_MANY_TOOLS = "too-many-tools"
    TABLE_TYPE = "table-type"
    CONCURRENCY_TYPE = "concurrency-type"
    CONCURRENCY_NEGATIVE = "concurrency-negative"
    CONCURRENCY_KEY_MISSING = "concurrency-key-missing"
    CONCURRENCY_KEY_EMPTY = "concurrency-key-empty"
    CONCURRENCY_UNKNOWN_FIELD = "concurrency-unknown-field"
    CONCURRENCY_ON_DEFAULTS = "concurrency-on-defaults"
    FAN_OUT_TYPE = "fan-out-type"
    FAN_OUT_ON_DEFAULTS = "fan-out-on-defaults"
    FAN_OUT_CONCURRENCY_REMOVED = "fan-out-concurrency-removed"
    FAN_OUT_ON_ERROR_VALUE = "fan-out-on-error-value"
    FAN_OUT_UNKNOWN_FIELD = "fan-out-unknown-field"
    CONCURRENCY_LIMIT_CONFLICT = "concurrency-limit-conflict"
    STOP_WITHOUT_LIMIT = "stop-without-limit"
    ENABLE_VALUE = "enable-value"
    CONCURRENCY_DELAY_CONFLICT = "concurrency-delay-conflict"
    """Tools naming one concurrency key give it different `delay`s."""
    CONCURRENCY_RETRIES_CONFLICT = "concurrency-retries-conflict"
    """Tools naming one concurrency key give it different `retries`."""
    CONCURRENCY_KEY_TEMPLATE = "concurrency-key-template"
    """A key template has a `{` not closed, an empty `{}`, or a stray `}`."""
    CONCURRENCY_SHARED_CONFLICT = "concurrency-shared-conflict"
    """Tools naming one concurrency key disagree on `shared`."""
    UNKNOWN_FIELD_TYPO = "unknown-field-typo"
    """A warning: a name a small edit away from one Turnstile reads (`concurency`, `fanout`),
    otherwise ignored, so the limit it meant would silently not apply."""
    CONCURRENCY_MAX_WAIT_CONFLICT = "concurrency-max-wait-conflict"
    """Tools naming one concurrency key give it different `max_wait`s."""
    CONCURRENCY_RATE_CONFLICT = "concurrency-rate-conflict"
    """Tools naming one concurrency key give it different `rate` windows."""
    CONCURRENCY_BURST_CONFLICT = "concurrency-burst-conflict"
    """Tools naming one concurrency key give it different `burst`s."""
    BURST_WITHOUT_RATE = "burst-without-rate"
    """A `burst` on a key with no `rate`."""
    SHARED_RATE_OUT_OF_RANGE = "shared-rate-out-of-range"
    """A rate window on a `shared` key above 1000000 starts or a burst of 1000000."""
    CONCURRENCY_ADAPT_CONFLICT = "concurrency-adapt-conflict"
    """Tools naming one concurrency key disagree on whether its limit adapts, or its floor."""
    """An adaptive limit on a `shared` key (its store keeps one fixed limit)."""
    WEIGHT_WITHOUT_RATE = "weight-without-rate"
    """A `weight` above 1 on a key with no `rate`."""
    WEIGHT_ABOVE_BURST = "weight-above-burst"
    """A `weight` above the key's `burst` (such a call could never start)."""
    CONCURRENCY_KEY_REPEATED = "concurrency-key-repeated"
    """One key named twice in one tool's key set."""
    SHARED_KEY_IN_SET = "shared-key-in-set"
    """A key set with two `shared` keys, or a delay or a rate on a key beside its shared key."""
    ADAPTIVE_KEYS_IN_SET = "adaptive-keys-in-set"
    """Two adaptive limits in one key set: a rate limit on its call could not say which one to
    halve."""
    PATH_KEY_TERMS = "path-key-terms"
    """A path key (`path = ...`) whose key has placeholders, or with a limit, delay, rate,
    burst, weight, adaptive limit or sharing: a path key only keeps overlapping paths apart."""
    CONCURRENCY_PATH_CONFLICT = "concurrency-path-conflict"
    """Tools naming one key disagree on whether it is a path key."""


class Severity(str, Enum):
    """An error stops resolution; a warning is reported beside a resolved policy
    (`Policy.warnings`)."""

    ERROR = "error"
    WARNING = "warning"


class SubmitErrorCode(str, Enum):
    """Why `Scheduler.submit` refused a batch; it changed nothing."""

    EMPTY_BATCH = "empty-batch"
    INVALID_ID = "invalid-id"
    DUPLICATE_ID = "duplicate-id"
    NOT_FAN_OUT = "not-fan-out"
    INVALID_OPERATIONS = "invalid-operations"
    TOO_LARGE = "too-large"
    """Above a limit: calls per batch, operations per call, live entries, or 65536 bytes of one
    call's arguments (the package never sends that much: see `Call.arguments`)."""
    MALFORMED_BATCH = "malformed-batch"
    """The packed batch the component got did not add up (the package packs it itself, so this
    is a bug in the package, never in the caller's calls)."""
    INVALID_ARGUMENTS = "invalid-arguments"
    """Never raised since the component's 0.3 interface, where each call carries its own
    arguments (kept so that code naming it still imports)."""


class ResumeErrorCode(str, Enum):
    """Why `Scheduler.resume` refused a state as a whole."""

    UNSUPPORTED_VERSION = "unsupported-version"
    TOO_LARGE = "too-large"


class UnrestoredCode(str, Enum):
    """Why `Scheduler.resume` could not restore one call."""

    INVALID_OPERATIONS = "invalid-operations"
    INVALID_ID = "invalid-id"
    DUPLICATE_ID = "duplicate-id"
    INVALID_NUMBERS = "invalid-numbers"


class EntryState(str, Enum):
    """Where an entry is (`EntryStatus.state`)."""

    PENDING = "pending"
    APPROVED = "approved"
    ACQUIRING = "acquiring"
    """A shared key's entry waiting for its permit from the store (it holds a local slot)."""
    GRANTED = "granted"
    """Its permit granted; it starts once every earlier entry with its key has."""
    RUNNING = "running"
    ASKING = "asking"
    ABORTED = "aborted"
    """Told to stop (`EntryStatus.cause` says why); it holds its slot until it ends, or until
    its batch's abort grace passes."""
    ENDED = "ended"
    """`EntryStatus.outcome` says how."""
    SETTLED = "settled"
    """`EntryStatus.reason` says why."""


class Saved(str, Enum):
    """An entry's state in an exported state (`SavedEntry.state`)."""

    STARTED = "started"
    """Running or asking at export: it started and has no response."""
    ENDED = "ended"
    """`SavedEntry.outcome` says how."""
    SETTLED = "settled"
    """`SavedEntry.reason` says why."""


class AdmissionClass(str, Enum):
    """The kind of work an admission request is."""

    CALL = "call"
    REQUEST = "request"
    CONTROL = "control"
    REENTRANT = "reentrant"


class AdmissionErrorCode(str, Enum):
    """Why an admission call was refused; it changed nothing."""

    SHUTDOWN = "shutdown"
    DUPLICATE_REQUEST = "duplicate-request"
    UNKNOWN_REQUEST = "unknown-request"
    INVALID_ID = "invalid-id"
    INVALID_PARENT = "invalid-parent"
    WOULD_DEADLOCK = "would-deadlock"
    NOT_ADMITTED = "not-admitted"
    NOT_QUEUED = "not-queued"
    TOO_MANY = "too-many"
    TIMED_OUT = "timed-out"


# ---------------------------------------------------------------------------------------------
# Config


@dataclass(frozen=True)
class Span:
    """A place in one layer: byte offsets, one-based line and column."""

    layer: int
    layer_name: str
    start: int
    end: int
    line: int
    column: int


@dataclass(frozen=True)
class Label:
    span: Span
    message: str


@dataclass(frozen=True)
class Diagnostic:
    """One config problem; `rendered` is the rustc-style text with the source lines
    (`error[code]: ...` or `warning[code]: ...`). `code` is a `DiagnosticCode` (a `str` enum; a
    code this package does not know is a plain `str`)."""

    code: "DiagnosticCode | str"
    message: str
    path: list[str]
    tools: list[str]
    labels: list[Label]
    help: Optional[str]
    rendered: str
    severity: Severity = Severity.ERROR
    """`ERROR`, or `WARNING` for what `Policy.warnings` (and, after the errors, a failed
    resolution) reports."""


RETRIES_DEFAULT = 3
"""The retry cap of a key whose config does not set `retries`."""

MAX_WAIT_DEFAULT_MS = 300_000
"""The maximum wait (5 minutes) of a key whose config does not set `max_wait`."""


@dataclass(frozen=True)
class RateWindow:
    """One rate window of a key (`rate = "5000/h"` is `RateWindow(5000, 3600000, 1)`): on
    average at most `count` starts per `per_ms` milliseconds, and `burst` of them at once after
    the key was idle (the window's own, `{ rate = "2000/30d", burst = 2000 }`, or the key's)."""

    count: int
    per_ms: int
    burst: int = 1


@dataclass(frozen=True)
class Concurrency:
    """One key a tool's calls take, as the policy resolved it (`ToolPolicy.concurrency`).

    `limit` is how many executions with the key may run at once; a key written with
    `limit = 0` and a delay is unbounded but spaced: its limit is then 4294967295 (the
    component says none; this package keeps the number, so `limit` is always an int).
    `delay_ms` is the minimum gap in milliseconds between consecutive starts on the key (0:
    none); `retries` how many times one entry may hit a rate limit and run again (3 unless the
    config says otherwise); `max_wait_ms` the longest wait a rate limit may ask for
    (`max_wait`, 300000 = 5 minutes unless the config says otherwise; 0 waits for nothing): an
    entry asked to wait longer is settled `rate-limited` at once.

    A key with placeholders (`"fs:{path}"`) is a template: each call's key is made from its
    arguments (`Call.arguments`), and every key made from one template has its limit, delay
    and retries. `arguments` names the top-level arguments the template uses, in first-use
    order (empty for a plain key)."""

    key: str
    limit: int
    delay_ms: int = 0
    retries: int = RETRIES_DEFAULT
    arguments: tuple[str, ...] = ()
    shared: bool = False
    """The key's limit, delay, rate windows and pauses hold across every process using one store
    (`concurrency = { key, limit, shared = true }`): a `Driver` needs `shared_keys=`. A shared
    key may be one member of a key set (at most one; the set's other members then have no
    delay or rate), and a call's keys list it first."""
    max_wait_ms: int = MAX_WAIT_DEFAULT_MS
    """The key's maximum wait on a rate limit in milliseconds."""
    rates: tuple[RateWindow, ...] = ()
    """The key's rate windows, ascending (empty when none), kept as GCRA with `burst`: `count`
    starts per `per_ms` at an even pace, and `burst` of them at once after the key was idle
    (at most `burst + count - 1` in any `per_ms`)."""
    burst: int = 1
    """Starts the rate windows let through at once (1 when the key has no rate)."""
    weight: int = 1
    """Units of the key's rate windows one call of this tool costs (1 ..= `burst`; 1 without a
    rate). The tool's own: tools sharing a key may weigh differently."""
    adapt_min: Optional[int] = None
    """The floor of an adaptive limit (`limit = { max, min, adapt = "aimd" }`; `limit` is then
    its ceiling), None when the limit is fixed. It halves on each rate-limited end (not below
    this) and grows by one after as many clean ends as it then is."""
    path: Optional[str] = None
    """For a path key (`{ key = "fs", path = "{path}" }`), the path as written; None for an exact
    key. The key names one tree; each call takes the path its arguments make, normalized by the
    component (`/` and `\\` separate components; empty ones, `.` and a leading `/` are dropped;
    `..` removes the one before it), or the root when they make none. Calls on equal paths, or
    one under the other, never run at once and keep written order among themselves; calls on
    paths apart pass them. `limit` is `LIMIT_UNBOUNDED`; `inspect` names such a key with its
    path (`fs:/a/b`)."""


@dataclass(frozen=True)
class ToolPolicy:
    """A tool's resolved policy. `concurrency` lists the keys each of its calls takes, in
    written order: one (`concurrency = 2`, or a table), every member of a key set
    (`concurrency = [{ key = "fs:{src}" }, { key = "fs:{dst}", limit = 1 }]`), or none (empty)
    when the tool is unbounded. A call of a key set starts only when every one of its keys has
    room and it is first among the waiting entries of each key; it holds them all until it
    ends. Two members that make one key (`{src}` equal to `{dst}`) count once."""

    name: str
    concurrency: tuple[Concurrency, ...]
    fan_out: bool
    on_error: OnError

    @property
    def arguments(self) -> tuple[str, ...]:
        """The top-level arguments its key templates use: every member's, each once, in
        written order (empty when no key is a template). The package sends a call's arguments
        only for such a tool, and only these fields."""
        return tuple(dict.fromkeys(name for c in self.concurrency for name in c.arguments))


# ---------------------------------------------------------------------------------------------
# Scheduler


@dataclass(frozen=True)
class Call:
    """A call as the model wrote it. `operations` makes it a fan-out envelope of that many
    operations (each its own entry); None is a plain call (one entry).

    `arguments` are the call's arguments: a mapping (the parsed object), the JSON text as the
    model wrote it (a `str`), or None. They matter only to a tool whose key is a template
    (`concurrency = { key = "fs:{path}" }`): its call's key is made from them, and the package
    sends the component only the fields the template names (from a `str`, the text as
    written). Other calls send nothing and pay nothing; the driver hands `arguments` back to
    `execute` and `decide` unchanged. Arguments that cannot make a key never raise: JSON that
    is not an object (a list, a number), a named field that is missing, None, a list, a
    mapping, or a value JSON cannot hold (a set, an object, NaN, an int too long to write),
    and invalid JSON text: that call takes the key named by the template's own text (limited,
    never unbounded). Only a value that is no JSON at all at the top (bytes, a set, an object)
    is a TypeError. Numbers are written as JavaScript's `JSON.stringify` writes them (`1.0`
    and `1` make `1`, `1e21` makes `1e+21`), so a key is the same from both packages; an int
    is written exactly (JavaScript holds ints exactly only up to 2**53). `arguments` takes no
    part in a call's hash."""

    id: str
    tool: str
    operations: Optional[int] = None
    arguments: Any = field(default=None, hash=False)

    def labels(self) -> list[str]:
        """The labels of its entries in written order: `id`, or `id#0` .. `id#(n-1)`."""
        if self.operations is None:
            return [self.id]
        return [f"{self.id}#{i}" for i in range(self.operations)]


@dataclass(frozen=True)
class Submitted:
    """A batch as `submit` numbered it: entries `first .. first + count - 1` in written order."""

    batch: int
    first: int
    count: int

    @property
    def entries(self) -> range:
        """The batch's entry numbers, in written order."""
        return range(self.first, self.first + self.count)


@dataclass(frozen=True)
class Reason:
    """Why an entry was settled. `after` is the one-based position of the failed operation a
    STOPPED entry was stopped after; `retries` how many times a RATE_LIMITED entry had run
    again when it hit the rate limit once more (`Reason(ReasonKind.RATE_LIMITED, retries=3)`).
    Both are None for every other kind."""

    kind: ReasonKind
    after: Optional[int] = None
    retries: Optional[int] = None
    cause: "Optional[AbortCause]" = None
    """Why a TIMED_OUT entry was aborted; None for every other kind."""


@dataclass(frozen=True)
class Settled:
    """An entry the scheduler settled, with why; it needs its response. `message` is the
    component's sentence for it, to show a user or hand back to the model as the call's result
    ("not run: the batch was cancelled"; what `explain(label, reason)` says). It takes no part
    in equality, so `Settled(entry, reason)` compares equal to an output."""

    entry: int
    reason: Reason
    message: Optional[str] = field(default=None, compare=False)


@dataclass(frozen=True)
class RefusedInput:
    """A refused input of a `step` (WIT `input-error`): its list, its position there, and why.
    It changed nothing; every other input applied."""

    input: InputKind
    index: int
    code: InputErrorCode
    message: str


@dataclass(frozen=True)
class Outputs:
    """What one `step` decided. `start` and `settle` are in (batch, written) order; every entry
    appears in them at most once over its life."""

    start: list[int]
    """Entries to start now."""
    settle: list[Settled]
    """Entries the scheduler settled (cancelled, stopped, interrupted)."""
    errors: list[RefusedInput]
    """Inputs that were refused."""
    retired: list[int]
    """Batches whose every entry now has a response: their numbers are retired."""
    wake_at: Optional[int] = None
    """When to `step` again with a later `now` (milliseconds on the host's clock), because
    something waits on time (a key's delay or pause, a retry); None when nothing does."""
    acquire: list[int] = field(default_factory=list)
    """Entries of shared keys to acquire a permit for from the store, in written order; report
    each as `granted` or `denied`. Each holds a local slot meanwhile."""
    release: list[int] = field(default_factory=list)
    """Entries of shared keys whose permit (or permit request) the host gives back: they ended,
    hit a rate limit, or were cancelled or stopped while waiting for a permit."""
    requests: "list[PermitRequest]" = field(default_factory=list)
    abort: "list[Abort]" = field(default_factory=list)
    """Executions to stop (first): their batch's execution limit passed, or their batch was
    cancelled. Report each one's end as usual; past its batch's abort grace the scheduler gives
    up on it (it is then in `settle`, TIMED_OUT, and its late end is refused)."""
    pause_store: "list[tuple[str, int]]" = field(default_factory=list)
    """Shared keys to pause at their store, `(key, until)` (milliseconds on the host's clock;
    the store keeps the longest pause), before giving back any permit. The scheduler decides it:
    a shared key's pause moved later (a rate limit it waits for, or a `pause` of a configured
    or template-made key). Each key at most once per step."""


@dataclass(frozen=True)
class Abort:
    """An execution to stop (`Outputs.abort`), and why."""

    entry: int
    cause: AbortCause
    """The entries of `acquire` with the terms to ask the store for: the key (made from the
    call's arguments for a key template), its limit (None: unbounded but spaced) and delay."""


@dataclass(frozen=True)
class PermitRequest:
    """A permit to ask a shared key's store for (`Outputs.requests`): at most `limit` permits
    at once across processes (None: unbounded; an adaptive limit's value now, which this
    process moved by the ends it reported), starts at least `delay_ms` apart and within every
    window of `rates`, where this entry's start costs `weight` units."""

    entry: int
    key: str
    limit: Optional[int]
    delay_ms: int
    rates: "tuple[RateWindow, ...]" = ()
    weight: int = 1


@dataclass(frozen=True)
class BatchNotApproved:
    """Its batch still has `pending` pending entries."""

    pending: int


@dataclass(frozen=True)
class KeyFull:
    """Its key is full; `running` are the labels of the executions holding its slots."""

    key: str
    limit: int
    running: list[str]


@dataclass(frozen=True)
class Behind:
    """An earlier entry (`label`) with one of its keys (`key`) has not started yet."""

    label: str
    key: str


@dataclass(frozen=True)
class KeyPaused:
    """It is first in line on `key` with a slot free, and the key is paused (a `Retry-After`,
    or the host's pause) until `until` (milliseconds on the host's clock)."""

    key: str
    until: int


@dataclass(frozen=True)
class KeySpacing:
    """It is first in line on `key` with a slot free, and the key's `delay` since its last
    start has not passed: it may start at `until`."""

    key: str
    until: int


@dataclass(frozen=True)
class RetryAt:
    """An unkeyed entry that hit a rate limit: it runs again at `until`."""

    until: int


@dataclass(frozen=True)
class PermitRequested:
    """A shared key's entry waiting for its permit from the store (state ACQUIRING)."""

    key: str


@dataclass(frozen=True)
class PermitGranted:
    """Its shared key's permit is granted; it waits for earlier entries of `key` to start
    (state GRANTED)."""

    key: str


Wait = Union[BatchNotApproved, KeyFull, Behind, KeyPaused, KeySpacing, RetryAt, PermitRequested, PermitGranted]
"""Why an approved entry waits."""


@dataclass(frozen=True)
class EntryStatus:
    """One entry as `inspect` reports it. `outcome` is set when `state` is ENDED, `reason`
    when it is SETTLED; `wait` says why an approved entry waits, and `why` says it as one plain
    sentence for a UI, written by the component so every host says the same ("waiting: github
    is full (2 of 2 running: g1, g2)"; a wait on time says how long is left by the
    scheduler's clock as last given). `keys` are the entry's keys: one, its key set's
    (written order, each once; a shared key first), or none when its tool is unbounded (for a key template, the
    key its call's arguments made)."""

    entry: int
    label: str
    tool: str
    keys: tuple[str, ...]
    state: EntryState
    outcome: Optional[Outcome] = None
    reason: Optional[Reason] = None
    wait: Optional[Wait] = None
    why: Optional[str] = None
    cause: Optional[AbortCause] = None
    """Why an ABORTED entry was aborted."""


@dataclass(frozen=True)
class AbortedRun:
    """An execution still running whose task the driver cancelled `since` seconds ago (it
    ignores the cancellation, or is slow to stop): it keeps its slot."""

    entry: int
    label: str
    since: float


@dataclass(frozen=True)
class LiveBatch:
    """A live batch as `Driver.inspect` shows it: cancelled (by its task, or because it
    failed), failed (its `run` raises), the scheduler's view of its entries
    (`Scheduler.inspect`), and executions that ignore their cancellation."""

    batch: int
    cancelled: bool
    failed: bool
    entries: "list[EntryStatus]"
    aborted: "list[AbortedRun]"


@dataclass(frozen=True)
class SavedEntry:
    """One entry of a saved call: its operation index (0 for a plain call) and state.
    `outcome` is set when `state` is ENDED, `reason` when it is SETTLED."""

    operation: int
    state: Saved
    outcome: Optional[Outcome] = None
    reason: Optional[Reason] = None


@dataclass(frozen=True)
class SavedCall:
    """A call of a live batch; `operations` is None for a plain call. Entries not listed were
    pending or approved. `keys`, for a tool with a key template, names the key each member of
    its key set took, in written order, a shared key first (a template's own text where the arguments made none);
    empty for other tools. `resume` gives the call those keys again, since the arguments
    themselves are not saved. (A state saved by 0.2 had `key`, one name or none: `from_dict`
    reads it as `keys` of that one name.)"""

    id: str
    tool: str
    operations: Optional[int]
    entries: list[SavedEntry] = field(default_factory=list)
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class SavedBatch:
    """A live batch; `execution_ms` and `abort_grace_ms` are its time limits (kept over a
    restart; what runs again gets a new deadline when it starts)."""

    batch: int
    first: int
    cancelled: bool
    calls: list[SavedCall]
    execution_ms: Optional[int] = None
    abort_grace_ms: Optional[int] = None


@dataclass(frozen=True)
class SavedState:
    """A scheduler's state as `unfinished` exports it, for `Scheduler.resume`. Persist it with
    `to_dict()` (plain JSON types) and read it back with `from_dict`."""

    version: int
    policy: int
    next_batch: int
    next_entry: int
    batches: list[SavedBatch]

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts, lists, strings, ints and None: ready for `json.dumps`. A call's `keys`
        are written only when it has some, so a state without key templates reads the same as
        before them."""
        return {
            "version": self.version,
            "policy": self.policy,
            "next_batch": self.next_batch,
            "next_entry": self.next_entry,
            "batches": [
                {
                    "batch": b.batch,
                    "first": b.first,
                    "cancelled": b.cancelled,
                    **({} if b.execution_ms is None else {"execution_ms": b.execution_ms}),
                    **({} if b.abort_grace_ms is None else {"abort_grace_ms": b.abort_grace_ms}),
                    "calls": [
                        {
                            "id": c.id,
                            "tool": c.tool,
                            "operations": c.operations,
                            "entries": [_saved_entry_dict(e) for e in c.entries],
                            **({"keys": list(c.keys)} if c.keys else {}),
                        }
                        for c in b.calls
                    ],
                }
                for b in self.batches
            ],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SavedState":
        """The inverse of `to_dict`; raises KeyError, TypeError or ValueError on a malformed
        dict (values are checked again when they cross into the component). A call saved by 0.2
        has `key` (a name, or None) instead of `keys`: it reads as `keys` of that one name (a
        call with both is a ValueError)."""
        return cls(
            version=d["version"],
            policy=d["policy"],
            next_batch=d["next_batch"],
            next_entry=d["next_entry"],
            batches=[
                SavedBatch(
                    batch=b["batch"],
                    first=b["first"],
                    cancelled=b["cancelled"],
                    calls=[
                        SavedCall(
                            id=c["id"],
                            tool=c["tool"],
                            operations=c["operations"],
                            entries=[_saved_entry_from_dict(e) for e in c["entries"]],
                            keys=_saved_keys_from_dict(c, f"batches[{i}].calls[{j}]"),
                        )
                        for j, c in enumerate(b["calls"])
                    ],
                    execution_ms=b.get("execution_ms"),  # absent in a state saved before limits
                    abort_grace_ms=b.get("abort_grace_ms"),
                )
                for i, b in enumerate(d["batches"])
            ],
        )


def _saved_keys_from_dict(c: dict[str, Any], what: str) -> tuple[str, ...]:
    """A saved call's `keys`: a list of names, or 0.2's `key` (one name) as that one name,
    never both; neither (a state saved before key templates, or a call without one; None is
    absent) is none."""
    key, keys = c.get("key"), c.get("keys")
    if key is not None:
        if keys is not None:
            raise ValueError(f"{what} has both keys and key (a state saved by 0.2): give one")
        if not isinstance(key, str):
            raise TypeError(f"{what}.key must be a str, not {type(key).__name__}")
        return (key,)
    if keys is None:
        return ()
    if not isinstance(keys, (list, tuple)):
        raise TypeError(f"{what}.keys must be a list of str, not {type(keys).__name__}")
    return tuple(keys)


def _saved_entry_dict(e: SavedEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"operation": e.operation, "state": Saved(e.state).value}
    if e.outcome is not None:
        out["outcome"] = Outcome(e.outcome).value
    if e.reason is not None:
        out["reason"] = ReasonKind(e.reason.kind).value
        if e.reason.after is not None:
            out["after"] = e.reason.after
        if e.reason.retries is not None:
            out["retries"] = e.reason.retries
        if e.reason.cause is not None:
            out["cause"] = AbortCause(e.reason.cause).value
    return out


def _saved_entry_from_dict(d: dict[str, Any]) -> SavedEntry:
    outcome = d.get("outcome")
    reason = d.get("reason")
    return SavedEntry(
        operation=d["operation"],
        state=Saved(d["state"]),
        outcome=None if outcome is None else Outcome(outcome),
        reason=None
        if reason is None
        else Reason(ReasonKind(reason), d.get("after"), d.get("retries"), None if d.get("cause") is None else AbortCause(d["cause"])),
    )


@dataclass(frozen=True)
class Unrestored:
    """A call `resume` left out; the host answers it itself."""

    batch: int
    call: str
    code: UnrestoredCode
    message: str


# ---------------------------------------------------------------------------------------------
# Admission


@dataclass(frozen=True)
class ShutdownReport:
    """By ticket: in-flight requests to cancel (each still needs its `end`) and queued requests
    refused (their tickets are retired)."""

    cancel: list[int]
    refused: list[int]
