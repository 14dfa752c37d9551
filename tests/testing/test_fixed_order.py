"""The fixed order of trio's scheduler during an exploration (``seeded_scheduler``,
``explore_cancellation``, the ``trio_seed`` fixture): the order tasks became ready,
whatever else runs, and trio's own generator put back however blocks overlap."""

from __future__ import annotations

import trio
import trio.lowlevel
from helpers import children_in_order
from trio._core import _run

from trio_agent.testing._explorer import seeded_scheduler


async def _busy() -> None:
    while True:
        await trio.lowlevel.checkpoint()


async def test_the_fixed_order_is_the_order_tasks_became_ready_whatever_else_runs():
    """Issue 38 (review of the fixed order): under pytest, hypothesis is imported and
    trio shuffles each batch (its deterministic mode) instead of drawing whether to
    reverse it, so fixing only that draw left the order random, and other tasks
    changed it."""
    alone: list[int] = []
    with seeded_scheduler():
        await children_in_order(alone, 8)
    crowded: list[int] = []
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(_busy)
        await trio.lowlevel.checkpoint()
        with seeded_scheduler():
            await children_in_order(crowded, 8)
        nursery.cancel_scope.cancel()
    assert alone == crowded == list(range(8)), (
        _run._ALLOW_DETERMINISTIC_SCHEDULING,
        alone,
        crowded,
    )


async def test_overlapping_fixed_orders_put_trios_generator_back():
    """Issue 38 (review of the fixed order): two explorations (or trio_seed and one)
    whose fixed orders overlapped without nesting left trio's scheduler fixed for
    the rest of the process."""
    original = _run._r
    a_in, b_in, a_out = trio.Event(), trio.Event(), trio.Event()

    async def first() -> None:
        with seeded_scheduler():
            a_in.set()
            await b_in.wait()
        a_out.set()

    async def second() -> None:
        await a_in.wait()
        with seeded_scheduler():
            b_in.set()
            await a_out.wait()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            nursery.start_soon(second)
    try:
        assert _run._r is original, type(_run._r).__name__
    finally:
        vars(_run)["_r"] = original
