"""What typed output costs per run (issue 18: at most 5 us over a text run for a
small Struct).

Scenario: a one-step run whose scripted model answers with the JSON of a small
Struct (three fields) as text, in 4 chunks. Measured, interleaved in rounds:
- **text**: no ``output_type`` (the answer is just text);
- **native**: ``output_type=Small, output_mode="native"``: the same text is
  decoded and checked (this is the output validation);
- **tool**: ``output_type=Small`` in tool mode: the answer is a ``final_result``
  call instead, so the run also has a tool call, its events and its result
  message (a different run, shown for what it is, not the validation alone).

Per-run wall time: the median over rounds of (elapsed / runs). Run:
``python benchmarks/output.py`` (``--runs``, ``--rounds``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import msgspec
import trio
from _figures import add_json_option, json_output, record

from trio_agent import OUTPUT_TOOL_NAME, ToolCall, ToolRegistry, UserMessage, run_agent_loop
from trio_agent.testing import ScriptedModel, scripted_response


class Small(msgspec.Struct):
    name: str
    age: int
    tags: list[str]


VALUE = Small("Ann", 33, ["a", "b"])
TEXT = msgspec.json.encode(VALUE).decode()


def _script(kind: str) -> list[Any]:
    if kind == "tool":
        call = ToolCall("c1", OUTPUT_TOOL_NAME, msgspec.to_builtins(VALUE))
        return [scripted_response("r1", [call])]
    return [scripted_response("r1", TEXT, text_chunks=4)]


def _run(kind: str) -> Any:
    options: dict[str, Any] = {}
    if kind != "text":
        options = {"output_type": Small, "output_mode": "native" if kind == "native" else "tool"}
    return run_agent_loop(
        messages=[UserMessage("u1", "who?")],
        model=ScriptedModel(_script(kind), chunk_checkpoints=False, record_requests=False),
        tools=ToolRegistry(),
        max_steps=2,
        **options,
    )


async def _per_run(kind: str, runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        result = await _run(kind).wait()
    elapsed = time.perf_counter() - start
    assert result.status == "completed" and (kind == "text" or result.output == VALUE), result
    return elapsed / runs


def main(runs: int, rounds: int) -> None:
    figures: dict[str, list[float]] = {"text": [], "native": [], "tool": []}
    for _ in range(rounds):
        for kind in figures:
            figures[kind].append(trio.run(_per_run, kind, runs))
    text = statistics.median(figures["text"])
    print(f"per run, median of {rounds} rounds of {runs} runs:")
    for kind, values in figures.items():
        median = statistics.median(values)
        extra = "" if kind == "text" else f"   (+{(median - text) * 1e6:.1f} us over text)"
        print(f"  {kind:6} {median * 1e6:8.1f} us{extra}")
    over = (statistics.median(figures["native"]) - text) * 1e6
    record(
        runs=runs,
        rounds=rounds,
        **{f"{kind}_us": statistics.median(values) * 1e6 for kind, values in figures.items()},
        native_over_text_us=over,
    )
    print(f"output validation (native - text): {over:.1f} us (target <= 5 us)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    add_json_option(parser)
    options = parser.parse_args()
    with json_output(options.json):
        main(options.runs, options.rounds)
