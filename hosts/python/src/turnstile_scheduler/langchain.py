"""LangChain v1 / LangGraph agents: a middleware that runs every tool call of `create_agent`
through the scheduler, one model response at a time
(`pip install "turnstile-scheduler[langchain]"`). Scope: one scheduler per middleware, shared
by every run and every thread of the agent, so a key's limit holds across conversations; for a
scheduler per conversation, build the agent with a `TurnstileMiddleware(policy)` of its own per
conversation.

```python
from langchain.agents import create_agent
from turnstile_scheduler.langchain import TurnstileMiddleware

agent = create_agent(model, tools, middleware=[TurnstileMiddleware(policy)])
result = await agent.ainvoke({"messages": [("user", "renumber RFD 2 to 5, then 5 to 6")]})
# or agent.invoke(...): the sync tool node works too
```

The batch is the model's response, not loop-turn timing. The middleware's `after_model` hook
sees the `AIMessage` before the graph starts any of its tool calls, and submits its tool
calls not answered yet (`Gate.expect`) as ONE batch, in the order the model wrote them
(`Call(id, name, arguments=args)`, so a key template `fs:{path}` works). `decide(label, call)`
is asked about every call of the batch in written order, and the component starts none of
them before every one was decided. Each call's `awrap_tool_call` (the graph's own task for
it) then takes its place (`gate.call` by the tool call's id), waits there until the scheduler
releases it, runs the tool (`handler(request)`) and reports its end: a result is ok; an
exception, or a `ToolMessage` with `status="error"` (LangChain's answer to bad arguments),
failed; a tool that raises `RateLimited(retry_after)` is retried in place after the key's
pause (as with `Gate`). A call the scheduler settles (rejected, skipped, cancelled, stopped
...) is answered with a `ToolMessage(status="error")` whose content is the component's sentence
(e.g. "not run: the user rejected this call"), the way `turnstile_scheduler.pydantic_ai`
answers; `settled="raise"` raises `CallSettledError` from the tool node instead. A tool that
raises fails only its own call; LangChain handles the exception as usual (its default fails
the run, which cancels the other calls: queued ones are withdrawn, their keys move on).

Put it FIRST in `middleware=[...]`: its `after_model` then runs last among the hooks (so it
sees the calls as other middleware left them, e.g. `HumanInTheLoopMiddleware`'s edits and
rejections), and its `wrap_tool_call` is outermost (retries of another middleware run inside
the call's slot). A call of the response the graph never runs (a structured-output tool call,
a later hook that jumped elsewhere) is withdrawn at the next model call or at the agent's end;
a call this middleware did not see in a response (a run resumed after an interrupt) is a batch
of its own when it arrives, still limited.

Scope. One middleware, one scheduler: a `Policy` makes a scheduler (and its driver) that every
run and every thread of the agent shares, so a key's limit holds across conversations (never
looser than per conversation). For limits per conversation, build the agent with a middleware
per conversation. A `Scheduler`, `Driver` or `Gate` given is shared the same way, and never
closed by the middleware; `close()` closes what it made. Tool call ids must be unique among the
calls in flight on the scheduler (providers make them so): a live duplicate is refused
(`SubmitError` from the model's step).

Sync and async. `ainvoke`/`astream` run everything on the caller's event loop: the hooks, the
tools, `decide`. `invoke`/`stream` (whose tool node runs each call in a worker thread) drive the
same gate on an event loop thread the middleware starts on first sync use: `after_model` submits
the batch there, and each sync `wrap_tool_call` waits for its release there, then runs the
tool in its own worker thread and reports its end. `decide` (sync or async) runs on that loop
thread. A sync tool cannot be interrupted: `execution_timeout` and cancellation let it finish
(it keeps its slot until then). The gate's driver runs one event loop at a time: sync and async
runs of one middleware may follow each other, not overlap (a `RuntimeError` says so).

What this relies on in LangChain (langchain 1.5, langgraph 1.2; checked by
`tests/test_langchain.py`, so a release that changes it fails a test instead of racing): a
middleware's `after_model`/`aafter_model` runs with the state whose last message is the model's
`AIMessage`, its `tool_calls` in written order, before any tool of it starts; each tool call
then reaches `wrap_tool_call`/`awrap_tool_call` with `request.tool_call` holding that call's
`id`, `name` and `args`; and the sync tool node calls `wrap_tool_call` from worker threads
that run at the same time.

What it cannot see: the end of a run that was cancelled or failed while a call of its response
had not reached `awrap_tool_call` yet. Such a call is withdrawn when a call of the same response
ends by an exception or a cancellation (which is how LangGraph ends a step early), else at the
thread's next model call; until then a released one keeps its key's slot.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import weakref
from typing import Any, Awaitable, Callable, Coroutine, Literal, Optional, TypeVar, Union

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, ToolMessage

from .config import Policy
from .driver import Decide, Driver
from .events import OnEvent
from .gate import CallSettledError, Gate, _adapter_gate
from .scheduler import Scheduler

__all__ = ["TurnstileMiddleware"]

T = TypeVar("T")


class _Failed(Exception):
    """The tool node answered with an error `ToolMessage`: the call failed (carried through
    `gate.call` to report it, then given back as the answer)."""

    def __init__(self, message: ToolMessage) -> None:
        super().__init__(str(message.content))
        self.message = message


class _LoopThread:
    """An event loop on a daemon thread, for the sync hooks."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="turnstile-langchain", daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self.thread:
            raise RuntimeError("TurnstileMiddleware: a sync hook ran on the middleware's own loop thread")
        return self.submit(coro).result()


