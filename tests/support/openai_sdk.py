"""The official ``openai`` SDK as a client of a test server: its synchronous client,
run in a worker thread (no asyncio in the test's process)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import trio
from waiting import WAIT


def sdk(url: str) -> openai.OpenAI:
    """A client of the server at ``url``, which never retries on its own."""
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=WAIT)


async def in_thread(work: Callable[[openai.OpenAI], Any], url: str) -> Any:
    """``work(client)`` in a worker thread; the client closed after (its sockets too)."""

    def run() -> Any:
        with sdk(url) as ai:
            return work(ai)

    return await trio.to_thread.run_sync(run)


def session_of(response_id: str) -> str:
    """The session a response id names (``resp_SESSION_TURN``)."""
    return response_id.removeprefix("resp_").rpartition("_")[0]
