"""pydantic-ai: a toolset wrapper that runs every tool call through a `Gate`
(`pip install "turnstile-scheduler[pydantic-ai]"`). Scope: one gate, so one scheduler, per
limited toolset, shared by every run of every agent that uses it, so a key's limit holds across
conversations; for a scheduler per conversation, give each conversation's runs a toolset of its
own (`agent.run(..., toolsets=[limited(my_toolset, policy)])`, or one `Gate` per conversation).

```python
from turnstile_scheduler.pydantic_ai import limited

agent = Agent(model, toolsets=[limited(my_toolset, policy)])
```

Every `call_tool` of the wrapped toolset becomes `gate.call(name, ctx.tool_call_id,
tool_args, ...)`: the call waits until the scheduler releases it, then the wrapped toolset runs
it in pydantic-ai's own task. `name` is the name the wrapped toolset knows (the config's tool
name); the call id is pydantic-ai's `tool_call_id`, unique among the calls in flight;
`tool_args` (the validated arguments) make the call's key when the tool's key is a template
(`concurrency = { key = "fs:{path}" }`), and `decide` sees them as `Call.arguments`. Validation
may turn what the model wrote into objects (`path: Path` gives a `PosixPath`), which make no
key; so for a templated tool, each named argument that is not a str, int, float or bool is
given in its JSON form (`pydantic_core.to_jsonable_python`: a `Path` as its string, an enum as
its value). A value that has none is left as it is and the call takes the template's own key.

A call the scheduler settles is answered with the truthful text (the component's `explain`,
e.g. "not run: the user rejected this call") as the tool's return, so the model reads why it
did not run, the way pydantic-ai answers a denied call; `settled="raise"` raises
`CallSettledError` instead. A tool that raises (ModelRetry, ApprovalRequired, any error) fails
only its own call; pydantic-ai handles the exception as usual.

What this relies on in pydantic-ai (checked by `tests/test_pydantic_ai.py`, so an upgrade
that changes it fails a test instead of racing): the function tool calls of one model
response are started as one task each, in the order the model wrote them, in one go, and each
reaches `toolset.call_tool` without suspending on the way, so they all arrive in the same
event-loop turn (pydantic-ai 2.x: `asyncio.create_task` per call of a segment in
`_tool_execution`). Tools marked `sequential=True`, and `parallel_execution_mode("sequential")`,
split a response into segments started one after another: each segment is then a batch of
its own (still in written order per key). The next model response only comes after every
call of this one ended, so each response is one batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from pydantic_ai import RunContext
from pydantic_core import to_jsonable_python
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from .config import Policy
from .driver import Decide, Driver
from .events import OnEvent
from .gate import CallSettledError, Gate
from .scheduler import Scheduler

__all__ = ["LimitedToolset", "limited"]


@dataclass
class LimitedToolset(WrapperToolset[Any]):
    """A `WrapperToolset` whose every tool call goes through `gate` (see the module doc)."""

    gate: Gate = field(kw_only=True)
    settled: Literal["return", "raise"] = field(default="return", kw_only=True)

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]) -> Any:
        call_id = ctx.tool_call_id
        if call_id is None:  # pydantic-ai always sets it for a model's tool call
            raise ValueError(f"{name}: pydantic-ai gave no tool_call_id")
        try:
            arguments = _keyable(tool_args, self.gate.scheduler._templates.get(name))
            return await self.gate.call(name, call_id, arguments, lambda _: self.wrapped.call_tool(name, tool_args, ctx, tool))
        except CallSettledError as e:
            if self.settled == "raise":
                raise
            return str(e)


def _keyable(tool_args: Any, fields: Optional[tuple[str, ...]]) -> Any:
    """`tool_args` with the arguments a key template names in their JSON form (a copy, made
    only when one of them is not already a str, int, float or bool)."""
    if not fields or not isinstance(tool_args, dict):
        return tool_args
    odd = [f for f in fields if f in tool_args and not isinstance(tool_args[f], (str, int, float))]
    if not odd:
        return tool_args
    out = dict(tool_args)
    for f in odd:
        try:
            out[f] = to_jsonable_python(tool_args[f])
        except Exception:  # no JSON form: it makes no key, and the call takes the template's own
            pass
    return out


def limited(
    toolset: AbstractToolset[Any],
    target: Union[Gate, Policy, Scheduler, Driver],
    *,
    decide: Optional[Decide] = None,
    settled: Literal["return", "raise"] = "return",
    on_event: Optional[OnEvent] = None,
) -> LimitedToolset:
    """`toolset`, limited: every tool call goes through a gate. `target` is a `Gate`, or what a
    `Gate` is made from (a `Policy` makes a scheduler that every run of this toolset shares;
    pass one gate per conversation to keep conversations apart). `decide` and `on_event`
    (telemetry, `Driver`'s) go to a gate made here."""
    if settled not in ("return", "raise"):
        raise ValueError(f"settled must be 'return' or 'raise', not {settled!r}")
    if isinstance(target, Gate):
        if decide is not None or on_event is not None:
            raise ValueError("decide and on_event belong to the gate: pass them to Gate(...)")
        gate = target
    else:
        gate = Gate(target, decide=decide, on_event=on_event)
    return LimitedToolset(toolset, gate=gate, settled=settled)