def _stop(lt: _LoopThread) -> None:
    if lt.loop.is_closed():
        return
    lt.loop.call_soon_threadsafe(lt.loop.stop)
    if threading.current_thread() is not lt.thread:
        lt.thread.join()
        lt.loop.close()


class TurnstileMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """Runs the agent's tool calls through the scheduler, each model response one batch in
    written order (see the module doc). `target` is a `Policy` (a scheduler this middleware
    makes and shares across the agent's runs), a `Scheduler`, a `Driver` or a `Gate`.
    `decide(label, call)`, `execution_timeout` and `abort_grace` (seconds) go to every batch
    (`Driver.run`'s), and `on_event` (telemetry) to the driver the gate makes (`Gate`'s); give
    them to the `Gate` instead when you pass one."""

    def __init__(
        self,
        target: Union[Policy, Scheduler, Driver, Gate],
        *,
        decide: Optional[Decide] = None,
        execution_timeout: Optional[float] = None,
        abort_grace: Optional[float] = None,
        settled: Literal["return", "raise"] = "return",
        on_event: Optional[OnEvent] = None,
    ) -> None:
        if settled not in ("return", "raise"):
            raise ValueError(f"settled must be 'return' or 'raise', not {settled!r}")
        self.gate, self._owns = _adapter_gate(target, decide=decide, execution_timeout=execution_timeout, abort_grace=abort_grace, on_event=on_event)
        self.settled = settled
        self._lt: Optional[_LoopThread] = None
        self._lt_lock = threading.Lock()
        self.tools = []

    # -- the batch: the model's response -----------------------------------------------------

    async def aafter_model(self, state: Any, runtime: Any) -> None:
        self._expect(state)

    def after_model(self, state: Any, runtime: Any) -> None:
        self._loop_thread().run(self._in_loop(self._expect, state))

    async def abefore_model(self, state: Any, runtime: Any) -> None:
        """Before the next model call, and at the agent's end (`aafter_agent`): the calls of
        past responses that never ran are withdrawn."""
        self._sweep(state)

    def before_model(self, state: Any, runtime: Any) -> None:
        if self.gate.expected():  # the loop thread only when there is something to withdraw
            self._loop_thread().run(self._in_loop(self._sweep, state))

    aafter_agent = abefore_model
    after_agent = before_model

    def _expect(self, state: Any) -> None:
        messages = _messages(state)
        last = _last_response(messages)
        self._sweep(state, skip=last)
        if last is None:
            return
        response = messages[last]
        # As the graph does: the calls not answered yet (another middleware may have answered
        # some with a ToolMessage, e.g. a human's rejection).
        answered = {m.tool_call_id for m in messages[last + 1 :] if isinstance(m, ToolMessage)}
        calls = [(c["name"], c["id"], c.get("args")) for c in response.tool_calls if c.get("id") and c["id"] not in answered]
        if calls:
            try:
                self.gate.expect(calls)
            except RuntimeError as e:
                raise RuntimeError(
                    f"TurnstileMiddleware: {e} (sync invoke and async ainvoke of one middleware may not overlap)"
                ) from e

    def _sweep(self, state: Any, skip: Optional[int] = None) -> None:
        """Withdraws the expected calls of past responses in this state that never ran."""
        waiting = self.gate.expected()
        if not waiting:
            return
        ids = {c.get("id") for i, m in enumerate(_messages(state)) if i != skip and isinstance(m, AIMessage) for c in m.tool_calls}
        for call_id in waiting:
            if call_id in ids:
                self.gate.withdraw(call_id)

    # -- each call -----------------------------------------------------------------------------

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        name, call_id, args = _tool_call(request)

        async def run(_: Any) -> Any:
            return _checked(await handler(request))

        try:
            return await self.gate.call(name, call_id, args, run)
        except (_Failed, CallSettledError) as e:
            return self._answer(e, name, call_id)
        except BaseException:
            self._give_up_siblings(request, call_id)
            raise

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        name, call_id, args = _tool_call(request)
        # The gate runs `run` on the loop thread; `run` hands the go to this worker thread and
        # waits for the tool's end here. A 429 (RateLimited) hands the go over again.
        mailbox: "queue.SimpleQueue[tuple[str, Any]]" = queue.SimpleQueue()

        async def run(_: Any) -> Any:
            end: concurrent.futures.Future[Any] = concurrent.futures.Future()
            mailbox.put(("go", end))
            waiting = asyncio.wrap_future(end)
            try:
                return await asyncio.shield(waiting)
            except asyncio.CancelledError:
                # Stopped (timeout, closed): a thread cannot be interrupted, so the call keeps
                # its slot until the tool returns.
                if not end.done():
                    try:
                        await asyncio.shield(waiting)
                    except BaseException:
                        pass
                raise

        lt = self._loop_thread()
        outcome = lt.submit(self.gate.call(name, call_id, args, run))
        outcome.add_done_callback(lambda f: mailbox.put(("done", f)))
        while True:
            kind, item = mailbox.get()
            if kind == "go":
                try:
                    item.set_result(_checked(handler(request)))
                except BaseException as e:
                    item.set_exception(e)
                continue
            try:
                return item.result()
            except (_Failed, CallSettledError) as e:
                return self._answer(e, name, call_id)
            except BaseException:
                lt.run(self._in_loop(self._give_up_siblings, request, call_id))
                raise

    def _answer(self, e: Exception, name: str, call_id: str) -> Any:
        """The answer of a call whose `gate.call` raised `e`: a failed one's own error
        `ToolMessage`; for a settled one, the component's sentence as an error `ToolMessage`
        (or, with `settled="raise"`, `e` raised)."""
        if isinstance(e, _Failed):
            return e.message
        if self.settled == "raise":
            raise e
        return ToolMessage(content=str(e), tool_call_id=call_id, name=name, status="error")

    def _give_up_siblings(self, request: Any, call_id: str) -> None:
        """A call of a response ended by an exception or a cancellation, which usually ends the
        graph's step (LangGraph cancels the other tool tasks): the calls of the same response
        that never reached the middleware are withdrawn, so that none keeps a slot waiting for a
        task that will not come. One that still comes is a batch of its own."""
        waiting = set(self.gate.expected())
        if not waiting:
            return
        for m in reversed(_messages(request.state)):
            if isinstance(m, AIMessage) and any(c.get("id") == call_id for c in m.tool_calls):
                for c in m.tool_calls:
                    if c.get("id") in waiting:
                        self.gate.withdraw(c["id"])
                return

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the gate when the middleware made it (every call in flight is cancelled) and
        stops the loop thread of the sync hooks. Closing twice is fine."""
        lt, self._lt = self._lt, None
        if self._owns:
            if lt is not None and not self.gate.closed:
                lt.run(self._in_loop(self.gate.close))
            else:
                self.gate.close()
        if lt is not None:
            _stop(lt)

    def _loop_thread(self) -> _LoopThread:
        lt = self._lt
        if lt is None:
            with self._lt_lock:
                lt = self._lt
                if lt is None:
                    lt = self._lt = _LoopThread()
                    weakref.finalize(self, _stop, lt)
        return lt

    @staticmethod
    async def _in_loop(f: Callable[..., T], *args: Any) -> T:
        return f(*args)


def _tool_call(request: Any) -> tuple[str, str, Any]:
    """The name, id and arguments of the request's tool call (ValueError when it has no id)."""
    call = request.tool_call
    name, call_id = call["name"], call.get("id")
    if not call_id:
        raise ValueError(f"{name}: the tool call has no id")
    return name, call_id, call.get("args")


def _messages(state: Any) -> list[Any]:
    messages = state.get("messages") if isinstance(state, dict) else getattr(state, "messages", None)
    return list(messages or [])


def _last_response(messages: list[Any]) -> Optional[int]:
    """The index of the model's response: the last message, or the last AIMessage followed
    only by ToolMessages (answers another middleware gave); None when it has no tool call."""
    i = len(messages) - 1
    while i >= 0 and isinstance(messages[i], ToolMessage):
        i -= 1
    if i >= 0 and isinstance(messages[i], AIMessage) and messages[i].tool_calls:
        return i
    return None


def _checked(result: Any) -> Any:
    """An error `ToolMessage` (LangChain's answer to a call it could not run) fails the call."""
    if isinstance(result, ToolMessage) and result.status == "error":
        raise _Failed(result)
    return result
