"""The typed values that cross the API: frozen dataclasses mirroring the WIT records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional, Union

AdmissionClass = Literal["call", "request", "control", "reentrant"]
Outcome = Literal["ok", "failed"]
HostSettle = Literal["rejected", "skipped", "failed"]


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
    """One config problem; `rendered` is the rustc-style text with the source lines."""

    code: str
    message: str
    path: list[str]
    tools: list[str]
    labels: list[Label]
    help: Optional[str]
    rendered: str


class ConfigError(Exception):
    """The layers did not resolve; `diagnostics` holds every problem found."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("\n".join(d.rendered for d in diagnostics))
        self.diagnostics = diagnostics


class TurnstileError(Exception):
    """A host mistake (unknown entry, ended twice, ...): the call changed nothing."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ToolPolicy:
    """A tool's resolved policy; `key` and `limit` are None when it is unbounded."""

    name: str
    key: Optional[str]
    limit: Optional[int]
    fan_out: bool
    on_error: Literal["continue", "stop"]


@dataclass(frozen=True)
class Finished:
    """An operation that already has a response (after a restart)."""

    operation: int
    failed: bool


@dataclass(frozen=True)
class Call:
    """A call as the model wrote it; `operations` makes it a fan-out envelope of that many."""

    id: str
    tool: str
    operations: Optional[int] = None
    finished: list[Finished] = field(default_factory=list)


@dataclass(frozen=True)
class Reason:
    """Why an entry was settled: rejected, skipped, failed, cancelled, or stopped (after N)."""

    kind: Literal["rejected", "skipped", "failed", "cancelled", "stopped"]
    after: Optional[int] = None


@dataclass(frozen=True)
class Settlement:
    entry: str
    reason: Reason


@dataclass(frozen=True)
class Releases:
    """What to start now, and what the scheduler settled."""

    start: list[str]
    settle: list[Settlement]


@dataclass(frozen=True)
class KeyFull:
    key: str
    limit: int
    running: list[str]


Wait = Union[tuple[Literal["batch-not-approved"], int], tuple[Literal["key-full"], KeyFull], tuple[Literal["behind"], str]]


@dataclass(frozen=True)
class EntryStatus:
    """One entry: `state` is pending, approved, running, asking, ended-ok, ended-failed, or a
    settlement reason (with `reason`); `wait` says why an approved entry waits."""

    entry: str
    tool: str
    key: Optional[str]
    state: str
    reason: Optional[Reason]
    wait: Optional[Wait]


@dataclass(frozen=True)
class ShutdownReport:
    cancel: list[str]
    refused: list[str]
