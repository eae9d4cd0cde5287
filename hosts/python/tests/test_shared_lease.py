"""The component's shared-key rules through the package: the lease schedule as the WIT exports
it (every bad input a typed refusal, never a trap), the grant rule against the shared table
(`tests/shared/grant-rule.txt`), and `SharedKeys` driving the schedule against stores that
misbehave on purpose (renewals that never answer, a request answered too late)."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest

from turnstile_scheduler import RateWindow
from turnstile_scheduler.shared import Arrival, SharedKeys, StoreUnavailableError, TicketState
from turnstile_scheduler.shared import SharedStoreError
from turnstile_scheduler.shared._rules import Decision, GrantRule, Head, KeyState, LeaseRefused, LeaseSchedule

TABLE = Path(__file__).resolve().parents[3] / "tests" / "shared" / "grant-rule.txt"


def run(coro: Any) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))


def test_the_schedule_renews_a_period_after_the_send_and_gives_up_before_the_lease() -> None:
    lease = LeaseSchedule(3000)
    lease.requested("a", 1, 0)
    lease.answered(1)
    lease.requested("a", 2, 400)
    lease.answered(2)
    poll = lease.poll(1000)
    assert [(r.key, r.tickets) for r in poll.renewals] == [("a", [1, 2])]
    assert poll.wake_at == 2500
    lease.renew_failed(poll.renewals[0].id)
    assert len(lease.poll(2000).renewals) == 1
    assert [(g.ticket, g.reason) for g in lease.poll(2500).given_up] == [(1, "renewal-unanswered")]


def test_every_bad_input_is_a_typed_refusal() -> None:
    for lease_ms in (299, 3_600_001):
        with pytest.raises(LeaseRefused) as e:
            LeaseSchedule(lease_ms)
        assert e.value.code == "lease-out-of-range"
    lease = LeaseSchedule(300)

    def code(f: Any, *args: Any) -> str:
        try:
            f(*args)
        except LeaseRefused as e:
            return e.code
        return "accepted"

    assert code(lease.requested, "", 1, 0) == "invalid-key"
    assert code(lease.requested, "é" * 101, 1, 0) == "invalid-key"  # 202 bytes
    assert code(lease.requested, "k", 5, 10) == "accepted"
    assert code(lease.requested, "k", 5, 10) == "ticket-not-new"
    assert code(lease.requested, "k", 6, 9) == "clock-went-back"
    assert code(lease.poll, 9) == "clock-went-back"
    assert code(lease.answered, 7) == "unknown-ticket"
    assert code(lease.remove, 7) == "unknown-ticket"
    assert code(lease.renewed, 1) == "unknown-renewal"
    assert code(lease.renew_failed, 1) == "unknown-renewal"
    assert code(lease.answered, 5) == "accepted"
    assert code(lease.answered, 5) == "already-answered"
    rule = GrantRule()
    for head, message in (
        (Head(0, 0), "limit 0"),
        (Head(1, 86_400_001), "delay"),
        (Head(1, 0, (RateWindow(1_000_001, 1000, 1),)), "rate window"),
        (Head(1, 0, (), 2), "weight 2"),
    ):
        with pytest.raises(SharedStoreError, match=message):
            rule.decide(head, KeyState(0, 0, 0), 1)


def _arrival(text: str, now: int) -> Arrival:
    """`COUNT/PER_MS:MS+REST` of the table, MS from `now`."""
    window, time = text.split(":")
    count, per_ms = window.split("/")
    ms, rest = time.rsplit("+", 1)
    return Arrival(int(count), int(per_ms), now + int(ms), int(rest))


def test_the_grant_rule_follows_the_shared_table() -> None:
    rule = GrantRule()
    now = 1_000_000_000_000
    lines = [l.strip() for l in TABLE.read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert len(lines) >= 30
    for line in lines:
        given, want = (part.split() for part in line.split("->"))
        limit, delay, held, since, pause, *terms = given
        rates: list[RateWindow] = []
        weight = 1
        arrivals: list[Arrival] = []
        for term in terms:
            name, value = term.split("=")
            if name == "rate":
                rates.append(RateWindow(*(int(n) for n in value.split("/"))))
            elif name == "weight":
                weight = int(value)
            else:
                assert name == "at", term
                arrivals.append(_arrival(value, now))
        head = None if limit == "-" else Head(int(limit), int(delay), tuple(rates), weight)
        last = 0 if since == "never" else now - int(since)
        paused = 0 if pause == "none" else now + int(pause)
        if want[0] == "grant":
            arrivals_after = tuple(_arrival(t.removeprefix("at="), now) for t in want[1:] if t != "exact")
            rested = max((a.at_ms + 2 for a in arrivals_after), default=0)
            expected = Decision("grant", 0, arrivals_after, rested)
        else:
            expected = Decision(want[0], int(want[1]) if len(want) > 1 else 0)
        assert rule.decide(head, KeyState(int(held), last, paused, tuple(arrivals)), now) == expected, line


class FakeStore:
    """Grants every request at once; `renew` answers as told."""

    kind = "fake"

    def __init__(self, renew: Any = None, request_delay: float = 0) -> None:
        self.calls: list[tuple[str, Any, float]] = []
        self._renew = renew
        self._request_delay = request_delay
        self._seq = 0

    async def request(self, key: str, ticket: str, terms: Any) -> TicketState:
        self.calls.append(("request", ticket, time.monotonic()))
        await asyncio.sleep(self._request_delay)
        self._seq += 1
        return TicketState(ticket, "granted", seq=self._seq, grant=self._seq, granted_ms=int(time.time() * 1000))

    async def renew(self, key: str, tickets: Any) -> list[TicketState]:
        self.calls.append(("renew", (key, list(tickets)), time.monotonic()))
        if self._renew is not None:
            return await self._renew(key, tickets)
        return [TicketState(t, "granted", seq=1, grant=1, granted_ms=0) for t in tickets]

    async def release(self, key: str, ticket: str) -> str:
        self.calls.append(("release", ticket, time.monotonic()))
        return "released"

    async def abandon(self, key: str, ticket: str) -> str:
        self.calls.append(("abandon", ticket, time.monotonic()))
        return "released"

    async def pause(self, key: str, for_ms: int) -> int:
        return 0

    def watch(self, key: str, tickets: Any, wake: Any) -> Any:
        raise AssertionError("nothing waits here")

    async def inspect(self, key: str) -> Any:
        raise AssertionError("unused")

    async def close(self) -> None:
        pass


def test_shared_keys_renew_each_key_about_every_third_of_the_lease() -> None:
    async def main() -> None:
        store = FakeStore()
        keys = SharedKeys(store, lease_ms=300, owner="o")  # type: ignore[arg-type]
        a1 = await keys.acquire("a", limit=2)
        a2 = await keys.acquire("a", limit=2)
        b = await keys.acquire("b", limit=1)
        await asyncio.sleep(0.55)
        for permit in (a1, a2, b):
            await permit.release()
        renews = [c[1] for c in store.calls if c[0] == "renew"]
        of_a = [tickets for key, tickets in renews if key == "a"]
        assert 3 <= len(of_a) <= 7, renews
        assert all(len(tickets) == 2 for tickets in of_a), "one renew names both tickets of a"
        assert not (a1.lost.is_set() or b.lost.is_set())
        await asyncio.sleep(0.25)
        assert len([c for c in store.calls if c[0] == "renew"]) == len(renews), "no renewals once nothing is held"
        await keys.close()

    run(main())


def test_renewals_that_never_answer_give_the_permit_up_before_its_lease_could_end() -> None:
    async def never(key: str, tickets: Any) -> Any:
        await asyncio.Event().wait()

    async def main() -> None:
        store = FakeStore(renew=never)
        keys = SharedKeys(store, lease_ms=300, owner="o")  # type: ignore[arg-type]
        permit = await keys.acquire("k", limit=1)
        sent = store.calls[0][2]
        await asyncio.wait_for(permit.lost.wait(), 5)
        after_ms = (time.monotonic() - sent) * 1000
        assert isinstance(permit.lost_error, StoreUnavailableError)
        assert "renewal was not answered in time" in str(permit.lost_error)
        assert 200 <= after_ms < 300, f"given up {after_ms:.0f} ms after the request was sent (lease 300)"
        await keys.close()

    run(main())


def test_a_request_answered_after_its_lease_could_end_is_given_back() -> None:
    async def main() -> None:
        store = FakeStore(request_delay=0.32)
        keys = SharedKeys(store, lease_ms=300, owner="o")  # type: ignore[arg-type]
        with pytest.raises(StoreUnavailableError, match="answered too late"):
            await keys.acquire("k", limit=1)
        await asyncio.sleep(0.01)
        abandoned = [c[1] for c in store.calls if c[0] == "abandon"]
        assert len(abandoned) == 1 and re.fullmatch(r"o-[0-9a-f]{12}-1", abandoned[0]), "the owner, the keys' random tag, the number"
        await keys.close()

    run(main())
