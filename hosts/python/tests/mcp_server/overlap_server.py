"""A real MCP server over stdio (the SDK's `MCPServer`) for the slot-holding tests of
tests/test_mcp.py: a server that must never run two tool calls at once, and fails loudly when
it does. It tracks the tool calls it runs where messages arrive and leave (so the SDK's
scheduling of handlers cannot hide an overlap): a `tools/call` runs from the moment its request
is read until its response is written. When one is read while another runs, the server writes
`FATAL: <new> overlapped <running>` to stderr and exits, so every later request fails with
"Connection closed" (what a real single-threaded server does).

`python overlap_server.py CANCEL` says what it does with `notifications/cancelled`:
- `ignore`: drops it (a server that cannot stop a call): the call runs on and is answered late;
- `honour` (the SDK's behaviour): the call stops when the notification is read and is never
  answered (the spec's "SHOULD NOT respond");
- `ack`: as `honour`, and it acknowledges the cancellation with an error answer at once (as the
  SDK's 1.x servers did: `Request cancelled`).

Tools: `block(label)` runs until `test://release/{label}` is read; `work(label)` answers at once.
Resources (class `request`, never blocked by a tool call): `test://release/{label}`,
`test://barrier/{n}` (answers once n barrier reads are in flight together) and `test://log`
(JSON: every start, end and cancel, in order).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import ErrorData, JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

CANCEL = sys.argv[1] if len(sys.argv) > 1 else "honour"
IGNORE_CANCEL = CANCEL == "ignore"
server = MCPServer("turnstile-overlap")
running: dict[object, str] = {}  # the tool calls running, by request id
releases: dict[str, asyncio.Event] = {}
log: list[str] = []
barrier: dict[str, object] = {"waiting": 0, "met": asyncio.Event()}


def arrived(message: object) -> object:
    """Tracks a message as it is read: False drops it, a request id is a cancelled call to
    acknowledge."""
    if isinstance(message, JSONRPCRequest) and message.method == "tools/call":
        label = str(((message.params or {}).get("arguments") or {}).get("label", "?"))
        if running:
            sys.stderr.write(f"FATAL: {label} overlapped {', '.join(running.values())}\n")
            sys.stderr.flush()
            os._exit(1)
        running[message.id] = label
        log.append(f"start {label}")
    elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
        if IGNORE_CANCEL:
            return False
        request_id = (message.params or {}).get("requestId")
        label = running.pop(request_id, None)
        if label is not None:
            log.append(f"cancel {label}")
            if CANCEL == "ack":
                return request_id
    return True


def leaving(message: object) -> None:
    """Tracks a message as it is written."""
    if isinstance(message, (JSONRPCResponse, JSONRPCError)):
        label = running.pop(message.id, None)
        if label is not None:
            log.append(f"end {label}")


@server.tool()
async def block(label: str) -> str:
    """Runs until `test://release/{label}` is read."""
    event = releases.setdefault(label, asyncio.Event())
    await event.wait()
    return f"{label} done"


@server.tool()
async def work(label: str) -> str:
    """Answers at once."""
    return f"{label} done"


@server.resource("test://release/{label}")
def release(label: str) -> str:
    releases.setdefault(label, asyncio.Event()).set()
    return "released"


@server.resource("test://barrier/{n}")
async def barrier_read(n: str) -> str:
    barrier["waiting"] = int(barrier["waiting"]) + 1  # type: ignore[call-overload]
    log.append(f"barrier {barrier['waiting']}")
    met: asyncio.Event = barrier["met"]  # type: ignore[assignment]
    if int(barrier["waiting"]) >= int(n):  # type: ignore[call-overload]
        met.set()
        barrier["waiting"], barrier["met"] = 0, asyncio.Event()
    await met.wait()
    return "met"


@server.resource("test://log")
def log_read() -> str:
    return json.dumps(log)


async def main() -> None:
    async with stdio_server() as (stdin, stdout):
        read_in, read_out = anyio.create_memory_object_stream(0)
        write_in, write_out = anyio.create_memory_object_stream(0)

        async def reader() -> None:
            async with read_in:
                async for item in stdin:
                    verdict = True if isinstance(item, Exception) else arrived(item.message)
                    if verdict is not False:
                        await read_in.send(item)
                    if verdict is not True and verdict is not False:
                        error = ErrorData(code=-32800, message="Request cancelled")
                        await stdout.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=verdict, error=error)))

        async def writer() -> None:
            async with write_out:
                async for item in write_out:
                    leaving(item.message)
                    await stdout.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            low = server._lowlevel_server  # MCPServer.run_stdio_async, with the two watchers between
            await low.run(read_out, write_in, low.create_initialization_options())
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
