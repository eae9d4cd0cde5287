"""Every error the package raises on purpose: one base class, `TurnstileError`, with a stable
string `code` (a `str` enum member where the component defines the codes, so it compares equal
to the WIT name).

A refused call changed nothing: `ConfigError`, `SubmitError`, `ResumeError`, `AdmissionError`
(and its `ShutdownError`), `RefusedInputError`. `InstanceBrokenError` is different: the
component trapped (a bug, since every value is checked before it crosses), and the instance
refuses every later use. A wrong argument type or value is the language's own `TypeError` or
`ValueError`, raised before anything crosses, with a message naming the parameter.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .types import (
        AdmissionErrorCode,
        Diagnostic,
        InputErrorCode,
        InputKind,
        RefusedInput,
        ResumeErrorCode,
        SubmitErrorCode,
    )


class TurnstileError(Exception):
    """The base of every error the package raises on purpose. `code` is stable; `message` is
    for people."""

    code: Any

    def __init__(self, code: Any, message: str) -> None:
        super().__init__(f"{code.value if isinstance(code, Enum) else code}: {message}")
        self.code = code
        self.message = message


class ConfigError(TurnstileError):
    """The layers did not resolve (code `invalid-config`); `diagnostics` holds every problem
    found, each with its code, key path, tools and spans. `str(error)` is every diagnostic
    rendered like rustc."""

    def __init__(self, diagnostics: "list[Diagnostic]") -> None:
        super().__init__("invalid-config", f"{len(diagnostics)} problem(s)")
        self.diagnostics = diagnostics
        self.args = ("\n".join(d.rendered for d in diagnostics),)

    def __str__(self) -> str:
        return str(self.args[0])


class SubmitError(TurnstileError):
    """`Scheduler.submit` refused the batch."""

    code: "SubmitErrorCode"


class ResumeError(TurnstileError):
    """`Scheduler.resume` refused the state as a whole."""

    code: "ResumeErrorCode"


class AdmissionError(TurnstileError):
    """An admission call was refused."""

    code: "AdmissionErrorCode"


class ShutdownError(AdmissionError):
    """The controller was shut down: raised by `begin` afterwards, and in every `slot` waiter
    still queued when `shutdown` ran (code `shutdown`)."""


class RefusedInputError(TurnstileError):
    """Raised by the driver when one of its batch's inputs was refused. `input`, `index`,
    `code` and `message` are the scheduler's report (`refused` has them as a `RefusedInput`).
    `Scheduler.step` itself never raises it: it returns refusals as data."""

    code: "InputErrorCode"

    def __init__(self, refused: "RefusedInput") -> None:
        super().__init__(refused.code, f"{refused.input.value} #{refused.index}: {refused.message}")
        self.refused = refused
        self.input: "InputKind" = refused.input
        self.index: int = refused.index


class InstanceBrokenError(TurnstileError):
    """The component instance trapped (code `instance-broken`). That is a bug (every value is
    checked before it crosses), and the instance cannot be entered again: every later use of
    any object bound to it raises this error. `cause` is what wasmtime reported. Objects on
    other instances are unaffected; see `Instance` for which objects share one."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__("instance-broken", message)
        self.cause = cause


class DisposedError(TurnstileError, RuntimeError):
    """A closed scheduler, controller, driver or policy was used (code `disposed`)."""

    def __init__(self, what: str) -> None:
        super().__init__("disposed", f"{what} is closed")
