"""Runs the peer benchmarks in separate processes, alternating frameworks, and prints
medians and ratios. Needs the peers: ``pip install -r benchmarks/requirements-peers.txt``.
Run: ``python benchmarks/peers/run.py`` (``--quick`` for a smoke run).

- W1: one run of 64 model requests, 63 tool steps then a final text (one turn:
  trio-agent's step budget is at most 64 a turn); time per request.
- W5: runs of 8, 32, 64 and 128 requests; does the per-request cost grow with the
  history? 128 requests are two turns of 64 on one conversation, for every
  framework (the second turn carries the first's history).
- W3: 1000 concurrent runs of 4 tool steps and a final text (5 requests); wall
  time and peak-RSS growth per run (and 10,000 on trio-agent alone).
- W2: W1 with every event consumed, each text in 10 deltas; events per second,
  against a bare trio memory channel carrying as many objects.
- W4: a run whose tool sleeps 10 s, cancelled after 50 ms: time until control
  returns and the history each framework keeps.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
W5_REQUESTS = (8, 32, 64, 128)
FRAMEWORKS = {
    "trio-agent": "trio_agent_peer.py",
    "pydantic-ai": "pydantic_ai_peer.py",
    "openai-agents": "openai_agents_peer.py",
}


def measure(framework: str, *workload: object) -> dict:
    """One fresh process running one workload; its JSON figures."""
    done = subprocess.run(
        [sys.executable, str(HERE / FRAMEWORKS[framework]), *map(str, workload)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def medians(passes: int, keys: tuple[str, ...], *workload: object) -> list[dict[str, float]]:
    """Per key, the median over ``passes`` processes per framework, alternating."""
    values = {key: {name: [] for name in FRAMEWORKS} for key in keys}
    for _ in range(passes):  # alternating, so drift hits everyone alike
        for name in FRAMEWORKS:
            figures = measure(name, *workload)
            for key in keys:
                values[key][name].append(figures[key])
    return [{name: statistics.median(v) for name, v in values[key].items()} for key in keys]


def ratio_line(figures: dict[str, float], unit: str, target: float | None = None) -> None:
    ours = figures["trio-agent"]
    for name, value in figures.items():
        note = "" if name == "trio-agent" else f"   {value / ours:6.1f}x trio-agent"
        print(f"  {name:14} {value:10.1f} {unit}{note}")
    best_peer = min(v for k, v in figures.items() if k != "trio-agent")
    goal = f" (target: {target:g}x)" if target else ""
    print(f"  trio-agent is {best_peer / ours:.1f}x better than the better peer{goal}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3, help="processes per framework")
    parser.add_argument("--rounds", type=int, default=10, help="runs per process")
    parser.add_argument("--quick", action="store_true", help="one pass, two rounds, 100 runs")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the figures as one JSON object on stdout (the text goes to stderr)",
    )
    args = parser.parse_args()
    if not args.json:
        workloads(args)
        return
    with contextlib.redirect_stdout(sys.stderr):
        figures = workloads(args)
    print(json.dumps(figures), flush=True)


def workloads(args: argparse.Namespace) -> dict[str, object]:
    """Run W1, W5, W3, W2 and W4, printing each; their figures, for ``--json``."""
    passes, rounds, runs = (1, 2, 100) if args.quick else (args.passes, args.rounds, 1000)
    figures: dict[str, object] = {"passes": passes, "rounds": rounds, "w3_runs": runs}

    print(
        f"W1: time per request, 64 requests = 63 tool steps + a final text "
        f"(medians of {passes} processes x {rounds} runs)"
    )
    w1 = medians(passes, ("us_per_request",), "w1", 64, rounds)[0]
    figures["w1_us_per_request"] = w1
    ratio_line(w1, "us/req", target=50)

    print("W5: time per request against run length (128: two turns of 64)")
    for requests in W5_REQUESTS:
        print(f" {requests} requests")
        w5 = medians(passes, ("us_per_request",), "w5", requests, rounds)[0]
        figures[f"w5_{requests}_us_per_request"] = w5
        ratio_line(w5, "us/req")

    print(f"W3: {runs} concurrent runs of 4 tool steps + a final text")
    walls, memory = medians(passes, ("seconds", "kb_per_run"), "w3", runs)
    figures |= {"w3_seconds": walls, "w3_kb_per_run": memory}
    ratio_line({k: v * 1000 for k, v in walls.items()}, "ms wall")
    ratio_line(memory, "KB peak RSS per run")

    many = measure("trio-agent", "w3", runs * 10)
    figures["w3_alone"] = many
    print(
        f"  trio-agent alone, {runs * 10} runs: {many['seconds'] * 1000:.0f} ms wall, "
        f"{many['kb_per_run']:.1f} KB per run (target: 10 KB)"
    )

    print("W2: events per second seen by the consumer, 10 deltas per text")
    rates, counts = medians(passes, ("events_per_s", "events"), "w2", rounds)
    bare = measure("trio-agent", "floor", int(counts["trio-agent"]), rounds)["events_per_s"]
    figures |= {"w2_events_per_s": rates, "w2_events": counts, "w2_floor_events_per_s": bare}
    for name, rate in rates.items():
        note = f" ({counts[name]:.0f} events per run)"
        if name != "trio-agent":
            note += f"   trio-agent {rates['trio-agent'] / rate:.1f}x"
        print(f"  {name:14} {rate:10,.0f} events/s{note}")
    best_peer = max(v for k, v in rates.items() if k != "trio-agent")
    print(
        f"  trio-agent is {rates['trio-agent'] / best_peer:.1f}x the faster peer (target: 20x); "
        f"bare-channel floor {bare:,.0f} events/s, trio-agent {rates['trio-agent'] / bare:.2f} "
        "of it (target: 0.5)"
    )
    print("W4: a 10 s tool cancelled at 50 ms; time until control returns, history kept")
    for name in FRAMEWORKS:
        w4 = measure(name, "w4")
        figures[f"w4_{name}"] = w4
        print(f"  {name:14} {w4['seconds_to_return'] * 1000:6.1f} ms  {w4['history']}")
    return figures


if __name__ == "__main__":
    main()
