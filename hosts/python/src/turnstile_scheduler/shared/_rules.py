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
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Sequence

from wasmtime.component import Record, Variant

from .._component import Instance
from ..types import RateWindow

if TYPE_CHECKING:
    from . import Arrival  # noqa: F401


def _record(**fields: Any) -> Record:
    """A WIT record to lower (field names with `-` for `_`)."""
    r = Record()
    for name, value in fields.items():
        setattr(r, name.replace("_", "-"), value)
    return r


class Head(NamedTuple):
    """The terms of a key's earliest waiting ticket."""

    limit: int
    delay_ms: int
    rates: Sequence[RateWindow] = ()
    weight: int = 1


class KeyState(NamedTuple):
    """A key as a store keeps it, times on the store's clock."""

    held: int
    last_grant_ms: int
    paused_until_ms: int
    arrivals: Sequence[Arrival] = ()


class Decision(NamedTuple):
    """What the store does with the head: `tag` is `grant`, `empty`, `full` or `wait`."""

    tag: str
    retry_ms: int = 0
    arrivals: tuple[Arrival, ...] = ()
    rested_ms: int = 0
    """A grant's: the key is kept until then at least (its windows pace as fresh ones from then)."""


class GrantRule:
    """The grant rule (`decide`), in an instance of its own: use it from one thread."""

    def __init__(self) -> None:
        self._decide = Instance().func("shared", "decide")

    def decide(self, head: Optional[Head], key: KeyState, now_ms: int) -> Decision:
        """What the store does with the key's earliest waiting ticket (`head`, `None` when none
        waits): `Decision("grant", 0, arrivals)` (write those arrival times), `("empty", 0)`,
        `("full", 0)` or `("wait", retry_ms)`. Raises `SharedStoreError` (`store-failed`) when the
        rule refuses its input: the store holds a row no client writes (a limit of 0, say)."""
        wit_key = _record(
            held=key.held,
            last_grant_ms=key.last_grant_ms,
            paused_until_ms=key.paused_until_ms,
            arrivals=[_record(count=a.count, per_ms=a.per_ms, at_ms=a.at_ms, rest=a.rest) for a in key.arrivals],
        )
        wit_head = None
        if head is not None:
            rates = [_record(count=w.count, per_ms=w.per_ms, burst=w.burst) for w in head.rates]
            wit_head = _record(limit=head.limit, delay_ms=head.delay_ms, rates=rates, weight=head.weight)
        result = self._decide(wit_head, wit_key, now_ms)
        # result<decision, grant-error> lifts untagged: the decision is a Variant, an error a Record.
        if not isinstance(result, Variant):
            from . import SharedStoreError  # the package's public type (it imports this module)

            raise SharedStoreError("store-failed", f"the store holds a ticket no client writes: {result.message}")
        if result.tag == "grant":
            from . import Arrival  # the package's public type (it imports this module)

            granted = result.payload
            arrivals = tuple(Arrival(a.count, getattr(a, "per-ms"), getattr(a, "at-ms"), a.rest) for a in granted.arrivals)
            return Decision("grant", 0, arrivals, getattr(granted, "rested-ms"))
        return Decision(result.tag, int(result.payload or 0))


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
