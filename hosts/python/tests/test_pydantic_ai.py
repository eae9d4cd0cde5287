"""pydantic-ai through `turnstile_scheduler.pydantic_ai.limited`, driven by pydantic-ai's own
`FunctionModel` emitting several tool calls in one response over several model turns, with
tools that record their start and end. First the race without the wrapper (the renumber chain
fails, two drafts take the same id), then the same run limited, a rejected call's text reaching
the model, and the assumption the adapter rests on, tested directly."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset, WrapperToolset

import _adapters as adapters
import vloop
from _adapters import CONFIG, LIMITS
from turnstile_scheduler import Gate, Policy
from turnstile_scheduler.pydantic_ai import LimitedToolset, limited

class World(adapters.World):
    """The shared world, with its tools as a pydantic-ai toolset."""

    def toolset(self) -> FunctionToolset[Any]:
        tools: FunctionToolset[Any] = FunctionToolset()
        world = self

        @tools.tool_plain
        async def rfd_draft(title: str) -> int:
            """Allocates the next RFD number (read, think, write: racy by nature)."""
            return await world.draft(title)

        @tools.tool_plain
        async def rfd_renumber(old: int, new: int) -> str:
            """Moves RFD `old` to `new`; `old` must exist and `new` be free."""
            try:
                if old not in world.rfds:
                    raise ModelRetry(f"no RFD {old}")
                if new in world.rfds:
                    raise ModelRetry(f"RFD {new} exists")
                await world.recorded("rfd_renumber", f"{old}->{new}", 0.01)
                world.rfds[new] = world.rfds.pop(old)
                return f"{old} is now {new}"
            finally:
                world.events.append(("end", "rfd_renumber", f"{old}->{new}"))

        @tools.tool_plain
        async def github_issues(n: int) -> str:
            await world.recorded("github_issues", str(n), 0.01)
            world.events.append(("end", "github_issues", str(n)))
            return f"issue {n}"

        @tools.tool_plain
        async def read(path: str) -> str:
            await world.recorded("read", path, 0.005)
            world.events.append(("end", "read", path))
            return f"contents of {path}"

        return tools


def call(tool: str, args: dict[str, Any], call_id: str) -> ToolCallPart:
    return ToolCallPart(tool, args, tool_call_id=call_id)


# Each turn asserts what the model received for the previous one.
TURNS = [[call(*c) for c in turn] for turn in adapters.TURNS]


class Script:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = len(self.received)
        if turn > 0:
            last = messages[-1]
            assert isinstance(last, ModelRequest)
            # A tool's return, or (ModelRetry) the retry text pydantic-ai sends back.
            self.received.append({p.tool_call_id: p.content for p in last.parts if hasattr(p, "tool_call_id")})
        else:
            self.received.append({})
        if turn < len(TURNS):
            return ModelResponse(parts=list(TURNS[turn]))
        return ModelResponse(parts=[TextPart("done")])


def run_agent(toolset: Any) -> Script:
    script = Script()
    agent = Agent(FunctionModel(script), toolsets=[toolset], retries=5)
    result = vloop.run(agent.run("go"))
    assert result.output == "done"
    return script


def test_without_the_wrapper_the_calls_race() -> None:
    world = World()
    script = run_agent(world.toolset())
    drafts = script.received[1]
    assert drafts["d1"] == drafts["d2"] == 2, "two drafts took the same id"
    # The chain ran at once: 5 -> 6 and 6 -> 7 found nothing to move.
    renumbered = script.received[2]
    assert renumbered["r1"] == "2 is now 5"
    assert (renumbered["r2"], renumbered["r3"]) == ("no RFD 5", "no RFD 6")
    assert world.peak["rfd"] > 1 and world.peak["github"] > 2


def test_limited_keeps_every_key_within_its_limit_and_in_written_order() -> None:
    world = World()
    script = run_agent(limited(world.toolset(), Policy.resolve([("test", CONFIG)])))
    # Results delivered to the model, per turn.
    assert script.received[1] == {"d1": 2, "x1": "contents of x", "d2": 3}
    assert script.received[2] == {"r1": "2 is now 5", "r2": "5 is now 6", "r3": "6 is now 7"}
    assert script.received[3] == {f"g{i}": f"issue {i}" for i in range(5)}
    assert world.rfds == {1: "existing", 3: "B", 7: "A"}
    # No key over its limit; written order per key.
    for key, limit in LIMITS.items():
        assert world.peak[key] <= limit, key
    assert world.peak["github"] == 2, "the limit is used, not serialized"
    assert world.starts("rfd") == ["A", "B", "2->5", "5->6", "6->7"]
    assert world.starts("github") == [str(i) for i in range(5)]
    # An unrelated tool does not wait for the key: `read` started before draft A ended.
    first_end = world.events.index(("end", "rfd_draft", "A"))
    assert world.events.index(("start", "read", "x")) < first_end


def test_a_rejected_call_answers_the_model_with_the_truthful_text() -> None:
    world = World()
    policy = Policy.resolve([("test", CONFIG)])
    decide = lambda label, call: "reject" if label == "d2" else "approve"  # noqa: E731
    script = run_agent(limited(world.toolset(), policy, decide=decide))
    assert script.received[1]["d2"] == "not run: the user rejected this call"
    assert script.received[1]["d1"] == 2
    assert ("start", "rfd_draft", "B") not in world.events


def test_the_tool_calls_arguments_make_its_key() -> None:
    """A key from arguments (`fs:{path}`): pydantic-ai's validated `tool_args` reach the gate,
    so writes to different files run together and writes to one file one at a time, in
    written order; `decide` sees the arguments. The tool takes a `Path`, which validation
    makes of the model's string: the key is made from its JSON form, the string."""
    config = """
[conversation.tools.write]
concurrency = { key = "fs:{path}", limit = 1 }
"""
    running: dict[str, int] = {}
    events: list[tuple[str, str]] = []
    overlap: list[str] = []
    decided: list[tuple[str, Any]] = []
    tools: FunctionToolset[Any] = FunctionToolset()

    @tools.tool_plain
    async def write(path: Path, text: str) -> str:
        assert isinstance(path, Path)
        running[path] = running.get(path, 0) + 1
        if running[path] > 1:
            overlap.append(text)
        events.append(("start", text))
        await asyncio.sleep(0.01)
        running[path] -= 1
        events.append(("end", text))
        return f"wrote {path}"

    turn = [call("write", {"path": p, "text": t}, t) for p, t in (("a", "w1"), ("b", "w2"), ("a", "w3"), ("b", "w4"))]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=list(turn))
        return ModelResponse(parts=[TextPart("done")])

    def decide(label: str, c: Any) -> str:
        decided.append((label, c.arguments))
        return "approve"

    agent = Agent(FunctionModel(model), toolsets=[limited(tools, Policy.resolve([("test", config)]), decide=decide)])
    assert vloop.run(agent.run("go")).output == "done"
    assert overlap == []
    starts = [t for kind, t in events if kind == "start"]
    assert starts[:2] == ["w1", "w2"], "the two files ran together"
    assert events.index(("start", "w3")) > events.index(("end", "w1"))
    assert events.index(("start", "w4")) > events.index(("end", "w2"))
    assert decided == [(t, {"path": p, "text": t}) for p, t in (("a", "w1"), ("b", "w2"), ("a", "w3"), ("b", "w4"))]


