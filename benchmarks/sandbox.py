"""What the run tool's sandbox costs: the time to run ``true`` through
``Workspace.run`` without a sandbox and inside bubblewrap, interleaved rounds.

Run: ``python benchmarks/sandbox.py`` (needs ``bwrap`` on PATH). Each round
runs ``true`` ``RUNS`` times in each mode; the figures are medians of the
rounds, per command: the whole tool call (process start, the output drained,
the process group ended and reaped; in the sandbox also the namespaces, the
binds, ``prlimit`` and a pids cgroup made and removed).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import trio
from _figures import add_json_option, json_output, record

from trio_agent.workspace import Workspace

RUNS = 50


async def per_command(workspace: Workspace) -> float:
    start = time.perf_counter()
    for _ in range(RUNS):
        result = await workspace.run("true")
        assert result.startswith("[exit code 0]"), result
    return (time.perf_counter() - start) / RUNS


async def main(rounds: int) -> None:
    root = tempfile.mkdtemp(prefix="trio-agent-sandbox-bench-")
    plain = Workspace(root, sandbox="none")
    boxed = Workspace(root, sandbox="bwrap")
    await per_command(plain)  # warm up both
    await per_command(boxed)
    none, bwrap = [], []
    for _ in range(rounds):
        none.append(await per_command(plain))
        bwrap.append(await per_command(boxed))
    a, b = statistics.median(none), statistics.median(bwrap)
    record(none_ms=a * 1000, bwrap_ms=b * 1000, added_ms=(b - a) * 1000, ratio=b / a)
    print(f"run('true'), {RUNS} commands a round, medians of {rounds} rounds")
    print(f"  sandbox=none : {a * 1000:6.2f} ms per command")
    print(
        f"  sandbox=bwrap: {b * 1000:6.2f} ms per command (+{(b - a) * 1000:.2f} ms, {b / a:.2f}x)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    add_json_option(parser)
    args = parser.parse_args()
    with json_output(args.json):
        trio.run(main, args.rounds)
