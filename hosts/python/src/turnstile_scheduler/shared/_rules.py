"""The component's shared-key rules for this package's shared code (the WIT's `shared`
interface, `engine/src/shared/` in the repository): the lease schedule `SharedKeys` drives and
the grant rule `SqliteStore` asks between its statements. Every rule lives in the component, so
the JS and Python packages decide alike and share one store; the store texts are files the
package ships (`_texts`).

Each `LeaseSchedule` and each `GrantRule` has an instance of the component of its own (a store
runs its statements on a thread of its own, and an instance is used from one thread).
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple, Optional

from wasmtime.component import Record, Variant

from .._component import Instance


def _record(**fields: Any) -> Record:
    """A WIT record to lower (field names with `-` for `_`)."""
    r = Record()
    for name, value in fields.items():
        setattr(r, name.replace("_", "-"), value)
    return r


class GrantRuleError(Exception):
    """The store holds a row no client writes (a limit of 0, say): `decide` refused it."""


class GrantRule:
    """The grant rule (`decide`), in an instance of its own: use it from one thread."""

    def __init__(self) -> None:
        self._decide = Instance().func("shared", "decide")

    def decide(self, head: Optional[tuple[int, int]], held: int, last_grant_ms: int, paused_until_ms: int, now_ms: int) -> tuple[str, int]:
        """What the store does with the key's earliest waiting ticket (`head` is its `(limit,
        delay_ms)`, `None` when none waits): `("grant", 0)`, `("empty", 0)`, `("full", 0)` or
        `("wait", retry_ms)`."""
        key = _record(held=held, last_grant_ms=last_grant_ms, paused_until_ms=paused_until_ms)
        wit_head = None if head is None else _record(limit=head[0], delay_ms=head[1])
        result = self._decide(wit_head, key, now_ms)
        # result<decision, grant-error> lifts untagged: the decision is a Variant, an error a Record.
        if not isinstance(result, Variant):
            raise GrantRuleError(result.message)
        return result.tag, int(result.payload or 0)


class Renewal(NamedTuple):
    """A renewal to send now: `renew(key, tickets)`, then `renewed(id)` or `renew_failed(id)`."""

    id: int
    key: str
    tickets: list[int]


class GivenUp(NamedTuple):
    """A ticket given up (`reason`: `request-unanswered`, `renewal-failed`,
    `renewal-unanswered`, `not-renewed`)."""

    ticket: int
    key: str
    reason: str


class LeasePoll(NamedTuple):
    given_up: list[GivenUp]
    renewals: list[Renewal]
    wake_at: Optional[int]


class LeaseRefused(Exception):
    """The lease schedule refused a report (`code` is the WIT's `lease-error-code`)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


_METHODS = ("requested", "answered", "renewed", "renew-failed", "remove", "poll")


class LeaseSchedule:
    """The component's lease schedule of one `SharedKeys` (see the WIT's `shared` interface):
    reports in, `poll(now)` out. Times are the caller's monotonic milliseconds."""

    def __init__(self, lease_ms: int) -> None:
        self._instance = inst = Instance()
        resource = inst.func("shared", "[static]lease-schedule.create")(lease_ms)
        if isinstance(resource, Record):
            raise LeaseRefused(resource.code, resource.message)
        self._resource = resource
        self._methods = {name: inst.func("shared", f"[method]lease-schedule.{name}") for name in _METHODS}
        self._finalizer = weakref.finalize(self, _drop, inst, resource)

    def requested(self, key: str, ticket: int, now_ms: int) -> None:
        _check(self._methods["requested"](self._resource, key, ticket, now_ms))

    def answered(self, ticket: int) -> None:
        _check(self._methods["answered"](self._resource, ticket))

    def renewed(self, renewal: int) -> None:
        _check(self._methods["renewed"](self._resource, renewal))

    def renew_failed(self, renewal: int) -> None:
        _check(self._methods["renew-failed"](self._resource, renewal))

    def remove(self, ticket: int) -> None:
        _check(self._methods["remove"](self._resource, ticket))

    def poll(self, now_ms: int) -> LeasePoll:
        # result<lease-poll, lease-error> lifts tagged: both are records.
        result = self._methods["poll"](self._resource, now_ms)
        if result.tag == "err":
            raise LeaseRefused(result.payload.code, result.payload.message)
        p = vars(result.payload)
        return LeasePoll(
            given_up=[GivenUp(g.ticket, g.key, g.reason) for g in p["given-up"]],
            renewals=[Renewal(r.id, r.key, list(r.tickets)) for r in p["renewals"]],
            wake_at=p["wake-at"],
        )

    def close(self) -> None:
        self._finalizer()


def _check(result: Any) -> None:
    # result<_, lease-error> lifts untagged: None or a Record.
    if result is not None:
        raise LeaseRefused(result.code, result.message)


def _drop(instance: Instance, resource: Any) -> None:
    try:
        instance.drop(resource)
    except Exception:
        pass  # a broken instance's memory goes with it
