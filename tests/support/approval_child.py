"""A child process for the approval crash test (issue 19): one phase of a durable
session whose tool needs approval, then it blocks until the parent kills it.

Usage: approval_child.py DIRECTORY KIND PHASE, PHASE one of:
- ``hold``: a first turn asks for ``read`` (runs) and ``write`` (held); "held";
- ``decide``: resume, approve the write (by "ann"); "decided";
- ``dispatch``: resume, approve, and run the next turn: the write starts, logs
  itself to DIRECTORY/writes.log, says "dispatched" and never returns;
- ``answer``: resume, approve, run the next turn to its end; "answered".
Printed lines are flushed once the phase's records are durable.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import trio

from trio_agent import Agent, JsonlStore, SqliteStore, ToolCall, ToolRegistry, tool
from trio_agent.testing import CallableModel, scripted_response

SESSION = "approvals"


def open_store(directory: Path, kind: str) -> Any:
    if kind == "sqlite":
        return SqliteStore(directory / "ledger.db")
    return JsonlStore(directory)


def make_tools(directory: Path, hang: bool = False) -> ToolRegistry:
    @tool(requires_approval=True)
    async def write(path: str) -> str:
        """Write a file (needs a yes)."""
        async with await trio.open_file(directory / "writes.log", "a") as log:
            await log.write(path + "\n")
        if hang:
            print("dispatched", flush=True)
            await trio.sleep_forever()
        return f"wrote {path}"

    @tool
    async def read(path: str) -> str:
        """Read a file."""
        return f"content of {path}"

    return ToolRegistry([write, read])


def model() -> CallableModel:
    """The first request asks for both calls; any later one answers."""

    def answer(request: Any) -> Any:
        asked = sum(type(m).__name__ == "AssistantMessage" for m in request.messages)
        if asked == 0:
            calls = [ToolCall("c1", "read", {"path": "a"}), ToolCall("c2", "write", {"path": "b"})]
            return scripted_response("r1", calls)
        return scripted_response(f"r{asked + 1}", "done")

    return CallableModel(answer)


async def main(directory: Path, kind: str, phase: str) -> None:
    store = open_store(directory, kind)
    if phase == "hold":
        agent = Agent(model=model(), tools=make_tools(directory), store=store, session_id=SESSION)
        await agent.prompt("go")
        print("held", flush=True)
        await trio.sleep_forever()
    tools = make_tools(directory, hang=phase == "dispatch")
    agent = await Agent.resume(store, SESSION, model=model(), tools=tools)
    await agent.approve("c2", by="ann")
    if phase == "decide":
        print("decided", flush=True)
        await trio.sleep_forever()
    await agent.prompt()
    print("answered", flush=True)
    await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), sys.argv[2], sys.argv[3])
