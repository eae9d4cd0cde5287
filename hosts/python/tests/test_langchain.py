"""LangChain v1 `create_agent` through `turnstile_scheduler.langchain.TurnstileMiddleware`,
driven by LangChain's own `GenericFakeChatModel` writing several tool calls per response over
several turns, with tools that record their start and end. Failure paths first (a tool that
fails, a rejected call, a cancelled run, a 429), then the race without the middleware, the same
run limited (async and sync), one batch per response, and the assumptions the middleware rests
on, tested against LangChain directly."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

try:
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import StructuredTool, ToolException
except ImportError as e:  # pragma: no cover
    raise ImportError(
        f"tests/test_langchain.py needs langchain 1.5 ({e}): pip install 'langchain==1.5.0' "
        "(or the package's test extra)"
    ) from e

import _adapters as adapters
import vloop
from _adapters import LIMITS, policy
from turnstile_scheduler import Gate, Policy, RateLimited
from turnstile_scheduler.langchain import TurnstileMiddleware

class World(adapters.World):
    """The shared world, with its tools as LangChain tools (sync and async)."""

    def tools(self) -> list[StructuredTool]:
        world = self

        def draft_sync(title: str) -> int:
            number = max(world.rfds) + 1
            world.start("rfd_draft", title)
            time.sleep(0.02)
            world.rfds[number] = title
            world.end("rfd_draft", title)
            return number

        async def draft(title: str) -> int:
            number = max(world.rfds) + 1
            world.start("rfd_draft", title)
            await asyncio.sleep(0.02)
            world.rfds[number] = title
            world.end("rfd_draft", title)
            return number

        def renumber_check(old: int, new: int) -> None:
            if old not in world.rfds:
                raise ToolException(f"no RFD {old}")
            if new in world.rfds:
                raise ToolException(f"RFD {new} exists")

        def renumber_sync(old: int, new: int) -> str:
            renumber_check(old, new)
            world.start("rfd_renumber", f"{old}->{new}")
            time.sleep(0.01)
            world.rfds[new] = world.rfds.pop(old)
            world.end("rfd_renumber", f"{old}->{new}")
            return f"{old} is now {new}"

        async def renumber(old: int, new: int) -> str:
            renumber_check(old, new)
            world.start("rfd_renumber", f"{old}->{new}")
            await asyncio.sleep(0.01)
            world.rfds[new] = world.rfds.pop(old)
            world.end("rfd_renumber", f"{old}->{new}")
            return f"{old} is now {new}"

        def issues_sync(n: int) -> str:
            world.start("github_issues", str(n))
            time.sleep(0.01)
            world.end("github_issues", str(n))
            return f"issue {n}"

        async def issues(n: int) -> str:
            world.start("github_issues", str(n))
            await asyncio.sleep(0.01)
            world.end("github_issues", str(n))
            return f"issue {n}"

        def read_sync(path: str) -> str:
            world.start("read", path)
            time.sleep(0.005)
            world.end("read", path)
            return f"contents of {path}"

        async def read(path: str) -> str:
            world.start("read", path)
            await asyncio.sleep(0.005)
            world.end("read", path)
            return f"contents of {path}"

        return [
            StructuredTool.from_function(draft_sync, coroutine=draft, name="rfd_draft", description="Allocates the next RFD number."),
            StructuredTool.from_function(renumber_sync, coroutine=renumber, name="rfd_renumber", description="Moves an RFD.",
                                         handle_tool_error=True),
            StructuredTool.from_function(issues_sync, coroutine=issues, name="github_issues", description="Reads an issue."),
            StructuredTool.from_function(read_sync, coroutine=read, name="read", description="Reads a file."),
        ]


def call(tool: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": tool, "args": args, "id": call_id, "type": "tool_call"}


TURNS = [[call(*c) for c in turn] for turn in adapters.TURNS]


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, with `bind_tools` (the agent binds its tools) and a record
    of the tool results it received before each turn."""

    received: list[dict[str, Any]] = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedModel":
        return self

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        answers: dict[str, Any] = {}
        for m in reversed(messages):
            if not isinstance(m, ToolMessage):
                break
            answers[m.tool_call_id] = (m.content, m.status)
        self.received.append(answers)
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def model(turns: list[list[dict[str, Any]]] = TURNS) -> ScriptedModel:
    script = [AIMessage(content="", tool_calls=list(t)) for t in turns] + [AIMessage(content="done")]
    return ScriptedModel(messages=iter(script), received=[])


