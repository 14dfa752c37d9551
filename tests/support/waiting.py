"""Waiting in tests on what happens, never on how long it takes.

A test that sleeps a while "to let X happen" breaks on a loaded machine, where X
takes longer; one that cancels after a few milliseconds cuts the code under test
short at a point that depends on the load. These wait on the condition itself
(polled, under a bound that only a failing test reaches), or on every other task
being blocked (trio's own test helper), instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio
import trio.testing

WAIT = 60.0
"""Seconds a test waits for what must happen long before: only a failing test
waits this long, so it holds on a loaded machine."""


async def wait_until(condition: Callable[[], object], seconds: float = WAIT) -> None:
    """Return once ``condition()`` is true (polled every 10 ms); ``AssertionError``
    after ``seconds``."""
    with trio.move_on_after(seconds):
        while not condition():  # noqa: ASYNC110 (the condition has no event: polled)
            await trio.sleep(0.01)
        return
    raise AssertionError(f"not true within {seconds} s: {condition}")


async def wait_until_async(
    condition: Callable[[], Awaitable[object]], seconds: float = WAIT
) -> None:
    """As ``wait_until``, for an async condition (a query, say; polled every 50 ms)."""
    with trio.move_on_after(seconds):
        while not await condition():  # noqa: ASYNC110 (polled)
            await trio.sleep(0.05)
        return
    raise AssertionError(f"not true within {seconds} s: {condition}")


@asynccontextmanager
async def cancelled_once_blocked() -> AsyncIterator[trio.CancelScope]:
    """``async with cancelled_once_blocked() as scope:`` runs its body until every
    other task is blocked (the code under test went as far as it can: it hangs
    where the test made it hang), then cancels it. Unlike ``move_on_after(0.05)``,
    the cancel never lands earlier because the machine is slow. Not where the code
    waits on a worker thread (a store's): a task in ``trio.to_thread`` counts as
    blocked, so there the code under test sets an event where it hangs."""
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def cancel() -> None:
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()

            nursery.start_soon(cancel)
            yield scope
