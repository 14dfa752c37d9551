"""The offline demo: a scripted model and two tools run a three-step loop."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import trio

from .events import (
    Event,
    MessageAccepted,
    ModelChunk,
    RunFinished,
    ToolFinished,
    ToolStarted,
)
from .loop import run_agent_loop
from .messages import TextBlock, ToolCall, UserMessage
from .model import TextDelta
from .testing import ScriptedModel, scripted_response
from .tools import ToolRegistry, tool

QUESTION = "A box holds 12 eggs. How many eggs are in 7 boxes, plus the 5 loose ones?"


@tool
async def multiply(left: int, right: int) -> dict[str, int]:
    """Multiply two numbers."""
    await trio.sleep(0.2)  # pretend to work, so the run is visibly live
    return {"product": left * right}


@tool
async def add(left: int, right: int) -> dict[str, int]:
    """Add two numbers."""
    await trio.sleep(0.2)
    return {"sum": left + right}


def demo_model() -> ScriptedModel:
    """The script: multiply, then add, then answer in streamed text."""
    return ScriptedModel(
        [
            scripted_response(
                "demo-1",
                [
                    TextBlock("First, eggs in the boxes: 7 x 12."),
                    ToolCall("call-multiply-1", "multiply", {"left": 7, "right": 12}),
                ],
                text_chunks=6,
            ),
            scripted_response(
                "demo-2",
                [
                    TextBlock("Now add the loose eggs."),
                    ToolCall("call-add-1", "add", {"left": 84, "right": 5}),
                ],
                text_chunks=5,
            ),
            scripted_response(
                "demo-3", "There are 89 eggs in total: 84 in the boxes and 5 loose.", text_chunks=12
            ),
        ]
    )


def describe(event: Event) -> str:
    """One readable line for an event."""
    head = f"#{event.sequence:<3} {event.type:<17}"
    if isinstance(event, MessageAccepted):
        return f"{head} {event.message.id}: {getattr(event.message, 'content', '')!r}"
    if isinstance(event, ModelChunk):
        chunk = event.chunk
        if isinstance(chunk, TextDelta):
            return f"{head} {event.request_id} text {chunk.text!r}"
        args = msgspec.json.encode(chunk.arguments).decode()
        return f"{head} {event.request_id} call {chunk.name}({args}) id={chunk.id}"
    if isinstance(event, ToolStarted):
        return f"{head} {event.call.name} ({event.call.id})"
    if isinstance(event, ToolFinished):
        mark = "error" if event.result.is_error else "ok"
        return f"{head} {event.call.name} -> {event.result.content} [{mark}]"
    assert isinstance(event, RunFinished)
    result = event.result
    return f"{head} {result.status} after {result.steps} step(s)"


async def run_demo(out: Callable[[str], None] = print, *, as_json: bool = False) -> int:
    """Run the demo, printing each event as it happens; return an exit code."""
    tools = ToolRegistry([multiply, add])
    run = run_agent_loop(
        messages=[UserMessage("user-1", QUESTION)],
        model=demo_model(),
        tools=tools,
        max_steps=5,
        system="You are a careful calculator. Use the tools for arithmetic.",
    )
    async with run:
        async for event in run:
            if as_json:
                out(msgspec.json.encode(event).decode())
            else:
                out(describe(event))
                if isinstance(event, ModelChunk):
                    await trio.sleep(0.03)  # pace the replay like a real stream
    result = run.result
    assert result is not None
    if not as_json:
        out("")
        out(f"result: {result.status}")
        if result.status == "completed":
            out(f"final text: {result.final_text}")
        out(f"transcript: {len(result.messages)} messages")
        for message in result.messages:
            out(f"  {message.id} ({type(message).__name__})")
    return 0 if result.status == "completed" else 1
