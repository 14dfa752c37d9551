"""A run's hand-over of events to its consumer (``Handoff``): trio's unbuffered
memory channel cut down to what a run needs, without its per-call layers.

An event goes from the run's task to a consumer that waits for it, or the run
parks with it until a consumer takes it: nothing is buffered, so the run is
never more than one event ahead. Each side is closed once: the run's side when
the run ends (a consumer then gets ``trio.EndOfChannel``), the consumer's when
it leaves (the run then gets ``trio.BrokenResourceError``, and a run parked
with an event is woken with it).

Cancellation: ``put`` and ``take`` are cancellation points. A cancelled ``put``
delivers nothing; a cancelled ``take`` takes nothing: a parked side is only
ever woken with its event handed over, or not at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar, final

import trio
from outcome import Error, Value
from trio.lowlevel import (
    Abort,
    RaiseCancelT,
    Task,
    cancel_shielded_checkpoint,
    checkpoint_if_cancelled,
    current_task,
    reschedule,
    wait_task_rescheduled,
)

__all__ = ["Handoff"]

T = TypeVar("T")
V = TypeVar("V")


def _parked(waiting: dict[Task, V], entry: V) -> Callable[[RaiseCancelT], Abort]:
    """Park this task in ``waiting`` (with ``entry``: its event, for a run) until a
    ``reschedule``; the abort to wait with takes it out again when it is cancelled.
    Not a coroutine: a park costs no frame of its own."""
    task = current_task()
    waiting[task] = entry

    def abort(_: RaiseCancelT) -> Abort:
        del waiting[task]
        return Abort.SUCCEEDED

    return abort


@final
class Handoff(Generic[T]):
    """One event at a time from a run to its consumer; see the module's docstring."""

    __slots__ = ("_receivers", "_receiving_closed", "_senders", "_sending_closed")

    def __init__(self) -> None:
        # tasks parked in ``put`` with their event, and in ``take``, in arrival order
        self._senders: dict[Task, T] = {}
        self._receivers: dict[Task, None] = {}
        self._sending_closed = False
        self._receiving_closed = False

    async def put(self, item: T, pause: bool = True) -> None:
        """Hand ``item`` over: at once to a consumer that waits (then yield to it,
        unless not ``pause``), else park until one takes it. ``BrokenResourceError``
        once the consumer's side is closed, ``ClosedResourceError`` once the run's
        own is (nothing is delivered either way)."""
        await checkpoint_if_cancelled()
        if self._receiving_closed:
            raise trio.BrokenResourceError("the consumer of the events has left")
        if self._sending_closed:
            raise trio.ClosedResourceError("the run's side was closed: its events have ended")
        receivers = self._receivers
        if receivers:
            task = next(iter(receivers))
            del receivers[task]
            reschedule(task, Value(item))
            if pause:
                await cancel_shielded_checkpoint()
            return
        await wait_task_rescheduled(_parked(self._senders, item))

    async def take(self) -> T:
        """The next event: one a run is parked with, at once (no yield: the run
        goes on at its next schedule point), else the one handed over next.
        ``EndOfChannel`` once the run's side is closed and nothing is parked."""
        await checkpoint_if_cancelled()
        senders = self._senders
        if senders:
            task = next(iter(senders))
            item = senders.pop(task)
            reschedule(task)
            return item
        if self._sending_closed:
            raise trio.EndOfChannel
        if self._receiving_closed:
            raise trio.ClosedResourceError("the events' side was closed")
        taken: T = await wait_task_rescheduled(_parked(self._receivers, None))
        return taken

    def close_sending(self) -> None:
        """The run is done: consumers waiting, and any that come, get ``EndOfChannel``."""
        self._sending_closed = True
        waiting, self._receivers = self._receivers, {}
        for task in waiting:
            reschedule(task, Error(trio.EndOfChannel()))

    def close_receiving(self) -> None:
        """The consumer left: a run parked with an event, and every later ``put``,
        gets ``BrokenResourceError``."""
        self._receiving_closed = True
        parked, self._senders = self._senders, {}
        for task in parked:
            reschedule(task, Error(trio.BrokenResourceError("the consumer of the events has left")))
        waiting, self._receivers = self._receivers, {}
        for task in waiting:
            reschedule(task, Error(trio.ClosedResourceError("the events' side was closed")))
