"""Turnstile for Python: the tool-call scheduler component, run in wasmtime.

`Policy.resolve(layers)` turns TOML layers into a validated policy (or raises `ConfigError` with
every diagnostic); `Scheduler(policy)` schedules batches of tool calls; `Admission(...)` admits
requests on one shared MCP connection; `run_batch` is the asyncio driver. Host mistakes raise
`TurnstileError` with a stable `code`; nothing a host sends can trap the component.

Each `Instance` is one independent instance of the component; the module-level classes use a
default instance created on first use.
"""

from __future__ import annotations

from ._component import Instance, default_instance
from .driver import CallOutcome, EntryOutcome, Execution, run_batch
from .types import (
    AdmissionClass,
    Call,
    ConfigError,
    Diagnostic,
    EntryStatus,
    Finished,
    KeyFull,
    Label,
    Releases,
    Settlement,
    ShutdownReport,
    Span,
    ToolPolicy,
    TurnstileError,
)
from .api import Admission, Policy, Scheduler, entry_labels

__all__ = [
    "Admission",
    "AdmissionClass",
    "Call",
    "CallOutcome",
    "ConfigError",
    "Diagnostic",
    "EntryOutcome",
    "EntryStatus",
    "Execution",
    "Finished",
    "Instance",
    "KeyFull",
    "Label",
    "Policy",
    "Releases",
    "Scheduler",
    "Settlement",
    "ShutdownReport",
    "Span",
    "ToolPolicy",
    "TurnstileError",
    "default_instance",
    "entry_labels",
    "run_batch",
]
