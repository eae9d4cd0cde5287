"""A real MCP server over stdio, written with the SDK's server API, for tests/test_mcp.py.

`python server.py MODE` where MODE is `serialized` (a tool call that starts while another is
in flight fails: the binding promised one at a time) or `parallel` (overlap is only counted).
Every tool call records its start and end; the `stats` resource reports the peak number of
requests in flight (tool calls, resource reads and prompts alike) and the overlaps seen.
"""

from __future__ import annotations

import asyncio
import json
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import SamplingMessage, TextContent

MODE = sys.argv[1] if len(sys.argv) > 1 else "serialized"
server = MCPServer("turnstile-test")
state = {"tools": 0, "requests": 0, "peak_tools": 0, "peak_requests": 0, "overlaps": 0, "log": []}


class _InFlight:
    def __init__(self, label: str, tool: bool) -> None:
        self.label, self.tool = label, tool

    def __enter__(self) -> None:
        if self.tool:
            if state["tools"] > 0:
                state["overlaps"] += 1
                if MODE == "serialized" and not _nested.get(self.label):
                    raise RuntimeError(f"{self.label}: overlaps another tool call on a serialized binding")
            state["tools"] += 1
            state["peak_tools"] = max(state["peak_tools"], state["tools"])
        state["requests"] += 1
        state["peak_requests"] = max(state["peak_requests"], state["requests"])
        state["log"].append(f"start {self.label}")

    def __exit__(self, *exc: object) -> None:
        state["requests"] -= 1
        if self.tool:
            state["tools"] -= 1
        state["log"].append(f"end {self.label}")


_nested: dict[str, bool] = {}  # labels of calls made from a sampling callback (allowed to overlap their parent)


@server.tool()
async def work(label: str, seconds: float = 0.05) -> str:
    """Sleeps `seconds`, recording its start and end."""
    with _InFlight(label, True):
        await asyncio.sleep(seconds)
    return f"done {label}"


@server.tool()
async def nest(depth: int, ctx: Context) -> str:
    """Asks the client to sample; the client's sampling callback calls `nest(depth - 1)`
    through the same session, down to depth 0."""
    label = f"nest{depth}"
    _nested[label] = True  # a child overlaps its parent by design
    with _InFlight(label, True):
        if depth == 0:
            return "bottom"
        result = await ctx.session.create_message(
            [SamplingMessage(role="user", content=TextContent(type="text", text=str(depth - 1)))], max_tokens=10
        )
        return f"{depth}>{result.content.text}"


@server.resource("test://stats")
def stats() -> str:
    return json.dumps(state)


@server.resource("test://slow/{label}")
async def slow(label: str) -> str:
    with _InFlight(f"read {label}", False):
        await asyncio.sleep(0.05)
    return label


@server.prompt()
async def greet(name: str) -> str:
    with _InFlight(f"prompt {name}", False):
        await asyncio.sleep(0.05)
    return f"hello {name}"


if __name__ == "__main__":
    server.run("stdio")
