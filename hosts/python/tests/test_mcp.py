"""The MCP Python SDK through `turnstile_scheduler.mcp.AdmittedClientSession`, against a real
MCP server over stdio (`mcp_server/server.py`, written with the SDK's server API) that records
overlapping calls and fails a tool call that overlaps another on a serialized binding.
Failure paths first: the race without admission, closing with work queued and in flight, time
queued counting against a request's timeout, a sampling chain deeper than the budget; then the
serialized binding, `allow_parallel` with a budget, the method table, and a nested sampling
chain that does not deadlock."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.shared.exceptions import MCPError

from turnstile_scheduler import AdmissionClass, AdmissionError, AdmissionTimeoutError, ShutdownError
from turnstile_scheduler import Admission
from turnstile_scheduler.mcp import AdmittedClientSession

SERVER = Path(__file__).parent / "mcp_server" / "server.py"
OVERLAP_SERVER = Path(__file__).parent / "mcp_server" / "overlap_server.py"
HANG_GUARD_S = 30  # only so that a deadlock fails the test instead of hanging CI


def run(mode: str, body: Callable[[Any], Awaitable[Any]], session_class: type = AdmittedClientSession, **kwargs: Any) -> Any:
    """Starts the server in `mode`, opens a session of `session_class` over stdio, runs `body`."""

    async def main() -> Any:
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER), mode])
        async with stdio_client(params) as (read, write):
            async with session_class(read, write, **kwargs) as session:
                await session.initialize()
                return await asyncio.wait_for(body(session), HANG_GUARD_S)

    return asyncio.run(main())


async def stats(session: Any) -> dict[str, Any]:
    result = await session.read_resource("test://stats")
    return json.loads(result.contents[0].text)


def text(result: types.CallToolResult) -> str:
    return result.content[0].text  # type: ignore[union-attr]


def nesting_callback(box: dict[str, Any]):
    """A sampling callback that answers "depth d" by calling `nest(d)` on the same session."""

    async def callback(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        depth = int(params.messages[0].content.text)  # type: ignore[union-attr]
        result = await box["session"].call_tool("nest", {"depth": depth})
        answer = text(result) if not result.is_error else f"error: {text(result)}"
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=answer), model="m")

    return callback


# ---------------------------------------------------------------------------------------------
# Failure paths


def test_without_admission_tool_calls_overlap_and_the_serialized_server_fails_them() -> None:
    async def body(session: Any) -> None:
        results = await asyncio.gather(*(session.call_tool("work", {"label": f"w{i}"}) for i in range(4)))
        # How many overlap depends on the server's timing; that any do is the race.
        failed = sum(r.is_error for r in results)
        assert failed >= 1
        assert (await stats(session))["overlaps"] == failed

    run("serialized", body, session_class=ClientSession)


def test_closing_refuses_new_work_and_cancels_queued_and_in_flight_requests() -> None:
    async def body(session: AdmittedClientSession) -> None:
        tasks = [asyncio.ensure_future(session.call_tool("work", {"label": f"w{i}", "seconds": 30})) for i in range(3)]
        await asyncio.sleep(0.3)  # w0 runs on the server, w1 and w2 are queued
        assert session.admission.in_flight() == 1
        session.shutdown()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, ShutdownError) for r in results), results
        with pytest.raises(ShutdownError):
            await session.call_tool("work", {"label": "late"})
        with pytest.raises(ShutdownError):
            await session.send_ping()

    run("serialized", body)


def test_leaving_the_session_shuts_admission_down() -> None:
    box: dict[str, Any] = {}

    async def body(session: AdmittedClientSession) -> None:
        box["session"] = session

    run("serialized", body)
    assert box["session"].admission.closed


def test_time_queued_counts_against_the_request_timeout() -> None:
    async def body(session: AdmittedClientSession) -> None:
        # Alone, 0.2 s of work fits a 0.6 s timeout.
        assert text(await session.call_tool("work", {"label": "alone", "seconds": 0.2}, read_timeout_seconds=0.6)) == "done alone"
        # Queued for 0.5 s behind another call, the same request has 0.1 s left: it times out.
        first = asyncio.ensure_future(session.call_tool("work", {"label": "first", "seconds": 0.5}))
        await asyncio.sleep(0.05)
        with pytest.raises(MCPError) as e:
            await session.call_tool("work", {"label": "queued", "seconds": 0.2}, read_timeout_seconds=0.6)
        assert e.value.error.code == types.REQUEST_TIMEOUT
        await first
        # Queued past its whole timeout: it never reached the server and consumed nothing.
        first = asyncio.ensure_future(session.call_tool("work", {"label": "first2", "seconds": 0.5}))
        await asyncio.sleep(0.05)
        with pytest.raises(AdmissionTimeoutError) as e:
            await session.call_tool("work", {"label": "never", "seconds": 0.1}, read_timeout_seconds=0.2)
        assert isinstance(e.value, AdmissionError) and isinstance(e.value, TimeoutError)
        assert e.value.code == "timed-out" and e.value.timeout == 0.2
        assert str(e.value) == f"timed-out: {e.value.id} was not admitted within 0.2 s"
        await first
        log = (await stats(session))["log"]
        assert "start never" not in log
        assert session.admission.in_flight() == 0

    # `queued` timed out on the server, which stops it and never answers: the grace frees it.
    run("serialized", body, abort_grace=0.05)


def test_a_sampling_chain_deeper_than_the_budget_fails_at_once_instead_of_hanging() -> None:
    box: dict[str, Any] = {}

    async def body(session: AdmittedClientSession) -> None:
        box["session"] = session
        # nest3 -> nest2 -> nest1 hold the budget of 3; nest0 would wait on them forever. The
        # callback's AdmissionError reaches the server as the sampling error, and back.
        with pytest.raises(MCPError) as e:
            await session.call_tool("nest", {"depth": 3})
        assert "would-deadlock" in str(e.value)
        assert session.admission.in_flight() == 0

    run("serialized", body, sampling_callback=nesting_callback(box), max_concurrent=3)


# ---------------------------------------------------------------------------------------------
# What admission guarantees


def test_a_serialized_binding_never_overlaps_tool_calls() -> None:
    async def body(session: AdmittedClientSession) -> None:
        results = await asyncio.gather(*(session.call_tool("work", {"label": f"w{i}"}) for i in range(4)))
        assert [text(r) for r in results] == [f"done w{i}" for i in range(4)]
        s = await stats(session)
        assert s["overlaps"] == 0 and s["peak_tools"] == 1
        assert s["log"] == [f"{what} w{i}" for i in range(4) for what in ("start", "end")]

    run("serialized", body)


def test_allow_parallel_with_a_budget_never_exceeds_the_budget() -> None:
    async def body(session: AdmittedClientSession) -> None:
        work = [session.call_tool("work", {"label": f"w{i}"}) for i in range(6)]
        reads = [session.read_resource(f"test://slow/r{i}") for i in range(3)]
        prompts = [session.get_prompt("greet", {"name": f"p{i}"}) for i in range(2)]
        await asyncio.gather(*work, *reads, *prompts)
        s = await stats(session)
        assert s["peak_requests"] == 2  # the budget, used and never exceeded
        assert s["peak_tools"] == 2

    run("parallel", body, max_concurrent=2, allow_parallel=True)


def test_every_method_goes_through_admission_under_its_class() -> None:
    seen: list[tuple[str, AdmissionClass]] = []

    async def body(session: AdmittedClientSession) -> None:
        slot = session.admission.slot

        def recording(cls: Any, **kw: Any) -> Any:
            seen.append((kw["id"].split(" #")[0], AdmissionClass(cls)))
            return slot(cls, **kw)

        session.admission.slot = recording  # type: ignore[method-assign]
        await session.send_ping()
        await session.list_tools()
        await session.list_resources()
        await session.list_prompts()
        await session.call_tool("work", {"label": "w"})
        await session.read_resource("test://slow/r")
        await session.get_prompt("greet", {"name": "p"})

    run("parallel", body)
    assert seen == [
        ("ping", AdmissionClass.CONTROL),
        ("tools/list", AdmissionClass.CONTROL),
        ("resources/list", AdmissionClass.CONTROL),
        ("prompts/list", AdmissionClass.CONTROL),
        ("tools/call", AdmissionClass.CALL),
        ("resources/read", AdmissionClass.REQUEST),
        ("prompts/get", AdmissionClass.REQUEST),
    ]
    with Admission(1) as adm:  # the component's table, which the session asks
        assert all(adm.class_of_method(m) is c for m, c in seen)


def test_the_method_table_is_the_components() -> None:
    import turnstile_scheduler.mcp as mcp

    assert not hasattr(mcp, "METHOD_CLASS"), "the table is the component's (class-of-method)"
    with Admission(1) as adm:
        assert adm.class_of_method("tools/call") is AdmissionClass.CALL
        for m in ["initialize", "ping", "tools/list", "prompts/list", "resources/list", "resources/templates/list",
                  "resources/subscribe", "resources/unsubscribe", "logging/setLevel"]:
            assert adm.class_of_method(m) is AdmissionClass.CONTROL, m
        # Any other method (newer ones included) is a request; methods compare exactly.
        for m in ["resources/read", "prompts/get", "completion/complete", "tasks/get", "", "Tools/Call", " ping"]:
            assert adm.class_of_method(m) is AdmissionClass.REQUEST, m
        with pytest.raises(TypeError):
            adm.class_of_method(b"ping")  # type: ignore[arg-type]


def test_a_nested_sampling_chain_does_not_deadlock() -> None:
    box: dict[str, Any] = {}

    async def body(session: AdmittedClientSession) -> None:
        box["session"] = session
        # nest2 asks the client to sample; the callback calls nest1 on the same serialized
        # session (re-entrant, parent nest2), which samples again and calls nest0.
        result = await session.call_tool("nest", {"depth": 2})
        assert not result.is_error, result
        assert text(result) == "2>1>bottom"
        s = await stats(session)
        assert s["log"] == ["start nest2", "start nest1", "start nest0", "end nest0", "end nest1", "end nest2"]
        assert session.admission.in_flight() == 0

    run("serialized", body, sampling_callback=nesting_callback(box), max_concurrent=4)


# ---------------------------------------------------------------------------------------------
# Slot holding (issue 19 point 5), against mcp_server/overlap_server.py: a server that exits
# with "FATAL: <call> overlapped <call>" when a tool call arrives while another runs.


def run_overlap(cancel: str, body: Callable[[Any, Callable[[], str]], Awaitable[Any]], **kwargs: Any) -> str:
    """Starts the overlap server (`cancel`: `ignore` or `honour` its `notifications/cancelled`),
    opens an `AdmittedClientSession(**kwargs)`, runs `body(session, stderr)`; returns what the
    server wrote to stderr."""

    async def main() -> str:
        with tempfile.TemporaryFile("w+") as errlog:

            def stderr() -> str:
                errlog.flush()
                errlog.seek(0)
                return errlog.read().strip()

            params = StdioServerParameters(command=sys.executable, args=[str(OVERLAP_SERVER), cancel])
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with AdmittedClientSession(read, write, **kwargs) as session:
                    await session.initialize()
                    await asyncio.wait_for(body(session, stderr), HANG_GUARD_S)
            return stderr()

    return asyncio.run(main())


async def server_log(session: Any) -> list[str]:
    return json.loads((await session.read_resource("test://log")).contents[0].text)


@pytest.mark.parametrize("how", ["timed out", "was cancelled"])
def test_serialized_a_tool_call_given_up_after_it_was_sent_keeps_its_slot_until_the_server_answers(how: str) -> None:
    async def body(session: AdmittedClientSession, stderr: Callable[[], str]) -> None:
        # The server cannot stop a call: `a` runs on after its cancellation, and answers late.
        if how == "timed out":
            with pytest.raises(MCPError) as e:
                await session.call_tool("block", {"label": "a"}, read_timeout_seconds=0.1)
            assert e.value.error.code == types.REQUEST_TIMEOUT
        else:
            a = asyncio.ensure_future(session.call_tool("block", {"label": "a"}))
            while "start a" not in await server_log(session):
                pass  # the server runs it: it was sent
            a.cancel()
            with pytest.raises(asyncio.CancelledError):
                await a
        b = asyncio.ensure_future(session.call_tool("work", {"label": "b"}))
        # Reads are class `request`: they flow. This one lets `a` end; its late answer frees the slot.
        released = asyncio.ensure_future(session.read_resource("test://release/a"))
        try:
            done = await b
        except Exception as e:
            released.cancel()
            pytest.fail(f"b failed: {e}; the server said: {stderr()}")
        assert text(done) == "b done"
        assert (await released).contents[0].text == "released"  # type: ignore[union-attr]
        assert await server_log(session) == ["start a", "end a", "start b", "end b"]
        assert session.admission.in_flight() == 0

    assert "FATAL" not in run_overlap("ignore", body, max_concurrent=3)


def test_serialized_abort_grace_frees_the_slot_of_a_call_cancelled_after_it_was_sent_once_it_passes() -> None:
    async def body(session: AdmittedClientSession, stderr: Callable[[], str]) -> None:
        # The SDK's server stops a cancelled call and never answers it: only the grace frees it.
        with pytest.raises(MCPError):
            await session.call_tool("block", {"label": "a"}, read_timeout_seconds=0.1)
        # Queued until the grace passes (its own timeout only bounds a broken grace).
        assert text(await session.call_tool("work", {"label": "b"}, read_timeout_seconds=10)) == "b done"
        assert await server_log(session) == ["start a", "cancel a", "start b", "end b"]

    assert "FATAL" not in run_overlap("honour", body, max_concurrent=3, abort_grace=0.05)


def test_serialized_by_default_a_server_that_acknowledges_the_cancellation_frees_the_slot_then() -> None:
    async def body(session: AdmittedClientSession, stderr: Callable[[], str]) -> None:
        with pytest.raises(MCPError):
            await session.call_tool("block", {"label": "a"}, read_timeout_seconds=0.1)
        # Without the acknowledgement seen, b would wait behind a's slot and time out queued.
        assert text(await session.call_tool("work", {"label": "b"}, read_timeout_seconds=10)) == "b done"
        assert await server_log(session) == ["start a", "cancel a", "start b", "end b"]
        assert session.admission.in_flight() == 0

    assert "FATAL" not in run_overlap("ack", body, max_concurrent=3)


def test_serialized_by_default_a_server_that_never_answers_keeps_that_one_slot_and_the_other_classes_flow() -> None:
    adm = Admission(3)

    async def body(session: AdmittedClientSession, stderr: Callable[[], str]) -> None:
        with pytest.raises(MCPError):
            await session.call_tool("block", {"label": "a"}, read_timeout_seconds=0.1)
        # The next tool call waits behind the held slot and times out queued: it is never sent.
        with pytest.raises(AdmissionTimeoutError):
            await session.call_tool("work", {"label": "b"}, read_timeout_seconds=0.2)
        # Two reads in flight together (the barrier answers only then): the budget less the held slot.
        reads = await asyncio.gather(*(session.read_resource("test://barrier/2") for _ in range(2)))
        assert [r.contents[0].text for r in reads] == ["met", "met"]  # type: ignore[union-attr]
        await session.list_tools()
        assert adm.in_flight() == 1
        assert [e for e in await server_log(session) if not e.startswith("barrier")] == ["start a", "cancel a"]

    assert "FATAL" not in run_overlap("honour", body, admission=adm)
    assert adm.in_flight() == 0, "closing frees the held slot"
    adm.close()


def test_a_call_cancelled_while_still_queued_leaves_at_once_and_never_reaches_the_server() -> None:
    async def body(session: AdmittedClientSession, stderr: Callable[[], str]) -> None:
        a = asyncio.ensure_future(session.call_tool("block", {"label": "a"}))
        while "start a" not in await server_log(session):
            pass
        b = asyncio.ensure_future(session.call_tool("work", {"label": "b"}))
        c = asyncio.ensure_future(session.call_tool("work", {"label": "c"}))
        await asyncio.sleep(0)  # b and c are queued
        b.cancel()
        with pytest.raises(asyncio.CancelledError):
            await b
        assert session.admission.in_flight() == 1
        await session.read_resource("test://release/a")
        assert text(await a) == "a done"
        assert text(await c) == "c done"
        assert await server_log(session) == ["start a", "end a", "start c", "end c"]

    run_overlap("ignore", body, max_concurrent=3)


def test_the_session_checks_abort_grace_and_refuses_a_dispatcher() -> None:
    import anyio

    send, receive = anyio.create_memory_object_stream(1)
    with pytest.raises(ValueError, match="abort_grace"):
        AdmittedClientSession(receive, send, abort_grace=-1)
    with pytest.raises(TypeError, match="abort_grace"):
        AdmittedClientSession(receive, send, abort_grace="1")
    with pytest.raises(TypeError, match="dispatcher"):
        AdmittedClientSession(dispatcher=object())
    send.close()
    receive.close()
