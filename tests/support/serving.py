"""A real server for the serving tests: ``trio_agent.serve.Server`` on a loopback
socket bound to port 0, in this process, with the test agents of serve_agents."""

from __future__ import annotations

import queue
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import serve_agents
import trio
from waiting import WAIT

from trio_agent.serve import Server

FRESH = httpx.Limits(max_keepalive_connections=0)


@asynccontextmanager
async def running(store, **options: Any) -> AsyncIterator[tuple[Server, str]]:
    """The server on ``store`` and its base URL; stopped gracefully on leaving."""
    options.setdefault("port", 0)
    server = Server(options.pop("factory", serve_agents.make_agent), store=store, **options)
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(server.run)
        try:
            yield server, urls[0]
        finally:
            server.stop()


@asynccontextmanager
async def client(base_url: str, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the server, a connection per request: one kept idle
    may be closed by the server (its keep-alive timeout) just as it is reused,
    which a loaded machine makes likely."""
    async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=FRESH, **options) as http:
        yield http


@contextmanager
def in_a_thread(store, **options: Any) -> Iterator[str]:
    """The server run by ``trio.run`` in a thread of its own (for synchronous tests:
    hypothesis), its base URL; stopped gracefully on leaving."""
    started: queue.Queue[tuple[str, trio.lowlevel.TrioToken] | BaseException] = queue.Queue()
    options.setdefault("port", 0)
    server = Server(options.pop("factory", serve_agents.make_agent), store=store, **options)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(server.run)
            started.put((urls[0], trio.lowlevel.current_trio_token()))

    def body() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # reported to the test's thread
            started.put(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    got = started.get(timeout=WAIT)
    if isinstance(got, BaseException):
        raise got
    url, token = got
    try:
        yield url
    finally:
        trio.from_thread.run_sync(server.stop, trio_token=token)
        thread.join(WAIT)
