"""What tracing costs (issue 21): an agent turn traced into the OpenTelemetry
SDK's in-memory exporter, against the same turn untraced, in one process.

Scenario: an ``Agent`` turn of two steps (a tool call, then the answer) on a
scripted model: four spans (``invoke_agent``, two ``chat``, one
``execute_tool``). Measured, interleaved in rounds: **off** (no tracer
provider configured: the API's proxy), **on** (the SDK's ``TracerProvider``
with a ``SimpleSpanProcessor`` into an ``InMemorySpanExporter``, cleared
each round), and the SDK's own cost of an empty span on that provider
(``tracer.start_span("x").end()``), to put ours beside it. Per-turn wall
time: the median over rounds of (elapsed / turns); our cost per span is
(on - off) / 4. Run: ``python benchmarks/telemetry.py`` (``--turns``,
``--rounds``). The cost with tracing off is measured by callgrind on W1
(see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

import trio
from _figures import add_json_option, json_output, record
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from trio_agent import Agent, ToolCall, tool
from trio_agent.testing import ScriptedModel, scripted_response

SPANS_PER_TURN = 4


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script() -> list[object]:
    return [
        scripted_response("r1", [ToolCall("c1", "add", {"a": 1, "b": 2})]),
        scripted_response("r2", "3"),
    ]


async def turns(count: int) -> float:
    agents = [Agent(model=ScriptedModel(script()), tools=[add]) for _ in range(count)]
    start = time.perf_counter()
    for agent in agents:
        await agent.prompt("add")
    return (time.perf_counter() - start) / count


def empty_spans(tracer: trace.Tracer, count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        tracer.start_span("x").end()
    return (time.perf_counter() - start) / count


ATTRIBUTES = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": "gpt-4o-mini",
    "trio_agent.request_id": "request-001",
    "trio_agent.attempt": 1,
    "gen_ai.request.temperature": 0.2,
}


def attributed_spans(tracer: trace.Tracer, count: int) -> float:
    """The SDK's cost of a span like our ``chat`` span: 6 attributes at start, 4 at
    the end (without our context switching)."""
    start = time.perf_counter()
    for _ in range(count):
        span = tracer.start_span("chat gpt-4o-mini", attributes=ATTRIBUTES)
        span.set_attribute("gen_ai.response.id", "r1")
        span.set_attribute("gen_ai.response.finish_reasons", ("stop",))
        span.set_attribute("gen_ai.usage.input_tokens", 10)
        span.set_attribute("gen_ai.usage.output_tokens", 5)
        span.end()
    return (time.perf_counter() - start) / count


def main(count: int, rounds: int) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    off: list[float] = []
    on: list[float] = []
    empty: list[float] = []
    attributed: list[float] = []
    for _ in range(rounds):
        trace._TRACER_PROVIDER = None  # off: the API's proxy provider
        off.append(trio.run(turns, count))
        trace._TRACER_PROVIDER = provider  # on (what set_tracer_provider sets)
        on.append(trio.run(turns, count))
        exporter.clear()
        empty.append(empty_spans(tracer, count * SPANS_PER_TURN))
        exporter.clear()
        attributed.append(attributed_spans(tracer, count * SPANS_PER_TURN))
        exporter.clear()
    off_us = statistics.median(off) * 1e6
    on_us = statistics.median(on) * 1e6
    empty_us = statistics.median(empty) * 1e6
    record(
        off_us=off_us,
        on_us=on_us,
        us_per_span=(on_us - off_us) / SPANS_PER_TURN,
        sdk_empty_span_us=empty_us,
        sdk_attributed_span_us=statistics.median(attributed) * 1e6,
    )
    print(f"turn, tracing off:  {off_us:8.1f} us")
    print(f"turn, tracing on:   {on_us:8.1f} us  ({SPANS_PER_TURN} spans)")
    print(f"ours per span:      {(on_us - off_us) / SPANS_PER_TURN:8.1f} us")
    print(f"SDK's empty span:   {empty_us:8.1f} us")
    print(f"SDK's span with 10 attributes: {statistics.median(attributed) * 1e6:8.1f} us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=9)
    add_json_option(parser)
    args = parser.parse_args()
    with json_output(args.json):
        main(args.turns, args.rounds)
