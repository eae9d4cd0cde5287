"""The Claude Agent SDK (`claude-agent-sdk`): every tool call of a `query()` or a
`ClaudeSDKClient` through the scheduler, one model response at a time
(`pip install "turnstile-scheduler[claude-agent]"`).

```python
from claude_agent_sdk import ClaudeAgentOptions
from turnstile_scheduler.claude_agent import Turnstile

turnstile = Turnstile(policy)  # one scheduler, shared by every conversation it runs
async for message in turnstile.query(prompt="renumber RFD 2 to 5", options=ClaudeAgentOptions(...)):
    ...
# or: async with turnstile.client(options) as client: ...  (a ClaudeSDKClient)
```

The SDK runs the Claude Code CLI (bundled in the wheel) as a subprocess; the CLI calls the
model and runs the tools, and asks the host through hooks. The CLI starts a tool as soon as
its `tool_use` block is streamed, before the model's response is complete, so a hook alone
cannot know the response's other calls. This adapter therefore reads the CLI's output
itself (a transport around the SDK's own subprocess transport, with the CLI's stream events
on): it collects the main thread's `tool_use` blocks of each response in written order, and
when the response ends (`message_stop`) submits them as ONE batch (`Gate.expect`); `decide`
is asked about each, and none starts before every one is decided. A `PreToolUse` hook (first
among the `PreToolUse` hooks, matching every tool) holds each call until its response is
complete and the scheduler releases it, then lets it go on (`{}`: no opinion, so the
permission mode, other hooks and `can_use_tool` still apply); the call's end is its
`PostToolUse` (ok) or `PostToolUseFailure` (failed) hook, or its `tool_result` in the
conversation (a call refused after the hook). A call the scheduler settles (rejected,
skipped, cancelled ...) is denied by the hook, the component's sentence as the reason the
model reads (e.g. "not run: the user rejected this call"). A call of a response not seen
(a subagent's) is a batch of its own when its hook fires, still limited.

Scope. One `Turnstile`, one scheduler: a `Policy` makes a scheduler (and driver) that every
conversation run through it shares, so a key's limit holds across conversations. A
`Scheduler`, `Driver` or `Gate` given is shared the same way and never closed by the adapter.
Everything runs on the caller's asyncio loop (the SDK's anyio on asyncio; trio is not
supported). The CLI cannot interrupt a tool for the scheduler: past `execution_timeout` or on
`close()`, a released call keeps its slot until the CLI reports its end.

What this relies on (claude-agent-sdk 0.2.184 with its bundled CLI 2.1.327; checked by
`tests/test_claude_agent.py` against the real CLI and a fake Messages API): a custom
transport given to `query(..., transport=)` / `ClaudeSDKClient(transport=)` sees every line of
the CLI's output, in order, before the SDK routes it; `SubprocessCLITransport(prompt,
options)` (internal) is the SDK's own transport; with `include_partial_messages` the CLI
emits each response's `message_stop` after the `assistant` lines of its blocks; a tool's
`assistant` line precedes its `PreToolUse` hook request; a pending `PreToolUse` hook does not
stop the response from streaming (nor, for concurrency-safe tools, the hooks of the other
calls); `HookMatcher(timeout=)` bounds how long a call may wait for its turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, AsyncIterable, AsyncIterator, Optional, Union

from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, HookMatcher, Transport
from claude_agent_sdk import query as _sdk_query
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
from claude_agent_sdk.types import _configure_can_use_tool

from .config import Policy
from .driver import Decide, Driver
from .events import OnEvent
from .gate import Gate, _adapter_gate
from .scheduler import Scheduler

__all__ = ["Turnstile"]

# How long a call may wait for its turn in its PreToolUse hook (the CLI's default is 60 s,
# after which the hook fails and, with on_failure="block", the call is refused).
HOOK_TIMEOUT = 24 * 3600.0


class _Failed(Exception):
    """The CLI reported the call failed (PostToolUseFailure, or an error tool_result)."""


class _Response:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []  # (tool, call id, input), written order
        self.ready: "asyncio.Future[Optional[BaseException]]" = asyncio.get_running_loop().create_future()


class _Call:
    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.released: asyncio.Future[None] = loop.create_future()
        self.ended: asyncio.Future[Any] = loop.create_future()
        self.ended.add_done_callback(lambda f: f.cancelled() or f.exception())  # read by run, if ever
        self.task: Optional[asyncio.Task[Any]] = None


def _deny(reason: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}}


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return str(content)


class _Conversation:
    """One CLI process: what its output said so far, and its calls in flight."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.responses: dict[str, _Response] = {}  # message id -> response
        self.owner: dict[str, _Response] = {}  # call id -> its response
        self.current: Optional[str] = None  # the main thread's response being streamed
        self.calls: dict[str, _Call] = {}  # call id -> a call that reached its hook
        self.ended: set[str] = set()  # call ids with a tool_result

    # -- the CLI's output (in order, before the SDK routes it) ---------------------------------

    def observe(self, m: dict[str, Any]) -> None:
        kind = m.get("type")
        main = m.get("parent_tool_use_id") is None
        if kind == "stream_event" and main:
            event = m.get("event") or {}
            if event.get("type") == "message_start":
                self._complete(self.current)  # a response cut short (a retried request)
                self.current = (event.get("message") or {}).get("id")
                if self.current is not None:
                    self.responses.setdefault(self.current, _Response())
            elif event.get("type") == "message_stop":
                self._complete(self.current)
                self.current = None
        elif kind == "assistant" and main:
            message = m.get("message") or {}
            r = self.responses.setdefault(message.get("id") or "", _Response())
            for b in message.get("content") or []:
                if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("id") and b["id"] not in self.owner:
                    r.calls.append((b.get("name", ""), b["id"], b.get("input")))
                    self.owner[b["id"]] = r
        elif kind == "user":
            content = (m.get("message") or {}).get("content")
            for b in content if isinstance(content, list) else []:
                if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id"):
                    self._end(b["tool_use_id"], _Failed(_text(b.get("content"))) if b.get("is_error") else b.get("content"))
        elif kind == "result":
            self._sweep()

    def _complete(self, message_id: Optional[str]) -> None:
        r = self.responses.get(message_id) if message_id is not None else None
        if r is None or r.ready.done():
            return
        calls = [c for c in r.calls if c[1] not in self.ended and c[1] not in self.calls]
        error: Optional[BaseException] = None
        try:
            if calls:
                self.gate.expect(calls)
        except Exception as e:  # SubmitError (a call id live already), DisposedError
            error = e
        r.ready.set_result(error)

    def _end(self, call_id: str, outcome: Any) -> None:
        """The CLI reported the end of `call_id` (first report wins)."""
        self.ended.add(call_id)
        c = self.calls.get(call_id)
        if c is None:
            self.gate.withdraw(call_id)  # expected, never reached its hook (refused before)
            return
        if not c.ended.done():
            if isinstance(outcome, BaseException):
                c.ended.set_exception(outcome)
            else:
                c.ended.set_result(outcome)

    def _sweep(self) -> None:
        """The turn ended: calls expected and never claimed are withdrawn."""
        for call_id in list(self.owner):
            if call_id not in self.calls:
                self.gate.withdraw(call_id)

    def close(self) -> None:
        self._sweep()
        for r in self.responses.values():
            if not r.ready.done():
                r.ready.set_result(None)
        for c in self.calls.values():
            if not c.ended.done():
                c.ended.set_exception(_Failed("the conversation ended"))
            if c.task is not None and not c.task.done():
                c.task.cancel()

    # -- hooks ---------------------------------------------------------------------------------

    async def pre(self, data: Any, tool_use_id: Optional[str], context: Any) -> dict[str, Any]:
        call_id = tool_use_id or data.get("tool_use_id")
        tool = data.get("tool_name", "")
        if not call_id:
            return {}
        r = self.owner.get(call_id) if data.get("agent_id") is None else None
        if r is not None:
            error = await asyncio.shield(r.ready)  # the whole response, submitted as one batch
            if error is not None:
                return _deny(str(error))
        c = self.calls[call_id] = _Call()

        async def run(_: Any) -> Any:
            if not c.released.done():
                c.released.set_result(None)
            try:
                return await asyncio.shield(c.ended)
            except asyncio.CancelledError:
                # Stopped (timeout, closed): the CLI cannot interrupt the tool, so the call
                # keeps its slot until the CLI reports its end.
                try:
                    await asyncio.shield(c.ended)
                except BaseException:
                    pass
                raise

        c.task = asyncio.get_running_loop().create_task(self.gate.call(tool, call_id, data.get("tool_input"), run))
        c.task.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            await asyncio.wait([c.released, c.task], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the CLI gave up the hook (an interrupt)
            c.task.cancel()
            raise
        if c.released.done():
            return {}
        if c.task.cancelled():
            return _deny(f"not run: {tool} was cancelled")
        return _deny(str(c.task.exception()))  # CallSettledError: the component's sentence

    async def post(self, data: Any, tool_use_id: Optional[str], context: Any) -> dict[str, Any]:
        call_id = tool_use_id or data.get("tool_use_id")
        if call_id:
            if data.get("hook_event_name") == "PostToolUseFailure":
                self._end(call_id, _Failed(str(data.get("error", "failed"))))
            else:
                self._end(call_id, data.get("tool_response"))
        return {}


class _Peek(Transport):
    """The SDK's own subprocess transport, with the conversation reading every line first."""

    def __init__(self, inner: Transport, conversation: _Conversation, partial: bool) -> None:
        self.inner = inner
        self.conversation = conversation
        self.partial = partial  # whether the caller asked for stream events

    async def connect(self) -> None:
        await self.inner.connect()

    async def write(self, data: str) -> None:
        await self.inner.write(data)

    async def read_messages(self) -> AsyncIterator[dict[str, Any]]:  # type: ignore[override]
        try:
            async for m in self.inner.read_messages():
                self.conversation.observe(m)
                if m.get("type") == "stream_event" and not self.partial:
                    continue
                yield m
        finally:
            self.conversation.close()

    async def close(self) -> None:
        try:
            await self.inner.close()
        finally:
            self.conversation.close()

    def is_ready(self) -> bool:
        return self.inner.is_ready()

    async def end_input(self) -> None:
        await self.inner.end_input()


class Turnstile:
    """Runs the tool calls of Claude Agent SDK conversations through the scheduler, each model
    response one batch in written order (see the module doc). `target` is a `Policy` (a
    scheduler this object makes and shares across its conversations), a `Scheduler`, a
    `Driver` or a `Gate`. `decide(label, call)`, `execution_timeout`, `abort_grace` and
    `on_event` go to the gate (`Gate`'s); give them to the `Gate` instead when you pass one."""

    def __init__(
        self,
        target: Union[Policy, Scheduler, Driver, Gate],
        *,
        decide: Optional[Decide] = None,
        execution_timeout: Optional[float] = None,
        abort_grace: Optional[float] = None,
        on_event: Optional[OnEvent] = None,
        hook_timeout: float = HOOK_TIMEOUT,
    ) -> None:
        self.gate, self._owns = _adapter_gate(target, decide=decide, execution_timeout=execution_timeout, abort_grace=abort_grace, on_event=on_event)
        self.hook_timeout = hook_timeout

    def _prepare(self, prompt: Union[str, AsyncIterable[dict[str, Any]]], options: Optional[ClaudeAgentOptions]) -> tuple[ClaudeAgentOptions, _Peek]:
        options = options or ClaudeAgentOptions()
        if options.session_store is not None and (options.resume or options.continue_conversation):
            raise ValueError("Turnstile: resuming from a session_store is not supported (the SDK skips it with a custom transport)")
        conversation = _Conversation(self.gate)
        hooks = {k: list(v) for k, v in (options.hooks or {}).items()}
        hooks["PreToolUse"] = [HookMatcher(hooks=[conversation.pre], timeout=self.hook_timeout, on_failure="block")] + hooks.get("PreToolUse", [])
        hooks["PostToolUse"] = [HookMatcher(hooks=[conversation.post])] + hooks.get("PostToolUse", [])
        hooks["PostToolUseFailure"] = [HookMatcher(hooks=[conversation.post])] + hooks.get("PostToolUseFailure", [])
        ours = dataclasses.replace(options, hooks=hooks, include_partial_messages=True)  # type: ignore[arg-type]
        inner = SubprocessCLITransport(prompt=prompt, options=_configure_can_use_tool(ours))
        return ours, _Peek(inner, conversation, options.include_partial_messages)

    async def query(self, *, prompt: Union[str, AsyncIterable[dict[str, Any]]], options: Optional[ClaudeAgentOptions] = None) -> AsyncIterator[Any]:
        """`claude_agent_sdk.query(prompt=..., options=...)`, its tool calls scheduled."""
        ours, transport = self._prepare(prompt, options)
        async for message in _sdk_query(prompt=prompt, options=ours, transport=transport):
            yield message

    def client(self, options: Optional[ClaudeAgentOptions] = None) -> ClaudeSDKClient:
        """A `ClaudeSDKClient(options)` whose tool calls are scheduled (use as usual:
        `async with turnstile.client(options) as client: await client.query(...)`)."""

        async def _empty() -> AsyncIterator[dict[str, Any]]:
            return
            yield {}  # pragma: no cover

        ours, transport = self._prepare(_empty(), options)
        return ClaudeSDKClient(options=ours, transport=transport)

    def close(self) -> None:
        """Closes the gate when this object made it (every call in flight is cancelled)."""
        if self._owns:
            self.gate.close()

    async def aclose(self) -> None:
        if self._owns:
            await self.gate.aclose()

    async def __aenter__(self) -> "Turnstile":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
