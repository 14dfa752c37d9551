"""Small builders the session tests share: a user message by id, a model of plain
replies, an ``add`` tool answering text, a tool that waits, what a JSONL ledger
recorded."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from trio_agent import Agent, ToolCall, UserMessage, tool
from trio_agent.testing import ScriptedModel, scripted_response


def u(id: str, text: str = "hi") -> UserMessage:
    return UserMessage(id, text)


@tool(name="add")
async def add_text(left: int, right: int) -> str:
    """Add two integers."""
    return str(left + right)


def adding(prefix: str = "r") -> list:
    return [
        scripted_response(f"{prefix}1", [ToolCall(f"{prefix}-c1", "add", {"left": 1, "right": 2})]),
        scripted_response(f"{prefix}2", "3"),
    ]


@tool
async def wait() -> str:
    """Sleep a long time."""
    await trio.sleep(1000)
    return "late"


def model(n: int = 4) -> ScriptedModel:
    return ScriptedModel([scripted_response(f"r{i}", f"reply {i}") for i in range(1, n + 1)])


def user_texts(agent: Agent) -> list[str]:
    return [m.content for m in agent.messages if m.role == "user"]  # type: ignore[union-attr]


def kinds(path: Path) -> list[str]:
    """The kinds of the records of a JSONL ledger."""
    return [json.loads(line)["kind"] for line in path.read_text().splitlines()]
