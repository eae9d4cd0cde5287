"""OpenAI Agents SDK: an agent whose function tools run through the scheduler, one model
response at a time (`pip install "turnstile-scheduler[openai-agents]"`). Scope: given a
`Policy`, each run gets its own scheduler, so the policy's limits hold per run (per
conversation); to share one scheduler across every run of the agent, pass a `Scheduler` or a
`Driver` instead.

```python
from turnstile_scheduler.openai_agents import limited

agent = limited(Agent(name="rfd", model=model, tools=[rfd_draft, rfd_renumber]), policy)
result = await Runner.run(agent, "renumber RFD 2 to 5, then 5 to 6")   # or Runner.run_sync
```

`limited(agent, target)` returns a clone of `agent` (`agent.clone`) with two changes: its
`FunctionTool`s are copies whose `on_invoke_tool` waits for the scheduler, and its `hooks`
(the agent's own hooks, still called) take each model response from `on_llm_end`. The batch
is the response itself, not loop-turn timing: `on_llm_end` submits the response's function
calls to these tools as ONE batch (`Gate.expect` on the run's `Gate`), in the order the model
wrote them (`Call(call_id, name, arguments=<the model's JSON text>)`, so a key template
`fs:{path}` works), before the SDK starts any of them. `decide(label, call)` is asked about
every call of the batch, in written order, and the component starts none of them before every
one was decided. Each call's `on_invoke_tool` then takes its place (`gate.call` by its
`call_id`), waits there, in the SDK's own task for it, until the scheduler releases it, and
runs the original tool there (a `RateLimited` that reaches it, from a tool made with
`failure_error_function=None`, is retried in place, as with `Gate`); its result goes back to
the model as usual.

Schedulers. A `Policy` gives each run its own gate, scheduler and driver (`Runner.run`,
`Runner.run_sync`, `Runner.run_streamed`: one per `RunContextWrapper`), made at the run's
first response with a function call and closed at its final output (or when the run is
collected); the `conversation` limits of the policy are then per run. A `Scheduler` or a
`Driver` is shared by every run of the agent (limits across conversations; each run still
has a gate of its own on it); the adapter never closes it. Runs on different event loops
(`run_sync` makes one per call) may share it one after another, not at the same time.

A call the scheduler settles (rejected, skipped, cancelled ...) is answered with the
component's sentence as the tool's result (e.g. "not run: the user rejected this call"), the
way `turnstile_scheduler.pydantic_ai` answers; `settled="raise"` raises `CallSettledError`
from the tool instead (the SDK then applies the tool's failure function). A tool that raises
fails only its own call; the SDK handles the exception as usual. Cancelling the run cancels
its tool tasks: a queued call is withdrawn (its key moves on), a running one is cancelled.
A call the SDK never invokes although it was in the response (its input guardrail rejected
it, the run stopped first) is withdrawn at the run's next model call or final output; a call
of a response this adapter did not see (a run resumed from a `RunState` after an SDK
approval) is a batch of its own when it arrives, still limited.

Tools with `needs_approval` or `tool_input_guardrails` are left out of the response batch
(the SDK may stop or answer them without invoking): each of their calls is a batch of its
own when the SDK invokes it, so they are limited but not ordered with the response. Use
`decide` for approvals. Only `FunctionTool`s are limited; hosted tools, MCP servers and
handoffs are not tool calls the host runs.

What this relies on in the SDK (openai-agents 0.24; checked by `tests/test_openai_agents.py`,
so a release that changes it fails a test instead of racing): `agent.hooks.on_llm_end(context,
agent, response)` is awaited with the model's `ModelResponse` before any tool of that response
is invoked, and `on_llm_start` before the next model call; a `FunctionTool` is invoked through
its `on_invoke_tool(tool_context, arguments_json)` with `tool_context.tool_call_id` the
response's `call_id`; the `ToolContext` shares the run's `usage` object (how a call finds its
run); and `FunctionTool` is a dataclass (`dataclasses.replace` makes the copy).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Awaitable, Callable, Literal, Optional, Union

from agents import Agent, AgentHooks, FunctionTool
from agents.items import ModelResponse
from agents.run_context import RunContextWrapper
from agents.tool_context import ToolContext

from . import _check
from .config import Policy
from .driver import Decide, Driver
from .events import OnEvent
from .gate import CallSettledError, Gate
from .scheduler import Scheduler

__all__ = ["limited"]

Invoke = Callable[[ToolContext[Any], str], Awaitable[Any]]


class _Run:
    """One run: its gate (for a `Policy`, with its own scheduler and driver) and the calls of
    its responses the SDK has not invoked yet."""

    def __init__(self, gate: Gate, owns: bool) -> None:
        self.gate = gate
        self.owns = owns
        self.calls: set[str] = set()  # call ids `expect`ed, until invoked or withdrawn
        self.refused: dict[str, Exception] = {}  # call id -> why its response's batch was refused

    def expect(self, calls: list[tuple[str, str, Any]]) -> None:
        """Submits a response's calls as one batch. A refused batch (`SubmitError`,
        `DisposedError`) fails each of its calls when the SDK invokes it, as a batch that ran
        and was refused would."""
        try:
            self.gate.expect(calls)
        except Exception as e:
            for _, call_id, _ in calls:
                self.refused[call_id] = e
            return
        self.calls.update(call_id for _, call_id, _ in calls)

    def sweep(self) -> None:
        """Withdraws every call of a past response the SDK did not invoke."""
        calls, self.calls = self.calls, set()
        self.refused = {}
        for call_id in calls:
            self.gate.withdraw(call_id)

    def close(self) -> None:
        self.sweep()
        if self.owns:
            self.gate.close()


class _Limiter:
    """What every run of one limited agent shares: the target, the gate's settings, and the
    runs."""

    def __init__(self, target: Union[Policy, Scheduler, Driver], decide: Optional[Decide], settled: str,
                 execution_timeout: Optional[float], abort_grace: Optional[float], on_event: Optional[OnEvent] = None) -> None:
        self.target = target
        self.on_event = on_event
        self.decide = decide
        self.settled = settled
        self.execution_timeout = execution_timeout
        self.abort_grace = abort_grace
        self.batched: set[str] = set()  # tools whose calls join the response batch
        self.runs: dict[int, _Run] = {}  # id(run usage) -> the run

    def run_of(self, usage: Any) -> _Run:
        run = self.runs.get(id(usage))
        if run is None:
            # A Policy: the gate makes (and closes) the run's own scheduler and driver.
            gate = Gate(self.target, decide=self.decide, execution_timeout=self.execution_timeout, abort_grace=self.abort_grace,
                        on_event=self.on_event)
            run = self.runs[id(usage)] = _Run(gate, owns=isinstance(self.target, Policy))
            weakref.finalize(usage, self._forget, id(usage), run)
        return run

    def _forget(self, key: int, run: _Run) -> None:
        if self.runs.get(key) is run:
            del self.runs[key]
        run.close()

    def end(self, usage: Any) -> None:
        run = self.runs.pop(id(usage), None)
        if run is not None:
            run.close()

    async def invoke(self, tool: FunctionTool, original: Invoke, ctx: ToolContext[Any], arguments: str) -> Any:
        """`tool`'s `on_invoke_tool`: waits for the scheduler, then runs `original` here."""
        run = self.run_of(ctx.usage)
        call_id = ctx.tool_call_id
        refused = run.refused.pop(call_id, None)
        if refused is not None:
            raise refused
        if call_id in run.calls:
            run.calls.discard(call_id)  # `gate.call` takes its place in the response's batch
        else:
            # Not part of a response this adapter saw: a batch of its own.
            run.gate.expect([(tool.name, call_id, arguments)])
        try:
            return await run.gate.call(tool.name, call_id, arguments, lambda a: original(ctx, a))
        except CallSettledError as e:
            if self.settled == "raise":
                raise
            return str(e)


