"""What a tool call costs by the types of its parameters (issue 35 item 3): a
pydantic model parameter beside a msgspec Struct one, and the standard
library's types through msgspec's hooks.

Scenario: ``execute_tool_call`` of one call, its arguments an order of three
items (as a model would send them, plain JSON), to a tool that returns the
number of items. Measured, interleaved in rounds:

- **plain**: ``add(left: int, right: int)``, W1's tool (the floor);
- **struct**: ``place(order: Order)``, ``Order`` a msgspec Struct;
- **pydantic**: the same with ``Order`` a pydantic model (msgspec checks the
  arguments object, pydantic validates the parameter);
- **stdlib**: ``plan(where: Path, when: datetime, cost: Decimal, ref: UUID)``.

Also the typed answer: ``OutputSpec.from_arguments`` of the same order as a
Struct and as a pydantic model, and a refused one (the error with its path).
Per-call wall time: the median over rounds of (elapsed / calls).
Run: ``python benchmarks/tool_types.py`` (``--calls``, ``--rounds``);
``--only KIND`` runs one kind once (for callgrind: the instructions of a call
are the difference of two runs with different ``--calls``, divided).
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import pathlib
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import pydantic
import trio
from _figures import add_json_option, json_output, record

from trio_agent import ToolCall, ToolRegistry, execute_tool_call, tool
from trio_agent.output._spec import OutputInvalid, output_spec


class ItemStruct(msgspec.Struct):
    name: str
    qty: int


class OrderStruct(msgspec.Struct):
    items: list[ItemStruct]
    note: str | None = None


class ItemModel(pydantic.BaseModel):
    name: str
    qty: int


class OrderModel(pydantic.BaseModel):
    items: list[ItemModel]
    note: str | None = None


@tool
async def add(left: int, right: int) -> int:
    """Adds."""
    return left + right


@tool
async def place_struct(order: OrderStruct) -> int:
    """Places."""
    return len(order.items)


@tool
async def place_model(order: OrderModel) -> int:
    """Places."""
    return len(order.items)


@tool
async def plan(
    where: pathlib.Path, when: datetime.datetime, cost: decimal.Decimal, ref: uuid.UUID
) -> int:
    """Plans."""
    return 1


ORDER = {"items": [{"name": f"item {i}", "qty": i + 1} for i in range(3)], "note": "soon"}
CALLS = {
    "plain": ToolCall("c1", "add", {"left": 1, "right": 2}),
    "struct": ToolCall("c1", "place_struct", {"order": ORDER}),
    "pydantic": ToolCall("c1", "place_model", {"order": ORDER}),
    "stdlib": ToolCall(
        "c1",
        "plan",
        {
            "where": "/srv/report.txt",
            "when": "2026-03-01T10:30:00Z",
            "cost": "12.50",
            "ref": "12345678-1234-5678-1234-567812345678",
        },
    ),
}
REGISTRY = ToolRegistry([add, place_struct, place_model, plan])


async def _per_call(kind: str, calls: int) -> float:
    call = CALLS[kind]
    start = time.perf_counter()
    for _ in range(calls):
        result = await execute_tool_call(REGISTRY, call)
    elapsed = time.perf_counter() - start
    assert not result.is_error, result
    return elapsed / calls


def _output_cases() -> dict[str, Callable[[], Any]]:
    struct, model = output_spec(OrderStruct), output_spec(OrderModel)
    assert struct is not None and model is not None
    bad = {"items": [{"name": "a", "qty": "x"}]}

    def refused(spec: Any) -> Callable[[], Any]:
        def attempt() -> Any:
            try:
                spec.from_arguments(bad)
            except OutputInvalid as exc:
                return str(exc)
            raise AssertionError("accepted")

        return attempt

    return {
        "output struct": lambda: struct.from_arguments(ORDER),
        "output pydantic": lambda: model.from_arguments(ORDER),
        "refused struct": refused(struct),
        "refused pydantic": refused(model),
    }


def _per_output(case: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        case()
    return (time.perf_counter() - start) / calls


def main(calls: int, rounds: int) -> None:
    figures: dict[str, list[float]] = {kind: [] for kind in CALLS}
    outputs = _output_cases()
    figures.update({name: [] for name in outputs})
    for _ in range(rounds):
        for kind in CALLS:
            figures[kind].append(trio.run(_per_call, kind, calls))
        for name, case in outputs.items():
            figures[name].append(_per_output(case, calls))
    struct = statistics.median(figures["struct"])
    print(f"per call, median of {rounds} rounds of {calls} calls:")
    for kind, values in figures.items():
        median = statistics.median(values)
        extra = f"   ({median / struct:.2f}x struct)" if kind in ("pydantic", "plain") else ""
        print(f"  {kind:17} {median * 1e6:7.2f} us{extra}")
        record(**{kind.replace(" ", "_") + "_us": median * 1e6})


def only(kind: str, calls: int) -> None:
    if kind in CALLS:
        trio.run(_per_call, kind, calls)
    else:
        _per_output(_output_cases()[kind], calls)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", choices=[*CALLS, *_output_cases()])
    add_json_option(parser)
    options = parser.parse_args()
    if options.only:
        only(options.only, options.calls)
    else:
        with json_output(options.json):
            main(options.calls, options.rounds)
