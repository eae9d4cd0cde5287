"""Turnstile for Python: the tool-call scheduler component, run in wasmtime.

`Policy.resolve(layers)` turns config layers (TOML text or plain dicts) into a validated policy
(or raises `ConfigError` with every diagnostic); `Driver(Scheduler(policy))` runs batches of
tool calls under it with asyncio (`await driver.run(calls, execute)`); `Scheduler` is the
sans-IO scheduler underneath (`submit`, then one `step` per round); `Gate` batches the calls of
frameworks that run tools themselves (`await gate.call(tool, call_id, arguments, run)`:
`run(arguments)` runs once the call is released; the arguments make its key when its tool's
key is a template); `Admission` admits requests on one shared MCP connection
(`async with admission.slot("call") as permit:`). `explain(label, reason)` is the component's
sentence for a settled entry (`EntryOutcome.message` and `Settled.message` carry it).

Every argument is checked before it crosses into the component (TypeError / ValueError naming
the parameter). A refused call raises a `TurnstileError` subclass with a stable `code`; `step`
reports each refused input as data and applies the rest. Every `Scheduler` and `Admission` runs
in a component instance of its own: if one ever traps (a bug), it raises `InstanceBrokenError`
from then on and nothing else is affected.
"""

from __future__ import annotations

from ._component import Instance
from .admission import Admission, Permit, Slot
from .config import Layer, Policy
from .driver import Driver, Execution, Resumed, run_batch
from .events import DriverEvent, EndEvent, SettledEvent, StartEvent, WaitEvent
from .gate import CallSettledError, Gate
from .outcomes import CallOutcome, EntryOutcome, OutcomeStatus, Running
from .errors import (
    AdmissionError,
    AdmissionTimeoutError,
    ConfigError,
    DisposedError,
    InstanceBrokenError,
    PersistError,
    RateLimited,
    RefusedInputError,
    ResumeError,
    RestoredError,
    ShutdownError,
    SubmitError,
    TurnstileError,
)
from .scheduler import Scheduler, explain
from .types import (
    Abort,
    AbortCause,
    AbortedRun,
    AdmissionClass,
    AdmissionErrorCode,
    BatchNotApproved,
    Behind,
    Call,
    Concurrency,
    Diagnostic,
    DiagnosticCode,
    Severity,
    EntryState,
    EntryStatus,
    HostSettle,
    InputErrorCode,
    InputKind,
    KeyFull,
    KeyPaused,
    KeySpacing,
    Label,
    LiveBatch,
    OnError,
    Outcome,
    Outputs,
    PermitRequest,
    PermitGranted,
    PermitRequested,
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
    ShutdownReport,
    Span,
    RateWindow,
    Started,
    SubmitErrorCode,
    Submitted,
    ToolPolicy,
    Unrestored,
    UnrestoredCode,
    Wait,
)

__version__ = "0.2.0"

__all__ = [
    "Admission",
    "AdmissionClass",
    "AdmissionError",
    "AdmissionTimeoutError",
    "AdmissionErrorCode",
    "BatchNotApproved",
    "Behind",
    "Call",
    "CallOutcome",
    "CallSettledError",
    "Concurrency",
    "ConfigError",
    "Abort",
    "AbortCause",
    "Diagnostic",
    "DiagnosticCode",
    "Severity",
    "DisposedError",
    "Driver",
    "DriverEvent",
    "EndEvent",
    "SettledEvent",
    "StartEvent",
    "WaitEvent",
    "EntryOutcome",
    "EntryState",
    "EntryStatus",
    "Execution",
    "Gate",
    "HostSettle",
    "InputErrorCode",
    "InputKind",
    "Instance",
    "InstanceBrokenError",
    "KeyFull",
    "KeyPaused",
    "KeySpacing",
    "Label",
    "Layer",
    "OnError",
    "Outcome",
    "OutcomeStatus",
    "Outputs",
    "PermitRequest",
    "Permit",
    "PermitGranted",
    "PermitRequested",
    "Policy",
    "RateLimited",
    "Reason",
    "ReasonKind",
    "RefusedInput",
    "RefusedInputError",
    "ResumeError",
    "ResumeErrorCode",
    "Resumed",
    "RestoredError",
    "PersistError",
    "LiveBatch",
    "AbortedRun",
    "RetryAt",
    "Running",
    "Saved",
    "SavedBatch",
    "SavedCall",
    "SavedEntry",
    "SavedState",
    "Scheduler",
    "Settled",
    "ShutdownError",
    "ShutdownReport",
    "Slot",
    "Span",
    "Started",
    "SubmitError",
    "SubmitErrorCode",
    "Submitted",
    "RateWindow",
    "ToolPolicy",
    "TurnstileError",
    "Unrestored",
    "UnrestoredCode",
    "Wait",
    "explain",
    "run_batch",
]
