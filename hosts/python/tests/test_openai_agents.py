"""The OpenAI Agents SDK through `turnstile_scheduler.openai_agents.limited`, driven by a fake
`Model` (the SDK's own interface) returning `ModelResponse`s with several function calls per
response over several turns, with tools that record their start and end. First the race
without the adapter, then the same run limited (limits, written order, one batch per
response, results back to the model), the failure paths (a tool that raises, a call rejected
by `decide`, the run cancelled), `Runner.run_sync`, and the SDK behaviour the adapter rests
on, tested directly."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest

try:
    from agents import Agent, AgentHooks, FunctionTool, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
except ImportError as e:  # a missing library is a failure, never a skip
    raise ImportError(
        "tests/test_openai_agents.py needs the OpenAI Agents SDK: "
        "pip install 'openai-agents==0.24.0' (the package's `test` extra pins it)"
    ) from e

import _adapters as adapters
import vloop
from _adapters import CONFIG, LIMITS, policy
from turnstile_scheduler import Call, Driver, Policy, Scheduler
from turnstile_scheduler.openai_agents import limited

set_tracing_disabled(True)

class World(adapters.World):
    """The shared world, with its tools as the SDK's function tools."""

    def tools(self) -> list[FunctionTool]:
        world = self

        @function_tool
        async def rfd_draft(title: str) -> int:
            """Allocates the next RFD number (read, think, write: racy by nature)."""
            return await world.draft(title)

        @function_tool
        async def rfd_renumber(old: int, new: int) -> str:
            """Moves RFD `old` to `new`; `old` must exist and `new` be free."""
            try:
                if old not in world.rfds:
                    return f"no RFD {old}"
                if new in world.rfds:
                    return f"RFD {new} exists"
                await world.recorded("rfd_renumber", f"{old}->{new}", 0.01)
                world.rfds[new] = world.rfds.pop(old)
                return f"{old} is now {new}"
            finally:
                world.events.append(("end", "rfd_renumber", f"{old}->{new}"))

        @function_tool
        async def github_issues(n: int) -> str:
            """Reads issue n."""
            await world.recorded("github_issues", str(n), 0.01)
            world.events.append(("end", "github_issues", str(n)))
            if n == 99:
                raise RuntimeError("github is down")
            return f"issue {n}"

        @function_tool
        async def read(path: str) -> str:
            """Reads a file."""
            await world.recorded("read", path, 0.005)
            world.events.append(("end", "read", path))
            return f"contents of {path}"

        return [rfd_draft, rfd_renumber, github_issues, read]


