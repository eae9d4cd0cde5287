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
its whole deadline; time spent queued counts against it. Passing it while queued raises the
SDK's own `MCPError` (`REQUEST_TIMEOUT`) and the request consumed nothing; once admitted, the
SDK gets the time that is left and enforces it as usual.

Closing: leaving the `async with` (or `shutdown()`) refuses new requests (`ShutdownError`),
makes every queued request raise `ShutdownError`, and cancels every request in flight (the
SDK tells the server; the caller gets `ShutdownError`).

What this relies on in the SDK (mcp 2.x, checked by `tests/test_mcp.py`): every request of
`ClientSession` goes through `send_request(request, result_type, request_read_timeout_seconds,
metadata, progress_callback)`, and every server-initiated request with a callback through
`dispatch_input_request`, awaited in the task that answers it.
"""

from __future__ import annotations

import contextvars
import itertools
from typing import Any, Callable, Optional

from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.types import REQUEST_TIMEOUT

from .admission import Admission
from .types import AdmissionClass

__all__ = ["AdmittedClientSession"]

CALL, REENTRANT = AdmissionClass.CALL, AdmissionClass.REENTRANT

# (session, parent ticket) while a callback of that session answers a server request.
_CALLBACK: contextvars.ContextVar[Optional[tuple[Any, Optional[int]]]] = contextvars.ContextVar(
    "turnstile_mcp_callback", default=None
)
_ids = itertools.count(1)


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
        **kwargs: Any,
    ) -> None:
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
        try:
            permit = await slot.__aenter__()
        except TimeoutError as e:
            raise MCPError(code=REQUEST_TIMEOUT, message=f"Request {method!r} timed out waiting for admission") from e
        # Admitted: the SDK enforces what is left of the deadline (and tells the server).
        if slot._timer is not None:
            slot._timer.cancel()
        remaining = permit.remaining()
        if is_call:
            self._calls.append(permit.ticket)
        try:
            result = await super().send_request(request, result_type, remaining, metadata, progress_callback)
        except BaseException as e:
            if is_call:
                self._calls.remove(permit.ticket)
            await slot.__aexit__(type(e), e, e.__traceback__)  # ShutdownError when shutdown cancelled it
            raise
        if is_call:
            self._calls.remove(permit.ticket)
        await slot.__aexit__(None, None, None)
        return result

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
            if self._owns_admission:
                self.admission.close()