class _Hooks(AgentHooks[Any]):
    """The clone's hooks: the limiter's work, then the agent's own hooks."""

    def __init__(self, limiter: _Limiter, inner: Optional[AgentHooks[Any]]) -> None:
        self.limiter = limiter
        self.inner = inner

    async def on_llm_start(self, context: RunContextWrapper[Any], agent: Any, *args: Any) -> None:
        run = self.limiter.runs.get(id(context.usage))
        if run is not None:
            run.sweep()  # every tool task of the last response has ended
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, *args)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Any, response: ModelResponse) -> None:
        calls = [
            (item.name, item.call_id, item.arguments)
            for item in response.output
            if getattr(item, "type", None) == "function_call" and getattr(item, "namespace", None) is None
            and item.name in self.limiter.batched
        ]
        if calls:
            run = self.limiter.run_of(context.usage)
            run.sweep()
            run.expect(calls)
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        self.limiter.end(context.usage)  # the final output: the run is over
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)

    async def on_start(self, context: Any, agent: Any) -> None:
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)


def _wrap(tool: FunctionTool, limiter: _Limiter) -> FunctionTool:
    original = tool.on_invoke_tool

    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> Any:
        return await limiter.invoke(tool, original, ctx, arguments)

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


def limited(
    agent: Agent[Any],
    target: Union[Policy, Scheduler, Driver],
    *,
    decide: Optional[Decide] = None,
    settled: Literal["return", "raise"] = "return",
    execution_timeout: Optional[float] = None,
    abort_grace: Optional[float] = None,
    on_event: Optional[OnEvent] = None,
) -> Agent[Any]:
    """A clone of `agent` whose function tools run through the scheduler, each model response
    one batch in written order (see the module doc). `target` is a `Policy` (a scheduler per
    run), a `Scheduler` or a `Driver` (shared by every run). `decide(label, call)` is asked about
    each call of a response before any of it starts; `execution_timeout` and `abort_grace`
    (seconds) go to every batch (`Driver.run`'s). `on_event` (telemetry, `Driver`'s) goes to
    the driver of each run made from a `Policy`; a `Scheduler` or `Driver` target takes it from
    `Driver(..., on_event=...)`."""
    if not isinstance(agent, Agent):
        raise TypeError(f"agent must be an agents.Agent, not {type(agent).__name__}")
    if not isinstance(target, (Policy, Scheduler, Driver)):
        raise TypeError(f"target must be a Policy, Scheduler or Driver, not {type(target).__name__}")
    if settled not in ("return", "raise"):
        raise ValueError(f"settled must be 'return' or 'raise', not {settled!r}")
    if decide is not None and not callable(decide):
        raise TypeError(f"decide must be callable, not {type(decide).__name__}")
    if on_event is not None:
        if not callable(on_event):
            raise TypeError(f"on_event must be callable, not {type(on_event).__name__}")
        if not isinstance(target, Policy):
            raise ValueError("on_event belongs to the driver of a Scheduler or Driver target: pass it to Driver(...)")
    if _check.number(execution_timeout, "execution_timeout") == 0:
        raise ValueError("execution_timeout must be > 0 seconds (or None)")
    _check.number(abort_grace, "abort_grace")
    if isinstance(agent.hooks, _Hooks):
        raise ValueError("this agent is limited already")
    limiter = _Limiter(target, decide, settled, execution_timeout, abort_grace, on_event)
    tools: list[Any] = []
    for tool in agent.tools:
        if isinstance(tool, FunctionTool):
            if tool.needs_approval is False and not tool.tool_input_guardrails:
                limiter.batched.add(tool.name)
            tool = _wrap(tool, limiter)
        tools.append(tool)
    return agent.clone(tools=tools, hooks=_Hooks(limiter, agent.hooks))
