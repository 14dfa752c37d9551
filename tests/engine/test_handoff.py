"""A run's hand-over of events to its consumer (``engine/_handoff.py``): one event at
a time, never buffered, nothing delivered by a cancelled side, each side closed once."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from helpers import TaskSteps

from trio_agent.engine._handoff import Handoff


async def _consume(handoff: Handoff[int], count: int, got: list[int]) -> None:
    """Take ``count`` events into ``got``."""
    for _ in range(count):
        got.append(await handoff.take())


async def test_an_event_goes_to_a_waiting_consumer_and_a_parked_run_waits_for_one():
    handoff: Handoff[int] = Handoff()
    got: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_consume, handoff, 3, got)
        await trio.testing.wait_all_tasks_blocked()
        await handoff.put(1)  # the consumer waits: handed over at once
        await handoff.put(2, pause=False)
        await handoff.put(3)  # the consumer has not asked again yet: parks until it does
    assert got == [1, 2, 3]


async def test_a_run_is_never_more_than_one_event_ahead(autojump_clock):
    """Nothing is buffered: with no consumer the first put parks."""
    handoff: Handoff[int] = Handoff()
    with trio.move_on_after(1) as waited:  # virtual time: nobody ever takes it
        await handoff.put(1)
    assert waited.cancelled_caught
    async with trio.open_nursery() as nursery:
        nursery.start_soon(handoff.put, 2)
        await trio.testing.wait_all_tasks_blocked()
        assert await handoff.take() == 2  # the cancelled 1 was never delivered


async def test_pause_false_hands_over_without_yielding():
    handoff: Handoff[int] = Handoff()
    got: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_consume, handoff, 2, got)
        await trio.testing.wait_all_tasks_blocked()
        steps = TaskSteps(trio.lowlevel.current_task())
        trio.lowlevel.add_instrument(steps)
        try:
            await handoff.put(1, pause=False)
            assert steps.steps == 0  # handed over without yielding
            await trio.testing.wait_all_tasks_blocked()
            before = steps.steps
            await handoff.put(2)
            assert steps.steps == before + 1  # handed over, then yielded to the consumer
        finally:
            trio.lowlevel.remove_instrument(steps)
    assert got == [1, 2]


async def test_a_cancelled_put_delivers_nothing_and_a_cancelled_take_takes_nothing():
    handoff: Handoff[str] = Handoff()
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await handoff.put("dropped")  # a cancellation point, even with no one waiting
        with pytest.raises(trio.Cancelled):
            await handoff.take()
    async with trio.open_nursery() as nursery:
        taker = trio.CancelScope()

        async def take_then_be_cancelled() -> None:
            with taker:
                await handoff.take()

        nursery.start_soon(take_then_be_cancelled)
        await trio.testing.wait_all_tasks_blocked()
        taker.cancel()  # a parked take, cancelled: it no longer waits
    got: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(handoff.put, "kept")
        await trio.testing.wait_all_tasks_blocked()
        got.append(await handoff.take())
    assert got == ["kept"]


async def test_the_runs_side_closed_ends_the_consumers_and_the_consumers_side_breaks_the_run():
    handoff: Handoff[int] = Handoff()
    ended: list[str] = []

    async def wait_for_end() -> None:
        with pytest.raises(trio.EndOfChannel):
            await handoff.take()
        ended.append("end")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_for_end)
        nursery.start_soon(wait_for_end)
        await trio.testing.wait_all_tasks_blocked()
        handoff.close_sending()
    assert ended == ["end", "end"]
    with pytest.raises(trio.EndOfChannel):
        await handoff.take()
    with pytest.raises(trio.ClosedResourceError):  # never an event after the end
        await handoff.put(1)

    left: Handoff[int] = Handoff()
    broken: list[str] = []

    async def parked_put() -> None:
        with pytest.raises(trio.BrokenResourceError):
            await left.put(1)
        broken.append("broken")

    async def waiting_take(handoff: Handoff[int]) -> None:
        with pytest.raises(trio.ClosedResourceError):
            await handoff.take()
        broken.append("closed")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked_put)
        await trio.testing.wait_all_tasks_blocked()
        left.close_receiving()
    with pytest.raises(trio.BrokenResourceError):
        await left.put(2)
    other: Handoff[int] = Handoff()  # a second consumer, waiting when its side closes
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting_take, other)
        await trio.testing.wait_all_tasks_blocked()
        other.close_receiving()
    assert broken == ["broken", "closed"]


async def test_events_keep_their_order_across_many_hand_overs():
    handoff: Handoff[int] = Handoff()
    got: list[int] = []

    async def produce() -> None:
        for i in range(500):
            await handoff.put(i, pause=i % 3 != 0)
        handoff.close_sending()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        while True:
            try:
                got.append(await handoff.take())
            except trio.EndOfChannel:
                break
    assert got == list(range(500))
