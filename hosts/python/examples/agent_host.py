"""What a Python agent host copies: resolve the config layers once, make a scheduler, and run
each model response's tool calls through `run_batch`; persist `unfinished()` to survive a crash.
`python examples/agent_host.py`."""

import asyncio
import json
import sys

from turnstile import Call, ConfigError, Policy, SavedState, Scheduler, Started, run_batch

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
    print(f"start {x.label} ({x.call.tool}{op})")
    await asyncio.sleep(0.02)
    print(f"end   {x.label}")
    return {"ok": True}


async def main() -> None:
    try:
        policy = Policy.resolve(LAYERS)
    except ConfigError as e:
        print(e, file=sys.stderr)  # rustc-style, with the lines; e.diagnostics has the spans
        sys.exit(1)
    scheduler = Scheduler(policy)
    # The tool calls of each model response, in the order the model wrote them. Call ids may
    # repeat across responses once the earlier batch is done.
    responses = [
        [
            Call("toolu_01", "rfd_renumber"),
            Call("toolu_02", "rfd_renumber"),
            Call("toolu_03", "fs_read_file", operations=2),
            Call("toolu_04", "rfd_draft"),
        ],
        [Call("toolu_01", "rfd_draft")],
    ]
    for calls in responses:
        for call in await run_batch(scheduler, calls, execute):
            print(call.id, call.tool, ",".join(e.status.value for e in call.entries))

    # On a restart: store this JSON (after every step, or on shutdown), then resume from it.
    # Nothing is live here, so it is empty; an execution that had started when the state was
    # saved is settled as interrupted rather than run twice.
    saved = json.dumps(scheduler.unfinished().to_dict())
    scheduler, unrestored = Scheduler.resume(policy, SavedState.from_dict(json.loads(saved)), started=Started.INTERRUPT)
    print("resumed;", len(unrestored), "calls left out")


if __name__ == "__main__":
    asyncio.run(main())
