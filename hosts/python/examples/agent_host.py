"""What a Python agent host copies: resolve the config layers once, give each conversation a
driver over its own scheduler, run each model response's tool calls through `driver.run`, gate
requests on a shared MCP connection with `admission.slot`, and persist `unfinished()` to survive
a crash (`persist` saves the driver's snapshot; `Driver.resume` runs the restored calls next to
new ones).
It ships inside the package: `python -m turnstile_scheduler.examples.agent_host` runs the installed
copy (`turnstile_scheduler/examples/agent_host.py` in site-packages); in the repository,
`python examples/agent_host.py`."""

import asyncio
import sys

from turnstile_scheduler import (
    Admission,
    Call,
    ConfigError,
    Driver,
    Layer,
    Policy,
    Scheduler,
    Started,
)

LAYERS = [
    Layer("plugin: rfd-tools", """
[conversation.tools.rfd_draft]
concurrency = { key = "rfd" }
[conversation.tools.rfd_renumber]
concurrency = { key = "rfd" }
# A key from the call's arguments: one write at a time per file, different files together.
[conversation.tools.fs_write]
concurrency = { key = "fs:{path}" }
"""),
    # A layer can be plain data of the same shape as the TOML.
    Layer("user", {"conversation": {"tools": {"fs_read_file": {"fan_out": True}}}}),
]

# One admission controller per shared MCP connection: one tool call at a time, four requests.
connection = Admission(max_concurrent=4)


async def execute(x) -> dict:
    """Your tool runner: return the result, raise on failure; cancellation arrives as
    asyncio.CancelledError (honour it: an execution that ignores it keeps its key's slot)."""
    async with connection.slot("call", id=x.label, timeout=30):
        op = "" if x.operation is None else f" op {x.operation}"
        print(f"start {x.label} ({x.call.tool}{op} {x.call.arguments or ''})")
        await asyncio.sleep(0.02)
        print(f"end   {x.label}")
        return {"ok": True}


async def decide(label: str, call: Call) -> str:
    """Your permission prompt: "approve", "reject", "skip" or "fail"."""
    return "approve"


async def main() -> None:
    try:
        policy = Policy.resolve(LAYERS)
    except ConfigError as e:
        print(e, file=sys.stderr)  # rustc-style, with the lines; e.diagnostics has the spans
        sys.exit(1)
    # The tool calls of each model response, in the order the model wrote them. Call ids may
    # repeat across responses once the earlier batch is done.
    responses = [
        [
            Call("toolu_01", "rfd_renumber"),
            Call("toolu_02", "rfd_renumber"),
            Call("toolu_03", "fs_read_file", operations=2),
            Call("toolu_04", "rfd_draft"),
            # The model's arguments: a dict, or the JSON text as it wrote it.
            Call("toolu_05", "fs_write", arguments={"path": "a.txt", "content": "one"}),
            Call("toolu_06", "fs_write", arguments='{"path": "b.txt", "content": "two"}'),
            Call("toolu_07", "fs_write", arguments={"path": "a.txt", "content": "three"}),
        ],
        [Call("toolu_01", "rfd_draft")],
    ]
    # The driver saves its snapshot where the host says (a file, a row), at the points that make
    # a crash safe: an ended call is in it before its outcome reaches the host.
    saved: list[str] = []
    with Driver(Scheduler(policy), persist=saved.append) as driver:
        for calls in responses:
            outcomes = await driver.run(calls, execute, decide=decide, execution_timeout=600)
            for call in outcomes:
                # A settled entry's `message` is what the model should read ("not run: ...").
                print(call.id, call.tool, ",".join(e.message or e.status.value for e in call.entries))
            driver.forget(outcomes)  # the host kept them: the snapshot may drop them

    # On a restart: resume the last snapshot. Nothing is live here, so nothing comes back; an
    # execution that had started is settled as interrupted rather than run twice.
    resumed = Driver.resume(policy, saved[-1], execute=execute, started=Started.INTERRUPT, persist=saved.append)
    with resumed.driver:
        outcomes = await asyncio.gather(*resumed.batches)
        print("resumed;", len(outcomes), "batches restored,", len(resumed.unrestored), "calls left out")
    connection.close()


if __name__ == "__main__":
    asyncio.run(main())
