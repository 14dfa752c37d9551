"""What importing trio-agent costs: the time our own modules take to import (their
"self" times under ``python -X importtime``, summed) and how many load, for a
statement (``from trio_agent import Agent, tool`` by default), in fresh
interpreters.

Run: ``python benchmarks/import_cost.py`` (``--runs 15``, ``--statement "..."``).
Without cached bytecode (``PYTHONDONTWRITEBYTECODE=1``, as on the project's
machine) each module is compiled too, which is most of the cost.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys


def one_run(statement: str) -> tuple[float, list[str]]:
    """Milliseconds our modules took, and their names, in one fresh interpreter."""
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    total = 0
    names = set()
    for line in err.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        own, _, name = line.split("|")
        name = name.strip()
        if name.startswith("trio_agent"):
            total += int(own.split(":")[1])
            names.add(name)
    return total / 1000, sorted(names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--statement", default="from trio_agent import Agent, tool")
    args = parser.parse_args()
    runs = [one_run(args.statement) for _ in range(args.runs)]
    times = sorted(t for t, _ in runs)
    names = runs[-1][1]
    print(f"{args.statement!r}, {args.runs} fresh interpreters")
    print(
        f"  our modules: {len(names)}, their own import time: min {times[0]:.1f} ms, "
        f"median {statistics.median(times):.1f} ms"
    )
    for part in (
        "stores.postgres",
        "stores._sqlite",
        "ledger._derive",
        "providers",
        "telemetry._observe",
    ):
        loaded = [n for n in names if f"trio_agent.{part}" in n]
        print(f"  trio_agent.{part}*: {'loaded' if loaded else 'not loaded'}")


if __name__ == "__main__":
    main()
