"""A fleet worker process for the fleet crash test (tests/fleet/test_crash.py).

Usage: fleet_child.py DSN SCHEMA. Prints "ready" once listening, then works until
killed. Each input is "SESSION INPUT" and is answered with one turn: two parallel
tool calls (the first to a tool whose effect is once, the second to an
idempotent one), then an answer. Every tool dispatch inserts a row into the side
table ``SCHEMA.dispatches`` (its call id, session, this process's pid, the
database's clock) before the tool does its work, so the parent can see a call
dispatched twice, or a session written by two workers at once.
"""

from __future__ import annotations

import os
import sys

import psycopg
import trio

from trio_agent import ToolCall, ToolContext, UserMessage, tool
from trio_agent.fleet import Worker, agent_maker
from trio_agent.stores import PostgresStore
from trio_agent.testing import CallableModel, scripted_response


def answer(request):
    last_user = [m for m in request.messages if isinstance(m, UserMessage)][-1]
    session, _ = last_user.content.split()
    if isinstance(request.messages[-1], UserMessage):
        calls = [
            ToolCall(
                f"c-{last_user.id}-{k}",
                name,
                {"session": session, "key": f"{last_user.id}-{k}"},
            )
            for k, name in (("a", "record"), ("b", "put"))
        ]
        return scripted_response(f"r-{request.id}", calls)
    return scripted_response(f"r-{request.id}", f"answered {last_user.content}")


async def main(dsn: str, schema: str) -> None:
    side = psycopg.connect(dsn, autocommit=True)
    pid = os.getpid()
    lock = trio.Lock()

    async def dispatch(session: str, key: str, idempotency_key: str) -> str:
        async with lock:  # one connection for the side table
            await trio.to_thread.run_sync(
                lambda: side.execute(
                    f'INSERT INTO "{schema}".dispatches (key, session_id, pid, idem) '
                    "VALUES (%s, %s, %s, %s)",
                    (key, session, pid, idempotency_key),
                )
            )
        await trio.sleep(0.005)
        return key

    @tool
    async def record(session: str, key: str) -> str:
        """Record the dispatch, then work a little (its effect: once)."""
        return await dispatch(session, key, "")

    @tool(effect="idempotent")
    async def put(session: str, key: str, ctx: ToolContext) -> str:
        """As record, but idempotent: run again after a crash, with the same key."""
        return await dispatch(session, key, ctx.idempotency_key)

    async def slow(request):
        await trio.sleep(0.01)
        return answer(request)

    store = PostgresStore(dsn, schema=schema, lease_seconds=1.0)
    make = agent_maker(
        model=CallableModel(slow, record_requests=False),
        tools=[record, put],
        tool_execution="parallel",
    )
    worker = Worker(store, make, concurrency=8, poll_seconds=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        print("ready", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
