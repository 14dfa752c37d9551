"""A child process for the ledger crash test: runs a durable multi-step session.

Usage: crash_child.py DIRECTORY [jsonl|sqlite|postgres] [snapshots]. Prints "ready"
once the session exists, then runs until done (or until the parent kills it).
Every tool dispatch appends its key to DIRECTORY/dispatched.log before the tool
does its work; each step's first call is to a tool whose effect is once, its
second to an idempotent one.

With ``snapshots`` the work is turns of two steps each, the store writes a
snapshot after every turn it can (``SnapshotPolicy(every_turns=1)``), and
writing one is slowed (its replay waits a little, and a JSONL snapshot line goes
out in two writes, as a short write would), so that kills land while one is
written.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

import trio

from trio_agent import (
    Agent,
    AssistantMessage,
    JsonlStore,
    ModelRequest,
    ModelResponse,
    SqliteStore,
    TextBlock,
    TextDelta,
    ToolCall,
    ToolContext,
    ToolRegistry,
    TurnCompleted,
    tool,
)
from trio_agent.stores import SnapshotPolicy

STEPS = 6
SESSION = "crash"


class StepwiseModel:
    """Answers from the transcript alone, so a resumed session simply goes on:
    step n (n assistant messages so far) calls two tools; step STEPS stops.
    Every request it receives is logged to DIRECTORY/requests.log as it opens."""

    def __init__(self, directory: Path) -> None:
        self.log = os.open(
            directory / "requests.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
        )

    def stream(self, request: ModelRequest):
        return _Stream(request, self.log)


class _Stream:
    def __init__(self, request: ModelRequest, log: int) -> None:
        self.log = log
        n = sum(type(m) is AssistantMessage for m in request.messages)
        self.request = request
        if n < STEPS:
            blocks = (
                TextBlock(f"step {n}: "),
                ToolCall(f"call-{n}-a", "work", {"key": f"{n}a"}),
                ToolCall(f"call-{n}-b", "put", {"key": f"{n}b"}),
            )
            stop = "tool_call"
        else:
            blocks = (TextBlock("all done"),)
            stop = "stop"
        self.final = ModelResponse(
            id=f"resp-{n}", request_id=request.id, content=blocks, stop_reason=stop
        )
        self.chunks = [TextDelta(b.text) if type(b) is TextBlock else b for b in blocks]

    async def __aenter__(self):
        os.write(self.log, f"{self.request.id}\n".encode())  # the request is sent
        await trio.sleep(0.001)
        return self

    async def __aexit__(self, *exc):
        return None

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self.chunks:
            raise StopAsyncIteration
        await trio.sleep(0.001)
        return self.chunks.pop(0)

    async def response(self):
        await trio.sleep(0.001)
        return self.final


def make_tools(directory: Path) -> ToolRegistry:
    """``work``, whose effect is once (the "a" calls), and ``put``, idempotent (the
    "b" calls): each logs its key to dispatched.log when dispatched; ``put`` logs
    its idempotency key to keys.log too."""
    log = os.open(directory / "dispatched.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    keys = os.open(directory / "keys.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @tool
    async def work(key: str) -> str:
        """Do some work, after logging the dispatch."""
        os.write(log, f"{key}\n".encode())
        await trio.sleep(0.003)
        return key.upper()

    @tool(effect="idempotent")
    async def put(key: str, ctx: ToolContext) -> str:
        """Store a value under its idempotency key, after logging the dispatch."""
        os.write(log, f"{key}\n".encode())
        os.write(keys, f"{key} {ctx.idempotency_key}\n".encode())
        await trio.sleep(0.003)
        return key.upper()

    return ToolRegistry([work, put])


def open_store(
    directory: Path, kind: str, lease_seconds: float = 30.0, snapshots: Any = "default"
) -> Any:
    """The trial's store: a JSONL directory, a SQLite file, or a PostgreSQL schema
    of its own (in the cluster ``TRIO_AGENT_TEST_PG_DSN`` names); ``snapshots``:
    its ``SnapshotPolicy`` (or None), else the store's default."""
    options = {} if snapshots == "default" else {"snapshots": snapshots}
    if kind == "jsonl":
        return JsonlStore(directory, **options)
    if kind == "sqlite":
        return SqliteStore(directory / "sessions.db", **options)
    from trio_agent.stores import PostgresStore

    schema = "c_" + hashlib.sha256(str(directory).encode()).hexdigest()[:16]
    dsn = os.environ["TRIO_AGENT_TEST_PG_DSN"]
    return PostgresStore(dsn, schema=schema, lease_seconds=lease_seconds, **options)


