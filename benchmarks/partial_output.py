"""What ``PartialOutput`` costs on a 60,000-character answer streamed in 1,000 deltas.

Shapes: one long string field (every delta makes a new value), a list of small
Structs (the half-written last element left out), a wrapped ``list[int]``
(numbers held until they end), and a Struct whose required field comes last
(nothing converts until the end; the object is not converted again until
another of its members starts). Columns: values yielded, total time, time per
delta, and the total over one decode of the whole answer. Baseline,
measured in the same process: one ``msgspec.json.decode(answer, type=T)`` of
the whole answer, what the loop itself does once at the end.
Also at 15,000 deltas (about one token each, as providers stream): what a
delta costs beyond the scan is C over the open containers, so the total grows
with deltas x open size, not with deltas x answer.
Run: ``python benchmarks/partial_output.py [--rounds 7] [--deltas 1000 15000]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgspec
from _figures import FIGURES, add_json_option, json_output, record

from trio_agent.events import ModelChunk
from trio_agent.model import TextDelta
from trio_agent.output._partial import PartialOutput

CHARS = 60_000


class Article(msgspec.Struct):
    title: str
    body: str


class Item(msgspec.Struct):
    name: str
    qty: int
    tags: list[str]


class Basket(msgspec.Struct):
    items: list[Item]


class LateField(msgspec.Struct):
    notes: list[str]
    verdict: str


class Wrapped(msgspec.Struct):
    response: list[int]


def shapes() -> list[tuple[str, Any, Any, bytes]]:
    """(label, output type, the value, its JSON text, wrapped when needed) near CHARS."""
    body = ('Lorem ipsum dolor sit amet, caf\u00e9 "quoted" \\ slash. ' * 2000)[: CHARS - 40]
    article = Article("A title", body)
    items = [Item(f"item {i}", i, ["a", "bc"]) for i in range(1400)]
    basket = Basket(items)
    numbers = list(range(100_000, 100_000 + 8500))
    late = LateField([f"note number {i}" for i in range(3500)], "ok")
    return [
        ("one long string", Article, article, msgspec.json.encode(article)),
        ("list of Structs", Basket, basket, msgspec.json.encode(basket)),
        ("wrapped list[int]", list[int], numbers, msgspec.json.encode(Wrapped(numbers))),
        ("required field last", LateField, late, msgspec.json.encode(late)),
    ]


def events_of(text: str, deltas: int) -> list[ModelChunk]:
    step = -(-len(text) // deltas)
    return [
        ModelChunk(sequence=i, request_id="request-001", chunk=TextDelta(text[at : at + step]))
        for i, at in enumerate(range(0, len(text), step))
    ]


def median_ms(work: Callable[[], Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(label: str, kind: Any, value: Any, encoded: bytes, rounds: int, deltas: int) -> str:
    """One row: the whole stream fed to a fresh ``PartialOutput``, against one decode."""
    text = encoded.decode()
    events = events_of(text, deltas)
    yielded = 0

    def feed_all() -> None:
        nonlocal yielded
        state = PartialOutput(kind)
        yielded = sum(state.advance(event) for event in events)
        assert state.value == value, label

    total = median_ms(feed_all, rounds)
    target = Wrapped if state_wrapped(kind) else kind
    once = median_ms(lambda: msgspec.json.decode(encoded, type=target), rounds * 20)
    row = {"chars": len(text), "deltas": len(events), "values": yielded, "ms": total}
    record(rows=[*FIGURES.get("rows", []), {"shape": label, **row, "decode_ms": once}])
    return (
        f"{label:<22}{len(text):>8}{len(events):>8}{yielded:>8}{total:>10.1f}"
        f"{total * 1000 / len(events):>10.1f}{total / once:>10.0f}"
    )


def state_wrapped(kind: Any) -> bool:
    return PartialOutput(kind).wrapped


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--deltas", type=int, nargs="+", default=[1_000, 15_000], help="deltas per answer"
    )
    add_json_option(parser)
    args = parser.parse_args()
    with json_output(args.json):
        table(args.rounds, args.deltas)


def table(rounds: int, counts: list[int]) -> None:
    """Print one row a shape and a count of deltas."""
    print(
        f"{'shape':<22}{'chars':>8}{'deltas':>8}{'values':>8}{'total ms':>10}"
        f"{'us/delta':>10}{'x decode':>10}"
    )
    for deltas in counts:
        for label, kind, value, encoded in shapes():
            print(measure(label, kind, value, encoded, rounds, deltas))


if __name__ == "__main__":
    main()
