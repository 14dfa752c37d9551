"""What a 5 MB image costs on its way through a run: the transcript checks, a
step of the loop, each adapter encoding the request, and a ledger record, in
time and in copies of the image (peak traced memory over its size), against
the same work on a text-only request in the same run.
Run: ``python benchmarks/media.py [--mb 5] [--rounds 20]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgspec
import trio
from _figures import add_json_option, json_output, record

from trio_agent import (
    ImageBlock,
    ModelRequest,
    TextBlock,
    ToolRegistry,
    UserMessage,
    run_agent_loop,
    validate_transcript,
)
from trio_agent.ledger import MessageRecord, encode_records
from trio_agent.providers import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel
from trio_agent.testing import ScriptedModel, scripted_response


def best_ms(work: Callable[[], Any], rounds: int) -> float:
    """The median of ``rounds`` timings of ``work``, in ms."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def copies(work: Callable[[], Any], size: int) -> float:
    """Peak memory ``work`` allocates, in sizes of the image (a base64 form is 1.33)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    result = work()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return (peak - base) / size


def run_once(message: UserMessage) -> None:
    async def main() -> None:
        run = run_agent_loop(
            messages=[message],
            model=ScriptedModel([scripted_response("r1", "ok")]),
            tools=ToolRegistry([]),
            max_steps=1,
        )
        await run.wait()

    trio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=20)
    add_json_option(parser)
    args = parser.parse_args()
    with json_output(args.json):
        measure(args)


def measure(args: argparse.Namespace) -> None:
    """Print one row a piece of work: its time without and with the image, and copies."""
    size = int(args.mb * 1024 * 1024)
    image = ImageBlock("image/png", data=b"\x89PNG\r\n\x1a\n" + os.urandom(size - 8))
    with_image = UserMessage("u1", (TextBlock("What is in this picture?"), image))
    text_only = UserMessage("u1", "What is in this picture?")
    adapters = {
        "OpenAIChatModel": OpenAIChatModel("m", api_key="k"),
        "AnthropicModel": AnthropicModel("m", api_key="k"),
        "OpenAIResponsesModel": OpenAIResponsesModel("m", api_key="k"),
    }
    print(f"image: {size / 2**20:.1f} MiB; median of {args.rounds} rounds; copies = peak/size")
    print(f"{'work':52} {'text-only':>10} {'with image':>11} {'copies':>7}")

    def row(name: str, make: Callable[[UserMessage], Callable[[], Any]]) -> None:
        plain = best_ms(make(text_only), args.rounds)
        rich = best_ms(make(with_image), args.rounds)
        peak = copies(make(with_image), size)
        print(f"{name:52} {plain:8.3f} ms {rich:8.3f} ms {peak:7.2f}")
        record(**{name: {"text_ms": plain, "image_ms": rich, "copies": peak}})

    row("validate_transcript", lambda m: lambda: validate_transcript([m]))
    row("a one-step run (checks, step, events)", lambda m: lambda: run_once(m))
    for name, model in adapters.items():
        row(
            f"{name}.encode_request, a later step",
            lambda m, model=model: (
                lambda: model.encode_request(ModelRequest("request-001", (m,), ()))
            ),
        )
        first_step(name, model, image.data or b"", args.rounds)
    row(
        "ledger record (JSON, base64)",
        lambda m: lambda: encode_records([MessageRecord(seq=1, message=m)]),
    )
    row("decode it back (derive's input)", lambda m: _decoder(m))


def first_step(name: str, model: Any, data: bytes, rounds: int) -> None:
    """The first step that sends an image encodes it: a new image each time."""
    fresh = iter([bytes(bytearray(data)) for _ in range(rounds + 1)])

    def encode() -> bytes:
        image = ImageBlock("image/png", data=next(fresh))
        request = ModelRequest("request-001", (UserMessage("u1", (image,)),), ())
        encoded: bytes = model.encode_request(request)
        return encoded

    took = best_ms(encode, rounds)
    peak = copies(encode, len(data))
    print(f"{name + '.encode_request, first step':52} {'':>11} {took:8.3f} ms {peak:7.2f}")
    record(**{f"{name}.encode_request, first step": {"image_ms": took, "copies": peak}})


def _decoder(message: UserMessage) -> Callable[[], Any]:
    data = msgspec.json.encode(message)
    return lambda: msgspec.json.decode(data, type=UserMessage)


if __name__ == "__main__":
    main()
