"""Runs the peer benchmarks in separate processes, alternating frameworks, and prints
one table of medians and ratios. Needs the peers: ``pip install -r
benchmarks/requirements-peers.txt``. Run: ``python benchmarks/peers/run.py``.

So far: W1 (65 requests, 64 steps each calling add, then a final text).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
SCRIPTS = {
    "trio-agent": "w1_trio_agent.py",
    "pydantic-ai": "w1_pydantic_ai.py",
    "openai-agents": "w1_openai_agents.py",
}


def measure(script: str, rounds: int) -> float:
    done = subprocess.run(
        [sys.executable, str(HERE / script), str(rounds)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])["us_per_step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3, help="processes per framework")
    parser.add_argument("--rounds", type=int, default=10, help="runs per process")
    args = parser.parse_args()
    results: dict[str, list[float]] = {name: [] for name in SCRIPTS}
    for _ in range(args.passes):  # alternating, so drift hits everyone alike
        for name, script in SCRIPTS.items():
            results[name].append(measure(script, args.rounds))
    medians = {name: statistics.median(values) for name, values in results.items()}
    fastest_peer = min(v for k, v in medians.items() if k != "trio-agent")
    print(
        f"W1: per-step time, 65 requests (medians of {args.passes} processes x {args.rounds} runs)"
    )
    for name, value in medians.items():
        note = (
            "" if name == "trio-agent" else f"   {value / medians['trio-agent']:6.1f}x trio-agent"
        )
        print(f"  {name:14} {value:10.1f} us/step{note}")
    print(
        f"  trio-agent is {fastest_peer / medians['trio-agent']:.1f}x faster than the faster "
        f"peer (target: 50x)"
    )


if __name__ == "__main__":
    main()
