"""`python -m turnstile_scheduler simulate`: the component's timeline of batches on a virtual
clock (its `simulate` interface). The CLI only reads the files and flags; the component reads
the case file, runs the scheduler and writes every line and every error, so this CLI, the npm
package's and the Rust harness's print the same for the same input."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Optional, Sequence

from wasmtime.component import Variant

from ._component import Instance


class SimulateError(Exception):
    """Why nothing was simulated: `kind` is the component's (`config`, whose message is every
    diagnostic rendered, `not-a-case`, `usage`, `nothing`, `input`); `exit_status` is 2 for a
    usage mistake (`usage`, `nothing`) and 1 otherwise."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.exit_status = 2 if kind in ("usage", "nothing") else 1


def simulate(
    *,
    file: Optional[tuple[str, str]] = None,
    layers: Sequence[tuple[str, str]] = (),
    calls: Sequence[str] = (),
    durations: Sequence[str] = (),
    fail: Sequence[str] = (),
) -> tuple[list[str], str]:
    """The config's warnings, rendered (print them first), and the timeline; raises
    `SimulateError` when nothing was simulated. The flags' values go through as the user gave
    them (`durations`: `MS` or `LABEL=MS`): the component reads them, so every rule and message
    about them is the same in every Turnstile CLI."""
    layer = lambda nt: SimpleNamespace(name=nt[0], text=nt[1])  # noqa: E731
    wit = SimpleNamespace(
        **{
            "file": None if file is None else layer(file),
            "layers": [layer(l) for l in layers],
            "calls": list(calls),
            "durations": list(durations),
            "fail": list(fail),
        }
    )
    result = Instance().func("simulate", "run")(wit)
    if not isinstance(result, Variant):
        return [d.rendered for d in result.warnings], result.timeline
    tag, val = result.tag, result.payload
    if tag == "config":
        raise SimulateError(tag, "\n".join(d.rendered for d in val))
    raise SimulateError(tag, val)


def simulate_help(program: str) -> str:
    """`PROGRAM simulate --help`, the component's text."""
    return Instance().func("simulate", "help")(program)  # type: ignore[no-any-return]
