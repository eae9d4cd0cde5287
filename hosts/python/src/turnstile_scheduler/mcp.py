"""The MCP Python SDK: a `ClientSession` whose every request goes through admission
(`pip install "turnstile-scheduler[mcp]"`).

```python
from turnstile_scheduler.mcp import AdmittedClientSession

async with stdio_client(params) as (read, write):
    async with AdmittedClientSession(read, write, max_concurrent=4, allow_parallel=False) as session:
        await session.initialize()
        results = await asyncio.gather(*(session.call_tool("search", {"q": q}) for q in queries))
```

`AdmittedClientSession` is a `ClientSession` (every argument of the SDK's constructor is
accepted as is) with an `Admission` controller (`admission=`, or one made from
`max_concurrent` and `allow_parallel`). Every request the session sends passes
`ClientSession.send_request`, where it waits for admission under its class. The class of a
method is the component's (`Admission.class_of_method`, the WIT's `class-of-method`):

| MCP method                                                                | class     |
| ------------------------------------------------------------------------- | --------- |
| `tools/call`                                                              | `call`    |
| `resources/read`, `prompts/get`, `completion/complete`, any other method  | `request` |
| `initialize`, `ping`, `tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`, `resources/subscribe`, `resources/unsubscribe`, `logging/setLevel` | `control` |

What only this session knows decides the fourth class: a request made while a sampling,
elicitation or roots callback of this session runs, with a tool call of the session in
flight, is `reentrant`, whatever its method.

A re-entrant request's parent is a guess, because the SDK does not say which tool call a
server request belongs to: the newest tool call of this session still in flight (itself
possibly re-entrant), or `parent_of(in_flight)` when given (it chooses among the tickets in
flight, oldest first). The calls in flight need not form one chain: re-entrant calls that
descend from an in-flight call are admitted without the tool-call serializer, so siblings
(two calls made from callbacks of one call) may be in flight together, bounded by the
budget, and with `allow_parallel` plain calls overlap too. So the newest call may be a
sibling's descendant rather than the true parent. Without `allow_parallel` every tool call
in flight descends from one call, so the guess is always a call of the right family and the
request is admitted without the serializer all the same; what a wrong guess can change is
the deadlock check, which counts the guessed line of ancestors: a chain (guessed or real)
whose in-flight calls hold the whole budget fails at once with `AdmissionError`
(`would-deadlock`) instead of hanging.

Timeouts: a request's timeout (`read_timeout_seconds` of the call, else the session's) is
its whole deadline; time spent queued counts against it. Passing it while queued raises
`AdmissionTimeoutError` (an `AdmissionError` and a `TimeoutError`): the request was never sent
and consumed nothing. Once admitted, the SDK gets the time that is left and enforces it as
usual (`MCPError`, `REQUEST_TIMEOUT`).

A request that timed out or was cancelled after it was sent keeps its slot until the server
answers it, `abort_grace` seconds pass (None, the default: until the answer), or the
connection closes. The SDK tells the server (`notifications/cancelled`) and raises at once, but
the server may still be running the call: one that cannot stop answers late, and a serialized
binding must not send the next tool call before. The SDK's own server stops a cancelled call
and never answers it (the spec's "SHOULD NOT respond"), so against it a held slot is freed only
by `abort_grace` or the connection closing: set `abort_grace` to the longest a tool may run on
after its cancellation. `abort_grace` has the driver's name and meaning: a stopped call keeps
its slot until it ends, or this much longer. The SDK forgets a request it gave up (a late
answer is dropped), so the session watches its two streams itself: it learns each request's
JSON-RPC id as the SDK writes it and sees every answer before the SDK reads it. A request
cancelled before the SDK wrote it was never sent and frees its slot at once. The streams are
needed: a session built on `dispatcher=` is refused.

Closing: leaving the `async with` (or `shutdown()`) refuses new requests (`ShutdownError`),
makes every queued request raise `ShutdownError`, and cancels every request in flight (the
SDK tells the server; the caller gets `ShutdownError`; their slots, held as below, are freed
when the session exits).

What this relies on in the SDK (mcp 2.x, checked by `tests/test_mcp.py`): every request of
`ClientSession` goes through `send_request(request, result_type, request_read_timeout_seconds,
metadata, progress_callback)`, and every server-initiated request with a callback through
`dispatch_input_request`, awaited in the task that answers it; a request is written to
`write_stream` from the task that sends it, as a `SessionMessage` holding a `JSONRPCRequest`,
and answers arrive on `read_stream` as `SessionMessage`s holding a `JSONRPCResponse` or
`JSONRPCError`.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from typing import Any, Callable, Optional

import anyio
from mcp import ClientSession
from mcp.types import JSONRPCError, JSONRPCRequest, JSONRPCResponse

from . import _check
from .admission import Admission, Slot
from .types import AdmissionClass

__all__ = ["AdmittedClientSession"]

CALL, REENTRANT = AdmissionClass.CALL, AdmissionClass.REENTRANT

# (session, parent ticket) while a callback of that session answers a server request.
_CALLBACK: contextvars.ContextVar[Optional[tuple[Any, Optional[int]]]] = contextvars.ContextVar(
    "turnstile_mcp_callback", default=None
)
_ids = itertools.count(1)


class _Sent:
    """A request of the session's, from its write until its slot is given back."""

    __slots__ = ("id", "answered", "free", "timer")

    def __init__(self) -> None:
        self.id: Any = None
        self.answered = False
        self.free: Optional[Callable[[], None]] = None  # set while its slot is held
        self.timer: Optional[asyncio.TimerHandle] = None


