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
from typing import TYPE_CHECKING, Any, Optional

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


class RateLimited(Exception):
    """Raised by an execution (the driver's `execute`, a `Gate` call's `run`) that hit a rate
    limit: "429, try again after `retry_after` seconds". It is the host's signal to the
    driver, not an error the package raises.

    The driver then frees the entry's slot, pauses its key until then (a pause only ever
    extends, and holds every call on the key, in every batch), puts the entry back at its
    place at the front of its key's queue, and calls `execute` again for the same entry when
    the pause ends, in written order with the calls behind it. Past its key's `retries` (3
    unless the config sets `retries`) the entry is settled instead, with
    `Reason(ReasonKind.RATE_LIMITED, retries=n)`; under `on_error = "stop"` that is its
    failure. Raised while its batch is being cancelled, it ends the entry as cancelled.

    `retry_after` is in seconds (an int or float >= 0, from a `Retry-After` header:
    `RateLimited.from_header`); `until` is the alternative, a time on the event loop's clock
    (`loop.time()`, seconds). Give one, not both."""

    def __init__(self, retry_after: Optional[float] = None, *, until: Optional[float] = None, message: Optional[str] = None) -> None:
        if (retry_after is None) == (until is None):
            raise TypeError("RateLimited takes retry_after (seconds) or until (loop.time() seconds), one of them")
        self.retry_after = _seconds(retry_after, "retry_after")
        self.until = _seconds(until, "until")
        if message is None:
            message = f"rate limited: retry after {retry_after} s" if retry_after is not None else f"rate limited: retry at {until}"
        self._wait_ms: Optional[int] = None  # the exact wait from_header read, in milliseconds
        self.header_error: Optional[str] = None
        """From `from_header`: why the header was not read (the component's sentence), when
        `default` was used for a header that was given; else None."""
        super().__init__(message)

    @classmethod
    def from_header(cls, value: Optional[str], *, default: float = 1.0, now: Optional[float] = None) -> "RateLimited":
        """From a `Retry-After` header, read by the component (the WIT's `retry-after`):
        delta-seconds (ASCII digits only; huge values saturate) or an HTTP-date (IMF-fixdate,
        RFC 850 or asctime; seconds from `now`, a Unix time, default `time.time()`; a date in
        the past is 0). `default` seconds when the header is missing (None), empty, or not a
        value the component reads (a fraction, a sign, other digits than ASCII, a date that
        names no day; `header_error` then holds the component's sentence). Waits are not bounded
        here: the scheduler settles an entry whose endpoint asks for longer than its key's
        `max_wait` (5 minutes by default) at once (its sentence says how long it was asked to
        wait)."""
        seconds, wait_ms, reason = default, None, None
        if value is not None:
            text = str(value)
            if now is None:
                import time as _time

                now = _time.time()
            elif isinstance(now, bool) or not isinstance(now, (int, float)):
                raise TypeError(f"now must be a Unix time in seconds, not {type(now).__name__}")
            # Pure range protection: wasmtime-py would wrap a value outside u64.
            wall_now_ms = int(min(max(now * 1000, 0), _U64_MAX)) if now == now else 0
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate cannot cross: unreadable
                reason = f"the retry-after value {text!r} is not valid text"
            else:
                from ._component import retry_after

                result = retry_after(text, wall_now_ms)
                if isinstance(result, int):  # result<u64, retry-after-error> lifts untagged
                    wait_ms, seconds = result, result / 1000
                else:
                    reason = result.message
        limited = cls(seconds, message=f"rate limited: Retry-After {value!r}")
        limited._wait_ms = wait_ms
        limited.header_error = reason
        return limited


_U64_MAX = 2**64 - 1


def _seconds(value: Any, what: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    f = float(value)
    if not (f >= 0 and f != float("inf")):
        raise ValueError(f"{what} must be a finite number of seconds >= 0, not {value!r}")
    return f


class AdmissionTimeoutError(AdmissionError, TimeoutError):
    """A request was not admitted within its time (`Admission.slot`'s `timeout`, or an MCP
    request's timeout spent queued): it was given up while queued, consumed nothing and was
    never sent (code `timed-out`). Also a `TimeoutError`, so `except TimeoutError` catches every
    timeout alike. `id` names the request; `timeout` is in seconds."""

    def __init__(self, id: str, timeout: float) -> None:
        from .types import AdmissionErrorCode

        super().__init__(AdmissionErrorCode.TIMED_OUT, f"{id} was not admitted within {timeout} s")
        self.id = id
        self.timeout = timeout


class PersistError(TurnstileError):
    """The driver's `persist` raised (code `persist-failed`): the driver is closed, every live
    batch raised this error (its `__cause__` is what `persist` raised), running executions were
    cancelled, and nothing started after it."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__("persist-failed", f"persist failed, the driver is closed: {cause}")
        self.__cause__ = cause


class RestoredError(Exception):
    """An error an execution raised before a restart, as the snapshot saved it: `name` and
    `message` are the original's (its class and traceback are not saved)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message

    def __repr__(self) -> str:
        return f"RestoredError({self.name!r}, {self.message!r})"
