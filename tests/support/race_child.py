"""A child process for the resume-race test: resume the crash test's session.

Usage: race_child.py DIRECTORY jsonl|sqlite|postgres. Prints "won" once it is the
session's writer (then waits for a line on stdin and finishes the session),
or "locked: <the error>" and exits 3 when another writer has the session.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio
from crash_child import SESSION, STEPS, StepwiseModel, make_tools, open_store

from trio_agent import Agent, SessionLockedError


async def main(directory: Path, kind: str) -> int:
    store = open_store(directory, kind, lease_seconds=1.0)  # a killed winner's lease ends soon
    try:
        agent = await Agent.resume(
            store,
            SESSION,
            model=StepwiseModel(directory),
            tools=make_tools(directory),
            max_steps=STEPS + 1,
        )
    except SessionLockedError as exc:
        print(f"locked: {exc}", flush=True)
        return 3
    print(f"won {os.getpid()}", flush=True)
    await trio.to_thread.run_sync(sys.stdin.readline)  # the parent says when to go on
    await agent.prompt("continue")
    await agent.aclose()
    print("finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main, Path(sys.argv[1]), sys.argv[2]))