def contents(answers: dict[str, Any]) -> dict[str, Any]:
    return {k: c for k, (c, _) in answers.items()}


def run_agent(world: World, middleware: list[Any], turns: list[list[dict[str, Any]]] = TURNS, sync: bool = False) -> ScriptedModel:
    m = model(turns)
    agent = create_agent(m, world.tools(), middleware=middleware)
    if sync:
        result = agent.invoke({"messages": [("user", "go")]})
    else:
        result = vloop.run(agent.ainvoke({"messages": [("user", "go")]}))
    assert result["messages"][-1].content == "done"
    return m


def no_live_batches(mw: TurnstileMiddleware) -> bool:
    assert mw.gate.driver.inspect() == [] and mw.gate.expected() == [], (mw.gate.driver.inspect(), mw.gate.expected())
    return True


# -- failure paths ------------------------------------------------------------------------------


def test_a_tool_that_fails_fails_only_its_call_and_the_model_reads_why() -> None:
    """`rfd_renumber` raises ToolException (handled by the tool: LangChain answers with an error
    ToolMessage): its call failed, its slot is free at once, the next call of the key runs."""
    world = World()
    mw = TurnstileMiddleware(policy())
    turns = [[call("rfd_renumber", {"old": 9, "new": 10}, "bad"), call("rfd_renumber", {"old": 1, "new": 2}, "good")]]
    m = run_agent(world, [mw], turns)
    assert m.received[1]["bad"] == ("no RFD 9", "error")
    assert m.received[1]["good"] == ("1 is now 2", "success")
    assert no_live_batches(mw)


def test_a_tool_that_raises_fails_the_run_and_frees_its_key() -> None:
    """A tool raising an error LangChain does not handle fails the run (LangChain's default);
    the other calls of the response are withdrawn, and the next run on the key is not held."""
    world = World()
    mw = TurnstileMiddleware(policy())

    async def boom(title: str) -> int:
        await asyncio.sleep(0.001)
        raise RuntimeError("disk full")

    tools = [StructuredTool.from_function(coroutine=boom, name="rfd_draft", description="x")]
    turns = [[call("rfd_draft", {"title": "A"}, "a1"), call("rfd_draft", {"title": "B"}, "a2")]]
    agent = create_agent(model(turns), tools, middleware=[mw])
    with pytest.raises(RuntimeError, match="disk full"):
        vloop.run(agent.ainvoke({"messages": [("user", "go")]}))
    assert no_live_batches(mw)
    m = run_agent(world, [mw], [[call("rfd_draft", {"title": "C"}, "c1")]])
    assert contents(m.received[1]) == {"c1": "2"}


def test_a_rejected_call_answers_the_model_with_the_components_sentence() -> None:
    world = World()
    decide = lambda label, c: "reject" if label == "d2" else "approve"  # noqa: E731
    mw = TurnstileMiddleware(policy(), decide=decide)
    m = run_agent(world, [mw], TURNS[:1])
    assert m.received[1]["d2"] == ("not run: the user rejected this call", "error")
    assert m.received[1]["d1"] == ("2", "success")
    assert ("start", "rfd_draft", "B") not in world.events


def test_cancelling_the_run_withdraws_queued_calls_and_cancels_running_ones() -> None:
    world = World()
    mw = TurnstileMiddleware(policy())
    agent = create_agent(model(TURNS[:1]), world.tools(), middleware=[mw])

    async def main() -> None:
        task = asyncio.create_task(agent.ainvoke({"messages": [("user", "go")]}))
        while ("start", "rfd_draft", "A") not in world.events:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)

    vloop.run(main())
    assert ("start", "rfd_draft", "B") not in world.events, "a queued call was withdrawn"
    assert ("end", "rfd_draft", "A") not in world.events, "the running call was cancelled"
    assert no_live_batches(mw)
    m = run_agent(world, [mw], [[call("rfd_draft", {"title": "C"}, "c1")]])
    assert contents(m.received[1]) == {"c1": "2"}