EVERY_TURN = SnapshotPolicy(every_turns=1)


def _stop_here() -> None:
    """Say so on stdout and wait to be killed (the parent kills on this line)."""
    print("in a snapshot", flush=True)
    while True:
        time.sleep(1)


def slow_snapshots(directory: Path, kind: str, hang_at: int = 0) -> None:
    """Widen the moment a snapshot is written: its replay waits 3 ms, and a JSONL
    snapshot line is written in two parts, 3 ms apart (a short write: the writer
    writes the rest). DIRECTORY/snapshots.log gets "begin" when the ledger looks
    whether one is due and "end" once it is written (or was not due).
    ``hang_at`` N > 0: the Nth snapshot stops in its middle (JSONL: its line half
    written; SQLite: taken, not yet stored) until the process is killed, so a
    kill lands there whatever the machine's load."""
    from trio_agent.ledger import Ledger, _policy
    from trio_agent.stores import _jsonl

    jsonl = kind == "jsonl"
    log = os.open(directory / "snapshots.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    take = _policy.SnapshotTaker.turn_ended
    snapshot = Ledger._snapshot

    taken = 0

    def slow_take(self: Any) -> Any:
        nonlocal taken
        record = take(self)
        if record is not None:
            os.write(log, b"begin\n")
            taken += 1
            if taken == hang_at and not jsonl:
                _stop_here()
            time.sleep(0.003)
        return record

    def logged_snapshot(self: Any, taker: Any) -> None:
        snapshot(self, taker)
        os.write(log, b"end\n")

    write = os.write

    def split_write(fd: int, data: Any) -> int:
        if bytes(data).startswith(b'{"kind":"snapshot",'):
            written = write(fd, data[: len(data) // 2])
            if taken == hang_at:
                _stop_here()
            time.sleep(0.003)
            return written
        return write(fd, data)

    _policy.SnapshotTaker.turn_ended = slow_take  # type: ignore[method-assign]
    Ledger._snapshot = logged_snapshot  # type: ignore[method-assign]
    _jsonl.os = types.SimpleNamespace(**{**vars(os), "write": split_write})  # type: ignore[attr-defined]


async def main(directory: Path, kind: str, snapshots: bool) -> None:
    store = open_store(  # a killed holder's lease ends soon
        directory, kind, lease_seconds=1.0, snapshots=EVERY_TURN if snapshots else "default"
    )
    agent = Agent(
        model=StepwiseModel(directory),
        tools=make_tools(directory),
        store=store,
        session_id=SESSION,
        max_steps=2 if snapshots else STEPS + 1,
    )
    async with agent:  # the session's ledger is created here, on first use
        print("ready", flush=True)
        result = await agent.prompt("start the work")
        while result.end != TurnCompleted():  # turns of two steps: max_steps
            result = await agent.prompt("continue")
    print("finished", flush=True)


if __name__ == "__main__":
    snapshots = sys.argv[3:4] == ["snapshots"]  # then, optionally, the snapshot to stop in
    if snapshots:
        hang_at = int(sys.argv[4]) if len(sys.argv) > 4 else 0
        slow_snapshots(Path(sys.argv[1]), sys.argv[2], hang_at)
    trio.run(main, Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "jsonl", snapshots)