def test_limited_takes_a_gate_and_checks_its_arguments() -> None:
    gate = Gate(Policy.resolve([("test", CONFIG)]))
    wrapped = limited(World().toolset(), gate)
    assert isinstance(wrapped, LimitedToolset) and wrapped.gate is gate
    with pytest.raises(ValueError):
        limited(World().toolset(), gate, decide=lambda label, call: "approve")
    with pytest.raises(ValueError):
        limited(World().toolset(), gate, settled="ignore")  # type: ignore[arg-type]


def test_pydantic_ai_hands_over_one_response_in_one_loop_turn_in_written_order() -> None:
    """The assumption `limited` rests on: the tool calls of one response reach
    `toolset.call_tool` in written order before a callback scheduled by the first of them runs
    (what `Gate` treats as one batch). If pydantic-ai ever starts them across turns, this
    fails instead of the wrapper silently splitting batches."""
    arrivals: list[tuple[str, bool]] = []
    flushed = {"done": False}
    firsts = {turn[0].tool_call_id for turn in TURNS}

    class Probe(WrapperToolset[Any]):
        async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: Any, tool: Any) -> Any:
            if ctx.tool_call_id in firsts:  # the first call of a response
                flushed["done"] = False
                asyncio.get_running_loop().call_soon(flushed.__setitem__, "done", True)
            arrivals.append((ctx.tool_call_id, flushed["done"]))
            return await super().call_tool(name, tool_args, ctx, tool)

    run_agent(Probe(World().toolset()))
    ids = [c.tool_call_id for turn in TURNS for c in turn]
    assert [a for a, _ in arrivals] == ids
    # Within a turn, nobody arrived after the first arrival's callback ran.
    assert [late for _, late in arrivals] == [False] * len(ids)