def test_a_429_retries_the_call_in_place() -> None:
    """A tool raising `RateLimited` pauses its key and runs again in its written place: the
    call after it on the key waits."""
    world = World()
    starts: list[str] = []

    async def flaky(title: str) -> str:
        starts.append(title)
        if title == "A" and starts.count("A") == 1:
            raise RateLimited(0.05)
        await asyncio.sleep(0.001)
        return f"ok {title}"

    tools = [StructuredTool.from_function(coroutine=flaky, name="rfd_draft", description="x")]
    turns = [[call("rfd_draft", {"title": "A"}, "a1"), call("rfd_draft", {"title": "B"}, "b1")]]
    mw = TurnstileMiddleware(policy())
    m = model(turns)
    agent = create_agent(m, tools, middleware=[mw])
    vloop.run(agent.ainvoke({"messages": [("user", "go")]}))
    assert starts == ["A", "A", "B"]
    assert contents(m.received[1]) == {"a1": "ok A", "b1": "ok B"}


def test_the_middleware_checks_its_arguments() -> None:
    with pytest.raises(ValueError):
        TurnstileMiddleware(policy(), settled="ignore")  # type: ignore[arg-type]
    gate = Gate(policy())
    assert TurnstileMiddleware(gate).gate is gate
    with pytest.raises(ValueError):
        TurnstileMiddleware(gate, decide=lambda label, c: "approve")


# -- the race, and the same run limited ---------------------------------------------------------


def test_without_the_middleware_the_calls_race() -> None:
    world = World()
    m = run_agent(world, [])
    drafts = contents(m.received[1])
    assert drafts["d1"] == drafts["d2"] == "2", "two drafts took the same id"
    renumbered = contents(m.received[2])
    assert renumbered["r1"] == "2 is now 5"
    assert (renumbered["r2"], renumbered["r3"]) == ("no RFD 5", "no RFD 6")
    assert world.peak["rfd"] > 1 and world.peak["github"] > 2


def check_limited_run(world: World, m: ScriptedModel, threads: bool = False) -> None:
    assert contents(m.received[1]) == {"d1": "2", "x1": "contents of x", "d2": "3"}
    assert contents(m.received[2]) == {"r1": "2 is now 5", "r2": "5 is now 6", "r3": "6 is now 7"}
    assert contents(m.received[3]) == {f"g{i}": f"issue {i}" for i in range(5)}
    assert world.rfds == {1: "existing", 3: "B", 7: "A"}
    for key, limit in LIMITS.items():
        assert world.peak[key] <= limit, key
    assert world.peak["github"] == 2, "the limit is used, not serialized"
    assert world.starts("rfd") == ["A", "B", "2->5", "5->6", "6->7"]
    if threads:  # calls released together start in their worker threads in any order
        assert sorted(world.starts("github")) == [str(i) for i in range(5)]
    else:
        assert world.starts("github") == [str(i) for i in range(5)]
    # An unrelated tool does not wait for the key.
    assert world.events.index(("start", "read", "x")) < world.events.index(("end", "rfd_draft", "A"))


def test_limited_keeps_every_key_within_its_limit_and_in_written_order() -> None:
    world = World()
    mw = TurnstileMiddleware(policy())
    check_limited_run(world, run_agent(world, [mw]))
    assert no_live_batches(mw)


def test_sync_invoke_is_limited_the_same_way() -> None:
    world = World()
    mw = TurnstileMiddleware(policy())
    try:
        check_limited_run(world, run_agent(world, [mw], sync=True), threads=True)
        assert no_live_batches(mw)
        # The same middleware, then async (one after the other).
        world2 = World()
        check_limited_run(world2, run_agent(world2, [mw]))
    finally:
        mw.close()


