"""`python -m turnstile_scheduler check [--deny-warnings] FILE...`: resolves TOML layers (lowest
precedence first) and renders every config diagnostic like rustc. Exit 0 when the layers resolve
(the resolved tools are listed, after any warnings), 1 on diagnostics (or on warnings with
`--deny-warnings`), 2 on a usage error or an unreadable file."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .config import Policy
from .errors import ConfigError


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m turnstile_scheduler",
        description="Turnstile's tool-call scheduler: check config layers.",
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
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
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


if __name__ == "__main__":
    sys.exit(main())