# The request the current task is sending: the write stream learns its id.
_SENDING: contextvars.ContextVar[Optional[tuple[Any, _Sent]]] = contextvars.ContextVar("turnstile_mcp_sending", default=None)


class AdmittedClientSession(ClientSession):
    """A `ClientSession` whose requests go through admission (see the module doc)."""

    def __init__(
        self,
        read_stream: Any = None,
        write_stream: Any = None,
        read_timeout_seconds: Optional[float] = None,
        *args: Any,
        admission: Optional[Admission] = None,
        max_concurrent: int = 4,
        allow_parallel: bool = False,
        parent_of: Optional[Callable[[list[int]], Optional[int]]] = None,
        abort_grace: Optional[float] = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("dispatcher") is not None:
            raise TypeError("AdmittedClientSession needs read_stream and write_stream (it watches them for late answers), not dispatcher=")
        self.abort_grace = _check.number(abort_grace, "abort_grace")
        """Seconds a request given up after it was sent keeps its slot waiting for the server's
        answer (None: until the answer or the connection closes)."""
        self._sent: dict[Any, _Sent] = {}  # requests written and not answered, by JSON-RPC id
        self._open = True  # the read stream has not ended
        if read_stream is not None:
            read_stream = _WatchedRead(read_stream, self)
        if write_stream is not None:
            write_stream = _WatchedWrite(write_stream, self)
        super().__init__(read_stream, write_stream, read_timeout_seconds, *args, **kwargs)
        self._owns_admission = admission is None
        self.admission = admission if admission is not None else Admission(max_concurrent, allow_parallel)
        self._timeout = read_timeout_seconds
        self._parent_of = parent_of
        self._calls: list[int] = []  # tickets of this session's tool calls in flight, oldest first
        self._shut = False

    async def send_request(
        self,
        request: Any,
        result_type: Any,
        request_read_timeout_seconds: Optional[float] = None,
        metadata: Any = None,
        progress_callback: Any = None,
    ) -> Any:
        method = str(getattr(request, "method", ""))
        cls = self.admission.class_of_method(method)  # the component's table
        is_call = cls is CALL  # a tool call: a parent for what its callbacks send
        parent: Optional[int] = None
        callback = _CALLBACK.get()
        if callback is not None and callback[0] is self and callback[1] is not None:
            cls, parent = REENTRANT, callback[1]  # where it is sent from: only this session knows
        timeout = request_read_timeout_seconds if request_read_timeout_seconds is not None else self._timeout
        slot = self.admission.slot(cls, parent=parent, timeout=timeout, id=f"{method} #{next(_ids)}")
        permit = await slot.__aenter__()  # AdmissionTimeoutError when the timeout passes queued
        # Admitted: the SDK enforces what is left of the deadline (and tells the server).
        if slot._timer is not None:
            slot._timer.cancel()
        remaining = permit.remaining()
        if is_call:
            self._calls.append(permit.ticket)
        sent = _Sent()
        token = _SENDING.set((self, sent))
        try:
            result = await super().send_request(request, result_type, remaining, metadata, progress_callback)
        except BaseException as e:
            if is_call:
                self._calls.remove(permit.ticket)
            if sent.id is None or sent.answered or not self._open:
                self._sent.pop(sent.id, None)
                await slot.__aexit__(type(e), e, e.__traceback__)  # ShutdownError when shutdown cancelled it
                raise
            # Given up after it was sent, not answered: the server may still run it.
            try:
                slot._outcome(type(e), e)
            finally:
                slot._detach()
                self._hold(sent, slot)
            raise
        finally:
            _SENDING.reset(token)
        if is_call:
            self._calls.remove(permit.ticket)
        self._sent.pop(sent.id, None)
        await slot.__aexit__(None, None, None)
        return result

    def _hold(self, sent: _Sent, slot: Slot) -> None:
        """Keeps the slot of `sent` until its answer, `abort_grace` or the connection's end."""

        def free() -> None:
            if sent.free is None:
                return
            sent.free = None
            if sent.timer is not None:
                sent.timer.cancel()
            self._sent.pop(sent.id, None)
            slot._end()

        sent.free = free
        if self.abort_grace is not None:
            sent.timer = asyncio.get_running_loop().call_later(self.abort_grace, free)

    def _written(self, message: Any) -> None:
        """The write stream took `message`, in the task that sends it."""
        sending = _SENDING.get()
        if sending is not None and sending[0] is self and sending[1].id is None and isinstance(message, JSONRPCRequest):
            sending[1].id = message.id
            self._sent[message.id] = sending[1]

    def _read(self, message: Any) -> None:
        """The read stream gave `message`, before the SDK reads it."""
        if isinstance(message, (JSONRPCResponse, JSONRPCError)):
            sent = self._sent.get(message.id)
            if sent is not None:
                sent.answered = True
                if sent.free is not None:
                    sent.free()

    def _closed(self) -> None:
        """The connection ended: nothing runs for this session on the server any more."""
        self._open = False
        for sent in list(self._sent.values()):
            if sent.free is not None:
                sent.free()

    async def dispatch_input_request(self, ctx: Any, request: Any) -> Any:
        """Answers a server request (sampling, elicitation, roots) through the callbacks; what
        they send through this session meanwhile is re-entrant, with the call in flight as
        its parent."""
        parent: Optional[int] = None
        if self._calls:
            parent = self._parent_of(list(self._calls)) if self._parent_of is not None else self._calls[-1]
        token = _CALLBACK.set((self, parent))
        try:
            return await super().dispatch_input_request(ctx, request)
        finally:
            _CALLBACK.reset(token)

    def shutdown(self) -> None:
        """Refuses new requests and cancels every queued and in-flight one (each raises
        `ShutdownError`). Idempotent."""
        if not self._shut and not self.admission.closed:
            self._shut = True
            self.admission.shutdown()

    async def __aexit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> Optional[bool]:
        self.shutdown()
        try:
            return await super().__aexit__(exc_type, exc_val, exc_tb)
        finally:
            self._closed()
            if self._owns_admission:
                self.admission.close()


class _WatchedRead:
    """The session's read stream, telling it of every message before the SDK reads it."""

    def __init__(self, inner: Any, session: AdmittedClientSession) -> None:
        self._inner = inner
        self._session = session

    async def receive(self) -> Any:
        try:
            item = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._session._closed()
            raise
        message = getattr(item, "message", None)
        if message is not None:
            self._session._read(message)
        return item

    def __aiter__(self) -> "_WatchedRead":
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> "_WatchedRead":
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Optional[bool]:
        return await self._inner.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _WatchedWrite:
    """The session's write stream, telling it of every request the SDK writes."""

    def __init__(self, inner: Any, session: AdmittedClientSession) -> None:
        self._inner = inner
        self._session = session

    async def send(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if message is not None:
            self._session._written(message)
        await self._inner.send(item)

    async def __aenter__(self) -> "_WatchedWrite":
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Optional[bool]:
        return await self._inner.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