def test_each_response_is_one_batch_decided_before_any_of_it_starts() -> None:
    """`decide` sees every call of a response, in written order, before any of it starts (it
    waits a while on the first: split batches would let the rest start meanwhile)."""
    world = World()
    log: list[tuple[str, str]] = []

    async def decide(label: str, c: Any) -> str:
        if label in ("d1", "r1", "g0"):
            await asyncio.sleep(0.03)
        log.append(("decided", label))
        return "approve"

    class Starts(AgentMiddleware):  # records each tool's start, inside Turnstile's slot
        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            log.append(("start", request.tool_call["id"]))
            return await handler(request)

    run_agent(world, [TurnstileMiddleware(policy(), decide=decide), Starts()])
    for turn in TURNS:
        ids = [c["id"] for c in turn]
        decided = [log.index(("decided", i)) for i in ids]
        started = [log.index(("start", i)) for i in ids]
        assert decided == sorted(decided), "written order"
        assert max(decided) < min(started), f"a call of {ids} started before all were decided"


def test_a_key_template_is_made_from_the_calls_arguments() -> None:
    config = """
[conversation.tools.write]
concurrency = { key = "fs:{path}", limit = 1 }
"""
    events: list[tuple[str, str]] = []

    async def write(path: str, text: str) -> str:
        events.append(("start", text))
        await asyncio.sleep(0.01)
        events.append(("end", text))
        return f"wrote {path}"

    tools = [StructuredTool.from_function(coroutine=write, name="write", description="x")]
    turn = [call("write", {"path": p, "text": t}, t) for p, t in (("a", "w1"), ("b", "w2"), ("a", "w3"), ("b", "w4"))]
    agent = create_agent(model([turn]), tools, middleware=[TurnstileMiddleware(Policy.resolve([("test", config)]))])
    vloop.run(agent.ainvoke({"messages": [("user", "go")]}))
    starts = [t for kind, t in events if kind == "start"]
    assert starts[:2] == ["w1", "w2"], "the two files ran together"
    assert events.index(("start", "w3")) > events.index(("end", "w1"))
    assert events.index(("start", "w4")) > events.index(("end", "w2"))


# -- what the middleware relies on in LangChain ----------------------------------------------------


def test_langchain_shows_the_response_to_after_model_before_any_tool_and_gives_each_call_its_id() -> None:
    """The assumptions of `TurnstileMiddleware`: `aafter_model`/`after_model` see the model's
    AIMessage (the last message) with its tool calls in written order before any tool of it
    starts; `awrap_tool_call`/`wrap_tool_call` get each call's id, name and args in
    `request.tool_call`; the sync tool node runs the calls of a response in worker threads at
    the same time. If a LangChain release changes one, this fails instead of the middleware
    racing."""
    for sync in (False, True):
        log: list[tuple[str, Any]] = []
        threads: set[int] = set()
        overlap = {"now": 0, "peak": 0}
        lock = threading.Lock()

        class Probe(AgentMiddleware):
            def _seen(self, state: Any) -> None:
                last = state["messages"][-1]
                assert isinstance(last, AIMessage)
                log.append(("after_model", [c["id"] for c in last.tool_calls]))

            async def aafter_model(self, state: Any, runtime: Any) -> None:
                self._seen(state)

            def after_model(self, state: Any, runtime: Any) -> None:
                self._seen(state)

            async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
                c = request.tool_call
                log.append(("tool", (c["id"], c["name"], c["args"])))
                return await handler(request)

            def wrap_tool_call(self, request: Any, handler: Any) -> Any:
                c = request.tool_call
                with lock:
                    log.append(("tool", (c["id"], c["name"], c["args"])))
                    threads.add(threading.get_ident())
                    overlap["now"] += 1
                    overlap["peak"] = max(overlap["peak"], overlap["now"])
                try:
                    time.sleep(0.01)
                    return handler(request)
                finally:
                    with lock:
                        overlap["now"] -= 1

        run_agent(World(), [Probe()], sync=sync)
        i = 0
        for turn in TURNS:
            assert log[i] == ("after_model", [c["id"] for c in turn]), sync
            tools = log[i + 1 : i + 1 + len(turn)]
            assert sorted(t for _, t in tools) == sorted((c["id"], c["name"], c["args"]) for c in turn)
            i += 1 + len(turn)
        assert log[i] == ("after_model", [])
        if sync:
            assert len(threads) > 1 and overlap["peak"] > 1, "the sync tool node runs calls in threads at once"
