"""The one event counter of a run or session, its sink, and the journal it waits on.

``Emitter`` stamps every event's ``sequence`` and hands it to the consumer,
after the ``Journal`` (the session's ledger) has made the records the event
reports as durable as its policy asks. Events for what is already in the
transcript are "owed" when cancellation interrupts them, and delivered just
before the last event, so the stream and the transcript always agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, final

import trio

from .._settings import ModelSettings
from ..messages._ir import Message, ToolCall
from ..model import Usage
from ._handoff import Handoff

if TYPE_CHECKING:
    from ..events import ApprovalDecision

__all__ = ["Emitter", "Journal"]


@final
class Emitter:
    """The one event counter of a run or session, and its sink.

    ``next`` is the sequence number the next event must carry; it moves on
    only once the event is delivered (a send cancelled by trio delivers
    nothing), so sequences stay contiguous whatever is cancelled. With no
    channel (``wait()`` without ``async with``) events are counted and dropped.
    """

    __slots__ = ("_journal", "_owed", "_send", "next", "silent")

    def __init__(
        self,
        send: Handoff[Any] | None,
        start: int = 0,
        journal: Journal | None = None,
    ) -> None:
        self._send = send
        self._owed: tuple[Callable[[int], Any], ...] = ()  # a tuple: nothing until owed
        self._journal = journal
        self.next = start
        # No one receives the events and no journal waits on them (``wait()`` without
        # ``async with``): an event is counted (``skip``), not made. Kept as the sink
        # changes: read once or more a step, with no property call.
        self.silent = send is None and journal is None

    async def __call__(self, event: Any, pause: bool = True) -> None:
        """Deliver ``event`` (a cancellation point). ``pause=False`` (streamed chunks):
        when the consumer was waiting, the run goes on without yielding to it first:
        it yields at its next schedule point (reading the model's stream, or the next
        event's hand-over, which parks until the consumer has taken this one), so it
        never runs more than one event ahead, and a ``cancel()`` after this event
        still stops the next one (each hand-over checks for it first)."""
        if self._journal is not None:
            # Records are written before the event they match can be observed.
            await self._journal.before_event(self.next)
        send = self._send
        if send is not None:
            try:
                await send.put(event, pause)  # a cancelled hand-over delivers nothing
            except trio.BrokenResourceError:
                self._send = None  # the consumer left; the run is being cancelled
                self.silent = self._journal is None
        self.next += 1

    def skip(self) -> None:
        """Count an event a silent emitter would drop, without making it."""
        self.next += 1

    def attach(self, journal: Journal | None) -> None:
        """Wait on ``journal`` from the next event on (a session's ledger made after
        its turn's emitter: on the session's first use)."""
        self._journal = journal
        self.silent = self._send is None and journal is None

    @property
    def owed(self) -> int:
        """Events owed: they will be delivered before the last one."""
        return len(self._owed)

    def owe(self, makers: Sequence[Callable[[int], Any]]) -> None:
        """Queue events to deliver just before the last one (for paths that cannot
        await, such as a ``finally`` under cancellation)."""
        self._owed += tuple(makers)

    async def announce(self, makers: Sequence[Callable[[int], Any]]) -> None:
        """Deliver events that report what is already in the transcript.

        If cancellation interrupts them, the undelivered ones are owed and
        ``finish`` delivers them just before the last event: the stream and
        the transcript always agree.
        """
        if self.silent:  # counted only
            self.next += len(makers)
            return
        for index, make in enumerate(makers):
            try:
                await self(make(self.next))
            except trio.Cancelled:
                self._owed += tuple(makers[index:])
                raise

    async def finish(self, make_last: Callable[[int], Any]) -> None:
        """Deliver owed events, then the last one; shielded, as the outcome is decided."""
        with trio.CancelScope(shield=True):
            owed, self._owed = self._owed, ()
            for make in owed:
                await self(make(self.next))
            await self(make_last(self.next))


class Journal(Protocol):
    """Where a session's records go (``trio_agent.ledger.Ledger``); every method but
    ``before_event`` and ``barrier`` writes at once, without awaiting."""

    def message(
        self,
        message: Message,
        code: str | None = None,
        usage: Usage | None = None,
        model: str = "",
    ) -> None:
        """A message joined the transcript; an answer of a ``FallbackModel`` names
        the ``model`` that gave it (a ``model_label``)."""
        ...

    def compacted(self, messages: tuple[Message, ...]) -> None: ...
    def step_started(self, request_id: str, settings: ModelSettings | None = None) -> None: ...
    def step_ended(self, request_id: str, stop_reason: str) -> None: ...
    def tool_call(self, call: ToolCall, effect: str = "once") -> None:
        """``call`` is about to be dispatched; ``effect`` is its tool's (a call a
        resume runs again is recorded as such by the ledger, which knows it)."""
        ...

    def tool_skipped(self, call: ToolCall) -> None: ...
    def tool_cancelled(self, call: ToolCall) -> None: ...
    def tool_failed(self, call: ToolCall, error: str) -> None: ...
    def output_accepted(self, request_id: str, output: Any) -> None:
        """The turn's typed answer, given by step ``request_id``, was accepted
        (after that step's ``step_ended``, before the turn ends)."""
        ...

    def approval_requested(self, call: ToolCall) -> None:
        """``call`` is held for a person's approval: written in the open step of
        the open turn, after the assistant message that makes the call."""
        ...

    def approval_decided(self, decision: ApprovalDecision) -> None:
        """A decision on a held call (usually between turns, when no turn is
        open): once per call, before its result."""
        ...

    def attempt_failed(
        self,
        request_id: str,
        attempt: int,
        error: str,
        retry_in: float | None,
        usage: Usage | None = None,
        model: str = "",
    ) -> None: ...
    async def before_event(self, sequence: int) -> None: ...
    async def barrier(self, point: Literal["event", "step", "turn"]) -> None: ...
