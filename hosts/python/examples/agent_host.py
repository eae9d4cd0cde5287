"""What a Python agent host copies: resolve the config layers once, make a scheduler, and run
each model response's tool calls through `run_batch`. `python examples/agent_host.py`."""

import asyncio
import sys

from turnstile import Call, ConfigError, Policy, Scheduler, run_batch

LAYERS = [
    ("plugin: jp-rfd", """
[conversation.tools.rfd_draft]
concurrency = { key = "rfd" }
[conversation.tools.rfd_renumber]
concurrency = { key = "rfd" }
"""),
    ("user", "[conversation.tools.fs_read_file]\nfan_out = true\n"),
]


async def execute(x) -> dict:
    """Your tool runner: return the result, raise on failure; cancellation arrives as
    asyncio.CancelledError."""
    op = "" if x.operation is None else f" op {x.operation}"
    print(f"start {x.entry} ({x.call.tool}{op})")
    await asyncio.sleep(0.02)
    print(f"end   {x.entry}")
    return {"ok": True}


async def main() -> None:
    try:
        policy = Policy.resolve(LAYERS)
    except ConfigError as e:
        print(e, file=sys.stderr)  # rustc-style, with the lines; e.diagnostics has the spans
        sys.exit(1)
    scheduler = Scheduler(policy)
    # The tool calls of one model response, in the order the model wrote them.
    calls = [
        Call("toolu_01", "rfd_renumber"),
        Call("toolu_02", "rfd_renumber"),
        Call("toolu_03", "fs_read_file", operations=2),
        Call("toolu_04", "rfd_draft"),
    ]
    for call in await run_batch(scheduler, calls, execute):
        print(call.id, call.tool, ",".join(e.status for e in call.entries))


if __name__ == "__main__":
    asyncio.run(main())
