"""The shell every run object shares: a task in a nursery, a lockstep event
hand-over, a cancel scope, and ``async with`` / ``async for`` / ``wait()``.

The run and its consumer move in lockstep: each event is handed over before the
run goes on (``Handoff``, unbuffered: a buffer measured no faster, trio's schedule
points dominate either way), so a consumer that calls ``cancel()`` after event k
sees the last event next (save events owed for what is already in the
transcript). A streamed chunk is handed over without the run yielding to its
consumer after it (``Emitter``'s ``pause``), and an event waiting to be taken is
taken without the consumer yielding: the two meet once for every two chunks."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Final, Generic, Self, TypeVar

import trio

from ._emit import Emitter
from ._handoff import Handoff

R = TypeVar("R")
E = TypeVar("E")

_NEW, _OPEN, _CLOSED, _INLINE = "new", "open", "closed", "inline"

TRIO_ONLY: Final = (
    "trio-agent runs on trio; call it from trio.run(...) (asyncio is not supported; "
    "see the docs' why-trio page)"
)


def require_trio() -> None:
    """``RuntimeError`` saying that trio-agent runs on trio, unless called inside
    ``trio.run`` (from ``asyncio.run``, say, trio's own error would surface deep
    inside the first event, as "must be called from async context"). A lookup
    of trio's current task: nothing on the hot path."""
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        raise RuntimeError(TRIO_ONLY) from None


class EventRun(Generic[E, R]):
    """Base of ``AgentRun`` and ``TurnRun``; subclasses implement ``_drive``.

    ``_drive(emit, host)`` runs to the end in the current task, emits every
    event and calls ``_finish(result, make_last, emit)``. ``host`` is the run's
    own nursery under ``async with`` (tool calls that ignore cancellation may
    outlive their batch there), None when the run is awaited inline.
    """

    _task_name = "trio_agent.run"

    def __init__(self, scope: trio.CancelScope | None) -> None:
        # None only for a run no caller holds (``Agent.prompt``): nothing can cancel
        # it but the caller's own scopes, so it skips the cost of a scope of its own.
        self._scope = scope
        self._phase = _NEW
        self._result: R | None = None
        self._receive: Handoff[E] | None = None
        self._nursery_manager: Any = None

    # -- to implement
    async def _drive(
        self, emit: Emitter, host: trio.Nursery | None
    ) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _emitter(self, send: Handoff[E] | None) -> Emitter:
        return Emitter(send)

    def _on_enter(self) -> None:
        """Called as ``async with`` enters, before the run's task starts (it may
        raise to refuse the entry); nothing by default."""

    # -- shared
    @property
    def _never_started(self) -> bool:
        """Neither entered nor awaited yet (a run made and perhaps dropped)."""
        return self._phase == _NEW

    @property
    def result(self) -> R | None:
        """The result once the run has finished, else None."""
        return self._result

    def cancel(self) -> None:
        """Cancel the run (its cancel scope); safe at any time, also before it starts."""
        if self._scope is not None:
            self._scope.cancel()

    async def _finish(self, result: R, make_last: Any, emit: Emitter) -> None:
        self._result = result
        await emit.finish(make_last)

    async def _drive_and_close(self, send: Handoff[E], nursery: trio.Nursery) -> None:
        try:
            await self._drive(self._emitter(send), nursery)
        finally:
            send.close_sending()
            # as closing trio's channel does: the consumer takes the end before this
            # task's own end (an error) cancels it
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def __aenter__(self) -> Self:
        if self._phase != _NEW:
            raise RuntimeError("a run can be entered (or awaited) only once")
        require_trio()
        self._phase = _OPEN
        self._on_enter()
        send = self._receive = Handoff[E]()
        self._nursery_manager = trio.open_nursery()
        nursery = await self._nursery_manager.__aenter__()
        nursery.start_soon(self._drive_and_close, send, nursery, name=self._task_name)
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        """Leaving early cancels the run; waits for it to finish either way. Never
        swallows an exception (typed ``None``, so checkers know code after the block runs
        only when the block did)."""
        self._phase = _CLOSED
        if self._result is None:
            self.cancel()
        assert self._receive is not None
        self._receive.close_receiving()
        await exit_nursery(self._nursery_manager, exc)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> E:
        """The next event (a cancellation point). An event already handed over, or
        one the run waits to hand over, is taken without yielding first (the run
        then goes on at the next schedule point): the run and its consumer meet
        once for every two events rather than for every one."""
        receive = self._receive
        if self._phase != _OPEN or receive is None:
            raise RuntimeError("iterate a run inside `async with run:`")
        try:
            return await receive.take()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    def drive_inline(self) -> Coroutine[Any, Any, None]:
        """The whole run in the awaiting task, with no event channel:
        ``await run.drive_inline()``, then ``run.result``. A plain method returning
        the run's own coroutine, so the caller awaits it with no frame between
        (``Agent.prompt`` keeps one frame per suspended turn). For a run not yet
        entered; ``wait()`` is the way for everyone else (``RuntimeError`` for a run
        entered or driven already: the same run twice at once)."""
        if self._phase != _NEW:
            raise RuntimeError("a run can be entered (or awaited) only once")
        require_trio()
        self._phase = _INLINE
        return self._drive(self._emitter(None), None)

    async def wait(self) -> R:
        """Return the result once the run has finished.

        Inside ``async with`` it drains the remaining events. Without it, it
        runs the whole loop in the calling task with no event channel (the
        fastest way to get a result). Cancellation of the caller cancels the run.
        """
        if self._phase == _NEW:
            await self.drive_inline()
        elif self._phase == _OPEN:
            async for _ in self:
                pass
        if self._result is None:
            raise RuntimeError("the run is already being awaited elsewhere")
        return self._result


def cancelled_from_outside(exc: BaseException) -> bool:
    """Whether ``exc`` (bare or grouped by a nursery) carries trio cancellation."""
    if isinstance(exc, trio.Cancelled):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.split(trio.Cancelled)[0] is not None


async def exit_nursery(manager: Any, exc: BaseException | None) -> None:
    """Leave a nursery opened by hand without wrapping the body's own exception.

    The body's exception (``exc``) goes through untouched; a lone exception of
    the nursery's tasks is unwrapped; a body exception and a task failure are
    raised together rather than one being lost. Only groups of ``Cancelled``
    are dropped while the body raises: trio cancellation is level-triggered,
    so the cancelled scope raises again at the caller's next checkpoint.
    """
    try:
        await manager.__aexit__(None, None, None)
    except BaseExceptionGroup as group:
        _, rest = group.split(trio.Cancelled)
        if exc is not None:
            if rest is None:
                return  # the body's own exception unwinds
            raise BaseExceptionGroup(
                "the body of the block and its tasks both raised", [exc, *rest.exceptions]
            ) from None
        if len(group.exceptions) == 1 and not isinstance(group.exceptions[0], BaseExceptionGroup):
            raise group.exceptions[0] from None
        raise
