"""The Claude Agent SDK through `turnstile_scheduler.claude_agent.Turnstile`, offline: the SDK's
own bundled Claude Code CLI runs against a fake Anthropic Messages API (a local HTTP server
streaming SSE, several `tool_use` blocks per response over several turns, then a text), with
in-process SDK MCP tools that record their start and end. Failure paths first (a tool that
raises, a rejected call, a conversation cancelled mid-run), then the race without the adapter,
the same run limited, one batch per response decided before any start, and the CLI behaviour
the adapter rests on, tested against the SDK directly."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

import pytest

try:
    from claude_agent_sdk import (
        ClaudeAgentOptions,
        HookMatcher,
        ResultMessage,
        Transport,
        create_sdk_mcp_server,
        query,
        tool,
    )
    from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
    from mcp.types import ToolAnnotations
except ImportError as e:  # pragma: no cover
    raise ImportError(
        f"tests/test_claude_agent.py needs claude-agent-sdk 0.2.184 ({e}): pip install "
        "'claude-agent-sdk==0.2.184' (or the package's test extra)"
    ) from e

import _adapters as adapters
from turnstile_scheduler import Policy
from turnstile_scheduler.claude_agent import Turnstile

# The CLI names an SDK MCP tool `mcp__<server>__<tool>`; the policy uses the CLI's names.
P = "mcp__t__"
CONFIG = f"""
[conversation.tools.{P}rfd_draft]
concurrency = {{ key = "rfd" }}
[conversation.tools.{P}rfd_renumber]
concurrency = {{ key = "rfd" }}
[conversation.tools.{P}github_issues]
concurrency = {{ key = "github", limit = 2 }}
"""
TURNS = [[(P + name, args, call_id) for name, args, call_id in turn] for turn in adapters.TURNS]


def policy() -> Policy:
    return Policy.resolve([("test", CONFIG)])


class FakeAPI:
    """The Anthropic Messages API, scripted: each request that offers tools gets the next
    response of `turns` (its tool_use blocks, streamed one by one `gap` seconds apart), then
    `final` as text. Records every request (the tool results the model received)."""

    def __init__(self, turns: list[list[tuple[str, dict[str, Any], str]]], final: str = "done", gap: float = 0.02) -> None:
        self.turns = list(turns)
        self.final = final
        self.gap = gap
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = json.loads(body or b"{}")
                if not self.path.startswith("/v1/messages") or "count_tokens" in self.path or not request.get("stream"):
                    data = json.dumps({"input_tokens": 1} if "count_tokens" in self.path else {
                        "id": "msg_side", "type": "message", "role": "assistant", "model": request.get("model"),
                        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": None,
                        "usage": {"input_tokens": 1, "output_tokens": 1}}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                fake.requests.append(request)
                if request.get("tools") and fake.turns:
                    blocks = [{"type": "tool_use", "id": i, "name": n, "input": a} for n, a, i in fake.turns.pop(0)]
                else:
                    blocks = [{"type": "text", "text": fake.final}]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()

                def event(name: str, data: dict[str, Any]) -> None:
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()

                event("message_start", {"type": "message_start", "message": {
                    "id": f"msg_{len(fake.requests)}", "type": "message", "role": "assistant", "model": request.get("model"),
                    "content": [], "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}})
                for index, b in enumerate(blocks):
                    if b["type"] == "text":
                        event("content_block_start", {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
                        event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": b["text"]}})
                    else:
                        event("content_block_start", {"type": "content_block_start", "index": index,
                                                      "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
                        event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                      "delta": {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}})
                    event("content_block_stop", {"type": "content_block_stop", "index": index})
                    time.sleep(fake.gap)
                stop = "tool_use" if blocks[0]["type"] == "tool_use" else "end_turn"
                event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 1}})
                event("message_stop", {"type": "message_stop"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def env(self) -> dict[str, str]:
        return {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{self.server.server_address[1]}", "ANTHROPIC_API_KEY": "test",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}

    def results(self) -> dict[str, tuple[str, bool]]:
        """Every tool result the model received: call id -> (text, is_error)."""
        out: dict[str, tuple[str, bool]] = {}
        for r in self.requests:
            for m in r.get("messages", []):
                for b in m.get("content") if isinstance(m.get("content"), list) else []:
                    if b.get("type") == "tool_result":
                        c = b.get("content")
                        text = "".join(x.get("text", "") for x in c) if isinstance(c, list) else str(c)
                        out[b["tool_use_id"]] = (text, bool(b.get("is_error")))
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# Concurrency-safe (read-only) tools: the CLI runs them at the same time, as a model's parallel
# calls of such tools are (the CLI runs other tools one at a time on its own).
SAFE = ToolAnnotations(readOnlyHint=True)


class World(adapters.World):
    """The shared world, with its tools as SDK MCP tools; `fail` names draft titles that raise."""

    def __init__(self, fail: tuple[str, ...] = (), seconds: float = 0.0) -> None:
        super().__init__()
        self.fail = fail
        self.seconds = seconds

    def options(self, fake: FakeAPI, safe: bool = True, **kw: Any) -> ClaudeAgentOptions:
        world = self
        SAFE_ = SAFE if safe else None

        def text(s: str) -> dict[str, Any]:
            return {"content": [{"type": "text", "text": s}]}

        @tool("rfd_draft", "Allocates the next RFD number.", {"title": str}, annotations=SAFE_)
        async def draft(args: dict[str, Any]) -> dict[str, Any]:
            if args["title"] in world.fail:
                world.events.append(("start", "rfd_draft", args["title"]))
                raise RuntimeError(f"draft {args['title']} failed")
            number = max(world.rfds) + 1
            world.start("rfd_draft", args["title"])
            await asyncio.sleep(0.05 + world.seconds)
            world.rfds[number] = args["title"]
            world.end("rfd_draft", args["title"])
            return text(str(number))

        @tool("rfd_renumber", "Moves an RFD.", {"old": int, "new": int}, annotations=SAFE_)
        async def renumber(args: dict[str, Any]) -> dict[str, Any]:
            old, new = args["old"], args["new"]
            if old not in world.rfds or new in world.rfds:
                return {"content": [{"type": "text", "text": f"cannot move {old} to {new}"}], "is_error": True}
            world.start("rfd_renumber", f"{old}->{new}")
            await asyncio.sleep(0.03)
            world.rfds[new] = world.rfds.pop(old)
            world.end("rfd_renumber", f"{old}->{new}")
            return text(f"{old} is now {new}")

        @tool("github_issues", "Reads an issue.", {"n": int}, annotations=SAFE_)
        async def issues(args: dict[str, Any]) -> dict[str, Any]:
            world.start("github_issues", str(args["n"]))
            await asyncio.sleep(0.05)
            world.end("github_issues", str(args["n"]))
            return text(f"issue {args['n']}")

        @tool("read", "Reads a file.", {"path": str}, annotations=SAFE_)
        async def read(args: dict[str, Any]) -> dict[str, Any]:
            world.start("read", args["path"])
            await asyncio.sleep(0.01)
            world.end("read", args["path"])
            return text(f"contents of {args['path']}")

        return ClaudeAgentOptions(
            mcp_servers={"t": create_sdk_mcp_server("t", tools=[draft, renumber, issues, read])},
            allowed_tools=[P + n for n in ("rfd_draft", "rfd_renumber", "github_issues", "read")],
            env=fake.env(), setting_sources=[], **kw,
        )


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 90))


async def conversation(messages: Any) -> list[Any]:
    return [m async for m in messages]


def result(messages: list[Any]) -> ResultMessage:
    last = messages[-1]
    assert isinstance(last, ResultMessage), last
    return last


# -- failure paths ------------------------------------------------------------------------------

def test_a_tool_that_raises_fails_only_its_call_and_its_key_moves_on(tmp_path: Any) -> None:
    async def main() -> None:
        world, fake = World(fail=("A",)), FakeAPI([[(P + "rfd_draft", {"title": "A"}, "d1"), (P + "rfd_draft", {"title": "B"}, "d2")]])
        async with Turnstile(policy()) as ts:
            messages = await conversation(ts.query(prompt="go", options=world.options(fake, cwd=tmp_path)))
        fake.close()
        assert result(messages).subtype == "success"
        got = fake.results()
        assert got["d1"][1] and "draft A failed" in got["d1"][0]
        assert got["d2"] == ("2", False)
        assert world.starts("rfd") == ["A", "B"]  # in written order, the second after the first's end
        assert world.peak["rfd"] == 1

    run(main())


def test_a_rejected_call_is_denied_with_the_components_sentence(tmp_path: Any) -> None:
    async def main() -> None:
        world, fake = World(), FakeAPI([TURNS[2]])
        decide = lambda label, call: "reject" if call.id == "g3" else "approve"  # noqa: E731
        async with Turnstile(policy(), decide=decide) as ts:
            messages = await conversation(ts.query(prompt="go", options=world.options(fake, cwd=tmp_path)))
        fake.close()
        assert result(messages).subtype == "success"
        got = fake.results()
        assert got["g3"][1] and "not run: the user rejected this call" in got["g3"][0]
        assert sorted(world.starts("github")) == ["0", "1", "2", "4"]
        assert all(got[f"g{i}"] == (f"issue {i}", False) for i in (0, 1, 2, 4))

    run(main())


def test_a_conversation_given_up_mid_run_frees_its_keys(tmp_path: Any) -> None:
    """The caller stops reading while a call runs and others wait: the CLI is stopped, the
    waiting calls are withdrawn, the running one's slot is freed, and the next conversation on
    the same scheduler gets the key."""

    async def main() -> None:
        async with Turnstile(policy()) as ts:
            world, fake = World(seconds=0.5), FakeAPI([TURNS[0]])
            async with contextlib.aclosing(ts.query(prompt="go", options=world.options(fake, cwd=tmp_path))) as messages:
                async for _ in messages:
                    if world.starts("rfd"):
                        break
            fake.close()
            assert world.starts("rfd") == ["A"]
            await asyncio.sleep(0.1)
            assert ts.gate.expected() == [] and not ts.gate._batches
            world2, fake2 = World(), FakeAPI([[(P + "rfd_draft", {"title": "C"}, "c1")]])
            messages2 = await asyncio.wait_for(conversation(ts.query(prompt="go", options=world2.options(fake2, cwd=tmp_path))), 30)
            fake2.close()
            assert result(messages2).subtype == "success" and world2.starts("rfd") == ["C"]

    run(main())


def test_past_execution_timeout_a_call_keeps_its_slot_until_the_cli_reports_its_end(tmp_path: Any) -> None:
    """The CLI cannot interrupt a tool for the scheduler: the call ran past its timeout, yet
    the next call of its key starts only after its end."""

    async def main() -> None:
        world, fake = World(seconds=0.4), FakeAPI([[(P + "rfd_draft", {"title": "A"}, "d1"), (P + "rfd_draft", {"title": "B"}, "d2")]])
        async with Turnstile(policy(), execution_timeout=0.1) as ts:
            messages = await conversation(ts.query(prompt="go", options=world.options(fake, cwd=tmp_path)))
        fake.close()
        assert result(messages).subtype == "success"
        assert world.starts("rfd") == ["A", "B"] and world.peak["rfd"] == 1
        assert world.events.index(("end", "rfd_draft", "A")) < world.events.index(("start", "rfd_draft", "B"))

    run(main())


# -- the race, and the same run limited ------------------------------------------------------------

def test_without_the_adapter_the_cli_races(tmp_path: Any) -> None:
    async def main() -> None:
        world, fake = World(), FakeAPI(TURNS)
        messages = await conversation(query(prompt="go", options=world.options(fake, cwd=tmp_path)))
        fake.close()
        assert result(messages).subtype == "success"
        # The drafts race for a number whatever the machine's load (both take 2); how many of the
        # five github calls overlap depends on how fast the CLI streams them, so github's peak
        # is not asserted (the JS test failed on it under load in CI run 35).
        assert world.peak["rfd"] == 2, world.peak
        got = fake.results()
        assert got["d1"] == got["d2"] == ("2", False)  # both drafts took number 2

    run(main())


def test_limits_written_order_and_one_batch_per_response_decided_first(tmp_path: Any) -> None:
    async def main() -> None:
        world, fake = World(), FakeAPI(TURNS)
        turn_of = {call_id: t for t, turn in enumerate(TURNS) for _, _, call_id in turn}
        decided: list[tuple[int, str, int]] = []  # (turn, call id, starts so far)

        def decide(label: str, call: Any) -> str:
            decided.append((turn_of[call.id], call.id, sum(1 for e in world.events if e[0] == "start")))
            return "approve"

        async with Turnstile(policy(), decide=decide) as ts:
            messages = await conversation(ts.query(prompt="go", options=world.options(fake, cwd=tmp_path)))
        fake.close()
        assert result(messages).subtype == "success" and result(messages).result == "done"
        assert world.peak["rfd"] <= adapters.LIMITS["rfd"] and world.peak["github"] <= adapters.LIMITS["github"]
        assert world.peak["github"] == 2
        # Per key, in the order the model wrote them: the drafts take 2 and 3, the chain of
        # renumbers moves 2 to 7.
        assert world.starts("rfd") == ["A", "B", "2->5", "5->6", "6->7"]
        assert world.rfds == {1: "existing", 3: "B", 7: "A"}
        assert world.starts("github") == [str(i) for i in range(5)]
        # Every call of a response decided, in written order, before any of it started (the
        # starts seen at each decision are exactly the earlier responses' calls).
        for t, turn in enumerate(TURNS):
            rows = [d for d in decided if d[0] == t]
            assert [d[1] for d in rows] == [c for _, _, c in turn]
            assert {d[2] for d in rows} == {sum(len(x) for x in TURNS[:t])}, rows
        # Results went back to the model.
        got = fake.results()
        assert got["x1"] == ("contents of x", False) and got["g4"] == ("issue 4", False)
        assert (got["d1"][0], got["d2"][0]) == ("2", "3")

    run(main())


def test_a_client_is_scheduled_too(tmp_path: Any) -> None:
    async def main() -> None:
        world, fake = World(), FakeAPI([TURNS[2]])
        async with Turnstile(policy()) as ts:
            async with ts.client(world.options(fake, cwd=tmp_path)) as client:
                await client.query("go")
                messages = [m async for m in client.receive_response()]
        fake.close()
        assert result(messages).subtype == "success" and world.peak["github"] == 2

    run(main())


# -- what the adapter relies on, against the SDK directly -------------------------------------------

class Recorder(Transport):
    def __init__(self, inner: Transport, seen: list[tuple[str, str]]) -> None:
        self.inner, self.seen = inner, seen

    async def connect(self) -> None:
        await self.inner.connect()

    async def write(self, data: str) -> None:
        await self.inner.write(data)

    async def read_messages(self) -> Any:
        async for m in self.inner.read_messages():
            kind = m.get("type")
            if kind == "assistant":
                for b in m["message"]["content"]:
                    if b.get("type") == "tool_use":
                        self.seen.append(("tool_use", b["id"]))
            elif kind == "stream_event" and m["event"].get("type") == "message_stop":
                self.seen.append(("message_stop", ""))
            elif kind == "control_request" and m["request"].get("subtype") == "hook_callback":
                self.seen.append(("hook", m["request"].get("tool_use_id") or ""))
            yield m

    async def close(self) -> None:
        await self.inner.close()

    def is_ready(self) -> bool:
        return self.inner.is_ready()

    async def end_input(self) -> None:
        await self.inner.end_input()


@pytest.mark.parametrize("safe", [True, False])
def test_probe_the_cli_starts_tools_before_the_response_ends_and_streams_on_past_a_held_hook(tmp_path: Any, safe: bool) -> None:
    """The CLI calls a tool's PreToolUse hook as soon as its block is streamed (before the
    response's other blocks): the batch cannot come from the hooks alone. A held hook does not
    stop the stream (message_stop arrives), each tool_use line precedes its hook's request on
    the CLI's output, and a custom transport sees them all in order."""

    async def main() -> None:
        world, fake = World(), FakeAPI([TURNS[0]], gap=0.2)
        seen: list[tuple[str, str]] = []
        held = asyncio.Event()

        async def pre(data: Any, call_id: Optional[str], context: Any) -> dict[str, Any]:
            if call_id == "d1":
                while ("message_stop", "") not in seen:
                    await asyncio.sleep(0.01)
                held.set()
            return {}

        options = world.options(fake, safe=safe, cwd=tmp_path, include_partial_messages=True,
                                hooks={"PreToolUse": [HookMatcher(hooks=[pre])]})
        transport = Recorder(SubprocessCLITransport(prompt="go", options=options), seen)
        messages = await conversation(query(prompt="go", options=options, transport=transport))
        fake.close()
        assert result(messages).subtype == "success" and held.is_set()
        hooks = [x for x in seen if x[0] in ("tool_use", "hook", "message_stop")]
        first_hook = hooks.index(("hook", "d1"))
        stop = hooks.index(("message_stop", ""))
        assert hooks.index(("tool_use", "d1")) < first_hook < hooks.index(("tool_use", "d2")) < stop
        for call_id in ("d1", "x1", "d2"):
            assert hooks.index(("tool_use", call_id)) < hooks.index(("hook", call_id))
        if safe:  # the other calls' hooks come while the first is held
            assert hooks.index(("hook", "x1")) < stop
        else:  # the CLI runs unsafe tools one at a time: the next hook only after the first ends
            assert hooks.index(("hook", "x1")) > stop

    run(main())
