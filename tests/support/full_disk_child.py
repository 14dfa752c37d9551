"""A child process for the full-disk test: a session on a tiny tmpfs that fills up.

Usage: full_disk_child.py DIRECTORY. Run it in a mount namespace of its own
(``unshare --mount``, with ``--map-root-user`` when not root): for each store
it mounts a 2 MiB tmpfs under DIRECTORY, fills it mid-session, then frees it.
Prints one JSON object: per store, what the failing turn raised and what
loading, resuming and going on gave afterwards.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import trio

from trio_agent import (
    Agent,
    JsonlStore,
    LedgerError,
    SqliteStore,
    TextBlock,
    ToolCall,
    ToolRegistry,
    tool,
)
from trio_agent.ledger import derive
from trio_agent.testing import ScriptedModel, scripted_response


@tool
async def add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": left + right}


def script(prefix: str, steps: int) -> list:
    out = [
        scripted_response(
            f"{prefix}{i}",
            [TextBlock("y" * 2000), ToolCall(f"{prefix}c{i}", "add", {"left": i, "right": 1})],
        )
        for i in range(steps)
    ]
    return [*out, scripted_response(f"{prefix}end", "done")]


def fill(path: Path) -> None:
    """Write ``path`` until the filesystem is full."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        try:
            while True:
                f.write(b"\0")
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


def mount_small_disk(directory: Path) -> Path:
    """A 2 MiB tmpfs on ``directory`` (in this process's own mount namespace)."""
    directory.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(directory)], check=True)
    (directory / "sessions").mkdir()
    return directory / "sessions"


async def one(directory: Path, kind: str) -> dict[str, object]:
    directory = mount_small_disk(directory)
    store = JsonlStore(directory) if kind == "jsonl" else SqliteStore(directory / "s.db")
    agent = Agent(
        model=ScriptedModel([*script("a", 20), *script("b", 20), *script("c", 20)]),
        tools=ToolRegistry([add]),
        store=store,
        session_id="s",
        max_steps=64,
    )
    first = await agent.prompt("warm up")  # a whole turn on a disk with room
    report: dict[str, object] = {"first": first.end.reason}
    fill(directory.parent / f"filler-{kind}")
    try:
        await agent.prompt("now the disk is full " + "z" * 60_000)
        report["failed"] = None
    except LedgerError as exc:
        report["failed"] = f"{type(exc).__name__}: {exc}"
    # the session loads whole while the disk is still full
    loaded = await store.load("s")
    report["loads_while_full"] = derive(loaded.records).turns
    report["torn_while_full"] = list(loaded.warnings)
    os.unlink(directory.parent / f"filler-{kind}")  # space comes back
    try:
        await agent.prompt("and again")
        report["broken_writer_wrote"] = True
    except LedgerError:
        report["broken_writer_wrote"] = False
    resumed = await Agent.resume(
        store, "s", model=ScriptedModel(script("d", 2)), tools=ToolRegistry([add]), max_steps=64
    )
    report["closed_on_resume"] = [code for _, code in resumed.closed_on_resume]
    after = await resumed.prompt("go on")
    report["after"] = after.end.reason
    await resumed.aclose()
    try:
        await agent.aclose()
    except LedgerError:
        pass
    final = derive((await store.load("s")).records)
    report["final_closed"] = final.closed
    report["final_turns"] = final.turns
    if kind == "sqlite":
        await store.aclose()
    return report


async def main(directory: Path) -> None:
    reports = {kind: await one(directory / kind, kind) for kind in ("jsonl", "sqlite")}
    print(json.dumps(reports))


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]))
