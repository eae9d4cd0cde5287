"""Turnstile for Python: the tool-call scheduler component, run in wasmtime.

`Policy.resolve(layers)` turns TOML layers into a validated policy (or raises `ConfigError` with
every diagnostic); `Scheduler(policy)` schedules batches of tool calls (`submit`, then one `step`
per driver round); `Admission(...)` admits requests on one shared MCP connection; `run_batch` is
the asyncio driver. A refused `submit`, `resume` or admission call raises a `TurnstileError`
subclass with a stable `code`; `step` reports each refused input as data and applies the rest.
Nothing a host sends can trap the component: values are checked before they cross.

Each `Instance` is one independent instance of the component; the module-level classes use a
default instance created on first use.
"""

from __future__ import annotations

from ._component import Instance, default_instance
from .api import Admission, Policy, Scheduler
from .driver import CallOutcome, EntryOutcome, Execution, OutcomeKind, run_batch
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
    RefusedInputError,
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
    TurnstileError,
    Unrestored,
    UnrestoredCode,
    Wait,
)

__all__ = [
    "Admission",
    "AdmissionClass",
    "AdmissionError",
    "AdmissionErrorCode",
    "BatchNotApproved",
    "Behind",
    "Call",
    "CallOutcome",
    "ConfigError",
    "Diagnostic",
    "EntryOutcome",
    "EntryState",
    "EntryStatus",
    "Execution",
    "HostSettle",
    "InputErrorCode",
    "InputKind",
    "Instance",
    "KeyFull",
    "Label",
    "OnError",
    "Outcome",
    "OutcomeKind",
    "Outputs",
    "Policy",
    "Reason",
    "ReasonKind",
    "RefusedInput",
    "RefusedInputError",
    "ResumeError",
    "ResumeErrorCode",
    "Saved",
    "SavedBatch",
    "SavedCall",
    "SavedEntry",
    "SavedState",
    "Scheduler",
    "Settled",
    "ShutdownReport",
    "Span",
    "Started",
    "SubmitError",
    "SubmitErrorCode",
    "Submitted",
    "ToolPolicy",
    "TurnstileError",
    "Unrestored",
    "UnrestoredCode",
    "Wait",
    "default_instance",
    "run_batch",
]
