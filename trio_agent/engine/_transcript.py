"""The ``Conversation`` a run or session owns: its transcript, checked
incrementally as it grows by the rules of ``messages`` (the ``Linker``), each
message recorded in the journal the moment it joins.

Its snapshots (each request's transcript, each turn's result) are
``Transcript`` views of its own list, made in constant time: the list is only
appended to past the longest view handed out, and a change before that (a
tool result placed among results a view already holds) first moves the
conversation to a copy, leaving the views their list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, final

import attrs
import trio

from ..messages._ir import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    TranscriptError,
)
from ..messages._rules import Linker, checked_message, snapshot
from ..messages._view import Transcript, Window

if TYPE_CHECKING:
    from ..model import Usage
    from ._emit import Journal

__all__ = ["Conversation"]


def _call_positions(message: Message | None) -> dict[str, int]:
    """Call id -> position among the calls of ``message`` (an assistant message)."""
    if type(message) is not AssistantMessage:
        return {}
    content = message.content
    if len(content) == 1:  # most messages: one call, or one text
        return {content[0].id: 0} if type(content[0]) is ToolCall else {}
    return {b.id: i for i, b in enumerate(content) if type(b) is ToolCall}


@final
@attrs.define(eq=False)
class Conversation:
    """The transcript a run or session owns, checked incrementally as it grows.

    ``requests`` counts the model requests opened so far; request ``n`` is
    ``request-{n:03d}``. With a ``journal``, every message is recorded the
    moment it joins the transcript.
    """

    messages: list[Message]
    linker: Linker
    requests: int = 0
    journal: Journal | None = None
    # Tool results join the transcript in the order of their calls, whatever order
    # they come in (a parallel batch): each is placed by its call's position.
    _positions: dict[str, int] = attrs.field(factory=dict, alias="_positions")
    _batch_start: int = attrs.field(default=0, alias="_batch_start")
    # How many of ``messages`` a snapshot holds: those positions never change again.
    _shared: int = attrs.field(default=0, alias="_shared")

    @classmethod
    def from_messages(cls, messages: Sequence[object], requests: int = 0) -> Conversation:
        """Check and copy ``messages``; raises ``TranscriptError``."""
        checked, linker = snapshot(messages)
        return cls(list(checked), linker, requests)

    @classmethod
    def restored(
        cls, messages: Sequence[object], requests: int = 0, *, trusted: bool = False
    ) -> Conversation:
        """Check and copy ``messages``, a transcript whose last assistant message may
        still have calls without a result (a snapshot's, taken between turns or in
        one); raises ``TranscriptError``. One pass, as ``from_messages`` checks: the
        same rules as appending each message, without an append's work per message.
        ``trusted``: messages whose blocks a live transcript checked before (a
        snapshot whose bytes are as written): their links and ids are checked, their
        blocks are not, and they are kept as they are."""
        checked, linker = snapshot(messages, answered=False, blocks=not trusted)
        return cls(list(checked), linker, requests)

    def __attrs_post_init__(self) -> None:
        self._find_batch()

    def _find_batch(self) -> None:
        messages = self.messages
        start = len(messages)
        while start > 0 and type(messages[start - 1]) is ToolResultMessage:
            start -= 1
        self._batch_start = start
        self._positions = _call_positions(messages[start - 1] if start > 0 else None)

    @trio.lowlevel.enable_ki_protection  # in the transcript and in the journal, or in neither
    def append(
        self,
        message: Message,
        code: str | None = None,
        usage: Usage | None = None,
        model: str = "",
    ) -> None:
        """Add a message (recorded in the journal at once, with the ``usage`` of the
        response it came from, and the ``model`` that gave it when it is one of a
        ``FallbackModel``'s); a tool result goes in its call's place among the
        results of its batch."""
        self.linker.add(message)
        messages = self.messages
        if type(message) is ToolResultMessage:
            positions = self._positions
            rank = positions.get(message.tool_call_id, 0)
            at = len(messages)
            while at > self._batch_start and (
                positions.get(messages[at - 1].tool_call_id, 0) > rank  # type: ignore[union-attr]
            ):
                at -= 1
            if at < self._shared:  # a view holds this place: leave it its list
                messages = self.messages = messages.copy()
                self._shared = 0
            messages.insert(at, message)
        else:
            messages.append(message)
            self._batch_start = len(messages)
            self._positions = _call_positions(message)
        if self.journal is not None:
            if model:
                self.journal.message(message, code, usage, model)
            else:
                self.journal.message(message, code, usage)

    def snapshot(self) -> Transcript:
        """The transcript as it is now, frozen, in constant time."""
        length = len(self.messages)
        self._shared = length
        return Transcript(Window(self.messages, length))

    def unanswered_calls(self) -> list[ToolCall]:
        """Calls of the last assistant message still without a result."""
        return list(self.linker.open_calls.values())

    @trio.lowlevel.enable_ki_protection
    def replace(self, messages: Sequence[object]) -> None:
        """Replace the whole transcript (compaction), checked in full: ``TranscriptError``."""
        checked, linker = snapshot(messages)
        self.messages = list(checked)
        self._shared = 0
        self.linker = linker
        self._find_batch()
        if self.journal is not None:
            self.journal.compacted(checked)

    def check_new(self, message: object) -> Message:
        """Check a message about to be queued: its fields, and an id not yet used."""
        checked = checked_message(message, len(self.messages))
        if checked.id in self.linker.message_ids:
            raise TranscriptError("DUPLICATE_MESSAGE_ID", f"message id {checked.id!r} is used")
        return checked
