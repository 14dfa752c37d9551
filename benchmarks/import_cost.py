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

from _figures import add_json_option, json_output, record


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
    add_json_option(parser)
    args = parser.parse_args()
    with json_output(args.json):
        measure(args.statement, args.runs)


def measure(statement: str, count: int) -> None:
    """Import ``statement`` in ``count`` fresh interpreters and print the figures."""
    runs = [one_run(statement) for _ in range(count)]
    times = sorted(t for t, _ in runs)
    names = runs[-1][1]
    print(f"{statement!r}, {count} fresh interpreters")
    record(runs=count, modules=len(names), min_ms=times[0], median_ms=statistics.median(times))
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
        record(**{f"loaded_{part}": bool(loaded)})


if __name__ == "__main__":
    main()
