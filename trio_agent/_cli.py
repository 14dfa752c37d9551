"""The ``trio-agent`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import trio


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``trio-agent`` and ``python -m trio_agent``."""
    parser = argparse.ArgumentParser(prog="trio-agent", description="LLM agent loops on trio.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run an offline multi-step demo on a scripted model")
    demo.add_argument("--json", action="store_true", help="print events as JSON lines")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        def out(line: str) -> None:
            print(line, flush=True)

        try:
            return trio.run(lambda: run_demo(out, as_json=args.json))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover
    return 2


if __name__ == "__main__":
    sys.exit(main())
