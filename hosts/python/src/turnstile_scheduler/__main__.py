"""`python -m turnstile_scheduler check [--deny-warnings] FILE...`: resolves TOML layers (lowest
precedence first) and renders every config diagnostic like rustc. Exit 0 when the layers resolve
(the resolved tools are listed, after any warnings), 1 on diagnostics (or on warnings with
`--deny-warnings`), 2 on a usage error or an unreadable file.

`python -m turnstile_scheduler simulate [FILE] [options]`: the component's timeline of batches
on a virtual clock, with the flags of every Turnstile CLI (`simulate --help`)."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from ._simulate import SimulateError, simulate, simulate_help
from .config import Policy
from .errors import ConfigError

PROG = "python -m turnstile_scheduler"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Turnstile's tool-call scheduler: check config layers, or simulate batches.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="resolve TOML layers and render every diagnostic",
        description="Resolves TOML layers, lowest precedence first (program defaults, plugins, workspace, "
        "user), and renders every diagnostic like rustc. A name a small edit away from one Turnstile reads "
        "(concurency, fanout) is a warning. Exit status: 0 resolved, 1 diagnostics (or warnings with "
        "--deny-warnings), 2 usage or unreadable file.",
    )
    check.add_argument("--deny-warnings", action="store_true", help="a warning fails the check")
    check.add_argument("files", nargs="+", metavar="FILE", help="a TOML layer")
    # `simulate --help` is the component's text (the same in every Turnstile CLI).
    sim = commands.add_parser(
        "simulate",
        help="print the timeline of batches on a virtual clock (`simulate --help`)",
        add_help=False,
        allow_abbrev=False,
    )
    sim.add_argument("-h", "--help", action="store_true")
    sim.add_argument("file", nargs="?", metavar="FILE")
    sim.add_argument("--layer", action="append", default=[], metavar="LAYER.toml")
    sim.add_argument("--calls", action="append", default=[], metavar="CALLS")
    sim.add_argument("--duration", action="append", default=[], metavar="MS|LABEL=MS")
    sim.add_argument("--fail", action="append", default=[], metavar="LABEL")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "simulate":
        return _simulate(args)
    layers = []
    for path in args.files:
        try:
            with open(path, encoding="utf-8") as f:
                layers.append((path, f.read()))
        except (OSError, UnicodeDecodeError) as e:
            print(f"error: {path}: {e}", file=sys.stderr)
            return 2
    try:
        policy = Policy.resolve(layers)
    except ConfigError as e:
        for d in e.diagnostics:
            print(d.rendered, file=sys.stderr)
        n = len(e.diagnostics)
        print(f"{n} error{'s' if n != 1 else ''} in {len(layers)} layer{'s' if len(layers) != 1 else ''}", file=sys.stderr)
        return 1
    warnings = policy.warnings()
    for d in warnings:
        print(d.rendered, file=sys.stderr)
    if warnings:
        n = len(warnings)
        print(f"{n} warning{'s' if n != 1 else ''}", file=sys.stderr)
    for t in policy.tools():
        if not t.concurrency:
            limit = "unbounded"
        elif len(t.concurrency) == 1 and t.concurrency[0].path is not None:
            limit = f"key {t.concurrency[0].key!r} path {t.concurrency[0].path}"
        elif len(t.concurrency) == 1:
            limit = f"key {t.concurrency[0].key!r}, limit {t.concurrency[0].limit}"
        else:  # a key set: every member, in written order
            limit = "keys " + " + ".join(
                f"{c.key} path {c.path}" if c.path is not None else f"{c.key} (limit {c.limit})"
                for c in t.concurrency
            )
        extra = (", fan-out" if t.fan_out else "") + (", stop on error" if t.on_error.value == "stop" else "")
        print(f"{t.name}: {limit}{extra}")
    policy.close()
    return 1 if warnings and args.deny_warnings else 0


def _simulate(args: argparse.Namespace) -> int:
    if args.help:
        sys.stdout.write(simulate_help(PROG))
        return 0
    try:
        file = None if args.file is None else (args.file, _read(args.file))
        layers = [(path, _read(path)) for path in args.layer]
    except (OSError, UnicodeDecodeError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    try:
        warnings, timeline = simulate(
            file=file, layers=layers, calls=args.calls, durations=args.duration, fail=args.fail
        )
    except SimulateError as e:
        print(str(e) if e.kind == "config" else f"{PROG}: {e}", file=sys.stderr)
        if e.exit_status == 2:
            print(f"(`{PROG} simulate --help` says more)", file=sys.stderr)
        return e.exit_status
    for warning in warnings:
        print(warning, file=sys.stderr)
    sys.stdout.write(timeline)
    return 0


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


if __name__ == "__main__":
    sys.exit(main())