def call(tool: str, args: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(type="function_call", name=tool, arguments=json.dumps(args), call_id=call_id,
                                    id=f"fc_{call_id}", status="completed")


def message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


TURNS = [[call(*c) for c in turn] for turn in adapters.TURNS]


class ScriptedModel(Model):
    """Answers turn n with `turns[n]`, then "done"; records the tool outputs it received."""

    def __init__(self, turns: list[list[Any]]) -> None:
        self.turns = turns
        self.received: list[dict[str, Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        items = input if isinstance(input, list) else []
        outputs = {i["call_id"]: i["output"] for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"}
        seen = {k for r in self.received for k in r}
        self.received.append({k: v for k, v in outputs.items() if k not in seen})
        turn = len(self.received) - 1
        out = self.turns[turn] if turn < len(self.turns) else [message("done")]
        return ModelResponse(output=list(out), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def agent_with(world: World, turns: list[list[Any]] = TURNS, **kw: Any) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel(turns)
    return Agent(name="rfd", model=model, tools=world.tools(), **kw), model


def run(agent: Agent[Any]) -> Any:
    result = vloop.run(Runner.run(agent, "go"))
    assert result.final_output == "done"
    return result


def test_without_the_adapter_the_calls_race() -> None:
    world = World()
    agent, model = agent_with(world)
    run(agent)
    drafts = model.received[1]
    assert drafts["d1"] == drafts["d2"] == "2", "two drafts took the same id"
    renumbered = model.received[2]
    assert renumbered["r1"] == "2 is now 5"
    assert (renumbered["r2"], renumbered["r3"]) == ("no RFD 5", "no RFD 6")
    assert world.peak["rfd"] > 1 and world.peak["github"] > 2


class Counting(Driver):
    """A driver that records each batch (its call ids) and each decision."""

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__(scheduler, owns_scheduler=True)
        self.batches: list[list[str]] = []

    def _submit(self, calls: Any, *args: Any) -> Any:  # every batch the adapter's gate submits
        self.batches.append([c.id for c in calls])
        return super()._submit(calls, *args)


def test_limited_keeps_every_key_within_its_limit_and_in_written_order() -> None:
    world = World()
    agent, model = agent_with(world)
    driver = Counting(Scheduler(policy()))
    order: list[tuple[str, str]] = []

    def decide(label: str, c: Call) -> str:
        order.append(("decide", label))
        return "approve"

    limited_agent = limited(agent, driver, decide=decide)
    original = [t.on_invoke_tool for t in agent.tools]
    run(limited_agent)
    # Results delivered to the model, per turn.
    assert model.received[1] == {"d1": "2", "x1": "contents of x", "d2": "3"}
    assert model.received[2] == {"r1": "2 is now 5", "r2": "5 is now 6", "r3": "6 is now 7"}
    assert model.received[3] == {f"g{i}": f"issue {i}" for i in range(5)}
    assert world.rfds == {1: "existing", 3: "B", 7: "A"}
    # One batch per response, in written order.
    assert driver.batches == [[c.call_id for c in turn] for turn in TURNS]
    # No key over its limit; written order per key; the limit is used, not serialized.
    for key, limit in LIMITS.items():
        assert world.peak[key] <= limit, key
    assert world.peak["github"] == 2
    assert world.starts("rfd") == ["A", "B", "2->5", "5->6", "6->7"]
    assert world.starts("github") == [str(i) for i in range(5)]
    # An unrelated tool does not wait for the key.
    assert world.events.index(("start", "read", "x")) < world.events.index(("end", "rfd_draft", "A"))
    # The agent passed in is untouched (a clone is limited).
    assert [t.on_invoke_tool for t in agent.tools] == original and agent.hooks is None
    driver.close()


def test_every_call_of_a_response_is_decided_before_any_of_it_starts() -> None:
    world = World()
    agent, _ = agent_with(world)

    async def decide(label: str, c: Call) -> str:
        world.events.append(("decide", c.tool, label))
        await asyncio.sleep(0.05)  # the user takes a while over each one
        return "approve"

    run(limited(agent, policy(), decide=decide))
    kinds = [kind for kind, _, _ in world.events]
    for turn in TURNS:
        ids = [c.call_id for c in turn]
        decided = [i for i, (kind, _, label) in enumerate(world.events) if kind == "decide" and label in ids]
        assert len(decided) == len(ids)
        first_start = kinds.index("start", decided[0])
        assert decided[-1] < first_start, world.events


def test_a_rejected_call_answers_the_model_with_the_truthful_text() -> None:
    world = World()
    agent, model = agent_with(world)
    decide = lambda label, c: "reject" if label == "d2" else "approve"  # noqa: E731
    run(limited(agent, policy(), decide=decide))
    assert model.received[1]["d2"] == "not run: the user rejected this call"
    assert model.received[1]["d1"] == "2"
    assert ("start", "rfd_draft", "B") not in world.events


def test_a_tool_that_raises_fails_only_its_own_call() -> None:
    """github_issues(99) raises: the SDK turns it into its error text for the model (its
    default failure function), the slot is free at once, and the calls after it run."""
    world = World()
    turns = [[call("github_issues", {"n": n}, f"g{n}") for n in (99, 1, 2)]]
    agent, model = agent_with(world, turns)
    run(limited(agent, policy()))
    assert model.received[1]["g99"] == "An error occurred while running the tool. Please try again."
    assert (model.received[1]["g1"], model.received[1]["g2"]) == ("issue 1", "issue 2")
    assert world.peak["github"] == 2
    # g2 took the slot g99 freed.
    assert world.events.index(("start", "github_issues", "2")) > world.events.index(("end", "github_issues", "99"))


def test_cancelling_the_run_withdraws_its_queued_calls() -> None:
    """The run is cancelled while draft A runs and B waits behind it on `rfd`: B never
    starts, A is cancelled, and the shared driver has nothing left of the run (a next run
    on the same key goes straight through)."""
    world = World()
    agent, _ = agent_with(world, [TURNS[0]])
    driver = Driver(Scheduler(policy()), owns_scheduler=True)
    limited_agent = limited(agent, driver)

    async def main() -> None:
        task = asyncio.ensure_future(Runner.run(limited_agent, "go"))
        await asyncio.sleep(0.01)  # A is running, B queued
        assert world.starts("rfd") == ["A"]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.1)
        assert world.starts("rfd") == ["A"]
        assert driver.inspect() == []
        again, model = agent_with(World(), [[call("rfd_draft", {"title": "C"}, "d3")]])
        result = await Runner.run(limited(again, driver), "go")
        assert result.final_output == "done" and model.received[1] == {"d3": "2"}

    vloop.run(main())
    driver.close()


def test_run_sync_works() -> None:
    world = World()
    agent, model = agent_with(world)
    result = Runner.run_sync(limited(agent, policy()), "go")
    assert result.final_output == "done"
    assert world.peak["rfd"] == 1 and world.peak["github"] == 2
    assert model.received[2] == {"r1": "2 is now 5", "r2": "5 is now 6", "r3": "6 is now 7"}


def test_limited_checks_its_arguments() -> None:
    agent, _ = agent_with(World())
    with pytest.raises(TypeError):
        limited(object(), policy())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        limited(agent, "turnstile.toml")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        limited(agent, policy(), settled="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        limited(limited(agent, policy()), policy())


def test_the_sdk_hands_over_each_response_before_its_tools_run() -> None:
    """What `limited` rests on: `agent.hooks.on_llm_end` gets the response before any tool
    of it is invoked, `on_llm_start` comes before the next model call (after every tool of
    the last response ended), each tool is invoked through `on_invoke_tool` with the
    response's `call_id` as `tool_call_id`, its `ToolContext` shares the run's `usage`, and
    `FunctionTool` is a dataclass. If a release changes one of these, this fails."""
    world = World()
    agent, _ = agent_with(world)
    log: list[tuple[str, Any]] = []
    usages: set[int] = set()

    class Probe(AgentHooks[Any]):
        async def on_llm_start(self, context: Any, agent: Any, *args: Any) -> None:
            usages.add(id(context.usage))
            log.append(("llm_start", None))

        async def on_llm_end(self, context: Any, agent: Any, response: ModelResponse) -> None:
            usages.add(id(context.usage))
            log.append(("llm_end", [i.call_id for i in response.output if i.type == "function_call"]))

    assert all(dataclasses.is_dataclass(t) for t in agent.tools)

    def probe(tool: FunctionTool) -> FunctionTool:
        original = tool.on_invoke_tool

        async def on_invoke_tool(ctx: Any, arguments: str) -> Any:
            usages.add(id(ctx.usage))
            log.append(("invoke", ctx.tool_call_id))
            try:
                return await original(ctx, arguments)
            finally:
                log.append(("ended", ctx.tool_call_id))

        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)

    agent = agent.clone(tools=[probe(t) for t in agent.tools], hooks=Probe())
    run(agent)
    assert len(usages) == 1, "the tool contexts share the run's usage"
    expected: list[tuple[str, Any]] = []
    for turn in TURNS:
        ids = [c.call_id for c in turn]
        expected += [("llm_start", None), ("llm_end", ids)]
        got = [e for e in log[len(expected):len(expected) + 2 * len(ids)]]
        assert sorted(i for k, i in got if k == "invoke") == sorted(ids)
        assert all(k in ("invoke", "ended") for k, _ in got)
        expected += got
    expected += [("llm_start", None), ("llm_end", [])]
    assert log == expected


def test_a_tool_error_that_fails_the_run_leaves_nothing_behind() -> None:
    """A tool without a failure function raises through the SDK, which fails the run and
    cancels the response's other calls: the ones still queued never start, and the shared driver
    is empty afterwards."""
    world = World()
    turns = [[call("boom", {}, "b1"), call("rfd_draft", {"title": "A"}, "d1"), call("rfd_draft", {"title": "B"}, "d2")]]
    model = ScriptedModel(turns)

    async def boom_impl(ctx: Any, arguments: str) -> Any:
        await asyncio.sleep(0.005)
        raise RuntimeError("boom")

    boom = FunctionTool(name="boom", description="fails", params_json_schema={"type": "object", "properties": {}},
                        on_invoke_tool=boom_impl)
    agent = Agent(name="rfd", model=model, tools=[boom, *world.tools()])
    driver = Driver(Scheduler(Policy.resolve([("test", CONFIG + '[conversation.tools.boom]\nconcurrency = { key = "rfd" }\n')])),
                    owns_scheduler=True)

    async def main() -> None:
        with pytest.raises(Exception, match="boom"):
            await Runner.run(limited(agent, driver), "go")
        await asyncio.sleep(0.1)
        assert driver.inspect() == []

    vloop.run(main())
    # A may take the slot boom freed before the SDK cancels it; B, behind A, never starts.
    assert world.starts("rfd") in ([], ["A"])
    driver.close()
