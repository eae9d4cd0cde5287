"""What the framework adapters' tests share (test_pydantic_ai.py, test_openai_agents.py,
test_langchain.py; test_gate.py takes CONFIG and `policy`): the policy of the RFD tools, and a
`World` that records every tool's start and end and the peak in flight per key. Each test module
subclasses `World` with its framework's tools and writes `TURNS` (the same three responses) in
its framework's own tool-call type."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from turnstile_scheduler import Policy

CONFIG = """
[conversation.tools.rfd_draft]
concurrency = { key = "rfd" }
[conversation.tools.rfd_renumber]
concurrency = { key = "rfd" }
[conversation.tools.github_issues]
concurrency = { key = "github", limit = 2 }
"""
LIMITS = {"rfd": 1, "github": 2}
KEY = {"rfd_draft": "rfd", "rfd_renumber": "rfd", "github_issues": "github", "read": "read"}

# Three model turns, each one response with several tool calls (tool, arguments, call id), then
# the answer: two drafts that race for a number, a renumber chain, more issues than github's limit.
TURNS: list[list[tuple[str, dict[str, Any], str]]] = [
    [("rfd_draft", {"title": "A"}, "d1"), ("read", {"path": "x"}, "x1"), ("rfd_draft", {"title": "B"}, "d2")],
    [("rfd_renumber", {"old": 2, "new": 5}, "r1"), ("rfd_renumber", {"old": 5, "new": 6}, "r2"),
     ("rfd_renumber", {"old": 6, "new": 7}, "r3")],
    [("github_issues", {"n": i}, f"g{i}") for i in range(5)],
]


def policy() -> Policy:
    return Policy.resolve([("test", CONFIG)])


class World:
    """The tools' shared state, and a record of every start and end (a lock keeps the record
    whole when sync tools run in worker threads)."""

    def __init__(self) -> None:
        self.rfds: dict[int, str] = {1: "existing"}
        self.events: list[tuple[str, str, str]] = []  # (start|end, tool, call label)
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.lock = threading.Lock()

    def start(self, tool: str, label: str) -> None:
        with self.lock:
            key = KEY[tool]
            self.events.append(("start", tool, label))
            self.running[key] = self.running.get(key, 0) + 1
            self.peak[key] = max(self.peak.get(key, 0), self.running[key])

    def stop(self, tool: str) -> None:
        """`tool` no longer runs (its end is recorded by `end`, or by the tool itself)."""
        with self.lock:
            self.running[KEY[tool]] -= 1

    def end(self, tool: str, label: str) -> None:
        with self.lock:
            self.running[KEY[tool]] -= 1
            self.events.append(("end", tool, label))

    async def recorded(self, tool: str, label: str, seconds: float) -> None:
        """A start, `seconds` of work, and no longer running (the tool then records its end)."""
        self.start(tool, label)
        try:
            await asyncio.sleep(seconds)
        finally:
            self.stop(tool)

    async def draft(self, title: str) -> int:
        """The async `rfd_draft`: allocates the next RFD number (read, think, write: racy by
        nature)."""
        number = max(self.rfds) + 1
        await self.recorded("rfd_draft", title, 0.02)
        self.rfds[number] = title
        self.events.append(("end", "rfd_draft", title))
        return number

    def starts(self, key: str) -> list[str]:
        return [label for kind, tool, label in self.events if kind == "start" and KEY[tool] == key]
