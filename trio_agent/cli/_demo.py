"""The offline demo: a scripted model and two tools run a three-step turn of an
``Agent``, printed by the command line exactly as ``run`` prints a real one."""

from __future__ import annotations

from typing import Final

import trio

from ..messages._ir import TextBlock, ToolCall
from ..session._agent import Agent
from ..testing._scripted import ScriptedModel, scripted_response
from ..tools._tool import ToolRegistry, tool

__all__ = ["QUESTION", "SYSTEM", "demo_agent", "demo_model"]

QUESTION: Final = "A box holds 12 eggs. How many eggs are in 7 boxes, plus the 5 loose ones?"
SYSTEM: Final = "You are a careful calculator. Use the tools for arithmetic."


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


def demo_agent() -> Agent:
    """An Agent on the scripted model with the two tools (no ledger)."""
    return Agent(
        model=demo_model(), tools=ToolRegistry([multiply, add]), max_steps=5, system=SYSTEM
    )
