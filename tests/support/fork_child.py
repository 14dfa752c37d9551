"""A child process for the fork tests: a trio-agent process that forks.

Usage: fork_child.py DIRECTORY fsync|lock. Prints one line per finding.

- ``fsync``: the parent runs a durable turn (its fsync pool starts a thread),
  then forks; the child runs a durable turn of its own, which must not wait
  for a pool thread that only the parent has.
- ``lock``: a SQLite session is open when the process forks a child that
  lives on; after the parent's ``aclose()`` the session must be free again.
- ``sqlite``: a SQLite store's connection (open for the store's life) is open
  when the process forks; the child's sessions on the same store must use a
  connection of its own (SQLite forbids using one across a fork), and the
  parent's must go on.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import trio

from trio_agent import Agent, JsonlStore, SqliteStore, UserMessage
from trio_agent.testing import ScriptedModel, scripted_response


async def one_turn(store, session_id: str) -> str:
    agent = Agent(
        model=ScriptedModel([scripted_response("r", "hi")]), store=store, session_id=session_id
    )
    with trio.fail_after(60):  # a hang guard: a wait for a thread it does not have is for ever
        result = await agent.prompt(UserMessage("u", "go"))
        await agent.aclose()
    return result.end.reason


def forked_fsync(directory: Path) -> None:
    print("parent", trio.run(one_turn, JsonlStore(directory), "parent"), flush=True)
    pid = os.fork()
    if pid == 0:
        try:
            print("child", trio.run(one_turn, JsonlStore(directory), "child"), flush=True)
        except BaseException as exc:  # report anything, then leave without cleanup
            print("child failed", type(exc).__name__, flush=True)
        os._exit(0)
    os.waitpid(pid, 0)


def fork_a_sleeper() -> int:
    """A child that lives on, holding copies of every open file of this process."""
    pid = os.fork()
    if pid == 0:
        time.sleep(600)  # ended by the parent once it has looked
        os._exit(0)
    return pid


def end(pid: int) -> None:
    os.kill(pid, 9)
    os.waitpid(pid, 0)


async def lock_outlives(directory: Path) -> None:
    store = SqliteStore(directory / "s.db")
    async with Agent(model=ScriptedModel([]), store=store, session_id="s1"):
        pid = fork_a_sleeper()  # the session is open (its ledger made on `async with`)
    try:
        resumed = await Agent.resume(store, "s1", model=ScriptedModel([]))
        await resumed.aclose()
        print("resumed after aclose", flush=True)
    except Exception as exc:
        print("refused", type(exc).__name__, exc, flush=True)
    end(pid)
    await store.aclose()


def forked_sqlite(directory: Path) -> None:
    import sqlite3

    store = SqliteStore(directory / "s.db")
    print("parent", trio.run(one_turn, store, "parent-1"), flush=True)
    pid = os.fork()
    if pid == 0:
        opened = []
        connect = sqlite3.connect

        def counting(*args, **kwargs):
            opened.append(args)
            return connect(*args, **kwargs)

        sqlite3.connect = counting
        try:
            print("child", trio.run(one_turn, store, "child"), flush=True)
            trio.run(store.aclose)
            print("child connections opened:", len(opened), flush=True)
        except BaseException as exc:  # report anything, then leave without cleanup
            print("child failed", type(exc).__name__, exc, flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
    print("parent", trio.run(one_turn, store, "parent-2"), flush=True)
    loaded = [len(trio.run(store.load, name).records) > 0 for name in ("child", "parent-2")]
    print("stored", loaded, flush=True)
    trio.run(store.aclose)


if __name__ == "__main__":
    where, mode = Path(sys.argv[1]), sys.argv[2]
    if mode == "fsync":
        forked_fsync(where)
    elif mode == "sqlite":
        forked_sqlite(where)
    else:
        trio.run(lock_outlives, where)
