"""Plots W5, per-request cost against run length for the three frameworks, to
``benchmarks/peers/w5.png``. Run: ``python benchmarks/peers/plot.py`` (needs
``benchmarks/requirements-peers.txt``)."""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from run import FRAMEWORKS, W5_REQUESTS, medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("w5.png"))
    args = parser.parse_args()
    series: dict[str, list[float]] = {name: [] for name in FRAMEWORKS}
    for requests in W5_REQUESTS:
        figures = medians(args.passes, ("us_per_request",), "w5", requests, args.rounds)[0]
        for name, value in figures.items():
            series[name].append(value)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, values in series.items():
        ax.plot(W5_REQUESTS, values, marker="o", label=name)
    ax.set_xlabel("model requests in the run (128: two turns of 64)")
    ax.set_ylabel("time per model request (us, log scale)")
    ax.set_yscale("log")
    ax.set_title("W5: per-request cost against run length (scripted model)")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    for name, values in series.items():
        print(name, " ".join(f"{s}:{v:.1f}" for s, v in zip(W5_REQUESTS, values, strict=True)))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
