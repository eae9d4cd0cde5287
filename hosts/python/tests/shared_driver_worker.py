"""A process running the `Driver` with a batch on a shared key (`test_driver_shared.py`).

`python shared_driver_worker.py '<json>'`: opens the SQLite store at `path`, waits for
`startAt` (ms, wall clock), then runs ONE batch of `calls` calls of tool `gh` (shared key
`github`, limit `limit`) through a `Driver` with `SharedKeys(store, lease_ms=leaseMs)`. Each
execution appends its start and end (wall clock, ms) to `log` as JSON lines and sleeps
`holdMs`; with `hang`, its first execution sleeps until the process is killed. Prints one JSON
line per event: `ready`, `start` (with the label), `done` (with every entry's status).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any


async def main(args: dict[str, Any]) -> None:
    from turnstile_scheduler import Call, Driver, Policy, Scheduler
    from turnstile_scheduler.shared import SharedKeys, SqliteStore

    name = args["name"]

    def say(event: dict[str, Any]) -> None:
        print(json.dumps({"name": name, **event}), flush=True)

    def record(event: dict[str, Any]) -> None:
        with open(args["log"], "a") as f:
            f.write(json.dumps({"name": name, "pid": os.getpid(), **event}) + "\n")

    policy = Policy.resolve(
        [("test", f'[conversation.tools.gh]\nconcurrency = {{ key = "github", limit = {args["limit"]}, shared = true }}\n')]
    )
    store = await SqliteStore.open(args["path"])
    keys = SharedKeys(store, lease_ms=args["leaseMs"], owner=name)
    calls = [Call(f"{name}-c{i}", "gh") for i in range(args["calls"])]
    hung = False

    async def execute(x: Any) -> str:
        nonlocal hung
        start = int(time.time() * 1000)
        record({"event": "start", "label": x.label, "t": start})
        say({"event": "start", "label": x.label})
        if args.get("hang") and not hung:
            hung = True
            await asyncio.Event().wait()
        await asyncio.sleep(args.get("holdMs", 0) / 1000)
        record({"event": "end", "label": x.label, "t": int(time.time() * 1000)})
        return x.label

    say({"event": "ready"})
    if args.get("startAt"):
        await asyncio.sleep(max(0, args["startAt"] - time.time() * 1000) / 1000)
    async with Driver(Scheduler(policy), owns_scheduler=True, shared_keys=keys) as driver:
        outcomes = await driver.run(calls, execute)
    await keys.close()
    await store.close()
    say({"event": "done", "statuses": [e.status.value for c in outcomes for e in c.entries]})


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
